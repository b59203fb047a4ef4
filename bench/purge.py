"""Purge by batched DELETE vs dropping time partitions, on a history table of 1M rows.

    python3 bench/purge.py                    # 1,000,000 rows (about a minute on 2 cores)
    python3 bench/purge.py --rows 200000      # quicker

On the machine's PostgreSQL (``DATABASE_URL``, default postgres://postgres@127.0.0.1:5432/postgres
for the server; the bench creates and drops its own database ``switchyard_bench_purge``).
Builds two copies of a history table shaped like ``workflow_history`` (the largest table):

- ``plain``: as shipped (bigint id primary key, unique (run_id, seq)), purged the way
  ``workflows.engine.retention`` does it: the runs in batches of 500, each batch one
  transaction deleting the batch's rows by ``run_id``;
- ``parted``: partitioned by month of ``at`` (12 partitions); the primary key must then be
  (id, at) and the per-run position unique (run_id, seq, at). Purged by DETACH + DROP of the
  old months. The data are laid out in its favour: every run's entries fall in one month.

Half of the rows (the runs of the six oldest months) are purged. Reported: total time of the
purge, the longest single transaction (how long a purge holds its locks), WAL written, and what
the partitioning costs the hot path: inserting the rows and reading one run's history by
run_id (the run page, every segment's history append reads the run's position). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import psycopg

DB = "switchyard_bench_purge"
RUNS_PER_BATCH = 500
MONTHS = 12

SCHEMA = """
CREATE TABLE plain (
  id bigserial PRIMARY KEY, run_id uuid NOT NULL, seq int NOT NULL, type varchar(40) NOT NULL,
  at timestamptz NOT NULL, step varchar(255) NOT NULL DEFAULT '', patch jsonb, payload jsonb,
  UNIQUE (run_id, seq));
CREATE TABLE parted (
  id bigserial, run_id uuid NOT NULL, seq int NOT NULL, type varchar(40) NOT NULL,
  at timestamptz NOT NULL, step varchar(255) NOT NULL DEFAULT '', patch jsonb, payload jsonb,
  PRIMARY KEY (id, at), UNIQUE (run_id, seq, at)) PARTITION BY RANGE (at);
"""

# run r (0-based) lives in month r % MONTHS; its entries are seq 1..per_run
FILL = """
INSERT INTO {table} (run_id, seq, type, at, step, patch, payload)
SELECT md5(r::text)::uuid, s, 'DECISION',
       timestamptz '2025-01-01' + make_interval(months => mod(r, {months})) + make_interval(secs => s),
       'step-' || s, jsonb_build_array(jsonb_build_object('op', 'replace', 'path', '/n', 'value', s)),
       jsonb_build_object('amount', 1000.10, 'note', repeat('x', 40))
FROM generate_series(0, %(runs)s - 1) AS r, generate_series(1, %(per_run)s) AS s
"""


def _url(base: str, name: str) -> str:
    head, _, _ = base.rpartition("/")
    return f"{head}/{name}"


def _wal(cur: Any) -> int:
    cur.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
    return int(cur.fetchone()[0])


def _size(cur: Any, table: str) -> int:
    cur.execute(
        "SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree(%s::regclass)"
        " WHERE isleaf), pg_total_relation_size(%s::regclass))",
        [table, table],
    )
    return int(cur.fetchone()[0])


def _read_run(cur: Any, table: str, runs: int, samples: int = 400) -> dict[str, float]:
    times = []
    for i in range(samples):
        run = (i * 7919) % runs
        started = time.perf_counter()
        cur.execute(f"SELECT * FROM {table} WHERE run_id = md5(%s::text)::uuid ORDER BY seq", [run])
        cur.fetchall()
        times.append((time.perf_counter() - started) * 1000)
    return {"p50_ms": round(statistics.median(times), 3), "p95_ms": round(sorted(times)[int(samples * 0.95)], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--per-run", type=int, default=20, help="history entries per run")
    args = parser.parse_args()
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    runs = args.rows // args.per_run
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB}")
        admin.execute(f"CREATE DATABASE {DB}")
    result: dict[str, Any] = {"rows": runs * args.per_run, "runs": runs, "per_run": args.per_run}
    try:
        with psycopg.connect(_url(base, DB), autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(SCHEMA)
            for month in range(MONTHS):
                cur.execute(
                    f"CREATE TABLE parted_{month} PARTITION OF parted FOR VALUES FROM "
                    f"(timestamptz '2025-01-01' + interval '{month} months') "
                    f"TO (timestamptz '2025-01-01' + interval '{month + 1} months')"
                )
            for table in ("plain", "parted"):
                started = time.perf_counter()
                cur.execute(FILL.format(table=table, months=MONTHS), {"runs": runs, "per_run": args.per_run})
                cur.execute(f"ANALYZE {table}")
                result[f"{table}_insert_s"] = round(time.perf_counter() - started, 2)
                result[f"{table}_size_mb"] = round(_size(cur, table) / 2**20, 1)
                result[f"{table}_read_one_run"] = _read_run(cur, table, runs)

            # batched DELETE: the runs of the six oldest months, 500 runs per transaction
            old = [r for r in range(runs) if r % MONTHS < MONTHS // 2]
            wal = _wal(cur)
            batches = []
            started = time.perf_counter()
            for i in range(0, len(old), RUNS_PER_BATCH):
                batch = old[i : i + RUNS_PER_BATCH]
                t0 = time.perf_counter()
                with conn.transaction():
                    cur.execute(
                        "DELETE FROM plain WHERE run_id IN (SELECT md5(r::text)::uuid FROM unnest(%s::int[]) AS r)",
                        [batch],
                    )
                batches.append((time.perf_counter() - t0) * 1000)
            result["delete"] = {
                "total_s": round(time.perf_counter() - started, 2),
                "batches": len(batches),
                "batch_p50_ms": round(statistics.median(batches), 1),
                "batch_max_ms": round(max(batches), 1),
                "wal_mb": round((_wal(cur) - wal) / 2**20, 1),
                "size_after_mb": round(_size(cur, "plain") / 2**20, 1),
            }
            started = time.perf_counter()
            cur.execute("VACUUM plain")
            result["delete"]["vacuum_s"] = round(time.perf_counter() - started, 2)

            # partitions: DETACH (CONCURRENTLY, so writers to the other months never wait) + DROP
            wal = _wal(cur)
            drops = []
            started = time.perf_counter()
            for month in range(MONTHS // 2):
                t0 = time.perf_counter()
                cur.execute(f"ALTER TABLE parted DETACH PARTITION parted_{month} CONCURRENTLY")
                cur.execute(f"DROP TABLE parted_{month}")
                drops.append((time.perf_counter() - t0) * 1000)
            result["drop_partition"] = {
                "total_s": round(time.perf_counter() - started, 3),
                "partitions": len(drops),
                "each_max_ms": round(max(drops), 1),
                "wal_mb": round((_wal(cur) - wal) / 2**20, 2),
                "size_after_mb": round(_size(cur, "parted") / 2**20, 1),
            }
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {DB}")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
