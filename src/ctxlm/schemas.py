"""The JSON and TOML files a user can hand ctxlm, each checked on load against one JSON Schema.

One mechanism for every format (jsonschema, the reference implementation of JSON Schema): a schema per
format below, `check(data, FORMAT, path, fix)` raising one CtxlmError that names the file, the key and the
expected form. Numbers are finite (NaN and ±∞ are no numbers here), integers are integers (no 3.0, no
true), and the bounds of shared numbers come from `checks.RULES`, so a file allows what the option does.
"""
from __future__ import annotations

import math
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator

from .checks import INT64, RULES
from .errors import CtxlmError


def _number(checker, value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(checker, value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_TYPES = Draft202012Validator.TYPE_CHECKER.redefine_many({"number": _number, "integer": _integer})
Validator = jsonschema.validators.extend(Draft202012Validator, type_checker=_TYPES)


def rule(name: str) -> dict:
    """The schema of a number of `checks.RULES`, described in its words."""
    found = RULES[name]
    schema = {"type": "integer" if found.kind is int else "number", "description": found.describe()}
    low, high = found.allowed.low, found.allowed.high
    if low is not None:
        schema["exclusiveMinimum" if found.allowed.low_open else "minimum"] = low
    if high is not None:
        schema["exclusiveMaximum" if found.allowed.high_open else "maximum"] = high
    return schema


def integer(low: int = 0) -> dict:
    return {"type": "integer", "minimum": low, "maximum": INT64[1], "description": f"an integer ≥ {low}"}


def text(description: str = "a string", **more) -> dict:
    return {"type": "string", "description": description, **more}


def record(properties: dict, required: tuple = (), closed: bool = False, description: str = "a table of keys") -> dict:
    """An object with these keys (`closed`: no others)."""
    schema = {"type": "object", "properties": properties, "required": list(required), "description": description}
    if closed:
        schema["additionalProperties"] = False
    return schema


def nullable(schema: dict) -> dict:
    return {"anyOf": [{"type": "null"}, schema], "description": f"null or {schema['description']}"}


NUMBER = {"type": "number", "description": "a finite number"}
SHA256 = text("64 hexadecimal digits (a sha256)", pattern="^[0-9a-f]{64}$")


def _describe(schema: Any) -> str:
    if isinstance(schema, dict):
        if "description" in schema:
            return schema["description"]
        if "const" in schema:
            return repr(schema["const"])
        if "enum" in schema:
            return "one of " + ", ".join(repr(v) for v in schema["enum"])
    return "as the format says"


def _where(data: Any, path) -> str:
    """"best.lr", "row 'lstm'.source.test_ppl": a key path, rows named by their id where they have one."""
    words, node = [], data
    for step in path:
        if isinstance(step, int):
            item = node[step] if isinstance(node, list) and step < len(node) else None
            named = isinstance(item, dict) and isinstance(item.get("id"), str)
            words.append(f"{words.pop() if words else ''} {item['id']!r}" if named else
                         f"{words.pop() if words else ''}[{step + 1}]")
            node = item
        else:
            words.append(str(step))
            node = node.get(step) if isinstance(node, dict) else None
    return ".".join(words)


def problem(data: Any, schema: dict) -> str | None:
    """What is wrong with `data` under `schema`, in words ("key best.lr: must be ..., got ..."), or None."""
    error = jsonschema.exceptions.best_match(Validator(schema).iter_errors(data))
    if error is None:
        return None
    where = _where(data, error.absolute_path)
    if error.validator == "required":
        missing = next(k for k in error.validator_value if k not in error.instance)
        return f"{'key ' + where + ': ' if where else ''}missing key {missing!r}"
    if error.validator == "additionalProperties":
        known = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(known))
        return f"{'key ' + where + ': ' if where else ''}unknown key {extra[0]!r}; keys: {', '.join(known)}"
    shown = repr(error.instance)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{'key ' + where + ': ' if where else ''}must be {_describe(error.schema)}, got {shown}"


def check(data: Any, schema: dict, path, fix: str) -> Any:
    """`data` (read from `path`) if `schema` admits it, else CtxlmError("<path>: key ...: must be ..., got ...; <fix>")."""
    found = problem(data, schema)
    if found is not None:
        raise CtxlmError(f"{path}: {found}; {fix}")
    return data
