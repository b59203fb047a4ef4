"""Start selection from one read of versions and activation records."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.definitions.conftest import simple
from workflows import definitions
from workflows.definitions.selection import select_for_start
from workflows.exceptions import DefinitionMissing, Deprecated, LifecycleError, NoCurrentVersion, VersionNotRunnable

pytestmark = pytest.mark.django_db


def available(scope="default", version=1, **kwargs):
    record = definitions.load(scope=scope, text=simple(version=version, **kwargs))
    return definitions.publish(scope=scope, definition_id=record.definition_id, version=version)


def test_no_record_means_no_current_version():
    available()
    with pytest.raises(NoCurrentVersion) as caught:
        select_for_start(start_scope="default", definition_id="simple")
    assert caught.value.code == "NO_CURRENT_VERSION"


def test_an_unknown_id_has_no_current_version():
    with pytest.raises(NoCurrentVersion):
        select_for_start(start_scope="default", definition_id="nothing-here")


def test_the_default_record_selects_with_one_statement():
    record = available()
    definitions.activate(scope="default", definition_id="simple", version=1)
    with CaptureQueriesContext(connection) as queries:
        chosen = select_for_start(start_scope="tenant-a", definition_id="simple")
    assert len(queries) == 1
    assert (chosen.scope, chosen.version, chosen.start_scope) == ("default", 1, "tenant-a")
    assert chosen.plan_hash == record.plan_hash
    assert chosen.signal_names == ("go",)


def test_a_scopes_own_record_wins_over_the_default():
    available()
    available(scope="tenant-a")
    definitions.activate(scope="default", definition_id="simple", version=1)
    definitions.activate(scope="tenant-a", definition_id="simple", version=1)
    assert select_for_start(start_scope="tenant-a", definition_id="simple").scope == "tenant-a"
    assert select_for_start(start_scope="tenant-b", definition_id="simple").scope == "default"


def test_a_record_serves_only_clients_of_its_contract():
    available()
    definitions.activate(scope="default", definition_id="simple", version=1)
    assert select_for_start(start_scope="default", definition_id="simple", contract="simple.v1").version == 1
    with pytest.raises(NoCurrentVersion):
        select_for_start(start_scope="default", definition_id="simple", contract="other.v1")


def test_explicit_versions_resolve_in_the_start_scope_then_the_default():
    available()
    available(scope="tenant-a", version=2)
    assert select_for_start(start_scope="tenant-a", definition_id="simple", version=2).scope == "tenant-a"
    assert select_for_start(start_scope="tenant-a", definition_id="simple", version=1).scope == "default"
    with pytest.raises(VersionNotRunnable) as caught:
        select_for_start(start_scope="tenant-a", definition_id="simple", version=3)
    assert caught.value.code == "VERSION_NOT_RUNNABLE"


def test_a_candidate_is_not_runnable():
    definitions.load(scope="default", text=simple())
    with pytest.raises(VersionNotRunnable):
        select_for_start(start_scope="default", definition_id="simple", version=1)


def test_deprecated_versions_are_refused_named_or_selected():
    available()
    available(version=2)
    definitions.activate(scope="tenant-a", definition_id="simple", version=1, target_scope="default")
    definitions.deprecate(scope="default", definition_id="simple", version=1)
    with pytest.raises(Deprecated) as caught:
        select_for_start(start_scope="default", definition_id="simple", version=1)
    assert caught.value.code == "DEPRECATED"
    with pytest.raises(Deprecated):
        select_for_start(start_scope="tenant-a", definition_id="simple")


def test_a_retired_version_is_refused_as_a_lifecycle_failure():
    available()
    definitions.deprecate(scope="default", definition_id="simple", version=1)
    definitions.retire(scope="default", definition_id="simple", version=1)
    with pytest.raises(LifecycleError) as caught:
        select_for_start(start_scope="default", definition_id="simple", version=1)
    assert caught.value.code == "INVALID_TRANSITION"


def test_deactivating_the_default_stops_following_scopes():
    available()
    definitions.activate(scope="default", definition_id="simple", version=1)
    definitions.deactivate_default(definition_id="simple")
    with pytest.raises(NoCurrentVersion):
        select_for_start(start_scope="tenant-a", definition_id="simple")


def test_a_target_scope_other_than_start_or_default_is_missing():
    with pytest.raises(DefinitionMissing):
        select_for_start(start_scope="a", definition_id="simple", version=1, target_scope="b")


def test_the_start_schema_of_the_row_is_returned():
    text = simple().replace("initialStep: wait", "startPayloadSchema: {type: object, required: [n]}\ninitialStep: wait")
    definitions.load(scope="default", text=text)
    definitions.publish(scope="default", definition_id="simple", version=1)
    chosen = select_for_start(start_scope="default", definition_id="simple", version=1)
    assert chosen.start_schema == {"type": "object", "required": ["n"]}
