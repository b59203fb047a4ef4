"""Compilation: every violation reported at once, with pointers, lines and no values."""

import pytest
import yaml

from tests.definitions.helpers import assert_value_free, pointers, types
from workflows.definitions import compile_text
from workflows.definitions.plan import (
    AgentStep,
    CallStep,
    DecisionStep,
    EmailStep,
    FailStep,
    ForkStep,
    JoinStep,
    ServiceStep,
    TimerStep,
    WaitSignalStep,
)
from workflows.exceptions import DefinitionError, UnknownTypeName

HEAD = {
    "definitionId": "t",
    "definitionVersion": 1,
    "contract": {"name": "t.v1", "signals": {"go": None, "paid": {"type": "object"}}},
    "initialStep": "first",
}


def doc(*steps, **top):
    data = dict(HEAD)
    data.update(top)
    data["steps"] = list(steps)
    return yaml.safe_dump(data, sort_keys=False)


def refuse(text, code="DEFINITION_INVALID") -> DefinitionError:
    with pytest.raises(DefinitionError) as caught:
        compile_text(text)
    assert caught.value.code == code
    return caught.value


DONE = {"id": "done", "type": "complete"}


def test_every_violation_is_reported_at_once_with_lines():
    text = doc(
        {"id": "first", "type": "wait-signal", "signal": "go", "next": "nowhere"},
        {"id": "first", "type": "complete"},
        {"id": "lonely", "type": "complete"},
        scope="tenant-a",
    )
    error = refuse(text)
    assert set(types(error)) >= {"unknown", "reference", "unique", "unreachable"}
    assert "/scope" in pointers(error)
    assert all(v.line for v in error.violations)


def test_top_level_scope_is_an_unknown_field():
    error = refuse(doc(DONE, initialStep="done", scope="x"))
    assert pointers(error) == ["/scope"]
    assert types(error) == ["unknown"]


def test_unknown_field_with_an_unsafe_name_is_not_echoed():
    error = refuse(doc(dict(DONE, **{"s3cr3t value!": 1}), initialStep="done"))
    assert types(error) == ["unknown"]
    assert_value_free(error, "s3cr3t value!")


def test_unknown_step_type_is_refused_without_echoing_unsafe_names():
    error = refuse(doc({"id": "first", "type": "rm -rf /"}))
    assert pointers(error) == ["/steps/0/type"]
    assert_value_free(error, "rm -rf /")


@pytest.mark.parametrize(
    ("step", "missing"),
    [
        ({"id": "first", "type": "service", "next": "done"}, "/steps/0/target"),
        ({"id": "first", "type": "wait-signal", "next": "done"}, "/steps/0/signal"),
        ({"id": "first", "type": "timer", "next": "done"}, "/steps/0"),
        ({"id": "first", "type": "human-task", "decisions": [{"name": "ok", "next": "done"}]}, "/steps/0/assignment"),
        ({"id": "first", "type": "decision", "routes": [{"when": "true", "to": "done"}]}, "/steps/0/default"),
        ({"id": "first", "type": "fork", "branches": ["done"]}, "/steps/0/join"),
        ({"id": "first", "type": "call", "next": "done"}, "/steps/0/definitionId"),
        ({"id": "first", "type": "email", "to": "'a@b.c'", "next": "done"}, "/steps/0/subject"),
        ({"id": "first", "type": "agent", "next": "done"}, "/steps/0/agent"),
        ({"id": "first", "type": "script", "next": "done"}, "/steps/0/script"),
    ],
)
def test_required_fields_per_step_type(step, missing):
    error = refuse(doc(step, DONE))
    assert missing in pointers(error)
    assert "required" in types(error)


def test_mutually_exclusive_forms_are_refused():
    error = refuse(
        doc(
            {
                "id": "first",
                "type": "timer",
                "after": "PT1M",
                "at": "timestamp('2030-01-01T00:00:00Z')",
                "next": "done",
            },
            DONE,
        )
    )
    assert types(error) == ["conflict"]


def test_durations_must_be_iso8601_without_months():
    error = refuse(doc({"id": "first", "type": "timer", "after": "P1M", "next": "done"}, DONE))
    assert pointers(error) == ["/steps/0/after"]


def test_decision_requires_a_default_and_cel_must_compile():
    error = refuse(doc({"id": "first", "type": "decision", "routes": [{"when": "state.x >", "to": "done"}]}, DONE))
    assert set(pointers(error)) == {"/steps/0/default", "/steps/0/routes/0/when"}
    error = refuse(
        doc(
            {"id": "first", "type": "decision", "routes": [{"when": "state.x >", "to": "done"}], "default": "done"},
            DONE,
        )
    )
    assert pointers(error) == ["/steps/0/routes/0/when"]
    assert types(error) == ["expression"]


def test_cel_may_use_only_the_variables_of_its_field():
    error = refuse(
        doc(
            {"id": "first", "type": "decision", "routes": [{"when": "payload.x", "to": "done"}], "default": "done"},
            DONE,
        )
    )
    assert "allowed: conditions, state" in error.violations[0].message  # a decision when: state and conditions


def test_a_wait_for_an_undeclared_signal_is_refused():
    error = refuse(doc({"id": "first", "type": "wait-signal", "signal": "refund", "next": "done"}, DONE))
    assert pointers(error) == ["/steps/0/signal"]
    assert types(error) == ["undeclaredSignal"]


def test_the_contract_schema_is_used_when_the_wait_gives_none():
    plan = compile_text(doc({"id": "first", "type": "wait-signal", "signal": "paid", "next": "done"}, DONE))
    step = plan.step("first")
    assert isinstance(step, WaitSignalStep)
    assert step.payload_schema == {"type": "object"}


def test_unknown_contract_and_type_names_fail_with_unknown_type_name():
    error = refuse(
        doc(DONE, initialStep="done", contract="no.such.contract", stateType="no.such.Type"), "UNKNOWN_TYPE_NAME"
    )
    assert isinstance(error, UnknownTypeName)
    assert pointers(error)[:2] == ["/contract", "/stateType"]  # the document's own spelling
    assert "no.such.contract" in error.message  # safe names are echoed


def test_unsafe_type_names_are_not_echoed():
    error = refuse(doc(DONE, initialStep="done", stateSchema="Evil Type<script>"))
    assert pointers(error) == ["/stateSchema"]
    assert_value_free(error, "Evil Type<script>")


def test_contract_and_type_namespaces_are_separate(registry):
    registry.type("shared.Name", {"type": "object"})
    registry.contract("shared.Contract", signals={"go": None})
    error = refuse(doc(DONE, initialStep="done", contract="shared.Name"), "UNKNOWN_TYPE_NAME")
    assert pointers(error) == ["/contract"]
    error = refuse(doc(DONE, initialStep="done", stateSchema="shared.Contract"), "UNKNOWN_TYPE_NAME")
    assert pointers(error) == ["/stateSchema"]


def test_inline_schemas_with_remote_refs_are_refused():
    error = refuse(doc(DONE, initialStep="done", stateSchema={"$ref": "https://example.com/s.json"}))
    assert pointers(error) == ["/stateSchema/$ref"]
    assert types(error) == ["$ref"]


def test_inline_schema_patterns_must_be_re2():
    error = refuse(doc(DONE, initialStep="done", stateSchema={"type": "string", "pattern": "(?=a)b"}))
    assert types(error) == ["pattern"]


def test_unknown_callbacks_are_refused(registry):
    error = refuse(doc(DONE, initialStep="done", initialStateMapper="no.such.callback"))
    assert pointers(error) == ["/initialStateMapper"]
    assert types(error) == ["unknownCallback"]


def test_callback_of_another_category_is_unknown(registry):
    registry.callback("my.reducer", "state_reducer", lambda state, payload: state)
    error = refuse(doc(DONE, initialStep="done", initialStateMapper="my.reducer"))
    assert types(error) == ["unknownCallback"]


def test_callback_parameters_must_fit_the_field(registry):
    registry.callback("needs.record", "initial_state", lambda payload, record: payload)
    error = refuse(doc(DONE, initialStep="done", initialStateMapper="needs.record"))
    assert types(error) == ["callbackSignature"]


def test_service_target_must_be_registered_or_https(registry):
    step = {"id": "first", "type": "service", "target": "billing.charge", "next": "done"}
    assert types(refuse(doc(step, DONE))) == ["unknownCallback"]
    registry.callback("billing.charge", "service", lambda payload: None)
    assert isinstance(compile_text(doc(step, DONE)).step("first"), ServiceStep)
    step["target"] = "https://hooks.example.com/x"
    compile_text(doc(step, DONE))


def test_fork_and_join_pair_up():
    steps = [
        {"id": "first", "type": "fork", "branches": ["a", "b"], "join": "j"},
        {"id": "a", "type": "timer", "after": "PT1M", "next": "j"},
        {"id": "b", "type": "timer", "after": "PT2M", "next": "done"},
        {"id": "j", "type": "join", "policy": "n-of-m", "count": 3, "next": "done"},
        DONE,
    ]
    error = refuse(doc(*steps))
    assert set(pointers(error)) == {"/steps/0/branches/1", "/steps/3/count"}


def test_a_join_without_a_fork_is_refused():
    steps = [
        {"id": "first", "type": "timer", "after": "PT1M", "next": "j"},
        {"id": "j", "type": "join", "next": "done"},
        DONE,
    ]
    error = refuse(doc(*steps))
    assert types(error) == ["pairing"]


def test_fork_join_compiles():
    steps = [
        {"id": "first", "type": "fork", "branches": ["a", "b"], "join": "j", "retryPolicy": {"maxAttempts": 3}},
        {"id": "a", "type": "timer", "after": "PT1M", "next": "j"},
        {"id": "b", "type": "wait-signal", "signal": "go", "next": "j"},
        {"id": "j", "type": "join", "policy": "any", "set": '{"joined": size(results)}', "next": "done"},
        DONE,
    ]
    plan = compile_text(doc(*steps))
    fork, join = plan.step("first"), plan.step("j")
    assert isinstance(fork, ForkStep) and fork.retry_max_attempts == 3
    assert isinstance(join, JoinStep) and join.count == 1
    assert join.reducer.evaluate({"state": {}, "results": {"a": {}, "b": {}}}) == {"joined": 2}


def test_compensation_must_pair_with_its_service(registry):
    registry.callback("svc", "service", lambda payload: None)
    steps = [
        {"id": "first", "type": "service", "target": "svc", "compensation": "undo", "next": "done"},
        {"id": "undo", "type": "compensation", "forwardStep": "done", "target": "svc"},
        DONE,
    ]
    assert pointers(refuse(doc(*steps))) == ["/steps/1/forwardStep"]
    steps[1]["forwardStep"] = "first"
    assert compile_text(doc(*steps)).step("first").compensation == "undo"


def test_every_step_type_compiles(registry):
    registry.callback("svc", "service", lambda payload: None)
    registry.callback("bot", "agent", lambda input: {"answer": 42})
    registry.callback("calc", "script", lambda input, state: {"sum": 1})
    steps = [
        {"id": "first", "type": "service", "target": "svc", "payload": '{"n": 1}', "set": '{"r": result}', "next": "w"},
        {"id": "w", "type": "wait-signal", "signal": "go", "next": "t", "timeout": {"after": "PT1H", "next": "end"}},
        {"id": "t", "type": "timer", "at": "timestamp('2030-01-01T00:00:00Z')", "next": "c"},
        {
            "id": "c",
            "type": "call",
            "definitionId": "child",
            "version": 2,
            "payload": "state",
            "next": "e",
            "onFailure": "f",
        },
        {
            "id": "e",
            "type": "email",
            "to": "['a@example.com']",
            "subject": "Hi {{ state.name }}",
            "body": "b",
            "next": "a",
        },
        {"id": "a", "type": "agent", "agent": "bot", "input": "state", "set": "result", "next": "s"},
        {"id": "s", "type": "script", "script": "calc", "next": "d"},
        {"id": "d", "type": "decision", "routes": [{"when": "state.n > 1", "to": "f"}], "default": "done"},
        {"id": "f", "type": "fail", "errorType": "boom", "message": "failed {{ state.n }}"},
        {"id": "end", "type": "end", "reason": "timed out"},
        DONE,
    ]
    plan = compile_text(doc(*steps))
    assert isinstance(plan.step("t"), TimerStep)
    assert plan.step("t").delay.at.evaluate({"state": {}}) == "2030-01-01T00:00:00Z"
    assert isinstance(plan.step("c"), CallStep) and plan.step("c").version == 2
    email = plan.step("e")
    assert isinstance(email, EmailStep) and email.subject_template.evaluate({"state": {"name": "Ann"}}) == "Hi Ann"
    agent = plan.step("a")
    assert isinstance(agent, AgentStep) and agent.call.evaluate({"input": {}, "state": {}}) == {"answer": 42}
    fail = plan.step("f")
    assert isinstance(fail, FailStep) and fail.message.evaluate({"state": {"n": 3}}) == "failed 3"
    assert isinstance(plan.step("d"), DecisionStep)
    assert plan.signal_names == ("go",)


def test_named_conditions_are_resolved(registry):
    registry.callback("policy.low", "condition", lambda state: state["risk"] == "low")
    step = {"id": "first", "type": "decision", "routes": [{"condition": "policy.low", "to": "done"}], "default": "done"}
    plan = compile_text(doc(step, DONE))
    decision = plan.step("first")
    assert decision.routes[0].condition == "policy.low"
    assert decision.conditions["policy.low"].evaluate({"state": {"risk": "low"}}) is True


def test_assignment_modes():
    task = {
        "id": "first",
        "type": "human-task",
        "assignment": {"mode": "role", "value": "editors"},
        "decisions": [{"name": "ok", "next": "done"}],
    }
    assert compile_text(doc(task, DONE)).step("first").assignment.mode == "group"
    task["assignment"] = {"mode": "expression", "value": "'user:' + state.owner"}
    assignment = compile_text(doc(task, DONE)).step("first").assignment
    assert assignment.expression.evaluate({"state": {"owner": "ann"}}) == "user:ann"
    task["assignment"] = {"mode": "robot", "value": "x"}
    assert pointers(refuse(doc(task, DONE))) == ["/steps/0/assignment/mode"]


def test_decision_names_are_unique():
    task = {
        "id": "first",
        "type": "human-task",
        "assignment": {"mode": "user", "value": "ann"},
        "decisions": [{"name": "ok", "next": "done"}, {"name": "ok", "next": "done"}],
    }
    assert pointers(refuse(doc(task, DONE))) == ["/steps/0/decisions/1/name"]


def test_trigger_model_must_be_installed():
    trigger = {"model": "demo.NoSuchModel", "on": ["created"], "when": "record.total > 1"}
    error = refuse(doc(DONE, initialStep="done", trigger=trigger))
    assert pointers(error) == ["/trigger/model"]
    trigger["on"] = ["renamed"]
    assert "/trigger/on/0" in pointers(refuse(doc(DONE, initialStep="done", trigger=trigger)))


def test_initial_state_and_subject_cel():
    plan = compile_text(
        doc(DONE, initialStep="done", initialState='{"n": payload.n}', subject='{"type": "po", "id": string(state.n)}')
    )
    assert plan.initial_state.evaluate({"payload": {"n": 7}}) == {"n": 7}
    assert plan.subject.evaluate({"state": {"n": 7}}) == {"type": "po", "id": "7"}


def test_java_style_aliases_load(registry):
    registry.type("t.State", {"type": "object"})
    registry.type("t.Start", {"type": "object", "required": ["n"]})
    plan = compile_text(doc(DONE, initialStep="done", stateType="t.State", startPayloadType="t.Start"))
    assert plan.state_schema == {"type": "object"}
    assert plan.start_schema == {"type": "object", "required": ["n"]}
    assert plan.state_schema_name == "t.State"
    error = refuse(doc(DONE, initialStep="done", stateType="t.State", stateSchema="t.State"))
    assert types(error) == ["conflict"]


def test_start_schema_falls_back_to_the_contract():
    contract = {"name": "t.v1", "signals": {}, "startSchema": {"type": "object", "required": ["x"]}}
    plan = compile_text(doc(DONE, initialStep="done", contract=contract))
    assert plan.start_schema == {"type": "object", "required": ["x"]}


# --- reminders -------------------------------------------------------------------------------
# The reference's plan rule "reminders need an event recorder" holds by construction here: a
# reminder is recorded by the engine's own task notice (TASK_REMINDER_FIRED plus a NOTIFY
# intent, see tests/views/test_tasks_timers.py), which no deployment lacks. So a plan with
# reminders is never refused for want of a recorder; only the shape of `reminders` is checked.


def reminding_task(reminders, step_id="first"):
    return {
        "id": step_id,
        "type": "human-task",
        "assignment": {"mode": "group", "value": "approvers"},
        "decisions": [{"name": "ok", "next": "done"}],
        "reminders": reminders,
    }


def test_reminders_compile_with_nothing_registered(monkeypatch):
    from workflows.definitions import catalogs

    monkeypatch.setattr(catalogs, "_discovered", True)
    for catalog in (catalogs.callbacks, catalogs.types, catalogs.contracts):
        monkeypatch.setattr(catalog, "_entries", {})
    plan = compile_text(doc(reminding_task({"every": "P1D"}), DONE))
    assert plan.step("first").reminder_every_seconds == 86400
    without = {k: v for k, v in reminding_task(None).items() if k != "reminders"}
    assert compile_text(doc(without, DONE)).plan_hash != plan.plan_hash


def test_reminders_of_a_task_in_a_fork_branch_compile():
    steps = [
        {"id": "first", "type": "fork", "branches": ["review", "w"], "join": "j"},
        dict(reminding_task({"every": "PT4H"}, step_id="review"), decisions=[{"name": "ok", "next": "j"}]),
        {"id": "w", "type": "wait-signal", "signal": "go", "next": "j"},
        {"id": "j", "type": "join", "next": "done"},
        DONE,
    ]
    assert compile_text(doc(*steps)).step("review").reminder_every_seconds == 4 * 3600


@pytest.mark.parametrize(
    ("reminders", "pointer", "kind"),
    [
        ({"every": "PT0S"}, "/steps/0/reminders/every", "duration"),
        ({"every": "P1M"}, "/steps/0/reminders/every", "duration"),
        ({"every": "S3NT1NEL every day"}, "/steps/0/reminders/every", "duration"),
        ({}, "/steps/0/reminders/every", "required"),
        ({"every": "P1D", "count": 3}, "/steps/0/reminders/count", "unknown"),
        ({"every": "P1D", "S3NT1NEL count!": 3}, "/steps/0/reminders", "unknown"),
        ("S3NT1NEL P1D", "/steps/0/reminders", "type"),
    ],
)
def test_reminders_need_a_positive_interval(reminders, pointer, kind):
    error = refuse(doc(reminding_task(reminders), DONE))
    assert types(error) == [kind]
    assert pointers(error) == [pointer]
    assert_value_free(error, "S3NT1NEL")


def test_reminders_belong_to_human_tasks_only():
    step = {"id": "first", "type": "wait-signal", "signal": "go", "next": "done", "reminders": {"every": "P1D"}}
    error = refuse(doc(step, DONE))
    assert (pointers(error), types(error)) == (["/steps/0/reminders"], ["unknown"])
