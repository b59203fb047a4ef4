"""What every step type is made of: the :class:`StepType` record and the pieces step types share.

A step type lives in one module of this package (its :class:`Step` subclass, its document
reader, its exits, its compile function, its designer fields and how the graph draws it) and
is listed once in :data:`workflows.definitions.steps.REGISTRY`. Validation, the compiler, the
graph drawing and the designer iterate that registry, so they cannot disagree on the types.

Also here, because the step modules and :mod:`..plan` both need them without importing each
other: the :class:`Computation` protocol, :func:`apply_update`, :class:`Delay`, the base
:class:`Step`, the variables each kind of field provides, and the reader and compile helpers
several step types share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from django.utils.functional import lazy

from workflows.definitions import catalogs
from workflows.definitions.names import echo
from workflows.definitions.reading import Checker, StepReader

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

    from workflows.definitions.compiler import Build
    from workflows.definitions.plan import Contract


class Computation(Protocol):
    """A value computed from variables: CEL (``kind == "cel"``) or a named callback.

    The implementations (``expressions.CelComputation``, ``expressions.Template`` with
    ``kind == "template"``, ``catalogs.CallbackComputation``) also carry ``merge``: true for a
    CEL ``set:`` whose map result is merged key by key into the state, false for a callback
    reducer/mutator that returns the whole new state. Use :func:`apply_update` for state
    updates. CEL results are plain JSON-like Python values (timestamps as RFC 3339 text,
    durations as seconds); a failed evaluation raises ``exceptions.ExpressionFailed``.
    """

    kind: str  # "cel" | "callback" | "template"
    source: str  # the expression text or the callback name (for diagnostics, never values)

    def evaluate(self, variables: Mapping[str, Any]) -> Any: ...


def apply_update(computation: Computation | None, state: Any, variables: Mapping[str, Any]) -> Any:
    """The state after a ``set`` / reducer / mutator: a CEL map is merged key by key into the
    state (a shallow merge; a key set to null stays null), a callback's result replaces it.
    ``variables`` should include ``state``; ``None`` leaves the state unchanged."""
    if computation is None:
        return state
    result = computation.evaluate(variables)
    if getattr(computation, "merge", False):
        if not isinstance(result, Mapping):
            from workflows.exceptions import ExpressionFailed

            raise ExpressionFailed("a set expression must give a map")
        merged = dict(state) if isinstance(state, Mapping) else {}
        merged.update(result)
        return merged
    return result


@dataclass(frozen=True)
class Delay:
    """``after`` (ISO-8601 duration, seconds) or ``at`` (a computation giving an instant).

    ``at`` gives RFC 3339 text (CEL ``timestamp(...)`` comes back as ``...Z`` text), an aware
    ``datetime`` (a timer-resolver callback may return one) or a number of seconds from now.
    """

    seconds: float | None = None
    at: Computation | None = None


@dataclass(frozen=True)
class Step:
    id: str
    type: str
    next: str | None = None


# --- the variables each kind of field provides to CEL and to callbacks ------------------------

V_PAYLOAD = ("payload",)
V_STATE = ("state",)
V_WHEN = ("state", "conditions")  # a decision route's ``when``: the state and the named conditions
V_TRIGGER = ("record", "previous", "changed", "event")
V_TRIGGER_PAYLOAD = ("record", "previous", "changed", "event")
V_SIGNAL = ("state", "payload")
V_DECISION = ("state", "payload", "decision")
V_RESULT = ("state", "result")
V_CALL_RESULT = ("state", "result", "status")
V_JOIN = ("state", "results")
V_CALLABLE = ("input", "state")


# --- exits --------------------------------------------------------------------------------------


class Exit(NamedTuple):
    """A place where a step names another step.

    ``pointer`` is the suffix under the step (``/timeout/next``); ``kind`` names the exit
    (``next``, ``route``, ``default``, ``decision``, ``due``, ``timeout``, ``branch``, ``join``,
    ``failure``, ``compensation``); ``label`` is what the graph writes on the edge. ``flow`` is
    false for a reference a run does not move along (a fork's join, a service's compensation):
    validation follows it for reachability, the graph does not draw it.
    """

    pointer: str
    target: str
    kind: str
    label: str = ""
    flow: bool = True


def target(value: Any) -> str | None:
    """A step id, or None (absent, empty, or not text in an unchecked document)."""
    return value if isinstance(value, str) and value else None


def entries(value: Any) -> list[tuple[int, Mapping[str, Any]]]:
    """(index, item) of the mappings in a list field (routes, decisions) of a step."""
    return [(i, item) for i, item in enumerate(value) if isinstance(item, Mapping)] if isinstance(value, list) else []


def next_exits(step: Mapping[str, Any]) -> list[Exit]:
    """The ``next`` exit, the only one of most step types."""
    found = target(step.get("next"))
    return [Exit("/next", found, "next")] if found else []


def failure_exits(step: Mapping[str, Any]) -> list[Exit]:
    """``next`` and ``onFailure`` (a join's, a call's)."""
    found = next_exits(step)
    on_failure = target(step.get("onFailure"))
    if on_failure:
        found.append(Exit("/onFailure", on_failure, "failure", "on failure"))
    return found


def no_exits(step: Mapping[str, Any]) -> list[Exit]:
    return []


# --- designer fields ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FormField:
    """One field of a step in the designer's step form: ``key`` is its path in the step (``due/after``)."""

    key: str
    label: str
    kind: str = "text"  # text | cel | template | duration | step | steps | choice | int | bool | longtemplate
    help: str = ""
    variables: str = "state"  # for cel/template: designer.services.CEL_VARIABLES key
    choices: tuple[str, ...] = ()
    required: bool = False

    @property
    def name(self) -> str:
        return "f_" + self.key.replace("/", "__")


# required, but may be left empty when the step is connected on an exit (it continues there)
NEXT_FIELD = FormField(
    "next", "Next step", "step", "The step that follows; empty: where the exit it is connected on led."
)


# --- the record -----------------------------------------------------------------------------------

StepCompiler = Callable[["Build", Mapping[str, Any], str, "Contract | None"], Step]


def no_schemas(step: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any] | None]]:
    return []


@dataclass(frozen=True)
class StepType:
    """Everything the rest of the application knows about one step type."""

    name: str  # the document's ``type``
    step_class: type[Step]
    read: StepReader  # normalises the type's own fields (``id`` and ``type`` are read for it)
    required: tuple[str, ...]  # document fields besides id and type
    optional: tuple[str, ...]
    exits: Callable[[Mapping[str, Any]], list[Exit]]  # of a normalised step (or a raw one)
    compile: StepCompiler
    # translated at use (gettext_lazy): the pages show them in the reader's language
    label: StrOrPromise  # the type in words (the graph's node text, the designer's palette)
    summary: StrOrPromise  # what it does, for the designer's palette
    shape: str  # the graph's outline (see workflows.presentation.graph)
    form_fields: tuple[FormField, ...]  # the designer's step form
    aliases: Mapping[str, str] = field(default_factory=dict)  # the reference's other spellings
    # the designer's repeated rows (field key, the row's fields), for routes and decisions
    form_rows: tuple[str, tuple[FormField, ...]] | None = None
    # (pointer suffix, schema reference) of the catalog names the step refers to, resolved with
    # the document's other names before anything else is compiled
    schemas: Callable[[Mapping[str, Any]], list[tuple[str, Mapping[str, Any] | None]]] = no_schemas
    terminal: bool = False  # the run ends here
    # entering it runs an effect once (a call out, a mail, a script, a child run): the Migrate
    # dialog's preview warns that a run moved onto it does that again
    effect: bool = False

    @property
    def palette(self) -> StrOrPromise:
        """The designer's choice text: ``Signal wait — wait for a signal`` (lazy: in the reader's language)."""
        return _palette(self.label, self.summary)


def _palette_text(label: StrOrPromise, summary: StrOrPromise) -> str:
    text = str(label)
    return f"{text[:1].upper()}{text[1:]} — {summary}"


_palette = lazy(_palette_text, str)


# --- helpers several step types share -------------------------------------------------------------


def read_delay(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    """``after`` / ``at`` / ``fireAt`` (exactly one) -> ``{"after": seconds}`` or ``{"at": ref}``."""
    chosen = c.exclusive(obj, at, "after", "at", "fireAt", required=True)
    if chosen == "after":
        return {"after": c.duration(obj["after"], f"{at}/after")}
    if chosen == "at":
        return {"at": c.expression(obj["at"], f"{at}/at")}
    if chosen == "fireAt":
        return {"at": c.callback(obj["fireAt"], f"{at}/fireAt", "timer_resolver")}
    return {}


def read_mutation(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any] | None:
    """``set`` (CEL, merged) or its ``mutator`` callback."""
    return c.value_or_callback(obj, at, cel="set", callback="mutator", category="state_mutator", merge=True)


DELAYED_FIELDS = ("after", "at", "fireAt", "set", "mutator")  # a delayed exit: timeout, due


def read_delayed_exit(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
    """A delay with a state mutation and the step it leads to (a timeout, a due date)."""
    return {"delay": read_delay(obj, at, c), "set": read_mutation(obj, at, c), "next": c.ref(obj, at, "next")}


def callable_reader(key: str, category: str) -> StepReader:
    """The reader of a step that calls a registered callable (``agent``, ``script``)."""

    def read(obj: dict[str, Any], at: str, c: Checker) -> dict[str, Any]:
        return {
            key: c.callback(obj.get(key), f"{at}/{key}", category),
            "input": c.expression(obj.get("input"), f"{at}/input"),
            "set": c.value_or_callback(obj, at, cel="set", callback=None, category=None, merge=True),
            "next": c.ref(obj, at, "next"),
        }

    return read


def callable_fields(key: str, what: str) -> tuple[FormField, ...]:
    """The designer fields of a step that calls a registered callable (``agent``, ``script``)."""
    return (
        FormField(key, what.capitalize(), help=f"A registered {what}.", required=True),
        FormField("input", "Input (CEL)", "cel", f"The {what}'s input, from state.", "state"),
        FormField("set", "Set from result (CEL)", "cel", "A map merged into the state.", "result"),
        NEXT_FIELD,
    )


def source_field(ref: Mapping[str, Any] | None, cel: str, callback: str) -> str:
    """The document field a computation came from (for the pointer of its violation)."""
    return callback if ref and "callback" in ref else cel


def check_target(build: Build, target_name: str, at: str) -> None:
    """A service handler name (not an https:// webhook) must be registered."""
    if (
        target_name
        and not target_name.startswith("https://")
        and catalogs.callbacks.get(target_name, "service") is None
    ):
        build.add(f"{at}/target", "unknownCallback", f"no service handler is registered as{echo(target_name)}")
