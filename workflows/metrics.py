"""Prometheus metrics: counters fed by the executor's observers, gauges read at scrape time.

Counters and the histogram live in the process that runs the executor (a Celery worker, or
a web node that drains in-process). They are registered on :data:`REGISTRY`, and
:func:`install` (called once from ``WorkflowsConfig.ready``) registers :func:`observe` with
``workflows.engine.observers``. With ``PROMETHEUS_MULTIPROC_DIR`` set (prometheus_client's
multiprocess mode) every process writes its counters to files in that directory and
:func:`exposition` sums them, so the web node's ``/metrics`` includes what the workers on the
same host counted; see ``docs/operations.md``.

Gauges are cheap queries made when Prometheus scrapes (``workflows.queries``, under a
statement timeout): queue depth, dead letters, OUTCOME_UNKNOWN commands, expired leases, the
oldest due command's age, live runs, open and overdue tasks, parked runs by position, capture
states. Labels are only kinds, outcomes, statuses and positions — never a payload value.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from workflows.models import LIVE_STATUSES, CommandKind, CommandStatus, RunStatus

log = logging.getLogger("workflows.metrics")

CONTENT_TYPE = CONTENT_TYPE_LATEST
REGISTRY = CollectorRegistry(auto_describe=True)

KINDS = tuple(kind.value for kind in CommandKind)
# REQUEUE: a due date or reminder held back behind a completion went back to the queue
OUTCOMES = (
    CommandStatus.COMPLETE.value,
    CommandStatus.PARKED.value,
    CommandStatus.REJECTED.value,
    CommandStatus.STALE.value,
    CommandStatus.FAILED.value,
    CommandStatus.DEAD.value,
    CommandStatus.CANCELLED.value,
    CommandStatus.OUTCOME_UNKNOWN.value,
    "REQUEUE",
    CommandStatus.SUPERSEDED.value,
)
# a segment runs from milliseconds (a decision) to the lease (30 s by default)
SEGMENT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0)
SCRAPE_TIMEOUT_MS = 5000

SETTLED = Counter(
    "switchyard_commands_settled",
    "Commands settled by the executor, by command kind and outcome (status they settled in).",
    ["kind", "outcome"],
    registry=REGISTRY,
)
SEGMENT_SECONDS = Histogram(
    "switchyard_segment_duration_seconds",
    "Time from claim to settle of a command whose segment ran, by command kind.",
    ["kind"],
    buckets=SEGMENT_BUCKETS,
    registry=REGISTRY,
)
LEASE_EXPIRIES = Counter(
    "switchyard_lease_expiries",
    "Claims whose lease expired (the executor holding them stopped) and that the sweep recovered.",
    ["kind"],
    registry=REGISTRY,
)
DEFERRALS = Counter(
    "switchyard_command_deferrals",
    "Commands deferred because this node cannot run their pinned revision.",
    ["kind"],
    registry=REGISTRY,
)
TRANSIENT_RETRIES = Counter(
    "switchyard_transient_retries",
    "Segments that hit a transient failure and were offered again with backoff.",
    ["kind"],
    registry=REGISTRY,
)
ACTOR_ABSENT = Counter(
    "switchyard_actor_absent",
    "Commands recorded without an actor (attribution ABSENT), by command kind.",
    ["kind"],
    registry=REGISTRY,
)

# Every (kind, outcome) series exists from the start, at zero: increase()/rate() alerts then
# see the first dead letter instead of a series that appears already at 1.
for _kind in KINDS:
    for _outcome in OUTCOMES:
        SETTLED.labels(_kind, _outcome)
    for _counter in (LEASE_EXPIRIES, DEFERRALS, TRANSIENT_RETRIES):
        _counter.labels(_kind)


def observe(event: Any) -> None:
    """The executor observer: count one event (see ``workflows.engine.observers``)."""
    from workflows.engine import observers

    if isinstance(event, observers.CommandSettled):
        SETTLED.labels(event.kind, event.outcome).inc()
        if event.duration_ms > 0:  # only a segment that ran carries its duration
            SEGMENT_SECONDS.labels(event.kind).observe(event.duration_ms / 1000.0)
    elif isinstance(event, observers.LeaseExpired):
        LEASE_EXPIRIES.labels(event.kind).inc()
    elif isinstance(event, observers.CommandDeferred):
        DEFERRALS.labels(event.kind).inc()
    elif isinstance(event, observers.TransientRetry):
        TRANSIENT_RETRIES.labels(event.kind).inc()
    elif isinstance(event, observers.ActorAbsent):
        ACTOR_ABSENT.labels(event.kind).inc()


def install() -> None:
    """Register :func:`observe` with the executor's observers (idempotent)."""
    from workflows.engine import observers

    observers.register(observe)


class DatabaseCollector(Collector):
    """Gauges read from the database at scrape time; ``switchyard_metrics_database_up`` is 0
    (and the other gauges absent) when the reads fail, so a scrape never fails outright."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("switchyard_metrics_database_up", "1 when the scrape-time database reads succeeded.")
        try:
            snapshot = _snapshot()
        except Exception:  # a broken read must not break the counters' scrape
            log.warning("metrics: the database reads failed", exc_info=log.isEnabledFor(logging.DEBUG))
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from _gauges(snapshot)

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())


def _snapshot() -> dict[str, Any]:
    from django.db import connection, transaction

    from workflows import queries

    with transaction.atomic():
        with connection.cursor() as cursor:
            # a slow read gives up instead of piling scrapes onto a busy database
            cursor.execute("SET LOCAL statement_timeout = %s", [SCRAPE_TIMEOUT_MS])
        return {
            "queue": queries.queue_health(),
            "runs": queries.live_run_counts(),
            "tasks": queries.task_counts(),
            "parked": queries.parked_by_position(),
            "captures": queries.capture_counts(),
        }


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=float(value))


def _gauges(snapshot: dict[str, Any]) -> Iterator[GaugeMetricFamily]:
    queue = snapshot["queue"]
    depth = GaugeMetricFamily(
        "switchyard_queue_depth",
        "Unsettled commands by status: PENDING (due now), SCHEDULED (PENDING, not yet due: timers), "
        "DEFERRED, CLAIMED, PARKED (signals waiting for a wait that accepts them).",
        labels=["status"],
    )
    for label, key in (
        (CommandStatus.PENDING.value, "pending"),
        ("SCHEDULED", "scheduled"),  # PENDING, not yet due
        (CommandStatus.DEFERRED.value, "deferred"),
        (CommandStatus.CLAIMED.value, "claimed"),
        (CommandStatus.PARKED.value, "parked"),
    ):
        depth.add_metric([label], int(queue[key]))
    yield depth
    yield _gauge(
        "switchyard_queue_oldest_pending_seconds",
        "How long the oldest due PENDING command has waited to be run (0 when none).",
        queue["oldest_pending_seconds"],
    )
    yield _gauge(
        "switchyard_expired_leases",
        "CLAIMED commands whose lease has expired (not yet swept).",
        queue["expired_leases"],
    )
    yield _gauge("switchyard_dead_letters", "DEAD commands (attempts spent) waiting for a retry.", queue["dead"])
    yield _gauge(
        "switchyard_outcome_unknown_commands",
        "OUTCOME_UNKNOWN commands (interrupted after an effect started) waiting for a reconcile.",
        queue["outcome_unknown"],
    )

    runs = GaugeMetricFamily(
        "switchyard_runs", "Runs that have not ended, by status (FAILED waits for a retry).", labels=["status"]
    )
    for status in (*(live.value for live in LIVE_STATUSES), RunStatus.FAILED.value):
        runs.add_metric([status], snapshot["runs"].get(status, 0))
    yield runs

    yield _gauge("switchyard_open_tasks", "Open tasks (OPEN or COMPLETING).", snapshot["tasks"]["open"])
    yield _gauge("switchyard_overdue_tasks", "OPEN tasks past their due date.", snapshot["tasks"]["overdue"])

    parked = GaugeMetricFamily(
        "switchyard_parked_runs",
        "Runs parked at a position (main path), by definition, scope, revision and node.",
        labels=["definition_id", "scope", "version", "position"],
    )
    for row in snapshot["parked"]:
        parked.add_metric([row["definition_id"], row["scope"], str(row["version"]), row["node"]], int(row["runs"]))
    yield parked

    captures = GaugeMetricFamily("switchyard_captures", "Record captures by state.", labels=["state"])
    for state, count in sorted(snapshot["captures"].items()):
        captures.add_metric([str(state)], int(count))
    yield captures


_database_collector = DatabaseCollector()
REGISTRY.register(_database_collector)


def exposition() -> bytes:
    """The text exposition of every metric: this process's counters (or, in multiprocess
    mode, every process's on this host) and the scrape-time gauges."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        registry.register(_database_collector)
        return generate_latest(registry)
    return generate_latest(REGISTRY)


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    """One sample's current value in this process (tests and debugging); 0.0 when absent."""
    value = REGISTRY.get_sample_value(name, labels or {})
    return float(value) if value is not None else 0.0
