"""Redaction of the decision log: values an application never wants in its history.

An application registers a redactor per definition id::

    from workflows.engine.redaction import register_redactor

    register_redactor("purchase-approval", lambda version: ["/card/number", "/iban"])

``fn(version)`` answers RFC 6901 pointers for that definition version. The values at those
pointers become ``"[redacted]"`` in every logged form: command payloads copied into history
(``COMMAND_RECEIVED``, ``SIGNAL_RECEIVED``, ``SIGNAL_APPLIED``), the states a DECISION patch is
diffed from, every STATE_BASELINE, and reasons written to history (a command outcome, a
cancellation reason), where any value found at a redacted pointer of the command's payload
or the run's state is replaced as text. The command rows themselves are never redacted.

A redactor that raises, answers something that is not a list of pointers, or answers an
invalid pointer fails the segment *transiently* (:class:`RedactionFailed`, retryable): the
transaction rolls back and the command is offered again with backoff, so nothing unredacted
is ever written. The history buffer asks a redactor at most once per definition version in
a segment (see ``HistoryBuffer.pointers``).
"""

from __future__ import annotations

import copy
import re
import threading
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from workflows import jsonvalues
from workflows.exceptions import PersistenceError

REDACTED = "[redacted]"

Pointer = tuple[str, ...]  # the unescaped reference tokens; () is the whole document
Redactor = Callable[[int], Iterable[str]]

_lock = threading.Lock()
_redactors: dict[str, Redactor] = {}


class RedactionFailed(PersistenceError):
    """A redactor raised or answered an invalid pointer: the segment fails transiently."""

    code = "REDACTION_FAILED"
    title = "History redaction failed; retry"


def register_redactor(definition_id: str, fn: Redactor) -> Redactor:
    """Register ``fn(version) -> pointers`` for a definition id (replacing an earlier one)."""
    if not isinstance(definition_id, str) or not definition_id:
        raise ValueError("definition_id must be a non-empty string")
    if not callable(fn):
        raise TypeError("a redactor must be callable")
    with _lock:
        _redactors[definition_id] = fn
    return fn


def unregister_redactor(definition_id: str) -> None:
    with _lock:
        _redactors.pop(definition_id, None)


def redactor_for(definition_id: str) -> Redactor | None:
    with _lock:
        return _redactors.get(definition_id)


def parse_pointer(pointer: Any) -> Pointer:
    """RFC 6901: "" or "/"-separated tokens with ``~0``/``~1`` escapes. Raises ValueError."""
    if not isinstance(pointer, str):
        raise ValueError("a pointer must be a string")
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise ValueError("a pointer must start with /")
    tokens = []
    for raw in pointer[1:].split("/"):
        i = raw.find("~")
        while i != -1:
            if i + 1 >= len(raw) or raw[i + 1] not in "01":
                raise ValueError("a pointer has an invalid ~ escape")
            i = raw.find("~", i + 2)
        tokens.append(raw.replace("~1", "/").replace("~0", "~"))
    return tuple(tokens)


def pointers_of(definition_id: str, version: int | None) -> tuple[Pointer, ...]:
    """Ask the registered redactor (if any) for a version's pointers, parsed.

    Raises :class:`RedactionFailed` when the redactor raises or answers an invalid pointer
    (value-free: neither the pointer nor the exception text is repeated).
    """
    fn = redactor_for(definition_id)
    if fn is None:
        return ()
    try:
        answer = fn(int(version or 0))
        if answer is None:
            return ()
        if isinstance(answer, str | bytes) or not isinstance(answer, Iterable):
            raise ValueError("a redactor must answer a list of pointers")
        return tuple(dict.fromkeys(parse_pointer(p) for p in answer))
    except Exception:  # noqa: BLE001  (any failure of application code is a transient failure here)
        raise RedactionFailed(f"the history redactor of {definition_id} failed for version {version}") from None


def _child(container: Any, token: str) -> tuple[bool, Any]:
    if isinstance(container, dict):
        return (True, container[token]) if token in container else (False, None)
    if isinstance(container, list) and token.isdigit() and (token == "0" or not token.startswith("0")):
        index = int(token)
        return (True, container[index]) if index < len(container) else (False, None)
    return False, None


def value_at(document: Any, pointer: Pointer) -> tuple[bool, Any]:
    current = document
    for token in pointer:
        found, current = _child(current, token)
        if not found:
            return False, None
    return True, current


def redact(document: Any, pointers: Iterable[Pointer]) -> Any:
    """A copy of ``document`` with the value at each resolving pointer replaced by
    ``"[redacted]"`` (the document itself when no pointer resolves; it is never mutated)."""
    result = document
    copied = False
    for pointer in pointers:
        found, _ = value_at(result, pointer)
        if not found:
            continue
        if not pointer:
            return REDACTED
        if not copied:
            result = copy.deepcopy(result)
            copied = True
        _, parent = value_at(result, pointer[:-1])
        last = pointer[-1]
        if isinstance(parent, dict):
            parent[last] = REDACTED
        else:
            parent[int(last)] = REDACTED
    return result


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | Decimal):
        return str(value)
    return jsonvalues.canonical(value)


def _leaves(value: Any) -> Iterable[Any]:
    yield value
    stack = [value]
    while stack:  # iterative: a state may be deep
        item = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                stack.append(child)
            yield child


def secrets_in(documents: Iterable[Any], pointers: Iterable[Pointer]) -> set[str]:
    """The texts of the values at the pointers (and of their leaves) in the documents."""
    pointers = tuple(pointers)
    found: set[str] = set()
    for document in documents:
        if document is None:
            continue
        for pointer in pointers:
            present, value = value_at(document, pointer)
            if not present:
                continue
            for leaf in _leaves(value):
                if leaf is None or (isinstance(leaf, dict | list) and not leaf):
                    continue
                text = _render(leaf)
                if text and text != REDACTED:
                    found.add(text)
    return found


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of each secret text (longest first) by ``"[redacted]"``."""
    ordered = sorted((s for s in set(secrets) if s and s in (text or "")), key=len, reverse=True)
    if not ordered:
        return text
    # one pass, so a short secret never matches inside an earlier replacement
    return re.sub("|".join(re.escape(s) for s in ordered), REDACTED, text)
