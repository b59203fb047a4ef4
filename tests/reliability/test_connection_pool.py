"""A burst of clients queues for database connections instead of exhausting PostgreSQL.

The story (issue #25): 20 clients at once against the web process opened 84 connections to
PostgreSQL and 63 % of the requests answered 503 — runserver serves each request on a thread of
its own, and each thread opened (and, with ``conn_max_age``, kept) a connection of its own.
Web processes now take connections from a bounded pool (Django's ``pool`` option,
``DATABASE_POOL_MAX_SIZE``): a burst waits for a free connection.

The web process here is the real one (``manage.py runserver``, as ``dev.py run`` starts it),
on the test database; its connections are told apart by their ``application_name``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from rest_framework.authtoken.models import Token

from tests.support.processes import ROOT, stop_process_group
from tests.support.waiting import eventually
from workflows.models import Run

pytestmark = [pytest.mark.services, pytest.mark.reliability, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

POOL_SIZE = 5
CLIENTS = 50
REQUESTS_PER_CLIENT = 3
# Starts record a command through the engine's prepared statements and pipelines, on pooled
# connections: they must work as on a connection of its own.
WAITING = """
definitionId: pool-burst
definitionVersion: 1
contract: {name: pool-burst.v1, signals: {go: {type: object}}}
stateSchema: {type: object}
startPayloadSchema: {type: object, properties: {n: {type: integer}}}
initialStep: wait-go
steps:
  - {id: wait-go, type: wait-signal, signal: go, next: done}
  - {id: done, type: complete}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str, headers: dict[str, str] | None = None, body: Any = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        headers={**(headers or {}), "Content-Type": "application/json"},
        method="GET" if data is None else "POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


class WebProcess:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.name = f"pool-burst-{uuid.uuid4().hex[:8]}"
        self.log = workdir / "web.log"
        env = {
            **os.environ,
            "SWITCHYARD_DB_NAME": connection.settings_dict["NAME"],
            "SWITCHYARD_PROCESS": self.name,  # its connections' application_name
            "DATABASE_POOL_MAX_SIZE": str(POOL_SIZE),
            "SECURE_COOKIES": "false",
            "PYTHONUNBUFFERED": "1",
        }
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.url = f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def ready(self) -> bool:
        assert self.proc.poll() is None, f"runserver exited:\n{self.output()}"
        try:
            return get(f"{self.url}/healthz") == 200
        except OSError:
            return False


@pytest.fixture
def web(tmp_path: Path) -> Iterator[WebProcess]:
    server = WebProcess(tmp_path)
    try:
        eventually(server.ready, timeout=120, interval=0.2, what="runserver to answer /healthz", details=server.output)
        yield server
    finally:
        stop_process_group(server.proc, grace=5)  # type: ignore[arg-type]


class ConnectionSampler:
    """The largest number of connections the web process held at once, read from
    pg_stat_activity on a connection of its own, as often as it can during the burst."""

    def __init__(self, application_name: str) -> None:
        params = connection.get_connection_params()
        for key in ("cursor_factory", "context", "prepare_threshold"):
            params.pop(key, None)
        params["application_name"] = "pool-burst-sampler"
        self.conn = psycopg.connect(**params, autocommit=True)
        self.application_name = application_name
        self.most = 0
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def count(self) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
            [self.application_name],
        ).fetchone()
        return int(row[0]) if row else 0

    def _run(self) -> None:
        while not self.stop.is_set():
            self.most = max(self.most, self.count())
            self.samples += 1

    def __enter__(self) -> ConnectionSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.conn.close()


def test_fifty_concurrent_clients_get_no_5xx_and_the_connections_stay_within_the_pool(
    web: WebProcess, deploy: Any
) -> None:
    deploy(WAITING)
    user = get_user_model().objects.create_superuser(username="burst", password="burst-password-1")
    token = Token.objects.create(user=user).key
    api = {"Authorization": f"Token {token}", "Accept": "application/json"}
    start = threading.Barrier(CLIENTS)

    def client(n: int) -> list[int]:
        start.wait(timeout=60)  # all fifty at once
        statuses = []
        for i in range(REQUESTS_PER_CLIENT):
            kind = (n + i) % 3
            if kind == 0:
                statuses.append(get(f"{web.url}/healthz"))
            elif kind == 1:
                statuses.append(get(f"{web.url}/api/v1/runs/?page_size=5", api))
            else:
                start_run = {"definition_id": "pool-burst", "payload": {"n": n}}
                statuses.append(get(f"{web.url}/api/v1/runs/", api, start_run))
        return statuses

    with ConnectionSampler(web.name) as sampler, ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        statuses = [status for answers in pool.map(client, range(CLIENTS)) for status in answers]

    assert len(statuses) == CLIENTS * REQUESTS_PER_CLIENT
    errors = sorted({s for s in statuses if s >= 500})
    assert not errors, f"{len([s for s in statuses if s >= 500])} answers were 5xx: {errors}\n{web.output()[-3000:]}"
    assert set(statuses) == {200, 202}, sorted(set(statuses))
    assert Run.objects.filter(definition_id="pool-burst").count() == CLIENTS  # every start recorded
    assert sampler.samples > 0
    assert 1 <= sampler.most <= POOL_SIZE, f"the web process held {sampler.most} connections (pool: {POOL_SIZE})"


@pytest.mark.parametrize(
    ("argv0", "pooled"),
    [("manage.py", True), ("gunicorn", True), ("celery", False), ("{celery}/__main__.py", False)],
)
def test_web_processes_pool_and_celery_processes_keep_one_connection(argv0: str, pooled: bool) -> None:
    code = (
        "import json, os, sys, celery; "
        f"sys.argv = [{argv0!r}.format(celery=os.path.dirname(celery.__file__))]; "
        "from config import settings; db = settings.DATABASES['default']; "
        "print(json.dumps({'pool': db['OPTIONS'].get('pool'), 'age': db['CONN_MAX_AGE']}))"
    )
    env = {**os.environ, "DATABASE_URL": "postgres://pool-test.invalid/none", "DATABASE_POOL_MAX_SIZE": "7"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )

    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    if pooled:
        assert seen["pool"]["max_size"] == 7 and seen["age"] == 0
    else:
        assert seen["pool"] is None and seen["age"] == 60
