"""Security: who may do what (a refused attempt changes no row), CSRF on every state-changing
route, no state-changing GET, framing refused, ``check --deploy`` clean, identity taken only
from authentication, throttling keyed on the authenticated user.

Routes are crawled from the URL conf (``tests.reliability.routes``); "changes no row" is a
fingerprint of every table (row count and a hash of every row) taken before and after.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.contrib.contenttypes.models import ContentType
from django.core.cache import cache
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from rest_framework.throttling import UserRateThrottle

from tests.reliability.routes import changed, fingerprint, routes
from workflows import definitions, operations
from workflows.engine import executor
from workflows.models import Command, HistoryEntry, Run, Task

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
APPROVAL = """
definitionId: {id}
definitionVersion: 1
contract: {{name: {id}.v1, signals: {{go: {{type: object}}}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialStep: review
steps:
  - id: review
    type: human-task
    title: "Review {{{{ state.n }}}}"
    assignment: {{mode: {mode}, value: {value}}}
    decisions:
      - {{name: approve, next: wait-go}}
      - {{name: reject, next: done}}
  - {{id: wait-go, type: wait-signal, signal: go, next: done}}
  - {{id: done, type: complete}}
"""


@pytest.fixture
def world(demo_users: dict[str, Any]) -> dict[str, Any]:
    """alice's own task (assigned to her), a task of the approvers group, users with and
    without permissions, and the ids every route needs."""
    for definition_id, mode, value in (("rel-sec-alice", "user", "alice"), ("rel-sec-group", "group", "approvers")):
        ref = definitions.load(scope="default", text=APPROVAL.format(id=definition_id, mode=mode, value=value),
                               format="yaml")  # fmt: skip
        definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
        definitions.activate(
            scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default"
        )
    alice_run = operations.start(definition_id="rel-sec-alice", payload={"n": 1}).run_id
    group_run = operations.start(definition_id="rel-sec-group", payload={"n": 2}).run_id
    executor.drain()
    staffer = User.objects.create_user(username="staffer", password="staffer", is_staff=True)
    outsider = User.objects.create_user(username="outsider", password="outsider")
    outsider.groups.add(Group.objects.get_or_create(name="someone-else")[0])
    alice_task = str(Task.objects.get(run_id=alice_run).id)
    group_task = str(Task.objects.get(run_id=group_run).id)
    command = Command.objects.filter(run_id=alice_run).order_by("id").first()
    assert command is not None
    # rows for the routes that need one: a second revision and a previewed migration, a token,
    # a purchase order of the demo app
    ref = definitions.load(scope="default", text=APPROVAL.format(id="rel-sec-alice", mode="user", value="alice")
                           .replace("definitionVersion: 1", "definitionVersion: 2"), format="yaml")  # fmt: skip
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    record = operations.migration_preview(
        scope="default", definition_id="rel-sec-alice", source_version=1, target_version=2,
        rows=[{"node": "review", "kind": "TASK", "action": "move", "target_node": "review", "runs": "all"}],
    )  # fmt: skip
    Token.objects.get_or_create(user=demo_users["admin"])
    from demo.models import PurchaseOrder

    PurchaseOrder.objects.create(number="SEC-1", requester="requester", total=5)
    from capture.models import Capture

    capture = Capture.objects.create(model="demo.PurchaseOrder", object_pk="1", event="created",
                                     status="OUTCOME_UNKNOWN")  # fmt: skip
    ids = {
        "run": str(alice_run), "run_id": str(alice_run), "task": alice_task, "task_id": alice_task,
        "command_id": command.id, "seq": 1, "i": 0, "scope": "default", "definition_id": "rel-sec-alice",
        "version": 1, "app_label": "workflows", "content_type_id": ContentType.objects.get_for_model(Run).id,
        "record": record, "record_id": record, "user": demo_users["alice"].pk, "capture": capture.pk,
        "capture_id": capture.pk, "decision": "replay",
    }  # fmt: skip
    return {
        **demo_users,
        "staffer": staffer,
        "outsider": outsider,
        "alice_run": str(alice_run),
        "group_run": str(group_run),
        "alice_task": alice_task,
        "group_task": group_task,
        "ids": ids,
    }


def api_for(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def browser_for(user: User | None, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    if user is not None:
        client.force_login(user)
    return client


def write(report: dict[str, Any], name: str) -> None:
    folder = os.environ.get("RELIABILITY_RESULTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        mode = os.environ.get("RELIABILITY_MODE", "lite")
        (Path(folder) / f"{time.strftime('%Y%m%d-%H%M%S')}-{mode}-{name}.json").write_text(json.dumps(report, indent=2))


# --- approvers act only on their own tasks -------------------------------------------------------


def test_an_approver_sees_and_acts_only_on_tasks_assigned_to_them(world: dict[str, Any]) -> None:
    alice_task, group_task = world["alice_task"], world["group_task"]
    bob_api, bob_browser = api_for(world["bob"]), browser_for(world["bob"])
    listed = {t["id"] for t in bob_api.get("/api/v1/tasks/").json()["results"]}
    assert group_task in listed and alice_task not in listed
    inbox = bob_browser.get("/tasks/").content.decode()
    assert group_task in inbox and alice_task not in inbox
    outsider_listed = {t["id"] for t in api_for(world["outsider"]).get("/api/v1/tasks/").json()["results"]}
    assert not {alice_task, group_task} & outsider_listed
    assert alice_task not in browser_for(world["outsider"]).get("/tasks/").content.decode()

    before = fingerprint()
    attempts = [
        bob_api.get(f"/api/v1/tasks/{alice_task}/"),
        bob_api.post(f"/api/v1/tasks/{alice_task}/complete/", {"decision": "approve"}, format="json"),
        bob_api.post(f"/api/v1/tasks/{alice_task}/reassign/", {"mode": "user", "value": "bob"}, format="json"),
        bob_browser.get(f"/tasks/{alice_task}/"),
        bob_browser.post(f"/tasks/{alice_task}/", {"decision": "approve", "idempotency_key": uuid.uuid4().hex}),
    ]
    assert [r.status_code for r in attempts] == [404] * len(attempts)
    assert changed(before, fingerprint()) == []

    alice_api = api_for(world["alice"])  # the assignee can (the control: the refusals were not noise)
    assert (
        alice_api.post(f"/api/v1/tasks/{alice_task}/complete/", {"decision": "approve"}, format="json").status_code
        == 202
    )


def permission_matrix(world: dict[str, Any]) -> list[tuple[str, str, str, Any]]:
    """(label, channel, method path, body) of every action that needs a permission or an
    assignment. Channels: ``api`` (token) and ``browser`` (session, CSRF token sent)."""
    run, task, group_task = world["alice_run"], world["alice_task"], world["group_task"]
    cmd = world["ids"]["command_id"]
    doc = APPROVAL.format(id="rel-sec-new", mode="user", value="alice")
    return [
        ("start a run", "api", "post /api/v1/runs/", {"definition_id": "rel-sec-alice", "payload": {}}),
        ("signal a run", "api", f"post /api/v1/runs/{run}/signals/", {"name": "go", "payload": {}}),
        ("cancel a run", "api", f"post /api/v1/runs/{run}/cancel/", {"reason": "no"}),
        ("retry a run", "api", f"post /api/v1/runs/{run}/retry/", {}),
        ("migrate a run", "api", f"post /api/v1/runs/{run}/migrate/", {"target_version": 1}),
        ("complete another's task", "api", f"post /api/v1/tasks/{task}/complete/", {"decision": "approve"}),
        ("reassign another's task", "api", f"post /api/v1/tasks/{task}/reassign/", {"mode": "user", "value": "x"}),
        ("load a definition", "api", "post /api/v1/definitions/", {"scope": "default", "format": "yaml", "text": doc}),
        ("deprecate a revision", "api", "post /api/v1/definitions/default/rel-sec-alice/1/deprecate/", {}),
        ("retire a revision", "api", "post /api/v1/definitions/default/rel-sec-alice/1/retire/", {}),
        ("activate a revision", "api", "put /api/v1/activations/default/rel-sec-alice/", {"version": 1}),
        ("remove an activation", "api", "delete /api/v1/activations/default/rel-sec-alice/", None),
        ("reconcile a capture", "api", f"post /api/v1/captures/{world['ids']['capture']}/reconcile/",
         {"replay": True, "reason": "no"}),
        ("complete another's task (form)", "browser", f"post /tasks/{task}/", {"decision": "approve"}),
        ("cancel a run (viewer)", "browser", f"post /runs/{run}/cancel/", {"reason": "no", "confirm": "1"}),
        ("retry from the radar", "browser", "post /ops/radar/retry/", {"run_id": run}),
        ("bulk cancel from the radar", "browser", "post /ops/radar/bulk/",
         {"action": "cancel", "run": [run], "confirm": "1"}),
        ("reconcile from the radar", "browser", f"post /ops/radar/reconcile/{cmd}/",
         {"action": "resolve", "reason": "no"}),
        ("preview a migration", "browser", "post /migrate/default/rel-sec-alice/preview/", {"target_version": 1}),
        ("deploy from the designer", "browser", "post /designer/deploy/", {"text": doc, "scope": "default"}),
        ("admin: retry runs", "browser", "post /admin/workflows/run/", {"action": "retry", "_selected_action": [run]}),
        ("admin: deprecate revisions", "browser", "post /admin/workflows/definitionversion/",
         {"action": "deprecate", "_selected_action": ["1"]}),
        ("admin: reassign tasks", "browser", "post /admin/workflows/task/",
         {"action": "reassign", "_selected_action": [group_task]}),
    ]  # fmt: skip


def test_every_action_of_the_permission_matrix_is_refused_without_its_permission(world: dict[str, Any]) -> None:
    actors = {"anonymous": None, "requester": world["requester"], "bob (approver)": world["bob"],
              "staff without permissions": world["staffer"]}  # fmt: skip
    refused, allowed = [], []
    for label, channel, target, body in permission_matrix(world):
        method, path = target.split(" ", 1)
        for actor, user in actors.items():
            if (label, actor) == ("start a run", "requester"):
                continue  # the requester's one capability: starting runs (seed_demo, the README)
            client: Any = api_for(user) if channel == "api" else browser_for(user)
            before = fingerprint()
            if channel == "api":
                response = (
                    getattr(client, method)(path, body, format="json")
                    if body is not None
                    else getattr(client, method)(path)
                )
            else:
                response = getattr(client, method)(path, body or {})
            diff = changed(before, fingerprint())
            entry = f"{label} as {actor}: {response.status_code}"
            if diff or response.status_code < 300 or response.status_code >= 500:
                allowed.append(f"{entry} changed {diff}")
            else:
                refused.append(entry)
            cache.clear()  # the throttle must not be what refuses
    total = len(refused) + len(allowed)
    write({"kind": "permission-matrix", "ok": not allowed, "attempts": total, "refused": len(refused),
           "refused_share": round(len(refused) / total, 4), "allowed": allowed}, "permissions")  # fmt: skip
    assert not allowed, "\n".join(allowed)


# --- CSRF, safe GETs, framing -----------------------------------------------------------------------


def test_no_route_changes_anything_on_get_and_every_html_page_refuses_framing(world: dict[str, Any]) -> None:
    crawled, skipped = routes(world["ids"])
    admin = browser_for(world["admin"])
    writes, errors, unframed, html = [], [], [], 0
    for route in crawled:
        before = fingerprint()
        response = admin.get(route.url)
        diff = changed(before, fingerprint())
        if diff:
            writes.append(f"GET {route.url} ({route.template}) changed {diff}")
        if response.status_code >= 500:
            errors.append(f"GET {route.url}: {response.status_code}")
        if response.get("Content-Type", "").startswith("text/html"):
            html += 1
            if response.get("X-Frame-Options") != "DENY" or "frame-ancestors 'none'" not in response.get(
                "Content-Security-Policy", ""
            ):
                unframed.append(route.url)
    anonymous_login = Client().get("/accounts/login/")
    assert anonymous_login["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in anonymous_login["Content-Security-Policy"]
    write({"kind": "safe-get", "ok": not (writes or errors or unframed), "routes": len(crawled), "html_pages": html,
           "skipped": skipped, "writes": writes, "errors": errors, "unframed": unframed}, "safe-get")  # fmt: skip
    assert len(crawled) > 60 and html > 20, (len(crawled), html)
    assert not writes, writes
    assert not errors, errors
    assert not unframed, unframed


def test_every_post_without_a_csrf_token_is_refused(world: dict[str, Any]) -> None:
    crawled, _ = routes(world["ids"])
    admin = browser_for(world["admin"], csrf=True)
    before = fingerprint()
    accepted = []
    for route in crawled:
        response = admin.post(route.url, {"reason": "csrf", "decision": "approve", "action": "retry"})
        if response.status_code != 403:
            accepted.append(f"POST {route.url} ({route.template}): {response.status_code}")
    diff = changed(before, fingerprint())
    write({"kind": "csrf", "ok": not accepted and not diff, "routes": len(crawled), "accepted": accepted}, "csrf")
    assert not accepted, accepted
    assert diff == []


# --- deployment checks, identity, throttling ------------------------------------------------


def test_check_deploy_is_clean_with_production_settings() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}  # set by the test suite only
    env = {**env, "DEBUG": "false", "SECRET_KEY": secrets.token_urlsafe(64), "SECURE_COOKIES": "true",
           "DJANGO_SETTINGS_MODULE": "config.settings"}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_identity_comes_from_authentication_never_from_headers_or_payloads(world: dict[str, Any]) -> None:
    forged = {"HTTP_X_WORKFLOW_ACTOR_ID": "mallory", "HTTP_X_WORKFLOW_ACTOR_KIND": "SYSTEM",
              "HTTP_X_WORKFLOW_ON_BEHALF_OF": "mallory", "HTTP_X_REMOTE_USER": "mallory",
              "HTTP_REMOTE_USER": "mallory"}  # fmt: skip
    admin_api = api_for(world["admin"])
    started = admin_api.post("/api/v1/runs/", {"definition_id": "rel-sec-group", "payload": {"n": 3, "actor": "mallory",
                             "actor_id": "mallory", "user": "mallory"}}, format="json", **forged)  # fmt: skip
    assert started.status_code == 202, started.content
    run_id = started.json()["run"]
    executor.drain(run_id=run_id)
    task = str(Task.objects.get(run_id=run_id).id)
    done = api_for(world["bob"]).post(f"/api/v1/tasks/{task}/complete/", {"decision": "approve", "payload": {},
                                      "actor": "mallory"}, format="json", **forged)  # fmt: skip
    assert done.status_code in (202, 400), done.content  # a payload field the decision does not take may be refused
    if done.status_code == 400:
        done = api_for(world["bob"]).post(f"/api/v1/tasks/{task}/complete/", {"decision": "approve"}, format="json",
                                          **forged)  # fmt: skip
        assert done.status_code == 202, done.content
    session = browser_for(world["admin"])
    signalled = session.post(f"/api/v1/runs/{run_id}/signals/", json.dumps({"name": "go"}),
                                                 content_type="application/json", **forged)  # fmt: skip
    executor.drain(run_id=run_id)
    commands = {c.kind: c for c in Command.objects.filter(run_id=run_id)}
    recorded = {k: (c.actor_kind, c.actor_id, c.on_behalf_of, c.attribution_status) for k, c in commands.items()}
    assert recorded["START"] == ("USER", "admin", "", "VERIFIED"), recorded
    assert recorded["COMPLETION"] == ("USER", "bob", "", "VERIFIED"), recorded
    assert signalled.status_code == 202, signalled.content  # a signed-in browser, session and CSRF cookie
    assert recorded["SIGNAL"] == ("USER", "admin", "", "VERIFIED"), recorded
    actors = set(HistoryEntry.objects.filter(run_id=run_id).values_list("actor_id", "on_behalf_of"))
    assert not [a for a in actors if "mallory" in a], actors
    assert not Command.objects.filter(run_id=run_id, actor_kind="SYSTEM").exists()


def test_throttling_is_keyed_on_the_authenticated_user(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    cache.clear()
    monkeypatch.setattr(UserRateThrottle, "rate", "3/minute", raising=False)
    alice, bob = api_for(world["alice"]), api_for(world["bob"])
    for i in range(3):  # alice from three "addresses": still one user
        assert (
            alice.get("/api/v1/tasks/", REMOTE_ADDR=f"10.0.0.{i}", HTTP_X_FORWARDED_FOR=f"10.1.0.{i}").status_code
            == 200
        )
    refused = alice.get("/api/v1/tasks/", REMOTE_ADDR="10.0.0.9", HTTP_X_FORWARDED_FOR="10.1.0.9")
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert bob.get("/api/v1/tasks/", REMOTE_ADDR="10.0.0.0").status_code == 200  # same address, another user
    cache.clear()
