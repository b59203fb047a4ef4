"""The Migrate dialog through Django's test client: positions, the picker, preview, bounded
apply, records, the admin link and who may use it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from tests.engine.test_migration import REVISION_1, REVISION_2
from workflows import definitions, operations
from workflows.engine import executor
from workflows.engine.migration import apply as migration_apply
from workflows.models import Command, MigrationRecord, Run, Task

DIALOG = "/migrate/default/purchase-move/"


@pytest.fixture
def drain() -> Callable[[], int]:
    return lambda: executor.drain(budget_seconds=10)


@pytest.fixture
def parked(db: None, drain: Callable[[], int], demo_users: dict[str, Any]) -> dict[str, list[str]]:
    for text, activate in ((REVISION_1, True), (REVISION_2, False)):
        ref = definitions.load(scope="default", text=text, format="yaml")
        definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
        if activate:
            definitions.activate(
                scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default"
            )
    runs: dict[str, list[str]] = {"review": [], "cool-off": [], "wait-goods": []}
    for node, route, n in (("review", "review", 3), ("cool-off", "cool", 2), ("wait-goods", "goods", 2)):
        for i in range(n):
            runs[node].append(
                operations.start(
                    definition_id="purchase-move", payload={"route": route}, business_key=f"{node.upper()}-{i}"
                ).run_id
            )
    drain()
    return runs


def admin_client(demo_users: dict[str, Any]) -> Client:
    client = Client()
    client.force_login(demo_users["admin"])
    return client


def form(source: int = 1, target: int = 2, **rows: Any) -> dict[str, Any]:
    """The positions form as the page posts it: rows in the dialog's order (by node)."""
    order = ["cool-off", "review", "wait-goods"]
    kinds = {"cool-off": "TIMER", "review": "TASK", "wait-goods": "SIGNAL"}
    data: dict[str, Any] = {"source": source, "target": target, "rows": len(order), "reason": ""}
    for i, node in enumerate(order):
        data[f"node_{i}"], data[f"kind_{i}"] = node, kinds[node]
        data[f"count_{i}"] = {"cool-off": 2, "review": 3, "wait-goods": 2}[node]
        choice = rows.get(node.replace("-", "_"))
        if choice:
            do, runs = choice
            data[f"do_{i}"] = do
            if runs == "all":
                data[f"all_{i}"] = "1"
            else:
                data[f"run_{i}"] = runs
    return data


@pytest.mark.django_db(transaction=True)
class TestDialog:
    def test_one_row_per_position_with_counts_and_same_id_preselected(
        self, parked: dict[str, list[str]], demo_users: dict[str, Any]
    ) -> None:
        page = admin_client(demo_users).get(DIALOG).content.decode()
        assert page.count('class="position-row"') == 3
        assert re.search(r"3 runs<span class=\"visually-hidden\"> at review", page)
        assert '<option value="move:cool-off" selected>' in page  # the same id exists in revision 2
        assert "not in revision 2" in page  # review was renamed
        assert 'id="selected-0" class="selected-count">none<' in page  # nothing selected until chosen
        assert "<svg" in page  # the source graph with its counts

    def test_only_users_who_may_migrate_see_it(self, parked: dict[str, list[str]], demo_users: dict[str, Any]) -> None:
        anonymous = Client().get(DIALOG)
        assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
        approver = Client()
        approver.force_login(demo_users["alice"])
        assert approver.get(DIALOG).status_code == 403
        assert approver.post(f"{DIALOG}preview/", form(review=("end", "all"))).status_code == 403
        assert not MigrationRecord.objects.exists()

    def test_the_picker_pages_and_searches_by_business_key(
        self, parked: dict[str, list[str]], demo_users: dict[str, Any]
    ) -> None:
        client = admin_client(demo_users)
        data = {**form(), "q_1": "review-2"}
        page = client.post(f"{DIALOG}picker/1/", data, HTTP_HX_REQUEST="true").content.decode()
        assert "REVIEW-2" in page and "REVIEW-0" not in page
        assert 'hx-swap-oob="true">none</span>' in page
        picked = parked["review"][:2]
        page = client.post(f"{DIALOG}picker/1/", {**form(), "run_1": picked}).content.decode()
        assert 'hx-swap-oob="true">2 of 3</span>' in page

    def test_an_untouched_dialog_changes_nothing(
        self, parked: dict[str, list[str]], demo_users: dict[str, Any]
    ) -> None:
        response = admin_client(demo_users).post(f"{DIALOG}preview/", form())
        assert "Nothing is selected" in response.content.decode()
        assert not MigrationRecord.objects.exists() and not Command.objects.filter(kind="MIGRATION").exists()

    def test_selected_runs_without_an_action_are_refused(
        self, parked: dict[str, list[str]], demo_users: dict[str, Any]
    ) -> None:
        response = admin_client(demo_users).post(f"{DIALOG}preview/", form(review=("", "all")))
        assert response.status_code == 422 and "Choose what to do" in response.content.decode()

    def test_preview_says_what_apply_will_do_and_apply_moves_cancels_ends(
        self, parked: dict[str, list[str]], demo_users: dict[str, Any], drain: Callable[[], int]
    ) -> None:
        client = admin_client(demo_users)
        picked = parked["review"][:2]
        page = client.post(
            f"{DIALOG}preview/",
            form(
                review=("move:manager-review", picked),
                cool_off=("cancel", "all"),
                wait_goods=("end", "all"),
            ),
        ).content.decode()
        record = MigrationRecord.objects.get()
        assert "Preview — nothing has changed yet" in page
        assert "2 approvals withdrawn from the inbox of user <strong>alice</strong>" in page
        assert "opens for\n            user <strong>bob</strong>; notified: bob" in page
        assert "Due 5 days after the move" in page
        assert "2 runs cancelled for good" in page and "completed as a success cut short" in page
        assert not Command.objects.filter(kind="MIGRATION").exists()  # a preview changes nothing

        page = client.post(f"/migrate/records/{record.id}/apply/").content.decode()
        # Apply hands the record to a background task and answers at once with the progress
        assert "Applying migration" in page and "Applying in the background: 6 runs left" in page
        assert MigrationRecord.objects.get().status == "APPLYING"
        operations.migration_run_background(record_id=record.id, budget_seconds=10)  # the task's body
        page = client.get(f"/migrate/records/{record.id}/progress/").content.decode()
        # the two moves are made by the batch itself, the cancels and ends wait for the executor
        assert 'value="2"' in page and "4 waiting for the executor" in page.replace("</strong> ", " ").replace(
            "<strong>", ""
        )
        drain()
        page = client.get(f"/migrate/records/{record.id}/progress/").content.decode()
        assert "is done" in page and "6 of 6 runs done (100%)" in page
        assert {Run.objects.get(pk=r).status for r in parked["cool-off"]} == {"CANCELLED"}
        assert set(
            Task.objects.filter(run_id__in=picked, status="OPEN").values_list("assignment_value", flat=True)
        ) == {"bob"}

        page = client.get(f"/migrate/records/{record.id}/").content.decode()
        assert "Previewed by</dt><dd>admin" in page
        assert page.count('class="chip chip-moved"') == 2
        assert f">#{record.id}</a>" in client.get(f"{DIALOG}records/").content.decode()

    def test_a_large_batch_needs_its_size_typed_and_applies_in_bounded_batches(
        self,
        parked: dict[str, list[str]],
        demo_users: dict[str, Any],
        monkeypatch: Any,
        settings: Any,
        drain: Callable[[], int],
    ) -> None:
        from workflows import conf
        from workflows.views import migrate as view

        monkeypatch.setattr(view, "LARGE_BATCH", 2)
        monkeypatch.setattr(migration_apply, "LARGE_BATCH", 2)
        settings.WORKFLOWS = {"MIGRATE": {"APPLY_BATCH": 2}}
        conf.reload()
        try:
            client = admin_client(demo_users)
            page = client.post(f"{DIALOG}preview/", form(review=("end", "all"))).content.decode()
            assert "Type <strong>3</strong> to confirm" in page
            record = MigrationRecord.objects.get()
            refused = client.post(f"/migrate/records/{record.id}/apply/", {"confirm": "2"})
            assert refused.status_code == 422 and not Command.objects.filter(kind="MIGRATION").exists()
            page = client.post(f"/migrate/records/{record.id}/apply/", {"confirm": "3"}).content.decode()
            assert "Applying in the background: 3 runs left" in page
            # the task applies batch after batch (two runs, then one), each its own transaction
            assert operations.migration_run_background(record_id=record.id, budget_seconds=10) == "waiting"
            assert Command.objects.filter(kind="MIGRATION").count() == 3
            drain()
            page = client.get(f"/migrate/records/{record.id}/progress/").content.decode()
            assert "3 of 3 runs done" in page
        finally:
            settings.WORKFLOWS = {}
            conf.reload()


@pytest.mark.django_db(transaction=True)
class TestAdminLink:
    def test_the_admin_shows_migrate_with_the_parked_count(
        self, parked: dict[str, list[str]], demo_users: dict[str, Any]
    ) -> None:
        client = admin_client(demo_users)
        page = client.get("/admin/workflows/definitionversion/").content.decode()
        assert f'href="{DIALOG}" class="migrate-link">Migrate (7 parked)</a>' in page
        row = definitions.list(scope="default", definition_id="purchase-move")[1]
        from workflows.models import DefinitionVersion

        pk = DefinitionVersion.objects.get(definition_id=row.definition_id, version=row.version).pk
        page = client.get(f"/admin/workflows/definitionversion/{pk}/change/").content.decode()
        assert "Migrate (7 parked)" in page and "Migration records" in page

    def test_no_link_when_nothing_is_parked(self, db: None, demo_users: dict[str, Any]) -> None:
        ref = definitions.load(scope="default", text=REVISION_1, format="yaml")
        definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
        page = admin_client(demo_users).get("/admin/workflows/definitionversion/").content.decode()
        assert "migrate-link" not in page
