"""History entries and the decision log.

Entries are buffered per transaction (``HistoryBuffer``) and written in one multi-row
INSERT when the segment (or recording) flushes; a savepoint rollback truncates the buffer
to its mark, so a rolled-back parked signal or completion takes its entries with it and the
sequence has no gap. Sequences come from the run row's ``history_seq`` under the lock.

Redaction (``engine/redaction.py``) happens as entries are added: payload copies and full
states at the redacted pointers, the states a patch is diffed from, and reason texts. The
buffer asks the run's redactor at most once per definition version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import jsonpatch

from workflows import jsonvalues
from workflows.engine import db, events, redaction, sql
from workflows.engine.actors import NONE, Actor

PATCH_LIMIT = 65536
OUTCOME_LIMIT = 40

SQL = sql.load("history")


# Canonical JSON: sorted keys, compact, exact numbers (an int and a decimal differ, and a
# Decimal keeps its digits: ``1000.10`` stays ``1000.10``).
canonical = jsonvalues.canonical


@dataclass
class Entry:
    type: str
    command_id: int | None = None
    step: str = ""
    branch_id: str = ""
    outcome: str = ""
    state_version_before: int | None = None
    state_version_after: int | None = None
    patch: Any = None
    payload: Any = None
    actor: Actor = NONE
    decision: bool = False  # DECISION / STATE_BASELINE carry the definition key and executor


@dataclass
class HistoryBuffer:
    run_id: Any
    next_seq: int  # the run's history_seq + 1
    scope: str = ""
    definition_id: str = ""
    version: int | None = None
    plan_hash: str = ""
    executor_id: str = ""
    business_key: str | None = None  # what the events of the run's transitions carry
    entries: list[Entry] = field(default_factory=list)
    # the run's current state: reason texts are redacted against the values it holds
    state_source: Callable[[], Any] | None = None
    _pointers: dict[tuple[str, int | None], tuple[redaction.Pointer, ...]] = field(default_factory=dict, repr=False)
    _command_documents: dict[int, list[Any]] = field(default_factory=dict, repr=False)

    def mark(self) -> int:
        return len(self.entries)

    def truncate(self, mark: int) -> None:
        del self.entries[mark:]

    def add(self, type: str, **kwargs: Any) -> Entry:
        entry = Entry(type=type, **kwargs)
        self._redact(entry)
        if entry.outcome:
            entry.outcome = entry.outcome[:OUTCOME_LIMIT]
        self.entries.append(entry)
        return entry

    # --- redaction -------------------------------------------------------------------
    def pointers(self) -> tuple[redaction.Pointer, ...]:
        """The redacted pointers of the current definition version (asked once per version:
        a migration that changes ``version`` asks the target version's redactor afresh)."""
        key = (self.definition_id, self.version)
        if key not in self._pointers:
            self._pointers[key] = redaction.pointers_of(self.definition_id, self.version)
        return self._pointers[key]

    def redact(self, document: Any) -> Any:
        pointers = self.pointers()
        return redaction.redact(document, pointers) if pointers and document is not None else document

    def _documents(self, command_id: int | None) -> list[Any]:
        documents = [self.state_source() if self.state_source is not None else None]
        if command_id is not None:
            if command_id not in self._command_documents:
                row = db.fetchone(SQL.command_documents, [command_id])
                found: list[Any] = []
                if row is not None:
                    found.append(row[0])
                    if isinstance(row[1], dict) and "payload" in row[1]:
                        found.append(row[1]["payload"])  # a task completion keeps its payload in target
                self._command_documents[command_id] = found
            documents.extend(self._command_documents[command_id])
        return documents

    def _redact(self, entry: Entry) -> None:
        pointers = self.pointers()
        if not pointers:
            return
        payload = entry.payload
        if isinstance(payload, dict):
            payload = dict(payload)
            for key in ("payload", "state"):
                if key in payload:
                    payload[key] = redaction.redact(payload[key], pointers)
            entry.payload = payload
        reason = payload.get("reason") if isinstance(payload, dict) else None
        texts = [t for t in (entry.outcome if entry.type != "DECISION" else "", reason) if isinstance(t, str) and t]
        if not texts:
            return
        secrets = redaction.secrets_in(self._documents(entry.command_id), pointers)
        if not secrets:
            return
        if entry.type != "DECISION" and entry.outcome:
            entry.outcome = redaction.redact_text(entry.outcome, secrets)
        if isinstance(reason, str) and reason:
            entry.payload = {**payload, "reason": redaction.redact_text(reason, secrets)}

    def decision(
        self,
        *,
        step: str,
        outcome: str,
        before: Any,
        after: Any,
        version_before: int,
        version_after: int,
        command_id: int | None,
        actor: Actor,
        branch_id: str = "",
        local: bool = False,
    ) -> None:
        """A DECISION with an RFC 6902 patch (add/remove/replace only) of the state change.

        When either state or the patch is over 64 KiB the patch is NULL and a
        STATE_BASELINE with the state after follows at once.
        """
        baseline = False
        if local:
            # a branch's own copy changed: logged for reading, never replayed onto the instance
            patch: Any = diff(self.redact(before), self.redact(after)) if not _same(before, after) else []
            if len(canonical(patch).encode()) > PATCH_LIMIT:
                patch = None
        elif version_before == version_after:
            patch = []
        else:
            # diffed from the redacted states, so neither the patch nor its size holds a secret
            b, a = canonical(self.redact(before)), canonical(self.redact(after))
            if len(b.encode()) > PATCH_LIMIT or len(a.encode()) > PATCH_LIMIT:
                patch, baseline = None, True
            else:
                patch = diff(jsonvalues.loads(b), jsonvalues.loads(a))
                if len(canonical(patch).encode()) > PATCH_LIMIT:
                    patch, baseline = None, True
        self.add(
            "DECISION",
            step=step,
            outcome=outcome,
            state_version_before=version_before,
            state_version_after=version_after,
            patch=patch,
            command_id=command_id,
            actor=actor,
            branch_id=branch_id,
            decision=True,
        )
        if baseline and not local:
            self.baseline(after, version=version_after, command_id=command_id, actor=actor, step=step)

    def baseline(self, state: Any, *, version: int, command_id: int | None, actor: Actor, step: str = "") -> None:
        self.add(
            "STATE_BASELINE",
            step=step,
            state_version_before=version,
            state_version_after=version,
            payload={"state": state},
            command_id=command_id,
            actor=actor,
            decision=True,
        )

    def flush(self) -> int:
        """Insert the buffered entries; answers the run's new history_seq."""
        statement = self.flush_statement()
        if statement is not None:
            db.execute(*statement)
        return self.next_seq - 1

    def flush_statement(self) -> tuple[str, list[Any]] | None:
        """The INSERT of the buffered entries (the buffer is consumed): one statement text for
        any number of entries (they travel as one JSON array), so it is prepared once."""
        rows = self.flush_rows()
        return (HISTORY_INSERT, [self.run_id, db.jsonb(rows)]) if rows else None

    def flush_rows(self) -> list[dict[str, Any]]:
        """The buffered entries as the rows of ``HISTORY_INSERT`` (the buffer is consumed)."""
        rows: list[dict[str, Any]] = []
        seq = self.next_seq
        for e in self.entries:
            kind, actor_id, reason, on_behalf_of, status = e.actor.columns()
            row: dict[str, Any] = {
                "seq": seq,
                "type": e.type,
                "command_id": e.command_id,
                "step": e.step or "",
                "branch_id": e.branch_id or "",
                "outcome": e.outcome or "",
                "vb": e.state_version_before,
                "va": e.state_version_after,
                "ak": kind,
                "ai": actor_id,
                "ar": reason,
                "ob": on_behalf_of,
                "st": status,
            }
            if e.decision:
                row.update(
                    scope=self.scope,
                    definition_id=self.definition_id,
                    version=self.version,
                    plan_hash=self.plan_hash,
                    executor_id=self.executor_id,
                )
            if e.patch is not None:
                row["patch"] = e.patch
            if e.payload is not None:
                row["payload"] = e.payload
            rows.append(row)
            seq += 1
        self.entries.clear()
        self.next_seq = seq
        # the one place every entry passes: the transitions' events go with these rows
        events.recorded(self, rows)
        return rows


HISTORY_INSERT = SQL.history_insert
HISTORY_INSERT_MANY = SQL.history_insert_many  # (a bulk migration's decision logs)


def _same(a: Any, b: Any) -> bool:
    """Equal as the log sees it: an int and a decimal (1 and 1.0) or a bool and an int differ;
    two decimals are equal by value (1.0 and 1.00), whether Decimal or float."""
    if type(a) is not type(b):
        if isinstance(a, Decimal | float) and isinstance(b, Decimal | float):
            return _decimal(a) == _decimal(b)
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _decimal(value: Decimal | float) -> Decimal:
    return Decimal(repr(value)) if isinstance(value, float) else value


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def diff(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """An RFC 6902 patch with add, remove and replace only (no move/copy, no old values).

    Written here rather than taken from ``jsonpatch.make_patch`` because that function
    emits move operations and treats 1 and 1.0 (and True and 1) as equal.
    """
    if _same(before, after):
        return []
    if isinstance(before, dict) and isinstance(after, dict):
        ops: list[dict[str, Any]] = []
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, value in after.items():
            child = f"{path}/{_escape(key)}"
            if key not in before:
                ops.append({"op": "add", "path": child, "value": value})
            else:
                ops.extend(diff(before[key], value, child))
        return ops
    if isinstance(before, list) and isinstance(after, list):
        ops = []
        common = min(len(before), len(after))
        for i in range(common):
            ops.extend(diff(before[i], after[i], f"{path}/{i}"))
        for i in range(len(before) - 1, common - 1, -1):  # remove from the end so indexes stay valid
            ops.append({"op": "remove", "path": f"{path}/{i}"})
        for i in range(common, len(after)):
            ops.append({"op": "add", "path": f"{path}/{i}", "value": after[i]})
        return ops
    return [{"op": "replace", "path": path, "value": after}]


def replay(entries: list[dict[str, Any]]) -> Any:
    """Rebuild a state from decision-log entries (ordered by seq): latest baseline + patches."""
    state: Any = None
    for e in entries:
        if e.get("branch_id") and e["type"] == "DECISION":
            continue  # a branch's local patch: the join's decision carries the instance change
        if e["type"] == "STATE_BASELINE":
            state = (e.get("payload") or {}).get("state")
        elif e["type"] == "DECISION" and e.get("patch"):
            state = jsonpatch.apply_patch(state, e["patch"])
    return state
