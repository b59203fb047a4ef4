"""The expression profile: CEL (cel-python) behind one module.

Everything that knows CEL lives here, so replacing the language means rebinding this module
and nothing else (the reference's ``ExpressionProfile``). Expressions are compiled once, when a
plan is compiled, and evaluated many times:

- **Compile limits**: at most :data:`MAX_EXPRESSION_BYTES` of UTF-8 text, an AST at most
  :data:`MAX_AST_DEPTH` deep (the evaluator recurses once per level), comprehension macros
  (``map``, ``filter``, ``all``, ``exists``, ``exists_one``) nested at most
  :data:`MAX_COMPREHENSION_NESTING` deep, and free variables only from the names the field
  declares (``state``, ``payload`` ...).
- **Evaluation bound**: every evaluation visits at most :data:`MAX_EVALUATION_STEPS` AST
  nodes, so a comprehension over a large list fails with ``EXPRESSION_FAILED`` instead of
  holding a worker.
- **Plain values out**: :meth:`CelComputation.evaluate` returns dict / list / str / int /
  float / bool / None. Timestamps come back as RFC 3339 strings in UTC (``...Z``), durations
  as a number of seconds, bytes as base64 text.

Errors never quote a value: compile problems are :class:`CompileProblem` (kind + a fixed
message), evaluation failures are :class:`~workflows.exceptions.ExpressionFailed` with a fixed
reason.
"""

from __future__ import annotations

import base64
import datetime as dt
import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, cast

import celpy
import lark
from celpy import celtypes
from celpy.evaluation import CELEvalError, CELUnsupportedError, Evaluator

from workflows import jsonvalues
from workflows.exceptions import ExpressionFailed

MAX_EXPRESSION_BYTES = 4096
MAX_AST_DEPTH = 200
MAX_COMPREHENSION_NESTING = 2
MAX_EVALUATION_STEPS = 20_000
MAX_VALUE_DEPTH = 128

COMPREHENSIONS = frozenset({"map", "filter", "all", "exists", "exists_one"})
# Identifiers CEL itself defines (type names usable in ``type(x) == int``).
BUILTIN_IDENTIFIERS = frozenset(
    {"int", "uint", "double", "string", "bool", "bytes", "list", "map", "null_type", "type", "dyn"}
)

_ENVIRONMENT = celpy.Environment()
_TEMPLATE_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)


@dataclass(frozen=True)
class CompileProblem:
    """Why an expression did not compile: ``kind`` is a stable type, ``message`` fixed text."""

    kind: str
    message: str


class ExpressionCompileError(Exception):
    def __init__(self, problem: CompileProblem):
        super().__init__(problem.message)
        self.problem = problem


class _BudgetExceeded(Exception):
    pass


class _BoundedEvaluator(Evaluator):
    """celpy's tree interpreter with a shared step budget across macro sub-evaluators."""

    def __init__(self, ast: lark.Tree, activation: Any, budget: list[int]) -> None:
        super().__init__(ast, activation)
        self._budget = budget

    def _visit_tree(self, tree: lark.Tree) -> Any:
        # lark's ``visit`` and ``visit_children`` both come here: every node visited is counted
        # (counting ``visit`` alone missed the children, ~14 visits per counted step).
        self._budget[0] -= 1
        if self._budget[0] < 0:
            raise _BudgetExceeded
        return super()._visit_tree(tree)

    def sub_evaluator(self, ast: lark.Tree) -> Evaluator:
        return _BoundedEvaluator(ast, activation=self.activation, budget=self._budget)


# --- compile ---------------------------------------------------------------------------------


def _walk(tree: lark.Tree) -> Iterable[tuple[lark.Tree, int, int]]:
    """Every subtree with its depth and comprehension nesting, iteratively (no recursion)."""
    stack: list[tuple[lark.Tree, int, int]] = [(tree, 1, 0)]
    while stack:
        node, depth, nesting = stack.pop()
        if node.data == "member_dot_arg" and _macro_name(node) in COMPREHENSIONS:
            nesting += 1
        yield node, depth, nesting
        for child in node.children:
            if isinstance(child, lark.Tree):
                stack.append((child, depth + 1, nesting))


def _macro_name(node: lark.Tree) -> str | None:
    for child in node.children:
        if isinstance(child, lark.Token):
            return str(child)
    return None


def _ident_name(node: lark.Tree) -> str | None:
    if node.children and isinstance(node.children[0], lark.Token):
        return str(node.children[0])
    return None


def _first_ident(tree: lark.Tree) -> str | None:
    """The identifier of a macro's bound-variable argument (``i`` in ``xs.map(i, ...)``)."""
    for sub in tree.iter_subtrees_topdown():
        if sub.data == "ident":
            return _ident_name(sub)
    return None


def analyse(tree: lark.Tree) -> tuple[int, int, set[str]]:
    """(AST depth, comprehension nesting, free identifiers) of a parsed expression."""
    max_depth = 0
    max_nesting = 0
    idents: set[str] = set()
    bound: set[str] = set()
    for node, depth, nesting in _walk(tree):
        max_depth = max(max_depth, depth)
        max_nesting = max(max_nesting, nesting)
        if node.data == "ident":
            name = _ident_name(node)
            if name:
                idents.add(name)
        elif node.data == "member_dot_arg" and _macro_name(node) in COMPREHENSIONS:
            exprlist = next((c for c in node.children if isinstance(c, lark.Tree) and c.data == "exprlist"), None)
            if exprlist is not None and exprlist.children and isinstance(exprlist.children[0], lark.Tree):
                name = _first_ident(exprlist.children[0])
                if name:
                    bound.add(name)
    return max_depth, max_nesting, idents - bound - BUILTIN_IDENTIFIERS


def compile_ast(source: Any, variables: Iterable[str]) -> lark.Tree:
    """Parse and check one expression; raises :class:`ExpressionCompileError`."""
    if not isinstance(source, str) or not source.strip():
        raise ExpressionCompileError(CompileProblem("type", "expression must be a non-empty string"))
    if len(source.encode("utf-8", "surrogatepass")) > MAX_EXPRESSION_BYTES:
        raise ExpressionCompileError(
            CompileProblem("maxLength", f"expression is longer than {MAX_EXPRESSION_BYTES} bytes")
        )
    try:
        tree = _ENVIRONMENT.compile(source)
    except Exception:  # noqa: BLE001 - celpy raises parser-specific errors; all mean "does not parse"
        raise ExpressionCompileError(CompileProblem("expression", "expression does not parse as CEL")) from None
    depth, nesting, free = analyse(tree)
    if depth > MAX_AST_DEPTH:
        raise ExpressionCompileError(CompileProblem("expression", "expression is nested too deeply"))
    if nesting > MAX_COMPREHENSION_NESTING:
        raise ExpressionCompileError(
            CompileProblem("expression", f"comprehensions are nested deeper than {MAX_COMPREHENSION_NESTING}")
        )
    unknown = sorted(free - set(variables))
    if unknown:
        allowed = ", ".join(sorted(variables)) or "none"
        raise ExpressionCompileError(
            CompileProblem("expression", f"expression uses a variable this field does not provide (allowed: {allowed})")
        )
    return tree


# --- values in and out -----------------------------------------------------------------------


class ExactDouble(celtypes.DoubleType):
    """A CEL double read from a JSON decimal that remembers the decimal it was read from.

    CEL computes with doubles; an expression that only moves a value (``{'amount':
    payload.amount}``, a condition's branch) hands back this very object, and
    :func:`from_cel` answers the exact Decimal again, so ``1000.10`` is not turned into
    ``1000.1`` on its way into the state. Arithmetic makes a plain double (a new value)."""

    exact: Decimal

    def __new__(cls, exact: Decimal) -> ExactDouble:
        made = cast(ExactDouble, super().__new__(cls, float(exact)))
        made.exact = exact
        return made


def to_cel(value: Any, _depth: int = 0) -> Any:
    """A JSON-like Python value as celpy values (Decimal and datetime accepted)."""
    if _depth > MAX_VALUE_DEPTH:
        raise ExpressionFailed("expression input is nested too deeply", code="EXPRESSION_FAILED")
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, Decimal):
        # a JSON number with a fraction or an exponent (1000.10, 2.0, 1e3) is a CEL double, as
        # it was when JSON was read into floats (workflows.jsonvalues: a Decimal is a decimal)
        return ExactDouble(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return celtypes.TimestampType(aware)
    if isinstance(value, dt.timedelta):
        return celtypes.DurationType(value)
    if isinstance(value, bytes):
        return celtypes.BytesType(value)
    if isinstance(value, Mapping):
        return celtypes.MapType({celtypes.StringType(str(k)): to_cel(v, _depth + 1) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return celtypes.ListType([to_cel(v, _depth + 1) for v in value])
    raise ExpressionFailed("expression input is not a JSON value", code="EXPRESSION_FAILED")


def from_cel(value: Any, _depth: int = 0) -> Any:
    """A celpy result as plain Python: dict / list / str / int / float / bool / None."""
    if _depth > MAX_VALUE_DEPTH:
        raise ExpressionFailed("expression result is nested too deeply")
    if value is None or isinstance(value, celtypes.NullType):
        return None
    if isinstance(value, CELEvalError):
        raise _failure(value)
    if isinstance(value, bool | celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.TimestampType):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, celtypes.DurationType):
        seconds = value.total_seconds()
        return int(seconds) if seconds == int(seconds) else seconds
    if isinstance(value, celtypes.StringType | str):
        return str(value)
    if isinstance(value, celtypes.BytesType | bytes):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, int):
        return int(value)
    if isinstance(value, ExactDouble):
        return value.exact  # moved, not computed: the decimal as it was read
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {str(from_cel(k, _depth + 1)): from_cel(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [from_cel(v, _depth + 1) for v in value]
    if isinstance(value, celtypes.TypeType | type):
        return getattr(value, "__name__", "type")
    raise ExpressionFailed("expression result is not a JSON value")


_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    (KeyError, "no such key or field"),
    (ZeroDivisionError, "division by zero"),
    (TypeError, "no matching overload (operand types differ)"),
    (OverflowError, "numeric overflow"),
    (ValueError, "invalid value"),
    (IndexError, "index out of range"),
)


def _failure(error: CELEvalError) -> ExpressionFailed:
    cause = error.args[1] if len(error.args) > 1 else None
    for kind, reason in _REASONS:
        if isinstance(cause, type) and issubclass(cause, kind):
            return ExpressionFailed(f"expression failed: {reason}")
    return ExpressionFailed("expression failed")


# --- computations ----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class CelComputation:
    """A compiled CEL expression: the plan's :class:`~workflows.definitions.plan.Computation`.

    ``merge`` is true for ``set:`` expressions, whose map result is merged key by key into the
    state (see :func:`workflows.definitions.plan.apply_update`).
    """

    source: str
    variables: tuple[str, ...]
    ast: lark.Tree = field(repr=False)
    runner: Any = field(repr=False)
    merge: bool = False
    kind: str = "cel"
    path: tuple[str, ...] = ()  # a bare ``name.field.field`` expression: read without the interpreter

    def evaluate(self, variables: Mapping[str, Any]) -> Any:
        if self.path:
            found = _read_path(variables, self.path)
            if found is not _MISS:
                return found
        context = {name: to_cel(variables.get(name)) for name in self.variables if name in variables}
        evaluator = _BoundedEvaluator(self.ast, self.runner.new_activation(), [MAX_EVALUATION_STEPS])
        try:
            result = evaluator.evaluate(context)
        except _BudgetExceeded:
            raise ExpressionFailed("expression failed: evaluation budget exceeded") from None
        except CELEvalError as error:
            raise _failure(error) from None
        except CELUnsupportedError:
            raise ExpressionFailed("expression failed: unsupported operation") from None
        except RecursionError:
            raise ExpressionFailed("expression failed: nested too deeply") from None
        return from_cel(result)


def _numeric(value: Any) -> int | float | None:
    """The plain number behind a CEL int, uint or double (never a bool)."""
    if isinstance(value, celtypes.BoolType):
        return None
    if isinstance(value, celtypes.IntType | celtypes.UintType):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    return None


def _heterogeneous(name: str, operation: Any) -> Any:
    """CEL's cross-type numeric comparison (``5000 > 1000.0``, ``1 == 1.0``), which the CEL
    specification allows and cel-python does not implement: JSON has one number type, so a
    document author cannot know whether a payload field arrives as an int or a double.
    Python compares an int and a float exactly, so no precision is lost."""
    fallback = celpy.evaluation.base_functions[name]

    def compare(left: Any, right: Any) -> Any:
        a, b = _numeric(left), _numeric(right)
        if a is not None and b is not None and type(a) is not type(b):
            return celtypes.BoolType(operation(a, b))
        return fallback(left, right)

    return compare


NUMERIC_COMPARISONS: dict[str, Any] = {
    name: _heterogeneous(name, operation)
    for name, operation in (
        ("_<_", operator.lt),
        ("_<=_", operator.le),
        ("_>_", operator.gt),
        ("_>=_", operator.ge),
        ("_==_", operator.eq),
        ("_!=_", operator.ne),
    )
}


def compile_expression(source: Any, variables: Iterable[str], *, merge: bool = False) -> CelComputation:
    """Compile once; raises :class:`ExpressionCompileError` with a value-free problem."""
    names = tuple(sorted(set(variables)))
    ast = compile_ast(source, names)
    runner = celpy.InterpretedRunner(_ENVIRONMENT, ast, NUMERIC_COMPARISONS)
    path: tuple[str, ...] = ()
    if isinstance(source, str) and _BARE_PATH.fullmatch(source.strip()):
        parts = tuple(source.strip().split("."))
        if parts[0] in names and not _RESERVED.intersection(parts):
            path = parts
    return CelComputation(source=source, variables=names, ast=ast, runner=runner, merge=merge, path=path)


# A bare member path (``state.customer.name``) is the commonest placeholder of a title or an
# assignee; it is read straight from the documents when every hop is a map holding the key and
# the value is one CEL hands back unchanged (a string, a 64-bit integer, a double or null).
# Anything else (a missing key, a list, a map, a bool) goes through the interpreter, so its
# result and its failure are CEL's own.
_BARE_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_RESERVED = frozenset(
    {
        *("true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function"),
        *("if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while"),
    }
)
_MISS = object()


def _read_path(variables: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = variables
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return _MISS
        value = value[key]
    if value is None or isinstance(value, str | float):
        return value
    if isinstance(value, Decimal) and value.is_finite():
        return value  # a bare read keeps a decimal exact (the interpreter would make it a double)
    if isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63:
        return value
    return _MISS


@dataclass(frozen=True, eq=False)
class Template:
    """Text with ``{{ expr }}`` placeholders, each a CEL expression compiled once.

    ``evaluate`` renders it: ``None`` renders as empty text, maps and lists as compact JSON,
    everything else with ``str``.
    """

    source: str
    parts: tuple[str | CelComputation, ...]
    merge: bool = False
    kind: str = "template"

    def evaluate(self, variables: Mapping[str, Any]) -> str:
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            value = part.evaluate(variables)
            if value is None:
                continue
            if isinstance(value, dict | list):
                out.append(jsonvalues.canonical(value))
            elif isinstance(value, bool):
                out.append("true" if value else "false")
            else:
                out.append(str(value))
        return "".join(out)


def compile_template(source: str, variables: Iterable[str]) -> Template:
    names = tuple(sorted(set(variables)))
    parts: list[str | CelComputation] = []
    position = 0
    for match in _TEMPLATE_PLACEHOLDER.finditer(source):
        if match.start() > position:
            parts.append(source[position : match.start()])
        parts.append(compile_expression(match.group(1).strip(), names))
        position = match.end()
    if position < len(source):
        parts.append(source[position:])
    return Template(source=source, parts=tuple(parts))
