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
