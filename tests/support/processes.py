"""Real Celery worker and beat processes for end-to-end tests, and process-tree helpers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name is in parentheses and may hold spaces: split after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def is_alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children, grandchildren, ...)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[0] not in ("Z", "X"):
                parents[int(entry.name)] = stat[1]
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        children = {child for child, parent in parents.items() if parent in frontier} - found
        found |= children
        frontier = children
    return found


def stop_process_group(proc: subprocess.Popen[bytes], *, grace: float = 15.0) -> None:
    """SIGTERM the leader (Celery then stops its own pool), wait ``grace`` seconds, then
    SIGKILL whatever is left in the process group."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # pool children that outlived their parent
    except ProcessLookupError:
        pass
    proc.wait()


class CeleryProcesses:
    """A real Celery worker (prefork, 2 processes) and beat, on the suite's broker and test DB.

    ``env`` must point the children at the test database (``SWITCHYARD_DB_NAME``); the broker
    is whatever the settings choose (filesystem under ``SWITCHYARD_DATA_DIR``, or
    ``CELERY_BROKER_URL``). Each process runs in its own process group so a kill takes its
    pool children with it.
    """

    READY_TIMEOUT = 90.0

    def __init__(
        self,
        env: dict[str, str],
        workdir: Path,
        *,
        concurrency: int = 2,
        pool: str = "prefork",
        queue: str = "",
        outbound: bool | None = None,
    ) -> None:
        self.env = env
        self.workdir = workdir
        self.concurrency = concurrency
        self.pool = pool  # "solo": the worker process runs the tasks itself
        self.queue = queue  # consume this queue only (default: the app's default queue)
        # a second worker on the outbound queue (deliveries: webhooks, service calls, notices),
        # as production runs one (docs/operations.md); by default with a worker of the default
        # queue, whose deliveries it serves. Its queue: WORKFLOWS_OUTBOUND_QUEUE of ``env``.
        self.outbound = (not queue) if outbound is None else outbound
        self.worker: subprocess.Popen[bytes] | None = None
        self.outbound_worker: subprocess.Popen[bytes] | None = None
        self.beat: subprocess.Popen[bytes] | None = None
        self.worker_log: Path | None = None
        self.beat_log: Path | None = None
        self._starts = 0
        self._outbound_starts = 0

    @property
    def outbound_queue(self) -> str:
        return self.env.get("WORKFLOWS_OUTBOUND_QUEUE") or "switchyard.outbound"

    # -- worker ---------------------------------------------------------------------------
    def start_worker(self) -> None:
        assert self.worker is None or self.worker.poll() is not None, "the worker is already running"
        self._starts += 1
        self.worker_log = self.workdir / f"worker-{self._starts}.log"
        argv = [
            sys.executable, "-m", "celery", "-A", "config", "worker",
            "--loglevel", "info",
            "--pool", self.pool, "--concurrency", str(self.concurrency),
            "--hostname", f"test-worker-{os.getpid()}-{self._starts}@%h",
            "--include", "tests.support.celery_tasks",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        if self.queue:
            argv += ["--queues", self.queue]
        self.worker = self._spawn(argv, self.worker_log, "test-worker")
        self._wait_for(self.worker, self.worker_log, " ready.", "the Celery worker")
        if self.outbound and (self.outbound_worker is None or self.outbound_worker.poll() is not None):
            self.start_outbound_worker()

    def start_outbound_worker(self) -> None:
        """The worker of the outbound queue (prefork, 2 processes), never the executor's."""
        self._outbound_starts += 1
        log = self.workdir / f"outbound-worker-{self._outbound_starts}.log"
        argv = [
            sys.executable, "-m", "celery", "-A", "config", "worker",
            "--loglevel", "info", "--pool", "prefork", "--concurrency", "2",
            "--hostname", f"test-outbound-{os.getpid()}-{self._outbound_starts}@%h",
            "--queues", self.outbound_queue,
            "--include", "tests.support.celery_tasks",
            # messages left by earlier sessions are for rows that no longer exist (the first
            # start only: after a kill, the queued messages are this session's)
            *(["--purge"] if self._outbound_starts == 1 else []),
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        self.outbound_worker = self._spawn(argv, log, "test-outbound-worker")
        self._wait_for(self.outbound_worker, log, " ready.", "the outbound Celery worker")

    def kill_worker(self) -> None:
        """SIGKILL the worker and its pool: no warm shutdown, no ack, no cleanup."""
        assert self.worker is not None
        try:
            os.killpg(self.worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.worker.wait()

    def kill_outbound_worker(self, *, restart: bool = True) -> None:
        """SIGKILL the outbound worker and its pool (a delivery in flight is lost with it),
        then start a new one unless ``restart`` is false."""
        assert self.outbound_worker is not None
        try:
            os.killpg(self.outbound_worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.outbound_worker.wait()
        if restart:
            self.start_outbound_worker()

    def restart_worker(self) -> None:
        self.kill_worker()
        self.start_worker()

    @property
    def worker_running(self) -> bool:
        return self.worker is not None and self.worker.poll() is None

    # -- beat -----------------------------------------------------------------------------
    def start_beat(self) -> None:
        self.beat_log = self.workdir / "beat.log"
        argv = [
            sys.executable, "-m", "celery", "-A", "config", "beat",
            "--loglevel", "info", "--schedule", str(self.workdir / "beat-schedule"),
        ]  # fmt: skip
        self.beat = self._spawn(argv, self.beat_log, "test-beat")
        self._wait_for(self.beat, self.beat_log, "beat: Starting...", "Celery beat")

    def stop_beat(self) -> None:
        """Stop beat: no sweep is sent until ``start_beat()`` (a test that must tell a wake-up's
        work from the sweep's)."""
        if self.beat is not None:
            stop_process_group(self.beat)
            self.beat = None

    # -- both -----------------------------------------------------------------------------
    def stop(self) -> None:
        for proc in (self.beat, self.worker, self.outbound_worker):
            if proc is not None:
                stop_process_group(proc)

    def logs(self) -> str:
        """The worker's and beat's output so far (for assertion messages)."""
        parts = []
        for path in sorted(self.workdir.glob("*.log")):
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')}")
        return "\n".join(parts)

    def _spawn(self, argv: list[str], log: Path, name: str) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen(
                argv,
                cwd=ROOT,
                env={**self.env, "SWITCHYARD_PROCESS": name, "PYTHONUNBUFFERED": "1"},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _wait_for(self, proc: subprocess.Popen[bytes], log: Path, marker: str, what: str) -> None:
        deadline = time.monotonic() + self.READY_TIMEOUT
        while marker not in log.read_text(errors="replace"):
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready:\n{self.logs()}")
            if time.monotonic() > deadline:
                stop_process_group(proc, grace=2)
                raise RuntimeError(f"{what} was not ready after {self.READY_TIMEOUT:.0f}s:\n{self.logs()}")
            time.sleep(0.1)
