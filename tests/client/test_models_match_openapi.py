"""engram_client's models against the service's /openapi.json: every field a client
model requires is one the endpoint's response schema declares as always there, with
a compatible type, so the client's third description of an answer cannot drift
from the service's."""

from __future__ import annotations

import inspect
import re
import types
import typing
from typing import Any, Union

from pydantic import BaseModel, SecretStr

from engram_client import _calls
from engram_client import models as m
from services.query.app import create_app
from services.query.settings import QuerySettings

_JSON_TYPES = {str: {"string"}, int: {"integer"}, float: {"number", "integer"}, bool: {"boolean"}}


def _calls_made() -> list[_calls.Call[Any]]:
    """One Call per builder in engram_client._calls, placeholders for its arguments."""
    out = []
    for name, fn in vars(_calls).items():
        if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != _calls.__name__:
            continue
        hints = typing.get_type_hints(fn)
        if typing.get_origin(hints.get("return")) is not _calls.Call:
            continue
        args = {
            p.name: "x"
            for p in inspect.signature(fn).parameters.values()
            if p.default is inspect.Parameter.empty
        }
        out.append(fn(**args))
    return out


def _operation(spec: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    for template, operations in spec["paths"].items():
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        if re.match(pattern, path) and method.lower() in operations:
            return operations[method.lower()]  # type: ignore[no-any-return]
    raise AssertionError(f"{method} {path} is not in /openapi.json")


def _resolve(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _options(schema: dict[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    schema = _resolve(schema, spec)
    if "anyOf" in schema:
        return [o for s in schema["anyOf"] for o in _options(s, spec)]
    return [schema]


def _check(annotation: Any, schema: dict[str, Any], spec: dict[str, Any], where: str) -> list[str]:
    """Problems with reading a value of ``schema`` as ``annotation``."""
    if annotation is Any:
        return []
    origin = typing.get_origin(annotation)
    options = _options(schema, spec)
    if not options or any(o == {} for o in options):  # the server says "anything"
        return []
    kinds = {o.get("type") for o in options}
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        non_null = {"type": "null"} not in options or type(None) in typing.get_args(annotation)
        problems = [] if non_null else [f"{where}: may be null, the client does not allow it"]
        wanted = {"anyOf": [o for o in options if o != {"type": "null"}]}
        return problems + _check(args[0] if len(args) == 1 else Any, wanted, spec, where)
    if "null" in kinds:
        return [f"{where}: may be null, the client does not allow it"]
    if origin is list:
        if kinds != {"array"}:
            return [f"{where}: the server sends {kinds}, the client reads a list"]
        (item,) = typing.get_args(annotation)
        return _check(item, options[0].get("items", {}), spec, where + "[]")
    if origin is dict or annotation is dict:
        return [] if kinds <= {"object"} else [f"{where}: {kinds} is not an object"]
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        if kinds - {"object", None}:
            return [f"{where}: {kinds} is not an object"]
        return _model(annotation, options[0], spec, where)
    allowed = _JSON_TYPES.get(annotation)
    if allowed is not None and not kinds <= allowed:
        return [f"{where}: the server sends {kinds}, the client reads {annotation.__name__}"]
    return []


def _model(model: type[BaseModel], schema: dict[str, Any], spec: dict[str, Any], where: str):
    schema = _resolve(schema, spec)
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    problems = []
    for name, field in model.model_fields.items():
        here = f"{where}.{name}"
        if name not in props:
            if schema.get("additionalProperties") is True or not props:
                continue  # an open answer: the field may be among the extra ones
            if not field.is_required():
                continue  # a model shared by several answers: this one leaves it out
            problems.append(f"{here}: not in the response schema")
            continue
        if field.is_required() and name not in required:
            problems.append(f"{here}: the client requires it, the server may leave it out")
        problems += _check(field.annotation, props[name], spec, here)
    return problems


def test_client_models_read_what_openapi_describes():
    # building the app connects to nothing: placeholder addresses are enough
    settings = QuerySettings(
        database_url=SecretStr("postgresql://engram@127.0.0.1:1/engram"),
        redis_url=SecretStr("redis://127.0.0.1:1/0"),
    )
    spec = create_app(settings).openapi()
    calls = _calls_made()
    assert len(calls) >= 20
    problems = []
    for call in calls:
        op = _operation(spec, call.method, call.path)
        ok = [r for code, r in op["responses"].items() if code.startswith("2")]
        assert ok, f"{call.method} {call.path}: no 2xx answer"
        content = ok[0].get("content", {}).get("application/json")
        if content is None:
            continue  # an empty answer (204)
        problems += _model(call.model, content["schema"], spec, f"{call.method} {call.path}")
    assert problems == []


def test_the_check_sees_a_drifted_model():
    """A client model asking for a field the server never sends is caught."""

    class Drifted(m.Model):
        mode: str
        results: list[m.MemoryHit]
        invented: int

    spec = {
        "components": {"schemas": {}},
        "paths": {},
    }
    schema = {
        "type": "object",
        "properties": {
            "mode": {"type": "string"},
            "results": {"type": "array", "items": {"type": "object", "properties": {}}},
        },
        "required": ["mode", "results"],
    }
    assert _model(Drifted, schema, spec, "x") == ["x.invented: not in the response schema"]
    schema["properties"]["mode"] = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert "x.mode: may be null, the client does not allow it" in _model(Drifted, schema, spec, "x")
