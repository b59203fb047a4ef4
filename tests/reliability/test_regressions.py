"""Engine bugs the reliability suites found, each pinned by the smallest story that shows it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from workflows import operations
from workflows.engine import executor
from workflows.models import Command, HistoryEntry, Run, Task

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

PARK_THEN_END = """
definitionId: rel-park-end
definitionVersion: 1
contract: {name: relparkend.v1, signals: {go: {type: object}, note: {type: object}}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: wait-go
steps:
  - {id: wait-go, type: wait-signal, signal: go, next: review}
  - id: review
    type: human-task
    title: Review
    assignment: {mode: group, value: approvers}
    decisions:
      - {name: approve, next: wait-note}
  - {id: wait-note, type: wait-signal, signal: note, next: done}
  - {id: done, type: complete}
"""


def test_a_parked_signal_whose_application_ends_the_run_is_completed_not_rejected(
    deploy: Callable[..., Any],
) -> None:
    """Found by the state machine (full mode): a signal parked early, applied when the run
    reached its wait, took the run to its end; the end's teardown then rejected every signal
    still PARKED, the one being applied included. The command ended REJECTED with both
    COMMAND_COMPLETED and COMMAND_REJECTED in its history, and its open-signal slot was
    released twice."""
    deploy(PARK_THEN_END)
    run_id = operations.start(definition_id="rel-park-end", payload={}).run_id
    executor.drain(run_id=run_id)
    note = operations.signal(run_id=run_id, name="note", payload={}).command_id  # parked: the run waits for go
    operations.signal(run_id=run_id, name="go", payload={})
    executor.drain(run_id=run_id)
    assert Command.objects.get(pk=note).status == "PARKED"
    operations.complete_task(task_id=Task.objects.get(run_id=run_id).id, decision="approve")
    executor.drain(run_id=run_id)  # approve → wait-note → the parked note applies → done

    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    assert Command.objects.get(pk=note).status == "COMPLETE"
    settled = HistoryEntry.objects.filter(command_id=note, type__in=["COMMAND_COMPLETED", "COMMAND_REJECTED"])
    assert list(settled.values_list("type", flat=True)) == ["COMMAND_COMPLETED"]
    assert Run.objects.get(pk=run_id).open_signals == 0
