"""The operator's actions on the run page (issue #30): send a signal, retry, migrate this run.

Each action is behind the capability the API asks for, opens a page of its own and records
only from that page's confirmation; bad input is a form error and changes nothing. The
decision explanation lists a decision step's routes with what the history says of each.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support import ops
from tests.views.test_run_viewer import PAID, client_for, deploy, drain, text, user
from workflows import operations
from workflows.models import Command, HistoryEntry, Run
from workflows.views.runs import decision_routes, state_reads

pytestmark = pytest.mark.django_db(transaction=True)

OPERATOR = ("view_run", "change_run")


@pytest.fixture
def waiting(demo_users: Any) -> Run:
    """A viewer-demo run waiting for the signal ``paid`` (amount: number, required)."""
    deploy(PAID)
    run_id = operations.start(definition_id="viewer-demo", payload={"order": "A-9"}, actor=demo_users["alice"]).run_id
    drain()
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.current_step) == ("WAITING", "wait-payment")
    return run


def commands_of(run: Run) -> list[tuple[str, str]]:
    return list(Command.objects.filter(run_id=run.id).order_by("seq").values_list("kind", "status"))


def test_the_run_page_offers_only_the_actions_the_user_may_take(waiting: Run) -> None:
    viewer = client_for(user("viewer"))
    page = viewer.get(f"/runs/{waiting.id}/").content.decode()
    assert 'id="action-signal"' not in page and 'id="action-retry"' not in page and 'id="action-migrate"' not in page

    operator = client_for(user("operator", perms=OPERATOR))
    page = operator.get(f"/runs/{waiting.id}/").content.decode()
    assert f'href="/runs/{waiting.id}/signal/"' in page
    assert 'id="action-retry"' not in page  # waiting, not failed
    assert "Waiting for signal paid at wait-payment." in text(operator.get(f"/runs/{waiting.id}/"))

    mover = client_for(user("mover", perms=("view_run", "migrate_runs")))
    page = mover.get(f"/runs/{waiting.id}/").content.decode()
    assert f'href="/migrate/default/viewer-demo/?source={waiting.version}"' in page


def test_refusals_change_nothing(waiting: Run) -> None:
    before = commands_of(waiting)
    viewer = client_for(user("viewer"))
    assert viewer.get(f"/runs/{waiting.id}/signal/").status_code == 403
    refused = viewer.post(f"/runs/{waiting.id}/signal/", {"signal": "paid", "payload/amount": "5", "confirmed": "1"})
    assert refused.status_code == 403
    assert viewer.get(f"/runs/{waiting.id}/retry/").status_code == 403
    assert viewer.post(f"/runs/{waiting.id}/retry/").status_code == 403
    assert commands_of(waiting) == before


def test_a_bad_signal_payload_is_a_form_error_and_sends_nothing(waiting: Run) -> None:
    operator = client_for(user("operator", perms=OPERATOR))
    form = operator.get(f"/runs/{waiting.id}/signal/")
    assert form.status_code == 200
    assert 'name="payload/amount"' in form.content.decode()
    before = commands_of(waiting)

    unreadable = operator.post(f"/runs/{waiting.id}/signal/", {"signal": "paid", "payload/amount": "lots"})
    assert unreadable.status_code == 422
    assert "Nothing was sent" in text(unreadable)
    assert re.search(r'aria-invalid="true"', unreadable.content.decode())

    missing = operator.post(f"/runs/{waiting.id}/signal/", {"signal": "paid"})
    assert missing.status_code == 422 and "Nothing was sent" in text(missing)

    forged = operator.post(
        f"/runs/{waiting.id}/signal/",
        {"signal": "paid", "payload_json": '{"amount": "ten"}', "confirmed": "1", "idempotency_key": "k1"},
    )
    assert forged.status_code == 422

    other = operator.post(f"/runs/{waiting.id}/signal/", {"signal": "nudge", "payload/amount": "5"})
    assert other.status_code == 409 and "not waiting for this signal" in text(other)
    assert commands_of(waiting) == before


def test_a_confirmed_signal_with_json_nested_thousands_deep_is_refused_and_sends_nothing(waiting: Run) -> None:
    """Issue #40: 5,000-deep JSON in the signal form's confirmation answered 500."""
    operator = client_for(user("operator", perms=OPERATOR))
    before = commands_of(waiting)
    deep = '{"amount": ' * 5000 + "1" + "}" * 5000
    answer = operator.post(
        f"/runs/{waiting.id}/signal/",
        {"signal": "paid", "payload_json": deep, "confirmed": "1", "idempotency_key": "k-deep"},
    )
    assert answer.status_code == 400
    assert commands_of(waiting) == before


def test_a_confirmed_signal_reaches_the_run_once(waiting: Run) -> None:
    operator = client_for(user("operator", perms=OPERATOR))
    review = operator.post(f"/runs/{waiting.id}/signal/", {"signal": "paid", "payload/amount": "150.25"})
    assert review.status_code == 200
    assert "Send signal paid ?" in text(review) and '"amount": 150.25' in text(review)
    assert "SIGNAL" not in [k for k, _ in commands_of(waiting)]  # nothing sent before the confirmation
    fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', review.content.decode()))
    confirm = {k: fields[k].replace("&quot;", '"') for k in ("signal", "payload_json", "idempotency_key", "confirmed")}
    done = operator.post(f"/runs/{waiting.id}/signal/", confirm)
    assert done.status_code == 302 and done["Location"] == f"/runs/{waiting.id}/"
    again = operator.post(f"/runs/{waiting.id}/signal/", confirm)  # a double submit replays
    assert again.status_code in (302, 409)
    assert [k for k, _ in commands_of(waiting)].count("SIGNAL") == 1
    drain()
    received = HistoryEntry.objects.get(run_id=waiting.id, type="SIGNAL_RECEIVED")
    assert (received.actor_kind, received.actor_id) == ("USER", "operator")
    run = Run.objects.get(pk=waiting.id)
    assert run.status == "COMPLETED" and run.current_step == "big"


def test_retry_is_refused_for_a_run_that_has_not_failed(waiting: Run) -> None:
    operator = client_for(user("operator", perms=OPERATOR))
    shown = operator.get(f"/runs/{waiting.id}/retry/")
    assert shown.status_code == 200 and "not failed, so there is nothing to retry" in text(shown)
    assert 'action="/runs/' not in shown.content.decode()
    refused = operator.post(f"/runs/{waiting.id}/retry/")
    assert refused.status_code == 409
    assert "RETRY" not in [k for k, _ in commands_of(waiting)]


def test_retry_of_a_failed_run_asks_then_records(demo_users: Any) -> None:
    deploy(PAID)
    run_id = operations.start(definition_id="viewer-demo", payload={"order": "A-10"}).run_id
    ops.dead_letter_next_command(run_id)
    assert Run.objects.get(pk=run_id).status == "FAILED"
    operator = client_for(user("operator", perms=OPERATOR))
    assert 'id="action-retry"' in operator.get(f"/runs/{run_id}/").content.decode()
    confirm = operator.get(f"/runs/{run_id}/retry/")
    assert "Retry this run?" in text(confirm) and "Yes, retry this run" in text(confirm)
    assert "RETRY" not in [k for k, _ in commands_of(Run.objects.get(pk=run_id))]
    response = operator.post(f"/runs/{run_id}/retry/")
    assert response.status_code == 302
    drain()
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.current_step) == ("WAITING", "wait-payment")
    retry = Command.objects.get(run_id=run_id, kind="RETRY")
    assert (retry.actor_kind, retry.actor_id) == ("USER", "operator")


def test_a_decision_lists_its_routes_and_the_values_they_read(demo_users: Any) -> None:
    deploy(PAID)
    run_id = operations.start(definition_id="viewer-demo", payload={"order": "A-11"}).run_id
    drain()
    operations.signal(run_id=run_id, name="paid", payload={"amount": 120.5}, actor=demo_users["bob"])
    drain()
    viewer = client_for(user("viewer"))
    page = text(viewer.get(f"/runs/{run_id}/"))
    assert "matched when state.paid >= 100.0 → big not taken otherwise → small" in page
    seq = HistoryEntry.objects.get(run_id=run_id, type="DECISION", step="check").seq
    change = text(viewer.get(f"/runs/{run_id}/history/{seq}/change/"))
    assert "How the route was chosen" in change
    assert "matched when state.paid >= 100.0 → big state.paid = 120.5" in change


def test_times_carry_their_absolute_iso_time(waiting: Run) -> None:
    page = client_for(user("viewer")).get(f"/runs/{waiting.id}/").content.decode()
    stamps = re.findall(r'<time datetime="([^"]+)" title="([^"]+)">', page)
    assert stamps and all(iso == title and "T" in iso for iso, title in stamps)
    assert "workflows/js/localtime.js" in page


def _step(*routes: tuple[str, str], default: str) -> Any:
    return SimpleNamespace(
        type="decision",
        routes=[SimpleNamespace(to=to, when=SimpleNamespace(source=test), condition=None) for test, to in routes],
        default=default,
        conditions={},
    )


def test_route_verdicts_say_only_what_the_recorded_outcome_tells() -> None:
    step = _step(("state.a > 1", "x"), ("state['b'].c == 'y'", "y"), ("true", "z"), default="d")
    chose_y = decision_routes(step, "y", {"a": 0, "b": {"c": "y"}}, with_values=True)
    assert chose_y is not None
    assert [r["verdict"] for r in chose_y["rows"]] == ["did not hold", "matched", "not evaluated"]
    assert chose_y["default_verdict"] == "not taken"
    assert [(v["path"], v["value"]) for v in chose_y["rows"][1]["reads"]] == [("state['b'].c", '"y"')]

    default = decision_routes(step, "d")
    assert default is not None and default["default_verdict"] == "taken"
    assert {r["verdict"] for r in default["rows"]} == {"did not hold"}

    twice = _step(("state.a > 1", "x"), ("state.a < 0", "x"), default="x")
    ambiguous = decision_routes(twice, "x")
    assert ambiguous is not None and ambiguous["ambiguous"]
    assert [r["verdict"] for r in ambiguous["rows"]] == ["one of these matched"] * 2

    assert decision_routes(step, "retry") is None  # not a choice of route
    assert state_reads("state.paid >= state.total && state.paid > 0") == [
        ("state.paid", "/paid"),
        ("state.total", "/total"),
    ]
