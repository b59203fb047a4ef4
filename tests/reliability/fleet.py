"""The harness's processes: two Celery workers (``--pool solo``: the worker process is the
executor, so a SIGKILL kills the executor mid-whatever), the outbound queue's worker (the
deliveries the executor's workers do not make themselves, issue #40) and one beat, each in its
own process group, plus the disruptions the chaos schedule applies to the executor's workers.

Only processes this module started are ever signalled, by their pid; database backends are
terminated only when they serve this fleet (``application_name`` and database both match).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from tests.support.processes import ROOT, is_alive, stop_process_group

READY_TIMEOUT = 90.0


@dataclass
class Worker:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    frozen_by_us: bool = False
    pids: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"rel-worker-{self.index}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def state(self) -> str:
        """The kernel's process state letter (R, S, D, T...), or '-' when it is gone."""
        if not self.alive():
            return "-"
        assert self.proc is not None
        try:
            raw = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except OSError:
            return "-"
        return raw[raw.rindex(")") + 2 :].split()[0]


class Fleet:
    def __init__(
        self,
        env: dict[str, str],
        workdir: Path,
        *,
        workers: int = 2,
        worker_env: dict[int, dict[str, str]] | None = None,
    ) -> None:
        self.env = env
        self.workdir = workdir
        self.workers = [Worker(i + 1) for i in range(workers)]
        self.worker_env = worker_env or {}  # per worker index: variables only that worker gets
        self.beat: subprocess.Popen[bytes] | None = None
        self.beat_starts = 0
        self.outbound: subprocess.Popen[bytes] | None = None
        self.outbound_starts = 0

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.start_beat()
        self.start_outbound()
        for worker in self.workers:
            self.start_worker(worker)

    def stop(self) -> None:
        for worker in self.workers:
            if worker.proc is not None:
                self.thaw(worker)
                stop_process_group(worker.proc, grace=10)
        if self.beat is not None:
            stop_process_group(self.beat, grace=5)
        if self.outbound is not None:
            stop_process_group(self.outbound, grace=10)

    def start_worker(self, worker: Worker, *, wait: bool = True) -> None:
        assert not worker.alive(), "the worker is running"
        worker.starts += 1
        worker.frozen_by_us = False
        log = self.workdir / f"{worker.name}-{worker.starts}.log"
        argv = [
            sys.executable, "-m", "celery", "-A", "config", "worker",
            "--loglevel", "info", "--pool", "solo",
            "--hostname", f"{worker.name}-{os.getpid()}-{worker.starts}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        worker.proc = self._spawn(argv, log, worker.name, self.worker_env.get(worker.index))
        worker.pids.append(worker.proc.pid)
        if wait:
            self._wait_for(worker.proc, log, " ready.", worker.name)

    def start_outbound(self) -> None:
        """The outbound queue's worker (``WORKFLOWS_OUTBOUND_QUEUE``, default
        ``switchyard.outbound``); stale messages of earlier runs are purged on its first start."""
        self.outbound_starts += 1
        log = self.workdir / f"rel-outbound-{self.outbound_starts}.log"
        argv = [
            sys.executable, "-m", "celery", "-A", "config", "worker",
            "--loglevel", "info", "--pool", "solo",
            "--queues", self.env.get("WORKFLOWS_OUTBOUND_QUEUE") or "switchyard.outbound",
            "--hostname", f"rel-outbound-{os.getpid()}-{self.outbound_starts}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            *(["--purge"] if self.outbound_starts == 1 else []),
        ]  # fmt: skip
        self.outbound = self._spawn(argv, log, "rel-outbound")
        self._wait_for(self.outbound, log, " ready.", "the outbound worker")

    def start_beat(self) -> None:
        self.beat_starts += 1
        log = self.workdir / f"rel-beat-{self.beat_starts}.log"
        argv = [
            sys.executable, "-m", "celery", "-A", "config", "beat",
            "--loglevel", "info", "--schedule", str(self.workdir / "beat-schedule"),
        ]  # fmt: skip
        self.beat = self._spawn(argv, log, "rel-beat")
        self._wait_for(self.beat, log, "beat: Starting...", "Celery beat")

    def supervise(self) -> list[str]:
        """Restart whatever died on its own (an ``exit`` fault, a crash). Answers what was restarted."""
        restarted = []
        for worker in self.workers:
            if worker.proc is not None and not worker.alive():
                self.start_worker(worker, wait=False)
                restarted.append(worker.name)
        if self.beat is not None and self.beat.poll() is not None:
            self.start_beat()
            restarted.append("beat")
        if self.outbound is not None and self.outbound.poll() is not None:
            self.start_outbound()
            restarted.append("outbound")
        return restarted

    # -- disruptions -------------------------------------------------------------------------
    def kill(self, worker: Worker) -> int:
        """SIGKILL the worker's process group: no warm shutdown, no ack, no rollback message."""
        assert worker.proc is not None
        pid = worker.proc.pid
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        worker.proc.wait()
        worker.frozen_by_us = False
        return pid

    def freeze(self, worker: Worker) -> None:
        if worker.alive():
            assert worker.proc is not None
            os.kill(worker.proc.pid, signal.SIGSTOP)
            worker.frozen_by_us = True

    def thaw(self, worker: Worker) -> None:
        if worker.alive():
            assert worker.proc is not None
            os.kill(worker.proc.pid, signal.SIGCONT)
        worker.frozen_by_us = False

    def self_stopped(self) -> list[Worker]:
        """Workers that stopped themselves (a ``stop`` fault) and wait for a SIGCONT."""
        return [w for w in self.workers if not w.frozen_by_us and w.state() == "T"]

    def logs(self, tail: int = 4000) -> str:
        parts = []
        for path in sorted(self.workdir.glob("*.log")):
            text = path.read_text(errors="replace")
            parts.append(f"--- {path.name}\n{text[-tail:]}")
        return "\n".join(parts)

    def _spawn(
        self, argv: list[str], log: Path, name: str, extra: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen(
                argv,
                cwd=ROOT,
                env={**self.env, **(extra or {}), "SWITCHYARD_PROCESS": name, "PYTHONUNBUFFERED": "1"},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _wait_for(self, proc: subprocess.Popen[bytes], log: Path, marker: str, what: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while marker not in log.read_text(errors="replace"):
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready:\n{self.logs()}")
            if time.monotonic() > deadline:
                stop_process_group(proc, grace=2)
                raise RuntimeError(f"{what} was not ready after {READY_TIMEOUT:.0f}s:\n{self.logs()}")
            time.sleep(0.1)


def terminate_backends(database: str, prefix: str = "rel-worker-") -> int:
    """``pg_terminate_backend`` on this fleet's database connections. Answers how many."""
    from workflows.engine import db

    rows = db.fetchall(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND application_name LIKE %s "
        "AND pid <> pg_backend_pid()",
        [database, prefix + "%"],
    )
    return sum(1 for (ok,) in rows if ok)


# --- Redis -------------------------------------------------------------------------------------


def redis_target(broker_url: str) -> tuple[str, int] | None:
    """(host, port) when the broker is a Redis on 127.0.0.1 this harness may restart, else None.

    Restarting the machine's Redis (port 6379) ends a server other sessions may be using, so
    it happens only in CI (``CI=true``) or when ``RELIABILITY_RESTART_REDIS=1`` says so; a
    Redis on another port is taken to be one started for this run.
    """
    if not broker_url.startswith("redis://"):
        return None
    parsed = urlparse(broker_url)
    if parsed.hostname not in ("127.0.0.1", "localhost"):
        return None
    port = parsed.port or 6379
    allowed = os.environ.get("CI", "").lower() == "true" or os.environ.get("RELIABILITY_RESTART_REDIS") == "1"
    if port == 6379 and not allowed:
        return None
    return "127.0.0.1", port


def restart_redis(host: str, port: int, workdir: Path) -> float:
    """``shutdown nosave`` (every queued message is lost), then start an empty server.
    Answers the seconds the broker was away."""
    began = time.monotonic()
    subprocess.run(["redis-cli", "-h", host, "-p", str(port), "shutdown", "nosave"], capture_output=True, timeout=10)
    if port == 6379:
        data_dir, logfile = "/var/lib/redis", "/var/log/redis/ci.log"
    else:
        data_dir, logfile = str(workdir), str(workdir / f"redis-{port}.log")
    subprocess.run(
        ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port", str(port), "--save", "",
         "--appendonly", "no", "--dir", data_dir, "--logfile", logfile],
        check=True, capture_output=True, timeout=10,
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pong = subprocess.run(["redis-cli", "-h", host, "-p", str(port), "ping"], capture_output=True, timeout=5)
        if pong.stdout.strip() == b"PONG":
            break
        time.sleep(0.05)
    return time.monotonic() - began


def alive(pid: int) -> bool:
    return is_alive(pid)
