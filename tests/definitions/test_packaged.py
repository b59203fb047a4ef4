"""Packaged documents recorded in the default scope."""

import pytest
from django.core.management import CommandError, call_command

from tests.definitions.conftest import simple
from workflows import definitions
from workflows.definitions.packaged import discover, record_packaged
from workflows.exceptions import DefinitionError, Drift, LifecycleError
from workflows.models import DefinitionVersion

pytestmark = pytest.mark.django_db


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_demo_app_ships_the_purchase_approval_document():
    assert any(p.name == "purchase-approval.yaml" for p in discover())


def test_first_publication_activates_in_ascending_version_order(tmp_path):
    paths = [write(tmp_path, "v2.yaml", simple(version=2)), write(tmp_path, "v1.yaml", simple(version=1))]
    outcomes = record_packaged(paths)
    assert [(o.version, o.action, o.status) for o in outcomes] == [
        (1, "recorded", "AVAILABLE"),
        (2, "recorded", "AVAILABLE"),
    ]
    [record] = definitions.activations(scope="default")
    assert record.version == 2
    assert all(r.packaged for r in definitions.list())


def test_recording_again_changes_nothing_and_does_not_reactivate(tmp_path):
    paths = [write(tmp_path, "v1.yaml", simple())]
    record_packaged(paths)
    definitions.deactivate_default(definition_id="simple")
    assert [o.action for o in record_packaged(paths)] == ["unchanged"]
    assert definitions.activations() == []


def test_activate_on_deploy_false_publishes_without_activating(tmp_path):
    text = simple().replace("initialStep: wait", "activateOnDeploy: false\ninitialStep: wait")
    record_packaged([write(tmp_path, "v1.yaml", text)])
    assert DefinitionVersion.objects.get().status == "AVAILABLE"
    assert definitions.activations() == []


def test_a_lower_version_never_moves_the_record_down(tmp_path):
    record_packaged([write(tmp_path, "v3.yaml", simple(version=3))])
    record_packaged([write(tmp_path, "v2.yaml", simple(version=2))])
    assert definitions.activations()[0].version == 3


def test_other_text_under_a_recorded_version_fails_naming_both_digests(tmp_path):
    from workflows.definitions.documents import text_digest

    record_packaged([write(tmp_path, "v1.yaml", simple())])
    changed = simple(comment="# only a comment\n")
    with pytest.raises(Drift) as caught:
        record_packaged([write(tmp_path, "v1.yaml", changed)])
    assert caught.value.code == "DRIFT"
    assert text_digest(simple()) in caught.value.message
    assert text_digest(changed) in caught.value.message


def test_a_retired_row_blocks_its_packaged_version(tmp_path):
    definitions.load(scope="default", text=simple())
    definitions.retire(scope="default", definition_id="simple", version=1)
    with pytest.raises(LifecycleError) as caught:
        record_packaged([write(tmp_path, "v1.yaml", simple())])
    assert caught.value.code == "INVALID_TRANSITION"


def test_a_document_that_does_not_compile_fails_and_records_nothing(tmp_path):
    paths = [write(tmp_path, "good.yaml", simple()), write(tmp_path, "bad.yaml", simple(version=2) + "scope: x\n")]
    with pytest.raises(DefinitionError) as caught:
        record_packaged(paths)
    assert "bad.yaml" in caught.value.message
    assert not DefinitionVersion.objects.exists()


def test_two_files_with_one_key_are_refused(tmp_path):
    paths = [write(tmp_path, "a.yaml", simple()), write(tmp_path, "b.yaml", simple(comment="# b\n"))]
    with pytest.raises(DefinitionError):
        record_packaged(paths)


def test_a_stored_candidate_of_a_packaged_version_is_published(tmp_path):
    definitions.load(scope="default", text=simple())
    assert [o.action for o in record_packaged([write(tmp_path, "v1.yaml", simple())])] == ["published"]


def test_the_command_reports_failures_as_command_errors(monkeypatch):
    import workflows.management.commands.load_packaged_definitions as command

    def boom():
        raise DefinitionError("definition is not valid", violations=[])

    monkeypatch.setattr(command, "record_packaged", boom)
    with pytest.raises(CommandError, match="DEFINITION_INVALID"):
        call_command("load_packaged_definitions")
