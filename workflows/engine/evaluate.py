"""Evaluating a plan's computations inside a segment, with failures made deterministic.

An expression or callback that raises becomes a ``DeterministicFailure`` whose reason names
the step and the field, never the exception text or a value (those go to the DEBUG log).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from workflows.definitions.plan import Computation
from workflows.engine.context import DeterministicFailure

log = logging.getLogger("workflows.engine")

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*\}\}")


def evaluate(comp: Computation, variables: Mapping[str, Any], *, step: str, field: str) -> Any:
    try:
        return comp.evaluate(variables)
    except DeterministicFailure:
        raise
    except Exception as exc:
        log.debug("computation failed at step %s field %s", step, field, exc_info=True)
        raise DeterministicFailure(f"DETERMINISTIC_FAILURE: {field} of step {step} failed") from exc


def apply_set(comp: Computation | None, state: Any, variables: Mapping[str, Any], *, step: str, field: str) -> Any:
    """The new state after a ``set`` (CEL map merged key by key) or a reducer callback (replaces)."""
    if comp is None:
        return state
    result = evaluate(comp, variables, step=step, field=field)
    if getattr(comp, "merge", False):
        if result is None:
            return state
        if not isinstance(result, Mapping):
            raise DeterministicFailure(f"DETERMINISTIC_FAILURE: {field} of step {step} must give a map")
        merged = dict(state or {})
        merged.update(result)
        return merged
    return result


def render(template: str, variables: Mapping[str, Any]) -> str:
    """``{{ state.number }}`` placeholders filled from dotted paths (missing → empty)."""

    def lookup(match: re.Match[str]) -> str:
        value: Any = variables
        for part in match.group(1).split("."):
            if isinstance(value, Mapping) and part in value:
                value = value[part]
            else:
                return ""
        if value is None:
            return ""
        return str(value)

    return _PLACEHOLDER.sub(lookup, template or "")


def call_callback(name: str, category: str, variables: Mapping[str, Any]) -> Any:
    """Call a registered callback with the variables its parameters name.

    Raises LookupError when no callback of that name and category is registered.
    """
    from workflows.definitions import catalogs, expressions

    catalogs.ensure_discovered()
    callback = catalogs.callbacks.get(name, category)
    if callback is None:
        raise LookupError("callback not registered")
    expressions.forget_inputs()  # the callback may change a state in place
    if callback.var_keyword:
        return callback.func(**variables)
    return callback.func(**{p: variables[p] for p in callback.params if p in variables})
