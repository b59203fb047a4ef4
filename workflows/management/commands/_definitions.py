"""Shared helpers of the definition management commands."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from workflows.exceptions import WorkflowError


def failure(error: WorkflowError) -> CommandError:
    lines = [f"{error.code}: {error.message}"]
    for v in error.violations[:50]:
        where = v.pointer or "/"
        line = f" (line {v.line})" if v.line else ""
        lines.append(f"  {where}{line}: {v.message}")
    return CommandError("\n".join(lines))


def describe(record: Any) -> str:
    return f"{record.scope}/{record.definition_id} v{record.version} {record.status} plan {record.plan_hash[:12]}"
