"""Requesters' pages: "New request" (the workflows a user may start, each with a form) and
"My requests" (the runs they started or that concern records they own), with a read-only
page of one of their runs.

Who may start what: the start runs capability (``workflows.access``) and nothing per
workflow, since definition documents declare no start permission or visibility; every
AVAILABLE current revision of the default scope is offered. The form is the task forms'
generator (``workflows.presentation.forms``) over the revision's start payload schema, so a
start reads its input and reports the engine's violations exactly as a decision does, and
never echoes a submitted value in an error. The start is the API's call
(``operations.start``) with the user as actor and an idempotency key minted when the form
is drawn: a double submit starts one run.

"My requests" and the run page need only a sign-in: they show the runs whose START names
the user and the runs about records the user owns (a trigger's ``ownerField``;
``queries.requests_of``), and anyone else's run is a 404, whatever their capabilities
(operators have the run viewer).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods

from workflows import access, operations, queries
from workflows.access import Capability, page_requires
from workflows.exceptions import (
    Deprecated,
    IdempotencyConflict,
    InvalidPayload,
    LifecycleError,
    LockTimeout,
    NoCurrentVersion,
    PersistenceError,
    VersionNotRunnable,
)
from workflows.presentation import forms
from workflows.presentation.graph import render_svg

REQUESTS_PAGE = 25
FORM_ID = "start"  # the generated fields' id prefix (a task's form uses its decision name)
BUSINESS_KEY_LIMIT = 255

NOT_STARTABLE = (NoCurrentVersion, VersionNotRunnable, Deprecated, LifecycleError)


# --- New request ------------------------------------------------------------------------------


@page_requires(Capability.START)
@require_GET
def new_request(request: HttpRequest) -> HttpResponse:
    return render(request, "workflows/requests/new.html", {"definitions": queries.startable_definitions()})


@page_requires(Capability.START)
@require_http_methods(["GET", "POST"])
def start_form(request: HttpRequest, definition_id: str) -> HttpResponse:
    found = queries.startable_definitions(definition_id=definition_id)
    if not found:
        raise Http404("no such workflow to start")
    definition = found[0]
    if request.method == "GET":
        return _render_form(
            request, definition, forms.build(FORM_ID, definition.start_schema, order=definition.written_schema)
        )
    return _start(request, definition)


def _start(request: HttpRequest, definition: queries.Startable) -> HttpResponse:
    key = str(request.POST.get("idempotency_key", ""))[:255] or None
    business_key = str(request.POST.get("business_key", "")).strip() if definition.uses_business_key else ""
    form = forms.build(FORM_ID, definition.start_schema, order=definition.written_schema)
    payload = forms.parse(form, request.POST)
    if len(business_key) > BUSINESS_KEY_LIMIT:
        form.errors.append(_("Use at most %(limit)s characters for the business key.") % {"limit": BUSINESS_KEY_LIMIT})
    if form.has_errors:
        # nothing is started; show what the engine would say about the readable rest too
        _attach_the_rest(form, definition.start_schema, payload)
        return _render_form(request, definition, form, key=key, business_key=business_key, status=422)
    try:
        recorded = operations.start(
            definition_id=definition.definition_id,
            payload=payload,
            business_key=business_key,
            idempotency_key=key,
            actor=request.user,
        )
    except InvalidPayload as exc:
        forms.attach(form, definition.start_schema, exc.violations)
        if not form.has_errors:
            form.errors.append(_("This request could not be started with these details."))
        return _render_form(request, definition, form, key=key, business_key=business_key, status=422)
    except IdempotencyConflict:
        form.errors.append(_("This form was already sent with other details. Reload the page to start a new request."))
        return _render_form(request, definition, form, business_key=business_key, status=409)
    except NOT_STARTABLE:
        form.errors.append(_("This workflow cannot be started right now: its current revision is not available."))
        return _render_form(request, definition, form, key=key, business_key=business_key, status=409)
    except (LockTimeout, PersistenceError):
        form.errors.append(_("Switchyard is busy right now; nothing was started. Try again in a moment."))
        return _render_form(request, definition, form, key=key, business_key=business_key, status=503)
    if access.has(request.user, Capability.VIEW_RUNS):
        messages.success(request, _("Your request “%(title)s” was started.") % {"title": definition.title})
        return HttpResponseRedirect(reverse("workflows:runs:detail", args=[recorded.run_id]))
    messages.success(
        request, _("Your request “%(title)s” was started. It is listed below.") % {"title": definition.title}
    )
    return HttpResponseRedirect(reverse("workflows:requests:mine"))


def _attach_the_rest(form: forms.PayloadForm, schema: Any, payload: Any) -> None:
    """Add the schema's violations of the inputs that could be read (not of the unreadable
    ones, whose own error already stands next to them)."""
    if not schema:
        return
    from workflows.definitions import schemas

    unread = {f.pointer for f in form.all_fields() if f.errors}
    forms.attach(
        form,
        schema,
        [
            v
            for v in schemas.validate(schema, payload if payload is not None else {})
            if not any(v.pointer == p or v.pointer.startswith(p + "/") for p in unread)
        ],
    )


def _render_form(
    request: HttpRequest,
    definition: queries.Startable,
    form: forms.PayloadForm,
    *,
    key: str | None = None,
    business_key: str = "",
    status: int = 200,
) -> HttpResponse:
    context = {
        "definition": definition,
        "form": form,
        "key": key or uuid.uuid4().hex,
        "business_key": business_key,
        "business_key_limit": BUSINESS_KEY_LIMIT,
    }
    return render(request, "workflows/requests/form.html", context, status=status)


# --- My requests ------------------------------------------------------------------------------


@login_required
@require_GET
def my_requests(request: HttpRequest) -> HttpResponse:
    page = Paginator(queries.requests_of(request.user), REQUESTS_PAGE).get_page(request.GET.get("page"))
    context = {"page": page, "rows": queries.request_rows(list(page.object_list))}
    return render(request, "workflows/requests/mine.html", context)


@login_required
@require_GET
def request_detail(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """One of the user's runs, read-only: where it is, who holds it, the way it took."""
    run = queries.requests_of(request.user).filter(pk=run_id).first()
    if run is None:
        raise Http404("run not found")
    plan = queries.plan_of(run)
    visited, moves = queries.path_taken(run_id=run.id)
    positions = [p.node for p in queries.open_parks(run_id=run.id)] or ([run.current_step] if run.current_step else [])
    graph = ""
    if plan is not None:
        graph = render_svg(
            plan,
            highlight=[] if run.ended else positions,
            visited=visited,
            taken=moves,
            title=_("Graph of %(workflow)s version %(version)s")
            % {"workflow": run.definition_id, "version": run.version},
        )
    context: dict[str, Any] = {
        "row": queries.request_rows([run])[0],
        "run": run,
        "graph": mark_safe(graph),  # noqa: S308  (render_svg escapes every text it writes)
        "can_view_runs": access.has(request.user, Capability.VIEW_RUNS),
    }
    return render(request, "workflows/requests/detail.html", context)
