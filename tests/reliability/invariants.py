"""The invariants, checked in SQL once the system is quiet.

Each check answers ``Check(name, violations, examples, detail)``; ``examples`` are ids, never
values. They read the database only (plus the driver's ledger), so they hold for whatever
the engine did, whichever process did it.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from tests.reliability.driver import Ledger
from workflows.engine import db
from workflows.engine.history import canonical, replay

UNSETTLED = ("PENDING", "DEFERRED", "CLAIMED", "PARKED")
TERMINAL = ("COMPLETE", "REJECTED", "STALE", "FAILED", "CANCELLED", "SUPERSEDED", "OUTCOME_UNKNOWN", "DEAD")
# the history entry that settles a command, by the command's final status
SETTLING_ENTRY = {
    "COMPLETE": ("COMMAND_COMPLETED",),
    "REJECTED": ("COMMAND_REJECTED",),
    "STALE": ("COMMAND_STALE",),
    "FAILED": ("COMMAND_FAILED",),
    "CANCELLED": ("COMMAND_CANCELLED", "TIMER_CANCELLED"),
    "SUPERSEDED": ("COMMAND_SUPERSEDED",),
    "DEAD": ("COMMAND_DEAD",),
}
SETTLING_TYPES = tuple(sorted({t for types in SETTLING_ENTRY.values() for t in types}))
LEDGER_KIND = {"START": "START", "SIGNAL": "SIGNAL", "COMPLETION": "COMPLETION", "COMPLETION_REPEAT": "COMPLETION"}


@dataclass
class Check:
    name: str
    violations: int
    examples: list[Any] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.violations == 0

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "violations": self.violations, "examples": self.examples[:10], **self.detail}


def _runs_clause() -> str:
    return "(SELECT id FROM workflow_runs WHERE definition_id = %(definition)s)"


def check_all(ledger: Ledger, definition_id: str, *, segment_log: bool = True) -> list[Check]:
    params = {"definition": definition_id}
    checks = [
        lost_and_duplicated(ledger, params),
        settled_once(params),
        runs_ended(params),
        history_contiguous(params),
        replay_matches_state(params),
        effects_once(params),
    ]
    if segment_log:
        checks += [stale_token_writes(params), segments_never_overlap(params), one_settling_segment(params)]
    return checks


def lost_and_duplicated(ledger: Ledger, params: dict[str, Any]) -> Check:
    """Every accepted ledger entry: exactly one command with its key, the one the driver was
    answered, and it is settled. Repeats of a key were answered with that same command."""
    rows = db.fetchall(
        "SELECT c.run_id, c.kind, c.dedup_key, array_agg(c.id ORDER BY c.id), array_agg(c.status ORDER BY c.id) "
        f"FROM workflow_commands c WHERE c.run_id IN {_runs_clause()} AND c.dedup_key <> '' "
        "GROUP BY c.run_id, c.kind, c.dedup_key",
        params,
    )
    by_key = {(str(r[0]), r[1], r[2]): (list(r[3]), list(r[4])) for r in rows}
    lost, duplicated, unsettled, mismatched = [], [], [], []
    accepted = [e for e in ledger.accepted() if e.kind in LEDGER_KIND]
    answered: dict[tuple[str, str, str], set[int]] = defaultdict(set)
    for e in accepted:
        key = (e.run_id, LEDGER_KIND[e.kind], e.key)
        assert e.command_id is not None
        answered[key].add(e.command_id)
    for key, answers in answered.items():
        found = by_key.get(key)
        if found is None:
            lost.append(key[2])
            continue
        ids, statuses = found
        if len(ids) != 1:
            duplicated.append(key[2])
        if answers != {ids[0]}:
            mismatched.append(key[2])
        if any(s in UNSETTLED for s in statuses):
            unsettled.append(key[2])
    statuses = Counter(s for ids, sts in by_key.values() for s in sts)
    return Check(
        "ledger: 0 lost, 0 duplicated, every answer the one command",
        len(lost) + len(duplicated) + len(unsettled) + len(mismatched),
        lost + duplicated + unsettled + mismatched,
        {
            "ledger_entries": len(accepted),
            "distinct_keys": len(answered),
            "lost": len(lost),
            "duplicated": len(duplicated),
            "unsettled": len(unsettled),
            "answered_with_another_command": len(mismatched),
            "statuses": dict(statuses),
        },
    )


def settled_once(params: dict[str, Any], *, allow_unsettled: bool = False) -> Check:
    """Every command of the workload is settled, and its history holds exactly one settling
    entry, of the kind its status says (OUTCOME_UNKNOWN: none; a parked signal applied later
    is settled by the segment that applied it)."""
    rows = db.fetchdicts(
        "SELECT c.id, c.kind, c.status, coalesce(array_agg(h.type) FILTER (WHERE h.type IS NOT NULL), '{}') AS types "
        "FROM workflow_commands c LEFT JOIN workflow_history h ON h.run_id = c.run_id AND h.command_id = c.id "
        "AND h.type = ANY(%(types)s) "
        f"WHERE c.run_id IN {_runs_clause()} GROUP BY c.id, c.kind, c.status",
        {**params, "types": list(SETTLING_TYPES)},
    )
    bad, unsettled, shapes = [], [], Counter()
    for r in rows:
        shapes[(r["kind"], r["status"], ",".join(sorted(r["types"])))] += 1
        if r["status"] in UNSETTLED:
            if not allow_unsettled:
                unsettled.append(r["id"])
            elif [t for t in r["types"] if t != "COMMAND_DEAD"]:
                bad.append(r["id"])  # not settled, yet its history says it was
            continue
        expected = SETTLING_ENTRY.get(r["status"], ())
        types = [t for t in r["types"] if t != "COMMAND_DEAD"]
        if r["kind"] == "TIMER" and "COMMAND_CANCELLED" in types and "TIMER_CANCELLED" in types:
            # a cancelled run settles its queued timer command and then disarms the timer: the
            # TIMER_CANCELLED entry is about the timer, not a second settlement
            types.remove("TIMER_CANCELLED")
        settling = [t for t in types if t in expected]
        others = [t for t in types if t not in expected]
        if r["status"] == "OUTCOME_UNKNOWN":
            if r["types"] and any(t != "COMMAND_DEAD" for t in r["types"]):
                bad.append(r["id"])
        elif r["status"] == "DEAD":
            if r["types"].count("COMMAND_DEAD") < 1:
                bad.append(r["id"])
        elif len(settling) != 1 or others:
            bad.append(r["id"])
    return Check(
        "exactly one terminal outcome per command",
        len(bad) + len(unsettled),
        unsettled + bad,
        {
            "commands": len(rows),
            "unsettled": len(unsettled),
            "not_settled_exactly_once": len(bad),
            "shapes": {f"{k} {s} [{t}]": n for (k, s, t), n in sorted(shapes.items())},
        },
    )


def runs_ended(params: dict[str, Any]) -> Check:
    rows = db.fetchall(
        "SELECT status, count(*) FROM workflow_runs WHERE definition_id = %(definition)s GROUP BY status", params
    )
    counts = {str(s): int(n) for s, n in rows}
    live = sum(n for s, n in counts.items() if s not in ("COMPLETED", "CANCELLED"))
    open_tasks = db.fetchone(
        f"SELECT count(*) FROM workflow_tasks WHERE run_id IN {_runs_clause()} AND status IN ('OPEN','COMPLETING')",
        params,
    )
    timers = db.fetchone(
        f"SELECT count(*) FROM workflow_timers WHERE run_id IN {_runs_clause()} AND status = 'SCHEDULED'", params
    )
    extra = int(open_tasks[0] if open_tasks else 0) + int(timers[0] if timers else 0)
    return Check(
        "every run ended (completed or cancelled), nothing left open",
        live + extra,
        [],
        {
            "runs": counts,
            "open_tasks": int(open_tasks[0]) if open_tasks else 0,
            "scheduled_timers": int(timers[0]) if timers else 0,
        },
    )


def history_contiguous(params: dict[str, Any]) -> Check:
    rows = db.fetchall(
        "SELECT r.id FROM workflow_runs r LEFT JOIN (SELECT run_id, count(*) AS n, min(seq) AS lo, max(seq) AS hi "
        "FROM workflow_history GROUP BY run_id) h ON h.run_id = r.id WHERE r.definition_id = %(definition)s "
        "AND (coalesce(h.n, 0) <> r.history_seq OR coalesce(h.lo, 1) <> 1 OR coalesce(h.hi, 0) <> r.history_seq)",
        params,
    )
    entries = db.fetchone(f"SELECT count(*) FROM workflow_history WHERE run_id IN {_runs_clause()}", params)
    return Check(
        "history sequences contiguous (1..history_seq, no gap, no duplicate)",
        len(rows),
        [str(r[0]) for r in rows],
        {"entries": int(entries[0]) if entries else 0},
    )


def replay_matches_state(params: dict[str, Any]) -> Check:
    """Replaying each run's decision log (latest baseline + patches) gives its stored state."""
    runs = db.fetchall(
        "SELECT id, state FROM workflow_runs WHERE definition_id = %(definition)s AND state IS NOT NULL", params
    )
    entries = db.fetchdicts(
        "SELECT run_id, seq, type, branch_id, patch, payload FROM workflow_history WHERE run_id IN "
        f"{_runs_clause()} AND type IN ('DECISION','STATE_BASELINE') ORDER BY run_id, seq",
        params,
    )
    by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        by_run[str(e["run_id"])].append(e)
    bad = []
    for run_id, state in runs:
        rebuilt = replay(by_run.get(str(run_id), []))
        if canonical(rebuilt) != canonical(state if not isinstance(state, str) else json.loads(state)):
            bad.append(str(run_id))
    return Check("replaying the decision log reproduces the stored state", len(bad), bad, {"runs_replayed": len(runs)})


def effects_once(params: dict[str, Any]) -> Check:
    """Service intents: every one delivered; the receiver applied each key exactly once, got the
    key in the header it sent, and applied nothing the outbox never asked for."""
    intents = db.fetchall(
        f"SELECT idempotency_key, status FROM workflow_outbox WHERE run_id IN {_runs_clause()} AND kind = 'SERVICE'",
        params,
    )
    keys = {k for k, _ in intents}
    undelivered = [k for k, s in intents if s != "DELIVERED"]
    applied = Counter(k for (k,) in db.fetchall("SELECT key FROM reliability_effects"))
    deliveries = Counter(k for (k,) in db.fetchall("SELECT key FROM reliability_deliveries"))
    header_mismatch = db.fetchone("SELECT count(*) FROM reliability_deliveries WHERE header_key <> key")
    never_applied = [k for k in keys if applied.get(k, 0) != 1]
    unasked = [k for k in applied if k not in keys]
    redelivered = sum(n - 1 for n in deliveries.values() if n > 1)
    mismatch = int(header_mismatch[0]) if header_mismatch else 0
    return Check(
        "one effect per idempotency key (at-least-once delivery, deduplicated by key)",
        len(undelivered) + len(never_applied) + len(unasked) + mismatch,
        undelivered + never_applied + unasked,
        {
            "intents": len(keys),
            "deliveries": sum(deliveries.values()),
            "redeliveries_deduplicated": redelivered,
            "effects_applied": sum(applied.values()),
            "undelivered": len(undelivered),
            "header_key_mismatch": mismatch,
        },
    )


def open_signals_counted(params: dict[str, Any]) -> Check:
    """A run's ``open_signals`` is the number of its signals not yet settled (queued, claimed
    or parked): the SIGNAL_LIMIT check counts on it."""
    rows = db.fetchall(
        "SELECT r.id, r.open_signals, count(c.id) FROM workflow_runs r "
        "LEFT JOIN workflow_commands c ON c.run_id = r.id "
        "AND c.kind = 'SIGNAL' AND c.status IN ('PENDING','DEFERRED','CLAIMED','PARKED') "
        "WHERE r.definition_id = %(definition)s GROUP BY r.id, r.open_signals HAVING r.open_signals <> count(c.id)",
        params,
    )
    return Check("open_signals counts the unsettled signals", len(rows), [f"{r[0]}: {r[1]} != {r[2]}" for r in rows])


def one_claim_per_run(params: dict[str, Any]) -> Check:
    rows = db.fetchall(
        f"SELECT run_id FROM workflow_commands WHERE run_id IN {_runs_clause()} AND status = 'CLAIMED' "
        "GROUP BY run_id HAVING count(*) > 1",
        params,
    )
    return Check("at most one claimed command per run", len(rows), [str(r[0]) for r in rows])


def stale_token_writes(params: dict[str, Any]) -> Check:
    """0 committed segments whose claim no longer stood when they wrote, and 0 tokens that
    committed twice."""
    stale = db.fetchall(
        "SELECT command_id FROM workflow_segment_log WHERE run_id IN " + _runs_clause() + " AND NOT claim_current",
        params,
    )
    twice = db.fetchall(
        "SELECT token FROM workflow_segment_log WHERE run_id IN "
        + _runs_clause()
        + " GROUP BY token HAVING count(*) > 1",
        params,
    )
    total = db.fetchone("SELECT count(*) FROM workflow_segment_log WHERE run_id IN " + _runs_clause(), params)
    return Check(
        "0 writes with a stale token",
        len(stale) + len(twice),
        [r[0] for r in stale] + [str(r[0]) for r in twice],
        {"segments": int(total[0]) if total else 0, "stale": len(stale), "token_used_twice": len(twice)},
    )


def segments_never_overlap(params: dict[str, Any]) -> Check:
    """At most one segment at a time per run: the recorded lock intervals never overlap."""
    rows = db.fetchall(
        "SELECT a.run_id, a.id, b.id FROM workflow_segment_log a JOIN workflow_segment_log b ON b.run_id = a.run_id "
        "AND b.id > a.id AND a.started_at < b.committed_at AND b.started_at < a.committed_at "
        "WHERE a.run_id IN " + _runs_clause(),
        params,
    )
    return Check("at most one segment at a time per run", len(rows), [f"{r[0]}:{r[1]}/{r[2]}" for r in rows])


def one_settling_segment(params: dict[str, Any]) -> Check:
    """No command was settled by two segments (PARKED and REQUEUE are not settlements)."""
    rows = db.fetchall(
        "SELECT command_id FROM workflow_segment_log WHERE run_id IN " + _runs_clause() + " AND outcome NOT IN "
        "('PARKED','REQUEUE') GROUP BY command_id HAVING count(*) > 1",
        params,
    )
    return Check("no command settled by two segments", len(rows), [r[0] for r in rows])
