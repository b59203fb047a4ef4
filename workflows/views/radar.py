"""The stuck-run radar (``/ops/radar/``, operate capability): what needs an operator, and the fix next to it.

Sections, each row linking to the run viewer and to the action that fixes it:

- **Runs parked too long** — an open wait longer than its position's threshold: by default
  the 95th percentile of that position's waits closed in the last 30 days, never below a
  floor of one hour. ``WORKFLOWS["RADAR"]`` changes it::

      WORKFLOWS = {"RADAR": {"PERCENTILE": 0.95, "WINDOW_DAYS": 30, "FLOOR_SECONDS": 3600, "ROWS": 100,
                   "THRESHOLDS": {"purchase-approval:manager": 3 * 86400, "onboarding": 7 * 86400}}}

  (``THRESHOLDS`` keys are ``<definition id>:<step>`` or a whole ``<definition id>``, seconds.
  ``ROWS``: each list shows its most urgent rows, and counts them all.)
  Fix: migrate the position, or cancel.
- **Stuck commands** — due for longer than ``WORKFLOWS["EXECUTOR"]["STUCK_AFTER_SECONDS"]`` and
  still PENDING, DEFERRED or CLAIMED (workers down, a node without the revision). Fix: cancel.
- **Dead letters** — DEAD commands. Fix: retry (``operations.retry``).
- **OUTCOME_UNKNOWN commands** — fix: reconcile (replay or resolve, with a reason;
  ``operations.reconcile_command``); **OUTCOME_UNKNOWN captures** — fix: the capture admin.
- **Overdue tasks** — OPEN past their due date. Fix: reassign, or cancel.

Bulk actions (retry selected, cancel selected) go through a confirmation page that lists the
runs they touch and asks for their count to be typed back; a cancel keeps what the operator
saw (state version, history position) and leaves alone a run that moved on meanwhile.

Permissions (``workflows.access``, the same capabilities the API and the run viewer ask):
viewing needs operate; retry needs retry runs; cancel needs cancel runs; reconcile needs
operate (the operation checks it too); migrate is the Migrate dialog's (migrate runs).
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from workflows import access, conf, operations, queries
from workflows.access import Capability, page_requires
from workflows.exceptions import WorkflowError
from workflows.views.dashboard import duration, run_url, url_or_none

BULK_LIMIT = 500  # one confirmation touches at most this many runs
ACTIONS = {
    "retry": (gettext_lazy("Retry"), Capability.RETRY),
    "cancel": (gettext_lazy("Cancel"), Capability.CANCEL),
}


def radar_settings() -> dict[str, Any]:
    """``WORKFLOWS["RADAR"]`` (validated with the rest of ``WORKFLOWS``)."""
    return dict(conf.get().RADAR.values)


def _can(request: HttpRequest, capability: Capability) -> bool:
    return access.has(request.user, capability)


# --- the radar ------------------------------------------------------------------------------


@never_cache
@page_requires(Capability.OPERATE)
@require_GET
def radar(request: HttpRequest) -> HttpResponse:
    options = radar_settings()
    stuck_after = conf.get().EXECUTOR.STUCK_AFTER_SECONDS
    limit = max(1, int(options["ROWS"]))
    parks = queries.stuck_parks(
        percentile=float(options["PERCENTILE"]),
        window_days=int(options["WINDOW_DAYS"]),
        floor_seconds=float(options["FLOOR_SECONDS"]),
        overrides=dict(options["THRESHOLDS"]),
        sample=int(options["SAMPLE"]),
        limit=limit,
    )
    configured = {str(k) for k in options["THRESHOLDS"]}
    for row in parks:
        row["waited"] = duration(row["waited_seconds"])
        row["threshold"] = duration(row["threshold_seconds"])
        row["basis"] = _threshold_basis(row, options, configured)
        row["migrate_url"] = _migrate_url(row)
    commands = queries.stuck_commands(stuck_after_seconds=stuck_after, limit=limit)
    for row in commands:
        row["stuck"] = duration(row["stuck_seconds"])
    tasks = queries.overdue_tasks(limit=limit)
    # the task admin's overdue list, where its Reassign action works on the ticked tasks
    overdue_list = url_or_none("admin:workflows_task_changelist")
    for row in tasks:
        row["overdue"] = duration(row["overdue_seconds"])
        row["task_admin_url"] = f"{overdue_list}?overdue=yes" if overdue_list else None
    captures = queries.outcome_unknown_captures(limit=limit)
    for row in captures:
        row["admin_url"] = url_or_none("admin:capture_capture_change", row["capture_id"])
    sections: list[dict[str, Any]] = [
        {
            "id": "parked",
            "title": _("Runs parked too long"),
            "rows": parks,
            "help": _(
                "Waiting longer than their position's threshold: the %(percentile)s percentile of "
                "that step's waits closed in the last %(days)s days, at least %(floor)s."
            )
            % {
                "percentile": _pct(options["PERCENTILE"]),
                "days": int(options["WINDOW_DAYS"]),
                "floor": duration(options["FLOOR_SECONDS"]),
            },
        },
        {
            "id": "stuck",
            "title": _("Stuck commands"),
            "rows": commands,
            "help": _("Due for more than %(duration)s and still not settled.") % {"duration": duration(stuck_after)},
        },
        {
            "id": "dead",
            "title": _("Dead letters"),
            "rows": queries.commands_in_status(status="DEAD", limit=limit),
            "help": _("Commands that failed on every attempt. Retry offers them again."),
        },
        {
            "id": "unknown",
            "title": _("Outcome unknown: commands"),
            "rows": queries.commands_in_status(status="OUTCOME_UNKNOWN", limit=limit),
            "help": _(
                "Interrupted after an email, agent or script effect started: it may have happened. "
                "Check, then reconcile (replay or resolve)."
            ),
        },
        {
            "id": "captures",
            "title": _("Outcome unknown: captures"),
            "rows": captures,
            "help": _("Record captures interrupted after their dispatch started. Reconcile them in the capture admin."),
        },
        {
            "id": "tasks",
            "title": _("Overdue tasks"),
            "rows": tasks,
            "help": _("Open approvals past their due date. Reassign them, or cancel the run."),
        },
    ]
    for section in sections:
        for row in section["rows"]:
            if "run_id" in row:
                row["run_url"] = run_url(row["run_id"])
        # each list shows its most urgent rows (queries.RADAR_LIMIT); the count is of them all
        section["total"] = int(section["rows"][0]["total_rows"]) if section["rows"] else 0
        section["more"] = section["total"] - len(section["rows"])
    context = {
        "sections": sections,
        "total": sum(s["total"] for s in sections),
        "can_retry": _can(request, Capability.RETRY),
        "can_cancel": _can(request, Capability.CANCEL),
        "can_reconcile": _can(request, Capability.OPERATE),
        "can_migrate": _can(request, Capability.MIGRATE),
        "can_bulk": _can(request, Capability.RETRY) or _can(request, Capability.CANCEL),
        "selectable": ("parked", "stuck", "dead", "tasks"),
    }
    return render(request, "workflows/ops/radar.html", context)


def _pct(value: Any) -> str:
    number = float(value) * 100
    return _("%(number)sth") % {"number": f"{number:g}"}


def _threshold_basis(row: dict[str, Any], options: dict[str, Any], configured: set[str]) -> str:
    if f"{row['definition_id']}:{row['node']}" in configured or row["definition_id"] in configured:
        return _("configured")
    samples = int(row["samples"] or 0)
    if samples and float(row["typical"] or 0) >= float(options["FLOOR_SECONDS"]):
        return ngettext(
            "%(percentile)s percentile of %(count)s closed wait",
            "%(percentile)s percentile of %(count)s closed waits",
            samples,
        ) % {"percentile": _pct(options["PERCENTILE"]), "count": samples}
    return _("floor")


def _migrate_url(row: dict[str, Any]) -> str | None:
    """The Migrate dialog for the row's revision, when the migration pages are installed."""
    url = url_or_none("workflows:migrate:dialog", row["scope"], row["definition_id"])
    return f"{url}?{urlencode({'source': row['version']})}" if url else None


# --- retry one run ---------------------------------------------------------------------------


@page_requires(Capability.RETRY)
@require_POST
def retry(request: HttpRequest) -> HttpResponse:
    """Retry one run (a dead letter's or a failed run's): records a RETRY."""
    run_id = _uuid(request.POST.get("run_id"))
    if run_id is None:
        raise Http404("run not found")
    try:
        operations.retry(run_id=run_id, actor=request.user)
    except WorkflowError as error:
        messages.error(
            request,
            _("Run %(run)s was not retried: %(refusal)s.") % {"run": str(run_id)[:8], "refusal": _refusal(error)},
        )
    else:
        messages.success(
            request, _("Retry recorded for run %(run)s; the executor picks it up next.") % {"run": str(run_id)[:8]}
        )
    return HttpResponseRedirect(reverse("switchyard_ops:radar") + "#dead")


# --- bulk actions ---------------------------------------------------------------------------


@never_cache
@login_required
@require_POST
def bulk(request: HttpRequest) -> HttpResponse:
    """Confirmation (first POST, from the radar's selection) and apply (POST with the count
    typed back). The confirmation lists every run it touches; nothing is done until the typed
    count matches."""
    action = request.POST.get("action", "")
    if action not in ACTIONS:
        messages.error(request, _("Choose Retry selected or Cancel selected."))
        return HttpResponseRedirect(reverse("switchyard_ops:radar"))
    label, capability = ACTIONS[action]
    if not _can(request, capability):
        return access.forbidden(request, capability)
    runs = queries.runs_for_action(run_ids=request.POST.getlist("run")[:BULK_LIMIT])
    if not runs:
        messages.error(request, _("Select at least one run first."))
        return HttpResponseRedirect(reverse("switchyard_ops:radar"))
    error = ""
    reason = " ".join(request.POST.get("reason", "").split())[:255]
    if "apply" in request.POST:
        typed = request.POST.get("confirm_count", "").strip()
        if typed != str(len(runs)):
            error = _("Type %(count)s — the number of runs this touches — to confirm.") % {"count": len(runs)}
        elif action == "cancel" and not reason:
            error = _("Give a reason for the cancellation (it is kept in each run's history).")
        else:
            _apply(request, action, runs, reason)
            return HttpResponseRedirect(reverse("switchyard_ops:radar"))
    context = {
        "action": action,
        "label": label,
        "runs": [{"run": r, "url": run_url(r.id)} for r in runs],
        "count": len(runs),
        "reason": reason,
        "error": error,
    }
    return render(request, "workflows/ops/bulk_confirm.html", context, status=400 if error else 200)


def _apply(request: HttpRequest, action: str, runs: list[Any], reason: str) -> None:
    done: list[str] = []
    refused: list[str] = []
    for run in runs:
        short = str(run.id)[:8]
        try:
            if action == "retry":
                operations.retry(run_id=run.id, actor=request.user)
            else:
                seen = request.POST.get(f"seen-{run.id}", "")
                state_version, _sep, history_seq = seen.partition(":")
                operations.cancel_confirmed(
                    run_id=run.id,
                    seen_state_version=int(state_version) if state_version.isdigit() else -1,
                    seen_history_seq=int(history_seq) if history_seq.isdigit() else -1,
                    reason=reason,
                    actor=request.user,
                )
        except WorkflowError as error:
            refused.append(f"{short} ({_refusal(error)})")
        else:
            done.append(short)
    if done and action == "retry":
        messages.success(
            request,
            ngettext("Retry recorded for %(count)s run.", "Retry recorded for %(count)s runs.", len(done))
            % {"count": len(done)},
        )
    elif done:
        messages.success(
            request, ngettext("Cancelled %(count)s run.", "Cancelled %(count)s runs.", len(done)) % {"count": len(done)}
        )
    if refused:
        messages.error(
            request, _("%(count)s left alone: %(runs)s.") % {"count": len(refused), "runs": "; ".join(refused)}
        )


def _refusal(error: WorkflowError) -> str:
    """A refusal as the page shows it: its code and fixed title, never the message (which may
    name values)."""
    title = getattr(error, "title", "") or ""
    return f"{error.code}" + (f" — {title.lower()}" if title else "")


def _uuid(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


# --- reconcile an OUTCOME_UNKNOWN command ---------------------------------------------------


@never_cache
@page_requires(Capability.OPERATE)
@require_http_methods(["GET", "POST"])
def reconcile(request: HttpRequest, command_id: int) -> HttpResponse:
    """Replay or resolve one OUTCOME_UNKNOWN command, with a reason (administrators)."""
    item = queries.reconcile_candidate(command_id=command_id)
    if item is None:
        raise Http404("command not found")
    errors: dict[str, str] = {}
    action = request.POST.get("action", "")
    reason = " ".join(request.POST.get("reason", "").split())[:1000]
    if request.method == "POST":
        if action not in ("replay", "resolve"):
            errors["action"] = _("Choose replay or resolve.")
        if not reason:
            errors["reason"] = _("A reason is required: what you checked in the outside world.")
        if not errors:
            try:
                operations.reconcile_command(command_id=command_id, action=action, reason=reason, actor=request.user)
            except WorkflowError as error:
                errors["form"] = _("Not reconciled: %(refusal)s.") % {"refusal": _refusal(error)}
            else:
                messages.success(
                    request,
                    _("Command %(id)s reconciled (%(action)s); the executor picks it up next.")
                    % {"id": command_id, "action": action},
                )
                return HttpResponseRedirect(reverse("switchyard_ops:radar") + "#unknown")
    context = {
        "item": item,
        "run_url": run_url(item["run_id"]),
        "action": action,
        "reason": reason,
        "errors": errors,
    }
    return render(request, "workflows/ops/reconcile.html", context, status=400 if errors else 200)
