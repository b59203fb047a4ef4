"""CEL comparisons across integers and doubles (the CEL specification's heterogeneous
numeric comparison), which JSON payloads need."""

from __future__ import annotations

import pytest

from workflows.definitions.expressions import compile_expression


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("state.total > 1000.0", True),
        ("state.total < 1000.0", False),
        ("state.total == 5000.0", True),
        ("state.total != 5000.0", False),
        ("state.ratio >= 1", True),
        ("state.ratio <= 1", False),
        ("9007199254740993 > 9007199254740992.0", True),  # exact, not through a double
        ("state.name == 'x'", True),
    ],
)
def test_numbers_compare_across_int_and_double(expression: str, expected: bool) -> None:
    state = {"total": 5000, "ratio": 1.5, "name": "x"}
    assert compile_expression(expression, ["state"]).evaluate({"state": state}) is expected


def test_arithmetic_still_keeps_them_apart() -> None:
    from workflows.exceptions import ExpressionFailed

    with pytest.raises(ExpressionFailed):
        compile_expression("state.total + 1.5 > 0.0", ["state"]).evaluate({"state": {"total": 1}})
