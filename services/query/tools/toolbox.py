"""The tool table: which tools exist.

Tools: ``memory`` (Nova 3.2: search, add, get, archive, list_themes),
``memory_facts`` (Navi: save, search, forget, list), ``remember`` and ``recall``
(Ash), ``context`` and ``episode_recall``. :data:`TOOLBOX` holds each one's
:class:`~services.query.tools.registry.Tool` (spec, request models, handlers); a
new tool is a row here. Its listing (OpenAI and Anthropic formats) and its
dispatch (a call for one user, its JSON result or a :class:`ToolError` written
for the model) are :class:`~services.query.tools.registry.Toolbox`'s.
``create_app`` puts the table on ``app.state.tools``: ``POST /v1/tools/call``,
``GET /v1/tools`` and the MCP server read it there.
"""

from __future__ import annotations

from services.query.tools.context import CONTEXT_TOOL, EPISODE_RECALL_TOOL
from services.query.tools.memory import FACTS_TOOL, MEMORY_TOOL
from services.query.tools.people import RECALL_TOOL, REMEMBER_TOOL
from services.query.tools.registry import Toolbox

TOOLBOX = Toolbox(
    [
        MEMORY_TOOL,
        FACTS_TOOL,
        REMEMBER_TOOL,
        RECALL_TOOL,
        CONTEXT_TOOL,
        EPISODE_RECALL_TOOL,
    ]
)
