"""The operations dashboard (``/ops/``, operate capability) and the Prometheus endpoint (``/metrics``).

The dashboard answers "is the engine healthy, and where are the runs?" without SQL:

- **Queue health**: commands due now, scheduled (timers not yet due), deferred, claimed,
  expired leases, dead letters, OUTCOME_UNKNOWN, and how long the oldest due command has
  waited — every age on the database clock. htmx refreshes this part every 15 seconds.
- **Throughput**: commands settled per minute over the last hour (``settled_at``), as a small
  inline SVG bar chart with a text summary.
- **Runs by workflow and revision**, one column per status, each count a link to the run list.
  Runs that are not ended are counted live; ended ones come from the snapshot the beat task
  ``workflows.run_totals`` refreshes every minute, and the page says when they were counted.
  When no snapshot is stored yet (a fresh install, no beat so far) the page counts one and
  stores it (``operations.run_totals_refresh``): the only write here.
- **Parked runs by position**: per revision, its graph (the run viewer's ``render_svg``) with
  the number of runs parked at each node, and the same numbers as a table.

``/metrics`` answers the Prometheus text format when ``settings.METRICS_TOKEN`` is set and the
request carries ``Authorization: Bearer <token>``: 404 when no token is configured (the
endpoint does not exist), 401 without credentials, 403 with a wrong token.

Reads go through ``workflows.queries``, the one write above through ``workflows.operations``.
"""

from __future__ import annotations

import hmac
from datetime import datetime
from html import escape
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from workflows import operations, queries
from workflows.access import Capability, page_requires

# the run statuses in the order a run goes through them; ended ones last
STATUS_ORDER = (
    "PENDING",
    "RUNNING",
    "WAITING",
    "COMPENSATING",
    "FAILED",
    "COMPLETED",
    "COMPENSATED",
    "CANCELLED",
    "EXPIRED",
)
REFRESH_SECONDS = 15


def url_or_none(name: str, *args: Any) -> str | None:
    """A URL of another part of the site, or None while that part is not installed."""
    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return None


def run_url(run_id: Any) -> str:
    return reverse("workflows:runs:detail", args=(run_id,))


def duration(seconds: float | None) -> str:
    """A short, readable duration: ``45 s``, ``12 min``, ``3 h 5 min``, ``2 d 4 h``."""
    if seconds is None:
        return "—"
    s = max(0, int(seconds))
    if s < 60:
        return _("%(s)s s") % {"s": s}
    if s < 3600:
        return _("%(m)s min") % {"m": s // 60}
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return _("%(h)s h %(m)s min") % {"h": h, "m": m} if m else _("%(h)s h") % {"h": h}
    d, h = divmod(s // 3600, 24)
    return _("%(d)s d %(h)s h") % {"d": d, "h": h} if h else _("%(d)s d") % {"d": d}


# --- the dashboard --------------------------------------------------------------------------


@never_cache
@page_requires(Capability.OPERATE)
@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    context = _queue_context()
    if getattr(request, "htmx", False) and request.GET.get("part") == "queue":
        return render(request, "workflows/ops/_queue.html", context)
    revisions, ended_counted_at = _revisions()
    context.update(
        revisions=revisions,
        ended_counted_at=ended_counted_at,
        statuses=[s for s in STATUS_ORDER if any(r["by_status"].get(s) for r in revisions)] or ["WAITING", "FAILED"],
        parked_revisions=[r for r in revisions if r["positions"]],
        radar_url=reverse("switchyard_ops:radar"),
    )
    for revision in revisions:
        revision["cells"] = [
            {"status": s, "count": revision["by_status"].get(s, 0), "href": _runs_list_url(revision, s)}
            for s in context["statuses"]
        ]
    return render(request, "workflows/ops/dashboard.html", context)


def _queue_context() -> dict[str, Any]:
    queue = queries.queue_health()
    series = queries.settled_per_minute(minutes=60)
    total = sum(int(m["settled"]) for m in series)
    failed = sum(int(m["failed"]) for m in series)
    busiest = max(series, key=lambda m: int(m["settled"])) if series else None
    return {
        "queue": queue,
        "oldest_pending": duration(queue["oldest_pending_seconds"]) if queue["pending"] else "—",
        "throughput_svg": throughput_svg(series),
        "throughput": {
            "total": total,
            "failed": failed,
            "busiest": int(busiest["settled"]) if busiest else 0,
            "busiest_at": busiest["minute"] if busiest and int(busiest["settled"]) else None,
        },
        "refresh_seconds": REFRESH_SECONDS,
    }


def _runs_list_url(revision: dict[str, Any], status: str) -> str | None:
    base = url_or_none("workflows:runs:list")
    if base is None:
        return None
    return f"{base}?{urlencode({'definition': revision['definition_id'], 'status': status})}"


def _revisions() -> tuple[list[dict[str, Any]], datetime]:
    """One entry per revision that has runs: its runs by status and its parked positions
    (with the graph, counts on the nodes); and when the ended runs among them were counted."""
    rows = queries.runs_by_revision()
    counted_at = max((row["counted_at"] for row in rows if row["counted_at"] is not None), default=None)
    if counted_at is None:
        # No snapshot of the ended runs (a fresh install, the beat has not counted yet, or no
        # run had ended then): count them now and keep the count, so the page never shows
        # ended totals missing. Cheap when it repeats: no ended run means nothing to count.
        counted_at = operations.run_totals_refresh(only_if_missing=True)
        rows = queries.runs_by_revision()
    revisions: dict[tuple[str, str, int], dict[str, Any]] = {}
    for row in rows:
        key = (row["definition_id"], row["scope"], int(row["version"]))
        entry = revisions.setdefault(
            key,
            {
                "definition_id": key[0],
                "scope": key[1],
                "version": key[2],
                "plan_hash": row["plan_hash"],
                "by_status": {},
                "total": 0,
                "positions": [],
                "parked": 0,
                "graph": None,
            },
        )
        entry["by_status"][row["status"]] = int(row["runs"])
        entry["total"] += int(row["runs"])
    for row in queries.parked_by_position():
        key = (row["definition_id"], row["scope"], int(row["version"]))
        parked = revisions.get(key)
        if parked is None:
            continue
        parked["positions"].append({**row, "oldest": duration(row["oldest_seconds"])})
        parked["parked"] += int(row["runs"])
    for entry in revisions.values():
        if entry["positions"]:
            entry["graph"] = _graph(entry)
    return list(revisions.values()), counted_at


def _graph(revision: dict[str, Any]) -> SafeString | None:
    try:
        from workflows.presentation.graph import render_svg
    except ImportError:  # the run viewer's graph module is not installed: the table says it all
        return None
    if revision["plan_hash"] is None:  # no stored revision row for these runs: no plan to draw
        return None
    plan = queries.revision_plan(
        scope=revision["scope"],
        definition_id=revision["definition_id"],
        version=revision["version"],
        plan_hash=revision["plan_hash"],
    )
    if plan is None:
        return None
    counts: dict[str, int] = {}
    for position in revision["positions"]:
        counts[position["node"]] = counts.get(position["node"], 0) + int(position["runs"])
    title = _("%(workflow)s version %(version)s: runs parked per step") % {
        "workflow": revision["definition_id"],
        "version": revision["version"],
    }
    return mark_safe(render_svg(plan, counts=counts, title=title))  # noqa: S308 - render_svg escapes every text


def throughput_svg(series: list[dict[str, Any]], *, width: int = 600, height: int = 120) -> SafeString:
    """Settled commands per minute as bars (failed ones in red on top); every bar has a
    tooltip, and the picture has a text alternative."""
    n = max(1, len(series))
    peak = max([int(m["settled"]) for m in series] + [1])
    left, bottom, top = 34, 18, 8
    plot_w, plot_h = width - left - 4, height - bottom - top
    step = plot_w / n
    bar_w = max(1.0, step - 2)
    total = sum(int(m["settled"]) for m in series)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="throughput" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" aria-labelledby="throughput-title">',
        '<title id="throughput-title">'
        + escape(
            _("%(total)s commands settled in the last %(minutes)s minutes; at most %(peak)s in one minute")
            % {"total": total, "minutes": n, "peak": peak}
        )
        + "</title>",
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{width - 4}" y2="{top + plot_h}"/>',
        f'<text class="tick" x="{left - 4}" y="{top + 9}" text-anchor="end">{peak}</text>',
        f'<text class="tick" x="{left - 4}" y="{top + plot_h}" text-anchor="end">0</text>',
    ]
    for i, minute in enumerate(series):
        settled, failed = int(minute["settled"]), int(minute["failed"])
        x = left + i * step + 1
        label = _("%(minute)s UTC: %(settled)s settled") % {"minute": f"{minute['minute']:%H:%M}", "settled": settled}
        if failed:
            label = _("%(label)s, %(failed)s failed") % {"label": label, "failed": failed}
        h = plot_h * settled / peak
        hf = plot_h * failed / peak
        parts.append(f'<g class="bar"><title>{escape(label)}</title>')
        parts.append(f'<rect class="hit" x="{x:.1f}" y="{top}" width="{bar_w:.1f}" height="{plot_h}"/>')
        if settled:
            parts.append(
                f'<rect class="ok" x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w:.1f}" height="{h - hf:.1f}"/>'
            )
        if failed:
            parts.append(
                f'<rect class="failed" x="{x:.1f}" y="{top + plot_h - hf:.1f}" width="{bar_w:.1f}" height="{hf:.1f}"/>'
            )
        parts.append("</g>")
    if series:
        first, last = series[0]["minute"], series[-1]["minute"]
        parts.append(f'<text class="tick" x="{left}" y="{height - 4}">{first:%H:%M}</text>')
        parts.append(f'<text class="tick" x="{width - 4}" y="{height - 4}" text-anchor="end">{last:%H:%M} UTC</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - numbers and escaped labels only


# --- /metrics -------------------------------------------------------------------------------


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text exposition, behind ``Authorization: Bearer <METRICS_TOKEN>``."""
    from workflows import metrics as collectors

    token = str(getattr(settings, "METRICS_TOKEN", "") or "")
    if not token:
        raise Http404("metrics are not enabled")
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        response = HttpResponse("metrics need a bearer token\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        return HttpResponse("wrong metrics token\n", status=403, content_type="text/plain")
    return HttpResponse(collectors.exposition(), content_type=collectors.CONTENT_TYPE)
