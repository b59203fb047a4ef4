"""The README's run command, as a new user runs it: `python3 dev.py run`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.browser import login
from tests.support.processes import ROOT, descendants, is_alive, stop_process_group

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]

# A first start initialises PostgreSQL, migrates and collects static files.
START_TIMEOUT = 240.0
# Variables of this test run that would point the app away from the README's defaults.
NOT_INHERITED = {
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "SWITCHYARD_DB_NAME",
    "SWITCHYARD_TEST_DB",
    "XDG_RUNTIME_DIR",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
    "PYTEST_CURRENT_TEST",
    # the suite's pytest-xdist worker and the broker folder it was given (config/testing.py)
    "PYTEST_XDIST_WORKER",
    "SWITCHYARD_BROKER_FOLDER",
    "PORT",
    "HOST",
    "DEBUG",
    "SECRET_KEY",
    "SECURE_COOKIES",
    "WORKFLOWS_SECURITY_WEBHOOK_SIGNING_SECRET",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_dev_py_run_serves_admin_and_healthz_and_stops_everything_on_ctrl_c(browser: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env["SWITCHYARD_DATA_DIR"] = str(data_dir)
    log_path = tmp_path / "dev-run.log"
    python3 = shutil.which("python3") or "python3"
    with log_path.open("wb") as log:
        app = subprocess.Popen(
            [python3, "dev.py", "run", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output() -> str:
        return log_path.read_text(errors="replace")

    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert app.poll() is None, f"dev.py run exited with {app.returncode}:\n{output()}"
            try:
                status, body = get(f"{base}/healthz")
                if status == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"/healthz did not answer 200:\n{output()}"
            time.sleep(0.5)
        assert json.loads(body)["status"] == "ok"

        # Wait for the banner: it comes after dev.py saw the web answer.
        while "Ctrl-C stops everything" not in output():
            assert time.monotonic() < deadline, output()
            time.sleep(0.2)
        assert "admin" in output() and "alice" in output() and "bob" in output()
        processes = descendants(app.pid)
        names = {Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode() for pid in processes}
        assert any("runserver" in n for n in names), names
        assert any("celery" in n and " worker" in n for n in names), names
        assert any("celery" in n and " beat" in n for n in names), names
        # It binds this machine only, and says so; its secrets are its own, readable by its owner only.
        assert f"listens on 127.0.0.1:{port} (this machine only" in output(), output()
        assert "dev.py: WARNING" not in output()
        listening = {
            (c.laddr.ip, c.laddr.port)
            for pid in processes
            if is_alive(pid)
            for c in psutil.Process(pid).net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        }
        assert ("127.0.0.1", port) in listening, listening
        assert not [a for a in listening if a[1] == port and a[0] != "127.0.0.1"], listening
        for name in ("secret_key", "webhook_signing_secret"):
            assert stat.S_IMODE((data_dir / name).stat().st_mode) == 0o600

        page = browser.new_page()
        try:
            page.goto(f"{base}/admin/")
            assert "/admin/login/" in page.url
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", "admin")
            with page.expect_navigation():
                page.click("input[type=submit]")
            assert page.url.rstrip("/").endswith("/admin")
            assert page.locator("h1", has_text="Site administration").is_visible()
        finally:
            page.close()
        approver = browser.new_page()
        try:
            login(approver, base, "alice", "alice", next="/accounts/login/")
            assert "Signed in as alice" in approver.inner_text("header")
        finally:
            approver.close()

        os.kill(app.pid, signal.SIGINT)
        assert app.wait(timeout=60) == 0, output()
        postmaster = data_dir / "pg" / "postmaster.pid"
        while postmaster.exists():  # pg_ctl -w stop has returned before dev.py exits
            assert time.monotonic() < deadline, "embedded PostgreSQL still running"
            time.sleep(0.2)
        survivors = {pid for pid in processes if is_alive(pid)}
        assert not survivors, f"left running after Ctrl-C: {survivors}\n{output()}"
    finally:
        stop_process_group(app, grace=5)  # type: ignore[arg-type]
