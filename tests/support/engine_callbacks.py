"""Callbacks the engine tests register in every process (test run and Celery worker).

Loaded through SWITCHYARD_CALLBACK_MODULES, which tests/engine/conftest.py sets before the
worker starts.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from workflows.definitions import catalogs


@catalogs.callbacks.register("test.block_while_gate", category="condition")
def block_while_gate(state: Any) -> bool:
    """Blocks while the gate file named in the state exists (announcing it entered)."""
    gate = Path(state["gate"])
    if gate.exists():
        gate.with_suffix(".entered").touch()
        deadline = time.monotonic() + 60
        while gate.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return True


@catalogs.callbacks.register("test.noop", category="service")
def noop(payload: Any) -> None:
    return None


@catalogs.callbacks.register("test.saga_do", category="service")
def saga_do(payload: Any) -> None:
    return None


@catalogs.callbacks.register("test.saga_undo", category="service")
def saga_undo(payload: Any, headers: dict[str, str]) -> None:
    """Appends (idempotency key, step) to the run's log; blocks at its first call while the
    gate file exists (the test kills the worker there)."""
    import json

    state_gate = Path(payload.get("gate", "")) if payload.get("gate") else None
    if state_gate is not None and state_gate.exists():
        state_gate.with_suffix(".entered").touch()
        deadline = time.monotonic() + 60
        while state_gate.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    with open(payload["undo_log"], "a") as log:
        log.write(json.dumps({"key": headers.get("idempotency-key", ""), "step": payload["step"]}) + "\n")


@catalogs.callbacks.register("test.exit_while_gate", category="condition")
def exit_while_gate(state: Any) -> bool:
    """Ends the process running the segment at once (no cleanup: a crash mid-segment) while
    the gate file named in the state exists, adding a line to ``<gate>.exits`` per crash."""
    import os

    gate = Path(state["gate"])
    if gate.exists():
        with gate.with_suffix(".exits").open("a") as exits:
            exits.write(f"{os.getpid()}\n")
        os._exit(1)
    return True


@catalogs.callbacks.register("test.initial_while_gate", category="initial_state")
def initial_while_gate(payload: Any) -> dict[str, Any]:
    """An initial-state mapper that fails (as a lookup of the moment would) while the gate
    file named in the payload exists."""
    if Path(payload["gate"]).exists():
        raise RuntimeError(f"lookup failed for {payload['gate']}")
    return {"gate": payload["gate"], "initialised": True}


@catalogs.callbacks.register("test.subject_while_gate", category="subject_resolver")
def subject_while_gate(state: Any) -> dict[str, Any]:
    """A subject resolver that fails while the gate file named in the state exists."""
    if Path(state["gate"]).exists():
        raise RuntimeError(f"subject lookup failed for {state['gate']}")
    return {"type": "order", "id": "O-1", "version": "1"}


@catalogs.callbacks.register("test.mutator_while_gate", category="state_mutator")
def mutator_while_gate(state: Any) -> dict[str, Any]:
    """A timeout's mutator that fails while the gate file named in the state exists."""
    if Path(state["gate"]).exists():
        raise RuntimeError(f"mutator failed for {state['gate']}")
    return {**state, "timed_out": True}


@catalogs.callbacks.register("test.answer_by_signal", category="service")
def answer_by_signal(payload: Any, idempotency_key: str) -> None:
    """A handler that answers its run the documented way: a signal ``answered`` to the open run
    of the definition and business key the payload names, under the dispatch's idempotency key
    (a repeated delivery records it once)."""
    from workflows import operations

    operations.signal_by_key(
        definition_id=payload["definition"],
        business_key=payload["key"],
        name="answered",
        payload={"accepted": True},
        idempotency_key=idempotency_key,
    )
