"""Issue #25, smaller defects: each test opens with the defect it pins down.

- An ``Idempotency-Key`` (or any other header, path segment or text) with NUL or control
  characters answered 503 PERSISTENCE with ``Retry-After: 1``: clients retried forever.
- Idempotency keys were shared across callers: another user who sent admin's key got
  admin's run back.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import mail
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.support.waiting import eventually
from workflows import operations
from workflows.engine import outbox
from workflows.exceptions import WorkflowError
from workflows.models import Command, Dedup, EffectMarker, OutboxIntent, Run

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.django_db(transaction=True),
]

SIMPLE = """
definitionId: sec-small
definitionVersion: 1
contract: {name: sec-small.v1, signals: {go: {type: object}}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: wait-go
steps:
  - {id: wait-go, type: wait-signal, signal: go, next: done}
  - {id: done, type: complete}
"""


def client_for(username: str, *, superuser: bool = True) -> APIClient:
    user = User.objects.create_user(username=username, password=username, is_superuser=superuser)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


@pytest.fixture
def admin(db: None) -> APIClient:
    return client_for("admin")


def rows() -> tuple[int, int, int]:
    return Run.objects.count(), Command.objects.count(), Dedup.objects.count()


# --- Idempotency-Key: bad characters ----------------------------------------------------------


@pytest.mark.parametrize("key", ["a\x00b", "line\nbreak", "tab\there", "bell\x07", "del\x7f", " ", "é" * 256])
def test_an_idempotency_key_with_control_characters_is_a_400_problem_and_records_nothing(
    admin: APIClient, deploy: Callable[..., Any], key: str
) -> None:
    deploy(SIMPLE)
    before = rows()
    response = admin.post(
        "/api/v1/runs/", {"definition_id": "sec-small", "payload": {}}, format="json", HTTP_IDEMPOTENCY_KEY=key
    )
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert "Retry-After" not in response
    body = response.json()
    assert body["code"] == "INVALID_PAYLOAD"
    assert not key.strip() or key not in response.content.decode()
    assert rows() == before


def test_signal_and_completion_refuse_a_nul_idempotency_key_with_400(
    admin: APIClient, deploy: Callable[..., Any]
) -> None:
    deploy(SIMPLE)
    run = admin.post("/api/v1/runs/", {"definition_id": "sec-small", "payload": {}}, format="json").json()["run"]
    before = rows()
    signal = admin.post(
        f"/api/v1/runs/{run}/signals/", {"name": "go", "payload": {}}, format="json", HTTP_IDEMPOTENCY_KEY="k\x00"
    )
    complete = admin.post(
        "/api/v1/tasks/00000000-0000-0000-0000-000000000000/complete/",
        {"decision": "x"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k\x00",
    )
    assert (signal.status_code, complete.status_code) == (400, 400), (signal.content, complete.content)
    assert signal.json()["code"] == complete.json()["code"] == "INVALID_PAYLOAD"
    assert rows() == before


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/definitions/def%00ault/sec-small/1/publish/",
        "/api/v1/definitions/default/sec%00small/1/deprecate/",
    ],
)
def test_a_nul_in_a_path_segment_is_a_400_problem_not_a_503(admin: APIClient, path: str) -> None:
    response = admin.post(path, {}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "INVALID_PAYLOAD"
    assert "Retry-After" not in response


def test_a_nul_in_an_activation_path_is_a_400_problem_not_a_503(admin: APIClient) -> None:
    put = admin.put("/api/v1/activations/default/sec%00small/", {"version": 1}, format="json")
    delete = admin.delete("/api/v1/activations/de%00fault/sec-small/")
    assert (put.status_code, delete.status_code) == (400, 400), (put.content, delete.content)


@pytest.mark.parametrize(
    ("operation", "kwargs"),
    [
        ("start", {"definition_id": "sec-small", "payload": {}, "idempotency_key": "k\x00"}),
        ("start", {"definition_id": "sec-small", "payload": {}, "business_key": "b\x00"}),
        ("start", {"definition_id": "sec\x00small", "payload": {}}),
        ("signal", {"name": "go\x00", "payload": {}}),
        ("signal", {"name": "go", "payload": {}, "branch": "b\x00"}),
        ("signal", {"name": "go", "payload": {}, "idempotency_key": "line\nbreak"}),
    ],
)
def test_text_with_a_nul_through_the_python_api_is_refused_not_a_retryable_error(
    deploy: Callable[..., Any], operation: str, kwargs: dict[str, Any]
) -> None:
    deploy(SIMPLE)
    if operation == "signal":
        kwargs = {"run_id": operations.start(definition_id="sec-small", payload={}).run_id, **kwargs}
    before = rows()
    with pytest.raises(WorkflowError) as refused:
        getattr(operations, operation)(**kwargs)
    assert 400 <= refused.value.status < 500 and not refused.value.retryable
    assert "\x00" not in str(refused.value)
    assert rows() == before


# --- Idempotency-Key: scoped per caller --------------------------------------------------------


def test_another_caller_sending_the_same_key_starts_a_run_of_its_own(
    admin: APIClient, deploy: Callable[..., Any]
) -> None:
    deploy(SIMPLE)
    other = client_for("mallory")
    body = {"definition_id": "sec-small", "payload": {}}
    first = admin.post("/api/v1/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY="order-1")
    theirs = other.post("/api/v1/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY="order-1")
    again = admin.post("/api/v1/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY="order-1")
    assert (first.status_code, theirs.status_code, again.status_code) == (202, 202, 202)
    assert theirs.json()["run"] != first.json()["run"]
    assert again.json() == first.json()  # the first caller's replay still answers its own run
    assert Run.objects.count() == 2


def test_another_caller_with_a_different_body_under_the_same_key_is_no_conflict(
    admin: APIClient, deploy: Callable[..., Any]
) -> None:
    deploy(SIMPLE)
    other = client_for("mallory")
    admin.post("/api/v1/runs/", {"definition_id": "sec-small", "payload": {"a": 1}}, format="json",
               HTTP_IDEMPOTENCY_KEY="k")  # fmt: skip
    theirs = other.post(
        "/api/v1/runs/", {"definition_id": "sec-small", "payload": {"b": 2}}, format="json", HTTP_IDEMPOTENCY_KEY="k"
    )
    assert theirs.status_code == 202, theirs.content


def test_signal_keys_are_scoped_per_caller(admin: APIClient, deploy: Callable[..., Any]) -> None:
    deploy(SIMPLE)
    other = client_for("mallory")
    run = admin.post("/api/v1/runs/", {"definition_id": "sec-small", "payload": {}}, format="json").json()["run"]
    mine = admin.post(f"/api/v1/runs/{run}/signals/", {"name": "go", "payload": {}}, format="json",
                      HTTP_IDEMPOTENCY_KEY="s-1")  # fmt: skip
    theirs = other.post(f"/api/v1/runs/{run}/signals/", {"name": "go", "payload": {}}, format="json",
                        HTTP_IDEMPOTENCY_KEY="s-1")  # fmt: skip
    assert (mine.status_code, theirs.status_code) == (202, 202)
    assert theirs.json()["id"] != mine.json()["id"]
    assert Command.objects.filter(run_id=run, kind="SIGNAL").count() == 2


# --- email steps and task notices: invalid header values ---------------------------------------
#
# A newline in an email step's subject or recipient made send_mail raise after the effect
# marker had committed: the run was left OUTCOME_UNKNOWN although nothing was sent. A newline in
# a task title made the notice fail ten times and be dropped.

EMAILING = """
definitionId: sec-mail
definitionVersion: 1
contract: {name: sec-mail.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: notify
steps:
  - id: notify
    type: email
    to: "state.to"
    subject: "Order {{ state.order }} received"
    body: "We got order {{ state.order }}."
    next: done
  - {id: done, type: complete}
"""


@pytest.mark.parametrize(
    "payload",
    [
        {"to": "a@example.com", "order": "O-1\nBcc: victim@example.com"},
        {"to": "a@example.com", "order": "O-1\r"},
        {"to": "a@example.com\nBcc: victim@example.com", "order": "O-1"},
        {"to": ["a@example.com", "not an address"], "order": "O-1"},
        {"to": "a@example.com", "order": "O-1\x07"},
    ],
)
def test_an_email_step_with_an_invalid_header_fails_deterministically_before_any_send(
    deploy: Callable[..., Any], drain: Callable[..., int], settings: Any, payload: dict[str, Any]
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    deploy(EMAILING)
    run_id = operations.start(definition_id="sec-mail", payload=payload).run_id
    drain(run_id)
    run = Run.objects.get(pk=run_id)
    start = Command.objects.get(run_id=run_id, kind="START")
    assert start.status != "OUTCOME_UNKNOWN"
    assert run.status == "FAILED" and run.failure_code == "EMAIL_INVALID", (run.status, run.failure_code)
    assert "victim" not in run.failure_message and "O-1" not in run.failure_message
    assert not mail.outbox
    assert not EffectMarker.objects.filter(run_id=run_id).exists()


def test_a_valid_email_step_still_sends_once(
    deploy: Callable[..., Any], drain: Callable[..., int], settings: Any
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    deploy(EMAILING)
    run_id = operations.start(definition_id="sec-mail", payload={"to": "a@example.com", "order": "O-9"}).run_id
    drain(run_id)
    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    assert [(m.subject, m.to) for m in mail.outbox] == [("Order O-9 received", ["a@example.com"])]


@pytest.mark.e2e
def test_an_email_step_with_a_newline_fails_through_the_worker_instead_of_outcome_unknown(
    celery_worker_process: Any, deploy: Callable[..., Any]
) -> None:
    deploy(EMAILING)
    run_id = operations.start(definition_id="sec-mail", payload={"to": "a@example.com", "order": "O\nX"}).run_id
    eventually(
        lambda: Run.objects.get(pk=run_id).status == "FAILED",
        timeout=30,
        what="the run to fail on the invalid subject",
        details=celery_worker_process.logs,
    )
    assert Run.objects.get(pk=run_id).failure_code == "EMAIL_INVALID"
    assert Command.objects.get(run_id=run_id, kind="START").status != "OUTCOME_UNKNOWN"
    assert not EffectMarker.objects.filter(run_id=run_id).exists()


NOTICED = """
definitionId: sec-notice
definitionVersion: 1
contract: {name: sec-notice.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: review
steps:
  - id: review
    type: human-task
    title: "Review {{ state.n }}"
    assignment: {mode: user, value: alice}
    decisions:
      - {name: approve, next: done}
  - {id: done, type: complete}
"""


def test_a_task_notice_with_a_newline_in_its_title_is_mailed_once_with_a_folded_subject(
    deploy: Callable[..., Any], drain: Callable[..., int], settings: Any
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    User.objects.create_user(username="alice", email="alice@example.com")
    deploy(NOTICED)
    run_id = operations.start(definition_id="sec-notice", payload={"n": "N-1\r\nBcc: victim@example.com"}).run_id
    drain(run_id)
    intent = OutboxIntent.objects.get(run_id=run_id, kind="NOTIFY")
    if intent.status != "DELIVERED":
        outbox.deliver(intent.pk)
        intent.refresh_from_db()
    assert (intent.status, intent.attempts) == ("DELIVERED", 1), (intent.status, intent.last_error)
    assert [(m.subject, m.to, m.bcc) for m in mail.outbox] == [
        ("New task: Review N-1 Bcc: victim@example.com", ["alice@example.com"], [])
    ]


def test_a_task_notice_that_cannot_be_built_is_dead_at_once_with_a_clear_reason(
    deploy: Callable[..., Any], drain: Callable[..., int], settings: Any
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.DEFAULT_FROM_EMAIL = "switchyard@example.com\nBcc: victim@example.com"
    User.objects.create_user(username="alice", email="alice@example.com")
    deploy(NOTICED)
    run_id = operations.start(definition_id="sec-notice", payload={"n": "N-2"}).run_id
    drain(run_id)
    intent = OutboxIntent.objects.get(run_id=run_id, kind="NOTIFY")
    if intent.status not in ("DEAD", "DELIVERED"):
        outbox.deliver(intent.pk)
        intent.refresh_from_db()
    assert (intent.status, intent.attempts) == ("DEAD", 1)
    assert intent.last_error.startswith("DELIVERY_REFUSED:") and "victim" not in intent.last_error
    assert not mail.outbox


def test_an_assignee_with_a_broken_address_does_not_keep_the_notice_from_the_others(
    deploy: Callable[..., Any], drain: Callable[..., int], settings: Any
) -> None:
    from django.contrib.auth.models import Group

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    group = Group.objects.create(name="reviewers")
    for username, email in (("alice", "alice@example.com"), ("bob", "bob@example.com\nBcc: victim@example.com")):
        User.objects.create_user(username=username, email=email).groups.add(group)
    deploy(NOTICED.replace("{mode: user, value: alice}", "{mode: group, value: reviewers}"))
    run_id = operations.start(definition_id="sec-notice", payload={"n": "N-3"}).run_id
    drain(run_id)
    intent = OutboxIntent.objects.get(run_id=run_id, kind="NOTIFY")
    if intent.status != "DELIVERED":
        outbox.deliver(intent.pk)
        intent.refresh_from_db()
    assert intent.status == "DELIVERED"
    assert [m.to for m in mail.outbox] == [["alice@example.com"]]


# --- service webhooks: no way into the worker's network (SSRF) -----------------------------------
#
# A service target could point at loopback/private/link-local addresses: the worker connected to
# 127.0.0.1. Targets are now resolved and refused unless public or in SERVICES.ALLOWED_NETWORKS;
# the connection goes to the vetted address and no redirect is followed.

# a port of this pytest-xdist worker's own (8141, 8161, ...): the receivers listen on it; test
# ids never hold it (every worker must collect the same ids)
PORT = 8141 + 20 * int((os.environ.get("PYTEST_XDIST_WORKER") or "gw0").removeprefix("gw") or 0)
SERVICE = """
definitionId: sec-hook
definitionVersion: 1
contract: {name: sec-hook.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: call
steps:
  - {id: call, type: service, target: "TARGET", next: done}
  - {id: done, type: complete}
"""


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),  # cloud metadata
        ("100.64.0.1", False),  # shared address space
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("240.0.0.1", False),
        ("::1", False),
        ("::", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("ff02::1", False),
        ("::ffff:127.0.0.1", False),
        ("::ffff:10.0.0.1", False),
        ("2002:7f00:1::", False),  # 6to4 of 127.0.0.1
        # issue #40: every IPv6 form that carries an IPv4 address is judged by it
        ("64:ff9b::7f00:1", False),  # NAT64 (well-known prefix) of 127.0.0.1
        ("64:ff9b::a9fe:a9fe", False),  # NAT64 of 169.254.169.254 (cloud metadata)
        ("64:ff9b:1::a00:1", False),  # NAT64 (local use) of 10.0.0.1
        ("::127.0.0.1", False),  # IPv4-compatible
        ("::10.0.0.1", False),  # IPv4-compatible
        ("::ffff:0:10.0.0.1", False),  # IPv4-translated (SIIT)
        ("2606:4700::5efe:7f00:1", False),  # ISATAP interface id over 127.0.0.1
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", False),  # Teredo
        ("64:ff9b::5db8:d822", True),  # NAT64 of 93.184.216.34 (public)
        ("93.184.216.34", True),
        ("2606:2800:220:1:248:1893:25c8:1946", True),
        ("::ffff:93.184.216.34", True),
    ],
)
def test_only_public_addresses_are_allowed_by_default(address: str, allowed: bool) -> None:
    import ipaddress

    from workflows.engine import webhooks

    assert webhooks.allowed(ipaddress.ip_address(address)) is allowed


@pytest.fixture
def allow() -> Any:
    """``allow(*networks)``: WORKFLOWS["SERVICES"]["ALLOWED_NETWORKS"] for this test only."""
    from django.conf import settings
    from django.test import override_settings

    from workflows import conf

    overrides: list[Any] = []

    def _allow(*networks: str) -> None:
        # the site's other WORKFLOWS sections (the webhook signing secret among them) stay
        workflows = {**getattr(settings, "WORKFLOWS", {}), "SERVICES": {"ALLOWED_NETWORKS": list(networks)}}
        override = override_settings(WORKFLOWS=workflows)
        override.enable()
        overrides.append(override)
        conf.reload()

    yield _allow
    for override in reversed(overrides):
        override.disable()
    conf.reload()


def test_an_allowed_network_admits_its_private_addresses(allow: Any) -> None:
    import ipaddress

    from workflows.engine import webhooks

    allow("127.0.0.0/8", "fd00::/8")
    assert webhooks.allowed(ipaddress.ip_address("127.0.0.1"))
    assert webhooks.allowed(ipaddress.ip_address("::ffff:127.0.0.1"))
    assert webhooks.allowed(ipaddress.ip_address("fd00::5"))
    assert not webhooks.allowed(ipaddress.ip_address("10.0.0.1"))


def test_a_malformed_allowed_network_fails_the_settings_check() -> None:
    from workflows import conf

    assert conf.problems({"SERVICES": {"ALLOWED_NETWORKS": ["not a network"]}})
    assert conf.problems({"SERVICES": {"ALLOWED_NETWORKS": "10.0.0.0/8"}})
    assert not conf.problems({"SERVICES": {"ALLOWED_NETWORKS": ["10.0.0.0/8", "::1/128"]}})
    env = conf.from_environment({"WORKFLOWS_SERVICES_ALLOWED_NETWORKS": "10.0.0.0/8, 127.0.0.1/32"})
    assert env["SERVICES"]["ALLOWED_NETWORKS"] == ("10.0.0.0/8", "127.0.0.1/32")


class _Listener:
    """A TCP listener on 127.0.0.1:PORT that counts connections (and closes each at once)."""

    def __init__(self) -> None:
        import socket
        import threading

        self.connections = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", PORT))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def listener() -> Any:
    server = _Listener()
    yield server
    server.close()


def _deliver_service(deploy: Callable[..., Any], drain: Callable[..., int], target: str) -> OutboxIntent:
    deploy(SERVICE.replace("TARGET", target))
    run_id = operations.start(definition_id="sec-hook", payload={}).run_id
    drain(run_id)
    intent = OutboxIntent.objects.get(run_id=run_id, kind="SERVICE")
    if intent.status == "PENDING" and intent.attempts == 0:
        outbox.deliver(intent.pk)
        intent.refresh_from_db()
    return intent


@pytest.mark.parametrize(
    "target",
    [f"https://127.0.0.1:{PORT}/hook", f"https://localhost:{PORT}/hook", f"https://[::ffff:127.0.0.1]:{PORT}/hook"],
    ids=["127.0.0.1", "localhost", "ipv4-mapped"],
)
def test_a_service_target_on_loopback_is_refused_without_connecting(
    deploy: Callable[..., Any], drain: Callable[..., int], listener: _Listener, target: str
) -> None:
    intent = _deliver_service(deploy, drain, target)
    assert (intent.status, intent.attempts) == ("DEAD", 1), (intent.status, intent.last_error)
    assert intent.last_error.startswith("DELIVERY_REFUSED:") and "127.0.0.1" not in intent.last_error
    assert "localhost" not in intent.last_error
    assert listener.connections == 0


def test_an_allow_listed_network_is_connected_to(
    deploy: Callable[..., Any], drain: Callable[..., int], listener: _Listener, allow: Any
) -> None:
    allow("127.0.0.0/8")
    intent = _deliver_service(deploy, drain, f"https://127.0.0.1:{PORT}/hook")
    assert listener.connections >= 1
    assert intent.status == "PENDING" and intent.last_error.startswith("DELIVERY_FAILED:")  # no TLS: retried


@pytest.fixture
def https_receiver(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An HTTPS server on 127.0.0.1:PORT with a certificate for 127.0.0.1 that the webhook
    client trusts; ``answer`` sets what it answers (status and Location)."""
    import http.server
    import ssl
    import threading

    from tests.support.https_receiver import make_certificate
    from workflows.engine import webhooks

    cert, key = make_certificate(tmp_path)
    state: dict[str, Any] = {"status": 200, "location": None, "requests": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            state["requests"] += 1
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(state["status"])
            if state["location"]:
                self.send_header("Location", state["location"])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(webhooks, "_tls_context", lambda: ssl.create_default_context(cafile=str(cert)))
    yield state
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_an_allow_listed_https_receiver_gets_the_delivery(
    deploy: Callable[..., Any], drain: Callable[..., int], https_receiver: dict[str, Any], allow: Any,
) -> None:  # fmt: skip
    allow("127.0.0.1/32")
    intent = _deliver_service(deploy, drain, f"https://127.0.0.1:{PORT}/hook")
    assert intent.status == "DELIVERED", intent.last_error
    assert https_receiver["requests"] == 1


@pytest.mark.parametrize(
    "location",
    [f"http://127.0.0.1:{PORT + 1}/plain", "https://example.com/elsewhere", "/same-host"],
    ids=["loopback-http", "elsewhere", "same-host"],
)
def test_a_redirect_is_not_followed(
    deploy: Callable[..., Any], drain: Callable[..., int], https_receiver: dict[str, Any], allow: Any, location: str,
) -> None:  # fmt: skip
    allow("127.0.0.1/32")
    https_receiver.update(status=307, location=location)
    intent = _deliver_service(deploy, drain, f"https://127.0.0.1:{PORT}/hook")
    assert (intent.status, intent.attempts) == ("DEAD", 1), (intent.status, intent.last_error)
    assert "redirect" in intent.last_error and location not in intent.last_error
    assert https_receiver["requests"] == 1


# --- schema error pointers: plain names only -----------------------------------------------------
#
# Schema error pointers repeated caller-chosen keys (patternProperties patterns, $defs names,
# dependentSchemas names) although the docs promise that a pointer repeats plain names only.

SECRET = "Secret Key!"  # not a plain name: never in a pointer


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "object", "patternProperties": {"^(?=" + SECRET + ")": {}}}, "/patternProperties"),
        ({"$defs": {SECRET: {"$ref": "https://example.com/s.json"}}}, "/$defs"),
        ({"$defs": {SECRET: {"type": 5}}}, "/$defs"),
        ({"properties": {SECRET: {"pattern": "(?<=a)b"}}}, "/properties"),
        ({"dependentSchemas": {SECRET: {"$ref": "#/dependentSchemas/" + SECRET}}}, "/dependentSchemas"),
    ],
)
def test_schema_problems_point_no_further_than_a_chosen_key(schema: dict[str, Any], expected: str) -> None:
    from workflows.definitions import schemas

    problems = schemas.check_schema(schema, at="/stateSchema")
    assert problems
    assert all(SECRET not in p.pointer and "Secret" not in p.pointer for p in problems), problems
    assert any(p.pointer == "/stateSchema" + expected for p in problems), problems


def test_a_plain_key_is_still_named_in_a_schema_pointer() -> None:
    from workflows.definitions import schemas

    problems = schemas.check_schema({"$defs": {"money": {"type": 5}}})
    assert [p.pointer for p in problems] == ["/$defs/money/type"]


def test_payload_violations_point_no_further_than_a_chosen_key() -> None:
    from workflows.definitions import schemas

    schema = {
        "type": "object",
        "patternProperties": {"^x": {"type": "integer"}},
        "dependentSchemas": {"x y": {"required": [SECRET]}},
        "required": [SECRET, "plain"],
    }
    problems = schemas.validate(schema, {"x " + SECRET: "not a number", "x y": 1})
    assert problems
    assert all("Secret" not in p.pointer and "x y" not in p.pointer for p in problems), problems
    assert {p.pointer for p in problems} == {"", "/plain"}


def test_a_definition_with_a_chosen_key_in_an_inline_schema_is_refused_without_repeating_it() -> None:
    from workflows import definitions
    from workflows.exceptions import DefinitionError

    text = SIMPLE.replace(
        "stateSchema: {type: object}",
        'stateSchema: {type: object, patternProperties: {"(?=' + SECRET + ')": {}}, '
        '$defs: {"' + SECRET + '": {$ref: "https://example.com/x"}}}',
    )
    with pytest.raises(DefinitionError) as refused:
        definitions.load(scope="default", text=text, format="yaml")
    pointers = [v.pointer for v in refused.value.violations]
    assert pointers and all("Secret" not in p for p in pointers), pointers
    assert "Secret" not in str(refused.value)


def test_a_token_with_a_nul_character_is_a_wrong_token_not_a_retryable_answer(db: None) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token abc\x00def")
    response = client.get("/api/v1/runs/")
    assert response.status_code == 401, response.content
    assert response.json()["code"] == "AUTHENTICATION_FAILED"
    assert "Retry-After" not in response
