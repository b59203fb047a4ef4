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
    [found] = definitions.activations(scope="default")
    assert (found.definition_id, found.version) == ("purchase-approval", 1)
