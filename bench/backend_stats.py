"""Where a PostgreSQL backend's CPU goes, statement by statement (``inprocess.py --backend-stats``).

PostgreSQL reports the CPU (user + system, from ``getrusage``) of every protocol message it
handles when ``log_statement_stats`` is on; with ``log_min_error_statement = log`` each report
names its statement. Both are superuser settings, set for the measured session only. The
reports go to the server's log (``--server-log``, Debian's
``/var/log/postgresql/postgresql-<major>-main.log`` by default); this module reads what the
measured batch appended and sums it per statement and message (parse, bind, execute).

Turning the reports on costs the backend a ``getrusage`` and a log line per message: the
totals are inflated, the shares between statements are what to read.
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

START = re.compile(r"\n(?=\S+ \S+ \S+ \[\d+\] \S+ LOG:  [A-Z ]*STATISTICS)")
USAGE = re.compile(r"([\d.]+) s user, ([\d.]+) s system, [\d.]+ s elapsed")
HEADER = re.compile(r"\[(\d+)\] \S+ LOG:  ([A-Z]+)[A-Z ]* STATISTICS")


def default_log(version_num: int) -> Path:
    return Path(f"/var/log/postgresql/postgresql-{version_num // 10000}-main.log")


def enable(cursor: Any) -> None:
    cursor.execute("SET log_statement_stats = on")
    cursor.execute("SET log_min_error_statement = log")


def disable(cursor: Any) -> None:
    cursor.execute("RESET log_statement_stats")
    cursor.execute("RESET log_min_error_statement")


@dataclass
class Line:
    message: str  # PARSE, BIND, EXECUTE, QUERY
    statement: str
    count: int = 0
    cpu_s: float = 0.0


def summarise(text: str, pid: int) -> list[Line]:
    """The reports of one backend, summed per (message, statement), costliest first."""
    lines: dict[tuple[str, str], Line] = {}
    for block in START.split(text):
        header = HEADER.search(block)
        usage = USAGE.search(block)
        if header is None or usage is None or int(header.group(1)) != pid:
            continue
        statement = block.split("STATEMENT:", 1)[1] if "STATEMENT:" in block else "?"
        statement = re.sub(r"'[^']*'", "'?'", " ".join(statement.split()))[:110]
        key = (header.group(2), statement)
        line = lines.setdefault(key, Line(*key))
        line.count += 1
        line.cpu_s += float(usage.group(1)) + float(usage.group(2))
    return sorted(lines.values(), key=lambda x: -x.cpu_s)


def report(lines: list[Line], runs: int, top: int = 25) -> None:
    total = sum(x.cpu_s for x in lines) or 1.0
    by_message: collections.Counter[str] = collections.Counter()
    for x in lines:
        by_message[x.message] += x.cpu_s
    shares = ", ".join(f"{m.lower()} {100 * s / total:.0f}%" for m, s in by_message.most_common())
    per_run = total * 1000 / runs
    print(f"backend CPU inside protocol messages: {per_run:.2f} ms per run (inflated by the reports); {shares}")
    print("  share  per run  µs each  message  statement")
    for x in lines[:top]:
        print(
            f"  {100 * x.cpu_s / total:4.1f}%  {x.count / runs:6.2f}  {x.cpu_s * 1e6 / x.count:7.0f}  "
            f"{x.message:<8} {x.statement}"
        )
