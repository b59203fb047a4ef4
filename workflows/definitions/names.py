"""Which submitted names may be repeated in a message: ``^[A-Za-z0-9_.$-]{1,255}$`` only."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

SAFE_NAME = re.compile(r"^[A-Za-z0-9_.$-]{1,255}$")


def is_safe(name: Any) -> bool:
    return isinstance(name, str) and SAFE_NAME.fullmatch(name) is not None


def echo(name: Any) -> str:
    """`` 'name'`` when it is safe to repeat, otherwise nothing (a message stays grammatical)."""
    return f" '{name}'" if is_safe(name) else ""


def safe_path(parts: Iterable[Any]) -> list[Any]:
    """The path up to its first segment that is neither an index nor a safe name.

    A violation under a key the caller chose (an unknown field, an entry of a free-form
    mapping) points at the object holding it, so its pointer never repeats the key.
    """
    out: list[Any] = []
    for part in parts:
        if not (isinstance(part, int) or is_safe(part)):
            break
        out.append(part)
    return out


def safe_pointer(pointer: str) -> str:
    """The pointer when every segment is a safe name or an index, otherwise a placeholder."""
    parts = pointer.split("/")[1:]
    if all(is_safe(part) for part in parts):
        return pointer
    return "(a field)"
