"""The embedded runtime (config/embedded.py), as local processes use it: with no
``DATABASE_URL`` every process (web, worker, beat) joins one PostgreSQL server under the data
folder, a server record left by a crash is detected, and with no ``CELERY_BROKER_URL`` the
broker is a folder all local processes share.

Each test starts real processes with the settings the app uses, ``DATABASE_URL`` and
``CELERY_BROKER_URL`` unset and ``SWITCHYARD_DATA_DIR`` on a folder of this module (one
``initdb`` for all tests). Every server a test leaves running is stopped, and the module
checks that no postgres process of that folder is left.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import psutil
import pytest

from tests.support.processes import ROOT
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.slow,
]

# A first start runs initdb; the machine may be busy with other suites.
REPLY_TIMEOUT = 120.0
# Variables of this test run that would point the processes away from the embedded runtime.
NOT_INHERITED = {
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "SWITCHYARD_DB_NAME",
    "SWITCHYARD_TEST_DB",
    "SWITCHYARD_EMBEDDED_DURABLE",
    "XDG_RUNTIME_DIR",
    "PYTEST_CURRENT_TEST",
    # the suite's pytest-xdist worker and the broker folder it was given (config/testing.py)
    "PYTEST_XDIST_WORKER",
    "SWITCHYARD_BROKER_FOLDER",
}

# A local process: loads the settings (which start or join the embedded server), says which
# server it got, then runs one SQL statement per stdin line until stdin closes.
HOLDER = r"""
import json, sys
import django
import psutil

django.setup()
from django.db import connection

with connection.cursor() as cursor:
    cursor.execute("SELECT pg_backend_pid(), (SELECT system_identifier FROM pg_control_system())")
    backend, cluster = cursor.fetchone()
print(json.dumps({
    "postmaster": psutil.Process(backend).ppid(),
    "cluster": str(cluster),
    "socket": connection.settings_dict["HOST"],
}), flush=True)
for statement in sys.stdin:
    with connection.cursor() as cursor:
        cursor.execute(statement)
        rows = cursor.fetchall() if cursor.description else []
    print(json.dumps(rows), flush=True)
"""

PUBLISH = r"""
import json, sys
import django

django.setup()
from config.celery import app

with app.connection_for_write() as conn:
    conn.SimpleQueue(sys.argv[1]).put({"token": sys.argv[2]})
    print(json.dumps({"transport": conn.transport.driver_type}), flush=True)
"""

CONSUME = r"""
import json, sys
import django

django.setup()
from config.celery import app

with app.connection_for_read() as conn:
    message = conn.SimpleQueue(sys.argv[1]).get(timeout=60)
    message.ack()
    print(json.dumps(message.payload), flush=True)
"""


def local_env(data_dir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
    env.update(
        SWITCHYARD_DATA_DIR=str(data_dir),
        DJANGO_SETTINGS_MODULE="config.settings",
        PYTHONUNBUFFERED="1",
    )
    return env


def postmasters(pgdata: Path) -> list[psutil.Process]:
    """Live postgres servers started on ``pgdata`` (what ``ps`` shows; zombies excluded)."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        if (
            proc.info["name"] == "postgres"
            and proc.info["status"] != psutil.STATUS_ZOMBIE
            and str(pgdata) in (proc.info["cmdline"] or [])
        ):
            found.append(proc)
    return found


def running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class LocalProcess:
    """One process on the embedded runtime, like web, worker or beat."""

    def __init__(self, data_dir: Path, log: Path) -> None:
        self.log = log
        with log.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", HOLDER],
                cwd=ROOT,
                env=local_env(data_dir),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self._replies: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()
        self._server: dict[str, Any] | None = None

    def _read(self, stdout: TextIO) -> None:
        for line in stdout:
            self._replies.put(line)

    def _reply(self) -> Any:
        deadline = time.monotonic() + REPLY_TIMEOUT
        while time.monotonic() < deadline:
            try:
                return json.loads(self._replies.get(timeout=0.5))
            except queue.Empty:
                if self.proc.poll() is not None:  # it died: nothing more will come
                    self._reader.join(timeout=REPLY_TIMEOUT)
                    if self._replies.empty():
                        break
        raise AssertionError(f"no answer from the local process:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def server(self) -> dict[str, Any]:
        """Which server the process got: postmaster pid, cluster identifier, socket folder."""
        if self._server is None:
            self._server = self._reply()
        return self._server

    def sql(self, statement: str) -> list[list[Any]]:
        assert self.server  # the process is up before it gets statements
        assert self.proc.stdin is not None
        self.proc.stdin.write(statement + "\n")
        self.proc.stdin.flush()
        return self._reply()  # type: ignore[no-any-return]

    def leave(self) -> None:
        """Exit as web, worker or beat do on a normal stop (exit hooks run)."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        assert self.proc.wait(timeout=REPLY_TIMEOUT) == 0, self.output()

    def crash(self) -> None:
        """SIGKILL: no exit hook runs."""
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=REPLY_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=REPLY_TIMEOUT)  # it ends at the closed pipe
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def stop_server(pgdata: Path) -> None:
    """Fast shutdown of whatever server still runs on ``pgdata``; SIGKILL if it lingers."""
    for postmaster in postmasters(pgdata):
        workers = postmaster.children()
        postmaster.send_signal(signal.SIGINT)
        try:
            postmaster.wait(timeout=30)
        except psutil.TimeoutExpired:
            postmaster.kill()
        for proc in workers:
            if running(proc):
                proc.kill()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("embedded")
    yield folder
    pgdata = (folder / "pg").resolve()
    stop_server(pgdata)
    assert not postmasters(pgdata), "an embedded PostgreSQL of this module is still running"


@pytest.fixture
def pgdata(data_dir: Path) -> Path:
    return (data_dir / "pg").resolve()


@pytest.fixture
def start(data_dir: Path, pgdata: Path, tmp_path: Path) -> Iterator[Callable[[], LocalProcess]]:
    """Start local processes on the module's data folder; all of them, and any server they
    leave behind (with its own processes), are gone after the test."""
    yield from _starting(data_dir, pgdata, tmp_path)


@pytest.fixture
def start_on_new_folder(tmp_path: Path) -> Iterator[Callable[[], LocalProcess]]:
    """Like ``start``, on a data folder no process has used yet (its own initdb)."""
    data_dir = tmp_path / "new-data"
    data_dir.mkdir()
    yield from _starting(data_dir, (data_dir / "pg").resolve(), tmp_path)


def _starting(data_dir: Path, pgdata: Path, logs: Path) -> Iterator[Callable[[], LocalProcess]]:
    started: list[LocalProcess] = []

    def start_one() -> LocalProcess:
        process = LocalProcess(data_dir, logs / f"process-{len(started)}.log")
        started.append(process)
        return process

    yield start_one
    left_running = [*postmasters(pgdata)]
    left_running += [child for postmaster in left_running for child in postmaster.children()]
    for process in started:
        process.stop()
    stop_server(pgdata)
    eventually(
        lambda: not any(running(proc) for proc in left_running), timeout=60, what="the server's processes to end"
    )


def crash_server(holder: LocalProcess) -> None:
    """What an OOM kill or a power cut leaves: the process and its server SIGKILLed, the
    server's record (postmaster.pid) and the handle list still on disk."""
    postmaster = psutil.Process(holder.server["postmaster"])
    workers = postmaster.children()
    holder.crash()
    postmaster.kill()
    # PostgreSQL's own processes end once they see the postmaster gone.
    eventually(
        lambda: not any(running(proc) for proc in [postmaster, *workers]),
        timeout=60,
        what="the killed server's processes to end",
    )


def test_processes_started_together_on_one_data_folder_share_one_server(
    start: Callable[[], LocalProcess], pgdata: Path
) -> None:
    web, worker = start(), start()  # they race to start the server

    assert web.server == worker.server
    assert [proc.pid for proc in postmasters(pgdata)] == [web.server["postmaster"]]
    web.sql("CREATE TABLE shared_note (body text)")
    web.sql("INSERT INTO shared_note VALUES ('from web')")
    assert worker.sql("SELECT body FROM shared_note") == [["from web"]]


def test_processes_started_together_on_a_new_data_folder_share_one_server(
    start_on_new_folder: Callable[[], LocalProcess],
) -> None:
    # What ``dev.py run`` does on a fresh checkout: web, worker and beat all find no server
    # folder yet, and all of them want to create it.
    web, worker, beat = start_on_new_folder(), start_on_new_folder(), start_on_new_folder()

    assert web.server == worker.server == beat.server
    web.sql("CREATE TABLE shared_note (body text)")
    web.sql("INSERT INTO shared_note VALUES ('from web')")
    assert beat.sql("SELECT body FROM shared_note") == [["from web"]]


def test_server_stays_up_while_a_process_uses_it_and_stops_with_the_last(
    start: Callable[[], LocalProcess], pgdata: Path
) -> None:
    web = start()
    beat = start()
    assert beat.server == web.server

    beat.leave()
    assert web.sql("SELECT 1") == [[1]]
    assert [proc.pid for proc in postmasters(pgdata)] == [web.server["postmaster"]]

    web.leave()
    eventually(lambda: not postmasters(pgdata), timeout=60, what="the server to stop")
    assert not (pgdata / "postmaster.pid").exists()


def test_record_of_a_killed_server_is_detected_and_a_new_server_starts(
    start: Callable[[], LocalProcess], pgdata: Path
) -> None:
    first = start()
    first.sql("CREATE TABLE before_crash (body text)")
    first.sql("INSERT INTO before_crash VALUES ('committed')")
    crash_server(first)
    assert (pgdata / "postmaster.pid").exists()

    second = start()

    assert second.server["postmaster"] != first.server["postmaster"]
    assert second.server["cluster"] == first.server["cluster"]
    assert second.sql("SELECT body FROM before_crash") == [["committed"]]
    # The killed process never took itself off the handle list: the last live one still
    # stops the server.
    second.leave()
    eventually(lambda: not postmasters(pgdata), timeout=60, what="the server to stop")


def test_server_record_naming_a_reused_pid_is_detected_as_stale(
    start: Callable[[], LocalProcess], pgdata: Path
) -> None:
    first = start()
    first.sql("CREATE TABLE before_reboot (body text)")
    first.sql("INSERT INTO before_reboot VALUES ('committed')")
    crash_server(first)
    # After a reboot the recorded pid may belong to any other program.
    other_program = subprocess.Popen(["sleep", "300"])
    try:
        record = pgdata / "postmaster.pid"
        lines = record.read_text().splitlines()
        record.write_text("\n".join([str(other_program.pid), *lines[1:]]) + "\n")

        second = start()

        assert second.server["postmaster"] != other_program.pid
        assert second.server["cluster"] == first.server["cluster"]
        assert second.sql("SELECT body FROM before_reboot") == [["committed"]]
        assert other_program.poll() is None  # detected as not ours, and left alone
    finally:
        other_program.kill()
        other_program.wait()


def run_local(data_dir: Path, code: str, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env=local_env(data_dir),
        capture_output=True,
        text=True,
        timeout=REPLY_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.usefixtures("start")  # stops a server the processes might leave behind
def test_filesystem_broker_under_the_data_folder_carries_a_message_between_processes(data_dir: Path) -> None:
    queue_name = f"embedded-{uuid.uuid4().hex}"
    token = uuid.uuid4().hex
    queue_folder = data_dir / "broker" / "queue"

    def waiting_messages() -> list[Path]:
        return list(queue_folder.glob(f"*.{queue_name}.msg"))

    published = run_local(data_dir, PUBLISH, queue_name, token)

    assert published == {"transport": "filesystem"}
    assert len(waiting_messages()) == 1
    assert run_local(data_dir, CONSUME, queue_name) == {"token": token}
    assert waiting_messages() == []


def test_a_slow_server_start_is_waited_for_as_long_as_pg_ctl_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """pgserver gives `pg_ctl -w start` 10 s; on a busy machine the start took longer and the
    process failed although the server came up. The embedded runtime gives it 90 s."""
    from pgserver import postgres_server

    from config import embedded

    calls: list[dict[str, Any]] = []

    def recording(args: list[str], pgdata: Path | None = None, **kwargs: Any) -> str:
        calls.append({"args": args, **kwargs})
        return ""

    monkeypatch.setattr(postgres_server, "pg_ctl", recording)
    embedded._patient_start()
    embedded._patient_start()  # once per process: not wrapped twice
    postgres_server.pg_ctl(["-w", "start"], pgdata=Path("/nonexistent"), timeout=10)
    postgres_server.pg_ctl(["-w", "stop"], pgdata=Path("/nonexistent"))

    assert calls == [{"args": ["-w", "start"], "timeout": 90.0}, {"args": ["-w", "stop"]}]
