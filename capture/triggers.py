"""Record triggers: which model changes are captured, and which definitions they start.

Two views of the same registry:

- **At capture time** (every model save and delete, in the caller's transaction) the signal
  receivers need to know, cheaply, whether a model is watched, for which events, and which
  of its fields the triggers read. That answer is a per-process :class:`Watch`, rebuilt from
  the database at most every :data:`REFRESH_SECONDS` (at once after this process publishes
  or activates a definition), so a save of an unwatched model costs a dictionary lookup.
- **At dispatch time** the eligible triggers are read again from the database
  (:func:`for_event`): registry eligibility is resolved when a capture is dispatched, and the
  registry stamp a capture carries is diagnostic only (the reference's rule).

A trigger belongs to a definition that is the current version of its id in the default
scope (its activation record) and AVAILABLE. Its model is an installed model
(``app_label.ModelName``, compared case-insensitively).

Receivers: ``pre_save`` and ``post_save`` are connected once for every model (they return at
once for a model nobody watches); ``post_delete`` is connected per model, for every model a
trigger or a dispatch effect names and every model that is the subject of a run, because a
``post_delete`` receiver for all models would turn every cascade delete in the project into
a row-by-row one.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.core.signals import request_started
from django.db import DEFAULT_DB_ALIAS, DatabaseError, models, transaction
from django.db.backends.signals import connection_created
from django.db.models.signals import post_delete, post_save, pre_save

from workflows.definitions.plan import Computation, Plan

log = logging.getLogger("capture")

REFRESH_SECONDS = 5.0
EVENTS = ("created", "updated", "deleted")
STAMP_LIMIT = 255
# ``record.total``, ``previous.status``; a bare ``record`` (or ``record["x"]``) reads every field.
_REFERENCE = re.compile(r"\b(record|previous)\b(\s*\.\s*([A-Za-z_][A-Za-z0-9_]*))?")


def label_of(model: type[models.Model]) -> str:
    """The label a trigger matches, lower case: a proxy model's saves are its concrete model's."""
    return model._meta.concrete_model._meta.label_lower  # type: ignore[union-attr]


def normalise_label(label: str) -> str:
    """``demo.PurchaseOrder`` -> ``demo.purchaseorder``; an unknown model gives the text lowered."""
    try:
        return label_of(apps.get_model(label))
    except (LookupError, ValueError):
        return label.lower()


def fields_read(computations: Iterable[Computation | None]) -> frozenset[str] | None:
    """The record fields some expressions read; None when one of them reads the whole record."""
    names: set[str] = set()
    for computation in computations:
        if computation is None:
            continue
        if computation.kind != "cel" and computation.kind != "template":
            return None  # a callback may read anything
        for match in _REFERENCE.finditer(computation.source):
            if match.group(3) is None:
                return None
            names.add(match.group(3))
    return frozenset(names)


@dataclass(frozen=True)
class TriggerSpec:
    """One definition's trigger, as dispatch evaluates it."""

    definition_id: str
    version: int
    scope: str
    model: str  # label, lower case
    on: tuple[str, ...]
    when: Computation | None
    payload: Computation | None
    business_key: Computation | None
    fields: frozenset[str] | None  # None: every field

    @property
    def stamp(self) -> str:
        return f"{self.definition_id}@{self.version}"

    @classmethod
    def from_plan(cls, plan: Plan) -> TriggerSpec:
        trigger = plan.trigger
        assert trigger is not None
        return cls(
            definition_id=plan.definition_id,
            version=plan.version,
            scope="default",
            model=normalise_label(trigger.model),
            on=tuple(trigger.on),
            when=trigger.when,
            payload=trigger.payload,
            business_key=trigger.business_key,
            fields=fields_read((trigger.when, trigger.payload, trigger.business_key)),
        )


def current() -> list[TriggerSpec]:
    """Every eligible trigger, read from the database now."""
    from workflows import queries

    return [TriggerSpec.from_plan(plan) for plan in queries.current_trigger_plans()]


def for_event(model_label: str, event: str) -> list[TriggerSpec]:
    """The triggers eligible now for this model and event, in definition id order."""
    label = normalise_label(model_label)
    return [spec for spec in current() if spec.model == label and event in spec.on]


# --- the per-process watch -------------------------------------------------------------------


@dataclass
class ModelWatch:
    """What the receivers need to know about one model."""

    events: set[str] = field(default_factory=set)
    fields: set[str] | None = field(default_factory=set)  # None: every field
    delete_fields: set[str] | None = field(default_factory=set)
    stamps: list[str] = field(default_factory=list)

    def add(self, on: Iterable[str], fields: Iterable[str] | None, stamp: str) -> None:
        on = tuple(on)
        self.events.update(on)
        for_delete = "deleted" in on
        if fields is None:
            self.fields = None
            if for_delete:
                self.delete_fields = None
        else:
            if self.fields is not None:
                self.fields.update(fields)
            if for_delete and self.delete_fields is not None:
                self.delete_fields.update(fields)
        self.stamps.append(stamp)

    @property
    def stamp(self) -> str:
        text = ",".join(sorted(self.stamps))
        return text if len(text) <= STAMP_LIMIT else text[: STAMP_LIMIT - 1] + "…"


@dataclass(frozen=True)
class Watch:
    by_model: dict[str, ModelWatch]  # label (lower) -> what triggers and effects want
    subjects: frozenset[str]  # labels (lower) of installed models that are a run's subject type

    def get(self, model: type[models.Model]) -> ModelWatch | None:
        return self.by_model.get(label_of(model))

    def deletes_matter(self, model: type[models.Model]) -> bool:
        label = label_of(model)
        return label in self.by_model or label in self.subjects


_EMPTY = Watch(by_model={}, subjects=frozenset())


class _WatchCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reading = threading.local()  # this thread is reading the registry now
        self._watch: Watch = _EMPTY
        self._loaded_at: float | None = None

    def get(self) -> Watch:
        loaded_at = self._loaded_at
        if loaded_at is not None and time.monotonic() - loaded_at < REFRESH_SECONDS:
            return self._watch
        return self.refresh()

    def invalidate(self) -> None:
        self._loaded_at = None

    def refresh(self) -> Watch:
        # The read may open this thread's database connection, and a new connection asks for
        # the registry (``_connection_created``): that nested ask answers what is known instead
        # of waiting for the lock this thread already holds (a deadlock, seen in a live server
        # whose request started on a closed connection).
        if getattr(self._reading, "active", False):
            return self._watch
        self._reading.active = True
        try:
            with self._lock:
                try:
                    watch = _read_watch()
                except DatabaseError:
                    # tables not migrated yet, or the database is away: keep what we had and try
                    # again after the interval (the savepoint kept the caller's transaction usable)
                    log.debug("capture: the trigger registry could not be read", exc_info=True)
                    watch = self._watch
                self._watch = watch
                self._loaded_at = time.monotonic()
        finally:
            self._reading.active = False
        _connect_deletes(watch)
        return watch


_cache = _WatchCache()


def watch() -> Watch:
    """The models this process captures (cached; see :data:`REFRESH_SECONDS`)."""
    return _cache.get()


def refresh() -> Watch:
    """Read the registry again now (scripts and tests; publishing in this process does it too)."""
    return _cache.refresh()


def invalidate() -> None:
    _cache.invalidate()


def _read_watch() -> Watch:
    from capture import effects
    from workflows import queries

    found: dict[str, ModelWatch] = {}
    # a savepoint: a failed read must not break the transaction of the save that asked
    with transaction.atomic():
        specs = current()
        types = queries.subject_types()
    for spec in specs:
        found.setdefault(spec.model, ModelWatch()).add(spec.on, spec.fields, spec.stamp)
    for effect in effects.registered():
        found.setdefault(effect.model, ModelWatch()).add(effect.on, effect.fields, f"effect:{effect.name}")
    installed = {label_of(m): m for m in apps.get_models()}
    subjects = frozenset(t.lower() for t in types if t.lower() in installed)
    return Watch(by_model=found, subjects=subjects)


# --- receivers -------------------------------------------------------------------------------

_PREVIOUS = "_capture_previous_row"
_connected_deletes: set[str] = set()


def _pre_save(
    sender: type[models.Model], instance: models.Model, raw: bool = False, using: str | None = None, **kwargs: Any
) -> None:
    if raw or instance.pk is None:
        return
    wanted = watch().get(sender)
    if wanted is None or "updated" not in wanted.events:
        return
    from capture import recording

    instance.__dict__[_PREVIOUS] = recording.stored_row(sender, instance.pk, using=using or "default")


def _post_save(
    sender: type[models.Model],
    instance: models.Model,
    created: bool = False,
    raw: bool = False,
    using: str | None = None,
    **kwargs: Any,
) -> None:
    previous = instance.__dict__.pop(_PREVIOUS, None)
    if raw:
        return
    wanted = watch().get(sender)
    event = "created" if created else "updated"
    if wanted is None or event not in wanted.events:
        return
    from capture import recording

    recording.record(instance, event=event, wanted=wanted, previous_row=previous, using=using or "default")


def _post_delete(sender: type[models.Model], instance: models.Model, using: str | None = None, **kwargs: Any) -> None:
    current_watch = watch()
    if not current_watch.deletes_matter(sender):
        return
    from capture import recording

    recording.record_deletion(instance, wanted=current_watch.get(sender), using=using or "default")


def _connect_deletes(current_watch: Watch) -> None:
    for label in set(current_watch.by_model) | set(current_watch.subjects):
        if label in _connected_deletes:
            continue
        try:
            model = apps.get_model(label)
        except (LookupError, ValueError):
            continue
        post_delete.connect(_post_delete, sender=model, weak=False, dispatch_uid=f"capture-delete-{label}")
        _connected_deletes.add(label)


def _registry_changed(sender: Any, **kwargs: Any) -> None:
    # publishing, activating or deactivating in this process: read the registry again, and
    # again once the change is committed (a reader before the commit may have missed it)
    invalidate()
    if transaction.get_connection().in_atomic_block:
        transaction.on_commit(invalidate)


def _request_started(sender: Any, **kwargs: Any) -> None:
    # a process that only deletes records must still learn which models matter (at most one
    # registry read per REFRESH_SECONDS); capture never fails a request over it
    try:
        watch()
    except Exception:
        log.debug("capture: the trigger registry was not refreshed for this request", exc_info=True)


def _connection_created(sender: Any, connection: Any, **kwargs: Any) -> None:
    # Every process learns which models matter when it first reaches the database after the
    # apps are ready, not only once it saves a record or serves a request: a process that only
    # deletes (``manage.py shell``, a management command, a cron script) must have its
    # ``post_delete`` receivers connected before its first delete (issue 39). ``ready()`` itself
    # must not query (Django warns; the tables may not exist yet), hence the first connection.
    # At most one read per REFRESH_SECONDS however many connections open (CONN_MAX_AGE=0 opens
    # one per request); capture never fails a connection over it.
    if connection.alias != DEFAULT_DB_ALIAS or not apps.ready or connection.in_atomic_block:
        return
    try:
        watch()
    except Exception:
        log.debug("capture: the trigger registry was not read at connection", exc_info=True)


def connect() -> None:
    """Connect the receivers (``CaptureConfig.ready``)."""
    from workflows.models import Activation, DefinitionVersion

    pre_save.connect(_pre_save, weak=False, dispatch_uid="capture-pre-save")
    post_save.connect(_post_save, weak=False, dispatch_uid="capture-post-save")
    for model in (Activation, DefinitionVersion):
        post_save.connect(
            _registry_changed, sender=model, weak=False, dispatch_uid=f"capture-registry-{model.__name__}"
        )
        post_delete.connect(
            _registry_changed, sender=model, weak=False, dispatch_uid=f"capture-registry-del-{model.__name__}"
        )
    request_started.connect(_request_started, weak=False, dispatch_uid="capture-request-started")
    connection_created.connect(_connection_created, weak=False, dispatch_uid="capture-connection-created")
