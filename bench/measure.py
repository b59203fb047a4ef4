"""Measuring helpers: CPU of process trees and PostgreSQL backends, database counters,
percentiles and an idle guard. Standard library, psutil and psycopg only (no Django)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import psutil
import psycopg


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile (the same rule as the peer scripts' ``benchutil.pct``)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100.0 * (len(ordered) - 1))))
    return ordered[k]


def summary_ms(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "p50": round(pct(values, 50), 2),
        "p95": round(pct(values, 95), 2),
        "p99": round(pct(values, 99), 2),
        "max": round(max(values), 2),
        "mean": round(sum(values) / len(values), 2),
        "n": len(values),
    }


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def database_of(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def recreate_database(server_url: str, name: str) -> None:
    with psycopg.connect(with_database(server_url, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(server_url: str, name: str) -> None:
    with psycopg.connect(with_database(server_url, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- CPU ------------------------------------------------------------------------------------


def _cpu(proc: psutil.Process) -> float:
    try:
        t = proc.cpu_times()
        return t.user + t.system + t.children_user + t.children_system
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0


def tree_cpu_seconds(pids: Iterable[int]) -> float:
    """CPU seconds of processes and all their live descendants (plus reaped children)."""
    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
        total += _cpu(root)
        try:
            children = root.children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        for child in children:
            total += _cpu(child)
    return total


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and its descendants, in MiB."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return round(total / 2**20, 1)


def self_cpu_seconds() -> float:
    t = psutil.Process().cpu_times()
    return t.user + t.system


def machine_busy_seconds() -> float:
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def wait_idle(max_busy_pct: float, timeout_s: float, window_s: float = 2.0) -> float:
    """Wait until the whole machine is below ``max_busy_pct`` busy (others share it); answer
    the last reading. Gives up after ``timeout_s`` and says so: the run goes on, noisier."""
    deadline = time.monotonic() + timeout_s
    while True:
        busy = psutil.cpu_percent(interval=window_s)
        if busy <= max_busy_pct or time.monotonic() > deadline:
            if busy > max_busy_pct:
                print(
                    f"bench: the machine is still {busy:.0f}% busy (other processes); measuring anyway",
                    file=sys.stderr,
                    flush=True,
                )
            return busy


@dataclass
class Probe:
    """A dedicated autocommit connection to the bench database for counters and polling.
    Its own transactions are counted so they can be taken out of ``xact_commit``."""

    url: str

    def __post_init__(self) -> None:
        self.conn = psycopg.connect(self.url, autocommit=True, application_name="bench-probe")
        self.own_xacts = 0
        self.pid = int(self._one("SELECT pg_backend_pid()"))

    def _one(self, sql: str, params: tuple[object, ...] = ()) -> object:
        self.own_xacts += 1
        row = self.conn.execute(sql, params).fetchone()  # type: ignore[arg-type]
        assert row is not None
        return row[0]

    def scalar(self, sql: str, params: tuple[object, ...] = ()) -> object:
        return self._one(sql, params)

    def rows(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        self.own_xacts += 1
        return list(self.conn.execute(sql, params).fetchall())  # type: ignore[arg-type]

    def xact_commit(self, settle_s: float = 1.2, max_wait_s: float = 15.0) -> int:
        """Committed transactions of this database. Backends report their counters lazily
        (at most once a second, later when busy), so read until two readings a settle apart
        agree."""
        deadline = time.monotonic() + max_wait_s
        last = -1
        while True:
            time.sleep(settle_s)
            self.conn.execute("SELECT pg_stat_clear_snapshot()")
            self.own_xacts += 1
            sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            value = int(self._one(sql))  # type: ignore[call-overload]
            if value - last <= self.own_xacts_since(last) or time.monotonic() > deadline:
                return value
            last = value

    def own_xacts_since(self, last: int) -> int:
        """Between two readings the probe itself commits two transactions."""
        return 2 if last >= 0 else -1

    def xid(self) -> int:
        return int(self._one("SELECT pg_current_xact_id()::text::bigint"))  # type: ignore[call-overload]

    def backend_pids(self) -> list[int]:
        rows = self.rows(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return [int(r[0]) for r in rows]  # type: ignore[call-overload]

    def close(self) -> None:
        self.conn.close()


class BackendCpu:
    """CPU of the PostgreSQL backends serving the bench database, sampled by pid.

    A backend is counted from its first sample (or from zero when it appeared during the
    window). Backends that exit inside the window are missed, so the clients keep their
    connections open until the end sample."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.start: dict[int, float] = {}

    def _sample(self) -> dict[int, float]:
        found: dict[int, float] = {}
        for pid in self.probe.backend_pids():
            try:
                t = psutil.Process(pid).cpu_times()
                found[pid] = t.user + t.system
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return found

    def begin(self) -> None:
        self.start = self._sample()

    def end(self) -> float:
        now = self._sample()
        return sum(cpu - self.start.get(pid, 0.0) for pid, cpu in now.items())
