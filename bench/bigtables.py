"""Big tables: how the pages and the API an operator uses behave at 10k and at 1M runs.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/bigtables.py [--sizes 10000,1000000] [--repeat 20] [--keep]

It works in a database of its own (``switchyard_bigtables``; ``--database``), migrated first.
Template runs of a real workflow are made through the engine in this process (a signal loop of
``--notes`` decisions, 2 by default: about 20 history entries a run; then an approval for the
group ``approvers``): one left waiting at its task, one completed. Each size is then reached
by cloning those runs with SQL (``generate_series``; every row of the run — history,
commands, parks, tasks — copied with a new run id, business key, region and age), so 1M runs
take minutes, not hours:
``--open`` runs wait at their task (default 10,000: the approver's inbox), the rest have
completed. One more run, with ``--viewer-entries`` history entries (5,000), is made through the
engine for the run page.

At each size it measures, through Django's test client in this process, the 95th percentile
and the median of ``--repeat`` requests (after one warm-up) of: the runs API with each filter,
the approver's inbox, the run page with 5,000 history entries, the ops dashboard, the stuck-run
radar, the admin's run list, and the Migrate dialog (revision 1 → 2). Goal (issue #32): each
p95 under 300 ms at 1M runs and within 1.5x of the same measure at 10k runs.

Writes ``bench/results/<time>-bigtables.json``, prints a table, and draws
``docs/images/bigtables.png`` (matplotlib) when it is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

DEFINITION = "bench-big"
DOCUMENT = """
definitionId: bench-big
definitionVersion: {version}
contract: {{name: bench-big.v1, signals: {{note: {{type: object}}}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialState: "{{'region': 'EU', 'notes': 0, 'amount': 100}}"
initialStep: notes
steps:
  - id: notes
    type: wait-signal
    signal: note
    set: "{{'notes': state.notes + 1}}"
    next: enough
  - id: enough
    type: decision
    routes: [{{when: "state.notes < {notes}", to: notes}}]
    default: review
  - id: review
    type: human-task
    title: "Review the {{{{ state.region }}}} order"
    assignment: {{mode: group, value: approvers}}
    decisions:
      - {{name: approve, next: done}}
      - {{name: reject, next: done}}
  - id: done
    type: complete
"""
VIEWER = """
definitionId: bench-big-viewer
definitionVersion: 1
contract: {name: bench-big-viewer.v1, signals: {ping: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialState: "{'pings': 0}"
initialStep: wait
steps:
  - {id: wait, type: wait-signal, signal: ping, set: "{'pings': state.pings + 1}", next: wait}
"""
# (label, path template): {run} is the viewer run, {key} a business key that exists
MEASURES: list[tuple[str, str]] = [
    ("API runs: no filter", "/api/v1/runs/"),
    ("API runs: status", "/api/v1/runs/?status=WAITING"),
    ("API runs: definition + version", f"/api/v1/runs/?definition_id={DEFINITION}&version=1"),
    ("API runs: step", "/api/v1/runs/?step=review"),
    ("API runs: business key", "/api/v1/runs/?business_key={key}"),
    ("API runs: subject", "/api/v1/runs/?subject_type=demo.order&subject_id=nobody"),
    ("API runs: created range", "/api/v1/runs/?created_after={hour_ago}&created_before={now}"),
    ("API runs: ended range", "/api/v1/runs/?ended_after={hour_ago}"),
    ("API runs: state containment", '/api/v1/runs/?state={{"region":"APAC"}}'),
    ("API runs: ordering", "/api/v1/runs/?ordering=updated_at"),
    ("API tasks: group", "/api/v1/tasks/all/?group=approvers"),
    ("inbox (10k tasks)", "/tasks/"),
    ("run page (5k history)", "/runs/{run}/"),
    ("ops dashboard", "/ops/"),
    ("stuck-run radar", "/ops/radar/"),
    ("admin run list", "/admin/workflows/run/"),
    ("Migrate dialog", f"/migrate/default/{DEFINITION}/?source=1&target=2"),
]
CLONE_BATCH = 50_000


def say(text: str) -> None:
    print(f"bigtables: {text}", flush=True)


def database_url(args: argparse.Namespace) -> str:
    base = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    return base.rpartition("/")[0] + "/" + args.database


def prepare_database(args: argparse.Namespace) -> None:
    import psycopg

    base = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    with psycopg.connect(base, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [args.database]).fetchone()
        if exists and not args.reuse:
            conn.execute(f'DROP DATABASE "{args.database}" WITH (FORCE)')
        if not exists or not args.reuse:
            conn.execute(f'CREATE DATABASE "{args.database}"')
    os.environ["DATABASE_URL"] = database_url(args)


def setup_django() -> None:
    import django
    from django.core.management import call_command

    os.environ.setdefault("SECRET_KEY", "bigtables-" + "x" * 50)
    os.environ.setdefault("SECURE_COOKIES", "false")
    os.environ.setdefault("DATABASE_POOL_MAX_SIZE", "0")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("WORKFLOWS_LOG_LEVEL", "WARNING")
    django.setup()
    call_command("migrate", verbosity=0)


def templates(notes: int) -> dict[str, str]:
    """The two template runs (waiting at the task, completed), made by the engine."""
    from workflows import definitions, operations
    from workflows.engine import executor, wakeups
    from workflows.models import Run, Task

    wakeups.set_notifier(None, None)  # no workers: this process runs the executor
    for version in (1, 2):
        ref = definitions.load(scope="default", text=DOCUMENT.format(version=version, notes=notes), format="yaml")
        definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=DEFINITION, version=1, target_scope="default")
    made = {}
    for kind in ("open", "done"):
        recorded = operations.start(definition_id=DEFINITION, version=1, payload={}, business_key=f"template-{kind}")
        run_id = str(recorded.run_id)
        executor.drain(run_id=run_id)
        for _ in range(notes):
            operations.signal(run_id=run_id, name="note", payload={})
            executor.drain(run_id=run_id)
        if kind == "done":
            task = Task.objects.get(run_id=run_id)
            operations.complete_task(task_id=task.id, decision="approve", payload={})
            executor.drain(run_id=run_id)
        made[kind] = run_id
    statuses = dict(Run.objects.filter(id__in=made.values()).values_list("id", "status"))
    assert {str(k): v for k, v in statuses.items()} == {made["open"]: "WAITING", made["done"]: "COMPLETED"}, statuses
    return made


def viewer_run(entries: int) -> str:
    from django.db import connection

    from workflows import definitions, operations
    from workflows.engine import executor

    ref = definitions.load(scope="default", text=VIEWER, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default")
    run_id = str(operations.start(definition_id="bench-big-viewer", payload={}).run_id)
    executor.drain(run_id=run_id)

    def count() -> int:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM workflow_history WHERE run_id = %s", [run_id])
            return int(cur.fetchone()[0])

    while count() < entries:
        for _ in range(50):  # below the open-signal limit
            operations.signal(run_id=run_id, name="ping", payload=None)
        executor.drain(run_id=run_id, budget_seconds=60)
    return run_id


def _columns(table: str) -> list[str]:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s AND table_schema = 'public' "
            "AND is_identity = 'NO' ORDER BY ordinal_position",
            [table],
        )
        return [r[0] for r in cur.fetchall()]


# how a clone's columns differ from its template's (m.new: the clone's run id, m.i: its number)
AGE = "make_interval(secs => m.i * 3)"
CLONED: dict[str, dict[str, str]] = {
    "workflow_runs": {
        "id": "m.new",
        "business_key": "'big-' || m.i",
        "state": "t.state || jsonb_build_object('region', (ARRAY['EU','US','APAC'])[1 + m.i %% 3], 'n', m.i)",
        "created_at": f"now() - {AGE} - interval '10 minutes'",
        "updated_at": f"now() - {AGE}",
        "ended_at": f"CASE WHEN t.ended_at IS NULL THEN NULL ELSE now() - {AGE} END",
    },
    "workflow_history": {"run_id": "m.new", "at": f"t.at - {AGE}"},
    "workflow_commands": {
        "run_id": "m.new",
        **{c: f"t.{c} - {AGE}" for c in ("recorded_at", "order_at", "available_at", "fire_at", "settled_at")},
    },
    "workflow_parks": {"run_id": "m.new", "since": f"t.since - {AGE}", "left_at": f"t.left_at - {AGE}"},
    "workflow_tasks": {
        "id": "gen_random_uuid()",
        "run_id": "m.new",
        **{c: f"t.{c} - {AGE}" for c in ("created_at", "updated_at", "closed_at", "claimed_at")},
    },
}


def clone(template: str, first: int, last: int) -> None:
    """Copies number ``first``..``last`` of a template run, every row of it, in batches."""
    from django.db import connection, transaction

    for lo in range(first, last + 1, CLONE_BATCH):
        hi = min(last, lo + CLONE_BATCH - 1)
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(
                "CREATE TEMP TABLE bench_map ON COMMIT DROP AS "
                "SELECT gen_random_uuid() AS new, g AS i FROM generate_series(%s, %s) g",
                [lo, hi],
            )
            for table, changed in CLONED.items():
                columns = _columns(table)
                values = ", ".join(changed.get(c, f"t.{c}") for c in columns)
                key = "id" if table == "workflow_runs" else "run_id"
                cur.execute(
                    f"INSERT INTO {table} ({', '.join(columns)}) SELECT {values} "
                    f"FROM {table} t CROSS JOIN bench_map m WHERE t.{key} = %s",
                    [template],
                )


def grow(made: dict[str, str], size: int, open_runs: int, have: dict[str, int]) -> None:
    from django.db import connection

    want_open = min(open_runs, size)
    want_done = size - want_open
    started = time.monotonic()
    if want_open > have["open"]:
        clone(made["open"], have["open"] + 1, want_open)
    if want_done > have["done"]:
        # numbered after every open clone, so business keys stay unique
        clone(made["done"], open_runs + have["done"] + 1, open_runs + want_done)
    have.update(open=max(have["open"], want_open), done=max(have["done"], want_done))
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")
    say(f"{size:,} runs ({have['open']:,} waiting, {have['done']:,} completed) in {time.monotonic() - started:.0f} s")


def table_sizes() -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT relname, n_live_tup FROM pg_stat_user_tables WHERE relname IN "
            "('workflow_runs','workflow_history','workflow_commands','workflow_tasks','workflow_parks')"
        )
        return {name: int(n) for name, n in cur.fetchall()}


def users() -> tuple[Any, Any]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission

    model = get_user_model()
    admin, _ = model.objects.get_or_create(**{model.USERNAME_FIELD: "bench-admin"})
    admin.is_staff = admin.is_superuser = True
    admin.save()
    approver, _ = model.objects.get_or_create(**{model.USERNAME_FIELD: "bench-approver"})
    group, _ = Group.objects.get_or_create(name="approvers")
    group.permissions.add(*Permission.objects.filter(content_type__app_label="workflows", codename="view_task"))
    approver.groups.add(group)
    return admin, approver


def measure(paths: dict[str, str], admin: Any, approver: Any, repeat: int) -> dict[str, dict[str, float]]:
    from django.test import Client
    from django.test.utils import setup_test_environment

    if not getattr(measure, "ready", False):
        setup_test_environment()  # the test client's response attributes, once per process
        measure.ready = True  # type: ignore[attr-defined]
    as_admin, as_approver = Client(), Client()
    as_admin.force_login(admin)
    as_approver.force_login(approver)
    found: dict[str, dict[str, float]] = {}
    for label, path in paths.items():
        client = as_approver if label.startswith("inbox") else as_admin
        answer = client.get(path)
        if answer.status_code != 200:
            raise SystemExit(f"bigtables: {label}: GET {path} answered {answer.status_code}")
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            client.get(path)
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        found[label] = {
            "median_ms": round(statistics.median(times), 1),
            "p95_ms": round(times[max(0, int(len(times) * 0.95) - 1)], 1),
        }
    return found


def chart(result: dict[str, Any], out: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    sizes = [s["runs"] for s in result["sizes"]]
    labels = list(result["sizes"][0]["measures"])
    fig, ax = plt.subplots(figsize=(10, 6))
    width = 0.8 / len(sizes)
    for k, size in enumerate(result["sizes"]):
        ax.barh(
            [i + k * width for i in range(len(labels))],
            [size["measures"][label]["p95_ms"] for label in labels],
            height=width,
            label=f"{size['runs']:,} runs",
        )
    ax.axvline(300, color="red", linestyle="--", linewidth=1, label="goal: 300 ms")
    ax.set_yticks([i + width * (len(sizes) - 1) / 2 for i in range(len(labels))], labels)
    ax.invert_yaxis()
    ax.set_xlabel("p95 latency (ms)")
    ax.set_title(f"Switchyard with big tables: p95 at {' and '.join(f'{s:,}' for s in sizes)} runs")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=len(sizes) + 1)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,1000000", help="comma-separated numbers of runs, ascending")
    ap.add_argument("--open", type=int, default=10_000, help="runs waiting at their task (the inbox)")
    ap.add_argument("--notes", type=int, default=2, help="decisions of each template run before its task")
    ap.add_argument("--viewer-entries", type=int, default=5000, help="history entries of the run page's run")
    ap.add_argument("--repeat", type=int, default=20, help="timed requests per measure and size")
    ap.add_argument("--database", default="switchyard_bigtables")
    ap.add_argument("--reuse", action="store_true", help="keep the database if it exists (no new templates)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--chart", type=Path, default=ROOT / "docs" / "images" / "bigtables.png")
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))

    prepare_database(args)
    setup_django()
    started = time.monotonic()
    say(f"templates ({args.notes} decisions before the task) and a run with {args.viewer_entries} history entries")
    made = templates(args.notes)
    viewer = viewer_run(args.viewer_entries)
    admin, approver = users()
    now = time.time()
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))  # noqa: E731
    paths = {
        label: path.format(run=viewer, key="big-12345", hour_ago=iso(now - 3600), now=iso(now + 60))
        for label, path in MEASURES
    }
    have = {"open": 0, "done": 0}
    result: dict[str, Any] = {"sizes": [], "repeat": args.repeat, "open_runs": args.open}
    for size in sizes:
        grow(made, size, args.open, have)
        rows = table_sizes()
        say(f"measuring at {size:,} runs ({rows.get('workflow_history', 0):,} history entries)")
        result["sizes"].append({"runs": size, "rows": rows, "measures": measure(paths, admin, approver, args.repeat)})
    base, top = result["sizes"][0], result["sizes"][-1]
    result["goals"] = {}
    for label in paths:
        high, low = top["measures"][label]["p95_ms"], base["measures"][label]["p95_ms"]
        result["goals"][label] = {
            "p95_ms": high,
            "under_300ms": high < 300,
            "ratio_to_smallest": round(high / max(low, 0.1), 2),
            "within_1_5x": high <= 1.5 * max(low, 1.0),
        }
    result["wall_s"] = round(time.monotonic() - started, 1)
    out = args.out or ROOT / "bench" / "results" / f"{time.strftime('%Y%m%d-%H%M%S')}-bigtables.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")

    header = "| measure | " + " | ".join(f"p95 ms at {s['runs']:,}" for s in result["sizes"]) + " | ratio | goal |"
    print(header)
    print("|" + "---|" * (len(result["sizes"]) + 3))
    for label in paths:
        cells = " | ".join(str(s["measures"][label]["p95_ms"]) for s in result["sizes"])
        goal = result["goals"][label]
        ok = "met" if goal["under_300ms"] and goal["within_1_5x"] else "MISSED"
        print(f"| {label} | {cells} | {goal['ratio_to_smallest']} | {ok} |")
    drawn = chart(result, args.chart)
    say(f"results in {out}" + (f", chart in {args.chart}" if drawn else " (no matplotlib: no chart)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
