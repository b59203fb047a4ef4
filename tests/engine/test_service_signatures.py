"""Service calls are signed per Standard Webhooks (issue #40).

The story: a service step's signature covered only the body, so a captured call could be
replayed to the receiver as often as one liked. Now it covers the message id, the attempt's
timestamp and the body; a receiver that checks the timestamp's window refuses a replay.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import https_receiver
from workflows import conf
from workflows.engine import events
from workflows.engine.outbox import delivery

KEY = "service-signing-secret-for-tests"


@pytest.fixture
def receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any) -> Iterator[https_receiver.HttpsReceiver]:
    live = https_receiver.start(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(live.cert))
    settings.WORKFLOWS = {
        "SECURITY": {"WEBHOOK_SIGNING_SECRET": KEY},
        "SERVICES": {"ALLOWED_NETWORKS": ["127.0.0.1/32"]},
    }
    conf.reload()
    yield live
    live.stop()
    conf.reload()


def _intent(key: str) -> dict[str, Any]:
    return {"id": 1, "attempts": 1, "idempotency_key": key, "payload": {"order": "o-1"}, "headers": {}}


def test_a_service_call_is_signed_over_id_timestamp_and_body(receiver: https_receiver.HttpsReceiver) -> None:
    delivery._webhook(receiver.url, _intent("run-1:7:reserve:1"))
    delivery._webhook(receiver.url, _intent("run-1:7:reserve:1"))  # a retry: the same id
    first, retry = receiver.received()
    assert "x-switchyard-signature" not in first.headers  # the body-only signature is gone
    assert first.headers["webhook-id"] == retry.headers["webhook-id"] == "run-1:7:reserve:1"
    assert events.verify(KEY.encode(), first.headers, first.body)
    assert events.verify(KEY.encode(), retry.headers, retry.body)

    sent_at = int(first.headers["webhook-timestamp"])
    # replayed later than the window: refused, although id, timestamp and body are untouched
    assert not events.verify(KEY.encode(), first.headers, first.body, now=sent_at + 301)
    # the timestamp moved forward to pass the window: the signature no longer matches
    moved = {**first.headers, "webhook-timestamp": str(sent_at + 301)}
    assert not events.verify(KEY.encode(), moved, first.body, now=sent_at + 301)
    # another id, or another body, under the captured signature: refused
    assert not events.verify(KEY.encode(), {**first.headers, "webhook-id": "other"}, first.body)
    assert not events.verify(KEY.encode(), first.headers, first.body.replace(b"o-1", b"o-2"))
