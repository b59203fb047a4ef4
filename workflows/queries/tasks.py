"""Reads about tasks: the tasks a user may see and act on (the identity rule every surface
applies), the inbox's filtered and sorted selection of them and the tasks a user decided, a
task's decision schemas as written, and who an assignment reaches.

The inbox orders by due date (no due date last), then id: a total order, so paging never shows
a task twice or skips one while nothing changes.

Callers go through the package (``from workflows import queries``), which re-exports these.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any

from django.db.models import F, Q, QuerySet

from workflows import users
from workflows.exceptions import TaskNotFound
from workflows.models import OPEN_STATUSES, Run, Task, TaskStatus


def tasks_for(user: Any, *, include_closed: bool = False) -> QuerySet[Task]:
    """The tasks a user may see and act on: assigned to them or to one of their groups."""
    qs = Task.objects.select_related("run")
    if not include_closed:
        qs = qs.filter(status__in=[TaskStatus.OPEN, TaskStatus.COMPLETING])
    if not getattr(user, "is_authenticated", False):
        return qs.none()
    groups = list(user.groups.values_list("name", flat=True))
    return qs.filter(
        Q(assignment_mode="user", assignment_value=user.get_username())
        | Q(assignment_mode="group", assignment_value__in=groups)
    )


@dataclass(frozen=True)
class InboxFilters:
    """What the inbox shows: ``search`` in the title and the run's business key, one workflow
    (definition id), one group, tasks due before a day (UTC midnight), the order by due date."""

    search: str = ""
    workflow: str = ""
    group: str = ""
    due_before: date | None = None
    latest_due_first: bool = False


def inbox(user: Any, filters: InboxFilters = InboxFilters()) -> QuerySet[Task]:
    """The user's open tasks (``tasks_for``) narrowed by ``filters``, in a stable order."""
    qs = tasks_for(user)
    if filters.search:
        qs = qs.filter(Q(title__icontains=filters.search) | Q(run__business_key__icontains=filters.search))
    if filters.workflow:
        qs = qs.filter(run__definition_id=filters.workflow)
    if filters.group:
        qs = qs.filter(assignment_mode="group", assignment_value=filters.group)
    if filters.due_before is not None:
        qs = qs.filter(due_at__lt=datetime.combine(filters.due_before, time.min, tzinfo=UTC))
    if filters.latest_due_first:
        return qs.order_by(F("due_at").desc(nulls_last=True), "-id")
    return qs.order_by(F("due_at").asc(nulls_last=True), "id")


def inbox_workflows(user: Any) -> list[str]:
    """The workflows (definition ids) of the user's open tasks: the inbox's workflow filter.

    Read from the runs that have not ended (the partial index ``workflow_run_open``): a run's
    tasks close when it ends, so every open task belongs to one of them, and a table of a
    million ended runs is never probed once per task (29 ms for a 10k-task inbox; 11 ms this way).
    """
    return list(
        Run.objects.filter(status__in=OPEN_STATUSES, id__in=tasks_for(user).order_by().values("run_id"))
        .order_by()
        .values_list("definition_id", flat=True)
        .distinct()
    )


def user_groups(user: Any) -> list[str]:
    """The names of the user's groups (the inbox's group filter), sorted."""
    if not getattr(user, "is_authenticated", False):
        return []
    return sorted(user.groups.values_list("name", flat=True))


def completed_by(user: Any) -> QuerySet[Task]:
    """The tasks the user decided (the completion's actor, ``Task.completed_by``), newest first."""
    if not getattr(user, "is_authenticated", False):
        return Task.objects.none()
    return (
        Task.objects.select_related("run")
        .filter(status=TaskStatus.COMPLETED, completed_by=user.get_username())
        .order_by(F("closed_at").desc(nulls_last=True), "-id")
    )


def all_tasks() -> QuerySet[Task]:
    """Every task, whoever it is assigned to (the operators' list; callers check the capability)."""
    return Task.objects.select_related("run")


def can_act_on_task(user: Any, task: Task) -> bool:
    if not getattr(user, "is_authenticated", False):
        return False
    if task.assignment_mode == "user" and task.assignment_value == user.get_username():
        return True
    if task.assignment_mode == "group" and user.groups.filter(name=task.assignment_value).exists():
        return True
    from workflows import access

    return access.has(user, access.Capability.ACT_ON_ANY_TASK)


def task_for(user: Any, *, task_id: Any) -> Task:
    """A task the user may act on; TASK_NOT_FOUND otherwise (no hint that it exists)."""
    try:
        task = Task.objects.select_related("run").get(pk=task_id)
    except (Task.DoesNotExist, ValueError, TypeError):
        raise TaskNotFound("task not found") from None
    if not can_act_on_task(user, task):
        raise TaskNotFound("task not found")
    return task


def decision_schemas_as_written(task: Task) -> dict[str, Any]:
    """The decisions' payload schemas of a task as its definition wrote them (key order kept),
    for laying out forms. Empty when the pinned plan cannot be read here; the task's own
    decision snapshot stays the schema that completions are checked against."""
    from workflows.definitions import cache
    from workflows.definitions.plan import HumanTaskStep
    from workflows.exceptions import WorkflowError

    run = task.run
    try:
        plan = cache.get_plan(
            scope=run.scope, definition_id=run.definition_id, version=run.version, expected_hash=run.plan_hash
        )
    except WorkflowError:
        return {}
    step = plan.steps.get(task.step)
    if not isinstance(step, HumanTaskStep):
        return {}
    return {d.name: d.payload_schema for d in step.decisions if d.payload_schema}


def open_tasks(*, run_id: Any) -> list[Task]:
    return list(
        Task.objects.filter(run_id=run_id, status__in=[TaskStatus.OPEN, TaskStatus.COMPLETING]).order_by("created_at")
    )


def assignee_names(*, mode: str, value: str, limit: int = 10) -> list[str]:
    """Who an assignment reaches (the users a new task notifies): the user, or the active
    members of the group (at most ``limit``)."""
    if mode not in ("user", "group"):
        return []
    return users.usernames(users.assignees(mode, value), limit=limit)
