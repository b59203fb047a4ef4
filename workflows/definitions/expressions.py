"""The expression profile: CEL (cel-python) behind one module.

Everything that knows CEL lives here, so replacing the language means rebinding this module
and nothing else (the reference's ``ExpressionProfile``). Expressions are compiled once, when a
plan is compiled, and evaluated many times:

- **Compile limits**: at most :data:`MAX_EXPRESSION_BYTES` of UTF-8 text, an AST at most
  :data:`MAX_AST_DEPTH` deep (the evaluator recurses once per level), comprehension macros
  (``map``, ``filter``, ``all``, ``exists``, ``exists_one``) nested at most
  :data:`MAX_COMPREHENSION_NESTING` deep, free variables only from the names the field
  declares (``state``, ``payload`` ...), and calls only of functions this module knows
  (:data:`CALLABLE`; a misspelt one is refused at load, not when a run evaluates it).
- **Evaluation bounds**: every evaluation visits at most :data:`MAX_EVALUATION_STEPS` AST
  nodes, uses at most :data:`MAX_EVALUATION_CPU_MS` of its thread's CPU time (and
  :data:`MAX_EVALUATION_WALL_MS` of wall clock, a backstop), and produces at most
  :data:`MAX_EVALUATION_SIZE` characters, bytes or elements (concatenations, conversions, the
  result handed back). The clock is checked cooperatively, every few nodes and in every
  function call, so one evaluation can never hold a worker; every function left that does real
  work on a value is linear in its input (below). Going over any bound fails with
  ``EXPRESSION_FAILED`` and the fixed reason "evaluation budget exceeded (steps|time|size)".
- **Linear-time built-ins**: cel-python parses ``duration()`` with a backtracking regular
  expression (``"a" * 28 + "!"`` held a worker for ~30 s) and ``timestamp()`` with pendulum's
  many formats; both are replaced here by hand parsers over a bounded text. ``matches()`` uses
  RE2 (linear in the text) with a bounded pattern, a memory cap and a compile cache; timezone
  arguments of the ``get*`` accessors are bounded before the lookup.
- **Plain values out**: :meth:`CelComputation.evaluate` returns dict / list / str / int /
  float / bool / None. Timestamps come back as RFC 3339 strings in UTC (``...Z``), durations
  as a number of seconds, bytes as base64 text.

Errors never quote a value: compile problems are :class:`CompileProblem` (kind + a fixed
message, and the 1-based ``column``, the character of the expression where the problem is, when
the parser or the checker knows it: "expression does not parse as CEL: column 9: the
expression ends too early"), evaluation failures are :class:`~workflows.exceptions.ExpressionFailed` with a fixed
reason.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import datetime as dt
import functools
import math
import operator
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, cast

import celpy
import lark
import re2
from celpy import celtypes
from celpy.evaluation import CELEvalError, CELUnsupportedError, Evaluator

from workflows import jsonvalues
from workflows.exceptions import ExpressionFailed

MAX_EXPRESSION_BYTES = 4096
MAX_AST_DEPTH = 200
MAX_COMPREHENSION_NESTING = 2
MAX_EVALUATION_STEPS = 20_000
# CPU time of the evaluating thread (other threads of a worker do not count against it) and a
# wall-clock backstop; both checked every CLOCK_EVERY_STEPS nodes and in every function call.
MAX_EVALUATION_CPU_MS = 50
MAX_EVALUATION_WALL_MS = 1000
CLOCK_EVERY_STEPS = 32
# Characters of strings, bytes of byte strings, elements of lists and maps that one evaluation may
# produce (concatenations, conversions, the plain result): 4x the largest payload.
MAX_EVALUATION_SIZE = 1_048_576
# CPU time all evaluations of one segment may use together (see evaluation_allowance): a plan
# looping through expression steps would otherwise spend MAX_STEPS_PER_SEGMENT x 50 ms, past
# the lease, and be claimed again and again instead of failing.
MAX_SEGMENT_EVALUATION_CPU_MS = 5000
MAX_PARSED_TEXT = 128  # duration(), timestamp() and timezone texts
MAX_PATTERN_LENGTH = 1024  # matches() patterns
MAX_PATTERN_MEMORY = 1 << 20  # RE2's budget for one compiled pattern
MAX_VALUE_DEPTH = 128

COMPREHENSIONS = frozenset({"map", "filter", "all", "exists", "exists_one"})
# Identifiers CEL itself defines (type names usable in ``type(x) == int``).
BUILTIN_IDENTIFIERS = frozenset(
    {"int", "uint", "double", "string", "bool", "bytes", "list", "map", "null_type", "type", "dyn"}
)

_ENVIRONMENT = celpy.Environment()


@dataclass(frozen=True)
class CompileProblem:
    """Why an expression did not compile: ``kind`` is a stable type, ``message`` fixed text
    (the author's own expression at most, never a value), ``column`` the 1-based character of
    the expression text where the problem is, when known."""

    kind: str
    message: str
    column: int | None = None


class ExpressionCompileError(Exception):
    def __init__(self, problem: CompileProblem):
        super().__init__(problem.message)
        self.problem = problem


class _BudgetExceeded(Exception):
    """One evaluation went over a bound: ``kind`` is ``steps``, ``time`` or ``size``.

    Deliberately not a ValueError / TypeError: celpy turns those into CEL error values (which
    ``||`` and ``&&`` may swallow); this one must end the evaluation wherever it is raised."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class _Meter:
    """The budgets of one evaluation, shared by the evaluator, its macro sub-evaluators and the
    functions it calls (through :data:`_METER`)."""

    __slots__ = ("allowance", "cpu_deadline", "cpu_started", "measured", "size", "steps", "wall_deadline")

    def __init__(self) -> None:
        self.steps = MAX_EVALUATION_STEPS
        self.size = MAX_EVALUATION_SIZE
        self.cpu_started = time.thread_time()
        self.allowance = _ALLOWANCE.get()
        self.wall_deadline = time.monotonic() + MAX_EVALUATION_WALL_MS / 1000
        if self.allowance is not None:
            self.wall_deadline = min(self.wall_deadline, self.allowance[1])
        self.cpu_deadline = self.cpu_started
        self.inputs_converted()

    def inputs_converted(self) -> None:
        """The expression's own CPU budget starts now, after its inputs were converted; the
        conversion still counts against the wall-clock backstop and the segment's allowance
        (``close`` charges everything since the meter started)."""
        now = time.thread_time()
        cpu = MAX_EVALUATION_CPU_MS / 1000
        if self.allowance is not None:
            cpu = min(cpu, self.allowance[0] - (now - self.cpu_started))
        self.cpu_deadline = now + cpu
        # id -> (value, deep size) of the containers already measured: a macro whose body
        # returns the same large value each time measures it once (the value is kept alive so
        # its id cannot be reused within the evaluation)
        self.measured: dict[int, tuple[Any, int]] = {}

    def close(self) -> None:
        """Charge the CPU this evaluation used to the segment's allowance."""
        if self.allowance is not None:
            self.allowance[0] -= time.thread_time() - self.cpu_started

    def step(self) -> None:
        self.steps -= 1
        if self.steps < 0:
            raise _BudgetExceeded("steps")
        if self.steps % CLOCK_EVERY_STEPS == 0:
            self.clock()

    def clock(self) -> None:
        # thread_time costs a system call (~2 us): callers check it every few nodes, not each
        if time.thread_time() > self.cpu_deadline or time.monotonic() > self.wall_deadline:
            raise _BudgetExceeded("time")

    def charge(self, amount: int) -> None:
        self.size -= amount
        if self.size < 0:
            raise _BudgetExceeded("size")

    def charge_deep(self, value: Any) -> None:
        """Charge what :func:`from_cel` would charge for ``value``, as a macro produces it.

        ``xs.map(x, state)`` builds a list holding one large value many times by reference:
        charging each element as it is produced trips the size bound after a few elements,
        the same way on every run, long before the clock (which a loaded machine moves)."""
        self.charge(self._deep_size(value, 0))

    def _deep_size(self, value: Any, depth: int) -> int:
        if isinstance(value, str | bytes) or not isinstance(value, list | tuple | Mapping):
            return len(value) + 1 if isinstance(value, str | bytes) else 1
        known = self.measured.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        total = len(value) + 1
        if depth < MAX_VALUE_DEPTH:
            items = value.items() if isinstance(value, Mapping) else ((None, item) for item in value)
            for key, item in items:
                total += (1 if key is None else self._deep_size(key, depth + 1)) + self._deep_size(item, depth + 1)
                if total > self.size:
                    break  # over the budget already: the charge fails, no need to finish
        self.measured[id(value)] = (value, total)
        return total


_METER: contextvars.ContextVar[_Meter | None] = contextvars.ContextVar("cel_meter", default=None)
# the CPU seconds left to the evaluations of the current segment (a one-item list, shared)
# and the monotonic time by which they must be done: [cpu seconds left, wall deadline]
_ALLOWANCE: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("cel_allowance", default=None)
# The CEL values of the current segment's large inputs (``state``, ``payload``), each converted
# once: id -> (the value, kept alive so its id is not reused; its conversion). A 260 KB state
# cost ~170 ms to convert, and converting it for each of a decision's 250 routes, outside every
# bound, held a worker past its lease. The engine copies a state it changes (a new object, a new
# entry); a callback could change one in place, so calling one forgets them (``forget_inputs``).
_CONVERTED: contextvars.ContextVar[dict[int, tuple[Any, Any]] | None] = contextvars.ContextVar(
    "cel_converted", default=None
)
CONVERTED_INPUTS = ("state", "payload")
MAX_CONVERTED_KEPT = 4


@contextlib.contextmanager
def evaluation_allowance(cpu_seconds: float | None = None, wall_seconds: float | None = None) -> Iterator[None]:
    """Every evaluation inside shares ``cpu_seconds`` of CPU (default
    MAX_SEGMENT_EVALUATION_CPU_MS), converting its inputs included, and ends by ``wall_seconds``
    from now (default: no sooner than each evaluation's own backstop): once either is spent,
    each further evaluation fails at once with "evaluation budget exceeded (time)". The engine
    opens one per segment, so a segment cannot spend more than that on expressions whatever its
    plan loops through, and it converts each state it evaluates over once."""
    seconds = MAX_SEGMENT_EVALUATION_CPU_MS / 1000 if cpu_seconds is None else cpu_seconds
    wall = time.monotonic() + (float("inf") if wall_seconds is None else wall_seconds)
    token = _ALLOWANCE.set([seconds, wall])
    converted = _CONVERTED.set({})
    try:
        yield
    finally:
        _CONVERTED.reset(converted)
        _ALLOWANCE.reset(token)


def forget_inputs() -> None:
    """Drop the segment's converted inputs (a callback may have changed a state in place)."""
    cache = _CONVERTED.get()
    if cache:
        cache.clear()


def _input(name: str, value: Any) -> Any:
    """``value`` as CEL, converted once per segment for the large inputs (see _CONVERTED)."""
    cache = _CONVERTED.get()
    if cache is None or name not in CONVERTED_INPUTS or not isinstance(value, dict | list):
        return to_cel(value)
    known = cache.get(id(value))
    if known is not None and known[0] is value:
        return known[1]
    converted = to_cel(value)
    if len(cache) >= MAX_CONVERTED_KEPT:
        cache.pop(next(iter(cache)))
    cache[id(value)] = (value, converted)
    return converted


class _BoundedEvaluator(Evaluator):
    """celpy's tree interpreter with one :class:`_Meter` shared across macro sub-evaluators."""

    def __init__(self, ast: lark.Tree, activation: Any, meter: _Meter) -> None:
        super().__init__(ast, activation)
        self._meter = meter

    def _visit_tree(self, tree: lark.Tree) -> Any:
        # lark's ``visit`` and ``visit_children`` both come here: every node visited is counted
        # (counting ``visit`` alone missed the children, ~14 visits per counted step).
        self._meter.step()
        return super()._visit_tree(tree)

    def sub_evaluator(self, ast: lark.Tree) -> Evaluator:
        return _BoundedEvaluator(ast, activation=self.activation, meter=self._meter)

    def build_macro_eval(self, child: lark.Tree) -> Any:
        """``map``, ``filter`` and ``exists_one``: every value the body produces is charged to
        the size budget as it is produced (see :meth:`_Meter.charge_deep`)."""
        body = super().build_macro_eval(child)
        meter = self._meter

        def charged(value: Any) -> Any:
            result = body(value)
            meter.charge_deep(result)
            return result

        return charged


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


class CompileTimeExceeded(Exception):
    """A :func:`compile_time_limit` ran out: the caller stops compiling (value-free)."""


@dataclass
class CompileDeadline:
    at: float
    expired: bool = False


_COMPILE_DEADLINE: contextvars.ContextVar[CompileDeadline | None] = contextvars.ContextVar(
    "cel_compile_deadline", default=None
)


@contextlib.contextmanager
def compile_time_limit(seconds: float) -> Iterator[CompileDeadline]:
    """Expressions compiled inside raise :class:`CompileTimeExceeded` once ``seconds`` of wall
    clock have passed (and the yielded deadline says ``expired``: a compiler that turns the
    exception into its own error still lets the caller know). Parsing CEL is most of a
    document's compile time (a few ms each), so an interactive caller (the designer's live
    check) bounds a document with thousands of them."""
    deadline = CompileDeadline(time.monotonic() + seconds)
    token = _COMPILE_DEADLINE.set(deadline)
    try:
        yield deadline
    finally:
        _COMPILE_DEADLINE.reset(token)


def compile_ast(source: Any, variables: Iterable[str]) -> lark.Tree:
    """Parse and check one expression; raises :class:`ExpressionCompileError`."""
    deadline = _COMPILE_DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline.at:
        deadline.expired = True
        raise CompileTimeExceeded
    if not isinstance(source, str) or not source.strip():
        raise ExpressionCompileError(CompileProblem("type", "expression must be a non-empty string"))
    if len(source.encode("utf-8", "surrogatepass")) > MAX_EXPRESSION_BYTES:
        raise ExpressionCompileError(
            CompileProblem("maxLength", f"expression is longer than {MAX_EXPRESSION_BYTES} bytes")
        )
    try:
        tree = _ENVIRONMENT.compile(source)
    except Exception as error:  # noqa: BLE001 - celpy raises parser-specific errors; all mean "does not parse"
        raise ExpressionCompileError(_parse_problem(source, error)) from None
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
        message = f"expression uses a variable this field does not provide (allowed: {allowed})"
        column = _ident_column(source, tree, unknown[0])
        if column is not None and len(unknown[0]) <= MAX_QUOTED_TOKEN:
            message = f"{message}: '{unknown[0]}' at column {column}"
        raise ExpressionCompileError(CompileProblem("expression", message, column))
    _check_functions(source, tree)
    return tree


def _check_functions(source: str, tree: lark.Tree) -> None:
    """Refuse a call of a function CEL does not know here (``fooo(state.a)``,
    ``state.s.startswith('a')``) when the document is compiled, not when a run evaluates it."""
    for node in tree.iter_subtrees_topdown():
        if node.data not in ("ident_arg", "member_dot_arg"):
            continue
        token = next((c for c in node.children if isinstance(c, lark.Token)), None)
        if token is None or str(token) in CALLABLE:
            continue
        column = offset_of(source, token.line, token.column) if token.line and token.column else None
        name = f" '{token}'" if len(str(token)) <= MAX_QUOTED_TOKEN else ""
        at = f" at column {column}" if column is not None else ""
        raise ExpressionCompileError(CompileProblem("expression", f"unknown function{name}{at}", column))


MAX_QUOTED_TOKEN = 20  # characters of the author's token a parse problem repeats


def offset_of(source: str, line: int, column: int) -> int:
    """The 1-based character of ``source`` at a 1-based (line, column)."""
    rows = source.split("\n")
    return sum(len(row) + 1 for row in rows[: line - 1]) + column


def _parse_problem(source: str, error: Exception) -> CompileProblem:
    """Where the parser stopped (1-based character) and why, in words: the token quoted is
    the author's own expression text, never a value."""
    line, column = getattr(error, "line", None), getattr(error, "column", None)
    if not isinstance(line, int) or not isinstance(column, int):
        return CompileProblem("expression", "expression does not parse as CEL")
    cause = error.__cause__ or error.__context__
    token = getattr(cause, "token", None)
    if isinstance(cause, lark.exceptions.UnexpectedCharacters):
        if cause.char in "'\"":
            reason = "a quoted text is not closed"
        else:
            reason = f"unexpected character '{cause.char}'" if cause.char.isprintable() else "unexpected character"
    elif isinstance(cause, lark.exceptions.UnexpectedEOF) or (token is not None and not str(token)):
        reason = "the expression ends too early"
    elif token is not None and len(str(token)) <= MAX_QUOTED_TOKEN:
        reason = f"unexpected '{token}'"
    else:
        reason = "unexpected text"
    where = offset_of(source, line, column)
    return CompileProblem("expression", f"expression does not parse as CEL: column {where}: {reason}", where)


def _ident_column(source: str, tree: lark.Tree, name: str) -> int | None:
    """The 1-based character of the first use of identifier ``name`` in the expression."""
    for node in tree.iter_subtrees_topdown():
        if node.data == "ident" and _ident_name(node) == name:
            token = node.children[0]
            if isinstance(token, lark.Token) and token.line is not None and token.column is not None:
                return offset_of(source, token.line, token.column)
    return None


# --- named conditions in a decision's ``when`` ----------------------------------------------------

CONDITIONS = "conditions"  # the binding of a decision route's ``when``: condition id -> boolean
_CONDITION_NAME = re.compile(r"""^(['"])([A-Za-z0-9_.$:-]{1,255})\1$""")


def _single_chain(node: Any) -> Any:
    """The node at the end of a chain of one-child trees (``expr`` → … → ``primary``)."""
    while isinstance(node, lark.Tree) and len(node.children) == 1 and isinstance(node.children[0], lark.Tree):
        node = node.children[0]
    return node


def _is_conditions(node: Any) -> bool:
    end = _single_chain(node)
    return isinstance(end, lark.Tree) and end.data == "ident" and _ident_name(end) == CONDITIONS


def condition_names(ast: lark.Tree) -> tuple[str, ...]:
    """The named conditions an expression reads as ``conditions['id']``, so the compiler can
    check at load that each is registered. Any other use of ``conditions`` (a computed id,
    ``in``, a macro) is refused: its ids could not be checked."""
    uses = sum(1 for node in ast.iter_subtrees() if node.data == "ident" and _ident_name(node) == CONDITIONS)
    names: list[str] = []
    for node in ast.iter_subtrees():
        if node.data != "member_index" or len(node.children) != 2 or not _is_conditions(node.children[0]):
            continue
        literal = _single_chain(node.children[1])
        token = literal.children[0] if isinstance(literal, lark.Tree) and literal.data == "literal" else None
        found = _CONDITION_NAME.match(str(token)) if isinstance(token, lark.Token) else None
        if found is None:
            break
        names.append(found.group(2))
    if len(names) != uses:
        raise ExpressionCompileError(
            CompileProblem("expression", "conditions must be read as conditions['id'] with a literal condition id")
        )
    return tuple(dict.fromkeys(names))


# --- values in and out -----------------------------------------------------------------------


_INT64 = range(-(2**63), 2**63)


def _cel_int(value: int) -> Any:
    """A CEL int without ``IntType``'s per-call decorator (15 us each: converting a payload of
    50,000 small numbers took 0.8 s of CPU before any expression ran)."""
    if value in _INT64:
        return int.__new__(celtypes.IntType, value)
    return celtypes.IntType(value)  # out of range: celpy's own overflow error


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
    """A JSON-like Python value as celpy values (Decimal and datetime accepted).

    The common JSON types are built with their base type's constructor: celpy's own
    constructors do type dispatch in Python for every value, and a 256 KiB state is converted
    for every expression evaluated over it (5,000 small objects took 130 ms, now ~30 ms)."""
    if _depth > MAX_VALUE_DEPTH:
        raise ExpressionFailed("expression input is nested too deeply", code="EXPRESSION_FAILED")
    kind = type(value)
    if kind is str:
        return str.__new__(celtypes.StringType, value)
    if kind is dict:
        converted = celtypes.MapType()
        dict.update(converted, ((_cel_key(k), to_cel(v, _depth + 1)) for k, v in value.items()))
        return converted
    if kind is list:
        return celtypes.ListType([to_cel(v, _depth + 1) for v in value])
    if kind is bool:
        return int.__new__(celtypes.BoolType, value)
    if kind is int:
        return _cel_int(value)
    if kind is float:
        return float.__new__(celtypes.DoubleType, value)
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return _cel_int(value)
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


def _cel_key(key: Any) -> Any:
    return str.__new__(celtypes.StringType, key if type(key) is str else str(key))


def from_cel(value: Any, _depth: int = 0, _meter: _Meter | None = None) -> Any:
    """A celpy result as plain Python: dict / list / str / int / float / bool / None.

    With a meter, every element and every character produced is charged to its size budget: a
    result may hold the same large value many times over by reference (``xs.map(x, state)``), and
    the plain copy must not multiply it."""
    if _depth > MAX_VALUE_DEPTH:
        raise ExpressionFailed("expression result is nested too deeply")
    if _meter is not None:
        _meter.charge(len(value) + 1 if isinstance(value, str | bytes | list | tuple | Mapping) else 1)
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
        return {str(from_cel(k, _depth + 1, _meter)): from_cel(v, _depth + 1, _meter) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [from_cel(v, _depth + 1, _meter) for v in value]
    if isinstance(value, celtypes.TypeType | type) or hasattr(value, "_cel_type"):
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
    free: tuple[str, ...] = ()  # the variables the expression reads
    # a map literal's entries, (label, value tree): which one failed is said by its key
    entries: tuple[tuple[str, lark.Tree], ...] = field(default=(), repr=False)

    def evaluate(self, variables: Mapping[str, Any]) -> Any:
        if self.path:
            found = _read_path(variables, self.path)
            if found is not _MISS:
                return found
        for name in self.free:
            if name not in variables:  # the caller does not provide it: say so, not "no such key"
                raise self._located(ExpressionFailed(f"expression failed: unknown name '{name}'"), variables)
        try:
            return self._evaluate(variables)
        except ExpressionFailed as failed:
            if "budget exceeded" in failed.message:
                raise  # a bound: locating it would spend the budget again, once per entry
            raise self._located(failed, variables) from None

    def _located(self, failed: ExpressionFailed, variables: Mapping[str, Any]) -> ExpressionFailed:
        """``failed`` with ``where`` naming the first entry of a map literal that fails on its own
        (``.total``), so a long ``set`` says which key broke. Only on a failure, bounded like any
        evaluation."""
        for label, tree in self.entries:
            try:
                meter = _Meter()
                token = _METER.set(meter)
                try:
                    context = {name: _input(name, variables.get(name)) for name in self.variables if name in variables}
                    meter.inputs_converted()
                    from_cel(_BoundedEvaluator(tree, self.runner.new_activation(), meter).evaluate(context), 0, meter)
                finally:
                    _METER.reset(token)
                    meter.close()
            except Exception:  # noqa: BLE001 - any failure of the entry locates it
                failed.where = label
                break
        return failed

    def _evaluate(self, variables: Mapping[str, Any]) -> Any:
        # The meter starts before the inputs are converted: the conversion counts against the
        # evaluation's wall-clock backstop and the segment's allowance (a spent one fails before
        # converting anything). The expression's own CPU budget starts after it: the inputs'
        # size is the payload bounds' business, and a large legitimate state converted once
        # per segment must not eat the budget of the expression that happens to convert it.
        meter = _Meter()
        token = _METER.set(meter)
        try:
            meter.clock()
            context = {name: _input(name, variables.get(name)) for name in self.variables if name in variables}
            meter.inputs_converted()
            meter.clock()  # a spent segment allowance fails before the first node
            evaluator = _BoundedEvaluator(self.ast, self.runner.new_activation(), meter)
            return from_cel(evaluator.evaluate(context), 0, meter)
        except _BudgetExceeded as exceeded:
            raise ExpressionFailed(f"expression failed: evaluation budget exceeded ({exceeded.kind})") from None
        except CELEvalError as error:
            raise _failure(error) from None
        except CELUnsupportedError:
            raise ExpressionFailed("expression failed: unsupported operation") from None
        except RecursionError:
            raise ExpressionFailed("expression failed: nested too deeply") from None
        except MemoryError:
            raise ExpressionFailed("expression failed: evaluation budget exceeded (size)") from None
        finally:
            _METER.reset(token)
            meter.close()


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
        left, right = _plain_type(left), _plain_type(right)
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


# --- bounded built-ins ------------------------------------------------------------------------
#
# Every function a CEL expression can call goes through :func:`_metered`, which checks the clock
# of the running evaluation before the call. Functions that build a new value charge its size;
# the ones that parse or match text are replaced by linear-time versions over bounded input.
# A bad argument raises ValueError / TypeError, which celpy turns into a CEL error value: the
# evaluation then fails with "invalid value" / "no matching overload", never quoting the text.


def _meter() -> _Meter | None:
    return _METER.get()


def _measure(value: Any) -> int:
    return len(value) if isinstance(value, str | bytes | list | tuple | Mapping) else 0


def _metered(function: Any, *, charge: bool) -> Any:
    @functools.wraps(function)
    def call(*args: Any) -> Any:
        meter = _meter()
        if meter is not None:
            meter.clock()
        result = function(*args)
        if charge and meter is not None:
            meter.charge(_measure(result))
        return result

    if isinstance(function, type):
        # ``string`` is both a conversion and a type name (``type(x) == string``): comparisons
        # see the type through this mark (see :func:`_plain_type`).
        call._cel_type = function  # type: ignore[attr-defined]
    return call


def _plain_type(value: Any) -> Any:
    return getattr(value, "_cel_type", value) if callable(value) and not isinstance(value, type) else value


def _add(left: Any, right: Any) -> Any:
    """``_+_`` with the size of a concatenation charged *before* it is built."""
    if isinstance(left, str | bytes | list) and isinstance(right, str | bytes | list):
        meter = _meter()
        if meter is not None:
            meter.charge(len(left) + len(right))
    return operator.add(left, right)


_DURATION_UNITS: dict[str, float] = {
    # cel-python's units ("d" included, so documents that used it keep working)
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_DIGITS = frozenset("0123456789")
_UNIT_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyz\u00b5")


def parse_duration_text(text: str) -> dt.timedelta:
    """CEL's duration text (``"90s"``, ``"-1.5h"``, ``"2h45m"``) in one left-to-right pass.

    cel-python matches ``[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+`` with a backtracking engine:
    exponential on ``"a" * n + "!"``. Raises ValueError (never quoting the text)."""
    if len(text) > MAX_PARSED_TEXT:
        raise ValueError("duration text too long")
    n = len(text)
    i = 0
    sign = 1.0
    if i < n and text[i] in "+-":
        sign = -1.0 if text[i] == "-" else 1.0
        i += 1
    if i == n:
        raise ValueError("invalid duration")
    parts: list[float] = []
    while i < n:
        start = i
        while i < n and text[i] in _DIGITS:
            i += 1
        if i < n and text[i] == ".":
            i += 1
            while i < n and text[i] in _DIGITS:
                i += 1
        number = text[start:i]
        if not number.strip("."):
            raise ValueError("invalid duration")
        unit_start = i
        while i < n and text[i] in _UNIT_LETTERS:
            i += 1
        scale = _DURATION_UNITS.get(text[unit_start:i])
        if scale is None:
            raise ValueError("invalid duration")
        parts.append(float(number) * scale)
    seconds = sign * math.fsum(parts)
    if not celtypes.DurationType.MinSeconds <= seconds <= celtypes.DurationType.MaxSeconds:
        raise ValueError("duration out of range")
    return dt.timedelta(seconds=seconds)


def _duration(value: Any) -> Any:
    if isinstance(value, str):
        return celtypes.DurationType(parse_duration_text(value))
    return celtypes.DurationType(value)


def parse_timestamp_text(text: str) -> dt.datetime:
    """An RFC 3339 timestamp (``2024-01-01T00:00:00Z``, an offset, a fraction), parsed by the
    C ISO-8601 reader over a bounded text; a text without an offset is UTC. Raises ValueError."""
    if len(text) > MAX_PARSED_TEXT or not text.isascii():
        raise ValueError("invalid timestamp")
    normal = text.strip()
    if normal[-1:] in ("Z", "z"):
        normal = normal[:-1] + "+00:00"
    parsed = dt.datetime.fromisoformat(normal.replace("t", "T", 1))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _timestamp(value: Any) -> Any:
    if isinstance(value, str):
        return celtypes.TimestampType(parse_timestamp_text(value))
    return celtypes.TimestampType(value)


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_RE2_OPTIONS.max_mem = MAX_PATTERN_MEMORY


@functools.lru_cache(maxsize=128)
def _pattern(source: str) -> Any:
    return re2.compile(source, _RE2_OPTIONS)


def _matches(text: Any, pattern: Any) -> Any:
    """``matches()`` with RE2 (linear in the text, no backtracking), a bounded pattern and a
    cache, so a comprehension does not compile the same pattern once per element."""
    if not isinstance(text, str) or not isinstance(pattern, str):
        raise TypeError("matches takes strings")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ValueError("pattern too long")
    try:
        compiled = _pattern(str(pattern))
    except Exception:  # noqa: BLE001 - re2.error and friends: the pattern is refused either way
        raise ValueError("invalid pattern") from None
    return celtypes.BoolType(compiled.search(str(text)) is not None)


def _bounded_timezone(accessor: Any) -> Any:
    """A timestamp accessor (``getHours(tz)``) whose timezone text is bounded before pendulum
    looks it up."""

    def call(value: Any, *args: Any) -> Any:
        for tz in args:
            if not isinstance(tz, str) or len(tz) > MAX_PARSED_TEXT:
                raise ValueError("invalid timezone")
        return accessor(value, *args)

    return call


_CONSTRUCTING = frozenset({"_+_", "string", "bytes", "list", "map"})
_OVERRIDES: dict[str, Any] = {
    "_+_": _add,
    "duration": _duration,
    "timestamp": _timestamp,
    "matches": _matches,
    **{
        name: _bounded_timezone(function)
        for name, function in celpy.evaluation.base_functions.items()
        if name.startswith("get")
    },
}


def _function_table() -> dict[str, Any]:
    table = {**celpy.evaluation.base_functions, **NUMERIC_COMPARISONS, **_OVERRIDES}
    # ``type`` and the type names stay classes (``type(x) == int`` compares them); every callable
    # function is metered.
    return {
        name: function
        if isinstance(function, type) and name not in _CONSTRUCTING and name not in _OVERRIDES
        else _metered(function, charge=name in _CONSTRUCTING)
        for name, function in table.items()
    }


FUNCTIONS: dict[str, Any] = _function_table()
# What an expression may call: the functions above, the macros and the type conversion ``dyn``.
CALLABLE = frozenset({name for name in FUNCTIONS if name[:1].isalpha()} | COMPREHENSIONS | {"has", "dyn"})


def compile_expression(source: Any, variables: Iterable[str], *, merge: bool = False) -> CelComputation:
    """Compile once; raises :class:`ExpressionCompileError` with a value-free problem."""
    names = tuple(sorted(set(variables)))
    ast = compile_ast(source, names)
    runner = celpy.InterpretedRunner(_ENVIRONMENT, ast, FUNCTIONS)
    path: tuple[str, ...] = ()
    if isinstance(source, str) and _BARE_PATH.fullmatch(source.strip()):
        parts = tuple(source.strip().split("."))
        if parts[0] in names and not _RESERVED.intersection(parts):
            path = parts
    free = tuple(sorted(analyse(ast)[2] & set(names)))
    return CelComputation(
        source=source,
        variables=names,
        ast=ast,
        runner=runner,
        merge=merge,
        path=path,
        free=free,
        entries=_map_entries(ast),
    )


_ENTRY_KEY = re.compile(r"""^(['"])([A-Za-z0-9_$-]{1,64})\1$""")


def _map_entries(ast: lark.Tree) -> tuple[tuple[str, lark.Tree], ...]:
    """``(label, value tree)`` of each entry when the whole expression is a map literal (a
    ``set``): ``.total`` for a plain literal key, else ``[2]`` (the entry's 0-based index)."""
    node: Any = ast
    while isinstance(node, lark.Tree) and node.data != "map_lit" and len(node.children) == 1:
        node = node.children[0]
    if not (isinstance(node, lark.Tree) and node.data == "map_lit" and node.children):
        return ()
    inits = node.children[0]
    if not isinstance(inits, lark.Tree) or inits.data != "mapinits":
        return ()
    pairs = [c for c in inits.children if isinstance(c, lark.Tree)]
    found: list[tuple[str, lark.Tree]] = []
    for index in range(0, len(pairs) - 1, 2):
        key, value = _single_chain(pairs[index]), pairs[index + 1]
        token = key.children[0] if isinstance(key, lark.Tree) and key.data == "literal" and key.children else None
        plain = _ENTRY_KEY.match(str(token)) if isinstance(token, lark.Token) else None
        found.append((f".{plain.group(2)}" if plain else f"[{index // 2}]", value))
    return tuple(found)


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
        placeholder = 0
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            placeholder += 1
            try:
                value = part.evaluate(variables)
            except ExpressionFailed as failed:
                failed.where = f" placeholder {placeholder}"
                raise
            if value is None:
                continue
            if isinstance(value, dict | list):
                out.append(jsonvalues.canonical(value))
            elif isinstance(value, bool):
                out.append("true" if value else "false")
            else:
                out.append(str(value))
        return "".join(out)


def placeholders(source: str) -> Iterable[tuple[int, int, str]]:
    """``(start, end, inner text)`` of each ``{{ ... }}`` in ``source``, left to right.

    A scan with ``str.find`` (linear): the lazy ``\\{\\{(.*?)\\}\\}`` it replaces rescanned the
    rest of the text from every unclosed ``{{``, quadratic in the text."""
    position = 0
    while True:
        start = source.find("{{", position)
        if start < 0:
            return
        end = source.find("}}", start + 2)
        if end < 0:
            return
        yield start, end + 2, source[start + 2 : end]
        position = end + 2


def compile_template(source: str, variables: Iterable[str]) -> Template:
    names = tuple(sorted(set(variables)))
    parts: list[str | CelComputation] = []
    position = 0
    for start, end, inner in placeholders(source):
        if start > position:
            parts.append(source[position:start])
        try:
            parts.append(compile_expression(inner.strip(), names))
        except ExpressionCompileError as error:
            column = error.problem.column
            if column is None:
                raise
            # the column in the template's text: past the ``{{`` and the blanks before the expression
            shift = start + 2 + len(inner) - len(inner.lstrip())
            raise ExpressionCompileError(replace(error.problem, column=column + shift)) from None
        position = end
    if position < len(source):
        parts.append(source[position:])
    return Template(source=source, parts=tuple(parts))
