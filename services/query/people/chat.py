"""The chat a request is in: ``ChatIn`` (a provider and its chat id).

The people's requests (``RememberIn.chat``, ``RecallIn.chat``) and the context's
(``ContextIn.chat``) take it from here, a plain pydantic model that imports nothing
of the service: the context's request model stands on it alone, not on the
people's request models.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from shared.memory.writer import Chat


class ChatIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: Annotated[str, Field(min_length=1, max_length=100)]
    chat_id: Annotated[str, Field(min_length=1, max_length=200)]

    def chat(self) -> Chat:
        return Chat(self.provider, self.chat_id)
