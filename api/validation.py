"""Turn pydantic's validation errors into one InputError that names the object and field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import InputError

M = TypeVar("M", bound=BaseModel)


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def parse_model(model: type[M], data: Mapping[str, Any], where: str) -> M:
    """Validate ``data`` as ``model``; on failure raise InputError naming the first bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "missing":
            message = "is required"
        elif first["type"] == "literal_error":
            message = f"{first.get('input')!r}: {message}"
        more = exc.error_count() - 1
        if more:
            message += f" (and {more} more problem{'s' if more > 1 else ''})"
        raise InputError(message, where=where, field=_field_path(first["loc"])) from None


def join(path: str, field: str) -> str:
    """A field path below ``path`` ("" is the object itself)."""
    return f"{path}.{field}" if path else field


def object_name(obj: Mapping[str, Any]) -> str:
    """``Kind namespace/name`` for messages, tolerant of malformed objects."""
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else "object"
    raw_meta = obj.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    namespace = meta.get("namespace")
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
