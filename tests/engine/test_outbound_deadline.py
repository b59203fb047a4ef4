"""One outbound attempt, one deadline (issue #40): a receiver that trickles its answer a byte at
a time is cut off at the attempt's deadline, whatever a per-read timeout would have allowed,
and the attempt is a timeout, never the status that had not arrived in full."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import https_receiver, trickling_receiver
from workflows.engine import webhooks


@pytest.fixture
def trickler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[trickling_receiver.TricklingReceiver]:
    cert, key = https_receiver.make_certificate(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    receiver = trickling_receiver.TricklingReceiver(cert, key, interval=0.3).start()
    with https_receiver.allowed_networks("127.0.0.1/32"):
        yield receiver
    receiver.stop()


def test_a_trickling_answer_is_cut_off_at_the_attempt_s_deadline(
    trickler: trickling_receiver.TricklingReceiver,
) -> None:
    began = time.monotonic()
    with pytest.raises(webhooks.AttemptTimedOut):
        webhooks.post(trickler.url, b"{}", {"Content-Type": "application/json"}, seconds=1.5)
    took = time.monotonic() - began
    # each byte came well within any per-read timeout; the attempt still ended at its deadline
    assert 1.4 <= took < 3.0
    assert trickler.connections() == 1
