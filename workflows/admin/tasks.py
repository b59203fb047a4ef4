"""Admin for human tasks: find them (open, overdue, by assignee) and reassign them.

Rows are read-only here. Reassignment goes through ``operations.reassign_task``, which takes
the run's execution lock, refuses a task that is not OPEN (TASK_NOT_WAITING) and logs
TASK_REASSIGNED with the administrator as the reassigner; a refusal is shown per task with
its code.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Group
from django.db.models import QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from workflows import access, operations, users
from workflows.access import Capability
from workflows.admin.big import BigTableAdmin
from workflows.exceptions import WorkflowError
from workflows.models import Task

OPEN = ("OPEN", "COMPLETING")


class OpenFilter(admin.SimpleListFilter):
    title = _("open")
    parameter_name = "open"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:  # labels: lazy text
        return [("yes", _("Open")), ("no", _("Closed"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Task]) -> QuerySet[Task]:
        if self.value() == "yes":
            return queryset.filter(status__in=OPEN)
        if self.value() == "no":
            return queryset.exclude(status__in=OPEN)
        return queryset


class OverdueFilter(admin.SimpleListFilter):
    """Open tasks past their due date, on the database clock (the one due dates are set on)."""

    title = _("overdue")
    parameter_name = "overdue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:  # labels: lazy text
        return [("yes", _("Overdue"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Task]) -> QuerySet[Task]:
        if self.value() == "yes":
            return queryset.filter(status="OPEN", due_at__lte=Now())
        return queryset


class AssigneeFilter(admin.SimpleListFilter):
    title = _("assignee")
    parameter_name = "assignee"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        pairs = (
            Task.objects.filter(status__in=OPEN)
            .order_by("assignment_mode", "assignment_value")
            .values_list("assignment_mode", "assignment_value")
            .distinct()[:100]
        )
        return [(f"{mode}:{value}", f"{'Group' if mode == 'group' else 'User'} {value}") for mode, value in pairs]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Task]) -> QuerySet[Task]:
        value = self.value()
        if not value or ":" not in value:
            return queryset
        mode, name = value.split(":", 1)
        return queryset.filter(assignment_mode=mode, assignment_value=name)


class ReassignForm(forms.Form):
    mode = forms.ChoiceField(choices=[("user", _("A user")), ("group", _("A group"))], label=_("Assign to"))
    value = forms.CharField(max_length=255, label=_("Username or group name"))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        mode, value = data.get("mode"), data.get("value")
        if mode and value:
            problem = access.assignee_problem(mode=mode, value=value)  # what reassign_task refuses
            if problem is not None:
                self.add_error("value", f"{problem[0].upper()}{problem[1:]}.")
        return data


def _active_usernames() -> list[str]:
    return users.usernames(users.active_users(), limit=500)  # what user assignments hold


@admin.register(Task)
class TaskAdmin(BigTableAdmin):
    list_display = (
        "title",
        "run_link",
        "step",
        "status",
        "assignee",
        "due_at",
        "overdue",
        "reminder_count",
        "created_at",
    )
    list_filter = (OpenFilter, OverdueFilter, AssigneeFilter, "status", "task_type")
    search_fields = ("title", "step", "assignment_value", "run__business_key", "run__definition_id")
    ordering = ("-created_at",)
    actions = ["reassign"]
    readonly_fields = [f.name for f in Task._meta.fields] + ["task_page"]
    list_select_related = ("run",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Task]:
        return super().get_queryset(request).annotate(db_now=Now())

    @admin.display(description=_("run"))
    def run_link(self, obj: Task) -> str:
        return format_html("{} <span class='quiet'>{}</span>", obj.run.definition_id, obj.run.business_key or "")

    @admin.display(description=_("assigned to"))
    def assignee(self, obj: Task) -> str:
        return f"{'group ' if obj.assignment_mode == 'group' else ''}{obj.assignment_value}"

    @admin.display(description=_("overdue"), boolean=True)
    def overdue(self, obj: Task) -> bool:
        now = getattr(obj, "db_now", None)
        return bool(obj.status == "OPEN" and obj.due_at is not None and now is not None and obj.due_at <= now)

    @admin.display(description=_("task page"))
    def task_page(self, obj: Task) -> str:
        url = reverse("workflows:task", args=[obj.id])
        return format_html('<a href="{}">{}</a>', url, url)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tasks open when a run reaches a human-task step

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # cancel the run instead

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # the change list needs it for the action; a single task is shown read-only
        return obj is None and super().has_change_permission(request, obj)

    def has_reassign_permission(self, request: HttpRequest) -> bool:
        return access.has(request.user, Capability.ACT_ON_ANY_TASK)

    @admin.action(description=_("Reassign selected tasks…"), permissions=["reassign"])
    def reassign(self, request: HttpRequest, queryset: QuerySet[Task]) -> HttpResponse | None:
        form = ReassignForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            mode, value = form.cleaned_data["mode"], form.cleaned_data["value"]
            done = 0
            for task in queryset.order_by("created_at"):
                try:
                    operations.reassign_task(task_id=task.id, mode=mode, value=value, actor=request.user)
                    done += 1
                except WorkflowError as error:
                    self.message_user(request, f"“{task.title}”: {error.code}: {error.message}", messages.ERROR)
            if done:
                self.message_user(
                    request,
                    _("Reassigned %(count)s task(s) to %(mode)s %(value)s.")
                    % {"count": done, "mode": mode, "value": value},
                    messages.SUCCESS,
                )
            return None
        return TemplateResponse(
            request,
            "workflows/tasks/admin_reassign.html",
            {
                **self.admin_site.each_context(request),
                "title": _("Reassign tasks"),
                "opts": self.model._meta,
                "form": form,
                "tasks": queryset.order_by("created_at"),
                "open_count": queryset.filter(status="OPEN").count(),
                "action_checkbox_name": ACTION_CHECKBOX_NAME,
                "users": _active_usernames(),
                "groups": Group.objects.order_by("name").values_list("name", flat=True)[:500],
            },
        )
