"""An operator acts from the run page in Chromium, keyboard only, with the real worker and
beat (issue #30): signals a waiting run through the form generated from the wait's payload
schema, then retries a failed one on a phone-sized screen.

Set ``SWITCHYARD_SCREENSHOTS=1`` to refresh docs/screenshots/run-actions.png; otherwise the
screenshots go to the test's temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from tests.support.browser import login
from tests.support.waiting import eventually
from workflows import definitions, operations
from workflows.models import HistoryEntry, Run

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

# the flaky timeout's mutator (tests.support.engine_callbacks) in the worker too
_modules = [m for m in os.environ.get("SWITCHYARD_CALLBACK_MODULES", "").split(",") if m]
if "tests.support.engine_callbacks" not in _modules:
    os.environ["SWITCHYARD_CALLBACK_MODULES"] = ",".join([*_modules, "tests.support.engine_callbacks"])
import tests.support.engine_callbacks  # noqa: E402,F401  (same registrations in this process)

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"

ORDER = """
definitionId: order-actions
definitionVersion: 1
contract:
  name: order-actions.v1
  signals:
    paid:
      type: object
      properties:
        amount: {type: number, title: Amount, minimum: 0}
        method: {type: string, title: Method, enum: [card, transfer]}
      required: [amount]
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialState: "{'total': payload.total, 'paid': 0.0}"
initialStep: wait-payment
steps:
  - id: wait-payment
    type: wait-signal
    signal: paid
    set: "{'paid': state.paid + payload.amount}"
    next: check-amount
  - id: check-amount
    type: decision
    routes:
      - when: "state.paid >= state.total"
        to: ship
    default: wait-payment
  - id: ship
    type: complete
"""

FLAKY = """
definitionId: flaky-actions
definitionVersion: 1
contract: {name: flaky-actions.v1, signals: {go: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: wait-go
steps:
  - id: wait-go
    type: wait-signal
    signal: go
    next: done
    timeout:
      after: PT1S
      next: expired
      mutator: test.mutator_while_gate
  - {id: done, type: complete}
  - {id: expired, type: complete}
"""


def deploy(text: str) -> None:
    ref = definitions.load(scope="default", text=text, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")


def operator() -> None:
    account = get_user_model().objects.create_user("operator", password="operator")
    # view runs, and change_run: signal runs and retry runs (workflows.access)
    for codename in ("view_run", "change_run"):
        account.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="workflows"))


def status_is(run_id: str, status: str, worker: Any) -> Run:
    eventually(
        lambda: Run.objects.get(pk=run_id).status == status,
        timeout=60,
        what=f"the run to be {status}",
        details=worker.logs,
    )
    return Run.objects.get(pk=run_id)


def tab_to(page: Page, selector: str, presses: int = 80) -> None:
    """Press Tab until ``selector`` has the focus (keyboard only, as a person would)."""
    for _ in range(presses):
        page.keyboard.press("Tab")
        if page.evaluate("s => document.activeElement && document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"{selector} never got the focus by Tab")


def press(page: Page, selector: str) -> None:
    tab_to(page, selector)
    with page.expect_navigation():
        page.keyboard.press("Enter")


def test_an_operator_signals_a_waiting_run_and_retries_a_failed_one(
    browser: Browser, live_server: Any, celery_worker_process: Any, tmp_path: Path
) -> None:
    shots = DOCS if os.environ.get("SWITCHYARD_SCREENSHOTS") else tmp_path
    deploy(ORDER)
    deploy(FLAKY)
    operator()
    waiting = operations.start(definition_id="order-actions", business_key="SO-3001", payload={"total": 480.0}).run_id
    gate = tmp_path / "gate"
    gate.touch()
    failed = operations.start(definition_id="flaky-actions", business_key="SO-3002", payload={"gate": str(gate)}).run_id
    status_is(waiting, "WAITING", celery_worker_process)
    status_is(failed, "FAILED", celery_worker_process)

    context = browser.new_context(
        base_url=live_server.url, viewport={"width": 1280, "height": 900}, timezone_id="Europe/Berlin", locale="en-GB"
    )
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        login(page, live_server, "operator", "operator", next=f"/runs/{waiting}/")
        # times in the reader's zone, the absolute time on hover
        started = page.locator("#facts-heading ~ dl time").first
        assert "CET" in started.inner_text() or "GMT+1" in started.inner_text()
        assert (started.get_attribute("title") or "").startswith(started.get_attribute("datetime") or "-")

        # a first payment, short of the total: the decision explains why the run waits again
        press(page, "#action-signal")
        assert page.locator("h2", has_text="Signal paid").count() == 1
        press(page, "#signal-review")  # nothing filled in: a form error
        assert "Nothing was sent" in page.locator("main").inner_text()
        page.screenshot(path=str(tmp_path / "signal-form.png"), full_page=True)
        tab_to(page, "input[name='payload/amount']")
        page.keyboard.type("100")
        press(page, "#signal-review")
        assert '"amount": 100' in page.locator("#signal-payload").inner_text()
        press(page, "#signal-send")
        assert "Signal paid sent" in page.locator(".messages").inner_text()
        eventually(
            lambda: HistoryEntry.objects.filter(run_id=waiting, type="DECISION", step="check-amount").exists(),
            timeout=60,
            what="the signal to be applied",
            details=celery_worker_process.logs,
        )
        page.reload()
        received = page.locator("#timeline-rows tr.entry", has_text="Signal received")
        assert "operator" in received.locator("td.who").inner_text()
        chose = page.locator("#timeline-rows tr.entry", has_text="chose wait-payment")
        explained = " ".join(chose.locator(".routes").inner_text().split())
        assert "did not hold when state.paid >= state.total → ship" in explained
        assert "taken otherwise → wait-payment" in explained
        assert page.locator("#action-signal").count() == 1  # waiting again
        page.screenshot(path=str(shots / "run-actions.png"), full_page=True)

        # the rest of the payment completes the order
        press(page, "#action-signal")
        tab_to(page, "input[name='payload/amount']")
        page.keyboard.type("380")
        press(page, "#signal-review")
        press(page, "#signal-send")
        status_is(waiting, "COMPLETED", celery_worker_process)

        # a phone: the failed run, retried once its cause is gone
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(f"/runs/{failed}/")
        page.screenshot(path=str(tmp_path / "failed-390.png"))
        assert page.locator("#run-status").inner_text() == "Failed"
        gate.unlink()
        press(page, "#action-retry")
        assert "Retry this run?" in page.locator("h1").inner_text()
        assert Run.objects.get(pk=failed).status == "FAILED"  # asking changed nothing
        page.screenshot(path=str(tmp_path / "retry-390.png"), full_page=True)
        press(page, "#retry-confirm")
        assert "Retry recorded" in page.locator(".messages").inner_text()
        run = status_is(failed, "COMPLETED", celery_worker_process)
        assert run.current_step == "expired"
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"the run page scrolls sideways on a phone ({width}px)"
    finally:
        context.close()
