"""The peers, from ``../shared/peers/``: DBOS Transact running the same approval shape, and the
raw-design ceiling (our own design's SQL in raw psycopg 3, no engine around it).

Its scripts are run where they are (never copied), with their own virtualenv
(``${TMPDIR:-/tmp}/perfvenv``, made by ``setup_venv.sh`` from PyPI when missing), on the same
PostgreSQL server and in databases of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT.parent / "shared" / "peers"


def venv_python() -> Path:
    base = Path(os.environ.get("BENCH_VENV") or Path(os.environ.get("TMPDIR") or "/tmp") / "perfvenv")
    return base / "bin" / "python"


def ensure_venv() -> Path:
    python = venv_python()
    if not python.exists():
        print(f"bench: making the peer's virtualenv ({python.parent.parent}) with setup_venv.sh", flush=True)
        subprocess.run(["bash", str(PEERS / "setup_venv.sh")], check=True)
    return python


def available() -> bool:
    return (PEERS / "dbos_bench.py").exists()


def _run(python: Path, server_url: str, args: list[str], out: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "BENCH_PG_URL": server_url}
    return subprocess.Popen(
        [str(python), str(PEERS / "dbos_bench.py"), *args, "--no-idle-wait", "--out", str(out)],
        cwd=PEERS,
        env=env,
        stdout=subprocess.DEVNULL,
    )


def throughput(server_url: str, n: int, processes: int, dbname: str, timeout: float) -> dict[str, Any]:
    """Burst, like ours: ``processes`` DBOS application processes side by side (one Python
    process is GIL-bound; ours has two workers), each with N/processes workflows and its own
    system database. The aggregate rate is the sum of the per-process rates (the copies run
    their phases in near lock-step, as ``dbos_multi.sh`` does)."""
    python = ensure_venv()
    with tempfile.TemporaryDirectory(prefix="switchyard-dbos-") as tmp:
        outs = [Path(tmp) / f"p{i}.json" for i in range(processes)]
        procs = [
            _run(
                python,
                server_url,
                [
                    "--n",
                    str(n // processes),
                    "--rate",
                    "0",
                    "--dbname",
                    f"{dbname}_{i}",
                    "--phase-timeout",
                    str(int(timeout)),
                ],
                out,
            )
            for i, out in enumerate(outs)
        ]
        for proc in procs:
            if proc.wait(timeout=timeout * 3) != 0:
                raise SystemExit("bench: the DBOS peer failed (throughput)")
        rows = [json.loads(out.read_text()) for out in outs]
    total = sum(r["n"] for r in rows)

    def weighted(key: str, sub: str) -> float:
        return round(sum(r[key][sub] * r["n"] for r in rows) / total, 2)

    # app and sender CPU are each process's own; the server and machine figures are sampled
    # machine-wide over each process's window, and the K windows overlap, so each process's
    # figure covers all K processes' workflows: divide by K
    shared = 1.0 / processes
    cpu = {
        "app": round(sum(weighted("cpu_ms_per_wf", k) for k in ("phase1_app", "phase2_app")), 2),
        "sender": weighted("cpu_ms_per_wf", "phase2_sender"),
        "postgres_all_processes": round(
            shared * sum(weighted("cpu_ms_per_wf", k) for k in ("phase1_server", "phase2_server")), 2
        ),
    }
    cpu["machine_total"] = round(
        shared * sum(weighted("cpu_ms_per_wf", k) for k in ("phase1_machine_total", "phase2_machine_total")), 2
    )
    return {
        "dbos_version": rows[0]["dbos_version"],
        "processes": processes,
        "n": total,
        "completed": sum(r["completed"] for r in rows),
        "phase1_runs_per_s": round(sum(r["phase1_wf_per_s"] for r in rows), 1),
        "phase2_runs_per_s": round(sum(r["phase2_wf_per_s"] for r in rows), 1),
        "end_to_end_runs_per_s": round(sum(r["end_to_end_wf_per_s"] for r in rows), 1),
        "cpu_ms_per_run": {
            **cpu,
            "total": round(cpu["app"] + cpu["sender"] + cpu["postgres_all_processes"], 2),
        },
        "transactions_per_run": round(sum(weighted("all_txns_per_wf_approx", k) for k in ("phase1", "phase2")), 2),
        "xids_per_run_cluster_wide": round(
            shared * sum(weighted("write_txns_per_wf", k) for k in ("phase1", "phase2")), 2
        ),
        "per_process": [
            {k: r[k] for k in ("n", "phase1_wf_per_s", "phase2_wf_per_s", "end_to_end_wf_per_s")} for r in rows
        ],
    }


def latency(server_url: str, n: int, rate: float, dbname: str, timeout: float) -> dict[str, Any]:
    """Paced completions (``DBOSClient.send`` from a separate process) at ``rate``/s."""
    python = ensure_venv()
    with tempfile.TemporaryDirectory(prefix="switchyard-dbos-") as tmp:
        out = Path(tmp) / "lat.json"
        proc = _run(
            python,
            server_url,
            ["--n", str(n), "--rate", str(rate), "--dbname", dbname, "--phase-timeout", str(int(timeout))],
            out,
        )
        if proc.wait(timeout=timeout * 3) != 0:
            raise SystemExit("bench: the DBOS peer failed (latency)")
        row = json.loads(out.read_text())
    return {"n": row["n"], "rate_per_s": rate, "completion_to_done_ms": row["latency_send_to_complete_ms"]}


def ceiling(server_url: str, procs: int, seconds: float, dbname: str, timeout: float) -> dict[str, Any]:
    """The ceiling of our own design: ``raw_design_bench.py --style leased`` (the 6-commit
    workflow: start, claim, segment, complete, claim, segment) in ``procs`` processes for
    ``seconds``, on the same server, in a database of its own (dropped afterwards)."""
    python = ensure_venv()
    with tempfile.TemporaryDirectory(prefix="switchyard-ceiling-") as tmp:
        out = Path(tmp) / "ceiling.json"
        env = {**os.environ, "BENCH_PG_URL": server_url}
        args = ["--procs", str(procs), "--seconds", str(seconds), "--style", "leased", "--dbname", dbname]
        proc = subprocess.run(
            [str(python), str(PEERS / "raw_design_bench.py"), *args, "--out", str(out)],
            cwd=PEERS,
            env=env,
            stdout=subprocess.DEVNULL,
            timeout=timeout + seconds,
            check=False,
        )
        if proc.returncode != 0 or not out.exists():
            raise SystemExit("bench: the raw-design ceiling failed")
        row = json.loads(out.read_text().splitlines()[-1])
    _drop(server_url, dbname)
    return {
        "style": row["style"],
        "processes": row["procs"],
        "seconds": row["elapsed_s"],
        "runs_per_s": row["wf_per_s"],
        "commits_per_run": row["commits_per_wf"],
        "cpu_ms_per_run": row["cpu_ms_per_wf"],
    }


def _drop(server_url: str, dbname: str) -> None:
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
