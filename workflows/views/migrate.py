"""The Migrate dialog: move a backlog of parked runs between two revisions, a position at a time.

``/migrate/<scope>/<definition_id>/`` picks one source and one target revision (any revision
the workflow ever had) and shows one row per position of the source — a node and a kind of
wait with the number of runs parked there — never one row per run, so the dialog is the same
size for twenty runs or two hundred thousand. A row's count opens a picker of the runs behind
it (paged, searchable by business key); nothing is selected until the user selects. Per row:
Move (to a node of the target; the same id is preselected where it exists), Cancel or End.

Preview freezes the selected runs in a migration record and says what Apply will do, per row
(approvals withdrawn and reopened for whom, timers restarted with their new due times, runs
cancelled or ended); a batch of more than 100 runs needs its size typed back. Apply records
one MIGRATION command per run in bounded batches (``MIGRATE.APPLY_BATCH``): the answer shows
what was moved, what is left (a progress bar) and Apply continues. A run that an approver or a
timer moved on meanwhile is listed, not forced. Every applied migration stays readable as a
record (who, when, why, source → target, rows, each run's outcome).

The whole dialog is one form whose state lives in the page (htmx swaps fragments in place;
each fragment is also a plain page without JavaScript). Reads go through ``workflows.queries``,
writes through ``workflows.operations``. Only users with the migrate runs capability
(``workflows.access``) see or use it.

htmx swaps only 2xx answers, so a refused htmx request is answered in problem+json (title,
detail, violations) that ``workflows/static/workflows/js/problems.js`` shows in the alert region next to the control
that sent it; without htmx the same refusal is the HTML fragment, with the same status. The
answer to Apply (and the poll that sees the executor finish) also carries the dialog re-read
from the database, swapped out of band, so counts, graph badges and the selection never show
runs that moved.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.utils.translation import gettext, gettext_lazy, ngettext
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect, reswap, retarget

from workflows import access, conf, definitions, operations, queries
from workflows.access import Capability, page_requires
from workflows.exceptions import (
    InvalidPayload,
    LockTimeout,
    MigrationIllegalState,
    PersistenceError,
    RunsInOpenMigration,
)

PICKER_PAGE = 20
MAX_ROWS = 500  # positions are bounded by the graph; this only bounds a forged form
MAX_PICKED = 5000  # runs picked one by one; "all at this position" has no such bound
LARGE_BATCH = 100
OUTCOMES_PAGE = 50
INCOMPLETE = gettext_lazy("The dialog is incomplete; open it again.")
PROBLEM_CONTENT_TYPE = "application/problem+json"

KIND_LABELS = {
    "TASK": gettext_lazy("approval"),
    "TIMER": gettext_lazy("timer"),
    "SIGNAL": gettext_lazy("signal wait"),
    "CALL": gettext_lazy("called run"),
    "JOIN": gettext_lazy("join of a fork"),
    "BRANCH": gettext_lazy("branch"),
}
STATUS_LABELS = {
    "SELECTED": gettext_lazy("not applied yet"),
    "RECORDED": gettext_lazy("waiting for the executor"),
    "MOVED": gettext_lazy("moved"),
    "CANCELLED": gettext_lazy("cancelled"),
    "ENDED": gettext_lazy("ended"),
    "MOVED_ON": gettext_lazy("already moved on"),
    "REJECTED": gettext_lazy("rejected"),
    "NOT_APPLIED": gettext_lazy("not applied (closed)"),
}
ACTION_LABELS = {"move": gettext_lazy("Move"), "cancel": gettext_lazy("Cancel"), "end": gettext_lazy("End")}


def can_migrate(user: Any) -> bool:
    return access.has(user, Capability.MIGRATE)


def _htmx(request: HttpRequest) -> bool:
    return bool(getattr(request, "htmx", False))


def _problem(
    status: int,
    code: str,
    title: str,
    detail: str,
    violations: list[dict[str, str]] | None = None,
    links: list[dict[str, str]] | None = None,
) -> JsonResponse:
    """A refusal for htmx: the body the API's problems have (value-free texts). ``links``
    (``{href, title}``, paths of this site) are added only when there are any: pages to go to
    about the refusal, which ``problems.js`` shows as links after the detail."""
    body: dict[str, Any] = {
        "type": f"urn:switchyard:problem:{code.lower().replace('_', '-')}",
        "title": title,
        "status": status,
        "code": code,
        "detail": detail,
        "violations": violations or [],
    }
    if links:
        body["links"] = links
    return JsonResponse(body, status=status, content_type=PROBLEM_CONTENT_TYPE)


def migrate_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """``page_requires(MIGRATE)``, told to htmx in its own terms: a signed-out visitor's request
    sends the whole page to the sign-in form (never the form swapped into the dialog), a user
    without the capability gets a 403 problem."""
    guarded = page_requires(Capability.MIGRATE)(view)

    @wraps(guarded)
    def answer(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not _htmx(request):
            return guarded(request, *args, **kwargs)
        if not getattr(request.user, "is_authenticated", False):
            page = getattr(getattr(request, "htmx", None), "current_url_abs_path", None) or request.get_full_path()
            return HttpResponseClientRedirect(redirect_to_login(page)["Location"])
        if not access.has(request.user, Capability.MIGRATE):
            return _problem(
                403,
                "FORBIDDEN",
                _("Not allowed"),
                _("Nothing was done: %(refusal)s.") % {"refusal": access.refusal(Capability.MIGRATE)},
            )
        return guarded(request, *args, **kwargs)

    return answer


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


# --- revisions ---------------------------------------------------------------------------------


def _revisions(scope: str, definition_id: str, positions: dict[int, list[Any]] | None = None) -> list[dict[str, Any]]:
    """Every revision the workflow ever had in this scope (published or later), with its parked
    runs and whether it is the current one."""
    try:
        records = definitions.list(scope=scope, definition_id=definition_id)
    except InvalidPayload:
        return []
    if positions is None:
        positions = queries.migration_positions_by_revision(scope=scope, definition_id=definition_id)
    parked = {(scope, v): sum(p.runs for p in rows) for v, rows in positions.items()}
    current = next(
        (
            a.version
            for a in definitions.activations(scope=scope)
            if a.definition_id == definition_id and a.target_scope == scope
        ),
        None,
    )
    return [
        {
            "version": r.version,
            "status": r.status,
            "available": r.status == "AVAILABLE" and not r.failure,
            "parked": parked.get((scope, r.version), 0),
            "current": r.version == current,
        }
        for r in records
        if r.status not in ("CANDIDATE", "PUBLISHING")
    ]


def _default_pair(revisions: list[dict[str, Any]]) -> tuple[int, int]:
    """The newest available revision as the target; as the source, the oldest other revision
    with parked runs (or the target itself when only it has any)."""
    available = [r["version"] for r in revisions if r["available"]]
    target = max(available) if available else max(r["version"] for r in revisions)
    parked = [r["version"] for r in revisions if r["parked"]]
    source = next((v for v in parked if v != target), parked[0] if parked else target)
    return source, target


# --- the dialog --------------------------------------------------------------------------------


@migrate_required
@require_GET
def dialog(request: HttpRequest, scope: str, definition_id: str) -> HttpResponse:
    by_revision = queries.migration_positions_by_revision(scope=scope, definition_id=definition_id)
    revisions = _revisions(scope, definition_id, by_revision)
    if not revisions:
        raise Http404("no such workflow")
    known = {r["version"] for r in revisions}
    default_source, default_target = _default_pair(revisions)
    asked_source, asked_target = _int(request.GET.get("source")), _int(request.GET.get("target"))
    source = asked_source if asked_source in known and asked_source is not None else default_source
    target = asked_target if asked_target in known and asked_target is not None else default_target
    context = _dialog_context(scope, definition_id, source, target, revisions, by_revision)
    if _htmx(request) and request.headers.get("HX-Target") == "pair":
        return render(request, "workflows/migrate/_pair.html", {**context, "clear_result": True})
    return render(request, "workflows/migrate/dialog.html", {**context, **_open_previews(scope, definition_id)})


def _open_previews(scope: str, definition_id: str, *, notice: str = "") -> dict[str, Any]:
    """The previews of this workflow left neither applied nor discarded: their runs stay frozen
    (a new preview of them is refused), so the dialog offers to resume or discard each."""
    return {
        "scope": scope,
        "definition_id": definition_id,
        "open_previews": queries.migration_open_previews(scope=scope, definition_id=definition_id),
        "open_previews_notice": notice,
    }


def _dialog_context(
    scope: str,
    definition_id: str,
    source: int,
    target: int,
    revisions: list[dict[str, Any]] | None = None,
    by_revision: dict[int, list[Any]] | None = None,
) -> dict[str, Any]:
    """What the dialog draws for one pair of revisions, read from the database now."""
    if by_revision is None:
        by_revision = queries.migration_positions_by_revision(scope=scope, definition_id=definition_id)
    if revisions is None:
        revisions = _revisions(scope, definition_id, by_revision)
    return {
        "scope": scope,
        "definition_id": definition_id,
        "revisions": revisions,
        "total_parked": sum(r["parked"] for r in revisions),
        "urls": _urls(scope, definition_id),
        **_pair(scope, definition_id, source, target, revisions, by_revision.get(source, [])),
    }


def _pair(
    scope: str, definition_id: str, source: int, target: int, revisions: list[dict[str, Any]], positions: list[Any]
) -> dict[str, Any]:
    from workflows.presentation.graph import render_svg

    source_plan = queries.migration_plan(scope=scope, definition_id=definition_id, version=source)
    target_plan = queries.migration_plan(scope=scope, definition_id=definition_id, version=target)
    nodes = [(sid, step.type) for sid, step in target_plan.steps.items()] if target_plan is not None else []
    node_ids = {n for n, _type in nodes}
    rows = []
    for i, pos in enumerate(positions):
        movable = pos.kind != "JOIN"
        choices = (
            [(f"move:{n}", _("Move to %(node)s (%(type)s)") % {"node": n, "type": t}) for n, t in nodes]
            if movable
            else []
        )
        choices += [("cancel", _("Cancel the runs")), ("end", _("End the runs (completed)"))]
        rows.append(
            {
                "i": i,
                "node": pos.node,
                "kind": pos.kind,
                "kind_label": KIND_LABELS.get(pos.kind, pos.kind.lower()),
                "runs": pos.runs,
                "oldest": pos.oldest,
                "choices": choices,
                "default": f"move:{pos.node}" if movable and pos.node in node_ids else "",
                "in_target": pos.node in node_ids,
                "movable": movable,
            }
        )
    graph = ""
    if source_plan is not None:
        svg = render_svg(
            source_plan,
            highlight=[r["node"] for r in rows],
            counts={r["node"]: r["runs"] for r in rows},
            title=f"{definition_id} revision {source}",
        )
        graph = mark_safe(svg)  # noqa: S308  (render_svg escapes every text it draws)
    by_version = {r["version"]: r for r in revisions}
    first = rows[0] if rows else None
    return {
        "target_graph": _target_graph(
            definition_id, target, target_plan, first["node"] if first else "", first["default"] if first else ""
        ),
        "source": source,
        "target": target,
        "source_revision": by_version.get(source),
        "target_revision": by_version.get(target),
        "rows": rows,
        "parked_here": sum(r["runs"] for r in rows),
        "graph": graph,
        "target_readable": target_plan is not None,
        "digest_default": bool(conf.get().MIGRATE.DIGEST_NOTICES),
    }


# --- the target graph ---------------------------------------------------------------------------


def _target_graph(definition_id: str, target: int, plan: Any, row_node: str, do: str) -> dict[str, Any]:
    """The target revision's graph with the node a row's pick moves its runs to highlighted
    (``do`` is the row's "What to do" value: ``move:<node>``, ``cancel``, ``end`` or empty)."""
    from workflows.presentation.graph import render_svg

    action, _, node = do.partition(":")
    if plan is None or action not in ("move", "cancel", "end") or (action == "move" and node not in plan.steps):
        action, node = "", ""
    svg = ""
    if plan is not None:
        svg = mark_safe(  # noqa: S308  (render_svg escapes every text it draws)
            render_svg(
                plan,
                highlight=[node] if node else [],
                title=f"{definition_id} revision {target}",
                marker=gettext("moves here"),
                id_suffix="target",
            )
        )
    return {"svg": svg, "action": action, "node": node, "row_node": row_node, "target": target}


@migrate_required
@require_GET
def target_graph(request: HttpRequest, scope: str, definition_id: str) -> HttpResponse:
    """The target graph for the pick of the row whose "What to do" changed (htmx swaps it in)."""
    target = _int(request.GET.get("target"))
    plan = None
    if target is not None:
        plan = queries.migration_plan(scope=scope, definition_id=definition_id, version=target)
    if plan is None or target is None:
        if _htmx(request):
            return _problem(404, "NOT_FOUND", "No such revision", "The target revision cannot be drawn here.")
        raise Http404("no such revision")
    row_node = str(request.GET.get("row", ""))[:255]
    do = next((str(v)[:300] for k, v in request.GET.items() if k.startswith("do_")), "")
    context = {"target_graph": _target_graph(definition_id, target, plan, row_node, do)}
    return render(request, "workflows/migrate/_target_graph.html", context)


# --- the picker ---------------------------------------------------------------------------------


def _picked(data: QueryDict, i: int) -> list[str]:
    found: list[str] = []
    seen: set[str] = set()
    for value in data.getlist(f"run_{i}")[:MAX_PICKED]:
        try:
            run_id = str(uuid.UUID(str(value)))
        except ValueError:
            continue
        if run_id not in seen:
            seen.add(run_id)
            found.append(run_id)
    return found


@migrate_required
@require_POST
def picker(request: HttpRequest, scope: str, definition_id: str, i: int) -> HttpResponse:
    data = request.POST
    source = _int(data.get("source"))
    node, kind = str(data.get(f"node_{i}", ""))[:255], str(data.get(f"kind_{i}", ""))[:8]
    if source is None or not node or not kind:
        if _htmx(request):
            return _problem(400, "INCOMPLETE", _("The dialog is incomplete"), str(INCOMPLETE))
        return HttpResponse(str(INCOMPLETE), status=400)
    count = _int(data.get(f"count_{i}")) or 0
    search = " ".join(str(data.get(f"q_{i}", "")).split())[:255]
    page_offset = _int(data.get(f"page_offset_{i}"))
    offset = max(0, page_offset if page_offset is not None else (_int(data.get(f"offset_{i}")) or 0))
    clear = data.get(f"clear_{i}") == "1"
    picked = [] if clear else _picked(data, i)
    everything = not clear and data.get(f"all_{i}") == "1"
    runs, matching = queries.runs_at_position(
        scope=scope,
        definition_id=definition_id,
        version=source,
        node=node,
        kind=kind,
        search=search,
        offset=offset,
        limit=PICKER_PAGE,
    )
    if offset and not runs and matching:  # the search narrowed the list below this page
        offset = 0
        runs, matching = queries.runs_at_position(
            scope=scope,
            definition_id=definition_id,
            version=source,
            node=node,
            kind=kind,
            search=search,
            offset=0,
            limit=PICKER_PAGE,
        )
    on_page = {str(r["id"]) for r in runs}
    context = {
        "i": i,
        "node": node,
        "count": count,
        "search": search,
        "offset": offset,
        "runs": [{**r, "id": str(r["id"]), "picked": str(r["id"]) in picked} for r in runs],
        "matching": matching,
        "previous": max(0, offset - PICKER_PAGE) if offset else None,
        "next": offset + PICKER_PAGE if offset + PICKER_PAGE < matching else None,
        "first": offset + 1 if runs else 0,
        "last": offset + len(runs),
        "everything": everything,
        "picked_elsewhere": [r for r in picked if r not in on_page],
        "picked_count": count if everything else len(picked),
        "picker_url": reverse("workflows:migrate:picker", args=[scope, definition_id, i]),
    }
    return render(request, "workflows/migrate/_picker.html", context)


# --- preview ------------------------------------------------------------------------------------


def _rows_from(data: QueryDict) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The rows the form asks for, and a violation per row with runs selected but no action."""
    rows: list[dict[str, Any]] = []
    problems: list[dict[str, str]] = []
    n = min(_int(data.get("rows")) or 0, MAX_ROWS)
    for i in range(n):
        node, kind = str(data.get(f"node_{i}", ""))[:255], str(data.get(f"kind_{i}", ""))[:8]
        if not node or not kind:
            continue
        runs: str | list[str] = "all" if data.get(f"all_{i}") == "1" else _picked(data, i)
        if not runs:
            continue  # a row with nothing selected does nothing
        do = str(data.get(f"do_{i}", ""))
        if do.startswith("move:") and len(do) > 5:
            action, target_node = "move", do[5:][:255]
        elif do in ("cancel", "end"):
            action, target_node = do, ""
        else:
            problems.append(
                {
                    "pointer": f"/do_{i}",
                    "type": "required",
                    "message": _("Choose what to do with the runs selected at %(node)s.") % {"node": node},
                }
            )
            continue
        rows.append({"node": node, "kind": kind, "action": action, "target_node": target_node, "runs": runs})
    return rows, problems


@migrate_required
@require_POST
def preview(request: HttpRequest, scope: str, definition_id: str) -> HttpResponse:
    data = request.POST
    source, target = _int(data.get("source")), _int(data.get("target"))
    if source is None or target is None:
        return _refuse(request, 400, "INCOMPLETE", _("The dialog is incomplete"), str(INCOMPLETE))
    rows, problems = _rows_from(data)
    if problems:
        if _htmx(request):
            return _problem(
                422, "NO_ACTION", _("Choose what to do with the selected runs"), _("Nothing was previewed."), problems
            )
        return _message(request, " ".join(p["message"] for p in problems), status=422, tone="error")
    reason = " ".join(str(data.get("reason", "")).split())[:500]
    # an unticked checkbox sends nothing: the form says it drew one (else the setting decides)
    notify_digest = data.get("notify_digest") == "1" if data.get("notify_digest_shown") == "1" else None
    try:
        record_id = operations.migration_preview(
            scope=scope,
            definition_id=definition_id,
            source_version=source,
            target_version=target,
            rows=rows,
            actor=request.user,
            reason=reason,
            replaces=_int(data.get("replaces")),
            notify_digest=notify_digest,
        )
    except RunsInOpenMigration as error:
        return _refuse(
            request,
            409,
            error.code,
            _("The selected runs are in another migration"),
            ngettext(
                "%(runs)s of the selected runs is frozen in migration #%(record)s, which is not over "
                "(%(status)s). A run belongs to one open migration at a time: apply or discard that preview, "
                "or close that migration, first. Nothing was frozen.",
                "%(runs)s of the selected runs are frozen in migration #%(record)s, which is not over "
                "(%(status)s). A run belongs to one open migration at a time: apply or discard that preview, "
                "or close that migration, first. Nothing was frozen.",
                error.runs,
            )
            % {"runs": error.runs, "record": error.record_id, "status": _record_state(error.record_status)},
            link={
                "href": reverse("workflows:migrate:record", args=[error.record_id]),
                "title": _("Open migration #%(record)s") % {"record": error.record_id},
            },
        )
    except InvalidPayload as error:
        return _refuse(request, 422, "INVALID_PAYLOAD", _("The selection could not be frozen"), _violations(error))
    if record_id is None and rows:
        return _refuse(
            request,
            409,
            "SELECTION_STALE",
            _("The selected runs are no longer parked there"),
            _(
                "An approver, a timer or another migration moved them on since they were selected; nothing was "
                "frozen. Reload the dialog to see where runs are parked now."
            ),
        )
    if record_id is None:
        return _message(
            request,
            _("Nothing is selected, so Apply would change nothing. Choose runs with a row's count first."),
            tone="info",
        )
    return _render_preview(request, record_id)


def _violations(error: InvalidPayload) -> str:
    texts = {
        "/source_version": _("The source revision does not exist."),
        "/target_version": _("The target revision does not exist or cannot be read here."),
    }
    out = []
    for v in error.violations:
        if v.pointer.endswith("/target_node"):
            out.append(_("A row moves its runs to a node the target revision does not have."))
        elif v.pointer.endswith("/action"):
            out.append(_("A row asks for an action other than Move, Cancel or End."))
        else:
            out.append(texts.get(v.pointer, _("The selection could not be frozen.")))
    return " ".join(dict.fromkeys(out)) or _("The selection could not be frozen.")


def _render_preview(request: HttpRequest, record_id: int, *, error: str = "", status: int = 200) -> HttpResponse:
    record = queries.migration_record(record_id=record_id)
    return render(
        request, "workflows/migrate/_preview.html", {**_preview_context(record), "error": error}, status=status
    )


def _preview_context(record: Any) -> dict[str, Any]:
    now = queries.database_now()
    facts = {f["row"]: f for f in queries.migration_row_facts(record_id=record.id)}
    target_revision = next(
        (r for r in _revisions(record.scope, record.definition_id) if r["version"] == record.target_version), None
    )
    rows = []
    for row in record.rows:
        f = facts.get(row["row"], {"tasks": [], "timers": {}, "counts": {}})
        entry: dict[str, Any] = {
            **row,
            "kind_label": KIND_LABELS.get(row["kind"], row["kind"].lower()),
            "selected": f["counts"].get("SELECTED", 0),
            "withdrawn": [{**t, "names": queries.assignee_names(mode=t["mode"], value=t["value"])} for t in f["tasks"]],
            "withdrawn_total": sum(t["count"] for t in f["tasks"]),
            "timers": f["timers"],
            "timers_total": sum(f["timers"].values()),
        }
        if row["action"] == "move":
            target = queries.migration_target_facts(
                scope=record.scope,
                definition_id=record.definition_id,
                version=record.target_version,
                node=row["target_node"],
            )
            entry["target"] = target
            assignment = target.get("assignment")
            if assignment and assignment["mode"] in ("user", "group"):
                entry["notified"] = queries.assignee_names(mode=assignment["mode"], value=assignment["value"])
                # approvals reopened for the assignees they are withdrawn from notify nobody again
                mode = "group" if assignment["mode"] == "role" else assignment["mode"]
                entry["kept"] = sum(
                    t["count"] for t in f["tasks"] if (t["mode"], t["value"]) == (mode, assignment["value"])
                )
            for key in ("due_seconds", "timer_seconds", "timeout_seconds", "reminder_seconds"):
                if target.get(key) is not None:
                    entry[key.replace("_seconds", "_at")] = now + timedelta(seconds=float(target[key]))
                    entry[key.replace("_seconds", "_text")] = _duration(float(target[key]))
        rows.append(entry)
    return {
        "record": record,
        "rows": rows,
        "now": now,
        "large": record.total > LARGE_BATCH,
        "batch_size": conf.get().MIGRATE.APPLY_BATCH,
        "target_available": bool(target_revision and target_revision["available"]),
        "any_move": any(r["action"] == "move" for r in record.rows),
        "urls": _urls(record.scope, record.definition_id, record.id),
    }


def _duration(seconds: float) -> str:
    units = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))
    for name, size in units:
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {name}{'s' if n != 1 else ''}"
    return f"{seconds:g} seconds"


# --- apply, progress, discard ---------------------------------------------------------------


@migrate_required
@require_POST
def apply(request: HttpRequest, record_id: int) -> HttpResponse:
    """Apply: the record is handed to a background task at once, and the answer is the progress
    card, which polls while the runs are applied."""
    confirm = _int(str(request.POST.get("confirm", "")).replace(",", "").replace(" ", ""))
    try:
        operations.migration_apply_background(record_id=record_id, actor=request.user, confirm=confirm)
    except InvalidPayload:
        text = _("Type the number of runs exactly as shown to confirm a batch this large. Nothing was applied.")
        if _htmx(request):
            return _problem(422, "CONFIRM_MISMATCH", _("The number typed is not the number of runs"), text)
        return _render_preview(request, record_id, status=422, error=text)
    except MigrationIllegalState:
        if _status_of(record_id) in ("PAUSED", "CLOSED", "DONE"):
            return _refuse(
                request,
                409,
                "MIGRATION_ILLEGAL_STATE",
                _("This migration is not waiting for Apply"),
                _("It is paused, closed or done already; nothing was applied."),
            )
        return _refuse(
            request,
            409,
            "MIGRATION_ILLEGAL_STATE",
            _("This preview is gone"),
            _("This preview was discarded or no longer exists; nothing was applied."),
        )
    except (LockTimeout, PersistenceError):
        return _refuse(
            request,
            503,
            "BUSY",
            _("The database is busy"),
            _("The database is busy; nothing more was applied. Press Apply again in a moment."),
        )
    return _render_progress(request, record_id, fresh=True)


def _status_of(record_id: int) -> str:
    try:
        return str(queries.migration_record(record_id=record_id).status)
    except MigrationIllegalState:
        return ""


RECORD_STATES = {
    "PREVIEWED": gettext_lazy("previewed, not applied"),
    "APPLYING": gettext_lazy("being applied"),
    "PAUSED": gettext_lazy("paused"),
}


def _record_state(status: str) -> str:
    return str(RECORD_STATES.get(status, status.lower()))


@migrate_required
@require_GET
def progress(request: HttpRequest, record_id: int) -> HttpResponse:
    """The progress card, or (``part=live``) only its polled part: the bar, the counts and the
    runs not moved. A live poll that finds the record's status changed since the page drew it
    (``seen``) answers the whole card in its place, with the controls that status offers."""
    if request.GET.get("part") == "live":
        seen = str(request.GET.get("seen", ""))[:16]
        try:  # first: reading the progress finishes a record whose last runs were applied
            status = operations.migration_progress(record_id=record_id).status
        except MigrationIllegalState:
            raise Http404("no such migration") from None
        if seen and status != seen:
            response = _render_progress(request, record_id, fresh=False)
            return reswap(retarget(response, "#migration-progress-card"), "outerHTML")
        return _render_progress(request, record_id, fresh=False, live=True)
    return _render_progress(request, record_id, fresh=False)


def _control(
    request: HttpRequest, record_id: int, act: Callable[[], Any], *, confirmed_needed: bool = True
) -> HttpResponse:
    """Pause, resume or close: confirmed in the card (``confirmed=1``), refused in problem+json
    for htmx (the alert region of the card) with nothing changed."""
    if confirmed_needed and request.POST.get("confirmed") != "1":
        return _refuse(
            request, 400, "NOT_CONFIRMED", _("Not confirmed"), _("Confirm in the card first; nothing was changed.")
        )
    try:
        act()
    except InvalidPayload:
        if _htmx(request):
            return _problem(
                422,
                "INVALID_PAYLOAD",
                _("A reason is required"),
                _("Say why the migration is closed; nothing was changed."),
                [{"pointer": "/reason", "type": "required", "message": _("A reason is required.")}],
            )
        return _message(request, _("A reason is required; nothing was changed."), status=422, tone="error")
    except MigrationIllegalState:
        return _refuse(
            request,
            409,
            "MIGRATION_ILLEGAL_STATE",
            _("The migration has moved on"),
            _("It is no longer in a state that allows this (it may have finished meanwhile); nothing was changed."),
        )
    except (LockTimeout, PersistenceError):
        return _refuse(
            request, 503, "BUSY", "The database is busy", _("The database is busy; nothing was changed. Try again.")
        )
    return _render_progress(request, record_id, fresh=False)


@migrate_required
@require_POST
def pause(request: HttpRequest, record_id: int) -> HttpResponse:
    return _control(request, record_id, lambda: operations.migration_pause(record_id=record_id, actor=request.user))


@migrate_required
@require_POST
def resume(request: HttpRequest, record_id: int) -> HttpResponse:
    return _control(request, record_id, lambda: operations.migration_resume(record_id=record_id, actor=request.user))


@migrate_required
@require_POST
def close(request: HttpRequest, record_id: int) -> HttpResponse:
    reason = str(request.POST.get("reason", ""))[:2000]
    return _control(
        request,
        record_id,
        lambda: operations.migration_close(record_id=record_id, reason=reason, actor=request.user),
    )


def _render_progress(request: HttpRequest, record_id: int, *, fresh: bool, live: bool = False) -> HttpResponse:
    """The progress of a migration. For htmx in the dialog (``on=dialog``), an Apply
    (``fresh``) and the poll that sees the record finish also carry the dialog re-read from the
    database, swapped out of band."""
    try:
        state = operations.migration_progress(record_id=record_id)
    except MigrationIllegalState:
        raise Http404("no such migration") from None
    record = queries.migration_record(record_id=record_id)
    on = "record" if request.GET.get("on") == "record" else "dialog"
    polling = state.status == "APPLYING" or bool(state.in_flight)
    dialog: dict[str, Any] = {}
    if _htmx(request) and on == "dialog" and not live and (fresh or not polling):
        dialog = _dialog_context(record.scope, record.definition_id, record.source_version, record.target_version)
    trouble = _labelled(
        queries.migration_items(record_id=record_id).filter(status__in=["MOVED_ON", "REJECTED"])[:OUTCOMES_PAGE]
    )
    context = {
        **dialog,
        "fresh": bool(dialog),
        "record": record,
        "progress": state,
        "polling": polling,
        "on": on,
        "applied": state.settled - state.not_applied,
        "counts": _outcome_counts(state),
        "trouble": trouble,
        "status_labels": STATUS_LABELS,
        "urls": _urls(record.scope, record.definition_id, record.id),
    }
    template = "workflows/migrate/_progress_live.html" if live else "workflows/migrate/_progress.html"
    return render(request, template, context)


OUTCOME_ORDER = ("MOVED", "CANCELLED", "ENDED", "MOVED_ON", "REJECTED", "NOT_APPLIED", "RECORDED", "SELECTED")


def _outcome_counts(state: Any) -> list[tuple[Any, int, str]]:
    """(label, number, key) per outcome present: moved, cancelled, ended, already moved on
    (skipped: stale), rejected (failed), not applied (closed), then what is still open."""
    return [(STATUS_LABELS[s], state.counts.get(s, 0), s.lower()) for s in OUTCOME_ORDER if state.counts.get(s)]


@migrate_required
@require_POST
def discard(request: HttpRequest, record_id: int) -> HttpResponse:
    """Discard a preview. From the dialog's list of open previews (``on=dialog``) the answer is
    that list drawn again (htmx), or the dialog itself (a redirect, without JavaScript)."""
    if request.GET.get("on") != "dialog":
        operations.migration_discard(record_id=record_id)
        return _message(request, _("The preview was discarded. Nothing was changed."), tone="info")
    try:
        rec = queries.migration_record(record_id=record_id)
    except MigrationIllegalState:
        raise Http404("no such migration") from None
    if operations.migration_discard(record_id=record_id):
        notice = _("Migration #%(record)s was discarded: its runs are free for a new preview.") % {"record": rec.id}
    else:
        notice = _("Migration #%(record)s was no longer a preview; nothing was discarded.") % {"record": rec.id}
    if not _htmx(request):
        dialog_url = reverse("workflows:migrate:dialog", args=[rec.scope, rec.definition_id])
        return redirect(f"{dialog_url}?source={rec.source_version}&target={rec.target_version}")
    return render(
        request, "workflows/migrate/_open_previews.html", _open_previews(rec.scope, rec.definition_id, notice=notice)
    )


def _message(
    request: HttpRequest, text: str, *, status: int = 200, tone: str = "info", link: dict[str, str] | None = None
) -> HttpResponse:
    return render(request, "workflows/migrate/_message.html", {"text": text, "tone": tone, "link": link}, status=status)


def _refuse(
    request: HttpRequest, status: int, code: str, title: str, text: str, *, link: dict[str, str] | None = None
) -> HttpResponse:
    """A refusal: problem+json for htmx (swapped nowhere, shown in the control's alert region),
    the error message fragment otherwise. ``link`` (``{href, title}``): the page about what
    blocked it (a migration holding the runs), shown after the text."""
    if _htmx(request):
        return _problem(status, code, title, text, links=[link] if link else None)
    return _message(request, text, status=status, tone="error", link=link)


# --- records ---------------------------------------------------------------------------------


@migrate_required
@require_GET
def records(request: HttpRequest, scope: str, definition_id: str) -> HttpResponse:
    records = queries.migration_records(scope=scope, definition_id=definition_id, previews=True)
    page = Paginator(records, 50).get_page(request.GET.get("page"))
    return render(
        request,
        "workflows/migrate/records.html",
        {
            "scope": scope,
            "definition_id": definition_id,
            "page": page,
            "urls": _urls(scope, definition_id),
        },
    )


@migrate_required
@require_GET
def record(request: HttpRequest, record_id: int) -> HttpResponse:
    try:
        state = operations.migration_progress(record_id=record_id)  # settles outcomes decided at the claim
        rec = queries.migration_record(record_id=record_id)
    except MigrationIllegalState:
        raise Http404("no such migration") from None
    status = str(request.GET.get("status", "")).upper()
    status = status if status in STATUS_LABELS else ""
    page = Paginator(queries.migration_items(record_id=record_id, status=status or None), OUTCOMES_PAGE).get_page(
        request.GET.get("page")
    )
    page.object_list = _labelled(page.object_list)
    rows = [
        {
            **row,
            "kind_label": KIND_LABELS.get(row["kind"], row["kind"].lower()),
            "action_label": ACTION_LABELS.get(row["action"], row["action"]),
        }
        for row in rec.rows
    ]
    return render(
        request,
        "workflows/migrate/record.html",
        {
            "record": rec,
            "rows": rows,
            "progress": state,
            "polling": state.status == "APPLYING" or bool(state.in_flight),
            "on": "record",
            "applied": state.settled - state.not_applied,
            "counts": _outcome_counts(state),
            "trouble": [],
            "status": status,
            "statuses": [(s, STATUS_LABELS[s], state.counts.get(s, 0)) for s in STATUS_LABELS if state.counts.get(s)],
            "page": page,
            "status_labels": STATUS_LABELS,
            "action_labels": ACTION_LABELS,
            "kind_labels": KIND_LABELS,
            "urls": _urls(rec.scope, rec.definition_id, rec.id),
            # a preview left behind is applied (or discarded) here, as it was in the dialog
            "preview": _preview_context(rec) if rec.status == "PREVIEWED" else None,
        },
    )


def _labelled(items: Any) -> list[Any]:
    out = list(items)
    for item in out:
        item.label = STATUS_LABELS.get(item.status, item.status)
        item.action_label = ACTION_LABELS.get(item.action, item.action)
    return out


def _urls(scope: str, definition_id: str, record_id: int | None = None) -> dict[str, str]:
    urls = {
        "dialog": reverse("workflows:migrate:dialog", args=[scope, definition_id]),
        "records": reverse("workflows:migrate:records", args=[scope, definition_id]),
        "preview": reverse("workflows:migrate:preview", args=[scope, definition_id]),
    }
    if record_id is not None:
        urls.update(
            {
                "record": reverse("workflows:migrate:record", args=[record_id]),
                "apply": reverse("workflows:migrate:apply", args=[record_id]),
                "progress": reverse("workflows:migrate:progress", args=[record_id]),
                "discard": reverse("workflows:migrate:discard", args=[record_id]),
                "pause": reverse("workflows:migrate:pause", args=[record_id]),
                "resume": reverse("workflows:migrate:resume", args=[record_id]),
                "close": reverse("workflows:migrate:close", args=[record_id]),
            }
        )
    return urls
