"""Reading a definition document field by field: the :class:`Checker` and ISO-8601 durations.

Shared by the document rules (:mod:`.validation`) and the readers of the step types
(:mod:`.steps`): a reader asks the checker for each field and gets the normalised value, or
None with a violation recorded, so one pass reports every problem of a document.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from workflows.definitions.names import echo, is_safe
from workflows.exceptions import Violation

MAX_VERSION = 2_147_483_647
MAX_TEXT = 4000

_DURATION = re.compile(
    r"^P(?!$)(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:[.,]\d+)?)S)?)?$"
)


def parse_duration(text: Any) -> float | None:
    """Seconds of an ISO-8601 duration (``P3D``, ``PT15M``, ``P1W``, ``PT0.5S``), or None.

    Years and months have no fixed length and are refused.
    """
    if not isinstance(text, str):
        return None
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        return None
    parts = {k: float(v.replace(",", ".")) if v else 0.0 for k, v in match.groupdict().items()}
    seconds = (parts["weeks"] * 604800 + parts["days"] * 86400 + parts["hours"] * 3600 + parts["minutes"] * 60) + parts[
        "seconds"
    ]
    return int(seconds) if seconds == int(seconds) else seconds


@dataclass
class Checker:
    """Collects violations while reading one document; pointers are RFC 6901."""

    violations: list[Violation] = field(default_factory=list)

    def add(self, at: str, kind: str, message: str) -> None:
        self.violations.append(Violation(at, kind, message))

    # --- objects -----------------------------------------------------------------------------

    def fields(
        self,
        data: Any,
        at: str,
        *,
        required: Iterable[str] = (),
        optional: Iterable[str] = (),
        aliases: dict[str, str] | None = None,
        what: str = "object",
    ) -> dict[str, Any] | None:
        """The object with aliases renamed; unknown and missing fields reported."""
        if not isinstance(data, dict):
            self.add(at, "type", f"{what} must be a mapping")
            return None
        aliases = aliases or {}
        known = set(required) | set(optional)
        out: dict[str, Any] = {}
        for key, value in data.items():
            name = aliases.get(key, key)
            here = f"{at}/{escape(key)}" if is_safe(key) else at  # never repeat an unsafe key
            if name not in known:
                self.add(here, "unknown", f"unknown field{echo(key)}")
                continue
            if name in out:
                self.add(here, "conflict", f"field{echo(key)} repeats{echo(name)} under another spelling")
                continue
            out[name] = value
        for name in required:
            if name not in out or out[name] is None:
                self.add(f"{at}/{name}", "required", f"field '{name}' is required")
        return out

    def exclusive(self, obj: dict[str, Any], at: str, *names: str, required: bool = False) -> str | None:
        """At most one (or, with ``required``, exactly one) of ``names``; answers which."""
        present = [n for n in names if obj.get(n) is not None]
        if len(present) > 1:
            self.add(f"{at}/{present[1]}", "conflict", f"use only one of {', '.join(names)}")
        if required and not present:
            self.add(at, "required", f"one of {', '.join(names)} is required")
        return present[0] if present else None

    # --- scalars -----------------------------------------------------------------------------

    def string(self, value: Any, at: str, *, max_length: int = MAX_TEXT) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str):
            self.add(at, "type", "must be text")
            return None
        if len(value) > max_length:
            self.add(at, "maxLength", f"must be at most {max_length} characters")
            return None
        return value

    def name(self, value: Any, at: str, what: str = "name") -> str | None:
        """A plain identifier: ``^[A-Za-z0-9_.$-]{1,255}$``."""
        if value is None:
            return None
        if not is_safe(value):
            self.add(at, "pattern", f"{what} must be 1-255 letters, digits, '_', '.', '$' or '-'")
            return None
        return str(value)

    def integer(self, value: Any, at: str, *, minimum: int = 1, maximum: int = MAX_VERSION) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(at, "type", "must be an integer")
            return None
        if value < minimum or value > maximum:
            self.add(at, "range", f"must be between {minimum} and {maximum}")
            return None
        return value

    def boolean(self, value: Any, at: str) -> bool | None:
        if value is None:
            return None
        if not isinstance(value, bool):
            self.add(at, "type", "must be true or false")
            return None
        return value

    def duration(self, value: Any, at: str) -> float | None:
        if value is None:
            return None
        seconds = parse_duration(value)
        if seconds is None:
            self.add(at, "duration", "must be an ISO-8601 duration such as PT15M, P3D or P1W (no years or months)")
            return None
        if seconds <= 0:
            self.add(at, "duration", "must be longer than zero")
            return None
        return seconds

    def expression(self, value: Any, at: str) -> dict[str, Any] | None:
        text = self.string(value, at)
        if text is None:
            return None
        if not text.strip():
            self.add(at, "expression", "expression must not be empty")
            return None
        return {"cel": text}

    def ref(self, obj: dict[str, Any], at: str, key: str) -> str | None:
        """The step id in ``obj[key]`` (a reference to another step)."""
        return self.name(obj.get(key), f"{at}/{key}", "step id")

    def template(self, value: Any, at: str) -> str | None:
        return self.string(value, at)

    def callback(self, value: Any, at: str, category: str) -> dict[str, Any] | None:
        name = self.name(value, at, "callback name")
        return {"callback": name, "category": category} if name else None

    def schema(self, value: Any, at: str) -> dict[str, Any] | None:
        """A type name (``{"type": name}``) or an inline schema (``{"inline": schema}``)."""
        if value is None:
            return None
        if isinstance(value, str):
            name = self.name(value, at, "type name")
            return {"type": name} if name else None
        if isinstance(value, dict | bool):
            return {"inline": value}
        self.add(at, "type", "must be a type name or an inline JSON Schema")
        return None

    def value_or_callback(
        self, obj: dict[str, Any], at: str, *, cel: str, callback: str | None, category: str | None, merge: bool = False
    ) -> dict[str, Any] | None:
        """A CEL field or its callback alternative (exclusive)."""
        names = (cel, callback) if callback else (cel,)
        chosen = self.exclusive(obj, at, *names)
        if chosen is None:
            return None
        if chosen == cel:
            found = self.expression(obj[cel], f"{at}/{cel}")
            if found is not None and merge:
                found["merge"] = True
            return found
        assert category is not None
        return self.callback(obj[chosen], f"{at}/{chosen}", category)


def escape(token: str) -> str:
    """A JSON pointer token (RFC 6901)."""
    return str(token).replace("~", "~0").replace("/", "~1")


StepReader = Callable[[dict[str, Any], str, Checker], dict[str, Any]]
"""A step type's reader: (the step's fields, its pointer, the checker) -> its normalised fields."""
