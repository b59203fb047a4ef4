"""Helpers for the designer (studio): validate a text in place, mint the next version."""

from __future__ import annotations

from workflows.definitions.compiler import compile_text
from workflows.definitions.lifecycle import next_version as _next_version
from workflows.exceptions import DefinitionError, Violation


def validate_text(text: str | bytes, format: str = "yaml") -> list[Violation]:
    """Every problem of a document (pointer, type, message, line); empty when it compiles."""
    try:
        compile_text(text, format)
    except DefinitionError as error:
        return list(error.violations) or [Violation("", error.code, error.message)]
    return []


def next_version(scope: str, definition_id: str) -> int:
    """One more than the highest stored version of the id in the scope (any status), or 1."""
    return _next_version(scope=scope, definition_id=definition_id)
