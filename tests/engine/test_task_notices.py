"""The notice of a task that opens: recorded with the task in the segment, mailed to the
assignees that have an address, and recorded as delivered at once when nobody can receive it."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core import mail

from tests.engine import documents
from workflows import operations, tasks
from workflows.engine import outbox
from workflows.models import OutboxIntent, Task

pytestmark = pytest.mark.django_db(transaction=True)


def approvers(*members: tuple[str, str]) -> None:
    group = Group.objects.create(name="approvers")
    for username, email in members:
        get_user_model().objects.create_user(username=username, email=email).groups.add(group)


def notice(run_id: Any) -> OutboxIntent:
    return OutboxIntent.objects.get(run_id=run_id, kind="NOTIFY")


def test_a_notice_to_assignees_with_an_address_is_mailed_once(deploy: Any, drain: Any) -> None:
    approvers(("alice", "alice@example.com"), ("bob", ""))
    deploy(documents.APPROVAL)
    run_id = operations.start(definition_id="approval", payload={"number": "N-1", "total": 5000}).run_id
    drain(run_id)
    task = Task.objects.get(run_id=run_id)
    intent = notice(run_id)
    assert intent.status == "PENDING" and intent.target == str(task.id) and intent.payload == {"reason": "opened"}
    assert outbox.deliver(intent.pk) == "DELIVERED"
    assert outbox.deliver(intent.pk) == "SKIPPED"  # a repeated message delivers nothing
    assert [(m.subject, m.to) for m in mail.outbox] == [("New task: Approve purchase N-1", ["alice@example.com"])]
    assert notice(run_id).status == "DELIVERED"


def test_a_notice_nobody_can_receive_is_recorded_delivered(deploy: Any, drain: Any) -> None:
    approvers(("bob", ""))
    deploy(documents.APPROVAL)
    run_id = operations.start(definition_id="approval", payload={"number": "N-2", "total": 5000}).run_id
    drain(run_id)
    intent = notice(run_id)
    assert intent.status == "DELIVERED" and intent.delivered_at is not None and intent.attempts == 0
    assert not mail.outbox


def test_a_worker_s_wake_up_leaves_the_notice_to_the_outbound_worker(deploy: Any) -> None:
    """Issue #40: an e-mail waits on the mail server, so the executor's wake-up records the
    notice and the outbound queue's worker (``workflows.deliver``) sends it."""
    approvers(("alice", "alice@example.com"))
    deploy(documents.APPROVAL)
    run_id = operations.start(definition_id="approval", payload={"number": "N-3", "total": 5000}).run_id
    tasks.run_instance(str(run_id))
    intent = notice(run_id)
    assert intent.status == "PENDING" and intent.attempts == 0
    assert not mail.outbox
    assert tasks.deliver(intent.pk) == "DELIVERED"
    intent = notice(run_id)
    assert intent.status == "DELIVERED" and intent.attempts == 1 and intent.token is None
    assert [m.to for m in mail.outbox] == [["alice@example.com"]]
