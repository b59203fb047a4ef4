"""The requesters' pages through Django's test client: "New request" (what a user may start,
the generated start form, its errors, double submits) and "My requests" (only the user's own
runs, and the read-only page of one of them), with the executor drained in-process.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from tests.engine import documents
from workflows import definitions, operations
from workflows.engine import executor
from workflows.models import Run

pytestmark = pytest.mark.django_db(transaction=True)

DEMO = Path(__file__).resolve().parents[2] / "demo" / "workflows" / "purchase-approval.yaml"

DESCRIBED = documents.APPROVAL.replace(
    "definitionVersion: 1\n", "definitionVersion: 1\ndescription: Ask for a purchase to be approved.\n", 1
)
KEYED = """
definitionId: keyed
definitionVersion: 1
contract: {name: keyed.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema:
  type: object
  required: [id, number, total]
  properties: {id: {type: integer}, number: {type: string}, total: {type: number}}
trigger:
  model: demo.PurchaseOrder
  on: [created]
  payload: '{"id": record.id, "number": record.number, "total": record.total}'
  businessKey: record.number
initialStep: done
steps:
  - {id: done, type: complete}
"""


def deploy(text: str, *, activate: bool = True) -> None:
    ref = definitions.load(scope="default", text=text, format="yaml")
    definitions.publish(scope="default", definition_id=ref.definition_id, version=ref.version)
    if activate:
        definitions.activate(
            scope="default", definition_id=ref.definition_id, version=ref.version, target_scope="default"
        )


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _key(html: str) -> str:
    found = re.search(r'name="idempotency_key" value="([0-9a-f]+)"', html)
    assert found is not None
    return found.group(1)


def _start_as(user: Any, payload: dict[str, Any]) -> str:
    return str(operations.start(definition_id="approval", payload=payload, actor=user).run_id)


def test_new_request_lists_the_available_current_revisions_with_their_description(
    demo_users: dict[str, Any],
) -> None:
    deploy(DESCRIBED)
    deploy(KEYED.replace("keyed", "not-activated"), activate=False)

    page = _client(demo_users["requester"]).get("/requests/new/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'href="/requests/new/approval/"' in html and "Ask for a purchase to be approved." in html
    assert "not-activated" not in html
    assert 'href="/requests/new/"' in html  # the navigation offers it to a holder of the start capability


def test_starting_needs_the_start_capability(demo_users: dict[str, Any]) -> None:
    deploy(documents.APPROVAL)
    alice = _client(demo_users["alice"])  # an approver: no start capability

    assert alice.get("/requests/new/").status_code == 403
    assert alice.get("/requests/new/approval/").status_code == 403
    assert alice.post("/requests/new/approval/", {"payload/number": "PO-1", "payload/total": "5"}).status_code == 403
    assert not Run.objects.exists()
    assert "My requests" not in alice.get("/tasks/").content.decode()  # the navigation offers neither page
    assert Client().get("/requests/").status_code == 302  # signed out: the sign-in page
    assert _client(demo_users["requester"]).get("/requests/new/unknown/").status_code == 404


def test_the_form_is_generated_from_the_start_schema_and_a_valid_one_starts_a_run(
    demo_users: dict[str, Any],
) -> None:
    deploy(documents.APPROVAL)
    requester = _client(demo_users["requester"])
    html = requester.get("/requests/new/approval/").content.decode()
    assert 'name="payload/number"' in html and 'name="payload/total"' in html and 'type="number"' in html
    assert 'name="business_key"' not in html  # this definition computes no business key

    answer = requester.post(
        "/requests/new/approval/", {"idempotency_key": _key(html), "payload/number": "PO-9", "payload/total": "12.50"}
    )
    assert answer.status_code == 302 and answer.headers["Location"] == "/requests/"  # no view runs capability
    run = Run.objects.get()
    assert run.definition_id == "approval" and run.actor_kind == "USER" and run.actor_id == "requester"
    notice = requester.get("/requests/").content.decode()
    assert "Your request “Approval” was started." in notice and f"/requests/{run.id}/" in notice


def test_an_operator_goes_to_the_run_viewer_after_starting(demo_users: dict[str, Any]) -> None:
    deploy(documents.APPROVAL)
    admin = _client(demo_users["admin"])
    key = _key(admin.get("/requests/new/approval/").content.decode())

    answer = admin.post(
        "/requests/new/approval/", {"idempotency_key": key, "payload/number": "A", "payload/total": "1"}
    )
    assert answer.headers["Location"] == f"/runs/{Run.objects.get().id}/"


def test_the_fields_keep_the_order_the_document_wrote(demo_users: dict[str, Any]) -> None:
    deploy(DEMO.read_text())  # its start schema is the contract's, written number, total, requester
    html = _client(demo_users["requester"]).get("/requests/new/purchase-approval/").content.decode()
    names = re.findall(r'name="payload/([a-z]+)"', html)
    assert names == ["number", "total", "requester", "description"]


def test_a_business_key_is_asked_when_the_definition_computes_one(demo_users: dict[str, Any]) -> None:
    deploy(KEYED)
    requester = _client(demo_users["requester"])
    html = requester.get("/requests/new/keyed/").content.decode()
    assert 'name="business_key"' in html

    fields = {"idempotency_key": _key(html), "payload/id": "7", "payload/number": "PO-7", "payload/total": "3"}
    requester.post("/requests/new/keyed/", {**fields, "business_key": "PO-7"})
    assert Run.objects.get().business_key == "PO-7"


def test_form_errors_are_shown_next_to_fields_value_free_and_start_nothing(demo_users: dict[str, Any]) -> None:
    deploy(documents.APPROVAL)
    requester = _client(demo_users["requester"])
    key = _key(requester.get("/requests/new/approval/").content.decode())

    answer = requester.post("/requests/new/approval/", {"idempotency_key": key, "payload/total": "lots<b>"})
    assert answer.status_code == 422
    html = answer.content.decode()
    assert re.search(r'id="f-start-payload-total-errors"><li>Enter a number.</li>', html)
    assert re.search(r'id="f-start-payload-number-errors"><li>This field is required.</li>', html)
    assert "Nothing was started." in html and "lots&lt;b&gt;" in html.split('id="f-start-payload-total"')[1][:300]
    assert "lots<b>" not in html
    assert _key(html) == key  # the same form, so a corrected resend still starts one run
    assert not Run.objects.exists()


DETAILED = """
definitionId: detailed
definitionVersion: 1
contract: {name: detailed.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema:
  type: object
  properties: {details: {type: object}}
initialStep: done
steps:
  - {id: done, type: complete}
"""


def test_json_nested_thousands_deep_is_a_form_error_not_a_server_error(demo_users: dict[str, Any]) -> None:
    """Issue #40: 5,000-deep JSON in a form's JSON field ended in a RecursionError (500)."""
    deploy(DETAILED)
    requester = _client(demo_users["requester"])
    key = _key(requester.get("/requests/new/detailed/").content.decode())

    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    answer = requester.post("/requests/new/detailed/", {"idempotency_key": key, "payload/details": deep})
    assert answer.status_code == 422
    html = answer.content.decode()
    assert re.search(r'id="f-start-payload-details-errors"><li>Enter JSON that is nested less deeply.</li>', html)
    assert not Run.objects.exists()


def test_a_start_schema_with_thousands_of_properties_is_edited_as_one_json_field(
    demo_users: dict[str, Any],
) -> None:
    """Issue #40: a start form was quadratic in its properties (20,000 took 11.5 s a page). Past
    ``forms.MAX_FORM_FIELDS`` the payload is one JSON field; below it the page is linear."""
    from workflows.presentation import forms

    names = [f"p{n}" for n in range(5000)]
    properties = ", ".join(f"{name}: {{type: string}}" for name in names)
    deploy(
        DETAILED.replace("detailed", "wide").replace(
            "properties: {details: {type: object}}", f"properties: {{{properties}}}"
        )
    )
    requester = _client(demo_users["requester"])
    page = requester.get("/requests/new/wide/").content.decode()
    assert page.count('name="payload/p') == 0
    assert 'name="payload" rows="6" class="mono"' in page  # the whole payload as one JSON field

    key = _key(page)
    answer = requester.post("/requests/new/wide/", {"idempotency_key": key, "payload": '{"p1": "x", "p4999": "y"}'})
    assert answer.status_code == 302
    assert Run.objects.count() == 1

    # at the cap the fields are drawn, in the order the document wrote them
    at_cap = {"type": "object", "properties": {name: {"type": "string"} for name in names[: forms.MAX_FORM_FIELDS]}}
    form = forms.build("start", at_cap, order=at_cap)
    assert [f.pointer for f in form.fields] == [f"/{name}" for name in names[: forms.MAX_FORM_FIELDS]]


def test_a_double_submit_starts_one_run(demo_users: dict[str, Any]) -> None:
    deploy(documents.APPROVAL)
    requester = _client(demo_users["requester"])
    fields = {
        "idempotency_key": _key(requester.get("/requests/new/approval/").content.decode()),
        "payload/number": "PO-2",
        "payload/total": "5000",
    }

    first = requester.post("/requests/new/approval/", fields)
    second = requester.post("/requests/new/approval/", fields)
    assert first.status_code == second.status_code == 302
    assert Run.objects.count() == 1
    changed = requester.post("/requests/new/approval/", {**fields, "payload/total": "6000"})
    assert changed.status_code == 409 and "already sent with other details" in changed.content.decode()
    assert Run.objects.count() == 1


def test_my_requests_shows_only_mine_with_status_step_and_holder(demo_users: dict[str, Any]) -> None:
    deploy(documents.APPROVAL)
    mine = _start_as(demo_users["requester"], {"number": "PO-MINE", "total": 5000})
    theirs = _start_as(demo_users["alice"], {"number": "PO-THEIRS", "total": 5000})
    executor.drain(budget_seconds=10)

    html = _client(demo_users["requester"]).get("/requests/").content.decode()
    assert f"/requests/{mine}/" in html and f"/requests/{theirs}/" not in html
    row = html.split(f"/requests/{mine}/", 1)[1].split("</tr>", 1)[0]
    assert "Waiting" in row and "Approve purchase PO-MINE" in row and "group <strong>approvers</strong>" in row


def test_my_requests_is_paged_newest_first(demo_users: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("workflows.views.requests.REQUESTS_PAGE", 2)
    deploy(documents.APPROVAL)
    ids = [_start_as(demo_users["requester"], {"number": f"PO-{n}", "total": 1}) for n in range(3)]
    requester = _client(demo_users["requester"])

    first = requester.get("/requests/").content.decode()
    assert first.index(ids[2]) < first.index(ids[1]) and ids[0] not in first and "?page=2" in first
    assert ids[0] in requester.get("/requests/?page=2").content.decode()


def test_the_starter_reads_their_own_run_and_nobody_elses(demo_users: dict[str, Any]) -> None:
    deploy(documents.APPROVAL)
    mine = _start_as(demo_users["requester"], {"number": "PO-MINE", "total": 5000})
    theirs = _start_as(demo_users["alice"], {"number": "PO-THEIRS", "total": 5000})
    executor.drain(budget_seconds=10)
    requester = _client(demo_users["requester"])

    page = requester.get(f"/requests/{mine}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Waiting" in html and "Approve purchase PO-MINE" in html and "<svg" in html
    assert "run viewer" not in html  # no view runs capability: no link to the operators' page
    assert requester.get(f"/requests/{theirs}/").status_code == 404
    assert requester.get(f"/runs/{mine}/").status_code == 403  # the run viewer stays the operators'
    # an operator reads runs in the run viewer; this page is the starter's alone
    operator = get_user_model().objects.create_user("operator", password="x")
    operator.user_permissions.add(Permission.objects.get(codename="view_run"))
    assert _client(operator).get(f"/requests/{mine}/").status_code == 404


RECORDED = """
definitionId: recorded
definitionVersion: 1
contract: {name: recorded.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema:
  type: object
  properties: {id: {type: integer}, number: {type: string}, total: {type: number}}
initialState: payload
subject: '{"type": "demo.purchaseorder", "id": string(state.id)}'
initialStep: review
steps:
  - id: review
    type: human-task
    title: Review
    assignment: {mode: group, value: approvers}
    decisions: [{name: approve, next: done}]
  - {id: done, type: complete}
"""


def test_a_run_links_to_its_record_and_the_record_and_its_captures_to_their_runs(demo_users: dict[str, Any]) -> None:
    from capture.models import Capture
    from demo.models import PurchaseOrder

    deploy(RECORDED)
    order = PurchaseOrder.objects.create(number="PO-77", requester="robin", total=5)
    run_id = operations.start(
        definition_id="recorded", payload={"id": order.pk, "number": "PO-77", "total": 5}, actor=demo_users["requester"]
    ).run_id
    executor.drain(budget_seconds=10)
    capture = Capture.objects.create(
        model="demo.purchaseorder", object_pk=str(order.pk), event="created", runs_started=[str(run_id)]
    )
    record_url = f"/admin/demo/purchaseorder/{order.pk}/change/"
    admin = _client(demo_users["admin"])

    assert f'href="{record_url}"' in admin.get(f"/runs/{run_id}/").content.decode()
    record_page = admin.get(record_url).content.decode()
    assert f'href="/runs/{run_id}/"' in record_page and "recorded (waiting)" in record_page
    assert f'href="/runs/{run_id}/"' in admin.get(f"/admin/capture/capture/{capture.pk}/change/").content.decode()
    # the requester is no admin user: their page names the record without a link they could not open
    html = _client(demo_users["requester"]).get(f"/requests/{run_id}/").content.decode()
    assert f"demo.purchaseorder {order.pk}" in html and f'href="{record_url}"' not in html


OWNED = RECORDED.replace("definitionId: recorded", "definitionId: owned").replace(
    "contract: {name: recorded.v1, signals: {}}",
    "contract: {name: owned.v1, signals: {}}\n"
    "trigger: {model: demo.PurchaseOrder, on: [deleted], ownerField: requester}",
)


def test_my_requests_lists_the_runs_about_records_the_user_owns(demo_users: dict[str, Any]) -> None:
    """Issue #30: a run another user (or a trigger) started about the requester's own order is
    theirs to follow too; the owner is the trigger's ownerField (here a username field)."""
    from demo.models import PurchaseOrder

    own = PurchaseOrder.objects.create(number="PO-OWN", requester="requester", total=5)
    other = PurchaseOrder.objects.create(number="PO-OTHER", requester="bob", total=5)
    deploy(OWNED)
    about_own = operations.start(
        definition_id="owned", payload={"id": own.pk, "number": "PO-OWN", "total": 5}, actor=demo_users["alice"]
    ).run_id
    about_other = operations.start(
        definition_id="owned", payload={"id": other.pk, "number": "PO-OTHER", "total": 5}, actor=demo_users["alice"]
    ).run_id
    executor.drain(budget_seconds=10)
    requester = _client(demo_users["requester"])

    html = requester.get("/requests/").content.decode()
    assert f"/requests/{about_own}/" in html and f"/requests/{about_other}/" not in html
    assert requester.get(f"/requests/{about_own}/").status_code == 200
    assert requester.get(f"/requests/{about_other}/").status_code == 404
    # bob owns the other order; alice, who started both, sees both as started by her
    assert f"/requests/{about_other}/" in _client(demo_users["bob"]).get("/requests/").content.decode()
    alice = _client(demo_users["alice"]).get("/requests/").content.decode()
    assert f"/requests/{about_own}/" in alice and f"/requests/{about_other}/" in alice

    # the owner notion comes from the current revision: without ownerField the run is not theirs
    deploy(OWNED.replace("definitionVersion: 1", "definitionVersion: 2").replace(", ownerField: requester", ""))
    assert requester.get(f"/requests/{about_own}/").status_code == 404


def test_an_owner_field_the_model_does_not_have_is_refused_at_its_pointer() -> None:
    from workflows.exceptions import DefinitionError

    with pytest.raises(DefinitionError) as refused:
        deploy(OWNED.replace("ownerField: requester", "ownerField: nobody"))
    assert [(v.pointer, v.type) for v in refused.value.violations] == [("/trigger/ownerField", "unknownField")]
