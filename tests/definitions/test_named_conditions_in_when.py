"""Named conditions inside a decision's CEL ``when`` (issue #26; definition-documents.txt,
"the runtime evaluation environment includes ... registered named conditions, pre-evaluated
booleans keyed by condition id"). ``conditions['purchase.small']`` was refused at load as a
variable the field does not provide."""

import pytest
import yaml

from tests.definitions.helpers import pointers, types
from workflows.definitions import compile_text
from workflows.definitions.plan import DecisionStep
from workflows.exceptions import DefinitionError

HEAD = {
    "definitionId": "t",
    "definitionVersion": 1,
    "contract": {"name": "t.v1", "signals": {}},
    "initialStep": "route",
}
DONE = [{"id": "big", "type": "complete"}, {"id": "small", "type": "complete"}]


def decision(when: str) -> str:
    route = {"id": "route", "type": "decision", "routes": [{"when": when, "to": "small"}], "default": "big"}
    return yaml.safe_dump({**HEAD, "steps": [route, *DONE]}, sort_keys=False)


def refuse(text: str) -> DefinitionError:
    with pytest.raises(DefinitionError) as caught:
        compile_text(text)
    return caught.value


def test_a_when_reads_a_registered_named_condition(registry):
    registry.callback("purchase.small", "condition", lambda state: state["total"] < 100)
    plan = compile_text(decision("conditions['purchase.small'] && state.total > 0"))
    step = plan.step("route")
    assert isinstance(step, DecisionStep)
    assert step.routes[0].uses == ("purchase.small",)
    assert set(step.conditions) == {"purchase.small"}


def test_a_when_naming_an_unregistered_condition_is_refused_at_load(registry):
    error = refuse(decision("conditions['purchase.missing']"))
    assert pointers(error) == ["/steps/0/routes/0/when"]
    assert types(error) == ["unknownCallback"]


def test_a_when_naming_a_callback_of_another_category_is_refused(registry):
    registry.callback("purchase.reduce", "state_reducer", lambda state, payload: state)
    assert types(refuse(decision("conditions['purchase.reduce']"))) == ["unknownCallback"]


@pytest.mark.parametrize("when", ["conditions[state.name]", "'purchase.small' in conditions", "conditions.size() > 0"])
def test_conditions_read_any_other_way_is_refused_value_free(registry, when):
    registry.callback("purchase.small", "condition", lambda state: True)
    error = refuse(decision(when))
    assert pointers(error) == ["/steps/0/routes/0/when"]
    assert types(error) == ["expression"]
    assert "purchase.small" not in str(error) and "state.name" not in str(error)


def test_conditions_are_not_bound_outside_a_decision(registry):
    registry.callback("purchase.small", "condition", lambda state: True)
    timer = {"id": "route", "type": "timer", "after": "PT1M", "next": "big"}
    timer["set"] = "{'small': conditions['purchase.small']}"
    text = yaml.safe_dump({**HEAD, "steps": [timer, *DONE[:1]]}, sort_keys=False)
    error = refuse(text)
    assert (pointers(error), types(error)) == (["/steps/0/set"], ["expression"])
