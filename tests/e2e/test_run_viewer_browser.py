"""The run viewer and the cancel-run confirmation in Chromium; the executor runs in-process
(the same ``executor.drain`` as tests/engine/conftest.py's ``drain``) so the test decides exactly when a run moves on.

Set ``SWITCHYARD_SCREENSHOTS=1`` to refresh docs/screenshots/run-viewer.png; otherwise the
screenshot goes to the test's temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from tests.support.browser import login
from workflows import definitions, operations
from workflows.engine import executor
from workflows.models import Run

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"

ORDER = """
definitionId: order-payment
definitionVersion: 1
contract:
  name: order-payment.v1
  signals:
    paid: {type: object, properties: {amount: {type: number}, method: {type: string}}, required: [amount]}
stateSchema: {type: object}
startPayloadSchema:
  type: object
  properties: {order: {type: string}, customer: {type: string}, total: {type: number}}
  required: [order, total]
initialState: "{'order': payload.order, 'customer': payload.customer, 'total': payload.total, 'paid': 0.0}"
initialStep: wait-payment
steps:
  - id: wait-payment
    type: wait-signal
    signal: paid
    set: "{'paid': payload.amount, 'method': payload.method}"
    next: check-amount
    timeout: {after: P3D, next: expired}
  - id: check-amount
    type: decision
    routes:
      - when: "state.paid >= state.total"
        to: ship
    default: chase
  - id: chase
    type: wait-signal
    signal: paid
    set: "{'paid': state.paid + payload.amount}"
    next: check-amount
  - id: ship
    type: complete
  - id: expired
    type: fail
    errorType: payment-timeout
"""


def deploy(text: str) -> None:
    ref = definitions.load(scope="default", text=text, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")


def drain() -> None:
    """Run the executor in-process until nothing is runnable."""
    executor.drain(budget_seconds=10)


def _shots(tmp_path: Path) -> Path:
    return DOCS if os.environ.get("SWITCHYARD_SCREENSHOTS") else tmp_path


def _staff(name: str, *, cancel: bool) -> None:
    account = get_user_model().objects.create_user(name, password=name, is_staff=True)
    # the viewer needs view runs; its Cancel run needs cancel runs (workflows.access)
    for codename in ("view_run", "cancel_runs") if cancel else ("view_run",):
        account.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="workflows"))


def _start(demo_users: dict[str, Any], order: str) -> str:
    payload = {"order": order, "customer": "Acme Tools", "total": 480.0}
    return operations.start(
        definition_id="order-payment", business_key=order, payload=payload, actor=demo_users["alice"]
    ).run_id


def test_the_viewer_explains_each_step_with_who_did_it_and_the_state_change(
    page: Page,
    live_server: Any,
    demo_users: dict[str, Any],
    tmp_path: Path,
) -> None:
    deploy(ORDER)
    run_id = _start(demo_users, "SO-2041")
    drain()
    operations.signal(run_id=run_id, name="paid", payload={"amount": 480.0, "method": "card"}, actor=demo_users["bob"])
    drain()
    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    _staff("operator", cancel=False)

    login(page, live_server, "operator", "operator", next=f"/runs/{run_id}/")
    assert page.locator("#started-by").inner_text() == "alice"
    assert page.locator("#run-status").inner_text() == "Completed"

    rows = page.locator("#timeline-rows tr.entry")
    received = rows.filter(has_text="Signal received")
    assert "bob" in received.locator("td.who").inner_text()
    applied = rows.filter(has_text="signal-applied")
    assert "bob" in applied.locator("td.who").inner_text()
    assert "set /paid = 480.0" in " ".join(applied.inner_text().split())
    assert 'added /method = "card"' in " ".join(applied.inner_text().split())
    chose = rows.filter(has_text="chose ship")
    assert "bob" in chose.locator("td.who").inner_text()
    started = rows.filter(has_text="Workflow started")
    assert "alice" in started.locator("td.who").inner_text()

    # the state before and after a decision, fetched by htmx into the row
    applied.get_by_role("link", name="State before and after").click()
    change = page.locator("tr.change-row .change-table")
    change.wait_for()
    paid_row = " ".join(change.locator("tr", has_text="/paid").inner_text().split())
    assert paid_row == "/paid 0.0 480.0"
    assert "absent" in change.locator("tr", has_text="/method").inner_text()

    # the picture: the path taken is highlighted, step by step
    graph = page.locator("figure.graph-wrap svg")
    assert graph.locator("g.wfg-visited").count() == 3  # wait-payment, check-amount, ship
    assert graph.locator("path.wfg-taken").count() == 2
    assert "Path taken: wait-payment → check-amount → ship" in page.locator(".legend").inner_text()

    page.screenshot(path=str(_shots(tmp_path) / "run-viewer.png"), full_page=True)

    # filtering the timeline (htmx swaps the rows)
    page.select_option("#timeline-only", "signals")
    page.wait_for_function("() => !document.querySelector('#timeline-rows tr[data-type=\"DECISION\"]')")
    types = set(page.locator("#timeline-rows tr.entry").evaluate_all("rows => rows.map(r => r.dataset.type)"))
    assert types == {"SIGNAL_RECEIVED"}


def test_cancel_run_confirms_and_refuses_users_without_the_permission(
    page: Page,
    live_server: Any,
    demo_users: dict[str, Any],
) -> None:
    deploy(ORDER)
    run_id = _start(demo_users, "SO-2042")
    drain()
    _staff("operator", cancel=False)
    _staff("owner", cancel=True)

    login(page, live_server, "operator", "operator", next=f"/runs/{run_id}/")
    assert page.get_by_role("button", name="Cancel run…").count() == 0
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    refused = page.request.post(
        f"{live_server.url}/runs/{run_id}/cancel/",
        form={"seen_state_version": "1", "seen_history_seq": "99"},
        headers={"X-CSRFToken": csrf},
    )
    assert refused.status == 403 and "CSRF verification failed" not in refused.text()  # the permission, not the token
    assert page.goto(f"{live_server.url}/runs/{run_id}/cancel/").status == 403
    page.context.clear_cookies()

    login(page, live_server, "owner", "owner", next=f"/runs/{run_id}/")
    page.get_by_role("button", name="Cancel run…").click()
    page.wait_for_url("**/cancel/**")
    confirmation = page.locator("main").inner_text()
    assert "This cannot be undone." in confirmation
    assert "1 timer" in confirmation and "Timeout at wait-payment" in confirmation
    assert Run.objects.get(pk=run_id).status == "WAITING"  # asking changed nothing
    page.fill("#reason", "order withdrawn by the customer")
    page.get_by_role("button", name="Yes, cancel this run").click()
    page.wait_for_url(f"**/runs/{run_id}/")
    assert page.locator("#run-status").inner_text() == "Cancelled"
    assert "The run was cancelled" in page.locator(".messages").inner_text()
    run = Run.objects.get(pk=run_id)
    assert run.status == "CANCELLED" and run.cancel_reason == "order withdrawn by the customer"


def test_cancel_reports_already_moved_on_when_a_signal_was_applied_meanwhile(
    page: Page,
    live_server: Any,
    demo_users: dict[str, Any],
) -> None:
    deploy(ORDER)
    run_id = _start(demo_users, "SO-2043")
    drain()
    _staff("owner", cancel=True)

    login(page, live_server, "owner", "owner", next=f"/runs/{run_id}/")
    page.get_by_role("button", name="Cancel run…").click()
    page.wait_for_url("**/cancel/**")
    assert "This cannot be undone." in page.locator("main").inner_text()

    # between showing the confirmation and confirming, the payment arrives
    operations.signal(
        run_id=run_id, name="paid", payload={"amount": 100.0, "method": "transfer"}, actor=demo_users["bob"]
    )
    drain()
    assert Run.objects.get(pk=run_id).current_step == "chase"  # still waiting, but it moved on

    page.get_by_role("button", name="Yes, cancel this run").click()
    alert = page.locator("#moved-on")
    alert.wait_for()
    assert "already moved on" in alert.inner_text() and "nothing was cancelled" in alert.inner_text()
    run = Run.objects.get(pk=run_id)
    assert run.status == "WAITING" and run.current_step == "chase"
