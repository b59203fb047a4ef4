"""Benchmark of the Migrate dialog: render time against the size of the backlog, and apply
throughput with real MIGRATION commands.

    DATABASE_URL=postgres://... python bench/migrate_dialog.py [--sizes 1000,10000,100000]
        [--apply 2000] [--renders 15] [--keep]

For each size N it parks N runs of a two-revision workflow at three positions of revision 1
(approval, timer, signal wait) **cheaply, by bulk SQL inserts of runs, parks and tasks — not
through the engine** (no START commands, history or timer rows are written for them; the runs
look exactly like parked runs to the dialog and to the MIGRATION handler; each run also gets
two parks it has already left, so the parks table holds history as it does in production).
Then it:

- renders the dialog page (``GET /migrate/<scope>/<id>/?source=1&target=2``) through Django's
  test client as a superuser, ``--renders`` times after a warm-up, and reports the median and
  the 95th percentile (target: under 200 ms, flat from 1,000 to 100,000 runs);
- previews a move of ``--apply`` runs of the approval position to the renamed node of
  revision 2 and presses Apply until nothing is left (``MIGRATE.APPLY_BATCH`` per press). Apply
  moves these runs itself, set-based (``workflows/engine/migration/bulk.py``); runs it leaves to
  MIGRATION commands are applied by the in-process executor (``--executors`` forked processes)
  before the next press. It reports runs moved per second (target: at least 500), split into
  Apply ("apply s") and the executor ("execute s").

The rows it wrote are deleted afterwards unless ``--keep`` is given. Run it against a database
of its own: it runs ``migrate`` first and deletes only its own definition's rows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

DEFINITION = "bench-migrate"
REVISION_1 = f"""
definitionId: {DEFINITION}
definitionVersion: 1
contract: {{name: bench-migrate.v1, signals: {{goods-received: null}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object, properties: {{route: {{type: string}}}}, required: [route]}}
initialStep: route
steps:
  - id: route
    type: decision
    routes:
      - {{when: "state.route == 'review'", to: review}}
      - {{when: "state.route == 'cool'", to: cool-off}}
      - {{when: "state.route == 'goods'", to: wait-goods}}
    default: done
  - id: review
    type: human-task
    title: "Review {{{{ state.route }}}}"
    assignment: {{mode: user, value: alice}}
    due: {{after: P3D, next: done}}
    decisions: [{{name: approve, next: wait-goods}}]
  - id: cool-off
    type: timer
    after: P1D
    next: done
  - id: wait-goods
    type: wait-signal
    signal: goods-received
    next: done
  - id: done
    type: complete
"""
REVISION_2 = (
    REVISION_1.replace("definitionVersion: 1", "definitionVersion: 2")
    .replace("to: review}", "to: manager-review}")
    .replace("id: review\n", "id: manager-review\n")
    .replace("value: alice}", "value: bob}")
    .replace("after: P3D", "after: P5D")
)

# -- name: park_runs
# N parked runs, a third at each position, with their parks, the approvals of the review
# position and the wait each run records (park id, task id) — in four set-based statements.
PARK_RUNS = [
    """
    INSERT INTO workflow_runs (id, scope, definition_id, version, plan_hash, start_scope, status, state,
        state_version, current_step, wait, subject_type, subject_id, subject_version, business_key, context,
        failure_code, failure_message, parent_run_id, parent_step, parent_branch, call_depth, compensation,
        next_seq, open_signals, history_seq, cancel_reason, created_at, updated_at, ended_at,
        actor_kind, actor_id, actor_reason, on_behalf_of, attribution_status)
    SELECT gen_random_uuid(), 'default', %(d)s, 1, %(hash)s, 'default', 'WAITING',
        jsonb_build_object('route', x.route), 1, x.node, NULL, '', '', '', 'BENCH-' || g, NULL, '', '', NULL, '',
        '', 0, NULL, 1, 0, 0, '', now(), now(), NULL, 'NONE', '', '', '', 'ABSENT'
    FROM generate_series(1, %(n)s) g,
    LATERAL (SELECT CASE g %% 3 WHEN 0 THEN 'review' WHEN 1 THEN 'cool-off' ELSE 'wait-goods' END AS node,
                    CASE g %% 3 WHEN 0 THEN 'review' WHEN 1 THEN 'cool' ELSE 'goods' END AS route) x
    """,
    """
    INSERT INTO workflow_parks (run_id, scope, definition_id, version, node, kind, branch_id, since, left_at,
        left_how, moved_to_version, moved_to_scope, moved_to_node, moved_by, migration_id)
    SELECT r.id, 'default', %(d)s, 1, r.current_step,
        CASE r.current_step WHEN 'review' THEN 'TASK' WHEN 'cool-off' THEN 'TIMER' ELSE 'SIGNAL' END, '',
        now() - random() * interval '30 days', NULL, '', NULL, '', '', '', NULL
    FROM workflow_runs r WHERE r.definition_id = %(d)s AND r.status = 'WAITING'
    """,
    # two earlier waits per run, already left: the table holds history, as it does in production
    """
    INSERT INTO workflow_parks (run_id, scope, definition_id, version, node, kind, branch_id, since, left_at,
        left_how, moved_to_version, moved_to_scope, moved_to_node, moved_by, migration_id)
    SELECT r.id, 'default', %(d)s, 1, 'earlier-' || e, 'SIGNAL', '', now() - interval '40 days',
        now() - interval '35 days', 'signal', NULL, '', '', '', NULL
    FROM workflow_runs r, generate_series(1, 2) e WHERE r.definition_id = %(d)s AND r.status = 'WAITING'
    """,
    """
    INSERT INTO workflow_tasks (id, run_id, branch_id, step, title, description, task_type, assignment_mode,
        assignment_value, status, decisions, require_version_stability, subject_version, due_at,
        reminder_every_seconds, reminder_count, reservation_owner, decision, completed_by, created_at, updated_at,
        closed_at)
    SELECT gen_random_uuid(), r.id, '', 'review', 'Review review', '', 'approval', 'user', 'alice', 'OPEN',
        '[{"name": "approve", "label": "approve", "schema": null}]', false, '', NULL, NULL, 0, NULL, '', '', now(),
        now(), NULL
    FROM workflow_runs r WHERE r.definition_id = %(d)s AND r.current_step = 'review'
    """,
    """
    UPDATE workflow_runs r SET wait = jsonb_strip_nulls(jsonb_build_object(
        'kind', CASE p.kind WHEN 'TASK' THEN 'task' WHEN 'TIMER' THEN 'timer' ELSE 'signal' END,
        'step', r.current_step, 'park', p.id, 'task', t.id::text,
        'signals', CASE WHEN p.kind = 'SIGNAL' THEN '["goods-received"]'::jsonb END))
    FROM workflow_parks p LEFT JOIN workflow_tasks t ON t.run_id = p.run_id
    WHERE p.run_id = r.id AND r.definition_id = %(d)s AND p.left_at IS NULL
    """,
]

CHILD_TABLES = (
    "workflow_parks",
    "workflow_tasks",
    "workflow_history",
    "workflow_timers",
    "workflow_outbox",
    "workflow_branches",
    "workflow_joins",
    "workflow_migration_items",
)


def setup_django() -> None:
    if not os.environ.get("DATABASE_URL"):
        sys.exit("Set DATABASE_URL to the PostgreSQL database to benchmark against (a database of its own).")
    import django

    django.setup()


def say(text: str) -> None:
    print(text, flush=True)


def clean() -> None:
    """Delete the benchmark's rows (the count trigger off, its counts deleted with them)."""
    from django.db import transaction

    with transaction.atomic():
        _clean()


def _clean() -> None:
    from workflows.engine import db

    db.execute("SET LOCAL session_replication_role = replica")  # no per-row count trigger
    db.execute("DELETE FROM workflow_park_counts WHERE definition_id = %s", [DEFINITION])
    runs = "(SELECT id FROM workflow_runs WHERE definition_id = %s)"
    db.execute(
        f"DELETE FROM workflow_effect_markers WHERE command_id IN (SELECT id FROM workflow_commands "
        f"WHERE run_id IN {runs})",
        [DEFINITION],
    )
    for table in CHILD_TABLES:
        db.execute(f"DELETE FROM {table} WHERE run_id IN {runs}", [DEFINITION])
    db.execute(f"DELETE FROM workflow_commands WHERE run_id IN {runs}", [DEFINITION])
    db.execute("DELETE FROM workflow_migration_records WHERE definition_id = %s", [DEFINITION])
    db.execute("DELETE FROM workflow_runs WHERE definition_id = %s", [DEFINITION])


def deploy() -> str:
    from workflows import definitions
    from workflows.models import DefinitionVersion

    for text, version in ((REVISION_1, 1), (REVISION_2, 2)):
        if not DefinitionVersion.objects.filter(scope="default", definition_id=DEFINITION, version=version).exists():
            definitions.load(scope="default", text=text, format="yaml")
            definitions.publish(scope="default", definition_id=DEFINITION, version=version)
    definitions.activate(scope="default", definition_id=DEFINITION, version=2, target_scope="default")
    return DefinitionVersion.objects.get(scope="default", definition_id=DEFINITION, version=1).plan_hash


# -- name: count_parked
# The position counts of the parks just written, in one statement: what the count trigger
# (migration 0008) would have added one row at a time. The trigger is off while parking
# (session_replication_role): 100,000 increments of three counter rows in one transaction
# leave each a chain of 33,000 row versions that every next increment walks (minutes, not
# seconds, on a busy machine), which no production write does — a run parks in its own
# transaction.
COUNT_PARKED = """
    INSERT INTO workflow_park_counts (definition_id, scope, version, node, kind, stripe, runs)
    SELECT definition_id, scope, version, node, kind, 0, count(*) FROM workflow_parks
    WHERE definition_id = %(d)s AND left_at IS NULL AND branch_id = ''
    GROUP BY definition_id, scope, version, node, kind
    ON CONFLICT (definition_id, scope, version, node, kind, stripe)
    DO UPDATE SET runs = workflow_park_counts.runs + EXCLUDED.runs
"""


def park(n: int, plan_hash: str) -> float:
    """N parked runs written by set-based SQL (``PARK_RUNS``, ``generate_series``), their
    position counts in one more statement (``COUNT_PARKED``)."""
    from django.db import connection, transaction

    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL session_replication_role = replica")  # no per-row count trigger
        for sql in PARK_RUNS:
            cur.execute(sql, {"d": DEFINITION, "hash": plan_hash, "n": n})
        cur.execute(COUNT_PARKED, {"d": DEFINITION})
    with connection.cursor() as cur:  # autocommit: the visibility map makes the count index-only
        cur.execute("VACUUM ANALYZE workflow_parks")
        cur.execute("ANALYZE workflow_runs")
        cur.execute("ANALYZE workflow_tasks")
    return time.perf_counter() - started


def admin_user() -> object:
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    return user


def commit_ms(samples: int = 50) -> float:
    """The database's durable commit latency here (fsync-bound): it bounds how many segments a
    single executor process can commit per second."""
    from django.db import connection, transaction

    with connection.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS bench_commit_probe (i int)")
    started = time.perf_counter()
    for i in range(samples):
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("INSERT INTO bench_commit_probe VALUES (%s)", [i])
    elapsed = (time.perf_counter() - started) * 1000 / samples
    with connection.cursor() as cur:
        cur.execute("DROP TABLE bench_commit_probe")
    return elapsed


def render_times(renders: int) -> list[float]:
    from django.conf import settings
    from django.test import Client

    if "testserver" not in settings.ALLOWED_HOSTS and "*" not in settings.ALLOWED_HOSTS:
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    client = Client()
    client.force_login(admin_user())
    url = f"/migrate/default/{DEFINITION}/?source=1&target=2"
    for _ in range(3):  # warm-up: plan cache, template loading, connection
        response = client.get(url)
        assert response.status_code == 200, response.status_code
    times = []
    for _ in range(renders):
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
        assert response.content.count(b'class="position-row"') == 3
    return times


def positions_sql_ms() -> float:
    from workflows import queries

    times = []
    for _ in range(10):
        started = time.perf_counter()
        queries.migration_positions(scope="default", definition_id=DEFINITION, version=1)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _drain_forever() -> None:
    from workflows.engine import executor

    while executor.drain(budget_seconds=600, batch=32):
        pass


def drain_with(executors: int) -> None:
    """Run the executor on every runnable command in ``executors`` forked processes, each on its
    own database connection (as that many Celery worker processes would)."""
    import multiprocessing

    from django.db import connections

    if executors <= 1:
        _drain_forever()
        return
    connections.close_all()  # a forked child must open its own connection
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_drain_forever) for _ in range(executors)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def apply_throughput(count: int, executors: int) -> dict[str, float]:
    from workflows import operations, queries

    rows, _ = queries.runs_at_position(
        scope="default", definition_id=DEFINITION, version=1, node="review", kind="TASK", limit=count
    )
    picked = [str(r["id"]) for r in rows]
    actor = admin_user()
    record_id = operations.migration_preview(
        scope="default",
        definition_id=DEFINITION,
        source_version=1,
        target_version=2,
        actor=actor,
        rows=[{"node": "review", "kind": "TASK", "action": "move", "target_node": "manager-review", "runs": picked}],
    )
    assert record_id is not None
    recording = executing = 0.0
    started = time.perf_counter()
    confirm = len(picked)
    while True:
        t0 = time.perf_counter()
        state = operations.migration_apply(record_id=record_id, actor=actor, confirm=confirm)
        recording += time.perf_counter() - t0
        if state.in_flight:  # runs Apply left to their MIGRATION commands
            t0 = time.perf_counter()
            drain_with(executors)
            executing += time.perf_counter() - t0
        if not state.left:
            break
    total = time.perf_counter() - started
    final = operations.migration_progress(record_id=record_id)
    moved = final.counts.get("MOVED", 0)
    return {
        "runs": len(picked),
        "moved": moved,
        "seconds": total,
        "recording": recording,
        "executing": executing,
        "other": sum(v for k, v in final.counts.items() if k != "MOVED"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="comma-separated numbers of parked runs")
    parser.add_argument("--apply", type=int, default=2000, help="runs moved per size for the throughput figure")
    parser.add_argument("--renders", type=int, default=15, help="timed renders of the dialog per size")
    parser.add_argument("--executors", type=int, default=4, help="executor processes applying the commands")
    parser.add_argument("--keep", action="store_true", help="leave the benchmark's rows in the database")
    args = parser.parse_args()
    setup_django()

    from django.core.management import call_command

    from workflows import conf
    from workflows.engine import wakeups

    call_command("migrate", verbosity=0)
    wakeups.set_notifier(None, None)  # the executor runs in this process; no Celery messages
    import logging

    logging.getLogger("workflows.engine").setLevel(logging.WARNING)
    plan_hash = deploy()
    say("Migrate dialog benchmark")
    say("Runs are parked by bulk SQL inserts of runs, parks and tasks (not through the engine).")
    say(
        f"APPLY_BATCH={conf.get().MIGRATE.APPLY_BATCH}; the in-process executor runs in {args.executors} forked "
        "process(es), each on its own connection (like that many worker processes)."
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    say(f"Machine: {os.cpu_count()} CPU(s), load average {load:.1f}; one durable commit takes {commit_ms():.1f} ms.")
    say("")
    say(
        f"{'parked runs':>12} {'park (s)':>9} {'positions SQL':>14} {'render median':>14} {'render p95':>11} "
        f"{'moved':>7} {'runs/s':>8} {'apply s':>9} {'execute s':>10}"
    )
    results = []
    for n in [int(s) for s in args.sizes.split(",") if s.strip()]:
        clean()
        parked_in = park(n, plan_hash)
        sql_ms = positions_sql_ms()
        times = render_times(args.renders)
        median = statistics.median(times)
        p95 = sorted(times)[max(0, round(0.95 * len(times)) - 1)]
        applied = apply_throughput(min(args.apply, n // 3), args.executors)
        rate = applied["moved"] / applied["seconds"] if applied["seconds"] else 0.0
        say(
            f"{n:>12,} {parked_in:>9.1f} {sql_ms:>11.1f} ms {median:>11.1f} ms {p95:>8.1f} ms "
            f"{applied['moved']:>7,} {rate:>8.0f} {applied['recording']:>9.2f} {applied['executing']:>10.2f}"
        )
        if applied["other"]:
            say(f"{'':>12} note: {applied['other']} run(s) were not moved (see the migration record)")
        results.append((n, median, rate))
    if not args.keep:
        clean()
    say("")
    say("Targets: render under 200 ms and flat across sizes; apply at least 500 runs moved per second.")
    worst = max(r[1] for r in results) if results else 0.0
    say(f"Render: worst median {worst:.1f} ms — {'meets' if worst < 200 else 'misses'} the 200 ms target.")
    slowest = min(r[2] for r in results) if results else 0.0
    say(f"Apply: slowest {slowest:.0f} runs/s — {'meets' if slowest >= 500 else 'misses'} the 500 runs/s target.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
