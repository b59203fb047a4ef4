"""Every expression failure says where and why, value-free (issue 39).

Before: a failing CEL expression or callback became ``DETERMINISTIC_FAILURE: set of step order
failed`` and nothing more; an author could not tell which of a long ``set``'s keys, which route,
which placeholder broke, nor why. Now the run's failure (the run viewer's and the API's
``failure``), the command's ``last_error`` and the failure's history entry (payload ``{"step",
"field", "reason"}``) name the step, the field as the document spells it and the reason in
words, and never repeat a value of the payload or the state.

Driven in-process against real PostgreSQL (the executor's own code); the worker and the API
see the same rows (``test_e2e_expression_failure_api.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.ops import make_due
from workflows import operations
from workflows.definitions import catalogs, expressions
from workflows.models import Command, HistoryEntry, Run, Task

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "LEAK-SECRET-39"  # in every payload: no failure text may repeat it


@pytest.fixture(autouse=True)
def _callbacks() -> Any:
    @catalogs.callbacks.register("test.x39_noop", category="service")
    def noop(payload: Any) -> None:
        return None

    @catalogs.callbacks.register("test.x39_broken_condition", category="condition")
    def broken(state: Any) -> bool:
        return bool(state["no-such-key"])  # raises KeyError (its text would quote the key)

    yield
    catalogs.callbacks.unregister("test.x39_noop", "service")
    catalogs.callbacks.unregister("test.x39_broken_condition", "condition")


def _document(name: str, steps: str, *, signals: str = "    go: null\n") -> str:
    contract = f"{{name: {name}.v1}}" if not signals else f"\n  name: {name}.v1\n  signals:\n{signals}"
    return f"definitionId: {name}\ndefinitionVersion: 1\ncontract: {contract}\ninitialStep: first\nsteps:\n{steps}"


def _failure_entries(run_id: Any) -> list[tuple[str, str, Any]]:
    return list(
        HistoryEntry.objects.filter(run_id=run_id, type__in=["FAILED", "COMMAND_FAILED", "COMMAND_REJECTED"])
        .order_by("seq")
        .values_list("type", "step", "payload")
    )


def _assert_value_free(run_id: Any) -> None:
    run = Run.objects.get(pk=run_id)
    texts = [run.failure_message, *Command.objects.filter(run_id=run_id).values_list("last_error", flat=True)]
    texts += [repr(entry) for entry in _failure_entries(run_id)]
    assert not any(SECRET in (text or "") for text in texts)


def _start(deploy: Any, drain: Any, document: str, payload: dict[str, Any]) -> Any:
    ref = deploy(document)
    run_id = operations.start(definition_id=ref.definition_id, payload={**payload, "secret": SECRET}).run_id
    drain()
    return run_id


def _assert_run_failed(run_id: Any, step: str, field: str, reason: str) -> None:
    run = Run.objects.get(pk=run_id)
    message = f"DETERMINISTIC_FAILURE: {field} of step {step} failed: {reason}"
    assert (run.status, run.failure_code, run.failure_message) == ("FAILED", "DETERMINISTIC_FAILURE", message)
    detail = {"step": step, "field": field, "reason": reason}
    entries = _failure_entries(run_id)
    assert ("FAILED", step, detail) in entries
    assert any(t == "COMMAND_FAILED" and payload == detail for t, _, payload in entries)
    _assert_value_free(run_id)


# one document per kind of expression site that a START reaches; (document steps, start
# payload, step, field, reason)
AT_START = [
    pytest.param(
        "  - {id: first, type: service, target: test.x39_noop,"
        ' set: \'{"ok": true, "total": result.payload.lines + 1}\', next: done}\n'
        "  - {id: done, type: complete}\n",
        {"lines": "three"},
        "first",
        "set.total",
        "no matching overload (operand types differ)",
        id="service-set-entry",
    ),
    pytest.param(
        "  - {id: first, type: service, target: test.x39_noop, payload: '{\"n\": state.missing}', next: done}\n"
        "  - {id: done, type: complete}\n",
        {},
        "first",
        "payload.n",
        "no such key or field",
        id="service-payload",
    ),
    pytest.param(
        "  - id: first\n    type: decision\n    routes:\n"
        "      - {when: 'state.flag == true', to: done}\n"
        "      - {when: 'state.amount > 10', to: done}\n"
        "    default: done\n"
        "  - {id: done, type: complete}\n",
        {"flag": False, "amount": "ten"},
        "first",
        "routes.1.when",
        "no matching overload (operand types differ)",
        id="route-when",
    ),
    pytest.param(
        "  - id: first\n    type: decision\n    routes:\n"
        "      - {condition: test.x39_broken_condition, to: done}\n"
        "    default: done\n"
        "  - {id: done, type: complete}\n",
        {},
        "first",
        "routes.0.condition",
        "the callback raised KeyError",
        id="route-condition-callback",
    ),
    pytest.param(
        "  - {id: first, type: service, target: test.x39_noop, set: 'state.count', next: done}\n"
        "  - {id: done, type: complete}\n",
        {"count": 3},
        "first",
        "set",
        "must give a map, gave a number",
        id="set-not-a-map",
    ),
    pytest.param(
        "  - id: first\n    type: human-task\n"
        "    title: 'Approve {{ state.number }} for {{ state.count + 1 }}'\n"
        "    assignment: {mode: user, value: ann}\n"
        "    decisions: [{name: ok, next: done}]\n"
        "  - {id: done, type: complete}\n",
        {"number": "N-1", "count": "many"},
        "first",
        "title placeholder 2",
        "no matching overload (operand types differ)",
        id="template-title",
    ),
    pytest.param(
        "  - id: first\n    type: human-task\n"
        "    assignment: {mode: expression, value: 'state.owner.name'}\n"
        "    decisions: [{name: ok, next: done}]\n"
        "  - {id: done, type: complete}\n",
        {"owner": {}},
        "first",
        "assignment.value",
        "no such key or field",
        id="assignee-expression",
    ),
    pytest.param(
        "  - id: first\n    type: human-task\n"
        "    assignment: {mode: expression, value: 'state.count'}\n"
        "    decisions: [{name: ok, next: done}]\n"
        "  - {id: done, type: complete}\n",
        {"count": 7},
        "first",
        "assignment.value",
        "must give 'user:NAME', 'group:NAME' or a map, gave a number",
        id="assignee-not-an-assignee",
    ),
    pytest.param(
        "  - {id: first, type: timer, at: 'timestamp(state.when)', next: done}\n  - {id: done, type: complete}\n",
        {"when": "next tuesday"},
        "first",
        "at",
        "invalid value",
        id="timer-at",
    ),
    pytest.param(
        "  - id: first\n    type: human-task\n"
        "    assignment: {mode: user, value: ann}\n"
        "    decisions: [{name: ok, next: done}]\n"
        "    due: {at: 'timestamp(state.when)', next: done}\n"
        "  - {id: done, type: complete}\n",
        {"when": "soon"},
        "first",
        "due.at",
        "invalid value",
        id="due-at",
    ),
    pytest.param(
        "  - {id: first, type: fail, errorType: x, message: 'Stopped at {{ state.where.exactly }}'}\n",
        {"where": {}},
        "first",
        "message placeholder 1",
        "no such key or field",
        id="template-fail-message",
    ),
    pytest.param(
        "  - id: first\n    type: wait-signal\n    signal: go\n    next: done\n"
        "    timeout: {at: 'timestamp(state.deadline)', next: done}\n"
        "  - {id: done, type: complete}\n",
        {"deadline": 12},
        "first",
        "timeout.at",
        "no matching overload (operand types differ)",
        id="timeout-at",
    ),
    pytest.param(
        "  - {id: first, type: script, script: shop.tax, input: '{\"total\": state.order.total}', next: done}\n"
        "  - {id: done, type: complete}\n",
        {"order": {}},
        "first",
        "input.total",
        "no such key or field",
        id="script-input",
    ),
    pytest.param(
        "  - {id: first, type: email, to: 'state.count', subject: s, body: b, next: done}\n"
        "  - {id: done, type: complete}\n",
        {"count": 2},
        "first",
        "to",
        "must give an address or a list of addresses, gave a number",
        id="email-to",
    ),
]


@pytest.mark.parametrize(("steps", "payload", "step", "field", "reason"), AT_START)
def test_a_failing_expression_names_step_field_and_reason(
    deploy: Any, drain: Any, steps: str, payload: dict[str, Any], step: str, field: str, reason: str, request: Any
) -> None:
    name = "x39-" + request.node.callspec.id
    run_id = _start(deploy, drain, _document(name, steps), payload)
    _assert_run_failed(run_id, step, field, reason)


def test_a_subject_failure_names_the_field(deploy: Any, drain: Any) -> None:
    document = _document("x39-subject", "  - {id: first, type: complete}\n").replace(
        "initialStep:", 'subject: \'{"type": "order", "id": state.number + 1}\'\ninitialStep:'
    )
    run_id = _start(deploy, drain, document, {"number": "N-1"})
    _assert_run_failed(run_id, "first", "subject.id", "no matching overload (operand types differ)")


def test_initial_state_failure_names_the_field(deploy: Any, drain: Any) -> None:
    document = _document("x39-initial", "  - {id: first, type: complete}\n").replace(
        "initialStep:", "initialState: '{\"n\": payload.number.first}'\ninitialStep:"
    )
    run_id = _start(deploy, drain, document, {"number": {}})
    _assert_run_failed(run_id, "first", "initialState.n", "no such key or field")


def test_a_signal_whose_set_fails_is_rejected_naming_the_field_and_the_run_keeps_waiting(
    deploy: Any, drain: Any
) -> None:
    steps = (
        "  - {id: first, type: wait-signal, signal: go, set: '{\"n\": payload.count + 1}', next: done}\n"
        "  - {id: done, type: complete}\n"
    )
    run_id = _start(deploy, drain, _document("x39-signal", steps), {})
    operations.signal(run_id=run_id, name="go", payload={"count": SECRET})
    drain()

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.current_step) == ("WAITING", "first")
    command = Command.objects.get(run_id=run_id, kind="SIGNAL")
    reason = "no matching overload (operand types differ)"
    assert (command.status, command.last_error) == (
        "REJECTED",
        f"DETERMINISTIC_FAILURE: set.n of step first failed: {reason}",
    )
    assert ("COMMAND_REJECTED", "", {"step": "first", "field": "set.n", "reason": reason}) in _failure_entries(run_id)
    _assert_value_free(run_id)


def test_a_task_decision_whose_set_fails_is_rejected_naming_the_decision(deploy: Any, drain: Any) -> None:
    steps = (
        "  - id: first\n    type: human-task\n    assignment: {mode: user, value: ann}\n"
        "    decisions:\n      - {name: approve, payloadSchema: {type: object},"
        " set: '{\"c\": payload.comment.text}', next: done}\n"
        "  - {id: done, type: complete}\n"
    )
    run_id = _start(deploy, drain, _document("x39-task", steps), {})
    task = Task.objects.get(run_id=run_id)
    operations.complete_task(task_id=task.pk, decision="approve", payload={"comment": {"body": SECRET}})
    drain()

    field, reason = "decisions.approve.set.c", "no such key or field"
    command = Command.objects.get(run_id=run_id, kind="COMPLETION")
    assert (command.status, command.last_error) == (
        "REJECTED",
        f"DETERMINISTIC_FAILURE: {field} of step first failed: {reason}",
    )
    assert ("COMMAND_REJECTED", "", {"step": "first", "field": field, "reason": reason}) in _failure_entries(run_id)
    assert Task.objects.get(pk=task.pk).status == "OPEN"  # reopened: another decision may follow
    _assert_value_free(run_id)


def test_a_timer_whose_set_fails_fails_the_run_naming_the_field(deploy: Any, drain: Any) -> None:
    steps = (
        "  - {id: first, type: timer, after: PT1H, set: '{\"later\": state.count * 2}', next: done}\n"
        "  - {id: done, type: complete}\n"
    )
    run_id = _start(deploy, drain, _document("x39-timer", steps), {"count": "two"})
    assert Run.objects.get(pk=run_id).status == "WAITING"
    make_due(run_id, "FIRE")
    drain()
    _assert_run_failed(run_id, "first", "set.later", "no matching overload (operand types differ)")


def test_an_expression_reading_a_name_its_caller_does_not_give_says_unknown_name() -> None:
    """The failure the issue met: ``set`` read ``result`` that the engine did not provide."""
    computation = expressions.compile_expression(
        '{"ordered": result.ordered, "n": state.n}', ["state", "result"], merge=True
    )
    with pytest.raises(Exception) as failed:
        computation.evaluate({"state": {"n": 1}})
    assert (failed.value.message, failed.value.where) == ("expression failed: unknown name 'result'", ".ordered")
