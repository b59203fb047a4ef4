"""The designer's pages through Django's test client; runs are parked by draining the
executor in-process (tests only)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from designer import services
from workflows import definitions, operations
from workflows.engine import executor
from workflows.models import DefinitionVersion

pytestmark = pytest.mark.django_db(transaction=True)

APPROVAL = services.template_text("approval")


def _staff(username: str, *, deploy: bool) -> Client:
    user = get_user_model().objects.create_user(username, password="pw", is_staff=True)
    # the designer's pages need the view definitions capability; Deploy needs deploy definitions
    codename = "change_definitionversion" if deploy else "view_definitionversion"
    user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def author() -> Client:
    return _staff("author", deploy=True)


@pytest.fixture
def viewer() -> Client:
    return _staff("viewer", deploy=False)


def _deploy_v1(text: str = APPROVAL, scope: str = "default") -> Any:
    ref = definitions.load(scope=scope, text=text, format="yaml")
    definitions.publish(scope=scope, definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope=scope, definition_id=ref.definition_id, version=ref.version, target_scope=scope)
    return ref


def _park_runs(count: int) -> None:
    for i in range(count):
        operations.start(definition_id="approval", payload={"number": f"R-{i}", "total": 10})
    executor.drain(budget_seconds=10)


def _htmx(client: Client, url: str, data: dict[str, Any]) -> Any:
    return client.post(url, data, HTTP_HX_REQUEST="true")


# --- access ---------------------------------------------------------------------------------


def test_signed_out_visitors_are_sent_to_sign_in() -> None:
    response = Client().get("/designer/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_non_staff_users_are_refused() -> None:
    user = get_user_model().objects.create_user("someone", password="pw")
    client = Client()
    client.force_login(user)
    assert client.get("/designer/").status_code == 403
    assert client.get("/designer/new/?template=approval").status_code == 403


# --- the list and a workflow's page -----------------------------------------------------------


def test_list_shows_versions_statuses_and_runs_parked_per_revision(viewer: Client) -> None:
    _deploy_v1()
    _park_runs(2)
    ref2 = definitions.load(scope="default", text=services.set_version(APPROVAL, 2), format="yaml")
    definitions.publish(scope="default", definition_id="approval", version=ref2.version)
    definitions.activate(scope="default", definition_id="approval", version=2, target_scope="default")
    definitions.load(scope="default", text=services.set_version(APPROVAL, 3).replace("Total", "Sum"), format="yaml")

    page = viewer.get("/designer/").content.decode()
    row = re.search(r'<tr data-workflow="default/approval">(.*?)</tr>', page, re.S)
    assert row is not None
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row.group(1)))
    assert "v1 available · 2 parked" in text
    assert "v2 available · current" in text
    assert "v3 candidate" in text
    assert re.search(r'class="current-version">\s*2', row.group(1))
    assert re.search(r'class="parked-total">\s*2<', row.group(1))


def test_workflow_page_offers_migrate_for_a_revision_with_parked_runs(viewer: Client) -> None:
    _deploy_v1()
    _park_runs(1)
    ref2 = definitions.load(scope="default", text=services.set_version(APPROVAL, 2), format="yaml")
    definitions.publish(scope="default", definition_id="approval", version=ref2.version)
    definitions.activate(scope="default", definition_id="approval", version=2, target_scope="default")

    page = viewer.get("/designer/default/approval/").content.decode()
    assert 'href="/migrate/default/approval/?source=1&amp;target=2"' in page
    assert "Migrate 1 parked run" in page


def test_unknown_workflow_is_404(viewer: Client) -> None:
    assert viewer.get("/designer/default/nothing/").status_code == 404
    assert viewer.get("/designer/default/nothing/edit/").status_code == 404


# --- the editor ---------------------------------------------------------------------------------


def test_new_from_template_shows_the_document_and_its_graph(viewer: Client) -> None:
    page = viewer.get("/designer/new/?template=parallel-reviews").content.decode()
    assert "definitionId: parallel-reviews" in page
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="wfg"' in page
    assert 'data-step="legal-review"' in page
    assert "Deploying needs" in page  # no permission: no Deploy button
    assert 'id="deploy-button"' not in page


def test_unknown_template_is_404(viewer: Client) -> None:
    assert viewer.get("/designer/new/?template=../../etc/passwd").status_code == 404


def test_edit_opens_the_current_revision_text(viewer: Client) -> None:
    _deploy_v1(APPROVAL.replace("# Approval:", "# Stored comment. Approval:"))
    page = viewer.get("/designer/default/approval/edit/").content.decode()
    assert "# Stored comment. Approval:" in page
    assert "Starting from version 1" in page


def test_check_answers_the_graph_of_a_valid_document(viewer: Client) -> None:
    response = _htmx(viewer, "/designer/check/", {"text": APPROVAL, "scope": "default"})
    body = response.content.decode()
    assert response.status_code == 200
    assert 'id="graph" class="graph-wrap" hx-swap-oob="true"' in body
    assert "Compiles." in body and "approval version 1" in body
    assert json.loads(re.search(r'id="problem-lines" type="application/json">(.*?)</script>', body).group(1)) == []


def test_check_answers_problems_with_lines_and_pointers(viewer: Client) -> None:
    broken = APPROVAL.replace("next: rejected", "next: nowhere-at-all")
    line = broken.splitlines().index("        next: nowhere-at-all") + 1
    body = _htmx(viewer, "/designer/check/", {"text": broken, "scope": "default"}).content.decode()
    assert "2 problems" in body  # the unknown step, and the step nothing leads to any more
    assert f'<button type="button" class="problem-jump" data-line="{line}"' in body
    assert "<code>/steps/0/decisions/1/next</code>" in body
    assert "<code>/steps/2/id</code>" in body
    assert 'hx-swap-oob="true">The picture shows the last document that compiled.' in body


def test_check_shows_a_yaml_error_at_its_line_and_column(viewer: Client) -> None:
    broken = APPROVAL.replace("initialStep:", "  initialStep:", 1)
    line = next(i for i, ln in enumerate(broken.splitlines(), 1) if "  initialStep:" in ln)
    body = _htmx(viewer, "/designer/check/", {"text": broken, "scope": "default"}).content.decode()
    found = re.search(r'data-line="(\d+)" data-column="(\d+)"', body)
    assert found is not None, body
    assert (int(found.group(1)), int(found.group(2))) == (line, 3)  # the indented key
    assert f"Line {line}, column 3" in body and "not valid YAML: " in body
    lines = json.loads(re.search(r'id="problem-lines" type="application/json">(.*?)</script>', body).group(1))
    assert lines[0]["column"] == int(found.group(2))


def test_cel_endpoint_names_the_column_of_a_problem(viewer: Client) -> None:
    bad = viewer.post("/designer/cel/", {"field": "f_set", "f_set": "{'a': state.x +}", "variables": "state"})
    assert "column 16: unexpected" in bad.content.decode()


def test_cel_endpoint_checks_an_expression_without_echoing_it(viewer: Client) -> None:
    ok = viewer.post("/designer/cel/", {"field": "f_set", "f_set": "{'a': state.x}", "variables": "result"})
    assert "✓ compiles" in ok.content.decode()
    bad = viewer.post("/designer/cel/", {"field": "f_set", "f_set": "secret_value_42 +", "variables": "state"})
    text = bad.content.decode()
    assert "✗" in text and "secret_value_42" not in text
    wrong_variable = viewer.post("/designer/cel/", {"field": "f_x", "f_x": "payload.a", "variables": "state"})
    assert "allowed: state" in wrong_variable.content.decode()


# --- the step form ------------------------------------------------------------------------------


def test_step_form_offers_fields_of_the_type_and_the_exits_to_connect_from(viewer: Client) -> None:
    body = _htmx(viewer, "/designer/step-form/", {"text": APPROVAL, "action": "add", "step_type": "human-task"})
    html = body.content.decode()
    assert 'name="f_title"' in html and 'name="f_assignment__mode"' in html and 'name="decisions_0_next"' in html
    assert '<option value="review|decisions/0/next">review → decision approve</option>' in html


def test_step_form_for_editing_is_filled_from_the_step(viewer: Client) -> None:
    html = _htmx(viewer, "/designer/step-form/", {"text": APPROVAL, "action": "edit", "edit": "review"}).content
    page = html.decode()
    assert 'value="Approve request {{ state.number }}"' in page
    assert 'name="decisions_1_name"' in page and 'value="reject"' in page
    assert 'name="original_id" value="review"' in page


def test_adding_a_human_task_writes_it_into_the_document(viewer: Client) -> None:
    response = _htmx(
        viewer,
        "/designer/step/",
        {
            "text": APPROVAL,
            "step_type": "human-task",
            "step_id": "finance-check",
            "f_title": "Finance check of {{ state.number }}",
            "f_assignment__mode": "group",
            "f_assignment__value": "finance",
            "connect_from": "review|decisions/0/next",
            "decisions_0_name": "approve",
            "decisions_0_next": "approved",
            "decisions_1_name": "reject",
            "decisions_1_next": "rejected",
            "decisions_1_set": '{"status": "rejected by finance"}',
        },
    )
    assert response.status_code == 200
    new_text = json.loads(
        re.search(r'id="step-result" type="application/json">(.*?)</script>', response.content.decode(), re.S).group(1)
    )
    assert "# Approval: one person" in new_text  # the rest of the document is left as written
    plan = services.check(new_text).plan
    assert plan is not None
    assert plan.steps["review"].decisions[0].next == "finance-check"
    assert plan.steps["finance-check"].title == "Finance check of {{ state.number }}"
    assert plan.steps["review"].decisions[0].payload_schema is not None  # fields the form hides are kept


def test_a_step_form_with_bad_cel_and_no_decision_is_refused_in_place(viewer: Client) -> None:
    response = _htmx(
        viewer,
        "/designer/step/",
        {
            "text": APPROVAL,
            "step_type": "human-task",
            "step_id": "bad id",
            "f_title": "Hi {{ payload.x }}",
            "f_assignment__mode": "group",
            "f_assignment__value": "x",
        },
    )
    html = response.content.decode()
    assert response.status_code == 422
    assert "Use 1-255 letters" in html
    assert "allowed: state" in html
    assert "A human task needs at least one decision." in html


# --- compare ------------------------------------------------------------------------------------


def test_compare_shows_text_and_graph_changes(viewer: Client) -> None:
    _deploy_v1()
    changed = services.set_version(APPROVAL, 2).replace("value: approvers", "value: managers")
    changed, _ = services.apply_step(
        changed, {"id": "archive", "type": "end", "reason": "archived"}, connect_from="review|decisions/1/next"
    )
    changed = changed.replace("  - id: rejected\n    type: fail\n    errorType: request-rejected\n", "")
    changed = changed.replace('    message: "Request {{ state.number }} was rejected"\n', "")
    definitions.load(scope="default", text=changed, format="yaml")
    page = viewer.get("/designer/default/approval/compare/?a=1&b=2").content.decode()
    flat = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))
    assert "added archive (end)" in flat
    assert "removed rejected (fail)" in flat
    assert "changed review (human-task; assignment, decisions)" in flat
    assert 'class="wfg-node wfg-node-end dsg-added" data-step="archive"' in page
    assert "value: managers" in page and "value: approvers" in page


# --- deploy ------------------------------------------------------------------------------------


def test_deploy_needs_the_permission(viewer: Client) -> None:
    response = viewer.post("/designer/deploy/", {"text": APPROVAL, "scope": "default"})
    assert response.status_code == 403
    assert not DefinitionVersion.objects.exists()


def test_deploy_mints_publishes_and_activates(author: Client) -> None:
    response = author.post(
        "/designer/deploy/",
        {"text": APPROVAL.replace("definitionVersion: 1", "definitionVersion: 9"), "scope": "sandbox"},
    )
    assert response.status_code == 302
    assert response["Location"] == "/designer/sandbox/approval/"
    row = DefinitionVersion.objects.get(scope="sandbox", definition_id="approval")
    assert row.version == 1 and row.status == "AVAILABLE"
    assert "definitionVersion: 1\n" in row.text and "# Approval: one person" in row.text
    assert row.source_type == "designer" and row.source_author == "author"
    (activation,) = [a for a in definitions.activations(scope="sandbox") if a.definition_id == "approval"]
    assert activation.version == 1 and activation.updated_by == "author"
    again = author.post("/designer/deploy/", {"text": APPROVAL.replace("Total", "Sum"), "scope": "sandbox"})
    assert again["Location"] == "/designer/sandbox/approval/"
    assert [a.version for a in definitions.activations(scope="sandbox")] == [2]


def test_deploy_of_an_invalid_document_stores_nothing_and_shows_the_problems(author: Client) -> None:
    response = author.post(
        "/designer/deploy/", {"text": APPROVAL.replace("initialStep: review", "initialStep: x"), "scope": "default"}
    )
    assert response.status_code == 422
    page = response.content.decode()
    assert "Not deployed (DEFINITION_INVALID)" in page
    assert "<code>/initialStep</code>" in page
    assert not DefinitionVersion.objects.exists()


def test_deploy_with_runs_parked_on_the_replaced_revision_opens_the_migrate_dialog(author: Client) -> None:
    _deploy_v1()
    _park_runs(3)
    response = author.post("/designer/deploy/", {"text": APPROVAL.replace("Total", "Sum"), "scope": "default"})
    assert response.status_code == 302
    assert response["Location"] == "/migrate/default/approval/?source=1&target=2"
    # the deploy has committed before the dialog opens
    assert DefinitionVersion.objects.get(definition_id="approval", version=2).status == "AVAILABLE"
    dialog = author.get(response["Location"]).content.decode()
    assert re.search(r'<option value="1" selected>Revision 1 — 3 parked', dialog)
    assert re.search(
        r'<select id="target" name="target">\s*<option value="1">[^<]*</option>\s*<option value="2" selected>', dialog
    )


def test_deploy_without_parked_runs_goes_to_the_workflow_page(author: Client) -> None:
    _deploy_v1()
    response = author.post("/designer/deploy/", {"text": APPROVAL.replace("Total", "Sum"), "scope": "default"})
    assert response["Location"] == "/designer/default/approval/"


def test_deploying_the_document_the_scope_already_runs_mints_nothing(author: Client) -> None:
    """A new user deployed an unchanged document and got version 2, a copy, without a word."""
    first = author.post("/designer/deploy/", {"text": APPROVAL, "scope": "default"})
    assert first.status_code == 302
    # the same document: another version number, a comment and the key order do not count
    same = APPROVAL.replace("definitionVersion: 1", "definitionVersion: 7") + "\n# a comment\n"
    refused = author.post("/designer/deploy/", {"text": same, "scope": "default"})
    assert refused.status_code == 409
    page = refused.content.decode()
    assert "Nothing deployed: this document is version 1, which scope default already runs." in page
    assert "# a comment" in page  # the text stays in the editor
    assert list(DefinitionVersion.objects.values_list("version", flat=True)) == [1]
    # a change deploys; deploying version 1's document again is a revert, and deploys too
    assert (
        author.post("/designer/deploy/", {"text": APPROVAL.replace("Total", "Sum"), "scope": "default"}).status_code
        == 302
    )
    assert author.post("/designer/deploy/", {"text": APPROVAL, "scope": "default"}).status_code == 302
    assert sorted(DefinitionVersion.objects.values_list("version", flat=True)) == [1, 2, 3]


def test_without_javascript_check_now_answers_the_whole_editor(viewer: Client) -> None:
    broken = APPROVAL.replace("initialStep: review", "initialStep: nowhere")
    page = viewer.post("/designer/check/", {"text": broken, "scope": "default"}).content.decode()
    assert "<h1>New workflow" in page
    assert "<code>/initialStep</code>" in page
    assert "initialStep: nowhere" in page  # the text as posted, back in the editor


def test_a_decision_step_is_written_with_its_routes(viewer: Client) -> None:
    response = _htmx(
        viewer,
        "/designer/step/",
        {
            "text": APPROVAL,
            "step_type": "decision",
            "step_id": "big-or-small",
            "connect_from": "review|decisions/0/next",
            "routes_0_when": "state.total > 1000",
            "routes_0_to": "review",
            "f_default": "approved",
        },
    )
    assert response.status_code == 200
    text = json.loads(
        re.search(r'id="step-result" type="application/json">(.*?)</script>', response.content.decode(), re.S).group(1)
    )
    plan = services.check(text).plan
    assert plan is not None
    step = plan.steps["big-or-small"]
    assert step.routes[0].to == "review" and step.routes[0].when.source == "state.total > 1000"
    assert step.default == "approved"


def test_editing_a_step_keeps_the_fields_the_form_does_not_show(viewer: Client) -> None:
    original = services.step_of(APPROVAL, "review")
    assert original is not None
    form = _htmx(viewer, "/designer/step-form/", {"text": APPROVAL, "action": "edit", "edit": "review"}).content
    assert b'name="f_due__after"' in form
    response = _htmx(
        viewer,
        "/designer/step/",
        {
            "text": APPROVAL,
            "step_type": "human-task",
            "original_id": "review",
            "step_id": "review",
            "f_title": "Approve {{ state.number }} now",
            "f_assignment__mode": "user",
            "f_assignment__value": "alice",
            "f_due__after": "P1D",
            "f_due__next": "rejected",
            "decisions_0_name": "approve",
            "decisions_0_label": "Approve it",
            "decisions_0_next": "approved",
            "decisions_0_set": '{"status": "approved"}',
            "decisions_1_name": "reject",
            "decisions_1_next": "rejected",
        },
    )
    text = json.loads(
        re.search(r'id="step-result" type="application/json">(.*?)</script>', response.content.decode(), re.S).group(1)
    )
    step = services.step_of(text, "review")
    assert step is not None
    assert step["title"] == "Approve {{ state.number }} now"
    assert step["assignment"] == {"mode": "user", "value": "alice"}
    assert step["due"] == {"after": "P1D", "next": "rejected"}
    assert step["decisions"][0]["payloadSchema"] == original["decisions"][0]["payloadSchema"]
    assert step["decisions"][0]["label"] == "Approve it"
    assert "set" not in step["decisions"][1]  # emptied in the form
    assert services.check(text).ok


def test_a_duration_that_is_not_iso_8601_is_refused(viewer: Client) -> None:
    response = _htmx(
        viewer,
        "/designer/step/",
        {"text": APPROVAL, "step_type": "timer", "step_id": "pause", "f_after": "3 days", "f_next": "approved"},
    )
    assert response.status_code == 422
    assert "ISO-8601 duration" in response.content.decode()


@pytest.mark.parametrize("step_type", [t for t, _ in __import__("designer.forms").forms.STEP_TYPES])
def test_every_step_type_has_a_form_with_its_fields(viewer: Client, step_type: str) -> None:
    from designer.forms import TYPE_FIELDS

    html = _htmx(viewer, "/designer/step-form/", {"text": APPROVAL, "action": "add", "step_type": step_type})
    page = html.content.decode()
    assert f'<h3 id="step-form-heading">Add a {step_type} step</h3>' in page
    for spec in TYPE_FIELDS[step_type]:
        assert f'name="{spec.name}"' in page


@pytest.mark.parametrize(
    ("step_type", "fields"),
    [
        ("timer", {"f_after": "PT10M"}),
        ("service", {"f_target": "https://hooks.example.com/x", "f_payload": "{'n': state.number}"}),
        ("email", {"f_to": "'ops@example.com'", "f_subject": "About {{ state.number }}"}),
        ("call", {"f_definitionId": "approval", "f_payload": "{'number': state.number, 'total': 1}"}),
        ("fail", {"f_errorType": "stopped", "f_message": "Stopped {{ state.number }}"}),
        ("end", {"f_reason": "withdrawn"}),
        ("complete", {}),
    ],
)
def test_a_step_written_by_its_form_compiles_in_place(viewer: Client, step_type: str, fields: dict[str, str]) -> None:
    data = {"text": APPROVAL, "step_type": step_type, "step_id": "added", "connect_from": "review|decisions/0/next"}
    response = _htmx(viewer, "/designer/step/", {**data, **fields})
    assert response.status_code == 200, response.content.decode()
    text = json.loads(
        re.search(r'id="step-result" type="application/json">(.*?)</script>', response.content.decode(), re.S).group(1)
    )
    result = services.check(text)
    if step_type in ("fail", "end", "complete"):  # a terminal step on the approve exit leaves 'approved' unreached
        assert [p.pointer for p in result.problems] == ["/steps/1/id"]
    else:
        assert result.problems == []
        assert result.plan is not None and result.plan.steps["added"].next == "approved"


def test_an_empty_document_is_a_problem_not_a_bad_request(viewer: Client) -> None:
    body = _htmx(viewer, "/designer/check/", {"text": "", "scope": "default"}).content.decode()
    assert "1 problem" in body and "the document is empty" in body


def test_staff_without_the_view_definitions_capability_cannot_read_the_designer() -> None:
    # the story (issue #25): the designer's texts were readable by any staff user
    _deploy_v1()
    staff = get_user_model().objects.create_user("staff-only", password="pw", is_staff=True)
    client = Client()
    client.force_login(staff)
    for url in ("/designer/", "/designer/default/approval/", "/designer/default/approval/edit/"):
        assert client.get(url).status_code == 403, url


def test_the_designer_speaks_german(viewer: Client) -> None:
    """The designer's interface text is marked for translation and ships a German catalogue
    (designer/locale/de); a German browser gets German pages (the language comes from its
    Accept-Language), the document stays as written."""
    listing = viewer.get("/designer/", HTTP_ACCEPT_LANGUAGE="de").content.decode()
    editor = viewer.get("/designer/new/?template=approval", HTTP_ACCEPT_LANGUAGE="de").content.decode()
    assert "Neuen Workflow aus einer Vorlage beginnen" in listing
    assert "Jetzt prüfen" in editor and "Schritt hinzufügen" in editor and "Verkleinern" in editor
    assert "definitionId: approval" in editor
    english = viewer.get("/designer/new/?template=approval", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Check now" in english and "Jetzt prüfen" not in english
