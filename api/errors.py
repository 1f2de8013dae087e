"""The one error type a user mistake turns into: it names where the mistake is."""

from __future__ import annotations

import json
from typing import Any


class InputError(ValueError):
    """Invalid user input. ``where`` names the object and ``field`` the path inside it."""

    def __init__(self, message: str, *, where: str = "", field: str = "") -> None:
        self.message = message
        self.where = where
        self.field = field
        super().__init__(self.describe())

    def describe(self) -> str:
        parts = [p for p in (self.where, self.field) if p]
        return f"{': '.join(parts)}: {self.message}" if parts else self.message


def loads_json(text: str | bytes) -> Any:
    """``json.loads`` for text a user wrote (an annotation, a file): a document nested too
    deeply for Python's parser is a ValueError like any other malformed JSON, not a
    RecursionError that escapes every ``except ValueError``."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("is nested too deeply") from None
