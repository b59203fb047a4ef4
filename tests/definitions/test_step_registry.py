"""Every place that knows the step types names the same ones: the registry in
``workflows.definitions.steps`` and what validation, the compiler, the plan, the graph, the
designer, the authoring guide and the engine's executors do with it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from designer import forms as designer_forms
from designer import services as designer_services
from workflows.definitions import plan, steps
from workflows.definitions.reading import Checker
from workflows.definitions.steps import REGISTRY
from workflows.definitions.steps.base import Step
from workflows.definitions.validation import normalise
from workflows.presentation import graph

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "authoring.md"
TYPES = set(REGISTRY)


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def test_the_registry_holds_the_documented_step_types():
    section = GUIDE.read_text().split("## Step types", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"^\| `([a-z-]+)` \|", section, re.MULTILINE)) == TYPES


def test_each_type_has_one_step_class_and_every_step_class_a_type():
    classes = [kind.step_class for kind in REGISTRY.values()]
    assert len(set(classes)) == len(classes)
    assert set(classes) == {cls for cls in _subclasses(Step) if cls.__module__.startswith(steps.__name__)}


# the step classes the engine knows as ``plan.XStep`` (a new type's class is imported from
# ``workflows.definitions.steps``)
PLAN_NAMES = (
    "ServiceStep",
    "WaitSignalStep",
    "TimerStep",
    "HumanTaskStep",
    "DecisionStep",
    "ForkStep",
    "JoinStep",
    "CompensationStep",
    "CallStep",
    "EmailStep",
    "AgentStep",
    "ScriptStep",
    "CompleteStep",
    "FailStep",
    "EndStep",
)


def test_the_plan_module_re_exports_the_step_classes():
    for name in PLAN_NAMES:
        assert getattr(plan, name) is getattr(steps, name)
        assert issubclass(getattr(plan, name), Step)


@pytest.mark.parametrize("name", sorted(TYPES))
def test_validation_reads_every_type(name: str):
    checker = Checker()
    spec = normalise({"steps": [{"id": "s", "type": name}]}, checker)
    assert spec["steps"][0]["type"] == name
    assert not [v for v in checker.violations if v.pointer == "/steps/0/type"]


def test_validation_refuses_a_type_the_registry_does_not_hold():
    checker = Checker()
    normalise({"steps": [{"id": "s", "type": "teleport"}]}, checker)
    assert [(v.pointer, v.type) for v in checker.violations if v.pointer.startswith("/steps/0")] == [
        ("/steps/0/type", "enum")
    ]


@pytest.mark.parametrize("name", sorted(TYPES))
def test_the_compiler_builds_each_type_as_its_step_class(name: str):
    class Build:  # what a compile function may ask of the compiler, answering nothing
        def __getattr__(self, _name: str) -> Any:
            return lambda *args, **kwargs: None

    kind = REGISTRY[name]
    built = kind.compile(Build(), {"id": "s", "type": name}, "/steps/0", None)
    assert type(built) is kind.step_class
    assert (built.id, built.type) == ("s", name)


def test_the_graph_draws_every_type():
    for kind in REGISTRY.values():
        assert kind.shape in graph.SHAPES
        assert kind.label


def test_the_designer_offers_every_type():
    assert list(REGISTRY) == designer_forms.TYPE_NAMES
    assert [name for name, _ in designer_forms.STEP_TYPES] == list(REGISTRY)
    assert set(designer_forms.TYPE_FIELDS) == TYPES
    assert set(designer_forms.ROW_KINDS) <= TYPES


@pytest.mark.parametrize("name", sorted(TYPES))
def test_the_designer_fields_write_fields_the_type_reads(name: str):
    # a form field's key is the path of a document field of its type (validation refuses
    # any other), and a row's key names one too
    kind = REGISTRY[name]
    declared = {*kind.required, *kind.optional}
    assert {spec.key.split("/")[0] for spec in kind.form_fields} <= declared
    if kind.form_rows is not None:
        assert kind.form_rows[0] in declared


@pytest.mark.parametrize("name", sorted(TYPES))
def test_the_designer_checks_each_expression_field_with_known_variables(name: str):
    # an unknown key would have the designer check the field as typed against state alone
    kind = REGISTRY[name]
    specs = [*kind.form_fields, *(kind.form_rows[1] if kind.form_rows is not None else ())]
    for spec in specs:
        if spec.kind in ("cel", "template", "longtemplate"):
            assert spec.variables in designer_services.CEL_VARIABLES, spec.key


def test_exits_are_found_on_normalised_and_on_written_steps():
    written = {
        "id": "review",
        "type": "human-task",
        "decisions": [{"name": "approve", "next": "done"}, {"name": "reject", "label": "No", "next": "stop"}],
        "due": {"after": "P1D", "next": "late"},
    }
    assert [(e.pointer, e.target, e.kind, e.label) for e in steps.exits(written)] == [
        ("/decisions/0/next", "done", "decision", "approve"),
        ("/decisions/1/next", "stop", "decision", "No"),
        ("/due/next", "late", "due", "due"),
    ]
    fork = {"id": "split", "type": "fork", "branches": ["a", "b"], "join": "gather"}
    assert [(e.target, e.kind, e.flow) for e in steps.exits(fork)] == [
        ("a", "branch", True),
        ("b", "branch", True),
        ("gather", "join", False),
    ]
    assert steps.exits({"id": "x", "type": "teleport", "next": "y"}) == []


def test_the_engine_executes_exactly_the_registered_step_types():
    from workflows.engine.nodes import EXECUTORS

    assert set(EXECUTORS) == {kind.step_class for kind in REGISTRY.values()}
