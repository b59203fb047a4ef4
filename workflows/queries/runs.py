"""Reads about runs: a run as the API and the pages show it, its queue, parks, timers and
called runs, the revision it runs, and the runs about a record (for capture).

Callers go through the package (``from workflows import queries``), which re-exports these.
Statements: ``workflows/queries/sql/runs.sql``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db.models import Prefetch, QuerySet

from workflows.engine import sql
from workflows.exceptions import DefinitionMissing, InstanceNotFound
from workflows.models import (
    ENDED_STATUSES,
    LIVE_STATUSES,
    Activation,
    ActorKind,
    BranchStatus,
    Command,
    CommandKind,
    CommandStatus,
    DefinitionStatus,
    DefinitionVersion,
    Park,
    Run,
    RunStatus,
    Task,
    TaskStatus,
    Timer,
)
from workflows.queries.sql import QUERIES_SQL_DIR
from workflows.queries.tasks import open_tasks

SQL = sql.load("runs", QUERIES_SQL_DIR)


def _open_parks() -> Prefetch[Any]:
    return Prefetch("parks", queryset=Park.objects.filter(left_at__isnull=True).order_by("since"), to_attr="waiting")


def run_dict(run: Run) -> dict[str, Any]:
    waits = []
    parks = getattr(run, "waiting", None)
    if parks is None:
        parks = run.parks.filter(left_at__isnull=True).order_by("since")
    for park in parks:
        waits.append({"kind": park.kind, "step": park.node, "branch": park.branch_id or None, "since": park.since})
    return {
        "id": str(run.id),
        "definition_id": run.definition_id,
        "version": run.version,
        "scope": run.scope,
        "start_scope": run.start_scope,
        "status": run.status,
        "current_step": run.current_step,
        "state": run.state,
        "state_version": run.state_version,
        "business_key": run.business_key,
        "subject": run.subject,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "failure": {"code": run.failure_code, "message": run.failure_message} if run.failure_code else None,
        "waits": waits,
        # not shown: with the state version, the run's ETag (each recorded command advances it)
        "next_seq": run.next_seq,
    }


def query(*, run_id: Any) -> dict[str, Any]:
    """The run as the API shows it. Refuses INSTANCE_NOT_FOUND."""
    try:
        run = Run.objects.get(pk=run_id)
    except (Run.DoesNotExist, ValueError, TypeError):
        raise InstanceNotFound("run not found") from None
    return run_dict(run)


def runs(*, waits: bool = False) -> QuerySet[Run]:
    """Every run; with ``waits``, each with its open parks fetched with the page (one query for
    the page, not one a run, for :func:`run_dict`)."""
    return Run.objects.prefetch_related(_open_parks()) if waits else Run.objects.all()


def commands(*, run_id: Any) -> QuerySet[Command]:
    return Command.objects.filter(run_id=run_id).order_by("seq")


def open_parks(*, run_id: Any) -> QuerySet[Park]:
    return Park.objects.filter(run_id=run_id, left_at__isnull=True)


def database_now() -> Any:
    """The database clock. Due times are written on it, so overdue marks compare with it,
    never with the web node's clock."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def get_run(*, run_id: Any) -> Run:
    """The run row. Refuses INSTANCE_NOT_FOUND (also for a malformed id)."""
    try:
        return Run.objects.get(pk=run_id)
    except (Run.DoesNotExist, ValueError, TypeError, ValidationError):
        raise InstanceNotFound("run not found") from None


def db_rows(statement: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params or [])
        return list(cursor.fetchall())


def plan_of(run: Run) -> Any:
    """The plan a run is pinned to (for its picture), or None when it cannot be built here.
    A retired or withdrawn revision is still compiled from its stored text for viewing."""
    from workflows.definitions import cache
    from workflows.definitions.lifecycle import build_row
    from workflows.exceptions import VersionNotRunnable, WorkflowError

    try:
        return cache.get_plan(
            scope=run.scope, definition_id=run.definition_id, version=run.version, expected_hash=run.plan_hash
        )
    except VersionNotRunnable:
        row = DefinitionVersion.objects.filter(
            scope=run.scope, definition_id=run.definition_id, version=run.version
        ).first()
        if row is None:
            return None
        try:
            return build_row(row)
        except WorkflowError:
            return None
    except WorkflowError:
        return None


def run_commands(*, run_id: Any, limit: int = 200) -> list[Command]:
    """A run's queue, newest first (bounded: a long-lived run may hold many settled commands)."""
    return list(Command.objects.filter(run_id=run_id).order_by("-seq")[:limit])


def commands_by_id(ids: Any) -> dict[int, Command]:
    return {c.id: c for c in Command.objects.filter(id__in=[i for i in ids if i is not None])}


def run_parks(*, run_id: Any) -> list[Park]:
    return list(Park.objects.filter(run_id=run_id).order_by("-since", "-id")[:200])


def scheduled_timers(*, run_id: Any) -> list[Timer]:
    return list(Timer.objects.filter(run_id=run_id, status=Timer.Status.SCHEDULED).order_by("fire_at"))


def called_runs(*, run_id: Any, live_only: bool = True, limit: int = 200) -> list[Run]:
    """The runs this run called, all the way down (breadth first, bounded)."""
    found: list[Run] = []
    frontier = [run_id]
    while frontier and len(found) < limit:
        qs = Run.objects.filter(parent_run_id__in=frontier).order_by("created_at")
        if live_only:
            qs = qs.filter(status__in=[*LIVE_STATUSES, RunStatus.FAILED])
        children = list(qs[: limit - len(found)])
        found.extend(children)
        frontier = [c.id for c in children]
    return found


def waiting_callers(*, run_id: Any, limit: int = 100) -> list[Run]:
    """The runs waiting on this one at a call (its caller, the caller's caller, ...), nearest
    first: cancelling a called run cancels them too (``teardown.cancel_with_callers``)."""
    found: list[Run] = []
    below = Run.objects.filter(pk=run_id).first()
    while below is not None and below.parent_run_id and len(found) < limit:
        caller = Run.objects.filter(pk=below.parent_run_id, status=RunStatus.WAITING).first()
        if caller is None:
            break
        wait = caller.wait or {}
        at_call = wait.get("kind") == "call" and str(wait.get("child")) == str(below.id)
        if not at_call and not caller.branches.filter(status=BranchStatus.WAITING, wait__child=str(below.id)).exists():
            break
        found.append(caller)
        below = caller
    return found


def cancel_preview(*, run_id: Any) -> dict[str, Any]:
    """What cancelling a run would end: the runs waiting on it at a call (cancelled first), its
    open approvals, armed timers, called runs and the commands still queued (they settle
    CANCELLED)."""
    return {
        "callers": waiting_callers(run_id=run_id),
        "tasks": open_tasks(run_id=run_id),
        "timers": scheduled_timers(run_id=run_id),
        "called_runs": called_runs(run_id=run_id),
        "queued": Command.objects.filter(
            run_id=run_id,
            status__in=[
                CommandStatus.PENDING,
                CommandStatus.DEFERRED,
                CommandStatus.CLAIMED,
                CommandStatus.PARKED,
                CommandStatus.DEAD,
            ],
        ).count(),
    }


def started_by(*, run_id: Any) -> Command | None:
    """The START command of a run (its actor columns say who started it)."""
    return Command.objects.filter(run_id=run_id, kind=CommandKind.START).order_by("seq").first()


def viewable_state(run: Run) -> Any:
    """The run's current state as staff pages show it: the values at its definition's
    redacted pointers replaced, as in the history (a failing redactor hides it all)."""
    from workflows.engine import redaction

    try:
        pointers = redaction.pointers_of(run.definition_id, run.version)
    except redaction.RedactionFailed:
        return redaction.REDACTED
    return redaction.redact(run.state, pointers)


# --- record triggers (capture) -------------------------------------------------------------------


def current_trigger_plans() -> list[Any]:
    """The plans with a record ``trigger`` among the default scope's current versions.

    One read: the default scope's activation records joined with their AVAILABLE rows (a row
    whose text never says "trigger" cannot declare one and is not built); the plans come from
    the plan cache. A version that does not build is left out (and logged by the cache).
    """
    from workflows.definitions import cache
    from workflows.exceptions import WorkflowError

    plans = []
    for scope, definition_id, version, plan_hash in db_rows(SQL.trigger_revisions):
        try:
            plan = cache.get_plan(scope=scope, definition_id=definition_id, version=version, expected_hash=plan_hash)
        except WorkflowError:
            continue
        if plan.trigger is not None:
            plans.append(plan)
    return plans


def subject_types() -> list[str]:
    """Every distinct run subject type, read by skipping through the subject index (one probe
    per type, however many runs there are)."""
    return [row[0] for row in db_rows(SQL.subject_types)]


def live_runs_about(*, subject_types: tuple[str, ...] | list[str], subject_id: str) -> list[str]:
    """Ids of the runs about this record that have not ended (failed ones included: a retry
    would resume a run about a record that is gone), oldest first."""
    rows = Run.objects.filter(subject_type__in=list(subject_types), subject_id=subject_id).exclude(
        status__in=ENDED_STATUSES
    )
    return [str(pk) for pk in rows.order_by("created_at").values_list("id", flat=True)]


# --- the designer's source of a revision ------------------------------------------------------------------------------


def definition_text(*, scope: str, definition_id: str, version: int) -> tuple[str, str]:
    """The stored source of one revision as ``(text, format)``, exactly as it was loaded
    (comments included), for the designer's editor and its diffs. Refuses DEFINITION_MISSING."""
    row = (
        DefinitionVersion.objects.filter(scope=scope, definition_id=definition_id, version=int(version))
        .only("text", "format", "kind")
        .first()
    )
    if row is None or row.kind != "DOCUMENT":
        raise DefinitionMissing("no stored document for this revision")
    return row.text, row.format


# --- requesters: what a user may start, and the runs they started -----------------------------------


@dataclass(frozen=True)
class Startable:
    """A workflow a requester may start: the revision a start without a version runs now."""

    definition_id: str
    version: int
    title: str
    description: str
    start_schema: Any  # JSON Schema of the start payload (None: no payload)
    written_schema: Any  # the same as the document wrote it (key order kept), for the form's layout
    uses_business_key: bool  # its record trigger computes one, so a manual start asks for it too


def startable_definitions(*, definition_id: str | None = None) -> list[Startable]:
    """The default scope's current revisions that are AVAILABLE (the activation record's
    target), by id; ``definition_id`` narrows to one. A revision that does not build here is
    left out, as a start of it would be refused."""
    from workflows.definitions import cache, documents
    from workflows.exceptions import WorkflowError

    records = Activation.objects.filter(scope="default").order_by("definition_id")
    if definition_id is not None:
        records = records.filter(definition_id=definition_id)
    found = []
    for record in records:
        row = DefinitionVersion.objects.filter(
            scope=record.target_scope,
            definition_id=record.definition_id,
            version=record.version,
            status=DefinitionStatus.AVAILABLE,
        ).first()
        if row is None:
            continue
        try:
            plan = cache.get_plan(
                scope=row.scope, definition_id=row.definition_id, version=row.version, expected_hash=row.plan_hash
            )
            data: dict[str, Any] = documents.parse(row.text, row.format).data if row.kind == "DOCUMENT" else {}
        except WorkflowError:
            continue
        description = data.get("description")
        contract = data.get("contract")
        written = [data.get("startPayloadSchema"), contract.get("startSchema") if isinstance(contract, dict) else None]
        found.append(
            Startable(
                definition_id=row.definition_id,
                version=row.version,
                title=row.definition_id.replace("-", " ").replace("_", " ").capitalize(),
                description=description if isinstance(description, str) else "",
                start_schema=plan.start_schema,
                written_schema=next((w for w in written if isinstance(w, dict)), None),
                uses_business_key=plan.trigger is not None and plan.trigger.business_key is not None,
            )
        )
    return found


def runs_started_by(user: Any) -> QuerySet[Run]:
    """The runs whose START names this user (the actor columns hold the username, as
    ``workflows.engine.actors.user`` writes them; a record trigger's run names the user whose
    save started it), newest first."""
    if not getattr(user, "is_authenticated", False):
        return Run.objects.none()
    return Run.objects.filter(actor_kind=ActorKind.USER, actor_id=user.get_username()).order_by("-created_at", "-id")


def requests_of(user: Any) -> QuerySet[Run]:
    """The runs of "My requests": the runs this user started (:func:`runs_started_by`) and the runs about
    records they own, newest first.

    A record is owned through the ``ownerField`` of a record trigger (docs/triggers.md) among
    the default scope's current versions: a relation to the user model names the user, any
    other field holds their username. A run is about a record when its subject names the
    record's model label and primary key (the teardown's rule). One query: a subquery of the
    owned primary keys per owning model, ORed with the started-by filter."""
    from django.apps import apps
    from django.contrib.auth import get_user_model
    from django.db.models import CharField, Q
    from django.db.models.functions import Cast

    if not getattr(user, "is_authenticated", False):
        return Run.objects.none()
    wanted = Q(actor_kind=ActorKind.USER, actor_id=user.get_username())
    seen: set[tuple[str, str]] = set()
    for plan in current_trigger_plans():
        owner_field = plan.trigger.owner_field if plan.trigger is not None else None
        if not owner_field:
            continue
        try:
            model = apps.get_model(plan.trigger.model)
            field = model._meta.get_field(owner_field)
        except (LookupError, ValueError, FieldDoesNotExist):
            continue  # the model or field went away since the revision was published
        label = model._meta.label_lower
        if (label, owner_field) in seen:
            continue
        seen.add((label, owner_field))
        owner: Any = user if field.is_relation and field.related_model is get_user_model() else user.get_username()
        owned = (
            model._default_manager.filter(**{owner_field: owner})
            .annotate(switchyard_pk_text=Cast("pk", CharField()))
            .values("switchyard_pk_text")
        )
        # the subject type is written by the document: the label as Django spells it, or lowered
        wanted |= Q(subject_type__in=sorted({label, model._meta.label}), subject_id__in=owned)
    return Run.objects.filter(wanted).order_by("-created_at", "-id")


def request_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """For each run, its open tasks (the step it waits at and who holds each), in one read."""
    tasks: dict[Any, list[Task]] = {}
    for task in Task.objects.filter(
        run_id__in=[r.id for r in runs], status__in=[TaskStatus.OPEN, TaskStatus.COMPLETING]
    ).order_by("created_at"):
        tasks.setdefault(task.run_id, []).append(task)
    return [{"run": r, "tasks": tasks.get(r.id, [])} for r in runs]
