"""remember / recall as tool calls: the seed's schemas and the executor."""

import pytest

from services.query.tools.people import PEOPLE_TOOLS, call_people_tool
from shared.errors import InvalidRequest, NotFound
from shared.memory.writer import Chat
from tests.people.conftest import make_app
from tests.support import running


def test_schemas_are_the_seeds():
    remember, recall = PEOPLE_TOOLS
    assert remember["name"] == "remember" and recall["name"] == "recall"
    props = remember["parameters"]["properties"]
    assert set(props) == {"content", "facts", "subjects", "expires_in_days", "shared"}
    assert props["facts"]["items"]["required"] == ["content"]
    assert recall["parameters"]["required"] == ["query"]
    assert set(recall["parameters"]["properties"]) == {"query", "about"}


@pytest.mark.slow
async def test_tool_calls_play_the_wife_scenario(make_settings, pool, user_id, local_model):
    app = make_app(make_settings, local_model)
    async with running(app):
        rt = app.state.runtime
        kw = dict(
            pool=rt.pool,
            publisher=rt.publisher,
            user_id=user_id,
            embedder=local_model,
            embedding_dim=384,
        )
        await pool.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", user_id)
        await call_people_tool(
            "remember",
            {
                "facts": [
                    {"content": "My wife's name is Sarah", "subjects": ["my wife"]},
                    {"content": "She likes Italian food", "subjects": ["my wife"]},
                ]
            },
            **kw,
        )
        out = await call_people_tool(
            "recall", {"query": "what does my wife like?", "about": "my wife"}, **kw
        )
        assert out["results"][0]["content"] == "She likes Italian food"
        assert out["results"][0]["subjects"][0]["name"] == "Sarah"

        with pytest.raises(NotFound, match="chats you are in"):  # not a member (yet)
            await call_people_tool(
                "remember", {"content": "x", "shared": True}, **kw, chat=Chat("slack", "C1")
            )
        await pool.execute(
            "INSERT INTO episodes (id, user_id, provider, chat_id, started_at, last_active_at) "
            "VALUES (gen_random_uuid(), $1, 'slack', 'C1', now(), now())",
            user_id,
        )
        shared = await call_people_tool(
            "remember",
            {"content": "Deploys freeze on Fridays", "shared": True},
            **kw,
            chat=Chat("slack", "C1"),
        )
        assert shared["memories"][0]["scope"] == "chat"

        with pytest.raises(InvalidRequest, match="unknown argument"):
            await call_people_tool("recall", {"query": "x", "limit": 3}, **kw)
        with pytest.raises(InvalidRequest, match="shared fact needs the chat"):
            await call_people_tool("remember", {"content": "x", "shared": True}, **kw)
        with pytest.raises(InvalidRequest, match="invalid arguments for recall"):
            await call_people_tool("recall", {"about": "Sarah"}, **kw)
        with pytest.raises(InvalidRequest, match="unknown tool"):
            await call_people_tool("forget_everything", {}, **kw)


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
