"""Catalogs: the names a definition document may use.

Three separate namespaces (a contract name given as a schema, or a schema name given as a
contract, is unknown):

- ``types``: name -> JSON Schema (the reference's ``@WorkflowType`` classes)::

      types.register("purchase.Request", {"type": "object", "required": ["total"], ...})

- ``contracts``: name -> signal names (each with a payload schema, a type name or ``None``)
  and a start schema (the reference's ``@WorkflowContract`` interfaces)::

      contracts.register("purchase.v1", signals={"cancel": None}, start_schema="purchase.Request")

- ``callbacks``: Python callables by name and category (the reference's named callbacks)::

      @callbacks.register("purchase.from_request", category="initial_state")
      def from_request(payload): ...

  A callback receives, by parameter name, the variables its field provides (``state``,
  ``payload``, ``decision``, ``result``, ``results`` ...); a ``**kwargs`` parameter receives
  all of them. The compiler refuses a callback whose required parameters the field does not
  provide.

Applications register in a ``workflow_callbacks.py`` module of any installed app; those
modules are imported (Django's ``autodiscover_modules``) the first time a catalog is read.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.utils.module_loading import autodiscover_modules

# category -> what the callable computes (the reference's callback table, plus our step kinds)
CATEGORIES: dict[str, str] = {
    "initial_state": "start payload -> initial state",
    "payload_mapper": "state -> service / call / compensation payload",
    "state_reducer": "state + payload (signal, decision or result) -> new state",
    "state_mutator": "state -> new state (timers, due dates, timeouts)",
    "timer_resolver": "state -> due instant (RFC 3339 text or datetime) or seconds",
    "fail_message": "state -> failure message",
    "subject_resolver": 'state -> {"type", "id", "version"}',
    "assignment_resolver": 'state -> {"mode", "value"} task assignment',
    "branch_reducer": "state + branch results -> new state",
    "condition": "state -> bool (named decision condition)",
    "service": "service handler named by a service step's target",
    "agent": "agent step: input -> result",
    "script": "script step: input -> result",
}

_discovered = False
_discover_lock = threading.Lock()


def ensure_discovered() -> None:
    """Import every installed app's ``workflow_callbacks`` module once per process."""
    global _discovered
    if _discovered:
        return
    with _discover_lock:
        if not _discovered:
            _discovered = True
            autodiscover_modules("workflow_callbacks")


@dataclass(frozen=True)
class Callback:
    name: str
    category: str
    func: Callable[..., Any]
    params: tuple[str, ...]  # every named parameter, in order
    required: tuple[str, ...]  # parameters without a default
    var_keyword: bool

    def missing(self, variables: tuple[str, ...] | frozenset[str] | set[str]) -> list[str]:
        """Required parameters that a field providing ``variables`` cannot fill."""
        return [name for name in self.required if name not in variables]


@dataclass(frozen=True)
class ContractEntry:
    name: str
    signals: Mapping[str, Any]  # signal name -> schema dict, type name or None
    start_schema: Any  # schema dict, type name or None


class CallbackCatalog:
    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], Callback] = {}
        self._lock = threading.Lock()

    def register(self, name: str, *, category: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register ``func`` under ``name`` in ``category`` (re-registering replaces)."""
        if category not in CATEGORIES:
            raise ValueError(f"unknown callback category {category!r}; known: {', '.join(CATEGORIES)}")

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            self.add(name, func, category=category)
            return func

        return decorate

    def add(self, name: str, func: Callable[..., Any], *, category: str) -> Callback:
        if category not in CATEGORIES:
            raise ValueError(f"unknown callback category {category!r}")
        signature = inspect.signature(func)
        params: list[str] = []
        required: list[str] = []
        var_keyword = False
        for param in signature.parameters.values():
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                var_keyword = True
            elif param.kind is inspect.Parameter.VAR_POSITIONAL:
                continue
            else:
                params.append(param.name)
                if param.default is inspect.Parameter.empty:
                    required.append(param.name)
        entry = Callback(name, category, func, tuple(params), tuple(required), var_keyword)
        with self._lock:
            self._entries[(category, name)] = entry
        return entry

    def get(self, name: str, category: str) -> Callback | None:
        ensure_discovered()
        return self._entries.get((category, name))

    def names(self, category: str | None = None) -> list[str]:
        ensure_discovered()
        return sorted(n for (c, n) in self._entries if category is None or c == category)

    def unregister(self, name: str, category: str) -> None:
        with self._lock:
            self._entries.pop((category, name), None)


class TypeCatalog:
    def __init__(self) -> None:
        self._entries: dict[str, Any] = {}

    def register(self, name: str, schema: Mapping[str, Any] | bool) -> None:
        """Register a named JSON Schema (checked: no non-local ``$ref``, valid, RE2 patterns)."""
        from workflows.definitions.schemas import check_schema

        problems = check_schema(schema)
        if problems:
            raise ValueError(f"schema {name!r} is invalid at {problems[0].pointer or '/'}: {problems[0].message}")
        self._entries[name] = schema

    def get(self, name: str) -> Any | None:
        ensure_discovered()
        return self._entries.get(name)

    def __contains__(self, name: object) -> bool:
        ensure_discovered()
        return name in self._entries

    def names(self) -> list[str]:
        ensure_discovered()
        return sorted(self._entries)

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)


class ContractCatalog:
    def __init__(self) -> None:
        self._entries: dict[str, ContractEntry] = {}

    def register(
        self, name: str, *, signals: Mapping[str, Any] | None = None, start_schema: Any = None
    ) -> ContractEntry:
        """Register a contract: its signals (name -> schema, type name or None) and start schema."""
        entry = ContractEntry(name, dict(signals or {}), start_schema)
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> ContractEntry | None:
        ensure_discovered()
        return self._entries.get(name)

    def names(self) -> list[str]:
        ensure_discovered()
        return sorted(self._entries)

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)


callbacks = CallbackCatalog()
types = TypeCatalog()
contracts = ContractCatalog()


@dataclass(frozen=True, eq=False)
class CallbackComputation:
    """A registered callable as a plan :class:`~workflows.definitions.plan.Computation`.

    ``evaluate`` passes the variables the callable's parameters name (all of them to a
    ``**kwargs`` parameter) and answers what it returns. A reducer or mutator returns the
    whole new state (``merge`` is false), unlike a CEL ``set`` map, which is merged.
    """

    source: str
    category: str
    callback: Callback
    merge: bool = False
    kind: str = "callback"

    def evaluate(self, variables: Mapping[str, Any]) -> Any:
        cb = self.callback
        if cb.var_keyword:
            return cb.func(**variables)
        return cb.func(**{name: variables[name] for name in cb.params if name in variables})
