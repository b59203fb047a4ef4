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


# --- refusals repeat no submitted value ------------------------------------------------------

SENTINEL = "S3NT1NEL-value"
# a valid scope key, but not a plain identifier: a message may never repeat it
SECRET_SCOPE = f"tenant {SENTINEL}"
SECRET_METADATA = {
    "source_type": "upload",
    "source_uri": f"https://example.com/{SENTINEL}",
    "source_revision": SENTINEL,
    "source_author": SENTINEL,
    "upload_id": SENTINEL,
}


def secret_text(version=1, contract="simple.v1", definition_id="simple", marker=""):
    """The simple document carrying the sentinel in a description and in a comment."""
    text = simple(definition_id=definition_id, version=version, contract=contract, comment=f"# {SENTINEL}{marker}\n")
    text = text.replace("initialStep: wait", f"description: 'about {SENTINEL}'\ninitialStep: wait")
    assert text.count(SENTINEL) == 2
    return text


def assert_sentinel_free(error):
    """Neither the message, the exception's text nor any violation field repeats the sentinel."""
    details = [error.message, str(error), *map(str, error.args)]
    for violation in error.violations:
        details.extend(str(value) for value in violation.as_dict().values())
    for text in details:
        assert SENTINEL not in text, f"the sentinel is repeated in {text!r}"


def refused(error_type, code, call):
    with pytest.raises(error_type) as caught:
        call()
    assert caught.value.code == code
    assert_sentinel_free(caught.value)
    return caught.value


def secret_loaded(scope=SECRET_SCOPE, version=1, **kwargs):
    return definitions.load(scope=scope, text=secret_text(version=version, **kwargs), metadata=SECRET_METADATA)


def secret_available(scope=SECRET_SCOPE, version=1, **kwargs):
    record = secret_loaded(scope, version, **kwargs)
    return definitions.publish(scope=scope, definition_id=record.definition_id, version=version)


def secret_key(scope=SECRET_SCOPE, version=1):
    return {"scope": scope, "definition_id": "simple", "version": version}


class TestRefusalsRepeatNoSubmittedValue:
    """Each refusal with the sentinel in the document text, the source metadata or the scope
    key the caller submitted: the code is the reference's and the sentinel is nowhere in it."""

    def test_the_sentinel_reaches_the_store(self):
        record = secret_loaded()
        row = DefinitionVersion.objects.get()
        assert (record.scope, row.source_author) == (SECRET_SCOPE, SENTINEL)
        assert SENTINEL in row.text

    def test_version_exists(self):
        secret_loaded()
        refused(
            LifecycleError,
            "VERSION_EXISTS",
            lambda: definitions.load(scope=SECRET_SCOPE, text=secret_text(marker=" changed"), metadata=SECRET_METADATA),
        )

    def test_contract_mismatch_within_a_scope(self):
        secret_loaded()
        refused(ContractMismatch, "CONTRACT_MISMATCH", lambda: secret_loaded(version=2, contract="other.v1"))

    def test_contract_mismatch_with_the_default_scope(self):
        secret_loaded(scope="default")
        refused(ContractMismatch, "CONTRACT_MISMATCH", lambda: secret_loaded(contract="other.v1"))

    def test_contract_mismatch_of_signal_schemas(self):
        secret_loaded()
        # the schema that differs carries the sentinel
        other = secret_text(definition_id="other-id").replace(
            "go: {type: object}", f"go: {{type: object, description: '{SENTINEL}'}}"
        )
        refused(
            ContractMismatch,
            "CONTRACT_MISMATCH",
            lambda: definitions.load(scope=SECRET_SCOPE, text=other, metadata=SECRET_METADATA),
        )

    def test_contract_mismatch_of_a_default_target(self):
        secret_loaded(contract="mine.v1")
        secret_available(scope="default", contract="theirs.v1")
        refused(
            ContractMismatch,
            "CONTRACT_MISMATCH",
            lambda: definitions.activate(**secret_key(), target_scope="default"),
        )

    def test_a_document_that_does_not_validate(self):
        text = secret_text() + f"scope: '{SENTINEL}'\nsteps2: {{{SENTINEL}: 1}}\n"
        error = refused(
            DefinitionError,
            "DEFINITION_INVALID",
            lambda: definitions.load(scope=SECRET_SCOPE, text=text, metadata=SECRET_METADATA),
        )
        assert {v.pointer for v in error.violations} == {"/scope", "/steps2"}
        assert not DefinitionVersion.objects.exists()

    def test_a_document_that_no_longer_builds_at_publication(self, registry):
        registry.callback("temp.mapper", "initial_state", lambda payload: payload)
        text = secret_text().replace("initialStep: wait", "initialStateMapper: temp.mapper\ninitialStep: wait")
        definitions.load(scope=SECRET_SCOPE, text=text, metadata=SECRET_METADATA)
        registry.undo()
        refused(DefinitionError, "DEFINITION_INVALID", lambda: definitions.publish(**secret_key()))

    def test_a_retired_document_that_no_longer_builds_at_reinstatement(self, registry):
        registry.callback("temp.mapper", "initial_state", lambda payload: payload)
        text = secret_text().replace("initialStep: wait", "initialStateMapper: temp.mapper\ninitialStep: wait")
        definitions.load(scope=SECRET_SCOPE, text=text, metadata=SECRET_METADATA)
        definitions.retire(**secret_key())
        registry.undo()
        refused(DefinitionError, "DEFINITION_INVALID", lambda: definitions.reinstate(**secret_key()))

    def test_drift_at_publication(self):
        secret_loaded()
        DefinitionVersion.objects.update(plan_hash="0" * 64)
        refused(DefinitionError, "DRIFT", lambda: definitions.publish(**secret_key()))

    def test_drift_at_reinstatement(self):
        secret_loaded()
        definitions.retire(**secret_key())
        DefinitionVersion.objects.update(plan_hash="f" * 64)
        refused(Drift, "DRIFT", lambda: definitions.reinstate(**secret_key()))

    def test_loader_missing(self):
        secret_loaded()
        definitions.retire(**secret_key())
        DefinitionVersion.objects.update(format="toml")
        refused(LoaderMissing, "LOADER_MISSING", lambda: definitions.reinstate(**secret_key()))

    def test_pinned_instances(self):
        secret_available()
        definitions.deprecate(**secret_key())
        Run.objects.create(scope=SECRET_SCOPE, definition_id="simple", version=1, plan_hash="h", status="WAITING")
        refused(PinnedInstances, "PINNED_INSTANCES", lambda: definitions.retire(**secret_key()))

    def test_a_claim_held_by_another_publisher(self):
        from django.utils import timezone

        secret_loaded()
        DefinitionVersion.objects.update(
            status="PUBLISHING", claim_token="00000000-0000-0000-0000-000000000001", claimed_at=timezone.now()
        )
        refused(LifecycleError, "INVALID_TRANSITION", lambda: definitions.publish(**secret_key()))

    @pytest.mark.parametrize(
        ("prepare", "operation"),
        [
            ("retired", "publish"),
            ("loaded", "deprecate"),
            ("available", "retire"),
            ("available", "reinstate"),
            ("loaded", "activate"),
        ],
    )
    def test_invalid_transitions(self, prepare, operation):
        if prepare == "retired":
            secret_loaded()
            definitions.retire(**secret_key())
        elif prepare == "loaded":
            secret_loaded()
        else:
            secret_available()
        refused(LifecycleError, "INVALID_TRANSITION", lambda: getattr(definitions, operation)(**secret_key()))

    @pytest.mark.parametrize("operation", ["deprecate", "retire"])
    def test_the_default_scopes_current_version(self, operation):
        # the default scope's key is the plain identifier "default"; the sentinel is in the
        # text and source metadata this version was loaded with
        secret_available(scope="default")
        definitions.activate(**secret_key("default"))
        if operation == "retire":
            DefinitionVersion.objects.update(status="DEPRECATED")
        refused(LifecycleError, "INVALID_TRANSITION", lambda: getattr(definitions, operation)(**secret_key("default")))

    @pytest.mark.parametrize("operation", ["publish", "deprecate", "retire", "reinstate", "source_metadata"])
    def test_a_missing_version(self, operation):
        secret_loaded()
        refused(
            DefinitionMissing, "DEFINITION_MISSING", lambda: getattr(definitions, operation)(**secret_key(version=7))
        )

    def test_a_recording_only_node(self, settings):
        settings.WORKFLOWS = {"EXECUTOR": {"ENABLED": False}}
        conf.reload()
        try:
            refused(NodeRoleError, "NODE_ROLE", lambda: secret_loaded())
        finally:
            del settings.WORKFLOWS
            conf.reload()

    @pytest.mark.parametrize(
        "call",
        [
            lambda: definitions.load(scope=f"{SENTINEL}\x07", text=secret_text()),
            lambda: definitions.load(scope=SENTINEL * 20, text=secret_text()),
            lambda: definitions.load(scope=f"{SENTINEL}\x00", text=secret_text()),
            lambda: definitions.load(scope=SECRET_SCOPE, text=secret_text(), format=SENTINEL),
            lambda: definitions.load(scope=SECRET_SCOPE, text=secret_text(), metadata={SENTINEL: "x"}),
            lambda: definitions.load(scope=SECRET_SCOPE, text=secret_text(), metadata={"source_type": SENTINEL * 5}),
            lambda: definitions.load(scope=SECRET_SCOPE, text=secret_text(), metadata={"upload_id": SENTINEL * 20}),
            lambda: definitions.load(
                scope=SECRET_SCOPE, text=secret_text(), metadata={"source_author": f"{SENTINEL}\x00"}
            ),
            lambda: definitions.publish(scope=SECRET_SCOPE, definition_id=f"{SENTINEL} id", version=1),
            lambda: definitions.activate(**secret_key(), target_scope=f"other {SENTINEL}"),
        ],
        ids=[
            "scope-control",
            "scope-length",
            "scope-nul",
            "format",
            "metadata-field",
            "metadata-length",
            "upload-id-length",
            "metadata-nul",
            "definition-id",
            "target-scope",
        ],
    )
    def test_invalid_arguments(self, call):
        refused(InvalidArgument, "INVALID_ARGUMENT", call)
        assert not DefinitionVersion.objects.exists()
