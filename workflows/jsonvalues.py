"""JSON text <-> Python values with exact decimal numbers.

JSON has one number type; the reference reads it with decimals as BigDecimal, so an amount
such as ``1000.10`` is stored, logged, patched and answered as ``1000.10`` -- never as the
double ``1000.1``. Here every JSON number with a fraction or an exponent becomes a
:class:`decimal.Decimal` when text is read (integers stay ``int``: an integer and a decimal
are different values to the decision log), and a ``Decimal`` is written back as the JSON
number it holds, digit for digit.

A ``Decimal`` is always a JSON decimal, never an integer: ``Decimal("2")`` is written ``2.0``.

Reading uses ``json``'s own ``parse_float`` hook (the C scanner calls it per number: no
walk over the value). Writing keeps ``json``'s C encoder: it cannot emit a number it does not
know, so each ``Decimal`` is first written as a placeholder string that carries a
per-process random token, and the placeholders (only when there are any) are swapped for the
numbers' text in one regular-expression pass. A value without decimals costs nothing more.

Bounds (``check_number``): a decimal must be finite and within ``MAX_EXPONENT`` decimal
orders of magnitude either way (the range of a double, so ``1e400`` is refused as before and
nothing PostgreSQL's ``numeric`` would expand into a huge text is accepted).
"""

from __future__ import annotations

import json
import math
import re
import secrets
from collections.abc import Callable
from decimal import Context, Decimal
from typing import Any

MAX_EXPONENT = 308  # |adjusted exponent| of a non-zero decimal, and digits after the point
MAX_DIGITS = 1000  # significant digits of one decimal

_EXACT = Context(prec=MAX_DIGITS + 2 * MAX_EXPONENT)  # normalize() rounds to its context
_TOKEN = secrets.token_hex(16)
# json escapes the NUL that opens each placeholder, whatever ensure_ascii says
_PLACEHOLDER = re.compile(f'"\\\\u0000{_TOKEN}:(\\d+)"')


class NumberOutOfRange(ValueError):
    """A JSON number that cannot be kept exactly (not finite, or out of the bounds above)."""


def number_problem(value: Decimal | float) -> str | None:
    """Why a non-integer number cannot be stored, as a value-free sentence (None: it can)."""
    if isinstance(value, float):
        return None if math.isfinite(value) else "numbers must be finite"
    if not value.is_finite():
        return "numbers must be finite"
    _sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    if len(digits) > MAX_DIGITS:
        return f"numbers may have at most {MAX_DIGITS} significant digits"
    if -exponent > MAX_EXPONENT + MAX_DIGITS:
        return f"numbers may have at most {MAX_EXPONENT + MAX_DIGITS} digits after the decimal point"
    if any(digits) and not -MAX_EXPONENT <= value.adjusted() <= MAX_EXPONENT:
        return f"numbers must lie between 1e-{MAX_EXPONENT} and 1e{MAX_EXPONENT} in magnitude"
    if value.adjusted() > MAX_EXPONENT:  # a zero written 0e400
        return f"numbers must lie between 1e-{MAX_EXPONENT} and 1e{MAX_EXPONENT} in magnitude"
    return None


def parse_decimal(text: str) -> Decimal:
    """``parse_float`` hook for request bodies and documents: refuses what cannot be kept."""
    value = Decimal(text)
    problem = number_problem(value)
    if problem is not None:
        raise NumberOutOfRange(problem)
    return value


def _refuse_constant(name: str) -> Any:
    raise NumberOutOfRange("NaN and Infinity are not JSON")


_DECODE = json.JSONDecoder(parse_float=Decimal).decode  # made once: json.loads(**kw) makes one a call


def loads(text: str | bytes) -> Any:
    """JSON text as Python values, decimals as ``Decimal`` (for text this process wrote or
    PostgreSQL stored; input from outside goes through :func:`loads_input`)."""
    if isinstance(text, str):
        return _DECODE(text)
    return json.loads(text, parse_float=Decimal)


# How deep outside JSON text may nest before it is parsed at all: the parser recurses, and
# 5,000 levels in a form field ended in a RecursionError (a 500). Deeper than every bound that
# applies after parsing (payloads: 64), shallow enough for any stack.
MAX_INPUT_DEPTH = 128


class TooDeep(ValueError):
    """JSON text nested deeper than ``MAX_INPUT_DEPTH`` (refused before parsing)."""


def check_depth(text: str | bytes, max_depth: int = MAX_INPUT_DEPTH) -> None:
    """Refuse JSON text nested deeper than ``max_depth`` (an iterative scan; brackets inside
    strings do not count). Text with fewer brackets than that is not scanned."""
    data = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
    if data.count("[") + data.count("{") <= max_depth:
        return
    depth = 0
    in_string = escaped = False
    for ch in data:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                raise TooDeep(f"JSON nested deeper than {max_depth} levels")
        elif ch in "]}":
            depth -= 1


def loads_input(text: str | bytes, **kwargs: Any) -> Any:
    """Outside JSON text: decimals as ``Decimal`` within the bounds, no NaN or Infinity, nested
    at most ``MAX_INPUT_DEPTH`` levels. Raises ``ValueError`` (``NumberOutOfRange`` for a
    number, ``TooDeep`` for the nesting, ``JSONDecodeError`` else)."""
    check_depth(text)
    return json.loads(text, parse_float=parse_decimal, parse_constant=_refuse_constant, **kwargs)


def decimal_text(value: Decimal) -> str:
    """The JSON number a ``Decimal`` holds, digit for digit (``1000.10``, ``1.5E-7``), always
    as a decimal: one without a fraction (``1E+2``, ``2.5e1``) is written ``100.0``, ``25.0``,
    because jsonb (PostgreSQL's numeric) writes ``1E+2`` back as ``100`` -- an integer, a
    different value to the decision log."""
    if not value.is_finite():
        raise ValueError("NaN and Infinity are not JSON")
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    if exponent >= 0:
        return f"{value:f}.0"
    return str(value)


def normal_text(value: Decimal | float) -> str:
    """One text per decimal value (``1.0`` and ``1.00`` alike), never an integer's text."""
    number = Decimal(repr(value)) if isinstance(value, float) else value
    if not number.is_finite():
        raise ValueError("NaN and Infinity are not JSON")
    text = str(number.normalize(_EXACT))
    return text if ("." in text or "E" in text) else text + ".0"


class ExactEncoder(json.JSONEncoder):
    """A ``json.JSONEncoder`` that writes a ``Decimal`` as the exact JSON number it holds.
    Usable as ``cls=`` of ``json.dumps``, as a JSONField's ``encoder`` and under DRF."""

    number_text: Callable[[Decimal], str] = staticmethod(decimal_text)  # type: ignore[assignment]

    def encode(self, o: Any) -> str:
        self._decimals: list[str] = []
        text = super().encode(o)
        return _fill(text, self._decimals) if self._decimals else text

    def iterencode(self, o: Any, _one_shot: bool = False) -> Any:
        if not hasattr(self, "_decimals"):  # json.dump(fp) streams: fill chunk by chunk
            self._decimals = []
            return (_fill(chunk, self._decimals) for chunk in super().iterencode(o, _one_shot))
        return super().iterencode(o, _one_shot)

    def default(self, o: Any) -> Any:
        if isinstance(o, Decimal):
            decimals = self._decimals
            decimals.append(self.number_text(o))
            return f"\x00{_TOKEN}:{len(decimals) - 1}"
        return super().default(o)


class NormalEncoder(ExactEncoder):
    """Decimals in one normal form each (for fingerprints: ``1.0`` and ``1.00`` are one value)."""

    number_text = staticmethod(normal_text)  # type: ignore[assignment]


def _fill(text: str, decimals: list[str]) -> str:
    return _PLACEHOLDER.sub(lambda m: decimals[int(m.group(1))], text)


class ExactDecoder(json.JSONDecoder):
    """A ``json.JSONDecoder`` that reads decimals as ``Decimal`` (a JSONField's ``decoder``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("parse_float", Decimal)
        super().__init__(*args, **kwargs)


def dumps(value: Any, *, sort_keys: bool = False, indent: int | None = None, ensure_ascii: bool = False) -> str:
    """Compact JSON text (``indent`` for display), decimals exact."""
    separators = (",", ": ") if indent is not None else (",", ":")
    return json.dumps(
        value, cls=ExactEncoder, separators=separators, sort_keys=sort_keys, indent=indent, ensure_ascii=ensure_ascii
    )


def canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, compact, numbers exact (an int and a decimal differ)."""
    return json.dumps(value, cls=ExactEncoder, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def normal(value: Any) -> str:
    """Canonical JSON with each decimal in its normal form: equal values, equal text."""
    return json.dumps(value, cls=NormalEncoder, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
