"""remember / recall as tool calls: the seed's schemas and the tool table's dispatch."""

import dataclasses

import pytest

from services.query.app import TOOLBOX
from services.query.tools.registry import ToolContext, ToolError
from shared.memory.writer import Chat
from tests.people.conftest import make_app
from tests.support import running


def test_schemas_are_the_seeds():
    by_name = {t["name"]: t for t in TOOLBOX.tools}
    remember, recall = by_name["remember"], by_name["recall"]
    assert remember["name"] == "remember" and recall["name"] == "recall"
    props = remember["parameters"]["properties"]
    assert set(props) == {"content", "facts", "subjects", "expires_in_days", "shared"}
    assert props["facts"]["items"]["required"] == ["content"]
    assert recall["parameters"]["required"] == ["query"]
    assert set(recall["parameters"]["properties"]) == {"query", "about", "as_of"}  # issue 27


@pytest.mark.slow
async def test_tool_calls_play_the_wife_scenario(make_settings, pool, user_id, local_model):
    app = make_app(make_settings, local_model)
    async with running(app):
        rt = app.state.runtime
        ctx = ToolContext(
            pool=rt.pool,
            publisher=rt.publisher,
            state=app.state.query,
            user_id=user_id,
            trigram=app.state.query.trigram,
            hint_cache=app.state.hint_cache,
        )
        in_chat = dataclasses.replace(ctx, chat=Chat("slack", "C1"))
        await pool.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", user_id)
        await TOOLBOX.call(
            ctx,
            "remember",
            {
                "facts": [
                    {"content": "My wife's name is Sarah", "subjects": ["my wife"]},
                    {"content": "She likes Italian food", "subjects": ["my wife"]},
                ]
            },
        )
        out = await TOOLBOX.call(
            ctx, "recall", {"query": "what does my wife like?", "about": "my wife"}
        )
        assert out["results"][0]["content"] == "She likes Italian food"
        assert out["results"][0]["subjects"][0]["name"] == "Sarah"

        with pytest.raises(ToolError, match="chats you are in"):  # not a member (yet)
            await TOOLBOX.call(in_chat, "remember", {"content": "x", "shared": True})
        await pool.execute(
            "INSERT INTO episodes (id, user_id, provider, chat_id, started_at, last_active_at) "
            "VALUES (gen_random_uuid(), $1, 'slack', 'C1', now(), now())",
            user_id,
        )
        shared = await TOOLBOX.call(
            in_chat, "remember", {"content": "Deploys freeze on Fridays", "shared": True}
        )
        assert shared["memories"][0]["scope"] == "chat"

        with pytest.raises(ToolError, match="unknown argument"):
            await TOOLBOX.call(ctx, "recall", {"query": "x", "limit": 3})
        with pytest.raises(ToolError, match="shared fact needs the chat"):
            await TOOLBOX.call(ctx, "remember", {"content": "x", "shared": True})
        with pytest.raises(ToolError, match="invalid arguments for recall"):
            await TOOLBOX.call(ctx, "recall", {"about": "Sarah"})
        with pytest.raises(ToolError, match="unknown tool"):
            await TOOLBOX.call(ctx, "forget_everything", {})


@pytest.mark.slow
async def test_remember_and_recall_run_through_the_tool_call_endpoint(semantic_api):
    api = semantic_api
    listed = (await api.get("/v1/tools")).json()
    assert {"remember", "recall"} <= {t["function"]["name"] for t in listed["openai"]}

    stored = await api.ok(
        "/v1/tools/call",
        {
            "name": "remember",
            "arguments": {
                "facts": [
                    {"content": "My wife's name is Sarah", "subjects": ["my wife"]},
                    {"content": "She likes Italian food", "subjects": ["my wife"]},
                ]
            },
        },
    )
    assert stored["is_error"] is False
    # An OpenAI-shaped call: arguments as a JSON string.
    out = await api.ok(
        "/v1/tools/call",
        {
            "function": {
                "name": "recall",
                "arguments": '{"query": "what does my wife like?", "about": "my wife"}',
            }
        },
    )
    assert out["is_error"] is False
    first = out["result"]["results"][0]
    assert first["content"] == "She likes Italian food"
    assert first["subjects"][0]["name"] == "Sarah"

    bad = await api.ok("/v1/tools/call", {"name": "recall", "arguments": {"about": "Sarah"}})
    assert bad["is_error"] is True and "invalid arguments for recall" in bad["error"]
