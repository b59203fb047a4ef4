"""Writing captures: in the same transaction as the change, dispatched after it commits.

The receivers in ``triggers.py`` call :func:`record` / :func:`record_deletion` from
``post_save`` / ``post_delete``, which Django sends on the saving connection inside the
caller's transaction: a change that rolls back takes its capture with it, and the
``on_commit`` message that asks for dispatch is dropped with it. (A save outside any
transaction, in autocommit mode, commits on its own; its capture follows in a second
statement. Wrap changes in ``transaction.atomic`` — or use ``ATOMIC_REQUESTS`` — to have
the change and its capture commit together.)

The snapshot holds only the fields the triggers and effects read, as JSON values: numbers
stay numbers (a Decimal becomes an int when it is whole, else stays an exact Decimal:
``1250.50`` is stored and seen as ``1250.50``), times become
RFC 3339 text, keys text, binary base64. A snapshot and previous together larger than
:data:`SNAPSHOT_MAX_BYTES` are not stored: the capture is written FAILED with a value-free
reason, so the change still commits and the operator sees what was not dispatched.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import uuid
from decimal import Decimal
from functools import partial
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction

from capture import actor
from capture.models import Capture, CaptureStatus
from capture.triggers import ModelWatch
from workflows import jsonvalues

log = logging.getLogger("capture")

SNAPSHOT_MAX_BYTES = 65536
ACTOR_NAME_LIMIT = 150


def json_value(value: Any) -> Any:
    """A model field's value as a JSON value (see the module docstring)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, Decimal):
        if not value.is_finite():
            return None
        return int(value) if value == value.to_integral_value() else value
    if isinstance(value, dt.datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict | list):
        return value  # a JSONField's value
    return str(value)  # file names, enum members, anything else with a text form


def _fields(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    return [f for f in model._meta.concrete_fields]


def _wanted(field: models.Field[Any, Any], names: set[str] | frozenset[str] | None) -> bool:
    return names is None or field.name in names or field.attname in names or bool(field.primary_key)


def _as_stored(field: models.Field[Any, Any], value: Any) -> Any:
    """A value assigned as text to a non-text field (``invoice.amount = "1250.50"``, legal in
    Django: the database converts it) as the field's own Python type, the way it is stored and
    read back, so a trigger sees the same number whether the record was saved from a form's
    text or from a Decimal. Text the field cannot parse stays text (the save itself will fail)."""
    if not isinstance(value, str) or isinstance(field, models.CharField | models.TextField):
        return value
    try:
        return field.to_python(value)
    except (ValidationError, TypeError, ValueError):
        return value


def snapshot_of(instance: models.Model, names: set[str] | frozenset[str] | None) -> dict[str, Any]:
    """The named fields (all when None) of a record, plus its primary key. A foreign key is
    given under its name and its column name (``owner`` and ``owner_id``), both the key."""
    out: dict[str, Any] = {}
    for field in _fields(type(instance)):
        if not _wanted(field, names):
            continue
        value = json_value(_as_stored(field, field.value_from_object(instance)))
        out[field.name] = value
        if field.attname != field.name:
            out[field.attname] = value
    return out


def stored_row(model: type[models.Model], pk: Any, *, using: str) -> dict[str, Any] | None:
    """Every concrete field of the stored row (before an update), keyed like :func:`snapshot_of`."""
    fields = _fields(model)
    row = model._base_manager.using(using).filter(pk=pk).values(*[f.attname for f in fields]).first()
    if row is None:
        return None
    out: dict[str, Any] = {}
    for field in fields:
        value = json_value(row[field.attname])
        out[field.name] = value
        if field.attname != field.name:
            out[field.attname] = value
    return out


def _size(*values: Any) -> int:
    return len(jsonvalues.dumps(values).encode("utf-8"))


def _actor() -> tuple[str, str]:
    user = actor.current()
    if user is None or not getattr(user, "is_authenticated", False):
        return "", ""
    return str(user.pk), str(user.get_username())[:ACTOR_NAME_LIMIT]


def record(
    instance: models.Model,
    *,
    event: str,
    wanted: ModelWatch,
    previous_row: dict[str, Any] | None,
    using: str,
) -> Capture | None:
    """Write the capture of a save (``created`` or ``updated``). An update that changed no
    field is not captured."""
    previous: dict[str, Any] | None = None
    changed: list[str] = []
    if event == "updated" and previous_row is not None:
        now = snapshot_of(instance, None)
        changed = sorted(k for k, v in now.items() if previous_row.get(k) != v and k in _names(type(instance)))
        if not changed:
            return None
        snapshot = {k: v for k, v in now.items() if _key_wanted(type(instance), k, wanted.fields)}
        previous = {k: previous_row.get(k) for k in snapshot}
    else:
        snapshot = snapshot_of(instance, wanted.fields)
    return _write(
        instance, event=event, snapshot=snapshot, previous=previous, changed=changed, stamp=wanted.stamp, using=using
    )


def record_deletion(instance: models.Model, *, wanted: ModelWatch | None, using: str) -> Capture | None:
    """Write the capture of a deletion when a ``deleted`` trigger or effect wants it, or when a
    run that has not ended is about the record (its teardown is dispatched from the capture)."""
    from workflows import queries

    model = type(instance)
    if wanted is None or "deleted" not in wanted.events:
        concrete = model._meta.concrete_model._meta  # type: ignore[union-attr]
        labels = [concrete.label, concrete.label_lower]
        if not queries.live_runs_about(subject_types=labels, subject_id=str(instance.pk)):
            return None
        names: set[str] | frozenset[str] | None = set()
    else:
        names = wanted.delete_fields
    snapshot = snapshot_of(instance, names)
    return _write(
        instance,
        event="deleted",
        snapshot=snapshot,
        previous=None,
        changed=[],
        stamp=wanted.stamp if wanted is not None else "",
        using=using,
    )


def _names(model: type[models.Model]) -> set[str]:
    return {f.name for f in _fields(model)}


def _key_wanted(model: type[models.Model], key: str, names: set[str] | None) -> bool:
    if names is None:
        return True
    for field in _fields(model):
        if key in (field.name, field.attname):
            return _wanted(field, names)
    return False


def _write(
    instance: models.Model,
    *,
    event: str,
    snapshot: dict[str, Any],
    previous: dict[str, Any] | None,
    changed: list[str],
    stamp: str,
    using: str,
) -> Capture:
    actor_pk, actor_name = _actor()
    fields: dict[str, Any] = {
        "model": instance._meta.concrete_model._meta.label,  # type: ignore[union-attr]
        "object_pk": str(instance.pk)[:255],
        "event": event,
        "snapshot": snapshot,
        "previous": previous,
        "changed": changed,
        "actor_pk": actor_pk[:255],
        "actor_name": actor_name,
        "registry_stamp": stamp,
    }
    if _size(snapshot, previous) > SNAPSHOT_MAX_BYTES:
        fields.update(
            snapshot=None,
            previous=None,
            status=CaptureStatus.FAILED,
            last_error=f"SNAPSHOT_TOO_LARGE: the fields the triggers read are larger than {SNAPSHOT_MAX_BYTES} bytes",
        )
    capture = Capture.objects.using(using).create(**fields)
    if capture.status == CaptureStatus.PENDING:
        transaction.on_commit(partial(send, capture.pk), using=using)
    return capture


def send(capture_id: int, *, countdown: float | None = None) -> None:
    """Ask a worker to dispatch the capture. A lost message loses nothing: the sweep re-sends
    captures left PENDING."""
    from capture import tasks

    try:
        if countdown:
            tasks.dispatch.apply_async(args=[capture_id], countdown=countdown)
        else:
            tasks.dispatch.delay(capture_id)
    except Exception:  # the broker is transport only; the sweep is the backstop
        log.warning("capture %s: the dispatch message was not sent; the sweep will send it", capture_id, exc_info=True)
