"""The lifecycle: every transition and every refusal, with its code and no submitted value."""

import threading

import pytest

from tests.definitions.conftest import simple
from tests.definitions.helpers import assert_value_free
from workflows import conf, definitions
from workflows.definitions import lifecycle
from workflows.exceptions import (
    ContractMismatch,
    DefinitionError,
    DefinitionMissing,
    Drift,
    InvalidArgument,
    LifecycleError,
    LoaderMissing,
    NodeRoleError,
    PinnedInstances,
)
from workflows.models import Activation, DefinitionVersion, Run

pytestmark = pytest.mark.django_db


def loaded(scope="default", version=1, **kwargs):
    return definitions.load(scope=scope, text=simple(version=version, **kwargs))


def available(scope="default", version=1, **kwargs):
    record = loaded(scope, version, **kwargs)
    return definitions.publish(scope=scope, definition_id=record.definition_id, version=version)


def key(scope="default", version=1, definition_id="simple"):
    return {"scope": scope, "definition_id": definition_id, "version": version}


# --- load ------------------------------------------------------------------------------------


def test_load_stores_a_candidate_with_its_text_and_metadata():
    text = simple(comment="# kept\n")
    record = definitions.load(
        scope="tenant-a", text=text, metadata={"source_type": "upload", "source_author": "ann", "upload_id": "u1"}
    )
    assert (record.scope, record.status, record.contract) == ("tenant-a", "CANDIDATE", "simple.v1")
    row = DefinitionVersion.objects.get(scope="tenant-a")
    assert row.text == text
    assert row.signal_names == ["go"]
    meta = definitions.source_metadata(**key("tenant-a"))
    assert (meta.source_type, meta.source_author, meta.upload_id) == ("upload", "ann", "u1")


def test_loading_the_same_text_again_is_accepted_unchanged():
    first = loaded()
    assert loaded() == first


def test_loading_other_text_under_a_stored_version_is_refused():
    loaded()
    with pytest.raises(LifecycleError) as caught:
        definitions.load(scope="default", text=simple(comment="# changed\n"))
    assert caught.value.code == "VERSION_EXISTS"


def test_a_failed_load_stores_nothing():
    with pytest.raises(DefinitionError):
        definitions.load(scope="default", text="definitionId: x\nscope: other\n")
    assert not DefinitionVersion.objects.exists()


@pytest.mark.parametrize("scope", ["", "   ", "a\x07b", "x" * 256, None, "a\x00b"])
def test_invalid_scope_keys_are_refused_before_reading(scope):
    with pytest.raises(InvalidArgument) as caught:
        definitions.load(scope=scope, text="not even yaml: [")
    assert caught.value.code == "INVALID_ARGUMENT"


def test_metadata_limits_apply():
    with pytest.raises(InvalidArgument) as caught:
        definitions.load(scope="default", text=simple(), metadata={"source_uri": "https://x/" + "a" * 2048})
    assert_value_free(caught.value, "https://x/")
    with pytest.raises(InvalidArgument):
        definitions.load(scope="default", text=simple(), metadata={"source_type": "t" * 65})
    with pytest.raises(InvalidArgument):
        definitions.load(scope="default", text=simple(), metadata={"owner": "x"})


def test_versions_of_one_id_in_one_scope_name_one_contract():
    loaded()
    with pytest.raises(ContractMismatch) as caught:
        loaded(version=2, contract="other.v1")
    assert caught.value.code == "CONTRACT_MISMATCH"


def test_another_scope_cannot_take_an_id_the_default_holds_under_another_contract():
    loaded()
    with pytest.raises(ContractMismatch):
        loaded(scope="tenant-a", contract="other.v1")


def test_documents_naming_one_contract_declare_the_same_signals():
    loaded()
    other = simple(definition_id="other-id").replace("go: {type: object}", "go: {type: object, required: [x]}")
    with pytest.raises(ContractMismatch):
        definitions.load(scope="default", text=other)


def test_recording_only_nodes_refuse_load_publish_reinstate(settings):
    record = loaded()
    settings.WORKFLOWS = {"EXECUTOR": {"ENABLED": False}}
    conf.reload()
    try:
        for call in (
            lambda: definitions.load(scope="default", text=simple(version=2)),
            lambda: definitions.publish(**key()),
            lambda: definitions.reinstate(**key()),
        ):
            with pytest.raises(NodeRoleError) as caught:
                call()
            assert caught.value.code == "NODE_ROLE"
        definitions.retire(**key())  # the other operations run on every node
        assert record.version == 1
    finally:
        del settings.WORKFLOWS
        conf.reload()


# --- publish ---------------------------------------------------------------------------------


def test_publish_makes_a_candidate_available_and_activates_nothing():
    loaded()
    record = definitions.publish(**key())
    assert record.status == "AVAILABLE"
    assert not Activation.objects.exists()


def test_publishing_an_available_version_again_changes_nothing():
    first = available()
    assert definitions.publish(**key()) == first


def test_publishing_a_missing_version_is_refused():
    with pytest.raises(DefinitionMissing) as caught:
        definitions.publish(**key(version=9))
    assert caught.value.code == "DEFINITION_MISSING"


def test_publishing_a_retired_version_is_refused():
    loaded()
    definitions.retire(**key())
    with pytest.raises(LifecycleError) as caught:
        definitions.publish(**key())
    assert caught.value.code == "INVALID_TRANSITION"


def test_a_fresh_claim_of_another_publisher_is_refused_and_a_stale_one_taken_over():
    from datetime import timedelta

    from django.utils import timezone

    loaded()
    DefinitionVersion.objects.update(
        status="PUBLISHING", claim_token="00000000-0000-0000-0000-000000000001", claimed_at=timezone.now()
    )
    with pytest.raises(LifecycleError) as caught:
        definitions.publish(**key())
    assert caught.value.code == "INVALID_TRANSITION"
    DefinitionVersion.objects.update(claimed_at=timezone.now() - timedelta(seconds=301))
    assert definitions.publish(**key()).status == "AVAILABLE"


def test_stale_claims_are_reset_to_candidate():
    from datetime import timedelta

    from django.utils import timezone

    loaded()
    DefinitionVersion.objects.update(status="PUBLISHING", claimed_at=timezone.now() - timedelta(seconds=600))
    assert lifecycle.reset_stale_claims() == 1
    assert DefinitionVersion.objects.get().status == "CANDIDATE"


def test_a_document_that_no_longer_builds_is_refused_and_stays_a_candidate(registry):
    registry.callback("temp.mapper", "initial_state", lambda payload: payload)
    text = simple().replace("initialStep: wait", "initialStateMapper: temp.mapper\ninitialStep: wait")
    definitions.load(scope="default", text=text)
    registry.undo()  # the callback is gone from this node's catalog
    with pytest.raises(DefinitionError) as caught:
        definitions.publish(**key())
    assert caught.value.code == "DEFINITION_INVALID"
    row = DefinitionVersion.objects.get()
    assert (row.status, row.claim_token) == ("CANDIDATE", None)


def test_publication_verifies_the_stored_plan_hash():
    loaded()
    DefinitionVersion.objects.update(plan_hash="0" * 64)
    with pytest.raises(DefinitionError) as caught:
        definitions.publish(**key())
    assert caught.value.code == "DRIFT"
    assert DefinitionVersion.objects.get().status == "CANDIDATE"


@pytest.mark.django_db(transaction=True)
def test_concurrent_publications_publish_once():
    loaded()
    results, errors = [], []

    def publish():
        from django.db import connection

        try:
            results.append(definitions.publish(**key()).status)
        except LifecycleError as error:
            errors.append(error.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=publish) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()
    assert results and all(status == "AVAILABLE" for status in results)
    assert set(errors) <= {"INVALID_TRANSITION"}


# --- deprecate / retire / reinstate ----------------------------------------------------------


def test_deprecate_and_deprecate_again():
    available()
    assert definitions.deprecate(**key()).status == "DEPRECATED"
    assert definitions.deprecate(**key()).status == "DEPRECATED"


def test_deprecate_refuses_a_candidate():
    loaded()
    with pytest.raises(LifecycleError) as caught:
        definitions.deprecate(**key())
    assert caught.value.code == "INVALID_TRANSITION"


def test_the_default_scopes_current_version_cannot_be_deprecated_or_retired():
    available()
    definitions.activate(**key())
    with pytest.raises(LifecycleError) as caught:
        definitions.deprecate(**key())
    assert caught.value.code == "INVALID_TRANSITION"
    definitions.deactivate_default(definition_id="simple")
    definitions.deprecate(**key())
    assert definitions.retire(**key()).status == "RETIRED"


def test_retire_refuses_while_a_live_run_is_pinned():
    available()
    definitions.deprecate(**key())
    Run.objects.create(scope="default", definition_id="simple", version=1, plan_hash="h", status="WAITING")
    with pytest.raises(PinnedInstances) as caught:
        definitions.retire(**key())
    assert caught.value.code == "PINNED_INSTANCES"
    Run.objects.update(status="COMPLETED")
    assert definitions.retire(**key()).status == "RETIRED"


def test_a_pin_in_another_scope_does_not_block_retirement():
    available()
    definitions.deprecate(**key())
    Run.objects.create(scope="tenant-a", definition_id="simple", version=1, plan_hash="h", status="RUNNING")
    assert definitions.retire(**key()).status == "RETIRED"


def test_retire_refuses_an_available_version():
    available()
    with pytest.raises(LifecycleError) as caught:
        definitions.retire(**key())
    assert caught.value.code == "INVALID_TRANSITION"


def test_retire_changes_only_its_own_row():
    available()
    available(scope="tenant-a")
    definitions.deprecate(**key())
    definitions.retire(**key())
    assert DefinitionVersion.objects.get(scope="tenant-a").status == "AVAILABLE"


def test_reinstate_deprecated_and_retired():
    available()
    definitions.deprecate(**key())
    assert definitions.reinstate(**key()).status == "AVAILABLE"
    definitions.deprecate(**key())
    definitions.retire(**key())
    assert definitions.reinstate(**key()).status == "AVAILABLE"


def test_reinstate_refuses_drift():
    available()
    definitions.deprecate(**key())
    definitions.retire(**key())
    DefinitionVersion.objects.update(plan_hash="f" * 64)
    with pytest.raises(Drift) as caught:
        definitions.reinstate(**key())
    assert caught.value.code == "DRIFT"


def test_reinstate_refuses_a_row_no_loader_reads():
    loaded()
    definitions.retire(**key())
    DefinitionVersion.objects.update(format="toml")
    with pytest.raises(LoaderMissing) as caught:
        definitions.reinstate(**key())
    assert caught.value.code == "LOADER_MISSING"


def test_reinstate_refuses_other_statuses():
    available()
    with pytest.raises(LifecycleError) as caught:
        definitions.reinstate(**key())
    assert caught.value.code == "INVALID_TRANSITION"


# --- activation records ----------------------------------------------------------------------


def test_activate_replaces_the_scopes_record():
    available()
    available(version=2)
    definitions.activate(**key())
    record = definitions.activate(**key(version=2))
    assert (record.target_scope, record.version) == ("default", 2)
    assert [(a.scope, a.version) for a in definitions.activations(scope="default")] == [("default", 2)]


def test_activate_refuses_a_version_that_is_not_available():
    loaded()
    with pytest.raises(LifecycleError) as caught:
        definitions.activate(**key())
    assert caught.value.code == "INVALID_TRANSITION"
    with pytest.raises(LifecycleError):
        definitions.activate(**key(version=5))


def test_activate_targets_only_the_scope_itself_or_the_default():
    available()
    available(scope="tenant-a")
    definitions.activate(scope="tenant-b", definition_id="simple", version=1, target_scope="default")
    with pytest.raises(InvalidArgument):
        definitions.activate(scope="tenant-b", definition_id="simple", version=1, target_scope="tenant-a")
    with pytest.raises(InvalidArgument):
        definitions.activate(scope="default", definition_id="simple", version=1, target_scope="tenant-a")


def test_activate_refuses_a_default_target_of_another_contract():
    # the scope held the id first, so the default scope may take it under another contract
    loaded(scope="tenant-a", contract="mine.v1")
    available(contract="theirs.v1")
    with pytest.raises(ContractMismatch):
        definitions.activate(scope="tenant-a", definition_id="simple", version=1, target_scope="default")


def test_follow_and_deactivate_default():
    available()
    available(scope="tenant-a")
    definitions.activate(**key())
    definitions.activate(**key("tenant-a"))
    definitions.follow(scope="tenant-a", definition_id="simple")
    definitions.follow(scope="tenant-a", definition_id="simple")  # absent: accepted
    assert [a.scope for a in definitions.activations()] == ["default"]
    definitions.deactivate_default(definition_id="simple")
    definitions.deactivate_default(definition_id="simple")
    assert definitions.activations() == []
    with pytest.raises(InvalidArgument):
        definitions.follow(scope="default", definition_id="simple")


# --- reads -----------------------------------------------------------------------------------


def test_list_filters_and_never_carries_text():
    available()
    loaded(version=2)
    loaded(scope="tenant-a")
    assert [(r.scope, r.version, r.status) for r in definitions.list(definition_id="simple")] == [
        ("default", 1, "AVAILABLE"),
        ("default", 2, "CANDIDATE"),
        ("tenant-a", 1, "CANDIDATE"),
    ]
    assert [r.version for r in definitions.list(scope="default", status="CANDIDATE")] == [2]
    assert "text" not in definitions.list()[0].as_dict()


def test_source_metadata_of_a_missing_version_is_refused():
    with pytest.raises(DefinitionMissing):
        definitions.source_metadata(**key(version=3))


def test_next_version_counts_every_status_per_scope():
    assert definitions.next_version(scope="default", definition_id="simple") == 1
    loaded()
    loaded(version=4)
    definitions.retire(**key(version=4))
    assert definitions.next_version(scope="default", definition_id="simple") == 5
    assert definitions.next_version(scope="tenant-a", definition_id="simple") == 1


def test_public_operations_take_keyword_arguments_only():
    with pytest.raises(TypeError):
        definitions.publish("default", "simple", 1)


def test_failure_marks_apply_to_live_rows_of_other_scopes_only():
    available(scope="tenant-a")
    available()
    assert lifecycle.record_failure(
        scope="tenant-a", definition_id="simple", version=1, failure="NAME_BINDING_UNRESOLVED"
    )
    assert not lifecycle.record_failure(
        scope="tenant-a", definition_id="simple", version=1, failure="NAME_BINDING_UNRESOLVED"
    )
    assert not lifecycle.record_failure(
        scope="default", definition_id="simple", version=1, failure="NAME_BINDING_UNRESOLVED"
    )
    marks = {r.scope: r.failure for r in definitions.list(definition_id="simple")}
    assert marks == {"default": None, "tenant-a": "NAME_BINDING_UNRESOLVED"}
    assert lifecycle.record_failure(scope="tenant-a", definition_id="simple", version=1, failure=None)
    with pytest.raises(InvalidArgument):
        lifecycle.record_failure(scope="tenant-a", definition_id="simple", version=1, failure="whatever")
