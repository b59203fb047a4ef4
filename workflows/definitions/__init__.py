"""Definition documents, catalogs and the definition lifecycle.

Compile: :func:`compile_text` (text -> frozen :class:`~workflows.definitions.plan.Plan`).
"""

from __future__ import annotations

from workflows.definitions.catalogs import callbacks, contracts, types
from workflows.definitions.compiler import compile_data, compile_document, compile_text

__all__ = ["callbacks", "compile_data", "compile_document", "compile_text", "contracts", "types"]
