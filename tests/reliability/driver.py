"""The workload driver: submits starts, signals, completions and cancels through
``workflows.operations`` from threads of this process, and keeps its own ledger.

Every submission carries an idempotency key. A submission that fails in a retryable way
(lock timeout, a lost connection — the harness terminates connections and restarts the
broker) is sent again with the same key until it is answered: an answer to a repeat is the
first recording, which is exactly what the ledger checks later. A refusal (``SignalRejected``
for a run that has ended, say) is kept in the ledger as refused, not accepted.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, InterfaceError, close_old_connections, connection

from tests.reliability.documents import DEFINITION_ID
from workflows import operations
from workflows.exceptions import WorkflowError

log = logging.getLogger("tests.reliability")

ENDED = ("COMPLETED", "CANCELLED", "COMPENSATED", "EXPIRED", "FAILED")


@dataclass
class Entry:
    """One thing the driver asked for, with the key it used and what it was answered."""

    kind: str  # START / SIGNAL / COMPLETION / CANCEL
    key: str
    run_id: str = ""
    command_id: int | None = None
    refused: str = ""  # the error code of a refusal
    sends: int = 0  # how many times it was sent (repeats after a lost answer, deliberate duplicates)
    replayed: int = 0  # answers that were the first recording


@dataclass
class Ledger:
    entries: list[Entry] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    errors: dict[str, int] = field(default_factory=dict)  # retryable failures seen, by type

    def add(self, entry: Entry) -> Entry:
        with self.lock:
            self.entries.append(entry)
        return entry

    def error(self, name: str) -> None:
        with self.lock:
            self.errors[name] = self.errors.get(name, 0) + 1

    def accepted(self) -> list[Entry]:
        with self.lock:
            return [e for e in self.entries if e.command_id is not None]

    def counts(self) -> dict[str, int]:
        with self.lock:
            out: dict[str, int] = {}
            for e in self.entries:
                answered = "accepted" if e.command_id or e.kind == "CANCEL" else "open"
                label = f"{e.kind}:{'refused' if e.refused else answered}"
                out[label] = out.get(label, 0) + 1
            return out


class Driver:
    """Starts runs while ``starting`` is set (at most ``max_live`` unfinished at a time) and
    keeps every run moving (signals, completions) until it ends or ``stop()`` is called."""

    def __init__(self, ledger: Ledger, *, max_live: int = 30, seed: int = 7, cancel_share: float = 0.03) -> None:
        self.ledger = ledger
        self.max_live = max_live
        self.random = random.Random(seed)
        self.cancel_share = cancel_share
        self.starting = threading.Event()
        self.stopping = threading.Event()
        self.started_runs: list[str] = []
        self.late: list[tuple[float, Callable[[], None]]] = []
        self.late_lock = threading.Lock()
        self.completed_tasks: set[str] = set()
        self.threads: list[threading.Thread] = []
        self.failures: list[str] = []  # unexpected exceptions in driver threads
        self._n = 0

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.starting.set()
        for name, target in (("starter", self._starter), ("completer", self._completer), ("late", self._late)):
            thread = threading.Thread(target=self._guard(target), name=f"rel-{name}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop_starting(self) -> None:
        self.starting.clear()

    def stop(self, timeout: float = 30.0) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout)
            if thread.is_alive():
                self.failures.append(f"{thread.name} did not stop within {timeout:.0f}s")

    def _guard(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except Exception as exc:
                log.exception("driver thread failed")
                self.failures.append(f"{threading.current_thread().name}: {type(exc).__name__}: {exc}")
            finally:
                connection.close()

        return run

    # -- submissions -------------------------------------------------------------------------
    def submit(self, entry: Entry, call: Callable[[], Any]) -> Entry:
        """Send until answered (same key every time); a refusal is kept as refused."""
        self.ledger.add(entry)
        for attempt in range(200):
            entry.sends += 1
            try:
                answer = call()
            except WorkflowError as exc:
                if exc.retryable:
                    self.ledger.error(exc.code)
                    time.sleep(min(0.5, 0.02 * (attempt + 1)))
                    continue
                entry.refused = exc.code
                return entry
            except (DatabaseError, InterfaceError) as exc:
                self.ledger.error(type(exc).__name__)
                close_old_connections()
                connection.close()
                time.sleep(min(0.5, 0.02 * (attempt + 1)))
                continue
            if answer is not None:
                entry.run_id = str(answer.run_id)
                entry.command_id = answer.command_id
                entry.replayed += int(bool(answer.replay))
            return entry
        entry.refused = "GAVE_UP"
        return entry

    def _live(self) -> int:
        from workflows.engine import db

        row = db.fetchone(
            "SELECT count(*) FROM workflow_runs WHERE definition_id = %s AND status <> ALL(%s)",
            [DEFINITION_ID, list(ENDED)],
        )
        return int(row[0]) if row else 0

    def _later(self, delay: float, action: Callable[[], None]) -> None:
        with self.late_lock:
            self.late.append((time.monotonic() + delay, action))

    def _starter(self) -> None:
        live, checked = 0, 0.0
        while not self.stopping.is_set():
            if not self.starting.is_set():
                time.sleep(0.1)
                continue
            if time.monotonic() - checked > 0.5:
                live, checked = self._live(), time.monotonic()
            if live >= self.max_live:
                time.sleep(0.05)
                continue
            self._n += 1
            live += 1
            self._journey(self._n)

    def _journey(self, n: int) -> None:
        key = f"rel-{n}"
        started = self.submit(
            Entry("START", key),
            lambda: operations.start(definition_id=DEFINITION_ID, payload={"n": n}, idempotency_key=key),
        )
        if not started.run_id:
            return
        run_id = started.run_id
        self.started_runs.append(run_id)
        self.signal(run_id, "go", f"go-{n}")
        self.signal(run_id, "note", f"note-{n}-1")
        if self.random.random() < 0.3:  # a second note: parked, then settled when the run ends
            self._later(self.random.uniform(0.0, 4.0), lambda: self.signal(run_id, "note", f"note-{n}-2"))
        if self.random.random() < 0.05:  # a client that repeats itself: the same key, the first answer
            self._later(self.random.uniform(0.0, 2.0), lambda: self.signal(run_id, "go", f"go-{n}"))
        if self.random.random() < self.cancel_share:
            self._later(self.random.uniform(0.0, 5.0), lambda: self.cancel(run_id, n))

    def signal(self, run_id: str, name: str, key: str) -> Entry:
        return self.submit(
            Entry("SIGNAL", key, run_id=run_id),
            lambda: operations.signal(run_id=run_id, name=name, payload={"by": "driver"}, idempotency_key=key),
        )

    def cancel(self, run_id: str, n: int) -> None:
        entry = self.submit(
            Entry("CANCEL", f"cancel-{n}", run_id=run_id),
            lambda: operations.cancel(run_id=run_id, reason="reliability driver"),
        )
        entry.run_id = run_id

    def complete(self, task_id: str, run_id: str, decision: str) -> Entry:
        key = f"done-{task_id}"
        return self.submit(
            Entry("COMPLETION", key, run_id=run_id),
            lambda: operations.complete_task(task_id=task_id, decision=decision, idempotency_key=key),
        )

    def _completer(self) -> None:
        from workflows.engine import db

        while not self.stopping.is_set():
            rows = db.fetchall(
                "SELECT t.id, t.run_id FROM workflow_tasks t JOIN workflow_runs r ON r.id = t.run_id "
                "WHERE r.definition_id = %s AND t.status = 'OPEN' ORDER BY t.created_at LIMIT 50",
                [DEFINITION_ID],
            )
            fresh = [(str(t), str(r)) for t, r in rows if str(t) not in self.completed_tasks]
            for task_id, run_id in fresh:
                self.completed_tasks.add(task_id)
                decision = "reject" if self.random.random() < 0.1 else "approve"
                self.complete(task_id, run_id, decision)
                if self.random.random() < 0.1:  # sent again with the same key: answered by the first
                    self._later(
                        self.random.uniform(0.0, 1.0), lambda t=task_id, r=run_id, d=decision: self._again(t, r, d)
                    )
            if not fresh:
                time.sleep(0.1)

    def _again(self, task_id: str, run_id: str, decision: str) -> None:
        entry = self.complete(task_id, run_id, decision)
        entry.kind = "COMPLETION_REPEAT"

    def _late(self) -> None:
        while not self.stopping.is_set():
            now = time.monotonic()
            with self.late_lock:
                due = [a for t, a in self.late if t <= now]
                self.late = [(t, a) for t, a in self.late if t > now]
            for action in due:
                action()
            if not due:
                time.sleep(0.05)

    def pending_late(self) -> int:
        with self.late_lock:
            return len(self.late)
