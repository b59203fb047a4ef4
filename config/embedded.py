"""The embedded runtime: a local PostgreSQL (pgserver) and a server-less Celery broker.

Used only when ``DATABASE_URL`` / ``CELERY_BROKER_URL`` are not set. Every local process
(web, worker, beat, tests) calls :func:`database_url`; pgserver keeps one server per data
folder, shared by all of them through a lock file and a list of handle pids, and it detects
a stale ``postmaster.pid`` left by a crashed server before it starts a new one.
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("SWITCHYARD_DATA_DIR", BASE_DIR / ".data"))


# pgserver gives `pg_ctl -w start` 10 seconds, hard-coded. On a busy machine (a test suite on
# both cores and two more busy processes) starting the server as its own user can take longer,
# and the caller then fails although the server came up. pg_ctl itself waits up to 60 s.
START_TIMEOUT_SECONDS = 90.0


def _patient_start() -> None:
    """Give pgserver's `pg_ctl start` as long as pg_ctl's own wait (once per process)."""
    from pgserver import postgres_server

    original = postgres_server.pg_ctl
    if getattr(original, "switchyard_patient", False):
        return

    def pg_ctl(args: list[str], pgdata: Path | None = None, **kwargs: Any) -> str:
        if "start" in args and kwargs.get("timeout") is not None:
            kwargs["timeout"] = max(float(kwargs["timeout"]), START_TIMEOUT_SECONDS)
        return original(args, pgdata=pgdata, **kwargs)

    pg_ctl.switchyard_patient = True  # type: ignore[attr-defined]
    postgres_server.pg_ctl = pg_ctl


def database_settings() -> dict[str, Any]:
    """Start (or join) the embedded PostgreSQL and answer Django's connection settings."""
    # pgserver keeps its inter-process lock under the runtime folder: give every local
    # process the same one (and no warning about a missing XDG_RUNTIME_DIR).
    runtime = DATA_DIR / "run"
    runtime.mkdir(parents=True, exist_ok=True)
    runtime.chmod(0o700)  # platformdirs ignores (with a warning) a runtime dir others can read
    os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
    import pgserver  # imported lazily: production never loads it

    pgdata = (DATA_DIR / "pg").resolve()
    # Made here, not by pgserver: its exists-then-mkdir fails in the second of two processes
    # started together on a new data folder (web, worker and beat from ``dev.py run``).
    pgdata.mkdir(parents=True, exist_ok=True)
    with pgserver.PostgresServer._lock:  # no process starts or stops a server meanwhile
        _forget_stale_server(pgdata)
        if os.name == "posix" and os.geteuid() == 0:
            # As root pgserver runs the server as a user it adds itself, before it takes its
            # lock: two processes adding it together would make one of them fail.
            from pgserver.utils import ensure_user_exists

            ensure_user_exists("pgserver")
    _patient_start()
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    # Registered after pgserver's own exit hook, so it runs first (atexit is last-in,
    # first-out): the last live process then really is the last handle and stops the server.
    atexit.register(_forget_dead_handles, server)
    info = server.get_postmaster_info()
    socket_dir = info.socket_dir
    if socket_dir is None:  # pragma: no cover - pgserver always uses a socket on Linux
        raise RuntimeError("embedded PostgreSQL did not report a socket directory")
    if os.environ.get("SWITCHYARD_EMBEDDED_DURABLE", "1") == "0":
        _relax_durability(pgdata, str(socket_dir))
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        "HOST": str(socket_dir),
        "PORT": "",
    }


def _forget_stale_server(pgdata: Path) -> None:
    """Remove the record (``postmaster.pid`` and the socket's lock file) of a server that is
    gone, so that pgserver starts a new one.

    pgserver, and PostgreSQL itself, take the record for a running server as long as its pid
    exists. After a crash that pid can be a zombie nobody reaps yet (a container's init), or
    after a reboot another program's: pgserver would then join a server that is not there
    (every connection refused) and, at exit, terminate that program. Only a live
    ``postgres`` process started on this folder is the server.
    """
    record = pgdata / "postmaster.pid"
    try:
        lines = record.read_text().splitlines()
        pid, port, socket_dir = int(lines[0]), lines[3].strip(), lines[4].strip()
    except (FileNotFoundError, ValueError, IndexError):  # no record, or one pgserver rejects
        return
    import psutil

    try:
        server = psutil.Process(pid)
        if server.status() != psutil.STATUS_ZOMBIE and server.name() == "postgres" and str(pgdata) in server.cmdline():
            return
    except psutil.NoSuchProcess:
        pass
    except psutil.AccessDenied:  # cannot tell: leave the record to PostgreSQL's own check
        return
    if socket_dir:
        (Path(socket_dir) / f".s.PGSQL.{port}.lock").unlink(missing_ok=True)
    record.unlink(missing_ok=True)


def _relax_durability(pgdata: Path, socket_dir: str) -> None:
    """For throw-away data only (``dev.py test``): no fsync, no synchronous commit.

    Transactional tests TRUNCATE every table after each test; with crash safety on, those
    fsyncs take about half the suite's time. Row locks, SKIP LOCKED and advisory locks
    behave exactly the same. The three settings take effect on reload, no restart.
    """
    auto_conf = pgdata / "postgresql.auto.conf"
    if "fsync = 'off'" in auto_conf.read_text():
        return
    import psycopg

    with psycopg.connect(host=socket_dir, dbname="postgres", user="postgres", autocommit=True) as conn:
        for name in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(f"ALTER SYSTEM SET {name} = 'off'")
        conn.execute("SELECT pg_reload_conf()")


def _forget_dead_handles(server: Any) -> None:
    """Drop pids of processes that died without their exit hook (SIGKILL, OOM) from
    pgserver's handle list; otherwise no process would ever stop the server."""
    import psutil

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    with server._lock:
        handles = server.global_process_id_list
        pids = handles.get()
        live = [pid for pid in pids if pid == os.getpid() or alive(pid)]
        if live != pids:
            handles.put(live)


def broker_settings() -> dict[str, Any]:
    """Celery settings for kombu's filesystem transport, shared by all local processes."""
    # the test suite gives each pytest-xdist worker a folder of its own (config/testing.py)
    root = DATA_DIR / os.environ.get("SWITCHYARD_BROKER_FOLDER", "broker")
    queue = root / "queue"
    processed = root / "processed"
    control = root / "control"  # broadcast/pidbox exchanges (else kombu writes ./control)
    for folder in (queue, processed, control):
        folder.mkdir(parents=True, exist_ok=True)
    return {
        "broker_url": "filesystem://localhost//",  # a host named: kombu warns at each connection without one
        "broker_transport_options": {
            "data_folder_in": str(queue),
            "data_folder_out": str(queue),
            "processed_folder": str(processed),
            "store_processed": False,
            "control_folder": str(control),
        },
    }
