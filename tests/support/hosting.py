"""Switchyard installed into someone else's project, for the packaging tests
(``tests/test_host_project.py``, ``tests/test_install_guide.py``).

- ``build_distributions``: the sdist and the wheel, built by setuptools' PEP 517 hooks from a
  clean copy of the repository (tracked and new files, nothing ignored), no registry asked.
- ``HostVenv``: a fresh virtualenv holding only the wheel (``--no-deps``); the dependencies
  come from the suite's virtualenv through a ``.pth`` line, after the venv's own packages, and
  the repository is not on its path.
- ``HostDatabase``: a database of the host's own on the suite's PostgreSQL server (the
  machine's or the embedded one), named after the suite's test database, so each test process
  (an xdist worker has its own test database) gets its own.
- ``Processes``: long-running children (worker, beat, runserver) in process groups of their
  own, their output in log files, stopped together.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.support.processes import stop_process_group

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 240) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{argv} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def source_files() -> list[str]:
    """The repository's files as a clean checkout has them (tracked and new, not ignored)."""
    listed = run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT)
    return [name for name in listed.splitlines() if name and (ROOT / name).is_file()]


def build_distributions(tree: Path) -> dict[str, Path]:
    """The sdist and the wheel of ``django-switchyard``, built in ``tree`` from a clean copy."""
    for name in source_files():
        target = tree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target, follow_symlinks=False)
    dist = tree / "dist"
    hooks = "from setuptools import build_meta as b; print(b.build_sdist('dist')); print(b.build_wheel('dist'))"
    run([sys.executable, "-c", hooks], cwd=tree)
    (sdist,) = dist.glob("django[-_]switchyard-*.tar.gz")  # setuptools < 69 keeps the hyphen
    (wheel,) = dist.glob("django_switchyard-*-py3-none-any.whl")
    return {"sdist": sdist, "wheel": wheel}


class HostVenv:
    """A virtualenv with the wheel installed and nothing of the repository on its path."""

    def __init__(self, root: Path, wheel: Path) -> None:
        venv = root / "venv"
        run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root)
        self.root = venv
        self.bin = venv / "bin"
        self.python = str(self.bin / "python")
        purelib = run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root)
        # the suite's packages (Django, Celery, ...) as the dependencies, after the venv's own
        (Path(purelib.strip()) / "suite-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", self.python]
        run([*pip, "install", "--quiet", "--no-deps", "--no-index", str(wheel)], cwd=root)
        # console scripts of the dependencies (django-admin, celery) for the venv's Python
        for script in ("django-admin", "celery"):
            module = {"django-admin": "django", "celery": "celery"}[script]
            path = self.bin / script
            path.write_text(f"#!{self.python}\nimport runpy\nrunpy.run_module({module!r}, run_name='__main__')\n")
            path.chmod(0o755)


class HostDatabase:
    """A database named ``<suite test database>_<suffix>`` on the suite's server."""

    def __init__(self, suffix: str) -> None:
        from django.conf import settings

        db = settings.DATABASES["default"]
        worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # one per pytest-xdist worker
        base = db["TEST"].get("NAME") or "test_switchyard"
        self.name = f"{base}_{suffix}{'_' + worker if worker and not base.endswith(worker) else ''}"[:63]
        self.host = str(db.get("HOST") or "")
        self.port = str(db.get("PORT") or "")
        self.user = str(db.get("USER") or "")
        self.password = str(db.get("PASSWORD") or "")

    def _server(self) -> Any:
        import psycopg

        return psycopg.connect(
            dbname="postgres",
            host=self.host or None,
            port=self.port or None,
            user=self.user or None,
            password=self.password or None,
            autocommit=True,
        )

    def recreate(self, *, drop_only: bool = False) -> None:
        from psycopg import sql

        with self._server() as conn:
            name = sql.Identifier(self.name)
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
            if not drop_only:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(name))


class Processes:
    """Long-running children of a host project, each in its own process group."""

    def __init__(self, logs: Path) -> None:
        self.logs_folder = logs
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, name: str, argv: list[str], *, cwd: Path, env: dict[str, str]) -> None:
        log = self.logs_folder / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started.append((proc, log))

    def log(self, name: str) -> str:
        return (self.logs_folder / f"{name}.log").read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}" for _, log in self.started)

    def stop(self) -> None:
        for proc, _ in reversed(self.started):
            stop_process_group(proc)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], T], *, what: str, logs: Callable[[], str], timeout: float = 60) -> T:
    """Poll ``condition`` until it answers something true (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}\n{logs()}")


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def broker_env(folder: Path) -> dict[str, str]:
    """The suite's broker for a host: ``CELERY_BROKER_URL`` when the suite runs on a server
    broker, else kombu's filesystem transport in a folder of the host's own."""
    if os.environ.get("CELERY_BROKER_URL"):
        return {"BROKER_URL": os.environ["CELERY_BROKER_URL"]}
    folder.mkdir(parents=True, exist_ok=True)
    return {"BROKER_URL": "filesystem://", "BROKER_FOLDER": str(folder)}
