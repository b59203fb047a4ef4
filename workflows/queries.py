"""Reads: runs, tasks and history as the API and the pages show them (no engine import needed
by callers). Identity checks for tasks live here so every surface applies the same rule."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from workflows.exceptions import InstanceNotFound, TaskNotFound
from workflows.models import Command, HistoryEntry, Park, Run, Task


def run_dict(run: Run) -> dict[str, Any]:
    waits = []
    for park in run.parks.filter(left_at__isnull=True).order_by("since"):
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
    }


def query(*, run_id: Any) -> dict[str, Any]:
    """The run as the API shows it. Refuses INSTANCE_NOT_FOUND."""
    try:
        run = Run.objects.get(pk=run_id)
    except (Run.DoesNotExist, ValueError, TypeError):
        raise InstanceNotFound("run not found") from None
    return run_dict(run)


def runs() -> QuerySet[Run]:
    return Run.objects.all()


def history(*, run_id: Any) -> QuerySet[HistoryEntry]:
    return HistoryEntry.objects.filter(run_id=run_id).order_by("seq")


def commands(*, run_id: Any) -> QuerySet[Command]:
    return Command.objects.filter(run_id=run_id).order_by("seq")


def open_parks(*, run_id: Any) -> QuerySet[Park]:
    return Park.objects.filter(run_id=run_id, left_at__isnull=True)


def tasks_for(user: Any, *, include_closed: bool = False) -> QuerySet[Task]:
    """The tasks a user may see and act on: assigned to them or to one of their groups."""
    qs = Task.objects.select_related("run")
    if not include_closed:
        qs = qs.filter(status__in=["OPEN", "COMPLETING"])
    if not getattr(user, "is_authenticated", False):
        return qs.none()
    groups = list(user.groups.values_list("name", flat=True))
    return qs.filter(
        Q(assignment_mode="user", assignment_value=user.get_username())
        | Q(assignment_mode="group", assignment_value__in=groups)
    )


def can_act_on_task(user: Any, task: Task) -> bool:
    if not getattr(user, "is_authenticated", False):
        return False
    if task.assignment_mode == "user" and task.assignment_value == user.get_username():
        return True
    if task.assignment_mode == "group" and user.groups.filter(name=task.assignment_value).exists():
        return True
    return bool(user.has_perm("workflows.change_task"))


def task_for(user: Any, *, task_id: Any) -> Task:
    """A task the user may act on; TASK_NOT_FOUND otherwise (no hint that it exists)."""
    try:
        task = Task.objects.select_related("run").get(pk=task_id)
    except (Task.DoesNotExist, ValueError, TypeError):
        raise TaskNotFound("task not found") from None
    if not can_act_on_task(user, task):
        raise TaskNotFound("task not found")
    return task


def database_now() -> Any:
    """The database clock. Due times are written on it, so overdue marks compare with it,
    never with the web node's clock."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def decision_schemas_as_written(task: Task) -> dict[str, Any]:
    """The decisions' payload schemas of a task as its definition wrote them (key order kept),
    for laying out forms. Empty when the pinned plan cannot be read here; the task's own
    decision snapshot stays the schema that completions are checked against."""
    from workflows.definitions import cache
    from workflows.definitions.plan import HumanTaskStep
    from workflows.exceptions import WorkflowError

    run = task.run
    try:
        plan = cache.get_plan(scope=run.scope, definition_id=run.definition_id, version=run.version,
                              expected_hash=run.plan_hash)
    except WorkflowError:
        return {}
    step = plan.steps.get(task.step)
    if not isinstance(step, HumanTaskStep):
        return {}
    return {d.name: d.payload_schema for d in step.decisions if d.payload_schema}


# --- migration of parked runs (the Migrate dialog and the bulk API) --------------------------


def migration_positions(*, scope: str, definition_id: str, version: int) -> list[Any]:
    """Where runs of one revision are parked: one row per (node, kind) with its count, from one
    GROUP BY over the open parks' partial index (never a row per run)."""
    from workflows.engine import migration

    return migration.positions(scope=scope, definition_id=definition_id, version=int(version))


def parked_by_version(*, definition_id: str) -> dict[tuple[str, int], int]:
    """Parked runs per (scope, revision) of a definition, every revision included."""
    from workflows.engine import migration

    return migration.parked_by_version(definition_id=definition_id)


def parked_by_definition(*, definition_ids: Any = None) -> dict[tuple[str, str], int]:
    """Parked runs per (definition id, scope), every revision included."""
    from workflows.engine import migration

    return migration.parked_by_definition(definition_ids)


def runs_at_position(
    *, scope: str, definition_id: str, version: int, node: str, kind: str, search: str = "", offset: int = 0,
    limit: int = 25,
) -> tuple[list[dict[str, Any]], int]:
    """One page of the runs parked at a position (oldest first), searchable by business key."""
    from workflows.engine import migration

    return migration.runs_at(scope=scope, definition_id=definition_id, version=int(version), node=node, kind=kind,
                             search=search, offset=offset, limit=limit)


def migration_records(*, scope: str | None = None, definition_id: str | None = None) -> QuerySet[Any]:
    """Migration records, newest first (discarded previews left out)."""
    from workflows.models import MigrationRecord

    qs = MigrationRecord.objects.exclude(status="DISCARDED").order_by("-created_at", "-id")
    if scope is not None:
        qs = qs.filter(scope=scope)
    if definition_id is not None:
        qs = qs.filter(definition_id=definition_id)
    return qs


def migration_record(*, record_id: Any) -> Any:
    """One migration record; MIGRATION_ILLEGAL_STATE when there is none."""
    from workflows.exceptions import MigrationIllegalState
    from workflows.models import MigrationRecord

    try:
        return MigrationRecord.objects.get(pk=int(record_id))
    except (MigrationRecord.DoesNotExist, ValueError, TypeError):
        raise MigrationIllegalState("migration record not found") from None


def migration_items(*, record_id: Any, status: str | None = None) -> QuerySet[Any]:
    """The runs of a migration record with their outcome, in the order they were frozen."""
    from workflows.models import MigrationItem

    qs = MigrationItem.objects.filter(record_id=record_id).select_related("run").order_by("id")
    if status:
        qs = qs.filter(status=status)
    return qs


def migration_row_facts(*, record_id: Any) -> list[dict[str, Any]]:
    """Per frozen row: approvals to withdraw (by assignee), timers to disarm, counts by status."""
    from workflows.engine import migration

    return migration.row_facts(record_id=int(record_id))


def migration_target_facts(*, scope: str, definition_id: str, version: int, node: str) -> dict[str, Any]:
    """What entering ``node`` of a revision fresh will do (assignee, title, due, timers)."""
    from workflows.engine import migration

    plan = migration.plan_of(scope, definition_id, int(version))
    return migration.describe_target(plan.steps.get(node) if plan is not None else None)


# --- record triggers (capture) -------------------------------------------------------------------


def current_trigger_plans() -> list[Any]:
    """The plans with a record ``trigger`` among the default scope's current versions.

    One read: the default scope's activation records joined with their AVAILABLE rows (a row
    whose text never says "trigger" cannot declare one and is not built); the plans come from
    the plan cache. A version that does not build is left out (and logged by the cache).
    """
    from django.db import connection

    from workflows.definitions import cache
    from workflows.exceptions import WorkflowError

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT d.scope, d.definition_id, d.version, d.plan_hash FROM workflow_activations a "
            "JOIN workflow_definitions d ON d.scope = a.target_scope AND d.definition_id = a.definition_id "
            "AND d.version = a.version WHERE a.scope = 'default' AND d.status = 'AVAILABLE' "
            "AND strpos(d.text, 'trigger') > 0 ORDER BY d.definition_id"
        )
        rows = cursor.fetchall()
    plans = []
    for scope, definition_id, version, plan_hash in rows:
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
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "WITH RECURSIVE t(v) AS ("
            " (SELECT subject_type FROM workflow_runs WHERE subject_type > '' ORDER BY subject_type LIMIT 1)"
            " UNION ALL SELECT (SELECT subject_type FROM workflow_runs WHERE subject_type > t.v "
            " ORDER BY subject_type LIMIT 1) FROM t WHERE t.v IS NOT NULL"
            ") SELECT v FROM t WHERE v IS NOT NULL"
        )
        return [row[0] for row in cursor.fetchall()]


def live_runs_about(*, subject_types: tuple[str, ...] | list[str], subject_id: str) -> list[str]:
    """Ids of the runs about this record that have not ended (failed ones included: a retry
    would resume a run about a record that is gone), oldest first."""
    from workflows.models.runs import ENDED_STATUSES

    rows = Run.objects.filter(subject_type__in=list(subject_types), subject_id=subject_id).exclude(
        status__in=ENDED_STATUSES
    )
    return [str(pk) for pk in rows.order_by("created_at").values_list("id", flat=True)]
