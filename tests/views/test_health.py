from __future__ import annotations

import socket
from typing import Any

import pytest
from django.db.utils import OperationalError
from django.test import Client, override_settings

from workflows.views import health

# Every request reads the database (capture's request_started hook), /healthz included.
pytestmark = [pytest.mark.services, pytest.mark.django_db]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nothing listens once the socket is closed


def test_healthz_answers_ok_when_database_and_broker_answer(client: Client) -> None:
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "broker": "ok"}


def test_healthz_answers_503_naming_the_broker_when_the_broker_is_down(client: Client) -> None:
    with override_settings(
        CELERY_BROKER_URL=f"redis://127.0.0.1:{closed_port()}/0", CELERY_BROKER_TRANSPORT_OPTIONS={}
    ):
        response = client.get("/healthz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["broker"] == "broker unreachable"
    assert body["database"] == "ok"
    assert body["reasons"] == ["broker unreachable"]


class _DownConnection:
    def cursor(self) -> Any:
        raise OperationalError("connection refused")


def test_healthz_answers_503_naming_the_database_when_it_is_down(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health, "connection", _DownConnection())

    response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json()["database"] == "database unreachable"


def test_healthz_refuses_post(client: Client) -> None:
    assert client.post("/healthz").status_code == 405
