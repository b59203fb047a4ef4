"""Scale figures, measured in the bench process on the bench database (no workers running):
compiling a 200-step document, a plan-cache hit, and the run viewer over a run with 10,000
history entries (recorded through ``workflows.operations`` and run by the executor in
process, the same code the Celery task runs)."""

from __future__ import annotations

import statistics
import time
from typing import Any


def document(steps: int) -> str:
    """A ``steps``-step chain cycling service → decision (CEL) → human task, then complete."""
    lines = [
        "definitionId: bench-large",
        "definitionVersion: 1",
        "contract: {name: bench.large, signals: {}}",
        "stateSchema: {type: object}",
        "startPayloadSchema: {type: object}",
        "initialStep: s0",
        "steps:",
    ]
    body = steps - 1
    for i in range(body):
        nxt = f"s{i + 1}" if i + 1 < body else "done"
        kind = i % 3
        if kind == 0:
            lines.append(f"  - {{id: s{i}, type: service, target: shop.order_goods, next: {nxt}}}")
        elif kind == 1:
            lines.append(
                f'  - {{id: s{i}, type: decision, routes: [{{when: "state.total > {i}", to: {nxt}}}], default: {nxt}}}'
            )
        else:
            lines += [
                f"  - id: s{i}",
                "    type: human-task",
                f'    title: "Step {i} for {{{{ state.number }}}}"',
                "    assignment: {mode: group, value: approvers}",
                f"    decisions: [{{name: approve, next: {nxt}}}, {{name: reject, next: done}}]",
            ]
    lines.append("  - {id: done, type: complete}")
    return "\n".join(lines) + "\n"


def compile_figures(steps: int = 200, repeat: int = 15) -> dict[str, Any]:
    from workflows import definitions
    from workflows.definitions import cache

    text = document(steps)
    timings = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan = definitions.compile_text(text)
        timings.append((time.perf_counter() - t0) * 1000)
    assert len(plan.steps) == steps
    ref = definitions.load(scope="default", text=text, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    cache.get_plan(scope="default", definition_id=ref.definition_id, version=ref.version)  # resident
    calls = 20000
    t0 = time.perf_counter()
    for _ in range(calls):
        cache.get_plan(
            scope="default", definition_id=ref.definition_id, version=ref.version, expected_hash=plan.plan_hash
        )
    hit_ms = (time.perf_counter() - t0) * 1000 / calls
    return {
        "steps": steps,
        "document_bytes": len(text.encode()),
        "compile_ms": {"median": round(statistics.median(timings), 2), "min": round(min(timings), 2)},
        "plan_cache_hit_ms": round(hit_ms, 5),
    }


HISTORY = """
definitionId: bench-history
definitionVersion: 1
contract: {name: bench.history, signals: {ping: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialState: "{'pings': 0}"
initialStep: wait
steps:
  - {id: wait, type: wait-signal, signal: ping, set: "{'pings': state.pings + 1}", next: wait}
"""


def history_figures(entries: int, page_repeat: int = 5) -> dict[str, Any]:
    """A run with ``entries`` history entries (signals in a loop), then its viewer page."""
    from django.db import connection

    from workflows import definitions, operations
    from workflows.engine import executor, wakeups

    wakeups.set_notifier(None, None)  # no workers now: this process runs the executor
    ref = definitions.load(scope="default", text=HISTORY, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")
    run_id = operations.start(definition_id="bench-history", payload={}).run_id
    executor.drain(run_id=run_id)

    def count() -> int:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM workflow_history WHERE run_id = %s", [run_id])
            return int(cur.fetchone()[0])

    t0 = time.perf_counter()
    signals = 0
    while count() < entries:
        for _ in range(50):  # below the open-signal limit (100)
            operations.signal(run_id=run_id, name="ping", payload=None)
            signals += 1
        executor.drain(run_id=run_id, budget_seconds=60)
    build_s = time.perf_counter() - t0
    total = count()
    result: dict[str, Any] = {"entries": total, "signals": signals, "build_s": round(build_s, 1)}
    result["run_viewer"] = _viewer(run_id, page_repeat)
    return result


def _viewer(run_id: str, repeat: int) -> dict[str, Any]:
    """GET /runs/<id>/ through Django's test Client as a staff user (when the viewer exists)."""
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import NoReverseMatch, reverse

    try:
        url = reverse("workflows:runs:detail", kwargs={"run_id": run_id})
    except NoReverseMatch:
        return {"available": False}
    setup_test_environment()  # allows the test client's host; the bench database is ours
    user = get_user_model().objects.create_user("bench-staff", password="bench-staff", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)
    timings = []
    status = 0
    size = 0
    for _ in range(repeat + 1):
        t0 = time.perf_counter()
        response = client.get(url)
        timings.append((time.perf_counter() - t0) * 1000)
        status, size = response.status_code, len(response.content)
    timings = timings[1:]  # the first request compiles templates
    return {
        "available": True,
        "url": "/runs/<id>/",
        "status": status,
        "bytes": size,
        "ms": {"median": round(statistics.median(timings), 1), "max": round(max(timings), 1)},
    }


def migrate_dialog_figures(sizes: list[int], renders: int = 15) -> dict[str, Any]:
    """The Migrate dialog's render time against the backlog: for each size, that many runs
    parked at three positions of revision 1 by set-based SQL (``generate_series``; not through
    the engine, see ``migrate_dialog.PARK_RUNS``), then ``GET /migrate/default/<id>/`` timed
    ``renders`` times after a warm-up (target: under 200 ms and flat across sizes)."""
    import migrate_dialog  # bench/ is on sys.path as the script's folder

    plan_hash = migrate_dialog.deploy()
    figures = []
    for n in sizes:
        migrate_dialog.clean()
        park_s = migrate_dialog.park(n, plan_hash)
        sql_ms = migrate_dialog.positions_sql_ms()
        times = migrate_dialog.render_times(renders)
        figures.append(
            {
                "parked_runs": n,
                "park_s": round(park_s, 1),
                "positions_sql_ms": round(sql_ms, 2),
                "render_ms": {
                    "median": round(statistics.median(times), 1),
                    "p95": round(sorted(times)[max(0, round(0.95 * len(times)) - 1)], 1),
                    "max": round(max(times), 1),
                },
            }
        )
    migrate_dialog.clean()
    medians = [f["render_ms"]["median"] for f in figures]
    return {
        "sizes": figures,
        "worst_median_ms": max(medians) if medians else None,
        # the largest backlog's median over the smallest's: about 1 when the page is flat
        "growth": round(medians[-1] / medians[0], 2) if len(medians) > 1 and medians[0] else None,
    }
