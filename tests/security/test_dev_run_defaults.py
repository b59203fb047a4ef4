"""``python3 dev.py run`` binds this machine only unless told otherwise (issue #25).

The story: ``dev.py run`` bound 0.0.0.0 while seeding ``admin``/``admin``, so anyone on the
network could sign in to a developer's admin. It now binds 127.0.0.1 by default, prints the
address it bound, and warns loudly when ``--host`` binds wider. The full run (with the
listening socket checked) is ``tests/e2e/test_smoke.py``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import dev
from tests.support.processes import ROOT


def test_the_default_host_is_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOST", raising=False)
    help_text = subprocess.run(
        [sys.executable, "dev.py", "run", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    ).stdout

    assert "default 127.0.0.1" in help_text


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"])
def test_loopback_addresses_are_this_machine_only(host: str) -> None:
    assert dev.is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "switchyard.example.com"])
def test_anything_else_is_wider_than_this_machine(host: str) -> None:
    assert not dev.is_loopback(host)


def test_dev_py_reaches_its_own_server_on_the_bound_address() -> None:
    assert dev.probe_host("0.0.0.0") == "127.0.0.1"
    assert dev.probe_host("::") == "[::1]"
    assert dev.probe_host("192.168.1.20") == "192.168.1.20"
    assert dev.url_host("::1") == "[::1]"
