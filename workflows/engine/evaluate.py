"""Evaluating a plan's computations inside a segment, with failures made deterministic.

An expression or callback that raises becomes a ``DeterministicFailure`` whose reason names
the step, the field (and the entry of a ``set`` map or the placeholder of a template) and why
in words ("unknown name 'result'", "no such key or field", "no matching overload (operand
types differ)", "the callback raised KeyError"), never the exception's text or a value (those
go to the DEBUG log).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from workflows.definitions.plan import Computation
from workflows.engine.context import DeterministicFailure, step_failed
from workflows.exceptions import ExpressionFailed

log = logging.getLogger("workflows.engine")

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*\}\}")
_PREFIX = "expression failed: "


def why(exc: BaseException) -> str:
    """Why a computation failed, in words, value-free."""
    if isinstance(exc, ExpressionFailed):
        text = exc.message
        if text.startswith(_PREFIX):
            return text[len(_PREFIX) :]
        return "the expression failed" if text == "expression failed" else text
    if isinstance(exc, LookupError) and str(exc) == "callback not registered":
        return "the callback is not registered"
    return f"the callback raised {type(exc).__name__}"


def evaluate(comp: Computation, variables: Mapping[str, Any], *, step: str, field: str) -> Any:
    try:
        return comp.evaluate(variables)
    except DeterministicFailure:
        raise
    except Exception as exc:
        log.debug("computation failed at step %s field %s", step, field, exc_info=True)
        where = exc.where if isinstance(exc, ExpressionFailed) else ""
        raise step_failed(step, f"{field}{where}", why(exc)) from exc


def json_kind(value: Any) -> str:
    """A value's JSON type, the only thing of it a failure may say."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a text"
    if isinstance(value, list | tuple):
        return "a list"
    return "an object" if isinstance(value, Mapping) else "a value"


def apply_set(comp: Computation | None, state: Any, variables: Mapping[str, Any], *, step: str, field: str) -> Any:
    """The new state after a ``set`` (CEL map merged key by key) or a reducer callback (replaces)."""
    if comp is None:
        return state
    result = evaluate(comp, variables, step=step, field=field)
    if getattr(comp, "merge", False):
        if result is None:
            return state
        if not isinstance(result, Mapping):
            raise step_failed(step, field, f"must give a map, gave {json_kind(result)}")
        merged = dict(state or {})
        merged.update(result)
        return merged
    return result


def bounded_text(text: str, *, step: str, field: str) -> str:
    """``text`` if it is within ``EXECUTOR.MAX_RENDERED_CHARS``; else the step fails, value-free."""
    limit = _rendered_limit()
    if len(text) > limit:
        raise DeterministicFailure(f"TEXT_TOO_LARGE: {field} of step {step} is longer than {limit} characters")
    return text


def _rendered_limit() -> int:
    from workflows import conf

    return int(conf.get().EXECUTOR.MAX_RENDERED_CHARS)


def render(template: str, variables: Mapping[str, Any], *, step: str = "", field: str = "text") -> str:
    """``{{ state.number }}`` placeholders filled from dotted paths (missing → empty).

    The result is bounded by ``EXECUTOR.MAX_RENDERED_CHARS``: a template that would exceed it
    fails the step (TEXT_TOO_LARGE, value-free) as soon as the pieces add up past it, so the
    oversized text is never built (360 ``{{ state.s }}`` over a 260 KB value made a 93.6 MB
    task row once)."""
    limit = _rendered_limit()
    pieces: list[str] = []
    size = 0
    position = 0
    text = template or ""
    for match in _PLACEHOLDER.finditer(text):
        for piece in (text[position : match.start()], _lookup(match.group(1), variables)):
            size += len(piece)
            if size > limit:
                raise DeterministicFailure(f"TEXT_TOO_LARGE: {field} of step {step} is longer than {limit} characters")
            pieces.append(piece)
        position = match.end()
    pieces.append(text[position:])
    if size + len(pieces[-1]) > limit:
        raise DeterministicFailure(f"TEXT_TOO_LARGE: {field} of step {step} is longer than {limit} characters")
    return "".join(pieces)


def _lookup(path: str, variables: Mapping[str, Any]) -> str:
    value: Any = variables
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        else:
            return ""
    if value is None:
        return ""
    return str(value)


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
