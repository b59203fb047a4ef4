"""The run viewer (view runs capability): ``/runs/`` and ``/runs/<id>/``, and the operator's
actions on a run: cancel, send a signal, retry, and a link to migrate it.

A run's page explains it: the header (status, pin, subject, business key, who started it),
a picture of its graph with the current position(s) and the path taken, the timeline of its
history (paged by keyset on ``seq`` so a run with 10,000 entries opens as fast as one with
ten; filtered and paged through htmx fragments, plain links without JavaScript), the state
before and after any DECISION (rebuilt from the decision log), the command queue with its
errors, open tasks and timers, and its parks — where it waited and who moved it.

Cancel run lives on a waiting run's page for users with the cancel runs capability
(``workflows.access``; others see no button and are refused with 403). The confirmation says it cannot be undone,
lists what it will cancel, and carries the run's ``state_version`` and ``history_seq`` as
shown; ``operations.cancel_confirmed`` leaves the run alone when it moved on meanwhile.

Send a signal and Retry follow the same pattern, each behind the capability the API asks for
(signal runs, retry runs): a button on the run page opens a page of its own, and only a POST
from that page's confirmation records anything. The signal form offers only the signals the
run (or one of its branches) waits for now, its fields generated from the wait's payload
schema by ``workflows.presentation.forms`` (the task forms' generator); the payload is checked
against that schema before anything is recorded, so a bad value is a form error and never a
signal the executor would reject later. Retry is offered for a FAILED run only. "Migrate this
run" links to the Migrate dialog with the run's revision as its source, for users who may
migrate.

A decision step's timeline entry lists its routes in order, as the definition wrote them, and
which one the recorded outcome matched. The history records the outcome (the step chosen),
not each condition's result: routes before the matched one did not hold, routes after it were
not evaluated, and a target reached by several routes is said to be ambiguous. The values a
condition reads (``state.x``) are shown from the state before the decision, redacted as the
decision log redacts it, on the decision's "State before and after".

Reads go through ``workflows.queries``, writes through ``workflows.operations``.
"""

from __future__ import annotations

import json
import re
import uuid
from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET, require_http_methods

from workflows import access, jsonvalues, operations, queries
from workflows.access import Capability, page_requires
from workflows.definitions import schemas
from workflows.exceptions import (
    AlreadyMovedOn,
    IdempotencyConflict,
    InstanceNotFound,
    InvalidPayload,
    LockTimeout,
    PersistenceError,
    SignalLimit,
    SignalRejected,
)
from workflows.models import ENDED_STATUSES, BranchStatus, HistoryEntry, Run, RunStatus
from workflows.presentation import forms
from workflows.presentation.graph import render_svg

RUNS_PAGE = 50
VALUE_CHARS = 160  # a value shown inline in the timeline is cut here (the full one is a click away)


def _can_cancel(request: HttpRequest) -> bool:
    return access.has(request.user, Capability.CANCEL)


def _action_links(request: HttpRequest, run: Run, plan: Any) -> dict[str, Any]:
    """The actions the run page offers this user for this run (each page checks again)."""
    user = request.user
    migrate_url = ""
    if access.has(user, Capability.MIGRATE) and run.status not in ENDED_STATUSES:
        dialog = reverse("workflows:migrate:dialog", args=[run.scope, run.definition_id])
        migrate_url = f"{dialog}?{urlencode({'source': run.version})}"
    return {
        "signals": waiting_signals(run, plan) if access.has(user, Capability.SIGNAL) else [],
        "can_retry": access.has(user, Capability.RETRY) and run.status == RunStatus.FAILED,
        "migrate_url": migrate_url,
    }


def _run_or_404(run_id: uuid.UUID) -> Run:
    try:
        return queries.get_run(run_id=run_id)
    except InstanceNotFound:
        raise Http404("run not found") from None


def _int(value: Any) -> int | None:
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


# --- presentation helpers ------------------------------------------------------------------


class _ShownEncoder(jsonvalues.ExactEncoder):
    """Decimals as the numbers they are (1000.10), anything else not JSON as its text."""

    def default(self, o: Any) -> Any:
        return super().default(o) if isinstance(o, Decimal) else str(o)


def _compact(value: Any, limit: int = VALUE_CHARS) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, cls=_ShownEncoder)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, cls=_ShownEncoder)


def actor_text(kind: str, ident: str, reason: str = "", on_behalf_of: str = "", status: str = "") -> str:
    """Who asked, in words: "alice", "timer (system)", "billing (service) for alice", "—"."""
    if kind == "USER":
        text = ident or _("unknown user")
    elif kind == "SERVICE":
        text = _("%(name)s (service)") % {"name": ident or _("unknown")}
    elif kind == "SYSTEM":
        text = _("%(reason)s (system)") % {"reason": reason or _("engine")}
    else:
        return "—"
    if on_behalf_of:
        text = _("%(actor)s for %(user)s") % {"actor": text, "user": on_behalf_of}
    if status == "DEGRADED":
        text = _("%(actor)s (unverified)") % {"actor": text}
    return text


def _actor_of(row: Any) -> str:
    return actor_text(row.actor_kind, row.actor_id, row.actor_reason, row.on_behalf_of, row.attribution_status)


# the timeline filter's choices (queries.HISTORY_FILTERS) in words
FILTER_LABELS = {
    "decisions": gettext_lazy("Decisions"),
    "commands": gettext_lazy("Commands"),
    "signals": gettext_lazy("Signals"),
    "tasks": gettext_lazy("Tasks"),
    "timers": gettext_lazy("Timers"),
    "effects": gettext_lazy("Effects"),
    "lifecycle": gettext_lazy("Lifecycle"),
}

# the timeline's words for the history's entry types (an unknown type is shown humanised)
ENTRY_LABELS = {
    "WORKFLOW_STARTED": gettext_lazy("Workflow started"),
    "WORKFLOW_COMPLETED": gettext_lazy("Workflow completed"),
    "WORKFLOW_FAILED": gettext_lazy("Workflow failed"),
    "WORKFLOW_CANCELLED": gettext_lazy("Workflow cancelled"),
    "WORKFLOW_COMPENSATED": gettext_lazy("Workflow compensated"),
    "WORKFLOW_MIGRATED": gettext_lazy("Workflow migrated"),
    "WORKFLOW_ERROR": gettext_lazy("Workflow error"),
    "DECISION": gettext_lazy("Decision"),
    "STATE_BASELINE": gettext_lazy("State baseline"),
    "TASK_CREATED": gettext_lazy("Task created"),
    "TASK_CLAIMED": gettext_lazy("Task claimed"),
    "TASK_COMPLETED": gettext_lazy("Task completed"),
    "TASK_CANCELLED": gettext_lazy("Task cancelled"),
    "TASK_EXPIRED": gettext_lazy("Task expired"),
    "TASK_REASSIGNED": gettext_lazy("Task reassigned"),
    "TASK_REMINDER_FIRED": gettext_lazy("Task reminder fired"),
    "TASK_WITHDRAWN": gettext_lazy("Task withdrawn"),
    "SIGNAL_RECEIVED": gettext_lazy("Signal received"),
    "SIGNAL_APPLIED": gettext_lazy("Signal applied"),
    "SIGNAL_PARKED": gettext_lazy("Signal parked"),
    "SIGNAL_REJECTED": gettext_lazy("Signal rejected"),
    "TIMER_FIRED": gettext_lazy("Timer fired"),
    "TIMER_CANCELLED": gettext_lazy("Timer cancelled"),
    "TIMEOUT": gettext_lazy("Timeout"),
    "COMMAND_RECEIVED": gettext_lazy("Command received"),
    "COMMAND_COMPLETED": gettext_lazy("Command completed"),
    "COMMAND_CANCELLED": gettext_lazy("Command cancelled"),
    "COMMAND_DEAD": gettext_lazy("Command dead"),
    "COMMAND_DEFERRED": gettext_lazy("Command deferred"),
    "COMMAND_FAILED": gettext_lazy("Command failed"),
    "COMMAND_RECONCILED": gettext_lazy("Command reconciled"),
    "COMMAND_REJECTED": gettext_lazy("Command rejected"),
    "COMMAND_STALE": gettext_lazy("Command stale"),
    "COMMAND_SUPERSEDED": gettext_lazy("Command superseded"),
    "DEAD_LETTERS_REOFFERED": gettext_lazy("Dead letters reoffered"),
    "EMAIL_SENT": gettext_lazy("Email sent"),
    "EFFECT_RESOLVED": gettext_lazy("Effect resolved"),
    "SERVICE_DISPATCHED": gettext_lazy("Service dispatched"),
    "COMPENSATION_STARTED": gettext_lazy("Compensation started"),
    "COMPENSATION_DISPATCHED": gettext_lazy("Compensation dispatched"),
    "BRANCH_COMPLETED": gettext_lazy("Branch completed"),
    "BRANCH_DONE": gettext_lazy("Branch done"),
    "BRANCH_ENDED": gettext_lazy("Branch ended"),
    "BRANCH_FAILED": gettext_lazy("Branch failed"),
    "BRANCH_RETRIED": gettext_lazy("Branch retried"),
    "CALL_STARTED": gettext_lazy("Call started"),
    "CALL_RETURNED": gettext_lazy("Call returned"),
    "CALL_FAILED": gettext_lazy("Call failed"),
    "CANCELLED": gettext_lazy("Cancelled"),
    "FAILED": gettext_lazy("Failed"),
    "MIGRATION_PENDING": gettext_lazy("Migration pending"),
    "MIGRATION_REJECTED": gettext_lazy("Migration rejected"),
}


def humanise(entry_type: str) -> str:
    """A history entry type in words: its translation where the catalog has one."""
    words = entry_type.replace("_", " ").capitalize()
    label = ENTRY_LABELS.get(entry_type)
    return str(label) if label is not None else words


def _pointer_text(pointer: str) -> str:
    return pointer or _("(whole state)")


def _value_at(document: Any, pointer: str) -> tuple[bool, Any]:
    current = document
    if pointer == "":
        return True, current
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            return False, None
    return True, current


def patch_lines(patch: Any) -> list[dict[str, str]]:
    """A patch as lines a person reads: "set /paid to 12.5", "removed /note"."""
    lines = []
    for op in patch or []:
        kind = op.get("op", "")
        words = {"add": _("added"), "replace": _("set"), "remove": _("removed")}.get(kind, kind)
        lines.append(
            {
                "op": kind,
                "words": words,
                "path": _pointer_text(op.get("path", "")),
                "value": _compact(op["value"]) if "value" in op else "",
            }
        )
    return lines


def change_rows(before: Any, after: Any, patch: Any) -> list[dict[str, Any]]:
    """Field | before | after, for each path the patch touched."""
    rows = []
    for op in patch or []:
        path = op.get("path", "")
        had, old = _value_at(before, path)
        has, new = _value_at(after, path)
        rows.append(
            {
                "path": _pointer_text(path),
                "op": op.get("op", ""),
                "before": _compact(old) if had else "",
                "after": _compact(new) if has else "",
                "had": had,
                "has": has,
            }
        )
    return rows


def _assigned(mode: str, value: str) -> str:
    """The timeline's assignment line, the mode in words as on the task card ("assigned to group x")."""
    if mode == "group":
        return _("assigned to group %(group)s") % {"group": value}
    if mode == "user":
        return _("assigned to user %(name)s") % {"name": value}
    return (_("assigned to %(mode)s %(value)s") % {"mode": mode, "value": value}).strip()


def _details(entry: HistoryEntry) -> dict[str, Any]:
    """What a timeline row says about an entry besides its type, step and actor."""
    payload = entry.payload if isinstance(entry.payload, dict) else None
    info: dict[str, Any] = {"lines": [], "patch": [], "full": ""}
    if entry.type == "DECISION":
        if entry.patch is None:
            info["lines"].append(_("State change too large for a patch: the full state was logged next."))
        elif entry.patch == []:
            info["lines"].append(_("State unchanged."))
        info["patch"] = patch_lines(entry.patch)
    elif entry.type == "STATE_BASELINE" and payload is not None:
        info["lines"].append(_("Full state logged (the decision log replays from here)."))
        info["full"] = _pretty(payload.get("state"))
    elif payload is not None:
        for key in ("signal", "decision", "task", "kind", "field", "reason", "count", "recipients", "action"):
            if key in payload and payload[key] not in (None, ""):
                info["lines"].append(f"{key}: {_compact(payload[key], 80)}")
        if "assignment" in payload and isinstance(payload["assignment"], dict):
            a = payload["assignment"]
            info["lines"].append(_assigned(str(a.get("mode", "")), str(a.get("value", ""))))
        if "payload" in payload:
            info["lines"].append(f"payload: {_compact(payload['payload'])}")
            info["full"] = _pretty(payload["payload"])
    return info


def timeline_rows(entries: list[HistoryEntry], plan: Any) -> list[dict[str, Any]]:
    commands = queries.commands_by_id({e.command_id for e in entries})
    steps = plan.steps if plan is not None else {}
    rows = []
    for e in entries:
        cmd = commands.get(e.command_id) if e.command_id is not None else None
        outcome = e.outcome
        step = steps.get(e.step)
        routes = decision_routes(step, outcome) if e.type == "DECISION" and outcome else None
        if routes is not None:
            outcome = _("chose %(step)s") % {"step": outcome}
        rows.append(
            {
                "entry": e,
                "label": humanise(e.type),
                "actor": _actor_of(e),
                "command": f"{cmd.kind} #{cmd.seq}" if cmd is not None else "",
                "command_id": cmd.id if cmd is not None else None,
                "outcome": outcome,
                "version_change": (
                    f"v{e.state_version_before} → v{e.state_version_after}"
                    if e.type == "DECISION" and e.state_version_before != e.state_version_after
                    else ""
                ),
                "is_decision": e.type == "DECISION",
                "routes": routes,
                **_details(e),
            }
        )
    return rows


# --- decisions explained ------------------------------------------------------------------

_STATE_PATH = re.compile(r"\bstate((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\s*'[^']*'\s*\]|\[\s*\"[^\"]*\"\s*\])+)")
_PATH_TOKEN = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*['\"]([^'\"]*)['\"]\s*\]")


def state_reads(source: str) -> list[tuple[str, str]]:
    """The state members a CEL text reads, as (``state.a.b``, JSON pointer ``/a/b``), in order."""
    found: list[tuple[str, str]] = []
    for match in _STATE_PATH.finditer(source):
        tokens = [a or b for a, b in _PATH_TOKEN.findall(match.group(1))]
        pointer = "".join("/" + forms.escape(t) for t in tokens)
        if (match.group(0), pointer) not in found:
            found.append((match.group(0), pointer))
    return found


def _test_of(step: Any, route: Any) -> tuple[str, str]:
    """A route's test as written: ("when", CEL text) or ("condition", its name and CEL if any)."""
    if route.when is not None:
        return "when", str(route.when.source)
    named = step.conditions.get(route.condition) if route.condition else None
    source = getattr(named, "source", "") if getattr(named, "kind", "") == "cel" else ""
    return "condition", f"{route.condition}: {source}" if source else str(route.condition or "")


def decision_routes(step: Any, outcome: str, before: Any = None, *, with_values: bool = False) -> dict[str, Any] | None:
    """A decision step's routes in order with what the recorded ``outcome`` says of each.

    The engine takes the first route that holds, else the default, and logs only the step it
    chose. So with one route leading there: the routes before it did not hold, it matched,
    the ones after were not evaluated. With none: every route did not hold and the default
    was taken. With several: one of them matched; which is not recorded. ``with_values``: the
    state members each test reads, from ``before`` (the redacted state the log rebuilds).
    """
    if step is None or getattr(step, "type", "") != "decision":
        return None
    hits = [i for i, r in enumerate(step.routes) if r.to == outcome]
    if not hits and outcome != step.default:
        return None  # not a choice of route (a retry logged at the step, say)
    with_values = with_values and before is not None
    several = len(hits) > 1 or (bool(hits) and outcome == step.default)
    rows = []
    for i, route in enumerate(step.routes):
        if not hits or i < hits[0]:
            verdict, tone = _("did not hold"), "no"
        elif not several:
            verdict, tone = (_("matched"), "yes") if i == hits[0] else (_("not evaluated"), "skip")
        else:
            verdict, tone = (_("one of these matched"), "maybe") if i in hits else (_("not recorded"), "skip")
        kind, test = _test_of(step, route)
        reads = []
        if with_values:
            for text, pointer in state_reads(test):
                had, value = _value_at(before, pointer)
                reads.append({"path": text, "value": _compact(value) if had else "", "had": had})
        rows.append(
            {"n": i + 1, "kind": kind, "test": test, "to": route.to, "verdict": verdict, "tone": tone, "reads": reads}
        )
    if outcome != step.default:
        default = (_("not taken"), "skip")
    else:
        default = (_("one of these matched"), "maybe") if several else (_("taken"), "yes")
    return {
        "rows": rows,
        "default": step.default,
        "default_verdict": default[0],
        "default_tone": default[1],
        "ambiguous": several,
        "values_known": with_values,
    }


# --- list ---------------------------------------------------------------------------------


@page_requires(Capability.VIEW_RUNS)
@require_GET
def run_list(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status", "")
    definition = request.GET.get("definition", "").strip()[:255]
    q = request.GET.get("q", "").strip()[:255]
    qs = queries.runs()
    if status in RunStatus.values:
        qs = qs.filter(status=status)
    if definition:
        qs = qs.filter(definition_id=definition)
    if q:
        try:
            qs = qs.filter(id=uuid.UUID(q))
        except ValueError:
            qs = qs.filter(business_key=q)
    before = request.GET.get("before", "")
    if before:
        try:
            anchor = queries.get_run(run_id=before)
        except InstanceNotFound:
            anchor = None
        if anchor is not None:
            # keyset on (created_at, id): the next page starts below the last row shown
            from django.db.models import Q

            qs = qs.filter(Q(created_at__lt=anchor.created_at) | Q(created_at=anchor.created_at, id__lt=anchor.id))
    rows = list(qs.order_by("-created_at", "-id")[: RUNS_PAGE + 1])
    more = len(rows) > RUNS_PAGE
    rows = rows[:RUNS_PAGE]
    params = request.GET.copy()
    params.pop("before", None)
    if rows:
        params["before"] = str(rows[-1].id)
    context = {
        "runs": rows,
        "statuses": RunStatus.values,
        "status": status,
        "definition": definition,
        "q": q,
        "more_url": f"?{params.urlencode()}" if more else "",
        "filtered": bool(status or definition or q or before),
    }
    return render(request, "workflows/runs/list.html", context)


# --- one run ------------------------------------------------------------------------------


def _history_params(request: HttpRequest) -> dict[str, Any]:
    only = request.GET.get("only", "")
    return {
        "only": only if only in queries.HISTORY_FILTERS else "",
        "newest_first": request.GET.get("order", "") == "newest",
        "after": _int(request.GET.get("after")),
    }


def _history_context(run: Run, plan: Any, params: dict[str, Any]) -> dict[str, Any]:
    after = params["after"]
    newest = params["newest_first"]
    entries, more = queries.history_page(
        run_id=run.id,
        only=params["only"] or None,
        after=None if newest else after,
        before=after if newest else None,
        newest_first=newest,
    )
    next_cursor = entries[-1].seq if entries and more else None
    query = {"only": params["only"], "order": "newest" if newest else "oldest"}
    query_string = "&".join(f"{k}={v}" for k, v in query.items() if v)
    return {
        "run": run,
        "rows": timeline_rows(entries, plan),
        "next_cursor": next_cursor,
        "history_query": query_string,
        "only": params["only"],
        "newest_first": newest,
        "filters": [(f, FILTER_LABELS.get(f, f.capitalize())) for f in queries.HISTORY_FILTERS],
        "only_label": FILTER_LABELS.get(params["only"], params["only"]),
    }


@page_requires(Capability.VIEW_RUNS)
@require_GET
def run_detail(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    run = _run_or_404(run_id)
    plan = queries.plan_of(run)
    open_parks = [p for p in queries.run_parks(run_id=run.id) if p.left_at is None]
    positions = [p.node for p in open_parks]
    if not positions and run.status in ("WAITING", "RUNNING", "PENDING", "FAILED") and run.current_step:
        positions = [run.current_step]
    visited, moves = queries.path_taken(run_id=run.id)
    graph = ""
    if plan is not None:
        graph = render_svg(
            plan,
            highlight=positions,
            visited=visited,
            taken=moves,
            title=_("Graph of %(workflow)s version %(version)s")
            % {"workflow": run.definition_id, "version": run.version},
        )
    start = queries.started_by(run_id=run.id)
    context = {
        "run": run,
        "plan": plan,
        "graph": mark_safe(graph),  # noqa: S308  (render_svg escapes every text it writes)
        "positions": positions,
        "path": visited,
        "started_by": actor_text(
            start.actor_kind, start.actor_id, start.actor_reason, start.on_behalf_of, start.attribution_status
        )
        if start is not None
        else "—",
        "started_at": start.recorded_at if start is not None else run.created_at,
        "state_text": _pretty(queries.viewable_state(run)),
        "commands": queries.run_commands(run_id=run.id),
        "tasks": queries.open_tasks(run_id=run.id),
        "timers": queries.scheduled_timers(run_id=run.id),
        "parks": queries.run_parks(run_id=run.id),
        "called_runs": queries.called_runs(run_id=run.id, live_only=False),
        "can_cancel": _can_cancel(request) and run.status == "WAITING",
        **_action_links(request, run, plan),
        **_history_context(run, plan, _history_params(request)),
    }
    return render(request, "workflows/runs/detail.html", context)


@page_requires(Capability.VIEW_RUNS)
@require_GET
def run_history(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """The timeline rows (htmx fragment); without htmx, the run page at that position."""
    run = _run_or_404(run_id)
    if not getattr(request, "htmx", False):
        url = reverse("workflows:runs:detail", args=[run.id])
        return HttpResponseRedirect(f"{url}?{request.GET.urlencode()}#timeline")
    context = _history_context(run, queries.plan_of(run), _history_params(request))
    template = "workflows/runs/_history_rows.html" if request.GET.get("after") else "workflows/runs/_history.html"
    return render(request, template, context)


@page_requires(Capability.VIEW_RUNS)
@require_GET
def decision_change(request: HttpRequest, run_id: uuid.UUID, seq: int) -> HttpResponse:
    """The state before and after one DECISION, with its patch (fragment or page)."""
    run = _run_or_404(run_id)
    try:
        change = queries.decision_change(run_id=run.id, seq=seq)
    except HistoryEntry.DoesNotExist:
        raise Http404("no such decision") from None
    context = {
        "run": run,
        "entry": change["entry"],
        "actor": _actor_of(change["entry"]),
        "complete": change["complete"],
        "before_text": _pretty(change["before"]) if change["complete"] else "",
        "after_text": _pretty(change["after"]) if change["complete"] else "",
        "rows": change_rows(change["before"], change["after"], change["patch"]) if change["complete"] else [],
        "patch": patch_lines(change["patch"]),
        "patch_missing": change["patch"] is None,
        "branch": change["entry"].branch_id,
        "routes": _routes_of(run, change),
    }
    template = "workflows/runs/_change.html" if getattr(request, "htmx", False) else "workflows/runs/change.html"
    return render(request, template, context)


def _routes_of(run: Run, change: dict[str, Any]) -> dict[str, Any] | None:
    entry = change["entry"]
    plan = queries.plan_of(run)
    step = plan.steps.get(entry.step) if plan is not None else None
    before = change["before"] if change["complete"] else None
    return decision_routes(step, entry.outcome, before, with_values=True) if entry.outcome else None


# --- cancel run ---------------------------------------------------------------------------


@page_requires(Capability.CANCEL)
@require_http_methods(["GET", "POST"])
def run_cancel(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    run = _run_or_404(run_id)
    source = request.POST if request.method == "POST" else request.GET
    seen_version = _int(source.get("seen_state_version"))
    seen_seq = _int(source.get("seen_history_seq"))
    if request.method == "GET":
        if seen_version is None or seen_seq is None:
            # opened directly: confirm against what this page shows now
            seen_version, seen_seq = run.state_version, run.history_seq
        return _confirmation(request, run, seen_version, seen_seq)
    if seen_version is None or seen_seq is None:
        return HttpResponseBadRequest(_("The confirmation form is incomplete; open it again from the run's page."))
    reason = " ".join(str(request.POST.get("reason", "")).split())[:255]
    try:
        operations.cancel_confirmed(
            run_id=run.id,
            seen_state_version=seen_version,
            seen_history_seq=seen_seq,
            reason=reason,
            actor=request.user,
        )
    except AlreadyMovedOn:
        run.refresh_from_db()
        return _confirmation(request, run, seen_version, seen_seq, moved_on=True, status=409)
    except (LockTimeout, PersistenceError):
        return _confirmation(
            request,
            run,
            seen_version,
            seen_seq,
            status=503,
            notice=_("The run is busy right now; nothing was cancelled. Try again in a moment."),
        )
    messages.success(request, _("The run was cancelled, with everything it had open."))
    return HttpResponseRedirect(reverse("workflows:runs:detail", args=[run.id]))


def _confirmation(
    request: HttpRequest,
    run: Run,
    seen_version: int,
    seen_seq: int,
    *,
    moved_on: bool = False,
    notice: str = "",
    status: int = 200,
) -> HttpResponse:
    waiting = run.status == "WAITING"
    context = {
        "run": run,
        "seen_state_version": seen_version,
        "seen_history_seq": seen_seq,
        "moved_on": moved_on,
        "not_waiting": not waiting and not moved_on,
        "notice": notice,
        "preview": queries.cancel_preview(run_id=run.id) if waiting and not moved_on else None,
        "reason": str(request.POST.get("reason", ""))[:255] if request.method == "POST" else "",
    }
    return render(request, "workflows/runs/cancel.html", context, status=status)


# --- send a signal ------------------------------------------------------------------------


def waiting_signals(run: Run, plan: Any) -> list[dict[str, Any]]:
    """The signals the run waits for now: its own wait's and its waiting branches', each with
    the payload schema of the wait (its step's, else the contract's)."""
    if run.status != RunStatus.WAITING:
        return []
    branches = run.branches.filter(status=BranchStatus.WAITING).order_by("branch_id")
    waits = [("", run.wait)] + [(b.branch_id, b.wait) for b in branches]
    found = []
    for branch, wait in waits:
        if not isinstance(wait, dict) or wait.get("kind") != "signal":
            continue
        step = plan.steps.get(wait.get("step")) if plan is not None else None
        for name in wait.get("signals") or []:
            schema = getattr(step, "payload_schema", None) if getattr(step, "signal", None) == name else None
            if schema is None and plan is not None:
                schema = plan.contract.signals.get(name)
            found.append(
                {
                    "key": f"{branch}:{name}" if branch else name,
                    "name": name,
                    "branch": branch,
                    "step": wait.get("step") or "",
                    "schema": schema,
                }
            )
    return found


def _signal_form(chosen: dict[str, Any]) -> forms.PayloadForm:
    form = forms.build(chosen["name"], chosen["schema"])
    for f in form.all_fields():
        f.form_id = "signal"
    return form


@page_requires(Capability.SIGNAL)
@require_http_methods(["GET", "POST"])
def run_signal(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """Send one of the signals the run waits for: form (GET), check and confirm (POST), record
    (POST with ``confirmed``)."""
    run = _run_or_404(run_id)
    signals = waiting_signals(run, queries.plan_of(run))
    source = request.POST if request.method == "POST" else request.GET
    key = str(source.get("signal", ""))
    chosen = next((s for s in signals if s["key"] == key), None)
    if request.method == "GET" or chosen is None:
        if request.method == "POST":
            return _signal_page(request, run, signals, None, status=409, notice=str(NOT_WAITING_FOR_SIGNAL))
        return _signal_page(request, run, signals, chosen or (signals[0] if signals else None))
    form = _signal_form(chosen)
    if request.POST.get("confirmed"):
        try:
            payload = jsonvalues.loads_input(str(request.POST.get("payload_json", "")))
        except ValueError:
            return HttpResponseBadRequest(_("The confirmation form is incomplete; open it again from the run's page."))
    else:
        payload = forms.parse(form, request.POST)
    if not form.has_errors and chosen["schema"]:
        forms.attach(form, chosen["schema"], schemas.validate(chosen["schema"], payload if payload is not None else {}))
    if form.has_errors:
        return _signal_page(request, run, signals, chosen, form=form, status=422)
    idempotency = str(request.POST.get("idempotency_key", ""))[:255] or uuid.uuid4().hex
    if not request.POST.get("confirmed"):
        context = {
            "run": run,
            "chosen": chosen,
            "payload_json": jsonvalues.canonical(payload),
            "payload_text": _pretty(payload),
            "idempotency_key": idempotency,
        }
        return render(request, "workflows/runs/signal_confirm.html", context)
    try:
        operations.signal(
            run_id=run.id,
            name=chosen["name"],
            payload=payload,
            branch=chosen["branch"] or None,
            idempotency_key=idempotency,
            actor=request.user,
        )
    except InvalidPayload as exc:
        forms.attach(form, chosen["schema"], exc.violations)
        if not form.has_errors:
            form.errors.append(_("This signal could not be sent with these details."))
        return _signal_page(request, run, signals, chosen, form=form, status=422)
    except (SignalRejected, SignalLimit, IdempotencyConflict) as exc:
        return _signal_page(request, run, signals, chosen, status=exc.status, notice=str(REFUSED_SIGNAL))
    except (LockTimeout, PersistenceError):
        return _signal_page(request, run, signals, chosen, status=503, notice=str(BUSY_SENDING))
    messages.success(
        request, _("Signal %(name)s sent; the run moves on when the executor applies it.") % {"name": chosen["name"]}
    )
    return HttpResponseRedirect(reverse("workflows:runs:detail", args=[run.id]))


NOT_WAITING_FOR_SIGNAL = gettext_lazy("The run is not waiting for this signal any more; nothing was sent.")
REFUSED_SIGNAL = gettext_lazy("The run refused this signal (it ended, or has too many open signals); nothing was sent.")
BUSY_SENDING = gettext_lazy("The run is busy right now; nothing was sent. Try again in a moment.")
BUSY_RETRYING = gettext_lazy("The run is busy right now; nothing was retried. Try again in a moment.")


def _signal_page(
    request: HttpRequest,
    run: Run,
    signals: list[dict[str, Any]],
    chosen: dict[str, Any] | None,
    *,
    form: forms.PayloadForm | None = None,
    notice: str = "",
    status: int = 200,
) -> HttpResponse:
    context = {
        "run": run,
        "signals": signals,
        "chosen": chosen,
        "form": form if form is not None else (_signal_form(chosen) if chosen is not None else None),
        "failed": form is not None,
        "notice": notice,
    }
    return render(request, "workflows/runs/signal.html", context, status=status)


# --- retry --------------------------------------------------------------------------------


@page_requires(Capability.RETRY)
@require_http_methods(["GET", "POST"])
def run_retry(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """Retry a FAILED run: confirmation (GET), record (POST). Any other status is refused."""
    run = _run_or_404(run_id)
    if run.status != RunStatus.FAILED:
        status = 409 if request.method == "POST" else 200
        return render(request, "workflows/runs/retry.html", {"run": run, "not_failed": True}, status=status)
    if request.method == "GET":
        return render(request, "workflows/runs/retry.html", {"run": run})
    try:
        operations.retry(run_id=run.id, actor=request.user)
    except SignalRejected:
        run.refresh_from_db()
        return render(request, "workflows/runs/retry.html", {"run": run, "not_failed": True}, status=409)
    except (LockTimeout, PersistenceError):
        notice = str(BUSY_RETRYING)
        return render(request, "workflows/runs/retry.html", {"run": run, "notice": notice}, status=503)
    messages.success(request, _("Retry recorded; the run resumes where it failed when the executor runs it."))
    return HttpResponseRedirect(reverse("workflows:runs:detail", args=[run.id]))
