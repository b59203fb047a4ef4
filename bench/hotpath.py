"""Our approval workflow through the real system: ``workflows.operations`` in this process,
two Celery worker processes and beat on the machine's PostgreSQL and Redis, and the task
completions from a separate process (``run.py --role completer``).

The workflow (the same shape as the peer's): start → service step (an outbox intent that a
worker delivers to a registered handler) → human task → the completion → done.

Everything here runs in the bench process after ``django.setup()`` on the bench database.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import measure

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent

DEFINITION_ID = "bench-approval"
APPROVAL = """
definitionId: bench-approval
definitionVersion: 1
contract: {name: bench.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: order
steps:
  - {id: order, type: service, target: shop.order_goods, next: review}
  - id: review
    type: human-task
    title: Review
    assignment: {mode: group, value: approvers}
    decisions: [{name: approve, next: done}]
  - {id: done, type: complete}
"""


def deploy() -> None:
    from workflows import definitions

    ref = definitions.load(scope="default", text=APPROVAL, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")


# --- the worker processes -----------------------------------------------------------------


@dataclass
class Workers:
    """Two worker processes (two ``solo`` workers) or one prefork worker with two children, plus beat."""

    env: dict[str, str]
    pool: str
    logdir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    beat: subprocess.Popen[bytes] | None = None

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.logdir / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        env = {**self.env, "SWITCHYARD_PROCESS": f"bench-{name}"}
        return subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def start(self) -> None:
        celery = [sys.executable, "-m", "celery", "-A", "config"]
        common = ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING"]
        if self.pool == "solo":
            for i in (1, 2):
                self.procs.append(
                    self._spawn(f"worker{i}", [*celery, "worker", "--pool=solo", "-n", f"bench{i}@%h", *common])
                )
        else:
            self.procs.append(
                self._spawn("worker", [*celery, "worker", "--pool=prefork", "-c", "2", "-n", "bench@%h", *common])
            )
        schedule = self.logdir / "celerybeat-schedule"
        self.beat = self._spawn("beat", [*celery, "beat", "-l", "WARNING", "-s", str(schedule)])

    @property
    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    @property
    def all_pids(self) -> list[int]:
        return [*self.worker_pids, *([self.beat.pid] if self.beat else [])]

    def rss_mb(self) -> list[float]:
        return [measure.tree_rss_mb(pid) for pid in self.worker_pids]

    def stop(self) -> None:
        procs = [*self.procs, *([self.beat] if self.beat else [])]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: the worker and its pool only
                proc.wait(timeout=10)
        self.procs.clear()
        self.beat = None


# --- starting runs (this process) ---------------------------------------------------------


class Starter:
    """Threads that call ``operations.start``; they live as long as the bench, so their
    connections (and PostgreSQL backends) stay open for the CPU samples."""

    def __init__(self, threads: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="starter")
        self.threads = threads

    def start(self, n: int, tag: str) -> None:
        from workflows import operations

        def one(i: int) -> None:
            operations.start(definition_id=DEFINITION_ID, payload={"i": i}, business_key=f"{tag}-{i}")

        list(self.pool.map(one, range(n)))

    def close(self) -> None:
        from django.db import connections

        def close_connection(_: int) -> None:
            connections.close_all()

        list(self.pool.map(close_connection, range(self.threads)))
        self.pool.shutdown()


def _wait(probe: measure.Probe, what: str, sql: str, params: tuple[Any, ...], target: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pause = 0.02
    while True:
        got = int(probe.scalar(sql, params))  # type: ignore[call-overload]
        if got >= target:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out waiting for {what} ({got}/{target}); see the worker logs")
        time.sleep(pause)
        pause = min(0.05, pause * 1.2)


WAITING_SQL = (
    "SELECT count(*) FROM workflow_runs r WHERE r.business_key LIKE %s AND r.status = 'WAITING' "
    "AND NOT EXISTS (SELECT 1 FROM workflow_outbox o WHERE o.run_id = r.id AND o.status <> 'DELIVERED')"
)
DONE_SQL = "SELECT count(*) FROM workflow_runs WHERE business_key LIKE %s AND status = 'COMPLETED'"


def wait_waiting(probe: measure.Probe, tag: str, n: int, timeout: float) -> float:
    """Until every run of ``tag`` waits for its task and its service intent is delivered;
    answers that moment on the database clock (the later of both)."""
    _wait(probe, f"{tag} runs to wait for their tasks", WAITING_SQL, (f"{tag}-%",), n, timeout)
    row = probe.rows(
        "SELECT extract(epoch FROM max(r.updated_at)), extract(epoch FROM max(o.delivered_at)) "
        "FROM workflow_runs r LEFT JOIN workflow_outbox o ON o.run_id = r.id WHERE r.business_key LIKE %s",
        (f"{tag}-%",),
    )[0]
    return max(float(v) for v in row if v is not None)  # type: ignore[arg-type]


def wait_done(probe: measure.Probe, tag: str, n: int, timeout: float) -> None:
    _wait(probe, f"{tag} runs to complete", DONE_SQL, (f"{tag}-%",), n, timeout)


# --- completing tasks (a separate process) -------------------------------------------------


class Completer:
    """``run.py --role completer`` in its own process: it reads the open tasks of a tag,
    says it is ready, completes them on "go" (burst or paced) and keeps its connections
    open until told to exit, so its backends are still there for the CPU sample."""

    def __init__(self, env: dict[str, str], tag: str, rate: float, threads: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="switchyard-bench-"))
        argv = [
            sys.executable,
            str(BENCH / "run.py"),
            "--role",
            "completer",
            "--tag",
            tag,
            "--rate",
            str(rate),
            "--threads",
            str(threads),
            "--sync-dir",
            str(self.dir),
        ]
        self.proc = subprocess.Popen(argv, cwd=ROOT, env={**env, "SWITCHYARD_PROCESS": "bench-completer"})
        self.pid = self.proc.pid

    def wait_ready(self, timeout: float = 120.0) -> int:
        deadline = time.monotonic() + timeout
        while not (self.dir / "ready").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("bench: the completer process did not get ready")
            time.sleep(0.01)
        return int((self.dir / "ready").read_text())

    def go(self) -> None:
        (self.dir / "go").touch()

    def result(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not (self.dir / "sent.json").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("bench: the completer process failed")
            time.sleep(0.01)
        time.sleep(0.05)
        return dict(json.loads((self.dir / "sent.json").read_text()))

    def finish(self) -> None:
        (self.dir / "exit").touch()
        try:
            self.proc.wait(timeout=30)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def completer_main(tag: str, rate: float, threads: int, sync_dir: Path) -> None:
    """The completer role (its own process; Django is set up on the bench database)."""
    from django.db import connection, connections

    from workflows import operations

    with connection.cursor() as cur:
        cur.execute(
            "SELECT t.id FROM workflow_tasks t JOIN workflow_runs r ON r.id = t.run_id "
            "WHERE t.status = 'OPEN' AND r.business_key LIKE %s ORDER BY r.created_at",
            [f"{tag}-%"],
        )
        task_ids = [row[0] for row in cur.fetchall()]
    sent: dict[str, float] = {}
    lock = threading.Lock()

    pool = ThreadPoolExecutor(max_workers=threads)
    # connect every thread before "go" (connection set-up is not part of the measurement)
    list(pool.map(lambda _: connection.ensure_connection(), range(threads * 4)))
    (sync_dir / "ready").write_text(str(len(task_ids)))
    while not (sync_dir / "go").exists():
        time.sleep(0.002)
    t0 = time.time()
    cpu0 = measure.self_cpu_seconds()

    def one(k: int) -> None:
        if rate > 0:
            delay = t0 + k / rate - time.time()
            if delay > 0:
                time.sleep(delay)
        stamp = time.time()
        operations.complete_task(task_id=task_ids[k], decision="approve")
        with lock:
            sent[str(task_ids[k])] = stamp

    list(pool.map(one, range(len(task_ids))))
    cpu = measure.self_cpu_seconds() - cpu0
    wall = time.time() - t0
    (sync_dir / "sent.json.tmp").write_text(json.dumps({"sent": sent, "cpu_s": cpu, "wall_s": wall}))
    os.replace(sync_dir / "sent.json.tmp", sync_dir / "sent.json")
    deadline = time.monotonic() + 300
    while not (sync_dir / "exit").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    list(pool.map(lambda _: connections.close_all(), range(threads * 4)))
    pool.shutdown()


# --- the measured phases -------------------------------------------------------------------


@dataclass
class Context:
    env: dict[str, str]  # the environment of the workers and the completer
    probe: measure.Probe
    workers: Workers
    starter: Starter
    sender_threads: int
    timeout: float
    idle_pct: float
    idle_wait_s: float
    profile_dir: Path | None = None


class Profiler:
    """py-spy attached to the worker processes for a phase (collapsed stacks per worker)."""

    def __init__(self, pids: list[int], out: Path | None) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if out is None:
            return
        if not Path(spy).exists():
            spy = str(Path(os.environ.get("TMPDIR") or "/tmp") / "perfvenv" / "bin" / "py-spy")
        out.mkdir(parents=True, exist_ok=True)
        for pid in pids:
            self.procs.append(
                subprocess.Popen(
                    [
                        spy,
                        "record",
                        "--pid",
                        str(pid),
                        "--rate",
                        "200",
                        "--format",
                        "raw",
                        "--subprocesses",
                        "--gil",  # samples that hold the GIL: Python work, not waits on the network
                        "--output",
                        str(out / f"worker-{pid}.txt"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        time.sleep(1.0)

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            proc.wait(timeout=60)


def warm_up(ctx: Context, n: int = 20) -> None:
    """A few runs end to end: the workers are up, connections and plan caches are warm."""
    from workflows import operations

    ctx.starter.start(n, "warm")
    wait_waiting(ctx.probe, "warm", n, timeout=120)
    rows = ctx.probe.rows(
        "SELECT t.id FROM workflow_tasks t JOIN workflow_runs r ON r.id = t.run_id "
        "WHERE t.status = 'OPEN' AND r.business_key LIKE 'warm-%%'"
    )
    for (task_id,) in rows:
        operations.complete_task(task_id=task_id, decision="approve")
    wait_done(ctx.probe, "warm", n, timeout=60)


def throughput(ctx: Context, n: int, tag: str = "tp") -> dict[str, Any]:
    """Burst: start N runs until all wait (phase 1), complete all tasks (phase 2). ``tag``
    names the runs of this round (their business keys)."""
    probe = ctx.probe
    busy_before = measure.wait_idle(ctx.idle_pct, ctx.idle_wait_s)
    xacts0, xid0 = probe.xact_commit(), probe.xid()
    own0 = probe.own_xacts
    profiler = Profiler(ctx.workers.worker_pids, ctx.profile_dir)
    pg = measure.BackendCpu(probe)
    pg.begin()
    w0, c0, m0 = (
        measure.tree_cpu_seconds(ctx.workers.all_pids),
        measure.self_cpu_seconds(),
        measure.machine_busy_seconds(),
    )
    t_start = time.time()
    ctx.starter.start(n, tag)
    t_started = time.time()
    t_waiting = wait_waiting(probe, tag, n, ctx.timeout)
    w1, c1, m1 = (
        measure.tree_cpu_seconds(ctx.workers.all_pids),
        measure.self_cpu_seconds(),
        measure.machine_busy_seconds(),
    )
    pg1 = pg.end()
    wall1 = time.time() - t_start

    completer = Completer(ctx.env, tag, 0.0, ctx.sender_threads)
    ready = completer.wait_ready()
    if ready != n:
        raise SystemExit(f"bench: {ready} open tasks, expected {n}")
    pg.begin()
    w2, m2 = measure.tree_cpu_seconds(ctx.workers.all_pids), measure.machine_busy_seconds()
    t_go = time.time()
    completer.go()
    wait_done(probe, tag, n, ctx.timeout)
    w3, m3 = measure.tree_cpu_seconds(ctx.workers.all_pids), measure.machine_busy_seconds()
    pg3 = pg.end()
    wall2 = time.time() - t_go
    sent = completer.result(ctx.timeout)
    completer.finish()
    profiler.stop()
    xacts1, xid1 = probe.xact_commit(), probe.xid()
    own = probe.own_xacts - own0

    last_done = float(
        probe.scalar(  # type: ignore[arg-type]
            "SELECT extract(epoch FROM max(ended_at)) FROM workflow_runs WHERE business_key LIKE %s", (f"{tag}-%",)
        )
    )
    first_send = min(sent["sent"].values())
    phase1 = t_waiting - t_start
    phase2 = last_done - first_send
    client_s = (c1 - c0) + sent["cpu_s"]
    workers_s = (w1 - w0) + (w3 - w2)
    pg_s = pg1 + pg3
    return {
        "n": n,
        "phase1_start_to_waiting_s": round(phase1, 3),
        "phase1_start_calls_s": round(t_started - t_start, 3),
        "phase1_runs_per_s": round(n / phase1, 1),
        "phase2_first_completion_to_last_done_s": round(phase2, 3),
        "phase2_runs_per_s": round(n / phase2, 1),
        "end_to_end_runs_per_s": round(n / (phase1 + phase2), 1),
        "cpu_ms_per_run": {
            "client": round(client_s * 1000 / n, 2),
            "client_starts": round((c1 - c0) * 1000 / n, 2),
            "client_completions": round(sent["cpu_s"] * 1000 / n, 2),
            "workers": round(workers_s * 1000 / n, 2),
            "postgres_backends": round(pg_s * 1000 / n, 2),
            "total": round((client_s + workers_s + pg_s) * 1000 / n, 2),
            "machine_total": round(((m1 - m0) + (m3 - m2)) * 1000 / n, 2),
        },
        # each phase alone: where a phase's CPU goes (phase 2's client is the completer)
        "cpu_ms_per_run_by_phase": {
            "phase1": {
                "client": round((c1 - c0) * 1000 / n, 2),
                "workers": round((w1 - w0) * 1000 / n, 2),
                "postgres_backends": round(pg1 * 1000 / n, 2),
                "machine_total": round((m1 - m0) * 1000 / n, 2),
            },
            "phase2": {
                "client": round(sent["cpu_s"] * 1000 / n, 2),
                "workers": round((w3 - w2) * 1000 / n, 2),
                "postgres_backends": round(pg3 * 1000 / n, 2),
                "machine_total": round((m3 - m2) * 1000 / n, 2),
            },
        },
        "transactions_per_run": round((xacts1 - xacts0 - own) / n, 2),
        "xids_per_run_cluster_wide": round((xid1 - xid0 - 1) / n, 2),
        "machine_busy_pct_before": round(busy_before, 1),
        "machine_busy_pct_during": round(100 * ((m1 - m0) + (m3 - m2)) / ((wall1 + wall2) * (os.cpu_count() or 1)), 1),
    }


def latency(ctx: Context, n: int, rate: float) -> dict[str, Any]:
    """Paced: N runs wait for their tasks; the completer completes them at ``rate``/s."""
    tag = "lat"
    probe = ctx.probe
    ctx.starter.start(n, tag)
    wait_waiting(probe, tag, n, ctx.timeout)
    completer = Completer(ctx.env, tag, rate, ctx.sender_threads)
    completer.wait_ready()
    busy_before = measure.wait_idle(ctx.idle_pct, ctx.idle_wait_s)
    completer.go()
    wait_done(probe, tag, n, ctx.timeout + n / rate)
    sent = completer.result(ctx.timeout)
    completer.finish()
    rows = probe.rows(
        "SELECT t.id::text, extract(epoch FROM c.recorded_at), extract(epoch FROM r.ended_at) "
        "FROM workflow_tasks t JOIN workflow_runs r ON r.id = t.run_id "
        "JOIN workflow_commands c ON c.task_id = t.id AND c.kind = 'COMPLETION' WHERE r.business_key LIKE %s",
        (f"{tag}-%",),
    )
    from_send = [(float(ended) - sent["sent"][tid]) * 1000 for tid, _, ended in rows]  # type: ignore[arg-type]
    from_record = [(float(ended) - float(rec)) * 1000 for _, rec, ended in rows]  # type: ignore[arg-type]
    # the slowest completions' commands, to tell a slow segment from a wake-up that did not
    # run its command (then the sweep ran it, 2-4 s later) or a retried attempt
    slowest = probe.rows(
        "SELECT round(extract(epoch FROM r.ended_at - c.recorded_at) * 1000)::int, c.attempts, c.claimed_by, "
        "left(c.last_error, 60), round(extract(epoch FROM c.settled_at - c.recorded_at) * 1000)::int "
        "FROM workflow_runs r JOIN workflow_commands c ON c.run_id = r.id AND c.kind = 'COMPLETION' "
        "WHERE r.business_key LIKE %s ORDER BY r.ended_at - c.recorded_at DESC LIMIT 5",
        (f"{tag}-%",),
    )
    return {
        "n": n,
        "rate_per_s": rate,
        "completion_to_done_ms": measure.summary_ms(from_send),
        "recorded_at_to_ended_at_ms": measure.summary_ms(from_record),
        "slowest": [
            {"ms": ms, "attempts": attempts, "claimed_by": by, "last_error": error, "settled_after_ms": settled}
            for ms, attempts, by, error, settled in slowest
        ],
        "machine_busy_pct_before": round(busy_before, 1),
    }


def soak(ctx: Context, commands: int, batch: int) -> dict[str, Any]:
    """Worker memory while the workers run ``commands`` more commands (2 per run: START and
    COMPLETION, plus one delivered intent), RSS sampled after every batch."""
    from workflows import operations

    samples: list[dict[str, Any]] = [{"commands": 0, "rss_mb": ctx.workers.rss_mb()}]
    runs = max(1, commands // 2)
    done = 0
    k = 0
    while done < runs:
        size = min(batch, runs - done)
        tag = f"soak{k}"
        ctx.starter.start(size, tag)
        wait_waiting(ctx.probe, tag, size, ctx.timeout)
        rows = ctx.probe.rows(
            "SELECT t.id FROM workflow_tasks t JOIN workflow_runs r ON r.id = t.run_id "
            "WHERE t.status = 'OPEN' AND r.business_key LIKE %s",
            (f"{tag}-%",),
        )
        ids = [r[0] for r in rows]
        list(ctx.starter.pool.map(lambda t: operations.complete_task(task_id=t, decision="approve"), ids))
        wait_done(ctx.probe, tag, size, ctx.timeout)
        done += size
        k += 1
        samples.append({"commands": done * 2, "rss_mb": ctx.workers.rss_mb()})
    first = samples[1]["rss_mb"] if len(samples) > 1 else samples[0]["rss_mb"]
    last = samples[-1]["rss_mb"]
    return {
        "commands": done * 2,
        "samples": samples,
        "growth_after_first_batch_mb": [round(b - a, 1) for a, b in zip(first, last, strict=True)],
    }
