"""Approvers' pages: the inbox of open tasks, the tasks the user decided, and one page per
task with its claim and decision forms.

Reads go through ``workflows.queries`` (which also decides who may see a task: assignees and
users with the act on any task capability, ``workflows.access``; everyone else gets 404, with no hint that the task
exists), writes through ``workflows.operations``. The inbox is one template that htmx
refreshes as a fragment (``request.htmx``); its search, filters, order and page are a plain
GET form in the query string, so a filtered page works without JavaScript, can be bookmarked,
and the refresh keeps it. A group task may be claimed by one member at a time
(``operations.claim_task``); while someone holds it, the others see who and their decision
is refused (``operations.complete_claimed_task``).

A decision form carries two hidden fields: an idempotency key minted when the page is drawn
(a double submit records one completion; the second answers the first) and a signed
*ticket* holding the assignment and subject version the approver saw. The ticket is the
expected assignment of the completion, so a task reassigned meanwhile is refused by the
engine; and it lets the page tell a former assignee "this task was reassigned" where anyone
else gets a plain 404.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django import forms as html_forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core import signing
from django.core.paginator import Page, Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from workflows import operations, queries
from workflows.exceptions import (
    IdempotencyConflict,
    InvalidPayload,
    LockTimeout,
    PersistenceError,
    TaskNotFound,
    TaskNotWaiting,
)
from workflows.models import Task
from workflows.presentation import forms

TICKET_SALT = "workflows.tasks.decision-form"
TICKET_MAX_AGE = 60 * 60 * 24 * 30  # a form left open for a month still explains itself
MAX_STATE_ITEMS = 200
MAX_STATE_DEPTH = 6
# after a decision is recorded the page waits this long for the executor, so the
# confirmation can show where the run went (the decision is recorded either way)
CONFIRM_WAIT_SECONDS = 2.0
PAGE_SIZE = 25  # inbox and "Completed by me" rows per page
SORTS = {"due": gettext_lazy("Due date, soonest first"), "-due": gettext_lazy("Due date, latest first")}

CLOSED_NOTICES = {
    "COMPLETING": gettext_lazy("A decision has been recorded for this task and is being applied."),
    "COMPLETED": gettext_lazy("This task has been completed."),
    "EXPIRED": gettext_lazy("This task expired when it passed its due date; it no longer takes a decision."),
    "CANCELLED": gettext_lazy("This task was cancelled: its run ended or was cancelled."),
    "WITHDRAWN": gettext_lazy("This task was withdrawn; it no longer takes a decision."),
}


# --- inbox --------------------------------------------------------------------------------


class InboxForm(html_forms.Form):
    """The inbox's search, filters and order, read from the query string."""

    q = html_forms.CharField(required=False, max_length=200, label=gettext_lazy("Search"))
    workflow = html_forms.ChoiceField(required=False, label=gettext_lazy("Workflow"))
    group = html_forms.ChoiceField(required=False, label=gettext_lazy("Group"))
    due_before = html_forms.DateField(
        required=False,
        label=gettext_lazy("Due before"),
        widget=html_forms.DateInput(attrs={"type": "date"}),
        error_messages={"invalid": gettext_lazy("Enter a date as YYYY-MM-DD.")},
    )
    sort = html_forms.ChoiceField(required=False, label=gettext_lazy("Order"), choices=list(SORTS.items()))

    def __init__(self, data: Any, *, user: Any) -> None:
        super().__init__(data)
        any_choice = [("", _("Any"))]
        workflow = self.fields["workflow"]
        group = self.fields["group"]
        assert isinstance(workflow, html_forms.ChoiceField) and isinstance(group, html_forms.ChoiceField)
        workflow.choices = any_choice + [(w, w) for w in sorted(queries.inbox_workflows(user))]
        group.choices = any_choice + [(g, g) for g in queries.user_groups(user)]

    def filters(self) -> queries.InboxFilters:
        data = self.cleaned_data
        return queries.InboxFilters(
            search=data["q"].strip(),
            workflow=data["workflow"],
            group=data["group"],
            due_before=data["due_before"],
            latest_due_first=data["sort"] == "-due",
        )


@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        login = f"{reverse('login')}?next={reverse('workflows:inbox')}"
        if getattr(request, "htmx", False):
            # a polling fragment whose session ended: send the whole page to the sign-in
            # form instead of swapping the form into the inbox
            return HttpResponseClientRedirect(login)
        return HttpResponseRedirect(login)
    form = InboxForm(request.GET, user=request.user)
    filters = form.filters() if form.is_valid() else None
    now = queries.database_now()
    context: dict[str, Any] = {"form": form, "now": now, "filtered": False, "rows": [], "overdue_count": 0}
    if filters is not None:
        selected = queries.inbox(request.user, filters)
        page = _page(request, selected)
        context |= {
            "page": page,
            "query": _query_without_page(request),
            "rows": [{"task": t, "overdue": _overdue(t, now)} for t in page.object_list],
            "overdue_count": selected.filter(status="OPEN", due_at__lte=now).count(),
            "filtered": filters != queries.InboxFilters(),
        }
    template = "workflows/tasks/_inbox_table.html" if getattr(request, "htmx", False) else "workflows/tasks/inbox.html"
    return render(request, template, context)


@login_required
@require_GET
def completed(request: HttpRequest) -> HttpResponse:
    """ "Completed by me": the tasks this user decided, newest first."""
    page = _page(request, queries.completed_by(request.user))
    rows = [{"task": t, "label": _label_of(t, t.decision)} for t in page.object_list]
    return render(
        request, "workflows/tasks/completed.html", {"page": page, "rows": rows, "query": _query_without_page(request)}
    )


def _page(request: HttpRequest, selected: Any) -> Page:
    """The requested page (an unreadable or too large number: the first or the last page)."""
    return Paginator(selected, PAGE_SIZE).get_page(request.GET.get("page"))


def _query_without_page(request: HttpRequest) -> str:
    """The query string the page links keep (search, filters, order)."""
    kept = request.GET.copy()
    kept.pop("page", None)
    return kept.urlencode()


def _overdue(task: Task, now: datetime) -> bool:
    return task.status == "OPEN" and task.due_at is not None and task.due_at <= now


# --- one task -----------------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def task_page(request: HttpRequest, task_id: uuid.UUID) -> HttpResponse:
    try:
        task = queries.task_for(request.user, task_id=task_id)
    except TaskNotFound:
        if request.method == "POST" and _former_assignee(request, task_id):
            return _gone(request, status=409)
        raise Http404("task not found") from None
    if request.method == "POST":
        return _decide(request, task)
    return _render_task(request, task)


def _decide(request: HttpRequest, task: Task) -> HttpResponse:
    if _held_by_another(request, task):
        return _render_task(request, task, notice=_claimed_notice(task), status=409)
    decision = str(request.POST.get("decision", ""))
    key = str(request.POST.get("idempotency_key", ""))[:255] or None
    ticket = _read_ticket(request, task.id)
    snapshot = {d["name"]: d for d in task.decisions or []}
    chosen = snapshot.get(decision)
    as_written = queries.decision_schemas_as_written(task)
    form = forms.build(decision, chosen.get("schema") if chosen else None, order=as_written.get(decision))
    payload = forms.parse(form, request.POST)

    if form.has_errors:
        # some inputs could not be read as values: nothing is recorded; show what the
        # engine would say about the rest next to them
        from workflows.definitions import schemas

        if chosen and chosen.get("schema"):
            unread = {f.pointer for f in form.all_fields() if f.errors}
            forms.attach(
                form,
                chosen["schema"],
                [
                    v
                    for v in schemas.validate(chosen["schema"], payload if payload is not None else {})
                    if not any(v.pointer == p or v.pointer.startswith(p + "/") for p in unread)
                ],
            )
        return _render_task(request, task, failed=form, key=key, status=422)

    expected = {"mode": ticket["mode"], "value": ticket["value"]} if ticket else None
    subject_version = ticket.get("subject_version") if ticket and task.require_version_stability else None
    try:
        recorded = operations.complete_claimed_task(
            task_id=task.id,
            decision=decision,
            payload=payload,
            expected_assignment=expected,
            subject_version=subject_version,
            idempotency_key=key,
            actor=request.user,
        )
    except InvalidPayload as exc:
        task.refresh_from_db()
        if task.status != "OPEN":
            return _render_task(request, task, status=409)
        forms.attach(form, chosen.get("schema") if chosen else None, exc.violations)
        if not form.has_errors:
            form.errors.append(_("This decision could not be recorded with these details."))
        return _render_task(request, task, failed=form, key=key, status=422)
    except TaskNotWaiting as exc:
        task.refresh_from_db()
        if exc.code == "TASK_CLAIMED":
            return _render_task(request, task, notice=_claimed_notice(task), status=409)
        if not queries.can_act_on_task(request.user, task):
            return _gone(request, status=409)
        if task.status == "OPEN":
            notice = _(
                "This task changed since you opened it (it was reassigned or its subject changed). "
                "Review it again before deciding."
            )
            return _render_task(request, task, notice=notice, status=409)
        return _render_task(request, task, status=409)
    except IdempotencyConflict:
        return _render_task(
            request,
            task,
            notice=_("This form was already sent with other details. Reload the page to decide again."),
            status=409,
        )
    except (LockTimeout, PersistenceError):
        return _render_task(
            request,
            task,
            failed=form,
            key=key,
            status=503,
            notice=_("The run is busy right now; nothing was recorded. Try again in a moment."),
        )

    label = _label(chosen) if chosen else decision
    # give the executor a moment so the page can show where the run went
    if CONFIRM_WAIT_SECONDS > 0:
        operations.await_idle(CONFIRM_WAIT_SECONDS, run_id=recorded.run_id)
    messages.success(request, _("Your decision “%(label)s” was recorded.") % {"label": label})
    return HttpResponseRedirect(reverse("workflows:task", args=[task.id]))


@login_required
@require_POST
def claim(request: HttpRequest, task_id: uuid.UUID) -> HttpResponse:
    """Claim a group task (``release`` in the form: give it back) and return to its page."""
    try:
        task = queries.task_for(request.user, task_id=task_id)
    except TaskNotFound:
        raise Http404("task not found") from None
    release = "release" in request.POST
    try:
        if release:
            operations.unclaim_task(task_id=task.id, actor=request.user)
        else:
            operations.claim_task(task_id=task.id, actor=request.user)
    except TaskNotWaiting as exc:
        task.refresh_from_db()
        if exc.code == "TASK_CLAIMED":
            messages.error(request, _claimed_notice(task))
        elif exc.code == "TASK_NOT_CLAIMABLE":
            messages.error(request, _("This task is assigned to you alone; it needs no claim."))
        else:
            messages.error(request, _("This task no longer takes a decision, so its claim cannot change."))
    else:
        if release:
            messages.success(request, _("You released this task: any member of its group may take it now."))
        else:
            messages.success(
                request,
                _("You claimed this task: other members of group %(group)s see that you hold it.")
                % {"group": task.assignment_value},
            )
    return HttpResponseRedirect(reverse("workflows:task", args=[task.id]))


def _held_by_another(request: HttpRequest, task: Task) -> bool:
    """An open task claimed by someone else: this user may not decide it."""
    return task.status == "OPEN" and task.claimed_by not in ("", request.user.get_username())


def _claimed_notice(task: Task) -> str:
    if not task.claimed_by:
        return _("This task changed since you opened it. Review it again before deciding.")
    return _("%(name)s has claimed this task; only they can decide it until they release it. Nothing was changed.") % {
        "name": task.claimed_by
    }


def _render_task(
    request: HttpRequest,
    task: Task,
    *,
    failed: forms.PayloadForm | None = None,
    key: str | None = None,
    notice: str = "",
    status: int = 200,
) -> HttpResponse:
    run = task.run
    run.refresh_from_db()
    now = queries.database_now()
    as_written = queries.decision_schemas_as_written(task)
    decision_forms = []
    if task.status == "OPEN" and not _held_by_another(request, task):
        ticket = _ticket(request, task, run.subject_version)
        for d in task.decisions or []:
            if failed is not None and failed.decision == d["name"]:
                form = failed
            else:
                form = forms.build(d["name"], d.get("schema"), order=as_written.get(d["name"]))
            decision_forms.append(
                {
                    "name": d["name"],
                    "label": _label(d),
                    "form": form,
                    "failed": form is failed,
                    "ticket": ticket,
                    "key": key if form is failed and key else uuid.uuid4().hex,
                }
            )
    context = {
        "task": task,
        "run": run,
        "claimable": task.status == "OPEN" and task.assignment_mode == "group",
        "held_by_me": task.status == "OPEN" and task.claimed_by == request.user.get_username(),
        "held_by_another": _held_by_another(request, task),
        "overdue": _overdue(task, now),
        "decisions": decision_forms,
        "closed_notice": CLOSED_NOTICES.get(task.status, ""),
        "decided_label": _label_of(task, task.decision),
        "notice": notice,
        "state": _readable(run.state),
        # errors of a form the page cannot show (a decision the task does not offer)
        "failure_unmatched": failed.errors
        if failed is not None and not any(d["failed"] for d in decision_forms)
        else [],
    }
    return render(request, "workflows/tasks/task.html", context, status=status)


def _label(decision: Mapping[str, Any]) -> str:
    """The decision's label; a bare name (the snapshot's stand-in for no label) is humanised."""
    name = str(decision.get("name") or "")
    label = str(decision.get("label") or name)
    return forms.humanise(name) if label == name else label


def _label_of(task: Task, name: str) -> str:
    for d in task.decisions or []:
        if d.get("name") == name:
            return _label(d)
    return name


def _gone(request: HttpRequest, *, status: int) -> HttpResponse:
    return render(request, "workflows/tasks/gone.html", {}, status=status)


# --- the ticket: what the approver saw ------------------------------------------------------


def _ticket(request: HttpRequest, task: Task, subject_version: str) -> str:
    return signing.dumps(
        {
            "task": str(task.id),
            "user": request.user.get_username(),
            "mode": task.assignment_mode,
            "value": task.assignment_value,
            "subject_version": subject_version or "",
        },
        salt=TICKET_SALT,
        compress=True,
    )


def _read_ticket(request: HttpRequest, task_id: Any) -> dict[str, Any] | None:
    raw = request.POST.get("ticket", "")
    try:
        data = signing.loads(raw, salt=TICKET_SALT, max_age=TICKET_MAX_AGE)
    except signing.BadSignature:
        return None
    if not isinstance(data, dict) or data.get("task") != str(task_id):
        return None
    if data.get("user") != request.user.get_username():
        return None
    return data


def _former_assignee(request: HttpRequest, task_id: Any) -> bool:
    """A valid ticket proves this user was shown the task's form: it may say the task moved on."""
    return _read_ticket(request, task_id) is not None


# --- a readable state --------------------------------------------------------------------------


def _readable(value: Any) -> Any:
    """The run's state as nested rows for the key/value view, bounded in size and depth."""
    budget = [MAX_STATE_ITEMS]

    def node(v: Any, depth: int) -> dict[str, Any]:
        budget[0] -= 1
        if isinstance(v, Mapping):
            if depth >= MAX_STATE_DEPTH:
                return {"kind": "more"}
            items = []
            for k, sub in sorted(v.items(), key=lambda kv: str(kv[0])):
                if budget[0] <= 0:
                    items.append({"key": "…", "value": {"kind": "more"}})
                    break
                items.append({"key": forms.humanise(str(k)), "raw_key": str(k), "value": node(sub, depth + 1)})
            return {"kind": "map", "items": items}
        if isinstance(v, list):
            if depth >= MAX_STATE_DEPTH:
                return {"kind": "more"}
            entries = []
            for sub in v:
                if budget[0] <= 0:
                    entries.append({"kind": "more"})
                    break
                entries.append(node(sub, depth + 1))
            return {"kind": "list", "items": entries}
        if v is True or v is False:
            return {"kind": "bool", "text": _("Yes") if v else _("No")}
        if v is None:
            return {"kind": "none", "text": "—"}
        return {"kind": "scalar", "text": str(v)}

    if value is None:
        return None
    return node(value, 0)
