"""The API answers in English whatever the browser's language: its problem titles, details and
violation messages sit next to stable machine-readable codes, and a client in Germany must not
get another text for the same code (only the HTML pages follow Accept-Language)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs/"


def _both(send: Any) -> tuple[Any, Any]:
    return send(HTTP_ACCEPT_LANGUAGE="en"), send(HTTP_ACCEPT_LANGUAGE="de-DE,de;q=0.9")


def test_a_refusal_says_the_same_in_english_to_a_german_client() -> None:
    english, german = _both(lambda **h: APIClient().get(RUNS, **h))
    assert english.status_code == german.status_code == 401
    assert german.json() == english.json()
    assert german.json()["detail"] == "Authentication credentials were not provided."
    assert german["Content-Language"] == "en"


def test_validation_messages_stay_english_for_a_german_client(admin_api: APIClient) -> None:
    english, german = _both(lambda **h: admin_api.post(RUNS, {}, format="json", **h))
    assert english.status_code == german.status_code
    assert 400 <= german.status_code < 500
    assert german.json() == english.json()
    assert "This field is required." in german.content.decode()
