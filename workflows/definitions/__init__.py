"""Definition documents, catalogs and the definition lifecycle: the public API.

Compile (no database): :func:`compile_text` -> frozen :class:`~workflows.definitions.plan.Plan`.

Lifecycle (keyword-only; each runs in the caller's transaction when one is open, otherwise in
its own; see the docstrings for the refusal codes):

- :func:`load` (scope, text, format, metadata) -> CANDIDATE record
- :func:`publish`, :func:`deprecate`, :func:`retire`, :func:`reinstate` (scope, definition_id,
  version) -> record
- :func:`activate` (scope, definition_id, version, target_scope), :func:`follow` (scope,
  definition_id), :func:`deactivate_default` (definition_id), :func:`activations` (scope)
- :func:`list` (scope, definition_id, status), :func:`source_metadata` (scope, definition_id,
  version)

Catalogs: :data:`callbacks`, :data:`types`, :data:`contracts` (see :mod:`.catalogs`).
"""

from __future__ import annotations

from workflows.definitions.catalogs import callbacks, contracts, types
from workflows.definitions.compiler import compile_data, compile_document, compile_text
from workflows.definitions.lifecycle import (
    activate,
    activations,
    deactivate_default,
    deprecate,
    follow,
    load,
    next_version,
    publish,
    reinstate,
    retire,
    source_metadata,
)
from workflows.definitions.lifecycle import list_versions as list
from workflows.definitions.store import ActivationRecord, DefinitionRecord, SourceMetadata

__all__ = [
    "ActivationRecord",
    "DefinitionRecord",
    "SourceMetadata",
    "activate",
    "activations",
    "callbacks",
    "compile_data",
    "compile_document",
    "compile_text",
    "contracts",
    "deactivate_default",
    "deprecate",
    "follow",
    "list",
    "load",
    "next_version",
    "publish",
    "reinstate",
    "retire",
    "source_metadata",
    "types",
]
