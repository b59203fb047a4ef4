"""The ``note`` step records itself in the decisions and continues."""

from __future__ import annotations

from typing import Any

import pytest

from workflows import operations
from workflows.models import HistoryEntry, Run

NOTED = """
definitionId: noted
definitionVersion: 1
contract: {name: noted.v1, signals: {}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: remember
steps:
  - {id: remember, type: note, text: started, next: done}
  - {id: done, type: complete}
"""


@pytest.mark.django_db(transaction=True)
def test_a_note_continues_to_next(deploy: Any, drain: Any) -> None:
    deploy(NOTED)
    run_id = operations.start(definition_id="noted", payload={}).run_id
    drain()
    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    assert HistoryEntry.objects.filter(run_id=run_id, type="DECISION", step="remember").exists()
