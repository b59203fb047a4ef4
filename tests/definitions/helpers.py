"""Assertions shared by the definition tests."""

from __future__ import annotations

from workflows.exceptions import WorkflowError


def assert_value_free(error: WorkflowError, *values: str) -> None:
    """Neither the message nor any violation message repeats a submitted value."""
    texts = [error.message, str(error)] + [v.message for v in error.violations]
    for value in values:
        for text in texts:
            assert value not in text, f"{value!r} repeated in {text!r}"


def pointers(error: WorkflowError) -> list[str]:
    return [v.pointer for v in error.violations]


def types(error: WorkflowError) -> list[str]:
    return [v.type for v in error.violations]
