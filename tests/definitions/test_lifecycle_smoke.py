import pytest

from tests.definitions.conftest import simple
from workflows import definitions
from workflows.definitions.selection import select_for_start


@pytest.mark.django_db(transaction=True)
def test_load_publish_activate_select():
    record = definitions.load(scope="default", text=simple())
    assert record.status == "CANDIDATE"
    record = definitions.publish(scope="default", definition_id="simple", version=1)
    assert record.status == "AVAILABLE"
    definitions.activate(scope="default", definition_id="simple", version=1)
    chosen = select_for_start(start_scope="default", definition_id="simple")
    assert chosen.version == 1
    assert chosen.plan_hash == record.plan_hash
    assert chosen.signal_names == ("go",)
