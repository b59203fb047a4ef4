"""A preview left behind, through Django's test client: the story is a user who previewed a
migration (its runs frozen, "previewed, not applied"), left the page, came back and had Preview
refused with a 409 that neither linked the blocking migration nor showed it anywhere. Now the
dialog lists each open preview with Resume and Discard, the refusal links the record, the
records page lists the preview, the record page applies it, and a refused preview leaves no
record behind (only a sequence value: ids may have gaps)."""

# ruff: noqa: F811  (the fixtures parked and drain are imported from the dialog's tests)

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tests.views.test_migrate_dialog import DIALOG, admin_client, drain, form, parked  # noqa: F401
from tests.views.test_migrate_problems import HTMX
from workflows.models import MigrationItem, MigrationRecord

pytestmark = pytest.mark.django_db(transaction=True)


def abandoned(client: Client, **rows: Any) -> MigrationRecord:
    """Preview, then leave the page: the record stays PREVIEWED with its runs frozen."""
    assert client.post(f"{DIALOG}preview/", form(**rows or {"review": ("end", "all")})).status_code == 200
    return MigrationRecord.objects.get(status="PREVIEWED")


def test_the_dialog_lists_an_abandoned_preview_with_resume_and_discard(
    parked: dict[str, list[str]], demo_users: dict[str, Any]
) -> None:
    client = admin_client(demo_users)
    record = abandoned(client)
    page = client.get(f"{DIALOG}?source=1&target=2").content.decode()
    listed = page.split('id="open-previews"', 1)[1].split("</section>", 1)[0]
    assert "1 preview is waiting: its runs are frozen" in listed
    assert "3 runs frozen" in listed and "Previewed by admin" in listed
    record_url = reverse("workflows:migrate:record", args=[record.id])
    discard_url = reverse("workflows:migrate:discard", args=[record.id])
    assert f'href="{record_url}"' in listed and f"Resume #{record.id}: review and apply" in listed
    assert f'action="{discard_url}?on=dialog"' in listed and 'name="csrfmiddlewaretoken"' in listed
    assert page.index('id="open-previews"') < page.index('id="pair-form"')  # near the top


def test_the_dialog_shows_no_open_previews_card_when_there_is_none(
    parked: dict[str, list[str]], demo_users: dict[str, Any]
) -> None:
    page = admin_client(demo_users).get(DIALOG).content.decode()
    assert '<div id="open-previews"></div>' in page


def test_the_409_links_the_blocking_record_and_leaves_no_record_behind(
    parked: dict[str, list[str]], demo_users: dict[str, Any]
) -> None:
    client = admin_client(demo_users)
    record = abandoned(client)
    record_url = reverse("workflows:migrate:record", args=[record.id])
    page = client.post(f"{DIALOG}preview/", form(review=("end", "all")))
    assert page.status_code == 409
    html = page.content.decode()
    assert f'<a href="{record_url}">Open migration #{record.id}</a>' in html
    assert "3 of the selected runs are frozen" in html and "previewed, not applied" in html
    refused = client.post(f"{DIALOG}preview/", form(review=("end", "all")), **HTMX)
    assert refused.status_code == 409 and refused["Content-Type"] == "application/problem+json"
    body = refused.json()
    assert body["code"] == "RUNS_IN_OPEN_MIGRATION"
    assert body["links"] == [{"href": record_url, "title": f"Open migration #{record.id}"}]
    # the refused previews were rolled back whole: no record, no item (a sequence value is used)
    assert list(MigrationRecord.objects.values_list("id", flat=True)) == [record.id]
    assert MigrationItem.objects.exclude(record_id=record.id).count() == 0


@pytest.mark.parametrize(
    ("picked", "text"), [(1, "1 of the selected runs is frozen"), (2, "2 of the selected runs are frozen")]
)
def test_the_refusal_says_is_for_one_run_and_are_for_more(
    parked: dict[str, list[str]], demo_users: dict[str, Any], picked: int, text: str
) -> None:
    client = admin_client(demo_users)
    abandoned(client, review=("end", parked["review"][:picked]))
    refused = client.post(f"{DIALOG}preview/", form(review=("end", "all")), **HTMX)
    assert refused.status_code == 409 and text in refused.json()["detail"]


def test_the_records_page_lists_the_previewed_record(parked: dict[str, list[str]], demo_users: dict[str, Any]) -> None:
    client = admin_client(demo_users)
    record = abandoned(client)
    page = client.get(f"{DIALOG}records/").content.decode()
    assert "No migration yet." not in page
    assert f'href="{reverse("workflows:migrate:record", args=[record.id])}">#{record.id}</a>' in page
    assert "Previewed, not applied" in page


def test_discarding_from_the_dialog_frees_the_runs_for_a_new_preview(
    parked: dict[str, list[str]], demo_users: dict[str, Any]
) -> None:
    client = admin_client(demo_users)
    record = abandoned(client)
    answer = client.post(f"{reverse('workflows:migrate:discard', args=[record.id])}?on=dialog", **HTMX)
    html = answer.content.decode()
    assert answer.status_code == 200 and html.startswith('<div id="open-previews">')
    assert f"Migration #{record.id} was discarded" in html and "preview is waiting" not in html
    record.refresh_from_db()
    assert record.status == "DISCARDED"
    assert client.post(f"{DIALOG}preview/", form(review=("end", "all"))).status_code == 200
    assert MigrationRecord.objects.filter(status="PREVIEWED").get().total == 3


def test_discarding_from_the_dialog_without_javascript_goes_back_to_the_dialog(
    parked: dict[str, list[str]], demo_users: dict[str, Any]
) -> None:
    client = admin_client(demo_users)
    record = abandoned(client)
    answer = client.post(f"{reverse('workflows:migrate:discard', args=[record.id])}?on=dialog")
    assert answer.status_code == 302 and answer["Location"] == f"{DIALOG}?source=1&target=2"
    assert "preview is waiting" not in client.get(answer["Location"]).content.decode()


def test_the_record_page_of_a_preview_applies_it(
    parked: dict[str, list[str]], demo_users: dict[str, Any], drain: Callable[[], int]
) -> None:
    client = admin_client(demo_users)
    record = abandoned(client)
    apply_url = reverse("workflows:migrate:apply", args=[record.id])
    page = client.get(reverse("workflows:migrate:record", args=[record.id])).content.decode()
    assert "from the Migrate dialog" not in page
    assert f'hx-post="{apply_url}?on=record"' in page and "Discard preview" in page
    answer = client.post(f"{apply_url}?on=record", **HTMX)
    assert answer.status_code == 200 and 'id="migration-progress-card"' in answer.content.decode()
    assert "hx-swap-oob" not in answer.content.decode()  # the record page has no dialog to refresh
    record.refresh_from_db()
    assert record.status in ("APPLYING", "DONE")
