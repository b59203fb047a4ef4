"""The pages speak the browser's language: German for ``Accept-Language: de``, English otherwise.

The apps ship German catalogs (``<app>/locale/de``); ``LocaleMiddleware`` picks the language
from the request and ``<html lang>`` says which one the page is in. Texts that come from a
workflow document (task titles, decision labels) are the author's and stay as written.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from tests.engine import documents
from tests.views.test_tasks_pages import FORM, _form_fields, _open, deploy, drain
from workflows import operations
from workflows.models import Task

pytestmark = pytest.mark.django_db(transaction=True)

GERMAN = "de-DE,de;q=0.9,en;q=0.5"


@pytest.fixture(autouse=True)
def _no_confirmation_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("workflows.views.tasks.CONFIRM_WAIT_SECONDS", 0)


def _task() -> Task:
    deploy(documents.APPROVAL)
    run_id = operations.start(
        definition_id="approval", business_key="PO-7", payload={"number": "PO-7", "total": 5000}
    ).run_id
    drain(run_id)
    return Task.objects.get(run_id=run_id)


def _client(user: Any, language: str) -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(user)
    return client


def test_a_german_browser_gets_the_inbox_and_task_page_in_german(demo_users: dict[str, Any]) -> None:
    task = _task()
    alice = _client(demo_users["alice"], GERMAN)

    inbox = alice.get("/tasks/")
    html = inbox.content.decode()
    assert inbox["Content-Language"] == "de"
    assert '<html lang="de">' in html
    german = ("Ihre Aufgaben", "Posteingang", "Abmelden", "Aufgaben zeigen", "1 offene Aufgabe", "Geschäftsschlüssel")
    for text in german:
        assert text in html, text
    for english in ("Your tasks", "Sign out", "Show tasks", "open task"):
        assert english not in html, english
    assert task.title in html  # the workflow's own words stay as written

    page = alice.get(f"/tasks/{task.id}/").content.decode()
    for text in ("Ihre Entscheidung", "Zugewiesen an", "Übernehmen", "Laufstatus", "Details"):
        assert text in page, text
    assert "Your decision" not in page and "Claim it so the others" not in page


def test_unreadable_inputs_and_schema_violations_are_explained_in_german(demo_users: dict[str, Any]) -> None:
    """The value-free messages next to the fields, in German, with the schema's limit kept."""
    task = _open(FORM, {"number": "F-1"})
    alice = _client(demo_users["alice"], GERMAN)
    fields = _form_fields(alice.get(f"/tasks/{task.id}/").content.decode(), "approve")

    answer = alice.post(
        f"/tasks/{task.id}/",
        {**fields, "payload/amount": "lots", "payload/on": "31/01/2030", "payload/tags": "fine\ntoo-long"},
    )
    assert answer.status_code == 422
    errors = dict(re.findall(r'id="f-approve-payload-(\w+)-errors"><li>([^<]+)</li>', answer.content.decode()))
    assert errors == {
        "amount": "Geben Sie eine Zahl ein.",
        "on": "Geben Sie ein Datum ein (JJJJ-MM-TT).",
        "level": "Dieses Feld ist erforderlich.",
        "tags": "Verwenden Sie höchstens 5 Zeichen.",
    }


def test_an_english_browser_still_gets_english(demo_users: dict[str, Any]) -> None:
    _task()
    for language in ("en-US,en;q=0.9", "fr-FR,fr;q=0.9"):  # a language we do not ship falls back to English
        html = _client(demo_users["alice"], language).get("/tasks/").content.decode()
        assert '<html lang="en">' in html, language
        assert "Your tasks" in html and "Sign out" in html and "1 open task" in html
        assert "Ihre Aufgaben" not in html


def test_the_sign_in_and_signed_out_pages_follow_the_browser() -> None:
    german = Client(HTTP_ACCEPT_LANGUAGE=GERMAN)
    assert "Benutzername" in german.get("/accounts/login/").content.decode()
    assert "Sie haben sich abgemeldet" in german.get("/accounts/signed-out/").content.decode()


def test_status_codes_are_shown_in_the_readers_words(demo_users: dict[str, Any]) -> None:
    task = _task()
    admin = _client(demo_users["admin"], GERMAN)
    runs = admin.get("/runs/").content.decode()
    assert '<span class="chip chip-waiting">Wartet</span>' in runs
    assert '<option value="OUTCOME_UNKNOWN"' not in runs and '<option value="COMPENSATED">Kompensiert</option>' in runs
    page = admin.get(f"/runs/{task.run_id}/").content.decode()
    assert '<option value="decisions">Entscheidungen</option>' in page
    english = _client(demo_users["admin"], "en").get("/runs/").content.decode()
    assert '<span class="chip chip-waiting">Waiting</span>' in english
