"""Every response is described in /openapi.json; tool schemas come from the request models."""

from __future__ import annotations

import re

import pytest

from services.query.app import TOOLBOX, create_app
from services.query.memory.requests import CONFIDENCE_BY_SOURCE
from services.query.settings import QuerySettings
from services.query.tools.memory import FACTS, GUIDANCE, MEMORY
from services.query.tools.specs import signature
from tests.query.helpers import auth
from tests.support import running


def _described(response: dict) -> bool:
    for ctype, content in response.get("content", {}).items():
        schema = content.get("schema", {})
        if "$ref" in schema:
            return True
        if ctype.startswith("text/") and schema.get("type") == "string":
            return True
        if ctype == "application/zip" and schema.get("format") == "binary":
            return True
    return False


async def test_every_operation_has_a_2xx_response_schema(make_settings):
    app = create_app(make_settings(QuerySettings))
    async with running(app) as client:
        spec = (await client.get("/openapi.json")).json()
    missing = []
    count = 0
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            count += 1
            ok = [c for c, r in op["responses"].items() if c.startswith("2") and _described(r)]
            if not ok:
                missing.append(f"{method.upper()} {path}")
    assert count >= 48
    assert missing == []


def test_tool_parameters_are_the_models_fields():
    tools = {t["function"]["name"]: t for t in TOOLBOX.schemas("openai")["openai"]}
    for spec in (MEMORY, FACTS):
        params = tools[spec.name]["function"]["parameters"]
        for op in spec.operations:
            assert set(op.model.model_fields) <= set(params["properties"]), op.name
        assert params["properties"][spec.selector]["enum"] == [o.name for o in spec.operations]
    anthropic = {t["name"]: t for t in TOOLBOX.schemas("anthropic")["anthropic"]}
    assert anthropic["memory"]["input_schema"] == tools["memory"]["function"]["parameters"]


def test_the_context_guidance_names_real_arguments():
    assert "memory.add(type, content, theme?)" in GUIDANCE.instructions
    assert "memory.get(item_id)" in GUIDANCE.instructions
    assert GUIDANCE.list_themes == "memory.list_themes()"
    with pytest.raises(KeyError):
        signature(MEMORY, "get", ["id"])


async def test_the_confidence_the_tool_text_promises_is_the_one_stored(
    make_settings, pool, user_id
):
    facts = {t["function"]["name"]: t for t in TOOLBOX.schemas("openai")["openai"]}["memory_facts"]
    text = facts["function"]["description"]
    promised = float(re.search(r"user_explicit ([\d.]+)", text).group(1))
    assert promised == CONFIDENCE_BY_SOURCE["user_explicit"]
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        r = await client.post(
            "/v1/tools/call",
            headers=h,
            json={
                "name": "memory_facts",
                "arguments": {
                    "action": "save",
                    "category": "home",
                    "key": "city",
                    "value": "Lyon",
                    "source": "user_explicit",
                },
            },
        )
    assert r.status_code == 200, r.text
    assert r.json()["result"]["confidence"] == promised
