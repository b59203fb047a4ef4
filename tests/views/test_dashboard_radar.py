"""The stuck-run radar (/ops/radar/): what it lists, the thresholds it uses, and the actions
that fix each row — retry, bulk retry/cancel with a typed count, reconcile — each with its
permission."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission

from tests.engine import conftest as engine_fixtures
from tests.engine import documents
from tests.support import ops
from workflows import conf, operations
from workflows.engine import db
from workflows.models import Command, HistoryEntry, Run

deploy = engine_fixtures.deploy  # the engine tests' fixtures: load+publish+activate, in-process executor
drain = engine_fixtures.drain

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _settings_reloaded() -> Any:
    yield
    conf.reload()  # the WORKFLOWS a test set is gone with it: drop the cached copy


def _radar(settings: Any, values: dict[str, Any]) -> None:
    """WORKFLOWS["RADAR"] for this test."""
    settings.WORKFLOWS = {**getattr(settings, "WORKFLOWS", {}), "RADAR": values}
    conf.reload()


def rows(html: str, section: str) -> list[str]:
    """The data-run (or data-capture) ids of a section's rows."""
    match = re.search(rf'<section class="section radar-section" id="{section}".*?</section>', html, re.S)
    assert match, f"no section {section}"
    return re.findall(r'<tr data-run="([^"]*)"', match.group(0))


def radar(client: Any) -> str:
    response = client.get("/ops/radar/")
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def staff(demo_users: Any) -> Any:
    """A staff member with no permission beyond the operate capability (the operations pages
    and reconciling): no retry, cancel or migrate."""
    bob = demo_users["bob"]
    bob.is_staff = True
    bob.save()
    return grant(bob, "change_command")


def grant(user: Any, *codenames: str) -> Any:
    from django.contrib.auth import get_user_model

    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="workflows", codename__in=codenames))
    return get_user_model().objects.get(pk=user.pk)  # a fresh object: permissions are cached per instance


def test_lists_exactly_the_stuck_runs(client: Any, demo_users: Any, deploy: Any, drain: Any) -> None:
    deploy(ops.ORDER)
    deploy(ops.EMAILER)
    deploy(documents.APPROVAL)
    young, old = (operations.start(definition_id="order-signal", payload={"order": f"P-{i}"}).run_id for i in range(2))
    approval = operations.start(definition_id="approval", payload={"number": "A-1", "total": 5000}).run_id
    drain()
    ops.age_open_park(old, seconds=2 * 3600)  # the floor is one hour; no closed waits yet
    ops.make_overdue(approval)
    dead = operations.start(definition_id="order-signal", payload={"order": "D-1"}).run_id
    dead_command = ops.dead_letter_next_command(dead)
    unknown = operations.start(definition_id="emailer", payload={"email": "ops@example.com"}).run_id
    unknown_command = ops.outcome_unknown_next_command(unknown)

    client.force_login(demo_users["admin"])
    html = radar(client)
    assert rows(html, "parked") == [str(old)]
    assert rows(html, "stuck") == []
    assert rows(html, "dead") == [str(dead)] and f'data-command="{dead_command}"' in html
    assert rows(html, "unknown") == [str(unknown)] and f'data-command="{unknown_command}"' in html
    assert rows(html, "tasks") == [str(approval)]
    assert str(young) not in html
    assert "<strong>4</strong> items need attention" in html
    # every row links to the run viewer
    for run_id in (old, dead, unknown, approval):
        assert f'href="/runs/{run_id}/"' in html


def test_threshold_is_the_positions_95th_percentile_of_closed_waits(
    client: Any, demo_users: Any, deploy: Any, drain: Any, settings: Any
) -> None:
    _radar(settings, {"FLOOR_SECONDS": 60})
    deploy(ops.ORDER)
    quick, slow = (operations.start(definition_id="order-signal", payload={"order": f"P-{i}"}).run_id for i in range(2))
    drain()
    # 20 earlier waits of 100..2000 s: the 95th percentile is 1905 s
    ops.closed_waits(definition_id="order-signal", node="wait-payment", seconds=[100.0 * i for i in range(1, 21)])
    ops.age_open_park(quick, seconds=1800)
    ops.age_open_park(slow, seconds=2000)
    client.force_login(demo_users["admin"])
    html = radar(client)
    assert rows(html, "parked") == [str(slow)]
    assert "95th percentile of 20 closed waits" in html and "31 min" in html  # 1905 s


def test_floor_applies_when_waits_are_usually_short(
    client: Any, demo_users: Any, deploy: Any, drain: Any, settings: Any
) -> None:
    _radar(settings, {"FLOOR_SECONDS": 600})
    deploy(ops.ORDER)
    run_id = operations.start(definition_id="order-signal", payload={"order": "P-1"}).run_id
    drain()
    ops.closed_waits(definition_id="order-signal", node="wait-payment", seconds=[5.0] * 10)
    ops.age_open_park(run_id, seconds=300)
    client.force_login(demo_users["admin"])
    assert rows(radar(client), "parked") == []  # 300 s is long for this step, but under the floor
    ops.age_open_park(run_id, seconds=900)
    html = radar(client)
    assert rows(html, "parked") == [str(run_id)] and ">floor<" in html


def test_configured_thresholds_win(client: Any, demo_users: Any, deploy: Any, drain: Any, settings: Any) -> None:
    _radar(settings, {"THRESHOLDS": {"order-signal:wait-payment": 30}})
    deploy(ops.ORDER)
    run_id = operations.start(definition_id="order-signal", payload={"order": "P-1"}).run_id
    drain()
    ops.age_open_park(run_id, seconds=45)
    client.force_login(demo_users["admin"])
    html = radar(client)
    assert rows(html, "parked") == [str(run_id)] and ">configured<" in html


def test_commands_due_longer_than_stuck_after_seconds_are_stuck(
    client: Any, demo_users: Any, deploy: Any, settings: Any
) -> None:
    deploy(ops.ORDER)
    fresh = operations.start(definition_id="order-signal", payload={"order": "P-1"}).run_id
    stale = operations.start(definition_id="order-signal", payload={"order": "P-2"}).run_id
    db.execute(
        "UPDATE workflow_commands SET recorded_at = now() - interval '10 minutes', "
        "available_at = now() - interval '10 minutes' WHERE run_id = %s",
        [stale],
    )  # no worker took it
    client.force_login(demo_users["admin"])
    html = radar(client)
    assert rows(html, "stuck") == [str(stale)] and str(fresh) not in html
    assert "Not claimed: are the workers up?" in html


def test_retry_recovers_a_dead_lettered_run(client: Any, demo_users: Any, deploy: Any, drain: Any) -> None:
    deploy(ops.ORDER)
    run_id = operations.start(definition_id="order-signal", payload={"order": "D-1"}).run_id
    ops.dead_letter_next_command(run_id)
    client.force_login(demo_users["admin"])
    response = client.post("/ops/radar/retry/", {"run_id": str(run_id)}, follow=True)
    assert "Retry recorded for run" in response.content.decode()
    drain()
    run = Run.objects.get(pk=run_id)
    assert run.status == "WAITING" and run.current_step == "wait-payment"
    assert rows(radar(client), "dead") == []


def test_retry_needs_the_change_run_permission(client: Any, staff: Any, deploy: Any) -> None:
    deploy(ops.ORDER)
    run_id = operations.start(definition_id="order-signal", payload={"order": "D-1"}).run_id
    ops.dead_letter_next_command(run_id)
    client.force_login(staff)
    html = radar(client)
    assert rows(html, "dead") == [str(run_id)]
    assert "Retry selected" not in html and 'formaction="/ops/radar/retry/"' not in html
    assert client.post("/ops/radar/retry/", {"run_id": str(run_id)}).status_code == 403
    assert not Command.objects.filter(run_id=run_id, kind="RETRY").exists()
    client.force_login(grant(staff, "change_run"))
    assert 'formaction="/ops/radar/retry/"' in radar(client)
    assert client.post("/ops/radar/retry/", {"run_id": str(run_id)}).status_code == 302
    assert Command.objects.filter(run_id=run_id, kind="RETRY").count() == 1


def test_bulk_retry_asks_for_the_count_and_touches_only_the_selection(
    client: Any, demo_users: Any, deploy: Any, drain: Any
) -> None:
    deploy(ops.ORDER)
    dead = [operations.start(definition_id="order-signal", payload={"order": f"D-{i}"}).run_id for i in range(3)]
    for run_id in dead:
        ops.dead_letter_next_command(run_id)
    client.force_login(demo_users["admin"])
    selection = {"action": "retry", "run": [str(dead[0]), str(dead[1]), str(dead[1]), "not-a-run"]}
    confirm = client.post("/ops/radar/bulk/", selection)
    html = confirm.content.decode()
    assert confirm.status_code == 200 and "Retry 2 runs?" in html and "Type <strong>2</strong>" in html
    assert not Command.objects.filter(kind="RETRY").exists()  # nothing happens before the count is typed
    wrong = client.post("/ops/radar/bulk/", {**selection, "apply": "1", "confirm_count": "3"})
    assert wrong.status_code == 400 and "Type 2" in wrong.content.decode()
    assert not Command.objects.filter(kind="RETRY").exists()
    done = client.post("/ops/radar/bulk/", {**selection, "apply": "1", "confirm_count": "2"}, follow=True)
    assert "Retry recorded for 2 runs." in done.content.decode()
    drain()
    statuses = {str(r.id): r.status for r in Run.objects.filter(pk__in=dead)}
    dead = [str(r) for r in dead]
    assert [statuses[r] for r in dead] == ["WAITING", "WAITING", "FAILED"]


def test_bulk_cancel_needs_a_reason_and_leaves_a_run_that_moved_on_alone(
    client: Any, demo_users: Any, deploy: Any, drain: Any
) -> None:
    deploy(ops.ORDER)
    runs = [operations.start(definition_id="order-signal", payload={"order": f"P-{i}"}).run_id for i in range(2)]
    drain()
    client.force_login(demo_users["admin"])
    selection = {"action": "cancel", "run": [str(r) for r in runs]}
    html = client.post("/ops/radar/bulk/", selection).content.decode()
    assert "Cancel 2 runs?" in html and "cannot be undone" in html
    seen = dict(re.findall(r'name="(seen-[^"]+)" value="([^"]+)"', html))
    assert len(seen) == 2
    no_reason = client.post("/ops/radar/bulk/", {**selection, **seen, "apply": "1", "confirm_count": "2"})
    assert no_reason.status_code == 400 and "Give a reason" in no_reason.content.decode()
    # meanwhile the payment of the second run arrives: it moves on and must be left alone
    operations.signal(run_id=runs[1], name="paid", payload={"amount": 10})
    drain()
    done = client.post(
        "/ops/radar/bulk/",
        {**selection, **seen, "apply": "1", "confirm_count": "2", "reason": "customer withdrew"},
        follow=True,
    )
    text = done.content.decode()
    assert "Cancelled 1 run." in text and "1 left alone" in text and "ALREADY_MOVED_ON" in text
    assert Run.objects.get(pk=runs[0]).status == "CANCELLED"
    assert Run.objects.get(pk=runs[1]).status == "COMPLETED"


def test_bulk_cancel_needs_the_cancel_runs_permission(client: Any, staff: Any, deploy: Any, drain: Any) -> None:
    deploy(ops.ORDER)
    run_id = operations.start(definition_id="order-signal", payload={"order": "P-1"}).run_id
    drain()
    client.force_login(grant(staff, "change_run"))
    assert client.post("/ops/radar/bulk/", {"action": "cancel", "run": [str(run_id)]}).status_code == 403
    client.force_login(grant(staff, "cancel_runs"))
    assert client.post("/ops/radar/bulk/", {"action": "cancel", "run": [str(run_id)]}).status_code == 200


def test_reconcile_replays_an_outcome_unknown_command_with_a_reason(
    client: Any, demo_users: Any, deploy: Any, drain: Any, settings: Any
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    deploy(ops.EMAILER)
    run_id = operations.start(definition_id="emailer", payload={"email": "ops@example.com"}).run_id
    command_id = ops.outcome_unknown_next_command(run_id)
    client.force_login(demo_users["admin"])
    page = client.get(f"/ops/radar/reconcile/{command_id}/").content.decode()
    assert "Effect at step" in page and "notify" in page
    refused = client.post(f"/ops/radar/reconcile/{command_id}/", {"action": "replay", "reason": "  "})
    assert refused.status_code == 400 and "A reason is required" in refused.content.decode()
    assert Command.objects.get(pk=command_id).status == "OUTCOME_UNKNOWN"
    done = client.post(
        f"/ops/radar/reconcile/{command_id}/",
        {"action": "replay", "reason": "the mail server has no trace of it"},
        follow=True,
    )
    assert "reconciled (replay)" in done.content.decode()
    assert HistoryEntry.objects.filter(run_id=run_id, type="COMMAND_RECONCILED").exists()
    drain()
    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    assert rows(radar(client), "unknown") == []


def test_reconcile_is_for_administrators(client: Any, demo_users: Any, deploy: Any) -> None:
    deploy(ops.EMAILER)
    run_id = operations.start(definition_id="emailer", payload={"email": "ops@example.com"}).run_id
    command_id = ops.outcome_unknown_next_command(run_id)
    bob = demo_users["bob"]
    bob.is_staff = True
    bob.save()
    client.force_login(grant(bob, "change_run", "cancel_runs", "migrate_runs"))  # every run action, not operate
    assert client.get("/ops/radar/").status_code == 403
    assert client.get(f"/ops/radar/reconcile/{command_id}/").status_code == 403
    client.force_login(grant(bob, "change_command"))
    assert "Reconcile…" in radar(client)
    assert client.get(f"/ops/radar/reconcile/{command_id}/").status_code == 200


def test_the_radar_is_not_for_staff_without_the_operate_capability(client: Any, demo_users: Any) -> None:
    # the story (issue #25): /ops/ and the radar were open to any staff user
    bob = demo_users["bob"]
    bob.is_staff = True
    bob.save()
    client.force_login(bob)
    assert client.get("/ops/radar/").status_code == 403
    assert client.get("/ops/").status_code == 403


def test_a_run_parked_too_long_links_to_the_migrate_dialog_of_its_revision(
    client: Any, staff: Any, deploy: Any, drain: Any
) -> None:
    deploy(ops.ORDER)
    run_id = operations.start(definition_id="order-signal", payload={"order": "P-1"}).run_id
    drain()
    ops.age_open_park(run_id, seconds=2 * 3600)
    client.force_login(staff)
    assert "Migrate…" not in radar(client)  # staff without a migration permission see no way in
    client.force_login(grant(staff, "migrate_runs"))
    html = radar(client)
    assert 'href="/migrate/default/order-signal/?source=1">Migrate…</a>' in html


def test_outcome_unknown_captures_are_listed(client: Any, demo_users: Any) -> None:
    from capture.models import Capture

    unknown = Capture.objects.create(
        model="demo.PurchaseOrder", object_pk="17", event="created", status="OUTCOME_UNKNOWN", attempts=1
    )
    Capture.objects.create(model="demo.PurchaseOrder", object_pk="18", event="created", status="DISPATCHED")
    client.force_login(demo_users["admin"])
    html = radar(client)
    section = re.search(r'<section class="section radar-section" id="captures".*?</section>', html, re.S)
    assert section is not None
    assert re.findall(r'data-capture="(\d+)"', section.group(0)) == [str(unknown.pk)]
    assert "demo.PurchaseOrder" in section.group(0)
    assert f'href="/admin/capture/capture/{unknown.pk}/change/">Reconcile in admin</a>' in section.group(0)


def test_an_overdue_task_links_to_the_task_admins_overdue_list(
    client: Any, demo_users: Any, deploy: Any, drain: Any
) -> None:
    deploy(documents.APPROVAL)
    run_id = operations.start(definition_id="approval", payload={"number": "A-1", "total": 5000}).run_id
    drain()
    ops.make_overdue(run_id)
    client.force_login(demo_users["admin"])
    assert rows(radar(client), "tasks") == [str(run_id)]
    assert 'href="/admin/workflows/task/?overdue=yes">Reassign…</a>' in radar(client)
    listing = client.get("/admin/workflows/task/?overdue=yes").content.decode()
    assert "Approve purchase A-1" in listing and "Reassign selected tasks" in listing


def test_a_long_list_shows_its_most_urgent_rows_and_counts_them_all(
    client: Any, demo_users: Any, deploy: Any, settings: Any
) -> None:
    _radar(settings, {"ROWS": 2})
    deploy(ops.ORDER)
    dead = [operations.start(definition_id="order-signal", payload={"order": f"D-{i}"}).run_id for i in range(3)]
    for run_id in dead:
        ops.dead_letter_next_command(run_id)
    client.force_login(demo_users["admin"])
    html = radar(client)
    assert rows(html, "dead") == [str(r) for r in dead[:2]]  # oldest first
    assert '<span class="count count-hot" data-section-count="dead">3</span>' in html
    assert "Showing the 2 most urgent of 3. Act on these, then refresh for the next." in html
    assert "<strong>3</strong> items need attention" in html

    _radar(settings, {"ROWS": 3})
    html = radar(client)
    assert rows(html, "dead") == [str(r) for r in dead] and "most urgent of" not in html
