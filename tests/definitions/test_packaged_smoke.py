import pytest
from django.core.management import call_command

from workflows import definitions


@pytest.mark.django_db(transaction=True)
def test_demo_document_is_recorded_published_and_activated_idempotently(capsys):
    call_command("load_packaged_definitions")
    call_command("load_packaged_definitions")
    out = capsys.readouterr().out
    assert "purchase-approval v1: recorded (AVAILABLE)" in out
    assert "purchase-approval v1: unchanged (AVAILABLE)" in out
    [record] = definitions.list(definition_id="purchase-approval")
    assert record.packaged and record.status == "AVAILABLE"
    # the demo app ships more than one document (purchase-order-review is the trigger demo)
    found = {a.definition_id: a.version for a in definitions.activations(scope="default")}
    assert found["purchase-approval"] == 1
