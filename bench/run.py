"""Switchyard's hot-path benchmark, side by side with a peer (DBOS Transact).

    python3 dev.py bench            # or: make bench   (about 10-13 minutes on 2 cores)
    python3 dev.py bench --quick    # a smoke run (about a minute)
    python3 dev.py bench --help     # every option
    python3 dev.py bench migrate-apply [--migrate-n 5000]   # only the background apply rate
    python3 dev.py bench burst [--broker redis] [--burst-runs 2000]   # decisions during a backlog

On the machine's PostgreSQL (``DATABASE_URL``, default
postgres://postgres@127.0.0.1:5432/switchyard_bench; the bench creates and drops its own
database, never ``postgres``) and Redis (``CELERY_BROKER_URL``, default
redis://127.0.0.1:6379/5), with two real Celery worker processes and beat:

1. throughput: N approval runs (start → service step → human task → completion → done)
   started through ``workflows.operations`` from this process, their tasks completed from a
   separate process; completed runs/s, CPU ms per run (client, workers, PostgreSQL backends),
   transactions per run (``pg_stat_database.xact_commit``);
2. latency: completion → run done at a paced 20 completions/s;
3. the DBOS peer (``../shared/peers/dbos_bench.py``), same shape, same server, own databases,
   and the ceiling of our own design (``../shared/peers/raw_design_bench.py --style leased``:
   the same 6-commit workflow in raw psycopg 3), printed as ours/DBOS and ours/ceiling;
4. scale: worker memory over many commands, compiling a 200-step document, a plan-cache
   hit, the run viewer over a run with 10,000 history entries, the Migrate dialog's render
   time at 1,000 and 100,000 parked runs (parked by SQL; ``python3 dev.py bench
   migrate-dialog`` runs only this one);
5. the Migrate dialog's background apply: runs moved per second by the workers after one
   Apply press (``bench/migrate_apply.py``; target at least 500).

Writes ``bench/results/<time>-<mode>.json`` and prints a one-line summary. See
docs/performance.md for what the figures mean and the last results.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

import burst  # noqa: E402  (bench/ is on sys.path as this script's folder)
import measure  # noqa: E402

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/switchyard_bench"
DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/5"
RESERVED = {"", "postgres", "template0", "template1"}
LATENCY_TAIL_KEEP_MS = 1000.0  # a paced completion slower than this keeps the worker logs


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="bench/run.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="a smoke run: small N, small scale figures (~1 min)")
    ap.add_argument("--migrate-n", type=int, help="runs moved by the background apply (default 5000; quick 1000)")
    ap.add_argument("--no-migrate-apply", action="store_true", help="skip the background apply figure")
    ap.add_argument("--n", type=int, help="runs in the throughput phase (default 2000; quick 300)")
    ap.add_argument("--latency-n", type=int, help="runs in the paced latency phase (default 200; quick 40)")
    ap.add_argument("--rate", type=float, default=20.0, help="paced completions per second (default 20)")
    ap.add_argument(
        "--pool",
        choices=["solo", "prefork"],
        default="solo",
        help="two `--pool=solo` workers (default) or one prefork worker with -c 2",
    )
    ap.add_argument("--starters", type=int, default=4, help="threads calling operations.start (default 4)")
    ap.add_argument("--senders", type=int, default=4, help="threads in the completer process (default 4)")
    ap.add_argument(
        "--soak-commands", type=int, help="commands run for the worker-memory figure (default 20000; quick 1000)"
    )
    ap.add_argument(
        "--history-entries", type=int, help="history entries of the viewer's run (default 10000; quick 1000)"
    )
    ap.add_argument(
        "--rounds",
        type=int,
        help="throughput rounds, ours and the peer's each (default 2; quick 1): the best of each is compared",
    )
    ap.add_argument("--no-peer", action="store_true", help="skip the DBOS peer")
    ap.add_argument(
        "--peer-processes",
        type=int,
        default=2,
        help="DBOS application processes in the throughput phase (default 2, like our 2 workers)",
    )
    ap.add_argument("--no-ceiling", action="store_true", help="skip the raw-design ceiling")
    ap.add_argument("--ceiling-procs", type=int, default=4, help="processes of the raw-design ceiling (default 4)")
    ap.add_argument("--ceiling-seconds", type=float, help="length of the ceiling's run (default 20; quick 5)")
    ap.add_argument("--no-scale", action="store_true", help="skip the scale figures")
    ap.add_argument(
        "only",
        nargs="?",
        choices=["all", "migrate-apply", "migrate-dialog", "burst"],
        default="all",
        help="everything (default), or only one figure: migrate-apply (the Migrate dialog's background "
        "apply rate), migrate-dialog (its render time; no workers, about 3 minutes) or burst (decision "
        "latency and broker queue during a backlog of API starts, bench/burst.py)",
    )
    burst.add_arguments(ap)
    ap.add_argument(
        "--dialog-sizes",
        help="parked runs for the Migrate dialog figure, comma-separated (default 1000,100000; quick 1000,10000)",
    )
    ap.add_argument(
        "--idle-pct",
        type=float,
        default=25.0,
        help="wait before each phase until the machine is below this busy %% (default 25)",
    )
    ap.add_argument("--idle-wait", type=float, help="at most this long, in seconds (default 60; quick 10)")
    ap.add_argument("--timeout", type=float, default=300.0, help="per-phase timeout in seconds")
    ap.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="attach py-spy to the workers during the throughput phase; collapsed stacks into DIR",
    )
    ap.add_argument("--keep-db", action="store_true", help="keep the bench databases afterwards")
    ap.add_argument("--out", type=Path, help="the JSON result file (default bench/results/<time>-<mode>.json)")
    # the completer role (a separate process started by the bench)
    ap.add_argument("--role", choices=["bench", "completer"], default="bench", help=argparse.SUPPRESS)
    ap.add_argument("--tag", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=4, help=argparse.SUPPRESS)
    ap.add_argument("--sync-dir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    quick = args.quick
    args.n = args.n or (300 if quick else 2000)
    args.migrate_n = args.migrate_n or (1000 if quick else 5000)
    args.rounds = max(1, args.rounds or (1 if quick else 2))
    args.latency_n = args.latency_n or (40 if quick else 200)
    args.soak_commands = args.soak_commands if args.soak_commands is not None else (1000 if quick else 20000)
    args.history_entries = args.history_entries or (1000 if quick else 10000)
    args.ceiling_seconds = args.ceiling_seconds or (5.0 if quick else 20.0)
    args.idle_wait = args.idle_wait if args.idle_wait is not None else (10.0 if quick else 60.0)
    args.dialog_sizes = [
        int(x) for x in (args.dialog_sizes or ("1000,10000" if quick else "1000,100000")).split(",") if x.strip()
    ]
    return args


def environment() -> tuple[str, str, str, dict[str, str]]:
    """(server URL, bench database name, broker URL, the environment of every bench process)."""
    url = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    name = measure.database_of(url)
    if name in RESERVED:
        name = measure.database_of(DEFAULT_DATABASE_URL)
    broker = os.environ.get("CELERY_BROKER_URL") or DEFAULT_BROKER_URL
    env = {k: v for k, v in os.environ.items() if k not in ("SWITCHYARD_DB_NAME", "SWITCHYARD_TEST_DB")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DATABASE_URL": measure.with_database(url, name),
            "CELERY_BROKER_URL": broker,
            # the peer runs at WARNING too; per-command INFO lines are a deployment's choice
            "LOG_LEVEL": "WARNING",
            "WORKFLOWS_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
        }
    )
    return url, name, broker, env


def setup_django(env: dict[str, str], process: str) -> None:
    os.environ.update(env)
    os.environ["SWITCHYARD_PROCESS"] = process
    import django

    django.setup()


def say(text: str) -> None:
    print(f"bench: {text}", flush=True)


def main() -> int:
    args = parse_args()
    server_url, dbname, broker, env = environment()
    if args.role == "completer":
        setup_django(env, "bench-completer")
        import hotpath

        hotpath.completer_main(args.tag, args.rate, args.threads, args.sync_dir)
        return 0
    if args.only == "migrate-apply":
        return run_migrate_apply(args, server_url, dbname, broker, env)
    if args.only == "burst":
        return burst.main(args, server_url, env, setup_django, say)
    return run_bench(args, server_url, dbname, broker, env)


def run_migrate_apply(args: argparse.Namespace, server_url: str, dbname: str, broker: str, env: dict[str, str]) -> int:
    """``python3 dev.py bench migrate-apply``: the background apply rate alone, with its own
    database, two workers and beat; writes bench/results/<time>-migrate-apply.json."""
    started = time.monotonic()
    say(f"migrate-apply: database {dbname}, broker {broker}, pool {args.pool}, {args.migrate_n} runs")
    measure.recreate_database(server_url, dbname)
    setup_django(env, "bench-client")
    import hotpath
    import migrate_apply
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from config.celery import app

    app.control.purge()
    logdir = Path(tempfile.mkdtemp(prefix="switchyard-bench-logs-"))
    workers = hotpath.Workers(env=env, pool=args.pool, logdir=logdir)
    try:
        workers.start()
        measure.wait_idle(args.idle_pct, args.idle_wait)
        figures = migrate_apply.measure(args.migrate_n, timeout=args.timeout)
    finally:
        workers.stop()
    shutil.rmtree(logdir, ignore_errors=True)
    result = {
        "mode": "migrate-apply",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(server_url),
        "config": {"pool": args.pool, "migrate_n": args.migrate_n},
        "ours": {"migrate_apply": figures},
        "targets": {"migrate_apply_ge_500_runs_per_s": figures["runs_per_s"] >= migrate_apply.TARGET_RUNS_PER_S},
        "wall_s": round(time.monotonic() - started, 1),
    }
    out = args.out or BENCH / "results" / f"{time.strftime('%Y%m%d-%H%M%S')}-migrate-apply.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    say(migrate_apply.line(figures) + f" -> {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


def dialog_only(args: argparse.Namespace, server_url: str, dbname: str, env: dict[str, str]) -> int:
    """``bench migrate-dialog``: only the Migrate dialog's render figure, on a database of its own."""
    started = time.monotonic()
    say(f"migrate-dialog: database {dbname}, sizes {', '.join(f'{n:,}' for n in args.dialog_sizes)}")
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import scale

    figures = scale.migrate_dialog_figures(args.dialog_sizes)
    result = {
        "mode": "migrate-dialog",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(server_url),
        "scale": {"migrate_dialog": figures},
    }
    result["targets"] = dialog_targets(figures)
    result["wall_s"] = round(time.monotonic() - started, 1)
    out = args.out or BENCH / "results" / f"{time.strftime('%Y%m%d-%H%M%S')}-migrate-dialog.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    missed = [k for k, ok in result["targets"].items() if not ok]
    print(
        "bench: "
        + dialog_line(figures)
        + " | "
        + ("targets met" if not missed else f"MISSED {', '.join(missed)}")
        + f" -> {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}",
        flush=True,
    )
    return 0


def dialog_targets(figures: dict[str, Any]) -> dict[str, bool]:
    """Render under 200 ms at every size, and flat: the largest backlog at most twice the smallest."""
    found = {"migrate_dialog_render_lt_200ms": figures["worst_median_ms"] < 200}
    if figures.get("growth") is not None:
        found["migrate_dialog_render_flat"] = figures["growth"] <= 2
    return found


def dialog_line(figures: dict[str, Any]) -> str:
    return "migrate dialog " + ", ".join(
        f"{f['parked_runs']:,} parked {f['render_ms']['median']} ms (p95 {f['render_ms']['p95']})"
        for f in figures["sizes"]
    )


def run_bench(args: argparse.Namespace, server_url: str, dbname: str, broker: str, env: dict[str, str]) -> int:
    if args.only == "migrate-dialog":
        return dialog_only(args, server_url, dbname, env)
    started = time.monotonic()
    mode = "quick" if args.quick else "full"
    peer_db = f"{dbname}_dbos"
    peer_dbs = [f"{_peer_round_db(peer_db, k)}_{i}" for k in range(args.rounds) for i in range(args.peer_processes)] + [
        f"{peer_db}_lat"
    ]
    say(
        f"{mode} run: database {dbname} on {measure.with_database(server_url, '')}, broker {broker}, "
        f"pool {args.pool}, N={args.n}"
    )
    measure.recreate_database(server_url, dbname)

    def cleanup() -> None:
        if not args.keep_db:
            for name in [dbname, *peer_dbs]:
                try:
                    measure.drop_database(server_url, name)
                except Exception as exc:
                    print(f"bench: could not drop {name} ({type(exc).__name__})", file=sys.stderr)

    atexit.register(cleanup)
    setup_django(env, "bench-client")
    import hotpath
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    hotpath.deploy()
    from config.celery import app

    app.control.purge()  # nothing left over from an earlier, interrupted bench

    result: dict[str, Any] = {
        "mode": mode,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(server_url),
        "config": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k not in ("role", "tag", "threads", "sync_dir")
        },
    }
    probe = measure.Probe(measure.with_database(server_url, dbname))
    logdir = Path(tempfile.mkdtemp(prefix="switchyard-bench-logs-"))
    workers = hotpath.Workers(env=env, pool=args.pool, logdir=logdir)
    starter = hotpath.Starter(args.starters)
    ctx = hotpath.Context(
        env=env,
        probe=probe,
        workers=workers,
        starter=starter,
        sender_threads=args.senders,
        timeout=args.timeout,
        idle_pct=args.idle_pct,
        idle_wait_s=args.idle_wait,
        profile_dir=args.profile,
    )
    ours: dict[str, Any] = {"pool": args.pool}
    try:
        workers.start()
        say(f"workers started ({args.pool}); logs in {logdir}")
        hotpath.warm_up(ctx)
        ours["worker_rss_mb_after_warm_up"] = workers.rss_mb()
        rounds = []
        for k in range(args.rounds):
            say(f"throughput: {args.n} runs" + (f" (round {k + 1} of {args.rounds})" if args.rounds > 1 else ""))
            rounds.append(hotpath.throughput(ctx, args.n, tag="tp" if k == 0 else f"tp{k + 1}"))
            say(
                f"  {rounds[-1]['end_to_end_runs_per_s']} runs/s, "
                f"{rounds[-1]['cpu_ms_per_run']['total']} ms CPU/run, "
                f"{rounds[-1]['transactions_per_run']} tx/run"
            )
        ours["throughput"] = best_round(rounds)
        ours["throughput_rounds"] = [round_summary(r) for r in rounds]
        say(f"latency: {args.latency_n} completions at {args.rate}/s")
        ours["latency"] = hotpath.latency(ctx, args.latency_n, args.rate)
        say(
            f"  p50 {ours['latency']['completion_to_done_ms']['p50']} ms, "
            f"p95 {ours['latency']['completion_to_done_ms']['p95']} ms"
        )
        if args.soak_commands and not args.no_scale:
            say(f"worker memory: {args.soak_commands} more commands")
            ours["worker_memory"] = hotpath.soak(ctx, args.soak_commands, batch=1000 if not args.quick else 500)
            say(
                f"  RSS {ours['worker_memory']['samples'][-1]['rss_mb']} MiB, growth after the first batch "
                f"{ours['worker_memory']['growth_after_first_batch_mb']} MiB"
            )
        if not args.no_migrate_apply:
            import migrate_apply

            measure.wait_idle(args.idle_pct, args.idle_wait)
            say(f"migrate: background apply of {args.migrate_n} parked runs")
            ours["migrate_apply"] = migrate_apply.measure(args.migrate_n, timeout=args.timeout)
            say(f"  {migrate_apply.line(ours['migrate_apply'])}")
    finally:
        workers.stop()
        starter.close()
        probe.close()
    tail_ms = ours.get("latency", {}).get("completion_to_done_ms", {}).get("max", 0.0)
    if tail_ms > LATENCY_TAIL_KEEP_MS:
        say(f"latency tail {tail_ms} ms: worker logs kept in {logdir}")
    elif not args.keep_db:
        shutil.rmtree(logdir, ignore_errors=True)  # kept when the phases failed, for their logs
    result["ours"] = ours

    if not args.no_scale:
        import scale

        say("scale: compile a 200-step document, plan-cache hit")
        result["scale"] = {"compile": scale.compile_figures()}
        say(
            f"  compile {result['scale']['compile']['compile_ms']['median']} ms, "
            f"hit {result['scale']['compile']['plan_cache_hit_ms']} ms"
        )
        say(f"scale: a run with {args.history_entries} history entries and its viewer page")
        result["scale"]["history"] = scale.history_figures(args.history_entries)
        say(f"  viewer {result['scale']['history']['run_viewer']}")
        sizes = ", ".join(f"{n:,}" for n in args.dialog_sizes)
        say(f"scale: the Migrate dialog over {sizes} parked runs (parked by SQL)")
        result["scale"]["migrate_dialog"] = scale.migrate_dialog_figures(args.dialog_sizes)
        say(f"  {dialog_line(result['scale']['migrate_dialog'])}")

    from django.db import connections

    connections.close_all()
    if not args.no_peer:
        if not __import__("peer").available():
            say("the peer scripts (../shared/peers) are missing: no peer figures")
        else:
            import peer

            peer_rounds = []
            for k in range(args.rounds):
                measure.wait_idle(args.idle_pct, args.idle_wait)
                say(
                    f"peer: DBOS, {args.n} workflows in {args.peer_processes} processes"
                    + (f" (round {k + 1} of {args.rounds})" if args.rounds > 1 else "")
                )
                peer_rounds.append(
                    peer.throughput(server_url, args.n, args.peer_processes, _peer_round_db(peer_db, k), args.timeout)
                )
                say(f"  {peer_rounds[-1]['end_to_end_runs_per_s']} runs/s")
            result["dbos"] = {
                "throughput": best_round(peer_rounds),
                "throughput_rounds": [round_summary(r) for r in peer_rounds],
            }
            measure.wait_idle(args.idle_pct, args.idle_wait)
            say(f"peer: DBOS latency, {args.latency_n} sends at {args.rate}/s")
            result["dbos"]["latency"] = peer.latency(
                server_url, args.latency_n, args.rate, f"{peer_db}_lat", args.timeout
            )
            say(f"  p50 {result['dbos']['latency']['completion_to_done_ms']['p50']} ms")
    if not args.no_ceiling:
        import peer

        if not (peer.PEERS / "raw_design_bench.py").exists():
            say("the peer scripts (../shared/peers) are missing: no ceiling figure")
        else:
            measure.wait_idle(args.idle_pct, args.idle_wait)
            say(f"ceiling: our design in raw SQL, {args.ceiling_procs} processes, {args.ceiling_seconds:g} s")
            result["ceiling"] = peer.ceiling(
                server_url, args.ceiling_procs, args.ceiling_seconds, f"{peer_db}_ceiling", args.timeout
            )
            say(f"  {result['ceiling']['runs_per_s']} runs/s, {result['ceiling']['commits_per_run']} commits/run")
    result["ratios"] = ratios(result)
    result["targets"] = targets(result)
    result["wall_s"] = round(time.monotonic() - started, 1)

    out = args.out or BENCH / "results" / f"{time.strftime('%Y%m%d-%H%M%S')}-{mode}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(one_line(result, out), flush=True)
    return 0


def _peer_round_db(peer_db: str, k: int) -> str:
    return peer_db if k == 0 else f"{peer_db}{k + 1}"  # a fresh set of databases per round


def best_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the highest end-to-end rate. Other work on the machine only ever slows a
    round down, so the best of each side's rounds is the fairest comparison here (the machine's
    speed moves by 10-40 % between runs minutes apart); every round is kept in the result."""
    return max(rounds, key=lambda r: r["end_to_end_runs_per_s"])


def round_summary(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "end_to_end_runs_per_s": r["end_to_end_runs_per_s"],
        "phase1_runs_per_s": r["phase1_runs_per_s"],
        "phase2_runs_per_s": r["phase2_runs_per_s"],
        "cpu_ms_per_run_total": r["cpu_ms_per_run"]["total"],
    }


def machine(server_url: str) -> dict[str, Any]:
    import psutil
    import psycopg

    with psycopg.connect(measure.with_database(server_url, "postgres"), autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN ('shared_buffers','synchronous_commit','fsync',"
                "'max_connections','wal_level')"
            ).fetchall()
        )
    return {
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "postgresql": version,
        "postgresql_settings": settings,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def ratios(result: dict[str, Any]) -> dict[str, Any]:
    ours, dbos, ceiling = result.get("ours", {}), result.get("dbos"), result.get("ceiling")
    found: dict[str, Any] = {}
    if ceiling:
        found["throughput_ours_over_ceiling"] = round(
            ours["throughput"]["end_to_end_runs_per_s"] / ceiling["runs_per_s"], 2
        )
    if not dbos:
        return found
    tp = ours["throughput"]["end_to_end_runs_per_s"] / dbos["throughput"]["end_to_end_runs_per_s"]
    ol, dl = ours["latency"]["completion_to_done_ms"], dbos["latency"]["completion_to_done_ms"]
    ours_rounds = [r["end_to_end_runs_per_s"] for r in ours.get("throughput_rounds", [])]
    dbos_rounds = [r["end_to_end_runs_per_s"] for r in dbos.get("throughput_rounds", [])]
    return found | {
        "throughput_ours_over_dbos": round(tp, 2),  # best round over best round
        # round k of ours over round k of the peer (not run at the same moment: indicative)
        "throughput_ours_over_dbos_by_round": [round(o / d, 2) for o, d in zip(ours_rounds, dbos_rounds, strict=False)],
        "latency_p50_ours_over_dbos": round(ol["p50"] / dl["p50"], 2),
        "latency_p95_ours_over_dbos": round(ol["p95"] / dl["p95"], 2),
        "cpu_per_run_ours_over_dbos": round(
            ours["throughput"]["cpu_ms_per_run"]["total"] / dbos["throughput"]["cpu_ms_per_run"]["total"], 2
        ),
    }


def targets(result: dict[str, Any]) -> dict[str, Any]:
    ours = result["ours"]
    r = result.get("ratios") or {}
    # issue #32's goals; write transactions are judged by the transaction ids they consumed
    # (cluster-wide: the bench waits for an idle machine), not by pg_stat_database's commits,
    # which count read-only transactions too
    found: dict[str, Any] = {
        "cpu_total_le_7ms": ours["throughput"]["cpu_ms_per_run"]["total"] <= 7,
        "transactions_le_6": ours["throughput"]["xids_per_run_cluster_wide"] <= 6,
        "latency_p95_le_10ms": ours["latency"]["completion_to_done_ms"]["p95"] <= 10,
    }
    if "throughput_ours_over_dbos" in r:
        found["throughput_ge_3x_dbos"] = r["throughput_ours_over_dbos"] >= 3
        found["latency_p50_le_dbos"] = r["latency_p50_ours_over_dbos"] <= 1
    if "throughput_ours_over_ceiling" in r:
        found["throughput_ge_70pct_of_ceiling"] = r["throughput_ours_over_ceiling"] >= 0.7
    if "migrate_apply" in ours:
        found["migrate_apply_ge_500_runs_per_s"] = ours["migrate_apply"]["runs_per_s"] >= 500
    scale = result.get("scale")
    if scale:
        found["compile_200_steps_lt_100ms"] = scale["compile"]["compile_ms"]["median"] < 100
        found["plan_cache_hit_lt_0_1ms"] = scale["compile"]["plan_cache_hit_ms"] < 0.1
        viewer = scale["history"]["run_viewer"]
        if viewer.get("available"):
            found["viewer_10k_history_lt_300ms"] = viewer["ms"]["median"] < 300
        if scale.get("migrate_dialog"):
            found.update(dialog_targets(scale["migrate_dialog"]))
    return found


def one_line(result: dict[str, Any], out: Path) -> str:
    ours = result["ours"]
    tp, lat = ours["throughput"], ours["latency"]["completion_to_done_ms"]
    parts = [f"ours {tp['end_to_end_runs_per_s']} runs/s"]
    if result.get("dbos"):
        d = result["dbos"]
        r = result["ratios"]
        parts[0] += f" vs DBOS {d['throughput']['end_to_end_runs_per_s']} ({r['throughput_ours_over_dbos']}x)"
        if len(ours.get("throughput_rounds", [])) > 1:
            rounds = lambda side: "/".join(str(x["end_to_end_runs_per_s"]) for x in side["throughput_rounds"])  # noqa: E731
            parts[0] += f" [best of rounds: ours {rounds(ours)}, DBOS {rounds(d)}]"
        parts.append(
            f"p50 {lat['p50']} ms vs {d['latency']['completion_to_done_ms']['p50']} ms "
            f"({r['latency_p50_ours_over_dbos']}x), p95 {lat['p95']} ms"
        )
    else:
        parts.append(f"p50 {lat['p50']} ms, p95 {lat['p95']} ms")
    if result.get("ceiling"):
        parts.append(
            f"ceiling {result['ceiling']['runs_per_s']} runs/s "
            f"(ours {round(100 * result['ratios']['throughput_ours_over_ceiling'])} %)"
        )
    parts.append(
        f"CPU {tp['cpu_ms_per_run']['total']} ms/run, {tp['transactions_per_run']} tx/run "
        f"({tp['xids_per_run_cluster_wide']} writing)"
    )
    if "scale" in result:
        s = result["scale"]
        viewer = s["history"]["run_viewer"]
        parts.append(
            f"compile {s['compile']['compile_ms']['median']} ms, hit {s['compile']['plan_cache_hit_ms']} ms"
            + (f", viewer {viewer['ms']['median']} ms" if viewer.get("available") else "")
        )
        if s.get("migrate_dialog"):
            parts.append(dialog_line(s["migrate_dialog"]))
    if "worker_memory" in ours:
        parts.append(f"worker RSS growth {ours['worker_memory']['growth_after_first_batch_mb']} MiB")
    if "migrate_apply" in ours:
        parts.append(f"background migrate {ours['migrate_apply']['runs_per_s']} runs/s")
    missed = [k for k, ok in result["targets"].items() if not ok and "stretch" not in k]
    parts.append("targets met" if not missed else f"MISSED {', '.join(missed)}")
    try:
        shown = out.relative_to(ROOT)
    except ValueError:
        shown = out
    return "bench: " + " | ".join(parts) + f" -> {shown}"


if __name__ == "__main__":
    sys.exit(main())
