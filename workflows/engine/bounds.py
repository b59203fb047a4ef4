"""Record-time payload bounds: UTF-8 JSON bytes and nesting depth, walked iteratively.

``check_payload`` walks containers with an explicit stack (no recursion, so a 20,000-deep
value cannot overflow the stack), adds up the compact JSON encoding as it goes and stops as
soon as either bound is crossed, so an oversized value is never fully encoded. Values
exactly at a limit pass. ``prescan_text`` applies the depth bound to raw JSON text before
any parser sees it.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from workflows import conf, jsonvalues
from workflows.exceptions import InvalidPayload, Violation

MAX_DEPTH = 64


def _scalar_size(value: Any, what: str = "payload") -> int:
    if isinstance(value, str):
        return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    if value is None:
        return 4
    if value is True:
        return 4
    if value is False:
        return 5
    if isinstance(value, int):
        return len(str(value))
    if isinstance(value, float | Decimal):
        # a decimal is stored digit for digit; one that cannot be (NaN, 1e400) is refused here,
        # on every way in (API, forms, Python API), before anything is written
        problem = jsonvalues.number_problem(value)
        if problem is not None:
            raise InvalidPayload(
                f"{what} holds a number that cannot be stored",
                violations=[Violation(pointer="", type="number", message=problem)],
            )
        return len(jsonvalues.decimal_text(value) if isinstance(value, Decimal) else repr(value))
    raise InvalidPayload(
        "payload is not JSON", violations=[Violation(pointer="", type="binding", message="payload is not JSON")]
    )


def check_payload(value: Any, *, max_bytes: int | None = None, what: str = "payload") -> int:
    """Refuse a payload over MAX_PAYLOAD_BYTES or deeper than 64 levels. Answers its size."""
    limit = max_bytes if max_bytes is not None else conf.get().RECORDING.MAX_PAYLOAD_BYTES
    total = 0
    # stack of (value, depth); containers count their brackets and separators
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            depth += 1
            if depth > MAX_DEPTH:
                raise InvalidPayload(
                    f"{what} is nested deeper than depth 64",
                    violations=[Violation(pointer="", type="depth", message="nested deeper than depth 64")],
                )
            n = len(item)
            total += 2 + max(n - 1, 0)  # brackets and commas
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise InvalidPayload(
                            f"{what} is not JSON",
                            violations=[Violation(pointer="", type="binding", message="object keys must be strings")],
                        )
                    total += _scalar_size(key) + 1  # key and colon
                    stack.append((child, depth))
            else:
                for child in item:
                    stack.append((child, depth))
        else:
            total += _scalar_size(item, what)
        if total > limit:
            raise InvalidPayload(
                f"{what} is larger than maxPayloadBytes ({limit})",
                violations=[Violation(pointer="", type="size", message=f"larger than maxPayloadBytes ({limit})")],
            )
    return total


def prescan_text(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> None:
    """Refuse JSON text nested deeper than ``max_depth`` before it is parsed (iterative scan)."""
    data = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
    depth = 0
    in_string = False
    escaped = False
    for ch in data:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                raise InvalidPayload(
                    "request body is nested deeper than depth 64",
                    violations=[Violation(pointer="", type="depth", message="nested deeper than depth 64")],
                )
        elif ch in "]}":
            depth -= 1


KEY_MAX_CHARS = 255


def _unstorable(ch: str) -> bool:
    """A control character (C0, DEL, C1), a line/paragraph separator or a lone surrogate."""
    code = ord(ch)
    return code < 0x20 or 0x7F <= code < 0xA0 or ch in "\u2028\u2029" or 0xD800 <= code < 0xE000


# What check_key admits, as the JSON Schema ``pattern`` of the API's keys (ECMA-262, Python and
# Rust regex alike, no look-around so that generators read it): not blank, no C0/DEL/C1
# control character or line separator. No range names surrogates: a Rust regex (jsonschema-rs,
# which schemathesis compiles every pattern with) has no such characters and refuses the whole
# pattern, and schemathesis then generates values without it. An unpaired surrogate is refused
# in every string of the API (``workflows.api.parsers.bad_text``), a rule of its own.
_KEY_CHAR = r"[^\x00-\x1f\x7f-\x9f\u2028\u2029]"
# str.isspace() spelled out: a generator may read \\s as ASCII only (schemathesis does)
UNICODE_SPACE = r"\x09-\x0d\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_KEY_VISIBLE = rf"[^\x00-\x1f\x7f-\x9f\u2028\u2029{UNICODE_SPACE}]"
KEY_PATTERN = rf"^{_KEY_CHAR}*{_KEY_VISIBLE}{_KEY_CHAR}*$"
# the same in a header, which carries printable ASCII (HTTP trims the spaces around it)
HEADER_KEY_PATTERN = r"^[\x20-\x7e]*[\x21-\x7e][\x20-\x7e]*$"


def check_key(value: str | None, what: str = "idempotency key", *, pointer: str = "") -> None:
    """An idempotency key (or a business key): 1 to 255 characters, not blank, and no control
    character, line separator or lone surrogate. PostgreSQL stores no NUL (a text column
    refuses it with an error that would surface as a retryable 503), and a key with a line
    break cannot be sent back in a header; the refusal repeats no value."""
    if value is None:
        return
    message = f"{what} must be 1 to {KEY_MAX_CHARS} printable characters"
    if not isinstance(value, str) or not value.strip() or len(value) > KEY_MAX_CHARS or any(map(_unstorable, value)):
        raise InvalidPayload(message, violations=[Violation(pointer=pointer, type="key", message=message)])
