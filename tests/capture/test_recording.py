"""Captures are written with the change, in its transaction, holding what the triggers read."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import transaction

from capture import actor, triggers
from capture.models import Capture
from demo.models import PurchaseOrder

pytestmark = pytest.mark.django_db

UPDATES = """
definitionId: po-total-changed
definitionVersion: 1
contract: {name: po-total-changed.v1, signals: {}}
stateSchema: {type: object}
trigger:
  model: demo.PurchaseOrder
  on: [updated, deleted]
  when: "'total' in changed && record.total > previous.total"
  payload: '{"number": record.number, "from": previous.total, "to": record.total}'
initialStep: done
steps:
  - {id: done, type: complete}
"""


def order(number: str = "PO-1", total: str = "1500.00", **extra) -> PurchaseOrder:
    return PurchaseOrder.objects.create(number=number, requester="requester", total=Decimal(total), **extra)


def test_a_created_record_of_a_triggered_model_is_captured_with_the_fields_the_trigger_reads(deploy, no_messages):
    deploy()
    po = order(description="paper")
    capture = Capture.objects.get()
    assert (capture.model, capture.object_pk, capture.event, capture.status) == (
        "demo.PurchaseOrder",
        str(po.pk),
        "created",
        "PENDING",
    )
    assert capture.snapshot == {
        "id": po.pk,
        "number": "PO-1",
        "requester": "requester",
        "total": 1500,
        "description": "paper",
    }
    assert "created_at" not in capture.snapshot  # no trigger reads it
    assert "purchase-order-review@1" in capture.registry_stamp.split(",")


def test_the_capture_is_sent_for_dispatch_only_after_commit(deploy, no_messages, django_capture_on_commit_callbacks):
    deploy()
    with django_capture_on_commit_callbacks(execute=True):
        order()
        assert no_messages == []
    assert no_messages == [Capture.objects.get().pk]


def test_a_rolled_back_save_leaves_no_capture(deploy, no_messages):
    deploy()
    with pytest.raises(RuntimeError), transaction.atomic():
        order()
        raise RuntimeError("the change is abandoned")
    assert not Capture.objects.exists()
    assert no_messages == []


def test_an_update_carries_previous_values_and_changed_field_names(deploy, no_messages):
    deploy(UPDATES)
    po = order(total="900.00")
    Capture.objects.all().delete()
    po.total = Decimal("1250.50")
    po.description = "more"
    po.save()
    capture = Capture.objects.get(event="updated")
    assert capture.changed == ["description", "total"]
    assert capture.snapshot["total"] == 1250.5 and capture.previous["total"] == 900
    assert set(capture.snapshot) == {"id", "number", "total"}


def test_an_update_that_changes_nothing_is_not_captured(deploy, no_messages):
    deploy(UPDATES)
    po = order()
    Capture.objects.all().delete()
    po.save()
    assert not Capture.objects.exists()


def test_the_acting_user_is_the_one_set_for_the_request_or_job(deploy, no_messages, demo_users):
    deploy()
    with actor.acting_as(demo_users["requester"]):
        order()
    capture = Capture.objects.get()
    assert capture.actor_pk == str(demo_users["requester"].pk) and capture.actor_name == "requester"


def test_a_model_no_trigger_names_is_not_captured(deploy, no_messages, demo_users):
    deploy()
    demo_users["alice"].first_name = "Alice"
    demo_users["alice"].save()
    assert not Capture.objects.filter(model="auth.User").exists()


def test_a_deletion_is_captured_for_a_deleted_trigger(deploy, no_messages):
    deploy(UPDATES)
    po = order()
    pk = po.pk
    po.delete()
    capture = Capture.objects.get(event="deleted")
    assert capture.object_pk == str(pk) and capture.snapshot["number"] == "PO-1"


def test_a_deletion_nothing_is_about_is_not_captured(deploy, no_messages):
    deploy()  # a trigger on created only, and no run is about the order
    po = order(total="10.00")
    po.delete()
    assert not Capture.objects.filter(event="deleted").exists()


def test_a_snapshot_over_the_bound_is_kept_out_and_the_capture_failed(deploy, no_messages, monkeypatch):
    from capture import recording

    deploy()
    monkeypatch.setattr(recording, "SNAPSHOT_MAX_BYTES", 64)
    order(description="x" * 200)
    capture = Capture.objects.get()
    assert capture.status == "FAILED" and capture.snapshot is None
    assert capture.last_error.startswith("SNAPSHOT_TOO_LARGE")
    assert "x" * 10 not in capture.last_error
    assert no_messages == []


def test_activating_a_trigger_in_this_process_is_seen_by_the_next_save(no_messages):
    from workflows import definitions

    assert "updated" not in triggers.refresh().by_model["demo.purchaseorder"].events
    ref = definitions.load(scope="default", text=UPDATES, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version)
    po = order()
    po.total = Decimal("2000")
    po.save()
    assert Capture.objects.filter(event="updated").exists()


def test_a_number_assigned_as_text_is_captured_as_the_number_it_is_stored_as(deploy, no_messages):
    """A form or a script may assign ``po.total = "1750.50"`` (Django and the database accept
    it): the snapshot holds the number, so the trigger's ``record.total > previous.total``
    compares numbers instead of failing with "no matching overload"; the same number as text
    is no change at all."""
    deploy(UPDATES)
    po = order(total="1500.00")
    Capture.objects.all().delete()
    po.total = "1500.00"  # type: ignore[assignment]
    po.save()
    assert not Capture.objects.exists()
    po.total = "1750.50"  # type: ignore[assignment]
    po.save()
    capture = Capture.objects.get(event="updated")
    assert capture.changed == ["total"]
    assert capture.snapshot["total"] == Decimal("1750.50") and capture.previous["total"] == 1500
