"""Migration notices: a moved run whose approval reopens for the same assignees does not mail
them "New task" again (one walk of a backlog once sent 931 e-mails). A migration may ask for
one digest per such assignee instead, recorded once per migration however many batches,
segments or repeated messages carry its moves, and delivered once nothing is left to apply.
Assignees new to an approval are notified as for any new task."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core import mail

from workflows import conf, operations, tasks
from workflows.engine import outbox
from workflows.engine.migration import bulk as migration_bulk
from workflows.models import MigrationRecord, OutboxIntent, Task

pytestmark = pytest.mark.django_db(transaction=True)

REVISION_1 = """
definitionId: notice-move
definitionVersion: 1
contract: {name: notice-move.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object, properties: {route: {type: string}}, required: [route]}
initialStep: route
steps:
  - id: route
    type: decision
    routes: [{when: "state.route == 'audit'", to: audit}]
    default: review
  - id: review
    type: human-task
    title: "Review"
    assignment: {mode: user, value: alice}
    decisions: [{name: approve, next: done}]
  - id: audit
    type: human-task
    title: "Audit"
    assignment: {mode: user, value: carol}
    decisions: [{name: approve, next: done}]
  - id: done
    type: complete
"""

# Revision 2: the review stays alice's (a new title, a deadline); the audit becomes dave's.
REVISION_2 = (
    REVISION_1.replace("definitionVersion: 1", "definitionVersion: 2")
    .replace('title: "Review"', 'title: "Review again"\n    due: {after: P5D, next: done}')
    .replace('title: "Audit"', 'title: "Audit again"')
    .replace("value: carol}", "value: dave}")
)

REVIEWS = 12
AUDITS = 5


@pytest.fixture
def parked(deploy: Any, drain: Any) -> dict[str, list[str]]:
    for name in ("alice", "carol", "dave"):
        get_user_model().objects.create_user(username=name, email=f"{name}@example.com")
    deploy(REVISION_1)
    deploy(REVISION_2, activate=False)
    runs: dict[str, list[str]] = {"review": [], "audit": []}
    for i in range(REVIEWS + AUDITS):
        route = "review" if i < REVIEWS else "audit"
        runs[route].append(
            str(operations.start(definition_id="notice-move", payload={"route": route}, business_key=f"K-{i}").run_id)
        )
    drain()
    mail.outbox.clear()
    return runs


@pytest.fixture
def small_batches(settings: Any) -> Any:
    settings.WORKFLOWS = {"MIGRATE": {"APPLY_BATCH": 5}}
    conf.reload()
    yield
    settings.WORKFLOWS = {}
    conf.reload()


def migrate(*, bulk: bool, monkeypatch: Any, drain: Any, notify_digest: bool | None, presses: int | None = None) -> int:
    record_id = operations.migration_preview(
        scope="default",
        definition_id="notice-move",
        source_version=1,
        target_version=2,
        rows=[
            {"node": "review", "kind": "TASK", "action": "move", "target_node": "review", "runs": "all"},
            {"node": "audit", "kind": "TASK", "action": "move", "target_node": "audit", "runs": "all"},
        ],
        notify_digest=notify_digest,
    )
    assert record_id is not None
    with monkeypatch.context() as m:
        if not bulk:  # every run through its MIGRATION segment
            m.setattr(migration_bulk, "move", lambda rec, chosen, actor: ([], chosen))
        pressed = 0
        while presses is None or pressed < presses:
            progress = operations.migration_apply(record_id=record_id, confirm=REVIEWS + AUDITS)
            pressed += 1
            drain()
            if not progress.left:
                break
    return record_id


def notices_after_start() -> Counter[tuple[str, str]]:
    """Mail intents recorded by the migration, per (kind, assignee): the start's notices (of the
    approvals revision 1 opened) left out."""
    found: Counter[tuple[str, str]] = Counter()
    for intent in OutboxIntent.objects.filter(kind__in=["NOTIFY", "DIGEST"]):
        if intent.kind == "DIGEST":
            found[("DIGEST", intent.payload["value"])] += 1
            continue
        task = Task.objects.get(pk=intent.target)
        if task.title in ("Review again", "Audit again"):  # an approval of revision 2
            found[("NOTIFY", task.assignment_value)] += 1
    return found


@pytest.mark.parametrize("bulk", [True, False], ids=["set-based", "segment"])
def test_approvals_reopened_for_the_same_assignee_notify_nobody_by_default(
    parked: Any, drain: Any, monkeypatch: Any, small_batches: Any, bulk: bool
) -> None:
    record_id = migrate(bulk=bulk, monkeypatch=monkeypatch, drain=drain, notify_digest=None)
    assert MigrationRecord.objects.get(pk=record_id).notify_digest is False  # the setting's default
    assert operations.migration_progress(record_id=record_id).counts == {"MOVED": REVIEWS + AUDITS}
    # alice keeps her 12 reviews: no mail; dave is new to the 5 audits: one "New task" each
    assert notices_after_start() == Counter({("NOTIFY", "dave"): AUDITS})
    assert Task.objects.filter(status="OPEN", assignment_value="alice").count() == REVIEWS


@pytest.mark.parametrize("bulk", [True, False], ids=["set-based", "segment"])
def test_a_digest_is_one_intent_per_assignee_per_migration_counting_every_move(
    parked: Any, drain: Any, monkeypatch: Any, small_batches: Any, bulk: bool
) -> None:
    record_id = migrate(bulk=bulk, monkeypatch=monkeypatch, drain=drain, notify_digest=True)
    assert MigrationRecord.objects.get(pk=record_id).notify_digest is True
    assert notices_after_start() == Counter({("DIGEST", "alice"): 1, ("NOTIFY", "dave"): AUDITS})
    digest = OutboxIntent.objects.get(kind="DIGEST")
    assert digest.payload["count"] == REVIEWS and digest.payload["migration"] == record_id
    assert digest.payload["version"] == 2


def test_the_setting_makes_digests_the_default(parked: Any, drain: Any, monkeypatch: Any, settings: Any) -> None:
    settings.WORKFLOWS = {"MIGRATE": {"DIGEST_NOTICES": True}}
    conf.reload()
    try:
        record_id = migrate(bulk=True, monkeypatch=monkeypatch, drain=drain, notify_digest=None)
    finally:
        settings.WORKFLOWS = {}
        conf.reload()
    assert MigrationRecord.objects.get(pk=record_id).notify_digest is True
    assert notices_after_start()[("DIGEST", "alice")] == 1


def test_the_digest_waits_for_the_migration_and_is_mailed_once(
    parked: Any, drain: Any, monkeypatch: Any, small_batches: Any
) -> None:
    record_id = migrate(bulk=True, monkeypatch=monkeypatch, drain=drain, notify_digest=True, presses=1)
    digest = OutboxIntent.objects.get(kind="DIGEST")
    assert digest.payload["count"] == 5  # one press of five so far
    OutboxIntent.objects.filter(pk=digest.pk).update(available_at=digest.created_at)
    assert outbox.deliver(digest.pk) == "POSTPONED"  # twelve runs are still to apply
    postponed = OutboxIntent.objects.get(pk=digest.pk)
    assert (postponed.status, postponed.attempts) == ("PENDING", 0) and postponed.available_at > digest.created_at
    assert not [m for m in mail.outbox if m.to == ["alice@example.com"]]

    while operations.migration_apply(record_id=record_id).left:
        drain()
    drain()
    operations.migration_apply(record_id=record_id)  # a repeated press after the end adds nothing
    assert notices_after_start()[("DIGEST", "alice")] == 1
    OutboxIntent.objects.filter(pk=digest.pk).update(available_at=digest.created_at)
    assert outbox.deliver(digest.pk) == "DELIVERED"
    assert outbox.deliver(digest.pk) == "SKIPPED"  # a repeated message delivers nothing
    tasks.deliver(digest.pk)  # nor does a repeated Celery message
    to_alice = [m for m in mail.outbox if m.to == ["alice@example.com"]]
    assert [m.subject for m in to_alice] == [f"{REVIEWS} of your tasks moved to revision 2"]
    assert "/tasks/" in to_alice[0].body and "K-" not in to_alice[0].body


def test_a_repeated_migration_message_counts_a_move_once(parked: Any, drain: Any, monkeypatch: Any) -> None:
    record_id = migrate(bulk=False, monkeypatch=monkeypatch, drain=drain, notify_digest=True, presses=1)
    for run_id in parked["review"]:  # every wake-up delivered again after the segments ran
        tasks.run_instance(run_id)
    operations.migration_apply(record_id=record_id)
    drain()
    assert OutboxIntent.objects.get(kind="DIGEST").payload["count"] == REVIEWS
    assert notices_after_start() == Counter({("DIGEST", "alice"): 1, ("NOTIFY", "dave"): AUDITS})


def test_a_single_run_migration_keeps_quiet_too(parked: Any, drain: Any) -> None:
    run_id = parked["review"][0]
    operations.migrate(run_id=run_id, target_version=2)
    drain(run_id)
    assert Task.objects.get(run_id=run_id, status="OPEN").title == "Review again"
    assert notices_after_start() == Counter()
