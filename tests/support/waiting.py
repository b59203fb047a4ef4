"""Waiting for something another process does, with a deadline instead of a sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    probe: Callable[[], T],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    what: str = "",
    details: Callable[[], str] | None = None,
) -> T:
    """Call ``probe`` until it answers something truthy; fail after ``timeout`` seconds.

    ``details`` is called only on failure (for example a worker's log) and added to the error.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{details()}" if details else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what or probe!r}{extra}")
        time.sleep(interval)
