"""Reads about tasks: the tasks a user may see and act on (the identity rule every surface
applies), a task's decision schemas as written, and who an assignment reaches.

Callers go through the package (``from workflows import queries``), which re-exports these.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from workflows import users
from workflows.exceptions import TaskNotFound
from workflows.models import Task, TaskStatus


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
