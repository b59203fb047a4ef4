"""The run viewer through Django's test client, the executor drained in-process.

What an operator sees of a run (who did what, the state changes, the queue, the picture),
how the timeline pages and filters, and what the cancel-run confirmation refuses or does.
"""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from workflows import definitions, operations
from workflows.engine import db, executor
from workflows.models import HistoryEntry, Run, Task

pytestmark = pytest.mark.django_db(transaction=True)

PAID = """
definitionId: viewer-demo
definitionVersion: 1
contract:
  name: viewer-demo.v1
  signals:
    paid: {type: object, properties: {amount: {type: number}}, required: [amount]}
stateSchema: {type: object}
startPayloadSchema: {type: object, properties: {order: {type: string}}, required: [order]}
initialState: "{'order': payload.order, 'paid': 0.0}"
initialStep: wait-payment
steps:
  - id: wait-payment
    type: wait-signal
    signal: paid
    set: "{'paid': payload.amount}"
    next: check
    timeout: {after: P1D, next: small}
  - id: check
    type: decision
    routes:
      - when: "state.paid >= 100.0"
        to: big
    default: small
  - id: big
    type: complete
  - id: small
    type: complete
"""

APPROVAL = """
definitionId: viewer-approval
definitionVersion: 1
contract: {name: viewer-approval.v1, signals: {nudge: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: review
steps:
  - id: review
    type: human-task
    title: "Approve {{ state.number }}"
    assignment: {mode: group, value: approvers}
    due: {after: P2D, next: expired}
    decisions:
      - {name: approve, set: "{'approved': true}", next: done}
  - id: expired
    type: fail
  - id: done
    type: complete
"""


def deploy(text: str) -> None:
    ref = definitions.load(scope="default", text=text, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")


def drain() -> None:
    executor.drain(budget_seconds=10)


def user(name: str, *, staff: bool = True, perms: tuple[str, ...] = ("view_run",)) -> Any:
    account = get_user_model().objects.create_user(name, password=name, is_staff=staff)
    for codename in perms:
        account.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="workflows"))
    return account


def client_for(account: Any) -> Client:
    client = Client()
    client.force_login(account)
    return client


def text(response: Any) -> str:
    """The page as a person reads it: tags out, whitespace folded."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", response.content.decode(), flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


@pytest.fixture
def paid_run(demo_users: Any) -> Run:
    """A run that waited, was signalled by bob, took a decision and completed (started by alice)."""
    deploy(PAID)
    run_id = operations.start(definition_id="viewer-demo", payload={"order": "A-7"}, actor=demo_users["alice"]).run_id
    drain()
    operations.signal(run_id=run_id, name="paid", payload={"amount": 120.5}, actor=demo_users["bob"])
    drain()
    run = Run.objects.get(pk=run_id)
    assert run.status == "COMPLETED" and run.current_step == "big"
    return run


@pytest.fixture
def waiting_run(demo_users: Any) -> Run:
    deploy(APPROVAL)
    run_id = operations.start(definition_id="viewer-approval", payload={"number": "P-9"}, actor=demo_users["alice"])
    drain()
    run = Run.objects.get(pk=run_id.run_id)
    assert run.status == "WAITING"
    return run


# --- who may look -------------------------------------------------------------------------


def test_the_viewer_needs_the_view_runs_capability_not_staff(paid_run: Run, demo_users: Any) -> None:
    # the story (issue #25): a staff user with no permission read every run's state here
    # while the API refused them the same run
    url = f"/runs/{paid_run.id}/"
    anonymous = Client().get(url)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    assert client_for(demo_users["alice"]).get(url).status_code == 403  # an approver
    assert client_for(demo_users["alice"]).get("/runs/").status_code == 403
    staff_only = client_for(user("staffer", perms=()))
    assert staff_only.get(url).status_code == 403 and staff_only.get("/runs/").status_code == 403
    assert client_for(user("reader", staff=False)).get(url).status_code == 200  # view_run, not staff
    assert client_for(user("operator")).get(url).status_code == 200
    assert client_for(user("operator2")).get("/runs/00000000-0000-0000-0000-000000000000/").status_code == 404


def test_the_run_list_links_to_each_run(paid_run: Run, waiting_run: Run) -> None:
    operator = client_for(user("operator"))
    page = operator.get("/runs/")
    assert page.status_code == 200
    assert f"/runs/{paid_run.id}/" in page.content.decode() and f"/runs/{waiting_run.id}/" in page.content.decode()
    only_waiting = operator.get("/runs/?status=WAITING").content.decode()
    assert f"/runs/{waiting_run.id}/" in only_waiting and f"/runs/{paid_run.id}/" not in only_waiting
    by_id = operator.get(f"/runs/?q={paid_run.id}").content.decode()
    assert f"/runs/{paid_run.id}/" in by_id and f"/runs/{waiting_run.id}/" not in by_id


# --- what the page says ----------------------------------------------------------------------


def test_the_page_tells_who_did_each_step_and_what_changed(paid_run: Run) -> None:
    page = client_for(user("operator")).get(f"/runs/{paid_run.id}/")
    assert page.status_code == 200
    body = page.content.decode()
    words = text(page)
    assert "Started by alice" in words
    assert "Completed at big" in words and "viewer-demo version 1" in words
    # each timeline row: what happened, where, by whom
    rows = {
        m.group(1): text_of(m.group(2))
        for m in re.finditer(r'<tr class="entry[^"]*" id="entry-(\d+)"[^>]*>(.*?)</tr>', body, re.S)
    }
    signal_row = next(
        r for r in rows.values() if r.startswith(tuple(str(i) for i in range(10))) and "Signal received" in r
    )
    assert "bob" in signal_row and "SIGNAL #" in signal_row and "120.5" in signal_row
    applied = next(r for r in rows.values() if "Decision at wait-payment signal-applied" in r)
    assert "bob" in applied and "set /paid = 120.5" in applied and "v1 → v2" in applied
    chose = next(r for r in rows.values() if "Decision at check chose big" in r)
    assert "bob" in chose and "State unchanged" in chose
    started = next(r for r in rows.values() if "Workflow started" in r)
    assert "alice" in started
    # the picture: current position none (ended), the path taken highlighted
    assert "<svg" in body and 'class="wfg-edge wfg-taken"' in body
    assert re.search(r'class="wfg-node wfg-node-decision wfg-visited" data-step="check"', body)
    assert re.search(r'data-source="wait-payment" data-target="check"[^>]*/>', body)
    assert "Path taken: wait-payment → check → big" in words


def text_of(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def test_a_decision_shows_the_state_before_and_after(paid_run: Run) -> None:
    entry = HistoryEntry.objects.get(run_id=paid_run.id, type="DECISION", outcome="signal-applied")
    operator = client_for(user("operator"))
    fragment = operator.get(f"/runs/{paid_run.id}/history/{entry.seq}/change/", HTTP_HX_REQUEST="true")
    assert fragment.status_code == 200
    words = text(fragment)
    assert "<html" not in fragment.content.decode()
    assert "/paid 0.0 120.5" in words  # field, before, after
    assert '"paid": 0.0' in words and '"paid": 120.5' in words
    page = operator.get(f"/runs/{paid_run.id}/history/{entry.seq}/change/")  # without htmx: a page of its own
    assert page.status_code == 200 and "Decision #" in text(page)
    missing = operator.get(f"/runs/{paid_run.id}/history/1/change/", HTTP_HX_REQUEST="true")
    assert missing.status_code == 404  # entry 1 is not a decision


def test_the_queue_open_tasks_timers_and_parks_are_listed(waiting_run: Run) -> None:
    page = client_for(user("operator")).get(f"/runs/{waiting_run.id}/")
    words = text(page)
    assert "Approve P-9" in words and "assigned to group approvers" in words
    assert "Due at review" in words  # the armed due-date timer
    # codes in words (translated), the codes themselves in data attributes for scripts
    assert "Start Complete" in words and "Timer Due Pending" in words
    assert "review viewer-approval v1 Task" in words and "still here" in words
    assert 'data-kind="TIMER">Timer <span class="muted" data-timer-kind="DUE">Due</span>' in page.content.decode()
    assert 'data-status="PENDING">Pending</span>' in page.content.decode()
    assert 'class="wfg-node wfg-node-human-task wfg-visited wfg-current" data-step="review"' in page.content.decode()


def test_failed_commands_show_their_error(paid_run: Run) -> None:
    db.execute(
        "UPDATE workflow_commands SET last_error = 'DETERMINISTIC_FAILURE: the segment failed (KeyError)' "
        "WHERE run_id = %s AND kind = 'SIGNAL'",
        [paid_run.id],
    )
    words = text(client_for(user("operator")).get(f"/runs/{paid_run.id}/"))
    assert "DETERMINISTIC_FAILURE: the segment failed (KeyError)" in words


# --- a long history ----------------------------------------------------------------------------


def test_a_run_with_ten_thousand_entries_opens_one_page_at_a_time(
    waiting_run: Run, django_assert_max_num_queries: Any
) -> None:
    first = waiting_run.history_seq
    db.execute(
        "INSERT INTO workflow_history (run_id, seq, type, at, command_id, step, branch_id, outcome, scope, "
        "definition_id, version, plan_hash, state_version_before, state_version_after, executor_id, patch, payload, "
        "actor_kind, actor_id, actor_reason, on_behalf_of, attribution_status, entry_version) "
        "SELECT %s, %s + g, CASE WHEN g %% 2 = 0 THEN 'TASK_REMINDER_FIRED' ELSE 'SIGNAL_PARKED' END, now(), NULL, "
        "'review', '', '', '', '', NULL, '', NULL, NULL, '', NULL, NULL, 'SYSTEM', '', 'timer', '', 'VERIFIED', 2 "
        "FROM generate_series(1, 10000) g",
        [waiting_run.id, first],
    )
    db.execute("UPDATE workflow_runs SET history_seq = history_seq + 10000 WHERE id = %s", [waiting_run.id])
    last = first + 10000
    operator = client_for(user("operator"))
    operator.get(f"/runs/{waiting_run.id}/")  # warm the plan cache and the session
    with django_assert_max_num_queries(25):
        page = operator.get(f"/runs/{waiting_run.id}/")
    body = page.content.decode()
    seqs = [int(s) for s in re.findall(r'id="entry-(\d+)"', body)]
    assert seqs == list(range(1, 51))
    assert "after=50" in body and "Show more entries" in body

    with django_assert_max_num_queries(10):
        more = operator.get(f"/runs/{waiting_run.id}/history/?after=9000", HTTP_HX_REQUEST="true")
    assert [int(s) for s in re.findall(r'id="entry-(\d+)"', more.content.decode())] == list(range(9001, 9051))

    newest = operator.get(f"/runs/{waiting_run.id}/history/?order=newest", HTTP_HX_REQUEST="true").content.decode()
    assert [int(s) for s in re.findall(r'id="entry-(\d+)"', newest)][:2] == [last, last - 1]

    signals = operator.get(f"/runs/{waiting_run.id}/history/?only=signals", HTTP_HX_REQUEST="true").content.decode()
    assert set(re.findall(r'data-type="([A-Z_]+)"', signals)) == {"SIGNAL_PARKED"}


def test_the_timeline_works_without_javascript(paid_run: Run) -> None:
    operator = client_for(user("operator"))
    plain = operator.get(f"/runs/{paid_run.id}/history/?only=decisions")
    assert plain.status_code == 302 and plain["Location"].startswith(f"/runs/{paid_run.id}/?only=decisions")
    page = operator.get(f"/runs/{paid_run.id}/?only=decisions")
    assert set(re.findall(r'data-type="([A-Z_]+)"', page.content.decode())) == {"DECISION", "STATE_BASELINE"}


# --- cancel run --------------------------------------------------------------------------------


def test_cancel_needs_change_permission_on_definitions(waiting_run: Run) -> None:
    operator = client_for(user("operator"))
    page = operator.get(f"/runs/{waiting_run.id}/")
    assert "Cancel run" not in text(page)
    assert operator.get(f"/runs/{waiting_run.id}/cancel/").status_code == 403
    refused = operator.post(f"/runs/{waiting_run.id}/cancel/", {"seen_state_version": 1, "seen_history_seq": 1})
    assert refused.status_code == 403
    assert Run.objects.get(pk=waiting_run.id).status == "WAITING"


def test_cancel_asks_for_confirmation_listing_what_it_ends(waiting_run: Run) -> None:
    owner = client_for(user("owner", perms=("view_run", "cancel_runs")))
    page = owner.get(f"/runs/{waiting_run.id}/")
    assert "Cancel run…" in text(page)
    form = re.search(r'<form method="get" action="(/runs/[^"]+/cancel/)">(.*?)</form>', page.content.decode(), re.S)
    assert form is not None
    fields = dict(re.findall(r'name="(seen_[a-z_]+)" value="(\d+)"', form.group(2)))
    assert fields == {
        "seen_state_version": str(waiting_run.state_version),
        "seen_history_seq": str(waiting_run.history_seq),
    }
    confirm = owner.get(form.group(1), fields)
    words = text(confirm)
    assert "This cannot be undone." in words
    assert "1 open approval" in words and "Approve P-9" in words
    assert "1 timer" in words and "Due at review" in words  # the timer kind in words
    assert "0 called runs" in words
    assert Run.objects.get(pk=waiting_run.id).status == "WAITING"  # asking changes nothing

    done = owner.post(form.group(1), {**fields, "reason": "duplicate order"})
    assert done.status_code == 302
    run = Run.objects.get(pk=waiting_run.id)
    assert run.status == "CANCELLED" and run.cancel_reason == "duplicate order"
    assert Task.objects.get(run_id=run.id).status == "CANCELLED"
    cancelled = HistoryEntry.objects.get(run_id=run.id, type="CANCELLED")
    assert (cancelled.actor_kind, cancelled.actor_id) == ("USER", "owner")


def test_cancel_leaves_a_run_that_moved_on_alone(waiting_run: Run, demo_users: Any) -> None:
    owner = client_for(user("owner", perms=("view_run", "cancel_runs")))
    seen = {"seen_state_version": waiting_run.state_version, "seen_history_seq": waiting_run.history_seq}
    assert owner.get(f"/runs/{waiting_run.id}/cancel/", seen).status_code == 200
    task = Task.objects.get(run_id=waiting_run.id)
    operations.complete_task(task_id=task.id, decision="approve", actor=demo_users["bob"])
    drain()
    answer = owner.post(f"/runs/{waiting_run.id}/cancel/", seen)
    assert answer.status_code == 409
    assert "already moved on" in text(answer) and "nothing was cancelled" in text(answer)
    assert Run.objects.get(pk=waiting_run.id).status == "COMPLETED"


def test_entries_that_do_not_move_the_run_do_not_block_cancel(waiting_run: Run, demo_users: Any) -> None:
    owner = client_for(user("owner", perms=("view_run", "cancel_runs")))
    seen = {"seen_state_version": waiting_run.state_version, "seen_history_seq": waiting_run.history_seq}
    task = Task.objects.get(run_id=waiting_run.id)
    operations.reassign_task(task_id=task.id, mode="user", value="bob", actor=demo_users["admin"])
    assert owner.post(f"/runs/{waiting_run.id}/cancel/", seen).status_code == 302
    assert Run.objects.get(pk=waiting_run.id).status == "CANCELLED"


def test_a_malformed_confirmation_is_refused_without_cancelling(waiting_run: Run) -> None:
    owner = client_for(user("owner", perms=("view_run", "cancel_runs")))
    answer = owner.post(f"/runs/{waiting_run.id}/cancel/", {"seen_state_version": "x<script>", "seen_history_seq": 3})
    assert answer.status_code == 400 and b"<script>" not in answer.content
    assert Run.objects.get(pk=waiting_run.id).status == "WAITING"


CALLS_APPROVAL = """
definitionId: viewer-caller
definitionVersion: 1
contract: {name: viewer-caller.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: ask
steps:
  - {id: ask, type: call, definitionId: viewer-approval, payload: "{'number': 'P-7'}", next: done}
  - {id: done, type: complete}
"""


def test_cancelling_a_called_run_says_and_does_that_its_caller_goes_first(demo_users: Any) -> None:
    # The story: the page said "every run it called that is waiting on it" is cancelled — the
    # relation the wrong way round — and the caller was in fact left waiting on it for ever.
    deploy(APPROVAL)
    deploy(CALLS_APPROVAL)
    caller_id = operations.start(definition_id="viewer-caller", payload={}).run_id
    drain()
    called = Run.objects.get(parent_run_id=caller_id)
    assert called.status == "WAITING"
    owner = client_for(user("owner", perms=("view_run", "cancel_runs")))

    confirm = owner.get(f"/runs/{called.id}/cancel/")
    words = text(confirm)
    assert "1 calling run waiting on this one at a call, cancelled first" in words
    assert f"viewer-caller {caller_id} (waiting at ask)" in words
    assert "every run it called that is waiting on it" not in words

    seen = {"seen_state_version": called.state_version, "seen_history_seq": called.history_seq}
    assert owner.post(f"/runs/{called.id}/cancel/", seen).status_code == 302
    caller = Run.objects.get(pk=caller_id)
    assert (caller.status, caller.cancel_reason) == ("CANCELLED", "called run cancelled")
    assert Run.objects.get(pk=called.id).status == "CANCELLED"
    assert not Task.objects.filter(run_id=called.id, status="OPEN").exists()
