"""Run the reliability suites with one command and print their figures.

    python -m tests.reliability.run --lite     # what CI runs (a few minutes on 2 cores)
    python -m tests.reliability.run --full     # nightly size: ≥ 10,000 commands, 20 worker kills,
                                               # more bad-input samples and state-machine examples
    python -m tests.reliability.run --full -k crash     # only the crash harness

It runs ``pytest tests/reliability -m reliability`` on the database and broker the settings
choose (``DATABASE_URL`` / ``CELERY_BROKER_URL``, else the embedded PostgreSQL and the
filesystem broker), with ``RELIABILITY_MODE`` and ``RELIABILITY_RESULTS`` set, then prints a
summary of the JSON reports the suites wrote to ``tests/reliability/results/`` (override with
``--results``). The exit status is pytest's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.reliability.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--lite", action="store_const", const="lite", dest="mode", help="the CI size (default)")
    mode.add_argument("--full", action="store_const", const="full", dest="mode", help="the nightly size")
    ap.add_argument("--results", type=Path, default=HERE / "results", help="where the JSON reports go")
    ap.add_argument("-k", dest="keyword", help="only the tests whose names match (pytest -k)")
    args, extra = ap.parse_known_args(argv)
    mode_name = args.mode or "lite"
    args.results.mkdir(parents=True, exist_ok=True)
    began = time.time()
    env = {**os.environ, "RELIABILITY_MODE": mode_name, "RELIABILITY_RESULTS": str(args.results)}
    env.setdefault("SWITCHYARD_TEST_DB", f"test_switchyard_reliability_{mode_name}")
    command = [sys.executable, "-m", "pytest", "tests/reliability", "-m", "reliability", "-p", "no:cacheprovider",
               "-o", "addopts=-ra --strict-markers", "--create-db", "-q", *extra]  # fmt: skip
    if args.keyword:
        command += ["-k", args.keyword]
    print("$", " ".join(command), flush=True)
    status = subprocess.call(command, cwd=ROOT, env=env)
    print_summary(args.results, since=began)
    return status


def print_summary(folder: Path, *, since: float) -> None:
    reports = sorted(p for p in folder.glob("*.json") if p.stat().st_mtime >= since)
    for path in reports:
        report: dict[str, Any] = json.loads(path.read_text())
        print(f"\n== {path.name}: {'PASS' if report.get('ok') else 'FAIL'}")
        for key in (
            "commands",
            "runs",
            "kills",
            "window_s",
            "wall_s",
            "faults_fired",
            "samples",
            "p99_ms",
            "max_ms",
            "attempts",
            "refused",
            "refused_share",
            "routes",
            "html_pages",
            "leaks",
            "writes",
            "accepted",
        ):
            if key in report:
                print(f"   {key}: {report[key]}")
        for name, check in report.get("checks", {}).items():
            mark = "ok " if check.get("ok") else "FAIL"
            figures = {k: v for k, v in check.items() if k not in ("ok", "examples", "shapes", "statuses")}
            print(f"   [{mark}] {name} {json.dumps(figures, default=str)}")


if __name__ == "__main__":
    sys.exit(main())
