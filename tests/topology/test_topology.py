"""Several machines, one database: the production layout of docs/operations.md, killed node by node.

Two gunicorn web nodes (the second recording-only), two Celery worker nodes (prefork), the
outbound queue's worker (deliveries), one beat, RabbitMQ as the broker, and every process
reaching PostgreSQL through PgBouncer in transaction pooling mode (Debian's package, started
here). ``TOPOLOGY_RUNS`` runs (5,000) are started and signalled through the two web nodes' API
by a client that retries what failed with the same idempotency key, while each node — both web
nodes, both workers, beat and PgBouncer itself — is killed with SIGKILL and restarted once.
Then: every run ended, none lost, none duplicated, every command settled exactly once, each
run's history contiguous and its decision log replaying to its state.

    python3 dev.py test --topology          # TOPOLOGY_RUNS=500 for a quicker pass

It needs ``pgbouncer`` (apt-get install pgbouncer), RabbitMQ on 127.0.0.1:5672 (or
``TOPOLOGY_BROKER_URL``) and PostgreSQL over TCP (``DATABASE_URL``).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.reliability import invariants
from tests.support.processes import ROOT, stop_process_group
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.topology,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.environ.get("SWITCHYARD_TOPOLOGY"), reason="the topology test runs with `python3 dev.py test --topology`"
    ),
]

RUNS = int(os.environ.get("TOPOLOGY_RUNS", "5000"))
BROKER_URL = os.environ.get("TOPOLOGY_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
DEFINITION_ID = "topo-order"
DOCUMENT = """
definitionId: topo-order
definitionVersion: 1
contract:
  name: topo.v1
  signals:
    go: {type: object}
stateSchema: {type: object}
startPayloadSchema:
  type: object
  properties: {n: {type: integer}}
  required: [n]
initialState: "{'n': payload.n, 'go': false}"
initialStep: pause
steps:
  - {id: pause, type: timer, after: PT1S, next: wait-go}
  - {id: wait-go, type: wait-signal, signal: go, set: "{'go': true}", next: done}
  - {id: done, type: complete}
"""
READY_TIMEOUT = 90.0
# what is killed, in this order, as the client's progress passes each fraction of its requests
KILLS = ("web-a", "worker-1", "beat", "pgbouncer", "web-b", "worker-2")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


@dataclass
class Node:
    name: str
    argv: list[str]
    env: dict[str, str]
    ready: Any  # () -> bool
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    user: str | None = None  # run as this OS user (PgBouncer refuses to run as root)


@dataclass
class Topology:
    workdir: Path
    web_ports: tuple[int, int]
    nodes: dict[str, Node] = field(default_factory=dict)

    def start(self, name: str) -> None:
        node = self.nodes[name]
        node.starts += 1
        log = self.workdir / f"{name}-{node.starts}.log"
        with log.open("wb") as out:
            node.proc = subprocess.Popen(
                node.argv,
                cwd=ROOT,
                env={**node.env, "SWITCHYARD_PROCESS": f"topo-{name}", "PYTHONUNBUFFERED": "1"},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        eventually(
            lambda: node.ready(log) or self._died(node),
            timeout=READY_TIMEOUT,
            interval=0.2,
            what=f"{name} to be ready",
            details=self.logs,
        )
        assert node.proc.poll() is None, f"{name} exited with {node.proc.returncode}\n{self.logs()}"

    def _died(self, node: Node) -> bool:
        return node.proc is not None and node.proc.poll() is not None

    def kill(self, name: str) -> None:
        """SIGKILL the node's whole process group: no graceful shutdown, no acks, no rollback."""
        proc = self.nodes[name].proc
        assert proc is not None
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
        proc.wait()

    def stop(self) -> None:
        for node in reversed(list(self.nodes.values())):
            if node.proc is not None:
                stop_process_group(node.proc, grace=10)

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-tail:]}" for p in sorted(self.workdir.glob("*.log"))
        )


def log_says(marker: str) -> Any:
    return lambda log: log.exists() and marker in log.read_text(errors="replace")


def healthy(port: int) -> Any:
    def ready(_log: Path) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
                return bool(answer.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    return ready


def pgbouncer_node(workdir: Path, server: dict[str, Any], port: int) -> Node:
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(binary).exists():
        pytest.fail("pgbouncer is not installed: apt-get install pgbouncer")
    home = Path(tempfile.mkdtemp(prefix="topo-pgbouncer-"))
    (home / "userlist.txt").write_text(f'"{server["USER"]}" ""\n')
    (home / "pgbouncer.ini").write_text(
        f"""[databases]
* = host={server["HOST"] or "127.0.0.1"} port={server["PORT"] or 5432}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {home}/userlist.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 30
ignore_startup_parameters = extra_float_digits
logfile = {home}/pgbouncer.log
pidfile = {home}/pgbouncer.pid
"""
    )
    user = None
    if os.geteuid() == 0:
        user = "postgres"
        shutil.chown(home, user)
        home.chmod(0o755)
    argv = [binary, *(["-u", user] if user else []), str(home / "pgbouncer.ini")]
    return Node("pgbouncer", argv, dict(os.environ), lambda _log: reachable("127.0.0.1", port), user=user)


@dataclass
class Client:
    """The API client of the test: each request is retried, with the same idempotency key, on
    the other web node when the connection breaks or the answer is a 5xx, until it is answered."""

    ports: tuple[int, int]
    token: str
    deadline_s: float = 300.0
    retried: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def post(self, path: str, body: dict[str, Any], key: str, prefer: int) -> dict[str, Any]:
        data = json.dumps(body).encode()
        deadline = time.monotonic() + self.deadline_s
        attempt = 0
        while True:
            port = self.ports[(prefer + attempt) % 2]
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}{path}",
                data=data,
                method="POST",
                headers={
                    "Authorization": f"Token {self.token}",
                    "Content-Type": "application/json",
                    "Idempotency-Key": key,
                },
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    return dict(json.loads(answer.read()))
            except urllib.error.HTTPError as error:
                if error.code < 500 and error.code != 429:
                    raise AssertionError(f"{path}: {error.code} {error.read()[:300]!r}") from None
            except (OSError, urllib.error.URLError, http.client.HTTPException):
                pass  # the node died under the request (refused, reset, cut short), or is restarting
            attempt += 1
            with self.lock:
                self.retried += 1
            if time.monotonic() > deadline:
                raise AssertionError(f"{path} ({key}) was not answered within {self.deadline_s:.0f}s")
            time.sleep(0.1 + random.random() * 0.3)


@pytest.fixture
def topology(tmp_path: Path) -> Iterator[Topology]:
    from django.db import connection

    server = connection.settings_dict
    if not server["HOST"] or str(server["HOST"]).startswith("/"):
        pytest.fail("the topology test needs PostgreSQL over TCP: set DATABASE_URL")
    if not reachable("127.0.0.1", 5672) and "127.0.0.1:5672" in BROKER_URL:
        pytest.fail("the topology test needs RabbitMQ on 127.0.0.1:5672 (or TOPOLOGY_BROKER_URL)")
    bouncer = free_port()
    web = (free_port(), free_port())
    through_bouncer = f"postgres://{server['USER']}@127.0.0.1:{bouncer}/{server['NAME']}"
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("SWITCHYARD_DB_NAME", "SWITCHYARD_TEST_DB")},
        "DATABASE_URL": through_bouncer,
        "DATABASE_TRANSACTION_POOLING": "true",
        "CELERY_BROKER_URL": BROKER_URL,
        "WORKFLOWS_EXECUTOR_LEASE_SECONDS": "10",
        "SWEEP_INTERVAL_SECONDS": "1",
        "WORKFLOWS_LOG_LEVEL": "WARNING",
        "LOG_LEVEL": "WARNING",
        "SECURE_COOKIES": "false",
        "DEBUG": "false",
    }
    topo = Topology(tmp_path, web)
    topo.nodes["pgbouncer"] = pgbouncer_node(tmp_path, server, bouncer)
    for name, port, executor in (("web-a", web[0], "true"), ("web-b", web[1], "false")):
        argv = [sys.executable, "-m", "gunicorn", "config.wsgi:application", "--bind", f"127.0.0.1:{port}"]
        argv += ["--workers", "2", "--threads", "4", "--timeout", "60", "--graceful-timeout", "5"]
        topo.nodes[name] = Node(name, argv, {**env, "WORKFLOWS_EXECUTOR_ENABLED": executor}, healthy(port))
    for i in (1, 2):
        argv = [sys.executable, "-m", "celery", "-A", "config", "worker", "--loglevel", "info", "--pool", "prefork"]
        argv += ["--concurrency", "2", "--prefetch-multiplier", "1", "-O", "fair", "--hostname", f"topo-w{i}@%h"]
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        topo.nodes[f"worker-{i}"] = Node(f"worker-{i}", argv, env, log_says(" ready."))
    # deliveries (webhooks, service calls, notices) on their own queue and worker, as in
    # docs/operations.md: never on the executor's workers
    outbound = [sys.executable, "-m", "celery", "-A", "config", "worker", "--loglevel", "info", "--pool", "prefork"]
    outbound += ["--concurrency", "2", "--prefetch-multiplier", "1", "--queues", "switchyard.outbound"]
    outbound += ["--hostname", "topo-outbound@%h", "--without-gossip", "--without-mingle", "--without-heartbeat"]
    topo.nodes["outbound"] = Node("outbound", outbound, env, log_says(" ready."))
    beat = [sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", "info"]
    beat += ["--schedule", str(tmp_path / "beat-schedule")]
    topo.nodes["beat"] = Node("beat", beat, env, log_says("beat: Starting..."))
    subprocess.run(
        [sys.executable, "-m", "celery", "-A", "config", "purge", "-f"], cwd=ROOT, env=env, capture_output=True
    )
    try:
        for name in topo.nodes:
            topo.start(name)
        yield topo
    finally:
        topo.stop()


def deploy_and_token() -> str:
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from workflows import definitions

    ref = definitions.load(scope="default", text=DOCUMENT, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")
    model = get_user_model()
    fields = {model.USERNAME_FIELD: "topo-admin@example.com", "password": None}
    if model.EMAIL_FIELD != model.USERNAME_FIELD:
        fields[model.EMAIL_FIELD] = "topo-admin@example.com"
    user = model.objects.create_superuser(**fields)
    return str(Token.objects.create(user=user).key)


def ended_runs() -> int:
    from workflows.engine import db

    row = db.fetchone(
        "SELECT count(*) FROM workflow_runs WHERE definition_id = %s AND status IN ('COMPLETED','FAILED','CANCELLED')",
        [DEFINITION_ID],
    )
    return int(row[0]) if row else 0


@pytest.mark.timeout(3600)
def test_runs_flow_through_every_node_killed_once_with_nothing_lost_or_doubled(topology: Topology) -> None:
    from workflows.engine import db

    token = deploy_and_token()
    client = Client(topology.web_ports, token)
    done = 0
    progress = threading.Condition()

    def one_run(i: int) -> str:
        nonlocal done
        started = client.post(
            "/api/v1/runs/",
            {"definition_id": DEFINITION_ID, "business_key": f"topo-{i}", "payload": {"n": i}},
            f"topo-start-{i}",
            prefer=i,
        )
        run = str(started["run"])
        client.post(f"/api/v1/runs/{run}/signals/", {"name": "go", "payload": {}}, f"topo-go-{i}", prefer=i + 1)
        with progress:
            done += 1
            progress.notify_all()
        return run

    kills: list[dict[str, Any]] = []
    restarts: list[threading.Thread] = []

    def restart(name: str, killed_at: float, after_runs: int) -> None:
        topology.start(name)
        kills.append({"node": name, "after_runs": after_runs, "down_s": round(time.monotonic() - killed_at, 1)})

    def chaos() -> None:
        # spread over 10 %..80 % of the client's runs; a node restarts in the background, so
        # the next kill does not wait for it (two nodes may be down at once)
        for k, name in enumerate(KILLS):
            threshold = int(RUNS * (0.1 + 0.7 * k / (len(KILLS) - 1)))
            with progress:
                progress.wait_for(lambda t=threshold: done >= t, timeout=1800)
                after_runs = done
            topology.kill(name)
            thread = threading.Thread(target=restart, args=(name, time.monotonic(), after_runs), daemon=True)
            thread.start()
            restarts.append(thread)
        for thread in restarts:
            thread.join(timeout=READY_TIMEOUT + 30)

    saboteur = threading.Thread(target=chaos, name="topology-chaos", daemon=True)
    saboteur.start()
    with ThreadPoolExecutor(max_workers=12) as pool:
        runs = list(pool.map(one_run, range(RUNS)))
    saboteur.join(timeout=600)
    assert sorted(k["node"] for k in kills) == sorted(KILLS), f"kills done: {kills}\n{topology.logs()}"
    # every node was killed while the client was still starting and signalling runs
    assert all(k["after_runs"] < RUNS for k in kills), kills

    eventually(
        lambda: ended_runs() >= RUNS,
        timeout=900,
        interval=1.0,
        what=f"all {RUNS} runs to end (kills: {kills}, client retries: {client.retried})",
        details=topology.logs,
    )
    # nothing lost, nothing doubled: one run per business key, the very runs the client was given
    rows = db.fetchall(
        "SELECT business_key, count(*), min(status), max(status) FROM workflow_runs WHERE definition_id = %s "
        "GROUP BY business_key",
        [DEFINITION_ID],
    )
    assert len(rows) == RUNS and all(n == 1 for _, n, _, _ in rows), "a business key has no run or several"
    assert {(lo, hi) for _, _, lo, hi in rows} == {("COMPLETED", "COMPLETED")}
    stored = {str(r[0]) for r in db.fetchall("SELECT id FROM workflow_runs WHERE definition_id = %s", [DEFINITION_ID])}
    assert stored == set(runs)
    # each run took its signal exactly once (the retried requests answered the same command)
    applied = db.fetchall(
        "SELECT c.run_id, count(*) FROM workflow_commands c JOIN workflow_runs r ON r.id = c.run_id "
        "WHERE r.definition_id = %s AND c.kind = 'SIGNAL' GROUP BY c.run_id",
        [DEFINITION_ID],
    )
    assert len(applied) == RUNS and all(n == 1 for _, n in applied), "a run has no signal command or several"
    params = {"definition": DEFINITION_ID}
    for check in (
        invariants.settled_once(params),
        invariants.runs_ended(params),
        invariants.history_contiguous(params),
        invariants.replay_matches_state(params),
    ):
        assert check.ok, f"{check.name}: {json.dumps(check.as_dict(), default=str)}"
    first, last = db.fetchone(
        "SELECT min(created_at), max(ended_at) FROM workflow_runs WHERE definition_id = %s", [DEFINITION_ID]
    ) or (None, None)
    seconds = (last - first).total_seconds() if first and last else 0.0
    report = {
        "runs": RUNS,
        "seconds_first_start_to_last_end": round(seconds, 1),
        "runs_per_s": round(RUNS / seconds, 1) if seconds else None,
        "kills": kills,
        "client_retries": client.retried,
    }
    (ROOT / ".data").mkdir(exist_ok=True)
    (ROOT / ".data" / "topology-report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"topology: {json.dumps(report)}")
