"""The permission matrix (``workflows.access``), checked over every route of the site.

The story (issue #25): cancelling asked for ``change_run`` in the API, for
``change_definitionversion`` in the run viewer and for ``cancel_runs`` on the radar; a staff
user without any permission read every run's state in the HTML run viewer while the API
refused them; ``/ops/`` and the designer's texts were open to any staff user. The matrix now
lives once, and this test is generated from it: the URL conf is walked, every named route
must be in the matrix (or be public / assignment-based / plain Django admin), and for each
route and method of the matrix a signed-in user without the capability gets 403 (a 403 page,
or problem+json in the API), a staff user without it gets 403 too, an inactive user holding
its permission is not let in, and an active user holding just its permission gets through.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.reliability.routes import _walk, routes
from workflows import access, definitions, operations
from workflows.access import ADMIN, ASSIGNMENT, PUBLIC, TOKEN, Capability
from workflows.engine import executor
from workflows.models import Command, OutboxIntent, Task

pytestmark = pytest.mark.django_db(transaction=True)

APPROVAL = """
definitionId: access-{n}
definitionVersion: {v}
contract: {{name: access.v1, signals: {{go: {{type: object}}}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialStep: review
steps:
  - id: review
    type: human-task
    title: "Review"
    assignment: {{mode: group, value: approvers}}
    decisions:
      - {{name: approve, next: done}}
  - {{id: done, type: complete}}
"""

# a body that reaches each write far enough to be judged (the holder's answer only must not be 403)
BODIES: dict[str, Any] = {
    "switchyard_api:runs": {"definition_id": "access-1", "payload": {}},
    "switchyard_api:run-signals": {"name": "go", "payload": {}},
    "switchyard_api:run-cancel": {"reason": "matrix"},
    "switchyard_api:run-migrate": {"target_version": 2},
    "switchyard_api:definitions": {"scope": "default", "format": "yaml", "text": "definitionId: x"},
    "switchyard_api:activation": {"version": 1},
    "switchyard_api:capture-reconcile": {"replay": False, "reason": "matrix"},
    "switchyard_api:migrations": {},
    "switchyard_api:bulk-operations": {"signal": {"name": "go"}},  # no runs chosen: a holder gets 400, nothing frozen
    "workflows:runs:cancel": {"reason": "matrix"},
    "admin:capture_capture_reconcile_confirm": {"reason": "matrix"},
}
BULK_ACTION = {Capability.RETRY: "retry", Capability.CANCEL: "cancel", Capability.SIGNAL: "signal"}


def deploy(n: int, version: int = 1) -> None:
    ref = definitions.load(scope="default", text=APPROVAL.format(n=n, v=version), format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    if version == 1:
        definitions.activate(
            scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default"
        )


def make_user(name: str, *perms: str, staff: bool = False, active: bool = True) -> Any:
    user = get_user_model().objects.create_user(name, password=name, is_staff=staff, is_active=active)
    for dotted in perms:
        app_label, codename = dotted.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return get_user_model().objects.get(pk=user.pk)  # no permission cache


@pytest.fixture
def world() -> dict[str, Any]:
    """A waiting run with an open task, a second revision and a previewed migration, a
    command, a capture: the ids every route needs."""
    deploy(1)
    deploy(1, version=2)
    webhook, _ = operations.webhook_create(url="https://hooks.invalid/access", events=["run.started"])
    run_id = operations.start(definition_id="access-1", payload={}).run_id
    executor.drain(budget_seconds=10)
    record = operations.migration_preview(
        scope="default", definition_id="access-1", source_version=1, target_version=2,
        rows=[{"node": "review", "kind": "TASK", "action": "move", "target_node": "review", "runs": "all"}],
    )  # fmt: skip
    from capture.models import Capture

    capture = Capture.objects.create(
        model="demo.PurchaseOrder", object_pk="1", event="created", status="OUTCOME_UNKNOWN"
    )
    task = Task.objects.get(run_id=run_id)
    bulk = operations.bulk_operation_create(action="retry", run_ids=[run_id])
    command = Command.objects.filter(run_id=run_id).order_by("id").first()
    assert command is not None
    ids = {
        "run": str(run_id), "run_id": str(run_id), "task": str(task.id), "task_id": str(task.id),
        "command_id": command.id, "seq": 1, "i": 0, "scope": "default", "definition_id": "access-1",
        "version": 1, "record": record, "record_id": record, "capture": capture.pk, "capture_id": capture.pk,
        "decision": "resolve", "bulk": bulk, "webhook_id": webhook.id,
        "delivery_id": OutboxIntent.objects.get(run_id=run_id, kind="EVENT").id,
    }  # fmt: skip
    return {"ids": ids}


def _api(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def _browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _call(user: Any, name: str, url: str, method: str, body: Any) -> Any:
    if name.startswith("switchyard_api:"):
        client: Any = _api(user)
        call = getattr(client, method.lower())
        return call(url, body, format="json") if method != "GET" else call(url)
    browser = _browser(user)
    return getattr(browser, method.lower())(url, body or {}) if method != "GET" else browser.get(url)


def _checks(guard: Any) -> list[tuple[Capability, dict[str, Any]]]:
    """(capability, extra body) for one route and method of the matrix."""
    if isinstance(guard, tuple):
        return [(c, {"action": BULK_ACTION[c], "run": []}) for c in guard]
    return [(guard, {})] if isinstance(guard, Capability) else []


def test_every_route_of_the_site_is_in_the_permission_matrix() -> None:
    from django.urls import get_resolver

    names = {name for name, _, _ in _walk(get_resolver().url_patterns)}
    unknown = sorted(n for n in names if access.route_guard(n) is None)
    assert unknown == [], f"routes missing from workflows.access.ROUTES: {unknown}"
    stale = sorted(set(access.ROUTES) - names)
    assert stale == [], f"matrix rows for routes that do not exist: {stale}"
    kinds = {g for guards in access.ROUTES.values() for g in guards.values()}
    assert kinds <= {
        *Capability,
        PUBLIC,
        ASSIGNMENT,
        TOKEN,
        ADMIN,
        (Capability.RETRY, Capability.CANCEL),
        (Capability.CANCEL, Capability.RETRY, Capability.SIGNAL),
        frozenset({Capability.START, Capability.SIGNAL}),
    }


def test_signal_with_start_needs_both_the_start_and_the_signal_capability() -> None:
    rule = access.MATRIX
    body = {"definition_id": "nothing-here", "business_key": "k", "name": "go"}
    url = "/api/v1/runs/by-key/signal-with-start/"
    for name, capabilities in (
        ("only-start", [Capability.START]),
        ("only-signal", [Capability.SIGNAL]),
        ("both", [Capability.START, Capability.SIGNAL]),
    ):
        user = make_user(name, *(rule[c].permissions[0] for c in capabilities))
        response = _api(user).post(url, body, format="json")
        if name == "both":
            assert response.status_code not in (401, 403), response.content
        else:
            assert response.status_code == 403, (name, response.status_code)
            assert response["Content-Type"].startswith("application/problem+json")


def test_each_capability_is_refused_without_it_even_to_staff_and_granted_with_it(world: dict[str, Any]) -> None:
    crawled, _ = routes(world["ids"])
    by_name = {r.name: r for r in crawled}
    missing = sorted(n for n, g in access.ROUTES.items() if n not in by_name and any(_checks(x) for x in g.values()))
    assert missing == [], f"matrix routes the test could not fill: {missing}"
    plain = make_user("plain")
    staff = make_user("staffer", staff=True)
    holders: dict[Capability, Any] = {}
    sleepers: dict[Capability, Any] = {}
    for capability, rule in access.MATRIX.items():
        holders[capability] = make_user(f"has-{capability.name.lower()}", rule.permissions[0])
        sleepers[capability] = make_user(f"inactive-{capability.name.lower()}", rule.permissions[0], active=False)
    wrong: list[str] = []
    checked = 0
    for name, guards in sorted(access.ROUTES.items()):
        for method, guard in guards.items():
            for capability, extra in _checks(guard):
                url = by_name[name].url
                body = {**BODIES.get(name, {}), **extra}
                label = f"{method} {url} ({name}, needs {capability.value})"
                for who, user in (("a user without it", plain), ("a staff user without it", staff)):
                    response = _call(user, name, url, method, body)
                    content_type = response.get("Content-Type", "")
                    if response.status_code != 403:
                        wrong.append(f"{label} as {who}: {response.status_code}, not 403")
                    elif name.startswith("switchyard_api:") and not content_type.startswith("application/problem+json"):
                        wrong.append(f"{label} as {who}: 403 as {content_type}, not problem+json")
                    elif not name.startswith("switchyard_api:") and not content_type.startswith("text/html"):
                        wrong.append(f"{label} as {who}: 403 as {content_type}, not a page")
                response = _call(sleepers[capability], name, url, method, body)
                if response.status_code not in (302, 401, 403):
                    wrong.append(f"{label} as an inactive holder: {response.status_code}, not refused")
                response = _call(holders[capability], name, url, method, body)
                if response.status_code in (401, 403) or (
                    response.status_code == 302 and "login" in response.get("Location", "")
                ):
                    wrong.append(f"{label} as a holder of {capability.value}: {response.status_code}, refused")
                checked += 1
    assert checked > 50, checked
    assert wrong == [], "\n".join(wrong)


def test_staff_alone_grants_no_capability_and_superusers_hold_all() -> None:
    staff = make_user("staff-only", staff=True)
    root = get_user_model().objects.create_superuser("root", password="root")
    inactive_root = get_user_model().objects.create_superuser("old-root", password="old-root", is_active=False)
    assert access.capabilities(staff) == set()
    assert access.capabilities(root) == set(Capability)
    assert access.capabilities(inactive_root) == set()


def test_cancel_is_one_capability_in_the_api_the_run_viewer_and_the_radar(world: dict[str, Any]) -> None:
    """The drift of the issue: the same user is refused or admitted alike everywhere."""
    run = world["ids"]["run"]
    deployer = make_user("deployer", "workflows.change_definitionversion", staff=True)
    canceller = make_user("canceller", "workflows.cancel_runs", staff=True)
    surfaces = [
        ("api", lambda u: _api(u).post(f"/api/v1/runs/{run}/cancel/", {"reason": "x"}, format="json")),
        ("viewer", lambda u: _browser(u).get(f"/runs/{run}/cancel/")),
        ("radar", lambda u: _browser(u).post("/ops/radar/bulk/", {"action": "cancel", "run": [run]})),
    ]
    assert [(s, call(deployer).status_code) for s, call in surfaces] == [(s, 403) for s, _ in surfaces]
    assert all(call(canceller).status_code != 403 for _, call in surfaces)


def test_a_refused_page_is_one_warning_line_in_the_log(world: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    """An expected refusal is not an error: one "Forbidden" line, no traceback, the 403 page."""
    run = world["ids"]["run"]
    nobody = make_user("no-capability")
    with caplog.at_level("WARNING", logger="django.request"):
        pages = [_browser(nobody).get(path) for path in ("/runs/", f"/runs/{run}/", "/ops/radar/")]
        radar = _browser(nobody).post("/ops/radar/bulk/", {"action": "cancel", "run": [run]})
    assert [p.status_code for p in [*pages, radar]] == [403, 403, 403, 403]
    logged = [r for r in caplog.records if r.name == "django.request"]
    assert len(logged) == 4 and all(r.levelname == "WARNING" and r.exc_info is None for r in logged)
    assert all(r.getMessage().startswith("Forbidden") for r in logged)


def test_the_documented_matrix_is_the_enforced_one() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "reliability.md").read_text()
    assert "## Permission matrix" in doc
    for capability, rule in access.MATRIX.items():
        row = next((line for line in doc.splitlines() if line.startswith(f"| {capability.value} |")), None)
        assert row is not None, f"docs/reliability.md has no row for {capability.value}"
        granted = row.split("|")[2]
        assert [p.strip("` ") for p in granted.split(",")] == list(rule.permissions), capability
