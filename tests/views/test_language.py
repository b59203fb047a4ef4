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


def test_the_run_viewer_says_statuses_kinds_and_timers_in_german(demo_users: dict[str, Any]) -> None:
    """Status badges, the kind of wait, the assignment and timer names are words; codes stay in attributes."""
    task = _task()
    admin = _client(demo_users["admin"], GERMAN)
    page = admin.get(f"/runs/{task.run_id}/").content.decode()
    assert '<span class="chip chip-open" data-status="OPEN">Offen</span>' in page
    assert 'data-status="COMPLETE">Erledigt</span>' in page  # the START command
    assert '<td data-kind="TASK">Aufgabe</td>' in page  # where it waited: a task
    assert "Gruppe approvers zugewiesen" in page  # the card and the timeline say the same
    assert "zugewiesen an group" not in page and "assigned to" not in page
    for english in (">OPEN<", ">COMPLETE<", ">PENDING<", "<td>task</td>", ">human task<", ">complete<", ">now<"):
        assert english not in page, english
    # the graph: step types and the current-position marker
    assert ">Benutzeraufgabe</text>" in page and ">Abschluss</text>" in page and ">jetzt</text>" in page
    assert task.title in page  # the author's words stay as written

    english = _client(demo_users["admin"], "en").get(f"/runs/{task.run_id}/").content.decode()
    assert '<span class="chip chip-open" data-status="OPEN">Open</span>' in english
    assert ">human task</text>" in english and ">complete</text>" in english and ">now</text>" in english
    assert "assigned to group approvers" in english and "Offen" not in english


def test_timer_names_on_the_run_viewer_are_german(demo_users: dict[str, Any]) -> None:
    from tests.views.test_run_viewer import APPROVAL as DUE_APPROVAL
    from tests.views.test_run_viewer import deploy as deploy_viewer
    from tests.views.test_run_viewer import drain as drain_viewer

    deploy_viewer(DUE_APPROVAL)
    run_id = operations.start(definition_id="viewer-approval", payload={"number": "P-9"}).run_id
    drain_viewer()
    page = _client(demo_users["admin"], GERMAN).get(f"/runs/{run_id}/").content.decode()
    assert "Fällig bei <strong>review</strong>" in page
    assert 'data-status="PENDING">Ausstehend</span>' in page
    assert ">Fehlschlag</text>" in page  # the fail step's type in the graph
    english = _client(demo_users["admin"], "en").get(f"/runs/{run_id}/").content.decode()
    assert "Due at <strong>review</strong>" in english and ">fail</text>" in english


def test_the_migrate_dialog_is_german(demo_users: dict[str, Any]) -> None:
    from tests.engine.test_migration import REVISION_1, REVISION_2
    from workflows import definitions

    for text, activate in ((REVISION_1, True), (REVISION_2, False)):
        ref = definitions.load(scope="default", text=text, format="yaml")
        definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
        if activate:
            definitions.activate(
                scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default"
            )
    run_id = operations.start(definition_id="purchase-move", payload={"route": "review"}, business_key="R-1").run_id
    drain(run_id)
    dialog = "/migrate/default/purchase-move/"
    page = _client(demo_users["admin"], GERMAN).get(dialog).content.decode()
    for text in ("Vorschau</button>", "älteste seit", "Was mit den bei review ausgewählten Läufen geschehen soll"):
        assert text in page, text
    assert ">Benutzeraufgabe</text>" in page
    for english in (">Preview<", "oldest since", "What to do with the runs", ">human task<", ">complete<"):
        assert english not in page, english

    english = _client(demo_users["admin"], "en").get(dialog).content.decode()
    assert ">Preview</button>" in english and "oldest since" in english
    assert "What to do with the runs selected at review" in english and ">human task</text>" in english


def test_the_designer_is_german(demo_users: dict[str, Any]) -> None:
    deploy(documents.APPROVAL)
    admin = _client(demo_users["admin"], GERMAN)
    listing = admin.get("/designer/").content.decode()
    assert "v1 verfügbar · aktuell" in " ".join(listing.split())
    for text in ("Genehmigung mit Eskalation", "Saga mit Kompensation", "Parallele Prüfungen"):
        assert text in listing, text
    for english in ("v1 available", "Approval with escalation", "Reserve stock, then charge"):
        assert english not in listing, english

    english = _client(demo_users["admin"], "en").get("/designer/").content.decode()
    assert "v1 available · current" in " ".join(english.split())
    assert "Approval with escalation" in english and "Saga with compensation" in english
