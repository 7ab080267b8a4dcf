"""LLM tool schemas built from the request models, so the text cannot drift from the code.

A tool is either one request model (``remember``, ``recall``) or a set of
operations chosen by a selector argument (``memory``'s ``operation``,
``memory_facts``'s ``action``), each operation validated by its own model.
:func:`neutral` renders ``{name, description, parameters}`` from those models'
JSON schemas (references inlined, ``Optional`` collapsed); :func:`openai` and
:func:`anthropic` wrap it in each provider's function-calling format. The
HTTP routes and the tool executor validate with the same models.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True)
class Operation:
    name: str
    model: type[BaseModel]
    summary: str
    """One line for the tool description: what the operation does."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool: one model, or operations picked by ``selector``."""

    name: str
    description: str
    model: type[BaseModel] | None = None
    only: Collection[str] | None = None
    """With ``model``: the fields the model may set (the rest come from the call's context)."""
    selector: str | None = None
    operations: Sequence[Operation] = field(default_factory=tuple)

    def operation(self, name: str | None) -> Operation | None:
        return next((o for o in self.operations if o.name == name), None)


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """The schema with ``$ref`` inlined, titles dropped and ``X | None`` collapsed to X."""
    if isinstance(node, list):
        return [_inline(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return _inline({**target, **rest}, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "$defs") or (key == "default" and value is None):
            continue
        if key == "properties":
            out[key] = {name: _inline(v, defs) for name, v in value.items()}
        else:
            out[key] = _inline(value, defs)
    options = out.get("anyOf")
    if isinstance(options, list):
        kept = [o for o in options if o != {"type": "null"}]
        if len(kept) == 1:
            del out["anyOf"]
            out = {**kept[0], **out}
    return out


def model_parameters(model: type[BaseModel], only: Collection[str] | None = None) -> dict[str, Any]:
    """A model's JSON schema as function parameters (optionally only some fields)."""
    schema = model.model_json_schema()
    clean: dict[str, Any] = _inline(schema, schema.get("$defs", {}))
    props: dict[str, Any] = clean.get("properties", {})
    if only is not None:
        props = {k: v for k, v in props.items() if k in only}
    required = [r for r in clean.get("required", []) if r in props]
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out


_BOUNDS = ("default", "minimum", "maximum", "minLength", "maxLength", "maxItems")


def _operations_parameters(spec: ToolSpec) -> dict[str, Any]:
    """Every operation's arguments in one object; each description names the operations
    that take the argument (and whether it is required there)."""
    assert spec.selector is not None
    props: dict[str, Any] = {
        spec.selector: {"type": "string", "enum": [o.name for o in spec.operations]}
    }
    notes: dict[str, list[str]] = {}
    for op in spec.operations:
        params = model_parameters(op.model)
        required = set(params.get("required", []))
        for name, schema in params["properties"].items():
            schema = dict(schema)
            text = schema.pop("description", None)
            label = op.name + (" (required)" if name in required else "")
            notes.setdefault(name, []).append(f"{label}: {text}" if text else label)
            if name not in props:
                props[name] = schema
            elif props[name] != schema:  # differs by operation: the model checks the bounds
                props[name] = {k: v for k, v in props[name].items() if k not in _BOUNDS}
    for name, parts in notes.items():
        props[name] = {**props[name], "description": "; ".join(parts)}
    return {"type": "object", "properties": props, "required": [spec.selector]}


def neutral(spec: ToolSpec) -> dict[str, Any]:
    """``{name, description, parameters}``: the form both providers' formats wrap."""
    if spec.model is not None:
        return {
            "name": spec.name,
            "description": spec.description,
            "parameters": model_parameters(spec.model, spec.only),
        }
    lines = [spec.description] + [f"{spec.selector}={o.name}: {o.summary}" for o in spec.operations]
    return {
        "name": spec.name,
        "description": " ".join(lines),
        "parameters": _operations_parameters(spec),
    }


def openai(tool: dict[str, Any]) -> dict[str, Any]:
    """A neutral tool (see :func:`neutral`) as an OpenAI function."""
    return {"type": "function", "function": tool}


def anthropic(tool: dict[str, Any]) -> dict[str, Any]:
    """A neutral tool (see :func:`neutral`) as an Anthropic tool."""
    return {
        "name": tool["name"],
        "description": tool["description"],
        "input_schema": tool["parameters"],
    }


def signature(spec: ToolSpec, operation: str, shown: Sequence[str]) -> str:
    """``memory.search(query, theme?, types?)``: the fields named must exist on the model
    (KeyError otherwise); ``?`` marks the optional ones."""
    op = spec.operation(operation)
    if op is None:
        raise KeyError(f"{spec.name} has no operation {operation!r}")
    fields = op.model.model_fields
    parts = []
    for name in shown:
        if name not in fields:
            raise KeyError(f"{spec.name}.{operation} has no argument {name!r}")
        parts.append(name if fields[name].is_required() else name + "?")
    return f"{spec.name}.{operation}({', '.join(parts)})"
