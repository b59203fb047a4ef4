"""The burst bench (issue #45): decisions applied within a second while a backlog drains.

    python3 dev.py bench burst                               # 2,000 runs, 100 decisions, embedded broker
    python3 dev.py bench burst --broker redis                # the same on Redis (127.0.0.1:6379/7)
    python3 dev.py bench burst --burst-runs 200 --decisions 20 --decision-rate 4   # a small run

On the machine's PostgreSQL (``DATABASE_URL``, default postgres://postgres@127.0.0.1:5432/...;
the bench creates and drops its own database ``switchyard_bench_burst``), with two real Celery
workers and beat (``hotpath.Workers``) on the embedded filesystem broker (a folder of its own
under a temporary ``SWITCHYARD_DATA_DIR``) or on Redis (``--redis-url``, default DB 7).

1. ``--decisions`` runs of the bench approval are started and left waiting at their task;
2. ``--burst-runs`` runs are started through the API (``POST /api/v1/runs/``, in-process
   ``APIClient``, one request after the other as fast as it answers), each a service call
   (an outbox delivery) and then a task;
3. while that backlog drains, the decisions' tasks are completed at ``--decision-rate`` per
   second (``operations.complete_task``);
4. a sampler reads, every ``--sample-seconds``, the broker queue (its length, and how many of
   its messages repeat another's task and arguments: duplicates) and the open work items in
   the database (due commands, due outbox intents, open bulk operations, applying background
   migrations, plus the two beat sweeps).

Reports p50/p99 decision → applied (the COMPLETION command's ``recorded_at`` → ``settled_at``,
both on the database clock), the peak queue length against the open work items at that
moment (the largest excess), and the peak of duplicate messages. Goals: p99 ≤ 1 s; peak queue
≤ open work + 50; 0 duplicates. Writes bench/results/<time>-burst-<broker>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import measure

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DATABASE = "switchyard_bench_burst"
DEFAULT_REDIS = "redis://127.0.0.1:6379/7"
GOAL_P99_MS = 1000.0
GOAL_QUEUE_SLACK = 50

OPEN_WORK_SQL = """
SELECT (SELECT count(*) FROM workflow_commands
        WHERE status IN ('PENDING', 'DEFERRED', 'CLAIMED') AND available_at <= now())
     + (SELECT count(*) FROM workflow_outbox
        WHERE status IN ('PENDING', 'DELIVERING') AND available_at <= now())
     + (SELECT count(*) FROM workflow_bulk_operations WHERE status IN ('PENDING', 'RUNNING'))
     + (SELECT count(*) FROM workflow_migration_records WHERE status = 'APPLYING' AND background)
"""
SWEEPS = 2  # workflows.sweep and capture.sweep: one queued each is work, not a duplicate


def add_arguments(ap: argparse.ArgumentParser) -> None:
    group = ap.add_argument_group("burst (python3 dev.py bench burst)")
    group.add_argument("--burst-runs", type=int, default=2000, help="runs started through the API (default 2000)")
    group.add_argument("--decisions", type=int, default=100, help="task decisions made meanwhile (default 100)")
    group.add_argument("--decision-rate", type=float, default=5.0, help="decisions per second (default 5)")
    group.add_argument(
        "--broker", choices=["filesystem", "redis"], default="filesystem", help="the embedded broker or Redis"
    )
    group.add_argument("--redis-url", default=DEFAULT_REDIS, help=f"Redis for --broker redis (default {DEFAULT_REDIS})")
    group.add_argument("--sample-seconds", type=float, default=0.5, help="sampling interval (default 0.5)")
    group.add_argument("--clients", type=int, default=4, help="API clients starting runs at once (threads, default 4)")


def prepare_env(args: argparse.Namespace, env: dict[str, str], server_url: str) -> tuple[dict[str, str], str, Path]:
    """The bench processes' environment for the chosen broker and the bench's own database."""
    env = dict(env)
    env["DATABASE_URL"] = measure.with_database(server_url, DATABASE)
    data_dir = Path(tempfile.mkdtemp(prefix="switchyard-bench-burst-"))
    if args.broker == "redis":
        env["CELERY_BROKER_URL"] = args.redis_url
        broker = args.redis_url
    else:
        env.pop("CELERY_BROKER_URL", None)
        env["SWITCHYARD_DATA_DIR"] = str(data_dir)
        broker = f"filesystem ({data_dir / 'broker'})"
    return env, broker, data_dir


class Queue:
    """The default queue's messages: (task name, arguments) of each, read without consuming."""

    def __init__(self) -> None:
        from django.conf import settings

        from config.celery import app

        self.name = str(app.conf.task_default_queue)
        self.url = str(settings.CELERY_BROKER_URL)
        self.redis: Any = None
        self.folder: Path | None = None
        if self.url.startswith("redis"):
            import redis

            self.redis = redis.Redis.from_url(self.url)
        else:
            self.folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])

    def messages(self) -> list[tuple[str, str]]:
        raw: list[bytes] = []
        if self.redis is not None:
            raw = list(self.redis.lrange(self.name, 0, -1))
        else:
            assert self.folder is not None
            for path in self.folder.glob(f"*.{self.name}.msg"):
                try:
                    raw.append(path.read_bytes())
                except OSError:
                    continue  # consumed meanwhile
        found = []
        for item in raw:
            try:
                headers = json.loads(item).get("headers") or {}
            except ValueError:
                continue
            found.append((str(headers.get("task", "?")), str(headers.get("argsrepr", ""))))
        return found


class Sampler(threading.Thread):
    def __init__(self, queue: Queue, probe: measure.Probe, interval: float) -> None:
        super().__init__(daemon=True)
        self.queue, self.probe, self.interval = queue, probe, interval
        self.samples: list[dict[str, Any]] = []
        self.duplicates_by_task: Counter[str] = Counter()
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self.db_t0 = float(probe.scalar("SELECT extract(epoch FROM clock_timestamp())"))  # type: ignore[arg-type]

    def run(self) -> None:
        while not self.stop.is_set():
            messages = self.queue.messages()
            work = int(self.probe.scalar(OPEN_WORK_SQL)) + SWEEPS  # type: ignore[call-overload]
            counts = Counter(messages)
            duplicates = sum(n - 1 for n in counts.values() if n > 1)
            for (task, _args), n in counts.items():
                if n > 1:
                    self.duplicates_by_task[task] = max(self.duplicates_by_task[task], n - 1)
            self.samples.append(
                {
                    "t": round(time.monotonic() - self.t0, 2),
                    "queue": len(messages),
                    "open_work": work,
                    "duplicates": duplicates,
                }
            )
            self.stop.wait(self.interval)


def api_client(k: int) -> Any:
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    name = f"bench-burst-{k}"
    user = get_user_model().objects.create_superuser(name, f"{name}@example.invalid", name)
    client = APIClient(HTTP_HOST="127.0.0.1")  # an allowed host (not Django's "testserver")
    client.force_authenticate(user)
    return client


def burst(numbers: range, started: list[float]) -> None:
    import hotpath

    client = api_client(numbers.start)
    t0 = time.monotonic()
    for i in numbers:
        answer = client.post(
            "/api/v1/runs/",
            {"definition_id": hotpath.DEFINITION_ID, "payload": {"i": i}, "business_key": f"burst-{i}"},
            format="json",
        )
        if answer.status_code != 202:
            raise SystemExit(f"bench: the API refused a start ({answer.status_code})")
    started.append(time.monotonic() - t0)


def decide(task_ids: list[Any], rate: float) -> None:
    from workflows import operations

    t0 = time.monotonic()
    for i, task_id in enumerate(task_ids):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # a steady rate
        operations.complete_task(task_id=task_id, decision="approve")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def measure_burst(args: argparse.Namespace, probe: measure.Probe) -> dict[str, Any]:
    import hotpath
    from django.db import close_old_connections

    from workflows import operations
    from workflows.models import Task

    for i in range(args.decisions):
        operations.start(definition_id=hotpath.DEFINITION_ID, payload={"i": i}, business_key=f"dec-{i}")
    hotpath.wait_waiting(probe, "dec", args.decisions, args.timeout)
    task_ids = list(
        Task.objects.filter(run__business_key__startswith="dec-", status="OPEN").values_list("id", flat=True)
    )
    assert len(task_ids) == args.decisions

    sampler = Sampler(Queue(), measure.Probe(probe.url), args.sample_seconds)  # a connection of its own
    started: list[float] = []
    failures: list[BaseException] = []

    def thread(work: Any) -> threading.Thread:
        def target() -> None:
            try:
                work()
            except BaseException as exc:
                failures.append(exc)
            finally:
                close_old_connections()

        return threading.Thread(target=target)

    clients = max(1, args.clients)
    starters = [
        thread(lambda k=k: burst(range(k, args.burst_runs, clients), started))  # type: ignore[misc]
        for k in range(clients)
    ]
    decider = thread(lambda: decide(task_ids, args.decision_rate))
    t_burst = time.monotonic()
    sampler.start()
    for starter in starters:
        starter.start()
    decider.start()
    for starter in starters:
        starter.join()
    burst_seconds = time.monotonic() - t_burst
    decider.join()
    if failures:
        sampler.stop.set()
        raise failures[0]
    hotpath.wait_done(probe, "dec", args.decisions, args.timeout)
    hotpath.wait_waiting(probe, "burst", args.burst_runs, args.timeout)
    sampler.stop.set()
    sampler.join()

    decided = [
        (round(float(at) - sampler.db_t0, 2), float(ms))  # type: ignore[arg-type]
        for (at, ms) in probe.rows(
            "SELECT extract(epoch FROM c.recorded_at), extract(epoch FROM c.settled_at - c.recorded_at) * 1000 "
            "FROM workflow_commands c JOIN workflow_runs r ON r.id = c.run_id "
            "WHERE c.kind = 'COMPLETION' AND r.business_key LIKE %s ORDER BY c.recorded_at",
            ("dec-%",),
        )
    ]
    latencies = [ms for _t, ms in decided]
    peak = max(sampler.samples, key=lambda s: s["queue"])
    excess = max(sampler.samples, key=lambda s: s["queue"] - s["open_work"])
    figures = {
        "burst_runs": args.burst_runs,
        "decisions": args.decisions,
        "decision_rate": args.decision_rate,
        "clients": clients,
        "api_starts_per_s": round(args.burst_runs / burst_seconds, 1),
        "decision_to_applied_ms": {
            "p50": round(statistics.median(latencies), 1),
            "p99": round(percentile(latencies, 99), 1),
            "max": round(max(latencies), 1),
        },
        "peak_queue": peak["queue"],
        "open_work_at_peak": peak["open_work"],
        "largest_excess": {"queue": excess["queue"], "open_work": excess["open_work"], "t": excess["t"]},
        "peak_duplicates": max(s["duplicates"] for s in sampler.samples),
        "duplicates_by_task": dict(sampler.duplicates_by_task),
        "samples": sampler.samples,
        "decided": [{"t": t, "ms": round(ms, 1)} for t, ms in decided],
    }
    figures["goals"] = {
        "p99_le_1s": figures["decision_to_applied_ms"]["p99"] <= GOAL_P99_MS,
        "queue_le_open_work_plus_50": excess["queue"] <= excess["open_work"] + GOAL_QUEUE_SLACK,
        "zero_duplicates": figures["peak_duplicates"] == 0,
    }
    return figures


def line(figures: dict[str, Any]) -> str:
    lat = figures["decision_to_applied_ms"]
    missed = [k for k, ok in figures["goals"].items() if not ok]
    return (
        f"burst {figures['burst_runs']} runs ({figures['api_starts_per_s']} starts/s), {figures['decisions']} "
        f"decisions: decision->applied p50 {lat['p50']} ms, p99 {lat['p99']} ms; peak queue "
        f"{figures['peak_queue']} (open work {figures['open_work_at_peak']}); largest excess "
        f"{figures['largest_excess']['queue']} vs {figures['largest_excess']['open_work']}; peak duplicates "
        f"{figures['peak_duplicates']} | " + ("goals met" if not missed else f"MISSED {', '.join(missed)}")
    )


def main(args: argparse.Namespace, server_url: str, env: dict[str, str], setup_django: Any, say: Any) -> int:
    """``python3 dev.py bench burst``: see the module docstring."""
    import shutil

    env, broker, data_dir = prepare_env(args, env, server_url)
    say(f"burst: database {DATABASE}, broker {broker}, pool {args.pool}, {args.burst_runs} runs")
    measure.recreate_database(server_url, DATABASE)
    started = time.monotonic()
    logdir = Path(tempfile.mkdtemp(prefix="switchyard-bench-logs-"))
    workers: Any = None
    try:
        setup_django(env, "bench-client")
        import hotpath
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        hotpath.deploy()
        from config.celery import app

        app.control.purge()
        probe = measure.Probe(measure.with_database(server_url, DATABASE))
        workers = hotpath.Workers(env=env, pool=args.pool, logdir=logdir)
        workers.start()
        figures = measure_burst(args, probe)
    finally:
        if workers is not None:
            workers.stop()
        if not args.keep_db:
            from django.db import connections

            connections.close_all()
            measure.drop_database(server_url, DATABASE)
        shutil.rmtree(logdir, ignore_errors=True)
        shutil.rmtree(data_dir, ignore_errors=True)
    result = {
        "mode": f"burst-{args.broker}",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": {"broker": args.broker, "pool": args.pool},
        "burst": figures,
        "wall_s": round(time.monotonic() - started, 1),
    }
    out = args.out or BENCH / "results" / f"{time.strftime('%Y%m%d-%H%M%S')}-burst-{args.broker}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".svg").write_text(chart(figures, f"burst on the {args.broker} broker"))
    say(line(figures) + f" -> {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


def chart(figures: dict[str, Any], title: str) -> str:
    """An SVG of the run: queue length and open work items over time (left axis), and each
    decision's time to be applied at the moment it was made (dots, right axis)."""
    width, height, left, right, top, bottom = 720, 300, 56, 56, 28, 36
    samples, decided = figures["samples"], figures["decided"]
    t_max = max([s["t"] for s in samples] + [d["t"] for d in decided] + [1.0])
    n_max = max([s["queue"] for s in samples] + [s["open_work"] for s in samples] + [1])
    ms_max = max([d["ms"] for d in decided] + [1000.0])
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(t: float) -> float:
        return left + plot_w * t / t_max

    def y(v: float, top_value: float) -> float:
        return top + plot_h * (1 - v / top_value)

    def line_of(key: str) -> str:
        return " ".join(f"{x(s['t']):.1f},{y(s[key], n_max):.1f}" for s in samples)

    dots = "".join(
        f'<circle cx="{x(d["t"]):.1f}" cy="{y(d["ms"], ms_max):.1f}" r="2.5" fill="#d95f02"/>' for d in decided
    )
    goal = y(1000.0, ms_max)
    font = 'font-family="sans-serif" font-size="11"'
    return f"""<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" {font}>
<title>{title}</title>
<rect width="{width}" height="{height}" fill="white"/>
<text x="{left}" y="16" font-size="13">{title}: queue length, open work items, decision to applied</text>
<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#999"/>
<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#999"/>
<line x1="{left + plot_w}" y1="{top}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#999"/>
<line x1="{left}" y1="{goal:.1f}" x2="{left + plot_w}" y2="{goal:.1f}" stroke="#d95f02" stroke-dasharray="4 3"/>
<text x="{left + plot_w - 4}" y="{goal - 3:.1f}" text-anchor="end" fill="#d95f02">1 s goal</text>
<polyline points="{line_of("open_work")}" fill="none" stroke="#1b9e77" stroke-width="1.5"/>
<polyline points="{line_of("queue")}" fill="none" stroke="#7570b3" stroke-width="1.5"/>
{dots}
<text x="{left - 4}" y="{top + 4}" text-anchor="end">{n_max}</text>
<text x="{left - 4}" y="{top + plot_h}" text-anchor="end">0</text>
<text x="{left + plot_w + 4}" y="{top + 4}">{ms_max:.0f} ms</text>
<text x="{left + plot_w + 4}" y="{top + plot_h}">0 ms</text>
<text x="{left}" y="{height - 8}">0 s</text>
<text x="{left + plot_w}" y="{height - 8}" text-anchor="end">{t_max:.0f} s</text>
<text x="{left + 60}" y="{height - 8}" fill="#7570b3">queue length</text>
<text x="{left + 160}" y="{height - 8}" fill="#1b9e77">open work items</text>
<text x="{left + 280}" y="{height - 8}" fill="#d95f02">decision to applied (right axis)</text>
</svg>
"""
