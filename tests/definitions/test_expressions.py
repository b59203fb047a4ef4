import time

import pytest

from workflows.definitions import expressions
from workflows.definitions.expressions import ExpressionCompileError, compile_expression, compile_template
from workflows.exceptions import ExpressionFailed


def test_results_are_plain_python_values():
    comp = compile_expression(
        '{"i": 1, "d": 2.5, "s": "x", "b": true, "n": null, "l": [1, "a"], '
        '"t": timestamp("2024-01-01T00:00:00Z") + duration("90s"), "dur": duration("90s")}',
        ["state"],
    )
    result = comp.evaluate({"state": {}})
    assert result == {
        "i": 1,
        "d": 2.5,
        "s": "x",
        "b": True,
        "n": None,
        "l": [1, "a"],
        "t": "2024-01-01T00:01:30Z",
        "dur": 90,
    }
    assert type(result["i"]) is int and type(result["b"]) is bool and type(result["s"]) is str
    assert type(result) is dict and type(result["l"]) is list


def test_expressions_longer_than_4_kib_are_refused():
    with pytest.raises(ExpressionCompileError) as caught:
        compile_expression("1 + " * 1100 + "1", [])
    assert caught.value.problem.kind == "maxLength"


def test_deep_asts_are_refused():
    with pytest.raises(ExpressionCompileError):
        compile_expression("(" * 40 + "1" + ")" * 40, [])


def test_nested_comprehensions_are_limited():
    compile_expression("state.a.map(x, state.b.map(y, x + y))", ["state"])
    with pytest.raises(ExpressionCompileError) as caught:
        compile_expression("state.a.map(x, state.b.map(y, state.c.map(z, x + y + z)))", ["state"])
    assert "comprehensions" in caught.value.problem.message


def test_macro_variables_are_not_free_variables():
    compile_expression("state.items.exists(i, i.qty > 1)", ["state"])
    with pytest.raises(ExpressionCompileError):
        compile_expression("secret.items", ["state"])


def test_evaluation_is_bounded():
    comp = compile_expression("state.l.map(x, state.l.map(y, x + y))", ["state"])
    started = time.monotonic()
    with pytest.raises(ExpressionFailed) as caught:
        comp.evaluate({"state": {"l": list(range(500))}})
    assert "budget" in caught.value.message
    assert time.monotonic() - started < 10


def test_the_budget_counts_every_node_visited(monkeypatch: pytest.MonkeyPatch):
    """20,000 nodes: a map over 1,000 items (about 14 nodes each) fits, a filter over 2,000 does not.

    The CPU-time bound (50 ms) is lifted here: cel-python needs ~150 ms for 20,000 nodes, and
    this test is about the step count (tests/security/test_cel_bounds.py covers the clock)."""
    monkeypatch.setattr(expressions, "MAX_EVALUATION_CPU_MS", 60_000)
    monkeypatch.setattr(expressions, "MAX_EVALUATION_WALL_MS", 60_000)
    mapped = compile_expression("state.l.map(x, x * 2).size()", ["state"])
    assert mapped.evaluate({"state": {"l": list(range(1000))}}) == 1000
    filtered = compile_expression("state.l.filter(x, x > 5).size()", ["state"])
    with pytest.raises(ExpressionFailed) as caught:
        filtered.evaluate({"state": {"l": list(range(2000))}})
    assert "budget exceeded (steps)" in caught.value.message


def test_evaluation_failures_do_not_repeat_values():
    comp = compile_expression("state.total > 10", ["state"])
    with pytest.raises(ExpressionFailed) as caught:
        comp.evaluate({"state": {"total": "top-secret-text"}})
    assert "top-secret-text" not in caught.value.message
    with pytest.raises(ExpressionFailed) as caught:
        compile_expression("state.missing_field_name", ["state"]).evaluate({"state": {}})
    assert caught.value.message == "expression failed: no such key or field"


def test_decimal_and_datetime_inputs_are_accepted():
    import datetime as dt
    from decimal import Decimal

    # a Decimal is a JSON decimal (as stored and read back): a CEL double, like 2.0
    comp = compile_expression("[state.a + 1.0, state.b * 2.0, state.when]", ["state"])
    when = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    assert comp.evaluate({"state": {"a": Decimal("2"), "b": Decimal("1.5"), "when": when}}) == [
        3.0,
        3.0,
        "2024-01-01T00:00:00Z",
    ]


def test_templates_render_placeholders():
    template = compile_template("PO {{ state.n }}: {{ state.items }} {{ state.none }}!", ["state"])
    assert template.evaluate({"state": {"n": 7, "items": [1, 2], "none": None}}) == "PO 7: [1,2] !"
    with pytest.raises(ExpressionCompileError):
        compile_template("{{ payload.x }}", ["state"])


def test_the_deepest_accepted_expression_evaluates_without_recursion_errors():
    text = "1"
    while True:
        try:
            expressions.compile_ast(f"({text})", [])
        except ExpressionCompileError:
            break
        text = f"({text})"
    assert text.count("(") > 10
    assert compile_expression(text, []).evaluate({}) == 1


# --- bare member paths are read without the interpreter, with the interpreter's answers ---------

_DOCUMENTS = [
    {"a": {"b": "text"}},
    {"a": {"b": 7}},
    {"a": {"b": -(2**63)}},
    {"a": {"b": 2**63}},  # beyond CEL's int: the interpreter decides
    {"a": {"b": 2.5}},
    {"a": {"b": None}},
    {"a": {"b": True}},
    {"a": {"b": [1, "x"]}},
    {"a": {"b": {"c": 1}}},
    {"a": {}},
    {"a": "not a map"},
    {},
]


@pytest.mark.parametrize("document", _DOCUMENTS)
def test_a_bare_path_answers_what_the_interpreter_answers(document: dict) -> None:
    import dataclasses

    fast = compile_expression("state.a.b", ["state"])
    assert fast.path == ("state", "a", "b")
    slow = dataclasses.replace(fast, path=())

    def outcome(comp: expressions.CelComputation) -> tuple[str, object]:
        try:
            value = comp.evaluate({"state": document})
        except Exception as failed:  # the engine turns any of them into a deterministic failure
            return "failed", f"{type(failed).__name__}: {failed}"
        return type(value).__name__, value

    assert outcome(fast) == outcome(slow)


def test_only_bare_paths_of_known_variables_take_the_short_way() -> None:
    assert compile_expression("state.route", ["state"]).path == ("state", "route")
    assert compile_expression("state.route == 'x'", ["state"]).path == ()
    assert compile_expression("payload.a", ["state", "payload"]).path == ("payload", "a")
    assert compile_expression("true", ["state"]).path == ()
    assert compile_template("Review {{ state.route }}", ["state"]).evaluate({"state": {"route": "x"}}) == "Review x"
