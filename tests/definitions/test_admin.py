"""The definition admin calls the lifecycle; it never edits rows."""

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from tests.definitions.conftest import simple
from workflows import definitions
from workflows.models import Activation, DefinitionVersion

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-for-tests")
    client.force_login(user)
    return client


def act(client, action, model="definitionversion", ids=None):
    url = reverse(f"admin:workflows_{model}_changelist")
    ids = ids if ids is not None else list(DefinitionVersion.objects.values_list("pk", flat=True))
    return client.post(url, {"action": action, "_selected_action": ids}, follow=True)


def test_changelist_and_detail_render(admin_client):
    definitions.load(scope="default", text=simple())
    row = DefinitionVersion.objects.get()
    assert admin_client.get(reverse("admin:workflows_definitionversion_changelist")).status_code == 200
    assert admin_client.get(reverse("admin:workflows_definitionversion_change", args=[row.pk])).status_code == 200
    assert admin_client.get(reverse("admin:workflows_activation_changelist")).status_code == 200


def test_publish_and_activate_actions(admin_client):
    definitions.load(scope="default", text=simple())
    act(admin_client, "publish")
    assert DefinitionVersion.objects.get().status == "AVAILABLE"
    act(admin_client, "activate")
    assert Activation.objects.get().updated_by == "root"


def test_refusals_are_shown_with_their_code(admin_client):
    definitions.load(scope="default", text=simple())
    response = act(admin_client, "deprecate")
    assert b"INVALID_TRANSITION" in response.content
    assert DefinitionVersion.objects.get().status == "CANDIDATE"


def test_removing_activation_records(admin_client):
    definitions.load(scope="default", text=simple())
    definitions.publish(scope="default", definition_id="simple", version=1)
    definitions.activate(scope="default", definition_id="simple", version=1)
    act(admin_client, "follow_default", model="activation", ids=list(Activation.objects.values_list("pk", flat=True)))
    assert not Activation.objects.exists()


def test_the_retention_override_is_the_one_editable_field(admin_client):
    definitions.load(scope="default", text=simple())
    row = DefinitionVersion.objects.get()
    url = reverse("admin:workflows_definitionversion_change", args=[row.pk])
    page = admin_client.get(url)
    assert b'name="retention_days"' in page.content and b'name="status"' not in page.content
    # the row moves on after the page was drawn: the save writes the override only
    definitions.publish(scope="default", definition_id="simple", version=1)
    response = admin_client.post(url, {"retention_days": "365"}, follow=True)
    assert response.status_code == 200
    row.refresh_from_db()
    assert (row.retention_days, row.status) == (365, "AVAILABLE")
    refused = admin_client.post(url, {"retention_days": "0"})
    assert refused.status_code == 200 and b"errornote" in refused.content
    row.refresh_from_db()
    assert row.retention_days == 365
    admin_client.post(url, {"retention_days": ""}, follow=True)
    row.refresh_from_db()
    assert row.retention_days is None


def test_set_retention_days_refuses_a_bad_value_and_changes_nothing():
    from workflows import operations
    from workflows.exceptions import InvalidPayload

    definitions.load(scope="default", text=simple())
    for bad in (0, -3, True, "7"):
        with pytest.raises(InvalidPayload):
            operations.set_retention_days(scope="default", definition_id="simple", version=1, days=bad)
    assert DefinitionVersion.objects.get().retention_days is None
    assert operations.set_retention_days(scope="default", definition_id="simple", version=1, days=30)
    assert not operations.set_retention_days(scope="default", definition_id="simple", version=2, days=30)


def test_a_revision_shows_its_document_with_its_indentation(admin_client):
    """The admin's plain display of a text field joined the lines with <br> and collapsed the
    indentation a YAML document depends on: the stored text is shown as written, escaped."""
    text = "# <the> stored comment\n" + simple()
    definitions.load(scope="default", text=text)
    row = DefinitionVersion.objects.get()
    page = admin_client.get(reverse("admin:workflows_definitionversion_change", args=[row.pk])).content.decode()
    start = page.index('<pre class="definition-document"')
    shown = page[page.index(">", start) + 1 : page.index("</pre>", start)]
    assert shown == text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;").replace(
        "'", "&#x27;"
    )
    assert "\n    " in shown and "<br>" not in shown
    assert 'name="text"' not in page  # read-only: no form field carries the document
