"""The crash harness: real PostgreSQL, the suite's broker, two Celery worker processes and
beat, a driver with its own ledger, a chaos schedule, then the invariants after a quiet
window.

    harness = Harness(Config.lite(), database=..., workdir=...)
    report = harness.run()      # a dict; report["ok"] says whether every invariant held

The chaos schedule, every ``kill_every`` seconds: SIGKILL one worker (alternating) and start
it again. Half-way between two kills, in turn: ``pg_terminate_backend`` on the workers'
connections; SIGSTOP a worker until its claims were taken away (or lease + 20 s), then
SIGCONT; restart Redis with nothing persisted (when the broker is a Redis the harness may
restart, see ``fleet.redis_target``; otherwise that slot terminates connections again).
The workers also run with fault points armed (``SWITCHYARD_FAULTS``): exits after a claim
and between commit and publish, database errors after commit and inside outbox delivery,
and a self-SIGSTOP inside a segment before its settlement (the harness resumes it once the
sweep has taken its claim away: its writes must then be refused by the token).

Recovery is measured per kill: the seconds until every command the killed worker held was
settled by someone else (bound: lease + sweep interval + 5 s), and the gap until the next
settlement of any command.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.reliability import callbacks, invariants
from tests.reliability.documents import DEFINITION_ID, ORDER
from tests.reliability.driver import Driver, Ledger
from tests.reliability.fleet import Fleet, Worker, redis_target, restart_redis, terminate_backends
from workflows.engine import db

log = logging.getLogger("tests.reliability")


@dataclass
class Config:
    mode: str
    window_seconds: float  # how long runs are started while the chaos schedule runs
    kill_every: float = 15.0
    min_kills: int = 0  # the window is extended until this many SIGKILLs happened
    min_commands: int = 0  # ... and until this many commands were recorded
    lease_seconds: int = 8
    sweep_seconds: float = 2.0
    max_live: int = 10
    quiesce_timeout: float = 150.0
    faults: str = (
        "after_claim:exit:0.002,after_segment_commit:dberror:0.01,before_publish:exit:0.001,"
        "outbox_delivery:dberror:0.05,before_settle:stop:#400"
    )
    seed: int = 7

    @classmethod
    def lite(cls) -> Config:
        # CI's size: every kind of fault at least twice (6 kills; 2 connection terminations, 2
        # freezes past the lease, 2 broker restarts on Redis), the same checks as the nightly run
        return cls(mode="lite", window_seconds=72.0, kill_every=12.0)

    @classmethod
    def full(cls) -> Config:
        return cls(mode="full", window_seconds=300.0, min_kills=20, min_commands=10_000, quiesce_timeout=300.0)

    @property
    def recovery_bound(self) -> float:
        return self.lease_seconds + self.sweep_seconds + 5.0


@dataclass
class Event:
    at: float  # seconds since the window opened
    what: str
    worker: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


class Harness:
    def __init__(self, config: Config, *, database: str, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.config = config
        self.database = database
        self.workdir = workdir
        self.ledger = Ledger()
        self.driver = Driver(self.ledger, max_live=config.max_live, seed=config.seed)
        self.events: list[Event] = []
        self.kills: list[dict[str, Any]] = []
        self.freezes: list[dict[str, Any]] = []
        self.redis = redis_target(os.environ.get("CELERY_BROKER_URL", ""))
        self.faults_log = workdir / "faults.log"
        worker_env = {
            **os.environ,
            **(env or {}),
            "SWITCHYARD_CALLBACK_MODULES": "tests.reliability.callbacks",
            "WORKFLOWS_EXECUTOR_LEASE_SECONDS": str(config.lease_seconds),
            "SWEEP_INTERVAL_SECONDS": str(config.sweep_seconds),
            "WORKFLOWS_LOG_LEVEL": "WARNING",
            "SWITCHYARD_SEGMENT_LOG": "1",
            "SWITCHYARD_FAULTS": config.faults,
            "SWITCHYARD_FAULTS_SEED": str(config.seed),
            "SWITCHYARD_FAULTS_LOG": str(self.faults_log),
        }
        self.fleet = Fleet(worker_env, workdir)
        self._t0 = 0.0
        self._last_sample = 0.0
        self.backlog: list[tuple[float, int | None]] = []  # (seconds, messages waiting in the broker)

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        self._prepare()
        try:
            self.fleet.start()
            self._t0 = time.monotonic()
            self.driver.start()
            self._chaos()
            self.driver.stop_starting()
            window = time.monotonic() - self._t0
            self._release_everything()
            quiet, quiesce_s = self._quiesce()
            self.driver.stop()
            checks = invariants.check_all(self.ledger, DEFINITION_ID)
        finally:
            self.driver.stopping.set()
            self.fleet.stop()
        return self._report(checks, window=window, quiet=quiet, quiesce_s=quiesce_s, wall=time.monotonic() - started)

    def _prepare(self) -> None:
        from workflows import definitions

        callbacks.create_tables()
        db.execute("TRUNCATE workflow_segment_log")
        try:
            ref = definitions.load(scope="default", text=ORDER, format="yaml")
            definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
        except Exception as exc:
            if getattr(exc, "code", "") not in ("VERSION_EXISTS", "INVALID_TRANSITION"):
                raise
        definitions.activate(scope="default", definition_id=DEFINITION_ID, version=1, target_scope="default")
        from config.celery import app

        with app.connection_for_write() as conn:
            app.control.purge(connection=conn)
        if self.faults_log.exists():
            self.faults_log.unlink()

    def _elapsed(self) -> float:
        return time.monotonic() - self._t0

    def _event(self, what: str, worker: str = "", **detail: Any) -> Event:
        event = Event(round(self._elapsed(), 2), what, worker, detail)
        self.events.append(event)
        log.info("chaos: %s %s %s", what, worker, detail)
        return event

    def _commands_recorded(self) -> int:
        row = db.fetchone(
            "SELECT count(*) FROM workflow_commands c JOIN workflow_runs r ON r.id = c.run_id "
            "WHERE r.definition_id = %s",
            [DEFINITION_ID],
        )
        return int(row[0]) if row else 0

    def _window_open(self) -> bool:
        if self.driver.failures:
            return False
        if self._elapsed() < self.config.window_seconds:
            return True
        if len(self.kills) < self.config.min_kills:
            return True
        return self.config.min_commands > 0 and self._commands_recorded() < self.config.min_commands

    # -- chaos -------------------------------------------------------------------------------
    def _chaos(self) -> None:
        cfg = self.config
        next_kill = cfg.kill_every
        next_other = cfg.kill_every / 2
        rotation = 0
        while self._window_open():
            now = self._elapsed()
            self._tend()
            if now >= next_kill:
                self._kill(self.fleet.workers[len(self.kills) % len(self.fleet.workers)])
                next_kill += cfg.kill_every
            elif now >= next_other:
                action = ("terminate", "freeze", "redis")[rotation % 3]
                rotation += 1
                if action == "redis" and self.redis is None:
                    action = "terminate"
                getattr(self, f"_{action}")()
                next_other += cfg.kill_every
            time.sleep(0.2)

    def _sample_backlog(self) -> None:
        if time.monotonic() - self._last_sample >= 5.0:
            self._last_sample = time.monotonic()
            self.backlog.append((round(self._elapsed(), 1), broker_backlog()))

    def _tend(self) -> None:
        """Restart what died on its own, resume self-stopped workers once their claims were
        taken away, watch the recovery of killed workers' claims."""
        self._sample_backlog()
        for name in self.fleet.supervise():
            self._event("restarted", name, reason="exited (fault point) or died")
        for worker in self.fleet.self_stopped():
            if not any(
                f["worker"] == worker.name and f.get("pid") == worker.pid and not f.get("resumed") for f in self.freezes
            ):
                self.freezes.append(self._frozen(worker, cause="fault before_settle:stop"))
        for freeze in self.freezes:
            if not freeze.get("resumed"):
                self._maybe_thaw(freeze)
        for kill in self.kills:
            if kill.get("recovered_after_s") is None:
                self._watch_recovery(kill)

    def _claims_of(self, pid: int | None) -> list[tuple[int, str]]:
        rows = db.fetchall(
            "SELECT id, token FROM workflow_commands WHERE status = 'CLAIMED' AND claimed_by LIKE %s",
            [f"%-{pid}"],
        )
        return [(int(i), str(t)) for i, t in rows]

    def _kill(self, worker: Worker) -> None:
        if not worker.alive():
            return
        # up to 2 s for a moment when the worker holds a claim, so most kills leave work behind
        # (the claims that count are read after the kill: whatever it held then)
        waited = time.monotonic() + 2.0
        while time.monotonic() < waited and worker.alive() and not self._claims_of(worker.pid):
            time.sleep(0.02)
        if not worker.alive():
            return
        pid = self.fleet.kill(worker)
        at_db = db.fetchone("SELECT clock_timestamp()")
        orphans = self._claims_of(pid)
        self.kills.append(
            {"at": round(self._elapsed(), 2), "at_db": at_db[0] if at_db else None, "worker": worker.name, "pid": pid,
             "orphans": orphans, "monotonic": time.monotonic(), "recovered_after_s": None if orphans else 0.0,
             "resumed_after_s": None if orphans else 0.0}
        )  # fmt: skip
        self._event("SIGKILL", worker.name, pid=pid, claims_held=len(orphans))
        self.fleet.start_worker(worker, wait=False)

    def _watch_recovery(self, kill: dict[str, Any]) -> None:
        """``resumed_after_s``: every command the killed worker held was claimed again by a live
        executor (or settled); ``recovered_after_s``: every one was settled."""
        ids = [i for i, _ in kill["orphans"]]
        rows = db.fetchall("SELECT id, status, token FROM workflow_commands WHERE id = ANY(%s)", [ids])
        held = dict(kill["orphans"])
        elapsed = round(time.monotonic() - kill["monotonic"], 2)
        stuck = [
            i
            for i, status, token in rows
            if status in ("PENDING", "DEFERRED") or (status == "CLAIMED" and str(token) == held[i])
        ]
        if not stuck and kill.get("resumed_after_s") is None:
            kill["resumed_after_s"] = elapsed
        if not [i for i, status, _ in rows if status in ("PENDING", "DEFERRED", "CLAIMED")]:
            kill["recovered_after_s"] = elapsed
            kill.setdefault("resumed_after_s", elapsed)

    def _compound(self, kill: dict[str, Any]) -> bool:
        """A kill is a single crash unless something else failed before its claims were taken
        again (another kill, a freeze, a fault exit), or the other worker was frozen when it
        happened: the bound is the promise for one crash."""
        end = kill["at"] + (kill["resumed_after_s"] if kill["resumed_after_s"] is not None else 1e9)
        others = [e for e in self.events if kill["at"] < e.at < end and e.what in ("SIGKILL", "frozen", "restarted")]
        overlapping = [f for f in self.freezes if f["worker"] != kill["worker"] and f.get("began", 0) < kill["at"]
                       and f.get("began", 0) + f.get("frozen_s", 1e9) > kill["at"]]  # fmt: skip
        return bool(others or overlapping)

    def _terminate(self) -> None:
        n = terminate_backends(self.database)
        self._event("pg_terminate_backend", "", connections=n)

    def _freeze(self) -> None:
        candidates = [w for w in self.fleet.workers if w.alive() and not w.frozen_by_us and w.state() != "T"]
        if not candidates:
            return
        worker = candidates[len(self.freezes) % len(candidates)]
        waited = time.monotonic() + 2.0  # as for kills: freeze it while it holds a claim, if it gets one
        while time.monotonic() < waited and worker.alive() and not self._claims_of(worker.pid):
            time.sleep(0.02)
        if not worker.alive():
            return
        self.fleet.freeze(worker)
        self.freezes.append(self._frozen(worker, cause="SIGSTOP"))

    def _frozen(self, worker: Worker, *, cause: str) -> dict[str, Any]:
        claims = self._claims_of(worker.pid)
        self._event("frozen", worker.name, cause=cause, claims_held=len(claims))
        return {"worker": worker.name, "pid": worker.pid, "cause": cause, "claims": claims,
                "monotonic": time.monotonic(), "began": round(self._elapsed(), 2),
                "resumed": False}  # fmt: skip

    def _maybe_thaw(self, freeze: dict[str, Any]) -> None:
        worker = next(w for w in self.fleet.workers if w.name == freeze["worker"])
        if worker.pid != freeze["pid"]:  # killed meanwhile: nothing to resume
            freeze["resumed"], freeze["killed_while_frozen"] = True, True
            freeze["frozen_s"] = round(time.monotonic() - freeze["monotonic"], 2)
            return
        waited = time.monotonic() - freeze["monotonic"]
        # each claim read at the freeze is, by now: still held; settled by the frozen worker's
        # own commit (it was on the wire when SIGSTOP came: its segment row carries the token);
        # or taken away (lease recovered, run again by someone else)
        held, taken = [], []
        for command_id, token in freeze["claims"]:
            row = db.fetchone(
                "SELECT c.status = 'CLAIMED' AND c.token = %s::uuid, EXISTS (SELECT 1 FROM workflow_segment_log s "
                "WHERE s.command_id = c.id AND s.token = %s::uuid) FROM workflow_commands c WHERE c.id = %s",
                [token, token, command_id],
            )
            still_held, own_commit = (bool(row[0]), bool(row[1])) if row else (False, False)
            if still_held:
                held.append(token)
            elif not own_commit:
                taken.append(token)
        cfg = self.config
        if (
            (not held and taken and waited >= cfg.lease_seconds)
            or (not held and not taken and waited >= cfg.lease_seconds + cfg.sweep_seconds)
            or waited >= cfg.lease_seconds + 20
        ):
            freeze["taken_tokens"] = [] if held else taken
            freeze["claims_taken_away"] = bool(freeze["taken_tokens"])
            freeze["frozen_s"] = round(waited, 2)
            self.fleet.thaw(worker)  # SIGCONT resumes a self-stop the same way
            freeze["resumed"] = True
            self._event(
                "resumed", worker.name, frozen_s=freeze["frozen_s"], claims_taken_away=freeze["claims_taken_away"]
            )

    def _redis(self) -> None:
        assert self.redis is not None
        away = restart_redis(*self.redis, self.workdir)
        self._event("redis restarted (nothing persisted)", "", away_s=round(away, 2))

    def _release_everything(self) -> None:
        """End of the window: resume every frozen worker, restart every dead one."""
        for freeze in self.freezes:
            if not freeze.get("resumed"):
                worker = next(w for w in self.fleet.workers if w.name == freeze["worker"])
                if worker.pid == freeze["pid"]:
                    self.fleet.thaw(worker)
                    freeze["frozen_s"] = round(time.monotonic() - freeze["monotonic"], 2)
                    freeze["claims_taken_away"] = False
                freeze["resumed"] = True
        for worker in self.fleet.workers:
            if worker.state() == "T":
                self.fleet.thaw(worker)
        self.fleet.supervise()

    def _quiesce(self) -> tuple[bool, float]:
        """Keep the runs moving (no new starts, no chaos) until every run ended and nothing is
        left to run or deliver; then ``await_idle`` once more."""
        from workflows import operations

        began = time.monotonic()
        deadline = began + self.config.quiesce_timeout
        while time.monotonic() < deadline:
            self._tend()
            row = db.fetchone(
                "SELECT (SELECT count(*) FROM workflow_runs WHERE definition_id = %s AND status NOT IN "
                "('COMPLETED','CANCELLED','FAILED','COMPENSATED','EXPIRED')), (SELECT count(*) FROM workflow_outbox "
                "WHERE status IN ('PENDING','DELIVERING')), (SELECT count(*) FROM workflow_commands WHERE status IN "
                "('PENDING','DEFERRED','CLAIMED'))",
                [DEFINITION_ID],
            )
            if row is not None and row == (0, 0, 0) and not self.driver.pending_late():
                report = operations.await_idle(10)
                if report.idle:
                    return True, round(time.monotonic() - began, 2)
            time.sleep(0.5)
        return False, round(time.monotonic() - began, 2)

    # -- the report --------------------------------------------------------------------------
    def _report(
        self, checks: list[invariants.Check], *, window: float, quiet: bool, quiesce_s: float, wall: float
    ) -> dict[str, Any]:
        cfg = self.config
        gaps = []
        for kill in self.kills:
            if kill["at_db"] is not None:
                row = db.fetchone(
                    "SELECT EXTRACT(EPOCH FROM min(settled_at) - %s) FROM workflow_commands WHERE settled_at > %s",
                    [kill["at_db"], kill["at_db"]],
                )
                kill["next_settlement_after_s"] = round(float(row[0]), 3) if row and row[0] is not None else None
        for kill in self.kills:
            kill["compound"] = self._compound(kill)
        single = [k for k in self.kills if k["orphans"] and not k["compound"]]
        compound = [k for k in self.kills if k["orphans"] and k["compound"]]
        recoveries = [k["recovered_after_s"] for k in single if k["recovered_after_s"] is not None]
        resumed = [k["resumed_after_s"] for k in single if k["resumed_after_s"] is not None]
        slow = [k for k in single if k["resumed_after_s"] is None or k["resumed_after_s"] > cfg.recovery_bound]
        gaps = [k.get("next_settlement_after_s") for k in self.kills if k.get("next_settlement_after_s") is not None]
        faults = _count_faults(self.faults_log)
        stale_resumes = [f for f in self.freezes if f.get("claims_taken_away")]
        stale_tokens = [t for f in stale_resumes for t in f.get("taken_tokens", [])]
        refused = _tokens_refused(stale_tokens)
        recovery = invariants.Check(
            f"recovery within lease + sweep + 5 s ({cfg.recovery_bound:.0f} s)",
            len(slow),
            [k["worker"] + "@" + str(k["at"]) for k in slow],
            {"single_crashes_with_claims": len(single),
             "claims_taken_again_max_s": max(resumed, default=0.0),
             "claims_settled_max_s": max(recoveries, default=0.0),
             "next_settlement_after_kill_max_s": max(gaps, default=0.0),
             "compound_crashes_with_claims": len(compound),
             "compound_claims_taken_again_max_s": max((k["resumed_after_s"] or 0.0 for k in compound), default=0.0)},
        )  # fmt: skip
        frozen = invariants.Check(
            "a frozen worker's writes are refused once its claim is taken away",
            refused["committed"],
            refused["examples"],
            {"freezes": len(self.freezes), "resumed_with_claims_taken_away": len(stale_resumes),
             "stale_claims": len(stale_tokens)},
        )  # fmt: skip
        others = [
            invariants.Check("the system went quiet (every run ended, nothing left to run)", 0 if quiet else 1, [],
                             {"quiesce_s": quiesce_s}),
            invariants.Check(
                "the driver ran without unexpected errors", len(self.driver.failures), self.driver.failures
            ),
        ]  # fmt: skip
        all_checks = [*checks, recovery, frozen, *others]
        diagnostics = {} if all(c.ok for c in all_checks) else _diagnostics()
        commands = self._commands_recorded()
        return {
            "ok": all(c.ok for c in all_checks),
            "mode": cfg.mode,
            "config": asdict(cfg),
            "broker": _broker_kind(),
            "redis_restarts": "enabled" if self.redis else "skipped (broker is not a Redis this harness may restart)",
            "window_s": round(window, 1),
            "wall_s": round(wall, 1),
            "commands": commands,
            "runs": len(self.driver.started_runs),
            "kills": len(self.kills),
            "broker_backlog": self.backlog,
            "faults_fired": faults,
            "ledger": self.ledger.counts(),
            "retryable_errors_seen_by_driver": dict(self.ledger.errors),
            "checks": {c.name: c.as_dict() for c in all_checks},
            "events": [asdict(e) for e in self.events],
            "kill_details": [_public(kill, "orphans") for kill in self.kills],
            "diagnostics": diagnostics,
            "freeze_details": [_public(freeze, "claims") for freeze in self.freezes],
        }  # fmt: skip


def _public(record: dict[str, Any], claims: str) -> dict[str, Any]:
    """A kill or freeze for the report: what happened and how many claims it held (not tokens)."""
    kept = {k: v for k, v in record.items() if k not in (claims, "monotonic", "at_db", "taken_tokens")}
    return {**kept, "claims_held": len(record[claims])}


def broker_backlog() -> int | None:
    """Messages waiting in the broker's default queue (None when it cannot be read)."""
    from django.conf import settings

    url = str(settings.CELERY_BROKER_URL)
    try:
        if url.startswith("filesystem://"):
            folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
            return sum(1 for _ in folder.iterdir())
        if url.startswith("redis://"):
            import redis

            return int(redis.Redis.from_url(url).llen("celery"))
    except Exception:
        return None
    return None


def _diagnostics() -> dict[str, Any]:
    """What was left when a check failed: ids, statuses and timings, never values."""
    return {
        "unsettled_commands": db.fetchdicts(
            "SELECT c.id, c.run_id::text, c.kind, c.timer_kind, c.status, c.attempts, c.transient_count, "
            "split_part(c.last_error, ':', 1) AS last_error, EXTRACT(EPOCH FROM c.available_at - now()) AS due_in_s, "
            "EXTRACT(EPOCH FROM c.lease_until - now()) AS lease_left_s, r.status AS run_status "
            "FROM workflow_commands c JOIN workflow_runs r ON r.id = c.run_id "
            "WHERE c.status IN ('PENDING','DEFERRED','CLAIMED','PARKED') ORDER BY c.id LIMIT 50"
        ),
        "undelivered_intents": db.fetchdicts(
            "SELECT id, kind, status, attempts, split_part(last_error, ':', 1) AS last_error, "
            "EXTRACT(EPOCH FROM available_at - now()) AS due_in_s, "
            "EXTRACT(EPOCH FROM lease_until - now()) AS lease_left_s "
            "FROM workflow_outbox WHERE status <> 'DELIVERED' ORDER BY id LIMIT 50"
        ),
        "live_runs": db.fetchdicts(
            "SELECT id::text, status, current_step, open_signals FROM workflow_runs WHERE status NOT IN "
            "('COMPLETED','CANCELLED') ORDER BY created_at LIMIT 50"
        ),
    }


def _count_faults(path: Path) -> dict[str, int]:
    if not path.exists():
        return {}
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            counts[f"{parts[1]}:{parts[2]}"] = counts.get(f"{parts[1]}:{parts[2]}", 0) + 1
    return counts


def _tokens_refused(tokens: list[str]) -> dict[str, Any]:
    """Committed segments under tokens whose claims were taken away while frozen: must be 0."""
    if not tokens:
        return {"committed": 0, "examples": []}
    rows = db.fetchall("SELECT command_id FROM workflow_segment_log WHERE token = ANY(%s::uuid[])", [tokens])
    return {"committed": len(rows), "examples": [r[0] for r in rows]}


def _broker_kind() -> str:
    url = os.environ.get("CELERY_BROKER_URL", "")
    return url.split("://", 1)[0] if url else "filesystem"


def write_report(report: dict[str, Any], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{report['mode']}.json"
    path.write_text(json.dumps(report, indent=2, default=str))
    return path
