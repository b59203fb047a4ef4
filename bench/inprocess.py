"""The hot path in one process, without a broker: what the engine itself costs per run.

    .venv/bin/python bench/inprocess.py [--n 400] [--profile cumulative|tottime] [--statements] [--backend-stats]

Approval runs go through ``workflows.operations`` and the Celery task functions themselves
(``workflows.run``, ``workflows.deliver``) called in this process from a FIFO that stands in
for the broker, on a database of its own (``<bench database>_inprocess``, dropped afterwards).
It reports messages, statements (as psycopg sends them), transactions and CPU per run — the
client and executor CPU of this process and the CPU of its PostgreSQL backend — with none of
the noise of worker processes sharing two cores. ``--profile`` prints a cProfile of CPU time;
``--backend-stats`` the backend's CPU statement by statement (``bench/backend_stats.py``).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

import measure  # noqa: E402
from run import DEFAULT_DATABASE_URL, RESERVED  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--profile", choices=["cumulative", "tottime"], help="print a cProfile (CPU time)")
    ap.add_argument("--statements", action="store_true", help="list the statements per run by kind")
    ap.add_argument(
        "--backend-stats",
        action="store_true",
        help="the PostgreSQL backend's CPU per statement (log_statement_stats; needs a superuser and the server log)",
    )
    ap.add_argument(
        "--drop-index",
        action="append",
        default=[],
        metavar="NAME",
        help="drop this index after migrating, to measure what it costs the hot path (repeatable)",
    )
    ap.add_argument("--server-log", type=Path, help="the server's log file (default: Debian's for its version)")
    args = ap.parse_args()

    url = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    name = measure.database_of(url)
    name = (measure.database_of(DEFAULT_DATABASE_URL) if name in RESERVED else name) + "_inprocess"
    measure.recreate_database(url, name)
    os.environ.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=measure.with_database(url, name),
        LOG_LEVEL="WARNING",
        WORKFLOWS_LOG_LEVEL="WARNING",
        SWITCHYARD_PROCESS="bench-inprocess",
    )
    try:
        run(args)
    finally:
        from django.db import connections

        connections.close_all()
        measure.drop_database(url, name)


def run(args: argparse.Namespace) -> None:
    import django

    django.setup()
    import hotpath
    import psutil
    import psycopg
    from django.core.management import call_command
    from django.db import connection

    from workflows import operations, tasks
    from workflows.engine import outbox, wakeups

    call_command("migrate", verbosity=0)
    with connection.cursor() as cur:
        for index in args.drop_index:
            cur.execute(f'DROP INDEX "{index}"')
    hotpath.deploy()

    queue: collections.deque[tuple[str, Any]] = collections.deque()
    wakeups.set_notifier(
        lambda items: queue.extend(("run", run_id) for run_id, _ in items),
        lambda ids: queue.extend(("deliver", i) for i in ids),
    )
    tasks.deliver.delay = lambda i: queue.append(("deliver", i))  # type: ignore[method-assign]

    def pump() -> int:
        n = 0
        while queue:
            kind, arg = queue.popleft()
            (tasks.run_instance if kind == "run" else tasks.deliver)(arg)
            n += 1
        return n

    def open_tasks(tag: str) -> list[Any]:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT t.id FROM workflow_tasks t JOIN workflow_runs r ON r.id = t.run_id "
                "WHERE t.status = 'OPEN' AND r.business_key LIKE %s",
                [f"{tag}-%"],
            )
            return [row[0] for row in cur.fetchall()]

    def one_batch(n: int, tag: str) -> int:
        for i in range(n):
            operations.start(definition_id=hotpath.DEFINITION_ID, payload={"i": i}, business_key=f"{tag}-{i}")
        messages = pump()
        for task_id in open_tasks(tag):
            operations.complete_task(task_id=task_id, decision="approve")
        return messages + pump()

    outbox.enable_carried_marks()  # as a Celery worker does (tasks._carry_delivered_marks)
    one_batch(10, "warm")  # plans, prepared statements, connections
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        backend = psutil.Process(cur.fetchone()[0])
    probe = measure.Probe(os.environ["DATABASE_URL"])

    counts: collections.Counter[str] = collections.Counter()
    opening: collections.Counter[str] = collections.Counter()
    began = [False]  # the engine just queued a BEGIN (pipeline._begin)
    from workflows.engine import pipeline as engine_pipeline

    original_begin = engine_pipeline._begin

    def noting_begin(raw: Any) -> None:
        began[0] = not raw.autocommit and raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        original_begin(raw)

    engine_pipeline._begin = noting_begin  # type: ignore[assignment]
    original = psycopg.Cursor.execute
    original_queue = engine_pipeline._queue  # a statement queued in a pipeline (not through execute)

    def counting(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        note(self, query)
        return original(self, query, params, **kw)

    def counting_queue(cur: Any, query: Any, params: Any) -> None:
        note(cur, query)
        original_queue(cur, query, params)

    def note(self: Any, query: Any) -> None:
        words = (query if isinstance(query, str) else str(query)).split()
        named = 1 if words[:1] == ["SAVEPOINT"] else 2 if words[:2] == ["RELEASE", "SAVEPOINT"] else 0
        key = " ".join(words[:named] if named else words[:4])[:60]  # savepoint names differ each time
        counts[key] += 1
        raw = self.connection
        # this statement opens a transaction: its own (autocommit), or the engine's BEGIN is
        # queued in the pipeline just before it (the connection is busy and not yet in one)
        status = raw.info.transaction_status
        if (
            raw.autocommit
            or status == psycopg.pq.TransactionStatus.IDLE
            or (status == psycopg.pq.TransactionStatus.ACTIVE and raw._pipeline and began[0])
        ):
            opening[key] += 1
        began[0] = False

    stats_log: Path | None = None
    if args.backend_stats:
        import backend_stats

        stats_log = args.server_log or backend_stats.default_log(connection.pg_version)
        log_offset = stats_log.stat().st_size
        with connection.cursor() as cur:
            backend_stats.enable(cur)
    x0 = probe.xact_commit()
    own0 = probe.own_xacts
    pg0 = sum(backend.cpu_times()[:2])
    profile = cProfile.Profile(time.process_time) if args.profile else None
    psycopg.Cursor.execute = counting  # type: ignore[method-assign]
    engine_pipeline._queue = counting_queue  # type: ignore[assignment]
    c0, t0 = time.process_time(), time.perf_counter()
    if profile:
        profile.enable()
    messages = one_batch(args.n, "run")
    outbox.flush_marks()  # what the last wake-up still carried
    if profile:
        profile.disable()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    psycopg.Cursor.execute = original  # type: ignore[method-assign]
    engine_pipeline._queue = original_queue  # type: ignore[assignment]
    pg = sum(backend.cpu_times()[:2]) - pg0
    if stats_log is not None:
        with connection.cursor() as cur:
            backend_stats.disable(cur)
    x1 = probe.xact_commit()
    xacts = x1 - x0 - (probe.own_xacts - own0) - 1  # the batch's open-task read
    n = args.n
    if profile:
        pstats.Stats(profile).sort_stats(args.profile).print_stats(int(os.environ.get("PROFILE_LINES", "40")))
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM workflow_outbox WHERE status <> 'DELIVERED'")
        undelivered = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM workflow_runs WHERE status <> 'COMPLETED'")
        unfinished = cur.fetchone()[0]
    if undelivered or unfinished:
        print(f"WARNING: {undelivered} intent(s) not marked delivered, {unfinished} run(s) not completed")
    print(f"runs {n}: {n / wall:.0f} runs/s in one process")
    print(
        f"per run: {messages / n:.2f} messages, {sum(counts.values()) / n:.1f} statements, {xacts / n:.2f} transactions"
    )
    print(f"CPU per run: client and executor {cpu * 1000 / n:.2f} ms, PostgreSQL backend {pg * 1000 / n:.2f} ms")
    if args.statements:
        for text, k in counts.most_common(30):
            print(f"  {k / n:5.2f}  {text}")
        print("statements that open a transaction, per run:")
        for text, k in opening.most_common(15):
            print(f"  {k / n:5.2f}  {text}")
    if stats_log is not None:
        with stats_log.open("rb") as log:
            log.seek(log_offset)
            text = log.read().decode("utf-8", "replace")
        backend_stats.report(backend_stats.summarise(text, backend.pid), n)
    probe.close()


if __name__ == "__main__":
    main()
