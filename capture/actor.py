"""The acting user of record changes: from the request, or set explicitly for scripts/jobs."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_current: contextvars.ContextVar[Any] = contextvars.ContextVar("capture_actor", default=None)


@contextmanager
def acting_as(user: Any) -> Iterator[None]:
    token = _current.set(user)
    try:
        yield
    finally:
        _current.reset(token)


def current() -> Any:
    return _current.get()
