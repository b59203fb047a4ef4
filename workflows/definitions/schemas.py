"""JSON Schema validation for definitions and for the engine's payload checks.

- :func:`validate` answers value-free :class:`~workflows.exceptions.Violation` s: an RFC 6901
  pointer into the instance, the failing keyword as ``type`` (``required``, ``minimum``,
  ``maxLength``, ``pattern`` ...) and a message composed from those two only. jsonschema's
  own messages quote the instance, so they are never used.
- :func:`check_schema` refuses a non-local ``$ref`` (anything not starting with ``#``)
  anywhere in the schema *before* it is compiled, then checks the schema against its
  metaschema and that every ``pattern`` compiles under RE2.
- ``pattern`` and ``patternProperties`` use google-re2, so a catastrophic pattern is matched in
  linear time; a pattern RE2 cannot run (look-around, back-references) is a schema violation.
- Compiled validators are cached per process by the SHA-256 of the canonical schema JSON, LRU,
  ``WORKFLOWS["RECORDING"]["SCHEMA_CACHE_MAX_ENTRIES"]`` entries.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from typing import Any

import re2
from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import SchemaError
from referencing import Registry
from referencing.exceptions import Unresolvable

from workflows import conf, jsonvalues
from workflows.definitions.names import is_safe, safe_path
from workflows.exceptions import Violation

MAX_VIOLATIONS = 100
REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@lru_cache(maxsize=1024)
def _regex(pattern: str) -> Any:
    return re2.compile(pattern, _RE2_OPTIONS)


def _re2_pattern(validator: Any, patrn: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _regex(patrn).search(instance):
        yield ValidationError("does not match pattern")


def _re2_pattern_properties(
    validator: Any, pattern_properties: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        regex = _regex(pattern)
        for key, value in instance.items():
            if regex.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


# --- numbers: a JSON decimal arrives as Decimal (workflows.jsonvalues), a schema's or a Python
# caller's as float. Python compares a Decimal with a float by the float's binary value
# (Decimal("0.1") < 0.1 is true) and refuses Decimal % float, so the numeric keywords compare
# both sides as the decimals they were written as (a float by its shortest repr).


def _exact(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value):
        return Decimal(repr(value))
    return value


def _is_number(validator: Any, instance: Any) -> bool:
    return validator.is_type(instance, "number")


def _bound(name: str, fails: Any) -> Any:
    def check(validator: Any, limit: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
        if _is_number(validator, instance) and fails(_exact(instance), _exact(limit)):
            yield ValidationError(f"violates {name}")

    return check


def _multiple_of(validator: Any, step: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not _is_number(validator, instance):
        return
    try:
        failed = (Fraction(_exact(instance)) / Fraction(_exact(step))).denominator != 1
    except (ValueError, OverflowError, ZeroDivisionError):
        failed = True
    if failed:
        yield ValidationError("violates multipleOf")


def _same_json(one: Any, two: Any) -> bool:
    """JSON equality: 1 and 1.0 are equal numbers, True and 1 are not, 0.1 is 0.1 however held."""
    if isinstance(one, bool) or isinstance(two, bool):
        return isinstance(one, bool) and isinstance(two, bool) and one == two
    if isinstance(one, int | float | Decimal) and isinstance(two, int | float | Decimal):
        return bool(_exact(one) == _exact(two))
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, list) and isinstance(two, list):
        return len(one) == len(two) and all(_same_json(a, b) for a, b in zip(one, two, strict=True))
    if isinstance(one, Mapping) and isinstance(two, Mapping):
        return one.keys() == two.keys() and all(_same_json(one[k], two[k]) for k in one)
    return bool(one == two)


def _enum(validator: Any, enums: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if all(not _same_json(each, instance) for each in enums):
        yield ValidationError("is not one of the allowed values")


def _const(validator: Any, const: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not _same_json(instance, const):
        yield ValidationError("is not the expected value")


def _is_integer(checker: Any, instance: Any) -> bool:
    if isinstance(instance, Decimal):  # 2.0 is an integer to JSON Schema, as the float 2.0 is
        return instance.is_finite() and instance == instance.to_integral_value()
    return bool(_INTEGER(checker, instance))


_INTEGER = Draft202012Validator.TYPE_CHECKER._type_checkers["integer"]

Re2Validator = validators.extend(
    Draft202012Validator,
    validators={
        "pattern": _re2_pattern,
        "patternProperties": _re2_pattern_properties,
        "minimum": _bound("minimum", lambda value, limit: value < limit),
        "maximum": _bound("maximum", lambda value, limit: value > limit),
        "exclusiveMinimum": _bound("exclusiveMinimum", lambda value, limit: value <= limit),
        "exclusiveMaximum": _bound("exclusiveMaximum", lambda value, limit: value >= limit),
        "multipleOf": _multiple_of,
        "enum": _enum,
        "const": _const,
    },
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)
# No retrieval: a reference that is not inside the schema itself can never be resolved.
_EMPTY_REGISTRY: Registry = Registry()


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, integral numbers as integers, each other decimal in one
    normal form (a float and a Decimal of 0.1 alike): equal schemas, equal text."""
    return jsonvalues.normal(_normalise_numbers(value))


def _normalise_numbers(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _normalise_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise_numbers(v) for v in value]
    return value


def schema_digest(schema: Any) -> str:
    return hashlib.sha256(canonical_json(schema).encode("utf-8")).hexdigest()


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def pointer(parts: Any) -> str:
    return "".join("/" + escape(str(part)) for part in parts)


def nonlocal_refs(schema: Any) -> list[str]:
    """Pointers (into the schema) of every ``$ref`` that is not a local ``#...`` reference."""
    found: list[str] = []
    stack: list[tuple[Any, str]] = [(schema, "")]
    while stack:
        node, at = stack.pop()
        if isinstance(node, Mapping):
            for key, value in node.items():
                here = f"{at}/{escape(str(key))}"
                if key in REF_KEYWORDS and not (isinstance(value, str) and value.startswith("#")):
                    found.append(here)
                stack.append((value, here))
        elif isinstance(node, list):
            stack.extend((value, f"{at}/{index}") for index, value in enumerate(node))
    return sorted(found)


def plain_pointer(inner: str) -> str:
    """``inner`` (a pointer inside a schema or a value) up to its first token that is not a
    plain name or an index: keys under ``properties``, ``patternProperties`` (the patterns
    themselves), ``$defs``, ``dependentSchemas`` ... are chosen by whoever wrote the schema or
    the value, and a pointer repeats only plain names (``^[A-Za-z0-9_.$-]{1,255}$``)."""
    tokens = [token.replace("~1", "/").replace("~0", "~") for token in inner.split("/")[1:]]
    return pointer(safe_path(tokens))


def _plain_violations(found: list[Violation], at: str) -> list[Violation]:
    """``at`` + the plain part of each pointer inside the schema, duplicates dropped."""
    unique: dict[tuple[str, str, str], Violation] = {}
    for v in found:
        inner = v.pointer[len(at) :] if v.pointer.startswith(at) else v.pointer
        plain = Violation(at + plain_pointer(inner), v.type, v.message)
        unique.setdefault((plain.pointer, plain.type, plain.message), plain)
    return sorted(unique.values(), key=lambda v: v.pointer)


def check_schema(schema: Any, *, at: str = "") -> list[Violation]:
    """Every problem of a schema itself (pointers are ``at`` + the pointer inside the schema,
    cut at the first key that is not a plain name: see :func:`plain_pointer`)."""
    return _plain_violations(_schema_problems(schema, at), at)


def _schema_problems(schema: Any, at: str) -> list[Violation]:
    if isinstance(schema, bool):
        return []
    if not isinstance(schema, Mapping):
        return [Violation(at, "type", "a schema must be an object or a boolean")]
    refs = nonlocal_refs(schema)
    if refs:
        return [Violation(at + ref, "$ref", "only local references (#...) are allowed in a schema") for ref in refs]
    found: list[Violation] = []
    try:
        Re2Validator.check_schema(schema)
    except SchemaError as error:
        found.append(Violation(at + pointer(error.absolute_path), "schema", f"invalid schema ({error.validator})"))
        return found
    stack: list[tuple[Any, str]] = [(schema, at)]
    while stack:
        node, here = stack.pop()
        if isinstance(node, Mapping):
            for key, value in node.items():
                child = f"{here}/{escape(str(key))}"
                if key == "pattern" and isinstance(value, str):
                    found.extend(_check_pattern(value, child))
                elif key == "patternProperties" and isinstance(value, Mapping):
                    for pattern in value:
                        found.extend(_check_pattern(str(pattern), f"{child}/{escape(str(pattern))}"))
                stack.append((value, child))
        elif isinstance(node, list):
            stack.extend((value, f"{here}/{index}") for index, value in enumerate(node))
    found.extend(Violation(at + here, "$ref", "a reference cycles back without descending into the value")
                 for here in _ref_cycles(schema))  # fmt: skip
    try:
        _compiled(schema)
    except Unresolvable:
        found.append(Violation(at, "$ref", "a local reference does not resolve"))
    return sorted(found, key=lambda v: v.pointer)


# Keywords that apply a subschema to the very same value: a cycle through them alone (and
# ``$ref``) never reaches the end of the value, so validation would recurse without end.
IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas")


def _resolve_local(root: Any, ref: str) -> str | None:
    """The pointer a local ``#/...`` reference names, when it names a subschema."""
    if ref != "#" and not ref.startswith("#/"):
        return None  # an anchor or another document: not followed here
    target = ref[1:]
    node = root
    for token in filter(None, target.split("/")):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return target.rstrip("/")


def _node(root: Any, at: str) -> Any:
    node = root
    for token in filter(None, at.split("/")):
        token = token.replace("~1", "/").replace("~0", "~")
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node


def _ref_cycles(root: Any) -> list[str]:
    """Pointers of subschemas from which ``$ref`` and in-place keywords lead back to themselves
    (iterative depth-first search; at most one pointer per cycle)."""
    if not isinstance(root, Mapping):
        return []

    def edges(at: str) -> list[str]:
        node = _node(root, at)
        if not isinstance(node, Mapping):
            return []
        out = []
        for key in REF_KEYWORDS:
            if isinstance(node.get(key), str):
                target = _resolve_local(root, node[key])
                if target is not None:
                    out.append(target)
        for key in IN_PLACE:
            value = node.get(key)
            if isinstance(value, list):
                out.extend(f"{at}/{key}/{i}" for i in range(len(value)))
            elif isinstance(value, Mapping) and key == "dependentSchemas":
                out.extend(f"{at}/{key}/{escape(str(name))}" for name in value)
            elif isinstance(value, Mapping | bool) and key != "dependentSchemas":
                out.append(f"{at}/{key}")
        return out

    starts: list[str] = []
    stack_nodes: list[tuple[Any, str]] = [(root, "")]
    while stack_nodes:  # every subschema position is a possible entry into a cycle
        node, at = stack_nodes.pop()
        if isinstance(node, Mapping):
            starts.append(at)
            for key, value in node.items():
                stack_nodes.append((value, f"{at}/{escape(str(key))}"))
        elif isinstance(node, list):
            stack_nodes.extend((value, f"{at}/{i}") for i, value in enumerate(node))
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[str] = []
    for start in starts:
        if start in state:
            continue
        path: list[tuple[str, Iterator[str]]] = [(start, iter(edges(start)))]
        state[start] = 1
        while path:
            at, following = path[-1]
            nxt = next(following, None)
            if nxt is None:
                state[at] = 2
                path.pop()
            elif state.get(nxt) == 1:
                cycles.append(nxt)
            elif nxt not in state:
                state[nxt] = 1
                path.append((nxt, iter(edges(nxt))))
    return sorted(set(cycles))


def _check_pattern(pattern: str, at: str) -> list[Violation]:
    try:
        _regex(pattern)
    except Exception:  # noqa: BLE001 - re2.Error and friends: the pattern is refused either way
        return [Violation(at, "pattern", "pattern is not supported (RE2 syntax: no look-around or back-references)")]
    return []


# --- the compiled-validator cache ------------------------------------------------------------


class _ValidatorCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, Any] = OrderedDict()

    def get(self, schema: Any) -> Any:
        key = schema_digest(schema)
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
        compiled = Re2Validator(schema, registry=_EMPTY_REGISTRY)
        limit = conf.get().RECORDING.SCHEMA_CACHE_MAX_ENTRIES
        with self._lock:
            self._entries[key] = compiled
            self._entries.move_to_end(key)
            while len(self._entries) > limit:
                self._entries.popitem(last=False)
        return compiled

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


validator_cache = _ValidatorCache()


def _compiled(schema: Any) -> Any:
    return validator_cache.get(schema)


def _message(keyword: str) -> str:
    return f"violates {keyword}"


def validate(schema: Any, instance: Any) -> list[Violation]:
    """Value-free violations of ``instance`` against ``schema`` (empty: valid).

    Ordered by pointer then keyword; at most :data:`MAX_VIOLATIONS`. A schema with a non-local
    ``$ref`` gives one ``$ref`` violation at the root and is never compiled.
    """
    if schema is None or schema is True:
        return []
    if nonlocal_refs(schema):
        return [Violation("", "$ref", "the schema has a non-local reference")]
    compiled = _compiled(schema)
    found: list[Violation] = []
    try:
        errors = list(compiled.iter_errors(instance))
    except Unresolvable:
        return [Violation("", "$ref", "a local reference in the schema does not resolve")]
    except RecursionError:  # a schema stored before cycles were refused: bounded, never a crash
        return [Violation("", "$ref", "the schema recurses without descending into the value")]
    for error in errors:
        keyword = str(error.validator)
        path = list(error.absolute_path)
        safe = safe_path(path)
        at = pointer(safe)
        if keyword == "required" and len(safe) == len(path):
            present = error.instance if isinstance(error.instance, Mapping) else {}
            for name in (name for name in error.validator_value if name not in present):
                # a required name that is not plain: the pointer stops at the object
                found.append(Violation(pointer([*safe, name]) if is_safe(name) else at, "required", "is required"))
            continue
        found.append(Violation(at, keyword, _message(keyword)))
        if len(found) >= MAX_VIOLATIONS:
            break
    unique = {(v.pointer, v.type): v for v in found}
    return sorted(unique.values(), key=lambda v: (v.pointer, v.type))[:MAX_VIOLATIONS]
