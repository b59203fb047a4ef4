"""Threads for the concurrency suites: every thread joins within a deadline, so a deadlock
fails the test instead of hanging it; each thread closes its own database connection."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, InterfaceError, close_old_connections, connection

from workflows.exceptions import WorkflowError


def in_threads(calls: list[Callable[[], Any]], *, timeout: float = 120.0, together: bool = True) -> list[Any]:
    """Run each call in its own thread (released together by a barrier when ``together``);
    answer each call's result or the exception it raised, in order."""
    barrier = threading.Barrier(len(calls)) if together else None
    results: list[Any] = [None] * len(calls)

    def run(i: int, call: Callable[[], Any]) -> None:
        try:
            if barrier is not None:
                barrier.wait(timeout)
            results[i] = call()
        except BaseException as exc:
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, c), daemon=True, name=f"client-{i}") for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"threads still running after {timeout:.0f}s (deadlock?): {hung}"
    return results


def with_retries(call: Callable[[], Any], *, attempts: int = 100) -> Any:
    """A client that sends again (same arguments, same key) after a retryable refusal or a
    lost connection, as the API tells integrators to."""
    for attempt in range(attempts):
        try:
            return call()
        except WorkflowError as exc:
            if not exc.retryable or attempt == attempts - 1:
                raise
        except (DatabaseError, InterfaceError):
            if attempt == attempts - 1:
                raise
            close_old_connections()
            connection.close()
        time.sleep(min(0.2, 0.01 * (attempt + 1)))
    raise AssertionError("unreachable")
