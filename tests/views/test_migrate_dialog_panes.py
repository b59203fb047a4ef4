"""The Migrate dialog's target graph (beside the source graph, the picked node highlighted and
redrawn when a row's pick changes) and its digest checkbox (kept on the migration record; the
preview says who is notified). Fork rows: ``test_migrate_problems.py``."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from tests.views import test_migrate_dialog as dialog_tests
from tests.views.test_migrate_dialog import DIALOG, admin_client, form
from workflows import operations
from workflows.models import MigrationRecord

pytestmark = pytest.mark.django_db(transaction=True)
parked = dialog_tests.parked  # the fixtures of the dialog's tests: runs parked at three positions
drain = dialog_tests.drain
GRAPH = f"{DIALOG}target-graph/"


def highlighted(svg_html: str) -> list[str]:
    """The steps a picture marks as current (``wfg-current``)."""
    return re.findall(r'<g class="[^"]*wfg-current[^"]*" data-step="([^"]+)"', svg_html)


def target_pane(page: str) -> str:
    start = page.index('<div id="target-graph"')
    return page[start : page.index("</figure>", start)]


def test_the_target_graph_is_drawn_beside_the_source_with_the_first_row_s_pick(
    parked: dict[str, list[str]], demo_users: dict[str, Any]
) -> None:
    page = admin_client(demo_users).get(DIALOG).content.decode()
    assert page.count('class="wfg"') == 2  # revision 1 and revision 2
    pane = target_pane(page)
    assert "purchase-move revision 2" in pane
    # the rows are cool-off, review, wait-goods: cool-off keeps its id in revision 2
    assert highlighted(pane) == ["cool-off"] and ">moves here</text>" in pane
    assert "manager-review" in pane  # revision 2's renamed node is on the picture


def test_changing_a_row_s_pick_redraws_the_target_graph_with_that_node(
    parked: dict[str, list[str]], demo_users: dict[str, Any]
) -> None:
    client = admin_client(demo_users)
    moved = client.get(GRAPH, {"target": 2, "row": "review", "do_1": "move:manager-review"}, HTTP_HX_REQUEST="true")
    assert moved.status_code == 200
    html = moved.content.decode()
    assert highlighted(html) == ["manager-review"]
    assert "Runs selected at <code>review</code> move to <strong>manager-review</strong>" in html
    cancelled = client.get(GRAPH, {"target": 2, "row": "review", "do_1": "cancel"}).content.decode()
    assert highlighted(cancelled) == [] and "are cancelled: they leave the graph" in cancelled
    forged = client.get(GRAPH, {"target": 2, "row": "<b>x</b>", "do_1": "move:LEAK-SENTINEL"}).content.decode()
    assert highlighted(forged) == [] and "LEAK-SENTINEL" not in forged and "<b>x</b>" not in forged
    missing = client.get(GRAPH, {"target": 99, "do_0": "cancel"}, HTTP_HX_REQUEST="true")
    assert missing.status_code == 404 and missing["Content-Type"] == "application/problem+json"


def test_the_target_graph_needs_the_migrate_capability(
    parked: dict[str, list[str]], demo_users: dict[str, Any]
) -> None:
    approver = Client()
    approver.force_login(demo_users["alice"])
    assert approver.get(GRAPH, {"target": 2, "do_1": "cancel"}).status_code == 403


def test_the_digest_checkbox_is_kept_on_the_record(parked: dict[str, list[str]], demo_users: dict[str, Any]) -> None:
    client = admin_client(demo_users)
    page = client.get(DIALOG).content.decode()
    assert 'id="notify-digest" name="notify_digest" value="1"' in page and "checked" not in re.search(
        r'<input type="checkbox" id="notify-digest"[^>]*>', page
    ).group(0)
    ticked = {**form(review=("end", parked["review"][:1])), "notify_digest_shown": "1", "notify_digest": "1"}
    assert client.post(f"{DIALOG}preview/", ticked).status_code == 200
    unticked = {**form(cool_off=("end", parked["cool-off"][:1])), "notify_digest_shown": "1"}
    assert client.post(f"{DIALOG}preview/", unticked).status_code == 200
    assert list(MigrationRecord.objects.order_by("id").values_list("notify_digest", flat=True)) == [True, False]


def test_the_preview_says_approvals_going_back_to_the_same_assignee_notify_nobody(
    parked: dict[str, list[str]], demo_users: dict[str, Any]
) -> None:
    client = admin_client(demo_users)
    same = {**form(source=1, target=1, review=("move:review", "all")), "notify_digest_shown": "1"}
    text = " ".join(client.post(f"{DIALOG}preview/", same).content.decode().split())
    assert "3 approvals go back to the assignees they were withdrawn from: they are not notified again." in text
    assert "notified: alice" not in text
    digest = {**same, "notify_digest": "1"}
    operations.migration_discard(record_id=MigrationRecord.objects.get().id)
    text = " ".join(client.post(f"{DIALOG}preview/", digest).content.decode().split())
    assert "each of them gets one digest of this migration once it is applied" in text
    other = form(review=("move:manager-review", "all"))  # revision 2 gives the review to bob
    operations.migration_discard(record_id=MigrationRecord.objects.order_by("-id")[0].id)
    text = " ".join(client.post(f"{DIALOG}preview/", other).content.decode().split())
    assert "user <strong>bob</strong>; notified: bob." in text and "not notified again" not in text
