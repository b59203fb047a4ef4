"""The designer's templates: each one compiles, is no-code, and opens in the editor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from designer import services
from workflows.definitions.documents import parse

LIBRARY = Path(services.__file__).resolve().parent / "templates_library"
CALLBACK_FIELDS = {
    "initialStateMapper",
    "subjectResolver",
    "payloadMapper",
    "stateReducer",
    "applicator",
    "mutator",
    "onTimeoutMutator",
    "reducer",
    "condition",
    "fireAt",
    "messageFactory",
}


def _keys(value: Any) -> set[str]:
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.update(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def test_every_file_in_the_library_is_offered_and_every_offer_has_a_file() -> None:
    assert {p.stem for p in LIBRARY.glob("*.yaml")} == {t.slug for t in services.TEMPLATES}


@pytest.mark.parametrize("slug", [t.slug for t in services.TEMPLATES])
def test_template_compiles(slug: str) -> None:
    result = services.check(services.template_text(slug))
    assert result.problems == []
    assert result.plan is not None


@pytest.mark.parametrize("slug", [t.slug for t in services.TEMPLATES])
def test_template_needs_no_code(slug: str) -> None:
    data = parse(services.template_text(slug)).data
    assert not (_keys(data) & CALLBACK_FIELDS), "a template names a callback"
    assert not isinstance(data["contract"], str), "a template names a catalog contract"
    for step in data["steps"]:
        if step["type"] in ("service", "compensation"):
            assert step["target"].startswith("https://")
        assert step["type"] not in ("agent", "script")


def test_templates_cover_the_asked_shapes() -> None:
    plans = {t.slug: services.check(services.template_text(t.slug)).plan for t in services.TEMPLATES}
    types = {slug: {s.type for s in plan.steps.values()} for slug, plan in plans.items() if plan}
    assert "human-task" in types["approval"]
    assert plans["approval-with-escalation"].steps["review"].due is not None
    assert {"fork", "join"} <= types["parallel-reviews"]
    assert plans["purchase-order-review"].trigger.model == "demo.PurchaseOrder"
    assert "compensation" in types["saga"]


def test_an_unknown_template_is_not_a_path() -> None:
    with pytest.raises(KeyError):
        services.template_text("../services")
