"""Errors an author can act on: every YAML syntax error says why, on which line and in which
column (1-based), on both YAML front ends; a CEL problem says where in the expression and, when
the expression's place in the source is known, where in the document."""

from __future__ import annotations

import pytest

from workflows.definitions import compile_text, expressions
from workflows.definitions.documents import parse
from workflows.exceptions import DefinitionError, Violation


@pytest.fixture(params=["libyaml", "python"])
def yaml_loader(request, monkeypatch):
    from workflows.definitions import documents

    if request.param == "libyaml":
        if documents._LOADER is documents._StrictLoader:
            pytest.skip("PyYAML without libyaml")
    else:
        monkeypatch.setattr(documents, "_LOADER", documents._StrictLoader)
    return request.param


def refused(text: str, fmt: str = "yaml") -> Violation:
    with pytest.raises(DefinitionError) as caught:
        parse(text, fmt)
    return caught.value.violations[0]


@pytest.mark.parametrize(
    ("text", "kind", "where", "reason"),
    [
        ("a: 1\n  b: 2\n", "syntax", (2, 4), "not valid YAML: mapping values are not allowed"),
        ("a:\n  b: 1\n c: 2\n", "syntax", (3, 2), "not valid YAML: "),
        ("a:\n\t- 1\n", "syntax", (2, 1), "not valid YAML: a tab character; YAML is indented with spaces"),
        ("a: 'x\nb: 2\n", "syntax", (3, 1), "not valid YAML: found unexpected end of stream"),
        ("a: 1\nb: [1, 2\nc: 3\n", "syntax", (3, 2), "not valid YAML: "),
        ("a: 1\nb: 2\na: 3\n", "duplicate", (3, 1), "duplicate key (first on line 1)"),
        ("a: &x 1\nb:  *x\n", "alias", (2, 5), "YAML aliases are not allowed"),
        ("a: !!binary aGk=\n", "tag", (1, 4), "explicit YAML tags are not allowed"),
    ],
    ids=["indentation", "dedent", "tab", "unclosed-quote", "unclosed-flow", "duplicate-key", "alias", "tag"],
)
def test_a_yaml_error_has_its_reason_line_and_column(yaml_loader, text, kind, where, reason):
    violation = refused(text)
    assert violation.type == kind
    assert (violation.line, violation.column) == where
    assert violation.message.startswith(reason)
    assert violation.as_dict()["column"] == where[1]


def test_an_unclosed_quote_says_where_the_quoted_text_starts(yaml_loader):
    assert refused("a: 'x\nb: 2\n").message.endswith("that starts on line 1, column 4")


def test_a_json_syntax_error_has_its_line_and_column():
    violation = refused('{"a": 1,\n  "b" 2}', "json")
    assert (violation.type, violation.line, violation.column) == ("syntax", 2, 7)


@pytest.mark.parametrize(
    ("source", "column", "reason"),
    [
        ("state.a +", 9, "the expression ends too early"),
        ('state.a == "x', 12, "a quoted text is not closed"),
        ("state.a ++ 1", 10, "unexpected '+'"),
        ("state.a # 1", 9, "unexpected character '#'"),
        ("state.a ==\n  (1 +", 17, "the expression ends too early"),
    ],
)
def test_a_cel_syntax_error_names_the_column_and_the_reason_in_words(source, column, reason):
    with pytest.raises(expressions.ExpressionCompileError) as caught:
        expressions.compile_expression(source, ["state"])
    problem = caught.value.problem
    assert problem.column == column
    assert problem.message == f"expression does not parse as CEL: column {column}: {reason}"
    assert "Token" not in problem.message and "lark" not in problem.message


def test_an_unknown_variable_is_named_with_its_column():
    with pytest.raises(expressions.ExpressionCompileError) as caught:
        expressions.compile_expression("state.a + payload.b", ["state"])
    assert caught.value.problem.column == 11
    assert caught.value.problem.message == (
        "expression uses a variable this field does not provide (allowed: state): 'payload' at column 11"
    )


def test_a_template_placeholder_problem_has_its_column_in_the_template_text():
    with pytest.raises(expressions.ExpressionCompileError) as caught:
        expressions.compile_template("Order {{  state.a + }} now", ["state"])
    assert caught.value.problem.column == 19  # the '+' of the template's text


DECISION = """definitionId: demo
definitionVersion: 1
steps:
  - id: a
    type: decision
    routes:
      - when: {when}
        to: b
    default: b
  - id: b
    type: complete
"""


def expression_violation(text: str) -> Violation:
    with pytest.raises(DefinitionError) as caught:
        compile_text(text, "yaml")
    [found] = [v for v in caught.value.violations if v.type == "expression"]
    return found


@pytest.mark.parametrize(
    ("when", "where"),
    [
        ("state.amount >", (7, 28)),
        ("'state.amount >'", (7, 29)),
        ('"state.amount > 10 &&"', (7, 34)),
        ("|\n          state.amount > 10\n            && state.ok ==", (9, 25)),
        (">\n          state.amount >", (7, None)),  # folded: the pointer's line only
    ],
    ids=["plain", "single-quoted", "double-quoted", "literal-block", "folded"],
)
def test_a_cel_problem_in_a_document_has_its_document_line_and_column(when, where):
    violation = expression_violation(DECISION.format(when=when))
    assert violation.pointer == "/steps/0/routes/0/when"
    assert violation.expression_column is not None
    assert (violation.line, violation.column) == where
    data = violation.as_dict()
    assert data["expressionColumn"] == violation.expression_column


@pytest.mark.parametrize(
    ("source", "message", "column"),
    [
        ("fooo(state.a)", "unknown function 'fooo' at column 1", 1),
        ("state.s.startswith('a')", "unknown function 'startswith' at column 9", 9),
    ],
)
def test_an_unknown_function_is_refused_at_compile_with_its_column(source, message, column):
    with pytest.raises(expressions.ExpressionCompileError) as caught:
        expressions.compile_expression(source, ["state"])
    assert (caught.value.problem.message, caught.value.problem.column) == (message, column)


def test_known_functions_and_macros_compile_and_evaluate():
    compiled = expressions.compile_expression(
        "has(state.a) && size(state.l) > 0 && state.s.startsWith('a') && state.l.exists(i, i > 1)"
        " && int(state.x) > 1 && string(state.x).matches('^[0-9]+$') && timestamp(state.t) > timestamp(state.u)",
        ["state"],
    )
    state = {
        "a": 1,
        "l": [1, 2],
        "s": "abc",
        "x": 7,
        "t": "2026-12-03T10:00:00Z",
        "u": "2026-12-02T10:00:00Z",
    }
    assert compiled.evaluate({"state": state}) is True
    assert compiled.evaluate({"state": {**state, "l": [1]}}) is False
