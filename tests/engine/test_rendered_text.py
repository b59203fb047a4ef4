"""Rendered text is bounded (issue #40).

The story: 360 ``{{ state.s }}`` placeholders in a task's description turned a 260 KB start
payload into a 93.6 MB task row; every approver's inbox then took 0.8-1.45 s and the web process
grew to 1.7 GB. Now a text rendered from a template past ``EXECUTOR.MAX_RENDERED_CHARS`` fails
the step at render time, value-free, and nothing is written.
"""

from __future__ import annotations

from typing import Any

import pytest

from workflows import conf, operations
from workflows.models import HistoryEntry, Run, Task

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "LEAK-SENTINEL-40-"

DOCUMENT = """
definitionId: {id}
definitionVersion: 1
contract: {{name: {id}.v1, signals: {{}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialState: "payload"
initialStep: review
steps:
  - id: review
    type: human-task
    title: "Review {{{{ state.n }}}}"
    description: "{description}"
    assignment: {{mode: group, value: approvers}}
    decisions:
      - {{name: approve, next: done}}
  - id: done
    type: complete
"""


@pytest.fixture
def limited(settings: Any) -> Any:
    settings.WORKFLOWS = {**getattr(settings, "WORKFLOWS", {}), "EXECUTOR": {"MAX_RENDERED_CHARS": 10_000}}
    conf.reload()
    yield
    conf.reload()


def test_a_description_that_would_exceed_the_bound_fails_its_step_and_writes_no_task(
    deploy: Any, drain: Any, limited: Any
) -> None:
    deploy(DOCUMENT.format(id="multiplied", description="{{state.s}}" * 360))
    run_id = operations.start(definition_id="multiplied", payload={"n": 1, "s": SECRET * 200}).run_id
    drain(run_id)

    run = Run.objects.get(pk=run_id)
    assert run.status == "FAILED"
    assert run.failure_code == "TEXT_TOO_LARGE"
    assert run.failure_message == "TEXT_TOO_LARGE: description of step review is longer than 10000 characters"
    assert not Task.objects.filter(run_id=run_id).exists()
    history = list(HistoryEntry.objects.filter(run_id=run_id).values_list("outcome", "payload"))
    assert SECRET not in repr(history)


def test_a_description_within_the_bound_is_rendered_whole(deploy: Any, drain: Any, limited: Any) -> None:
    deploy(DOCUMENT.format(id="fits", description="{{ state.s }}" * 3))
    run_id = operations.start(definition_id="fits", payload={"n": 2, "s": "x" * 3000}).run_id
    drain(run_id)

    task = Task.objects.get(run_id=run_id)
    assert task.description == "x" * 9000
    assert task.title == "Review 2"
