#!/usr/bin/env python3
"""Switchyard's developer entry point. Standard library only: it must run on a machine that
has nothing but Python 3.11.

    python3 dev.py run  [--port 8000] [--host 127.0.0.1] the app: web, Celery worker and beat
    python3 dev.py test [--coverage] [pytest arguments]   the whole test suite
    python3 dev.py lint [ruff format mypy imports migrations]
    python3 dev.py bench [arguments]                        the benchmarks under bench/

Each command first makes sure `.venv` exists and holds `requirements/dev.txt`; it installs
again only when a requirements file changed (a hash stamp lives in `.venv`), then re-runs
itself with the virtualenv's Python.

Environment: `DATABASE_URL` / `CELERY_BROKER_URL` select a real PostgreSQL / broker; without
them an embedded PostgreSQL (pgserver) and a filesystem broker live under
`SWITCHYARD_DATA_DIR` (default `.data`; `.data/test` for the test suite). `PORT` sets the
web port of `run`, `HOST` (or `--host`) the address it binds: 127.0.0.1 unless told otherwise,
since the demo users' passwords are public; `run` prints the address and warns when it binds
wider than this machine.

`run` keeps a SECRET_KEY and a webhook signing secret of its own under the data folder
(`secret_key`, `webhook_signing_secret`, mode 0600, made on the first run) unless the
environment sets them, and serves plain HTTP (`SECURE_COOKIES=false`). `test`, `lint` and
`bench` give their processes random secrets of their own.
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
VENV_PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".switchyard-requirements.sha256"
REQUIREMENTS = ROOT / "requirements" / "dev.txt"

# Children get this long to stop after SIGTERM before their process group is killed.
STOP_GRACE_SECONDS = 20.0


def say(message: str) -> None:
    print(f"dev.py: {message}", flush=True)


# --- the virtualenv ---------------------------------------------------------------------


def requirements_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted((ROOT / "requirements").glob("*.txt")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def ensure_venv() -> None:
    """Create `.venv` when missing; install requirements when they changed since the stamp."""
    if not VENV_PYTHON.exists():
        say(f"creating the virtualenv in {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    wanted = requirements_hash()
    if STAMP.exists() and STAMP.read_text().strip() == wanted:
        return
    say("installing requirements/dev.txt (first run, or the requirements changed)")
    started = time.monotonic()
    pip = [str(VENV_PYTHON), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--quiet", "--upgrade", "pip"], check=False)
    subprocess.run([*pip, "install", "--quiet", "-r", str(REQUIREMENTS)], check=True)
    STAMP.write_text(wanted + "\n")
    say(f"requirements installed in {time.monotonic() - started:.0f}s")


def in_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def reexec_in_venv() -> None:
    """Run this same command again with the virtualenv's Python (same pid)."""
    if in_venv():
        return
    os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(__file__).resolve()), *sys.argv[1:]])  # noqa: S606


def manage(*args: str, check: bool = True, capture: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        check=check,
        text=True,
        capture_output=capture,
    )


# --- run --------------------------------------------------------------------------------


def _set_parent_death_signal() -> None:
    """In a child: get SIGTERM if dev.py itself dies (even by SIGKILL), so nothing lingers."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: Ctrl-C handling below still applies
        pass


class Child:
    """One long-running process in its own process group, its output prefixed by name."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            # Own session: the terminal's Ctrl-C reaches only dev.py, which then stops the
            # children in order and waits for them (no half-stopped worker).
            start_new_session=True,
            preexec_fn=_set_parent_death_signal,
        )
        self.pump = threading.Thread(target=self._relay, daemon=True)
        self.pump.start()

    def _relay(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            sys.stdout.write(f"{self.name:>6} | {line}")
            sys.stdout.flush()

    def signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.proc.pid, signum)
        except ProcessLookupError:
            pass


def stop_children(children: list[Child]) -> None:
    # SIGTERM to each leader only: Celery's worker stops its pool itself (warm shutdown).
    for child in children:
        if child.proc.poll() is None:
            child.proc.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for child in children:
        try:
            child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"{child.name} did not stop within {STOP_GRACE_SECONDS:.0f}s; killing it")
            child.proc.kill()
            child.proc.wait()
        # The group may still hold grandchildren (Celery's pool): make sure they go too.
        child.signal_group(signal.SIGKILL)
        child.pump.join(timeout=2)


def wait_for_http(url: str, timeout: float, children: list[Child]) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(c.proc.poll() is not None for c in children):
            return False
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - our own URL
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    return False


class Stop(Exception):
    pass


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def url_host(host: str) -> str:
    """``host`` as it appears in a URL or runserver's addrport (IPv6 in brackets)."""
    bare = host.strip("[]")
    return f"[{bare}]" if ":" in bare else bare


def probe_host(host: str) -> str:
    """Where dev.py itself reaches the web server bound on ``host``."""
    bare = host.strip("[]")
    if bare in ("", "0.0.0.0"):  # noqa: S104 - comparing, not binding
        return "127.0.0.1"
    if bare == "::":
        return "[::1]"
    return url_host(bare)


def local_secrets(env: dict[str, str], data_dir: Path) -> None:
    """The run's SECRET_KEY and webhook signing secret: the environment's, or the ones kept
    under the data folder (made once, mode 0600), so that sessions survive a restart and no
    known development key signs anything."""
    from config import keys

    if not env.get("SECRET_KEY"):
        env["SECRET_KEY"] = keys.load_or_create(data_dir / keys.SECRET_KEY_FILE)
    if not env.get("WORKFLOWS_SECURITY_WEBHOOK_SIGNING_SECRET"):
        env["WORKFLOWS_SECURITY_WEBHOOK_SIGNING_SECRET"] = keys.load_or_create(data_dir / keys.WEBHOOK_SECRET_FILE)


def throwaway_secrets(env: dict[str, str]) -> None:
    """Secrets for a test, lint or bench run: random, never stored."""
    env.setdefault("SECRET_KEY", secrets.token_urlsafe(64))
    env.setdefault("WORKFLOWS_SECURITY_WEBHOOK_SIGNING_SECRET", secrets.token_urlsafe(32))


def command_run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    env = os.environ.copy()
    env.setdefault("PYTHONUNBUFFERED", "1")
    data_dir = Path(env.get("SWITCHYARD_DATA_DIR", ROOT / ".data")).resolve()
    env["SWITCHYARD_DATA_DIR"] = str(data_dir)
    os.environ["SWITCHYARD_DATA_DIR"] = str(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    local_secrets(env, data_dir)
    # A local run is plain HTTP: no secure-only cookies, no redirect to https.
    env.setdefault("SECURE_COOKIES", "false")
    # manage() below runs with this process's environment
    os.environ.update(
        {k: env[k] for k in ("SECRET_KEY", "WORKFLOWS_SECURITY_WEBHOOK_SIGNING_SECRET", "SECURE_COOKIES")}
    )
    host = args.host.strip() or "127.0.0.1"

    def on_signal(signum: int, frame: object) -> None:
        raise Stop(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    children: list[Child] = []
    try:
        if not env.get("DATABASE_URL"):
            # Start the embedded PostgreSQL here, once: every child joins this server
            # instead of racing to start its own, and it stops when dev.py exits.
            say(f"starting the embedded PostgreSQL under {data_dir / 'pg'}")
            from config import embedded

            embedded.database_settings()
            env["XDG_RUNTIME_DIR"] = os.environ["XDG_RUNTIME_DIR"]

        say("migrating")
        manage("migrate", "--noinput", "-v", "0")
        say("collecting static files")
        manage("collectstatic", "--noinput", "-v", "0")
        loaded = manage("load_packaged_definitions", check=False, capture=True)
        if loaded.returncode != 0:
            if "Unknown command" in (loaded.stderr + loaded.stdout):
                say("warning: no load_packaged_definitions command yet; no demo workflow loaded")
            else:
                sys.stderr.write(loaded.stdout + loaded.stderr)
                say("load_packaged_definitions failed")
                return 1
        else:
            sys.stdout.write(loaded.stdout)
        seeded = manage("seed_demo", capture=True)  # its credentials go into the banner below

        port = str(args.port)
        celery = [sys.executable, "-m", "celery", "-A", "config"]
        schedule = data_dir / "celerybeat-schedule"
        children.append(
            Child(
                "web",
                [sys.executable, str(ROOT / "manage.py"), "runserver", f"{url_host(host)}:{port}", "--noreload"],
                {**env, "SWITCHYARD_PROCESS": "web"},
            )
        )
        children.append(
            Child(
                "worker",
                [*celery, "worker", "-l", "info", "--concurrency", "2", "-n", f"switchyard-{os.getpid()}@%h"],
                {**env, "SWITCHYARD_PROCESS": "worker"},
            )
        )
        # deliveries (webhooks, service calls, notices) wait on other parties: their own queue
        # and worker, so a slow receiver never holds the executor's (WORKFLOWS_OUTBOUND_QUEUE)
        outbound_queue = env.get("WORKFLOWS_OUTBOUND_QUEUE") or "switchyard.outbound"
        children.append(
            Child(
                "outbound",
                [*celery, "worker", "-l", "info", "--concurrency", "4", "--queues", outbound_queue,
                 "-n", f"switchyard-outbound-{os.getpid()}@%h"],
                {**env, "SWITCHYARD_PROCESS": "outbound"},
            )
        )  # fmt: skip
        children.append(
            Child(
                "beat",
                [*celery, "beat", "-l", "info", "-s", str(schedule)],
                {**env, "SWITCHYARD_PROCESS": "beat"},
            )
        )
        base = f"http://{probe_host(host)}:{port}"
        if not wait_for_http(f"{base}/healthz", timeout=60, children=children):
            say("the web process did not answer /healthz; stopping")
            return 1
        bound = f"{url_host(host)}:{port}"
        if is_loopback(host):
            say(f"the web server listens on {bound} (this machine only; --host 0.0.0.0 opens it to others)")
        else:
            warning = (
                f"WARNING: the web server listens on {bound}, reachable from other machines, and the demo\n"
                "users' passwords (admin/admin, ...) are public. Change them, or run with --host 127.0.0.1.\n"
                "Other machines also need the host name in ALLOWED_HOSTS."
            )
            print("\n" + "\n".join(f"dev.py: {line}" for line in warning.splitlines()), flush=True)
        print(
            "\n"
            f"Switchyard is running on {bound} (ready in {time.monotonic() - started:.0f}s). "
            "Ctrl-C stops everything.\n"
            f"  Admin      {base}/admin/\n"
            f"  Inbox      {base}/tasks/\n"
            f"  API docs   {base}/api/docs/\n"
            f"  Health     {base}/healthz\n"
            f"{seeded.stdout}",
            flush=True,
        )
        while True:
            for child in children:
                code = child.proc.poll()
                if code is not None:
                    say(f"{child.name} exited with code {code}; stopping the others")
                    return 1
            time.sleep(0.5)
    except Stop as stop:
        say(f"{stop} received; stopping web, worker and beat")
        return 0
    finally:
        # A second Ctrl-C while stopping should not leave orphans behind: ignore it.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop_children(children)
        say("stopped")


# --- test, lint, bench -------------------------------------------------------------------


# The suite runs across the machine's cores (pytest-xdist): each worker process has a database
# of its own (pytest-django's `_gwN`) and a broker of its own (config/testing.py), and starts its
# own Celery worker and beat when its first end-to-end test needs them. More than four buys
# little: every worker brings a Celery worker, beat and, for browser tests, a Chromium.
MAX_TEST_WORKERS = 4
SLOWEST_SHOWN = 25


def test_workers() -> int:
    configured = os.environ.get("SWITCHYARD_TEST_WORKERS", "").strip()
    if configured:
        return max(1, int(configured))
    return max(1, min(os.cpu_count() or 1, MAX_TEST_WORKERS))


def has_option(args: list[str], *names: str) -> bool:
    """Whether pytest ``args`` hold one of ``names`` (``-n 2``, ``-n2``, ``--durations=5``)."""
    for arg in args:
        for name in names:
            if arg == name or arg.startswith(name + "="):
                return True
            if not name.startswith("--") and arg.startswith(name) and not arg.startswith("--"):
                return True
    return False


def command_test(args: argparse.Namespace, pytest_args: list[str]) -> int:
    env = os.environ.copy()
    # Tests get their own embedded server and broker folder, so a `dev.py run` in another
    # terminal never consumes the suite's Celery messages.
    throwaway_secrets(env)
    if "SWITCHYARD_DATA_DIR" not in env:
        env["SWITCHYARD_DATA_DIR"] = str(ROOT / ".data" / "test")
        # That data is disposable: the embedded server may skip fsync (about 2x faster).
        env.setdefault("SWITCHYARD_EMBEDDED_DURABLE", "0")
    if args.topology:
        # several processes on the machine's services: PostgreSQL over TCP behind a PgBouncer
        # the test starts, RabbitMQ (docs/operations.md, "Several machines")
        env["SWITCHYARD_TOPOLOGY"] = "1"
        env.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
        env.setdefault("SWITCHYARD_TEST_DB", "test_switchyard_topology")
        pytest_args = pytest_args or ["tests/topology", "-p", "no:cacheprovider"]
    options: list[str] = []
    serial = (
        args.topology
        or has_option(pytest_args, "-n", "--numprocesses", "--pdb", "--trace")
        or ("no:xdist" in pytest_args)
    )
    if not serial and test_workers() > 1:
        # plain load balancing keeps each worker's tests in collection order (tests/conftest.py
        # puts those that use the Celery worker last). Note: with pytest 9 pytest-xdist's
        # loadgroup does not group (xdist_group marks are ignored), so a module fixture may be
        # built once per worker and must be safe for that (ports and names of its own).
        options += ["-n", str(test_workers())]
    if not has_option(pytest_args, "--durations"):
        options += [f"--durations={SLOWEST_SHOWN}", "--durations-min=1.0"]
    if args.coverage:
        # pytest-cov measures every xdist worker and combines them ([tool.coverage] in pyproject)
        options += ["--cov", "--cov-report=term:skip-covered"]
    argv = [sys.executable, "-m", "pytest", *options, *pytest_args]
    started = time.monotonic()
    code = subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode
    say(f"tests finished in {time.monotonic() - started:.0f}s (exit {code})")
    if code == 5:
        say("pytest collected no tests: that is a failure")
        return 1
    return code


LINT_STEPS: dict[str, list[str]] = {
    "ruff": ["-m", "ruff", "check", "."],
    "format": ["-m", "ruff", "format", "--check", "."],
    "mypy": ["-m", "mypy", "."],
    "imports": ["-m", "importlinter.cli"],
    "migrations": [str(ROOT / "manage.py"), "makemigrations", "--check", "--dry-run"],
}


def command_lint(steps: list[str]) -> int:
    unknown = [s for s in steps if s not in LINT_STEPS]
    if unknown:
        say(f"unknown lint step(s) {', '.join(unknown)}; known: {', '.join(LINT_STEPS)}")
        return 2
    failed = []
    for step in steps or list(LINT_STEPS):
        say(f"lint: {step}")
        argv = [sys.executable, *LINT_STEPS[step]]
        env = os.environ.copy()
        throwaway_secrets(env)  # mypy (django-stubs) and makemigrations load the settings
        if step == "imports":
            argv = [str(VENV / "bin" / "lint-imports")]
        if step == "mypy":
            # django-stubs loads the settings, which would start the embedded PostgreSQL,
            # and mypy leaves through os._exit, so it would never stop it. A URL that is
            # parsed but never connected to keeps mypy away from the database.
            env.setdefault("DATABASE_URL", "postgres://static-analysis.invalid/none")
        if subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode != 0:
            failed.append(step)
    if failed:
        say(f"lint failed: {', '.join(failed)}")
        return 1
    say("lint passed")
    return 0


def command_bench(bench_args: list[str]) -> int:
    if (ROOT / "bench" / "__main__.py").exists():
        argv = [sys.executable, "-m", "bench", *bench_args]
    elif (ROOT / "bench" / "run.py").exists():
        argv = [sys.executable, str(ROOT / "bench" / "run.py"), *bench_args]
    else:
        say("no benchmarks yet (bench/__main__.py or bench/run.py)")
        return 1
    env = os.environ.copy()
    throwaway_secrets(env)
    env.setdefault("SECURE_COOKIES", "false")
    return subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="dev.py", description=__doc__, formatter_class=argparse.RawTextHelpFormatter, allow_abbrev=False
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="web on :8000, a Celery worker and beat; Ctrl-C stops all")
    run.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    run.add_argument(
        "--host",
        default=os.environ.get("HOST", "127.0.0.1"),
        help="address the web server binds (default 127.0.0.1: this machine only)",
    )
    test = commands.add_parser("test", help="the whole suite; other arguments go to pytest", allow_abbrev=False)
    test.add_argument("--coverage", action="store_true", help="measure coverage and print a report")
    test.add_argument(
        "--topology",
        action="store_true",
        help="the multi-node test (tests/topology): two web nodes, two workers, beat, PgBouncer, RabbitMQ",
    )
    lint = commands.add_parser("lint", help="ruff, ruff format, mypy, import contracts, migrations")
    lint.add_argument("steps", nargs="*", help=f"a subset of: {' '.join(LINT_STEPS)}")
    commands.add_parser("bench", help="the benchmarks under bench/")
    args, rest = parser.parse_known_args()
    if rest and args.command not in ("test", "bench"):
        parser.error(f"unrecognised arguments: {' '.join(rest)}")

    ensure_venv()
    reexec_in_venv()
    os.chdir(ROOT)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

    if args.command == "run":
        return command_run(args)
    if args.command == "test":
        return command_test(args, rest)
    if args.command == "lint":
        return command_lint(args.steps)
    return command_bench(rest)


if __name__ == "__main__":
    sys.exit(main())
