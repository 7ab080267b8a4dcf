"""Who may read and write a chat's shared memories: its members (issue 17.3).

A user is a member of a chat (``provider`` + ``chat_id``) when they have a
session there: an episode of that chat stored for them, which every ingested
turn has. The one check every entry point calls (remember, recall, context,
tools, MCP): writes of shared memories into a chat need membership
(:func:`require_member`, else 404: a chat one is not in is answered the same
whether or not it exists); a reference to an episode must be to one's own
(:func:`require_own_episode`); reads get a chat's shared memories only as a
member (:func:`is_member`, passed to the search as ``member``).
"""

from __future__ import annotations

import uuid

from shared.db import Executor
from shared.errors import NotFound
from shared.memory.writer import Chat

IS_MEMBER = """
SELECT EXISTS (SELECT 1 FROM episodes WHERE user_id = $1 AND provider = $2 AND chat_id = $3)
"""


async def is_member(conn: Executor, user_id: str, chat: Chat | None) -> bool:
    """Whether ``user_id`` has a session in ``chat`` (and so sees its shared memories)."""
    if chat is None:
        return False
    return bool(await conn.fetchval(IS_MEMBER, user_id, chat.provider, chat.chat_id))


async def require_member(conn: Executor, user_id: str, chat: Chat) -> None:
    """Raise ``NotFound`` unless ``user_id`` is a member of ``chat``."""
    if not await is_member(conn, user_id, chat):
        raise NotFound(
            f"no chat {chat.provider}/{chat.chat_id} with a session of yours: "
            "shared memories go only to chats you are in"
        )


OWN_EPISODE = "SELECT EXISTS (SELECT 1 FROM episodes WHERE id = $1 AND user_id = $2)"


async def require_own_episode(conn: Executor, user_id: str, episode_id: uuid.UUID) -> None:
    """Raise ``NotFound`` unless the episode is ``user_id``'s: another user's episode is
    answered exactly like one that does not exist."""
    if not await conn.fetchval(OWN_EPISODE, episode_id, user_id):
        raise NotFound(f"no episode {episode_id}")
