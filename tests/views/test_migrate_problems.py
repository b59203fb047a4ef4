"""The Migrate dialog's refusals as htmx sees them: every refusal of an htmx request is a
non-2xx problem+json (title, detail, violations) that workflows/static/workflows/js/problems.js shows in the alert
region of the control that sent it; the same refusal without htmx stays the HTML fragment it
was. Also: Apply re-renders the dialog from the database, the records link, fork rows."""

# ruff: noqa: F811  (the fixtures parked and drain are imported from the dialog's tests)
from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.test.client import RequestFactory

from tests.engine.test_migration import FORK
from tests.views.test_migrate_dialog import DIALOG, admin_client, drain, form, parked  # noqa: F401
from workflows import definitions, operations
from workflows.models import Command, MigrationRecord
from workflows.views import migrate as view

HTMX = {"HTTP_HX_REQUEST": "true", "HTTP_HX_CURRENT_URL": f"http://testserver{DIALOG}"}


def problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/problem+json"
    body = json.loads(response.content)
    assert body["status"] == status and body["title"] and body["detail"]
    return dict(body)


@pytest.mark.django_db(transaction=True)
class TestRefusalsToHtmx:
    def test_selected_runs_without_an_action_name_each_row(
        self, parked: dict[str, list[str]], demo_users: dict[str, Any]
    ) -> None:
        response = admin_client(demo_users).post(
            f"{DIALOG}preview/", form(review=("", "all"), wait_goods=("", "all")), **HTMX
        )
        body = problem(response, 422)
        assert (body["code"], body["detail"]) == ("NO_ACTION", "Nothing was previewed.")
        assert [v["message"] for v in body["violations"]] == [
            "Choose what to do with the runs selected at review.",
            "Choose what to do with the runs selected at wait-goods.",
        ]
        assert [v["pointer"] for v in body["violations"]] == ["/do_1", "/do_2"]
        assert not MigrationRecord.objects.exists()

    def test_a_wrong_count_is_refused_and_the_preview_stays(
        self, parked: dict[str, list[str]], demo_users: dict[str, Any], monkeypatch: Any
    ) -> None:
        from workflows.engine import migration

        monkeypatch.setattr(view, "LARGE_BATCH", 2)
        monkeypatch.setattr(migration.apply, "LARGE_BATCH", 2)
        client = admin_client(demo_users)
        client.post(f"{DIALOG}preview/", form(review=("end", "all")), **HTMX)
        record = MigrationRecord.objects.get()
        body = problem(client.post(f"/migrate/records/{record.id}/apply/", {"confirm": "2"}, **HTMX), 422)
        assert body["code"] == "CONFIRM_MISMATCH" and "Nothing was applied" in body["detail"]
        assert not Command.objects.filter(kind="MIGRATION").exists()
        # without htmx the preview comes back with the message in it, as before
        page = client.post(f"/migrate/records/{record.id}/apply/", {"confirm": "2"})
        assert page.status_code == 422 and 'role="alert">Type the number of runs exactly' in page.content.decode()

    def test_a_stale_selection_is_refused_not_called_empty(
        self, parked: dict[str, list[str]], demo_users: dict[str, Any], drain: Callable[[], int]
    ) -> None:
        client = admin_client(demo_users)
        picked = parked["review"][:1]
        operations.cancel(run_id=picked[0])  # moved on since it was picked
        drain()
        body = problem(client.post(f"{DIALOG}preview/", form(review=("end", picked)), **HTMX), 409)
        assert body["code"] == "SELECTION_STALE" and "nothing was frozen" in body["detail"]
        page = client.post(f"{DIALOG}preview/", form(review=("end", [str(uuid.uuid4())])))
        assert page.status_code == 409 and 'role="alert">An approver, a timer or another migration moved them on' in (
            page.content.decode()
        )
        # an untouched dialog is still no refusal
        assert "Nothing is selected" in client.post(f"{DIALOG}preview/", form(), **HTMX).content.decode()

    def test_a_discarded_preview_cannot_be_applied(
        self, parked: dict[str, list[str]], demo_users: dict[str, Any]
    ) -> None:
        client = admin_client(demo_users)
        client.post(f"{DIALOG}preview/", form(review=("end", "all")), **HTMX)
        record = MigrationRecord.objects.get()
        assert client.post(f"/migrate/records/{record.id}/discard/", **HTMX).status_code == 200
        body = problem(client.post(f"/migrate/records/{record.id}/apply/", **HTMX), 409)
        assert body["code"] == "MIGRATION_ILLEGAL_STATE"

    def test_an_incomplete_form_is_refused(self, parked: dict[str, list[str]], demo_users: dict[str, Any]) -> None:
        client = admin_client(demo_users)
        assert problem(client.post(f"{DIALOG}preview/", {"rows": "0"}, **HTMX), 400)["code"] == "INCOMPLETE"
        assert problem(client.post(f"{DIALOG}picker/0/", {}, **HTMX), 400)["code"] == "INCOMPLETE"
        assert client.post(f"{DIALOG}picker/0/", {}).content == view.INCOMPLETE.encode()

    def test_permission_refusals(self, parked: dict[str, list[str]], demo_users: dict[str, Any]) -> None:
        approver = Client()
        approver.force_login(demo_users["alice"])
        body = problem(approver.post(f"{DIALOG}preview/", form(review=("end", "all")), **HTMX), 403)
        assert "workflows.migrate_runs" in body["detail"] and "Nothing was done" in body["detail"]
        assert approver.post(f"{DIALOG}preview/", form(review=("end", "all"))).status_code == 403  # a page, as before
        # signed out: the whole page goes to the sign-in form, back to the dialog afterwards
        anonymous = Client().post(f"{DIALOG}preview/", form(review=("end", "all")), **HTMX)
        assert anonymous.status_code == 200 and anonymous["HX-Redirect"] == f"/accounts/login/?next={DIALOG}"
        assert not MigrationRecord.objects.exists()
        assert view.preview.capability == view.Capability.MIGRATE  # type: ignore[attr-defined]


@pytest.mark.django_db(transaction=True)
class TestFreshDialog:
    def test_the_dialog_declares_its_alert_regions_and_links_its_records(
        self, parked: dict[str, list[str]], demo_users: dict[str, Any]
    ) -> None:
        page = admin_client(demo_users).get(DIALOG).content.decode()
        assert f'href="{DIALOG}records/">Migration records</a>' in page
        assert "js/problems.js" in page
        for region in ("pair-problems", "preview-problems", "picker-problems-0"):
            assert f'id="{region}" class="problems" role="alert" aria-live="assertive"' in page
        assert 'data-problems="#preview-problems" data-clears="#result"' in page

    def test_apply_re_renders_the_dialog_from_the_database(
        self, parked: dict[str, list[str]], demo_users: dict[str, Any], drain: Callable[[], int]
    ) -> None:
        client = admin_client(demo_users)
        client.post(f"{DIALOG}preview/", form(wait_goods=("end", "all")), **HTMX)
        record = MigrationRecord.objects.get()
        page = client.post(f"/migrate/records/{record.id}/apply/", **HTMX).content.decode()
        assert '<div id="pair" hx-swap-oob="true">' in page and 'id="pair-form"' in page
        assert '<span id="parked-total" hx-swap-oob="true">' in page
        assert page.count('class="position-row"') == 3  # the ends wait for the background task
        operations.migration_run_background(record_id=record.id, budget_seconds=10)  # the task's body
        polled = client.get(f"/migrate/records/{record.id}/progress/", **HTMX).content.decode()
        assert 'hx-trigger="load delay:1s"' in polled and "hx-swap-oob" not in polled  # a poll in flight
        drain()
        done = client.get(f"/migrate/records/{record.id}/progress/", **HTMX).content.decode()
        assert "is done" in done and '<div id="pair" hx-swap-oob="true">' in done
        assert done.count('class="position-row"') == 2 and 'value="wait-goods"' not in done
        assert '<span id="parked-total" hx-swap-oob="true">5 runs</span>' in done
        assert 'id="selected-0" class="selected-count">none<' in done
        # without htmx the answer is the progress alone
        assert "hx-swap-oob" not in client.get(f"/migrate/records/{record.id}/progress/").content.decode()

    def test_switching_revisions_clears_an_older_result(
        self, parked: dict[str, list[str]], demo_users: dict[str, Any]
    ) -> None:
        page = (
            admin_client(demo_users)
            .get(f"{DIALOG}?source=2&target=1", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="pair")
            .content.decode()
        )
        assert page.startswith('<div id="pair">')
        assert '<div id="result" class="section" aria-live="polite" hx-swap-oob="true"></div>' in page


@pytest.mark.django_db(transaction=True)
def test_fork_rows_say_why_move_is_not_offered(db: None, demo_users: dict[str, Any], drain: Callable[[], int]) -> None:
    for version, activate in ((1, True), (2, False)):
        ref = definitions.load(scope="default", text=FORK.format(v=version), format="yaml")
        definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
        if activate:
            definitions.activate(
                scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default"
            )
    operations.start(definition_id="fork-move", payload={})
    drain()
    page = admin_client(demo_users).get("/migrate/default/fork-move/").content.decode()
    assert '<select id="do-0" name="do_0" aria-describedby="why-0"' in page
    select = page.split('id="do-0"', 1)[1].split("</select>", 1)[0]
    assert "move:" not in select
    # Move is named, disabled, with why; Cancel and End are what is offered
    assert re.findall(r'<option value="([^"]*)"( disabled)?>', select) == [
        ("", ""),
        ("", " disabled"),
        ("cancel", ""),
        ("end", ""),
    ]
    assert "Move — refused while the fork's branches are active" in select
    assert "the engine refuses to move a run with active branches" in page
    assert "Cancel or End them here, or leave them (select none)" in page


def test_problem_texts_are_value_free() -> None:
    request = RequestFactory().post("/")
    request.htmx = True  # type: ignore[attr-defined]
    body = json.loads(view._refuse(request, 409, "X", "A title", "A detail.").content)
    assert body == {
        "type": "urn:switchyard:problem:x",
        "title": "A title",
        "status": 409,
        "code": "X",
        "detail": "A detail.",
        "violations": [],
    }
