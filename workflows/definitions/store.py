"""The definition table and the activation records: rows, locks and immutable records.

A node keeps no copy of either table: every operation reads the rows it needs when it needs
them, so a change committed on one node is seen by the next read on every node.

Lock order (every lifecycle operation): the per-definition-id advisory lock first, then row
locks. Taking the id lock first serialises publication, deprecation, retirement,
reinstatement and activation of one id across nodes (the reference's per-id queue), and
because nothing takes a row lock of the definition table before it, two operations can never
wait on each other in opposite orders.
"""

from __future__ import annotations

import unicodedata
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from workflows.definitions.names import is_safe
from workflows.exceptions import DefinitionMissing, InvalidArgument
from workflows.models import Activation, DefinitionStatus, DefinitionVersion, Run
from workflows.models.runs import LIVE_STATUSES

DEFAULT_SCOPE = "default"
LIVE_ROW_STATUSES = (DefinitionStatus.AVAILABLE, DefinitionStatus.DEPRECATED)
METADATA_LIMITS = {
    "source_type": 64,
    "source_uri": 2048,
    "source_revision": 255,
    "source_author": 255,
    "upload_id": 255,
}


# --- argument checks (before anything is read) ---------------------------------------------


def _refuse_text(value: str, what: str) -> None:
    if any(ch == "\x00" or "\ud800" <= ch <= "\udfff" for ch in value):
        raise InvalidArgument(f"{what} contains a NUL character or an unpaired surrogate")


def check_scope(scope: Any) -> str:
    """A scope key: non-blank, at most 255 code points, no control characters."""
    if scope is None:
        raise InvalidArgument("scope is required")
    if not isinstance(scope, str) or not scope.strip():
        raise InvalidArgument("scope must be non-blank text")
    if len(scope) > 255:
        raise InvalidArgument("scope must be at most 255 characters")
    _refuse_text(scope, "scope")
    if any(unicodedata.category(ch) == "Cc" for ch in scope):
        raise InvalidArgument("scope must not contain control characters")
    return scope


def check_definition_id(definition_id: Any) -> str:
    if not isinstance(definition_id, str) or not is_safe(definition_id):
        raise InvalidArgument("definition id must be 1-255 letters, digits, '_', '.', '$' or '-'")
    return definition_id


def check_version(version: Any) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= 2_147_483_647:
        raise InvalidArgument("version must be a positive integer")
    return version


def check_metadata(metadata: dict[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (metadata or {}).items():
        if key not in METADATA_LIMITS:
            raise InvalidArgument(f"unknown source metadata field (known: {', '.join(METADATA_LIMITS)})")
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidArgument(f"{key} must be text")
        _refuse_text(value, key)
        if len(value) > METADATA_LIMITS[key]:
            raise InvalidArgument(f"{key} must be at most {METADATA_LIMITS[key]} characters")
        out[key] = value
    return out


# --- records ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceMetadata:
    source_type: str
    source_uri: str
    source_revision: str
    source_author: str
    upload_id: str
    format: str
    text_digest: str
    packaged: bool


@dataclass(frozen=True)
class DefinitionRecord:
    """Immutable metadata of one stored version (never the text)."""

    scope: str
    definition_id: str
    version: int
    status: str
    kind: str
    contract: str
    plan_hash: str
    text_digest: str
    format: str
    packaged: bool
    failure: str | None
    signal_names: tuple[str, ...]
    created_at: datetime | None
    published_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["signal_names"] = list(self.signal_names)
        return data


@dataclass(frozen=True)
class ActivationRecord:
    scope: str
    definition_id: str
    target_scope: str
    version: int
    updated_at: datetime | None
    updated_by: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def record(row: DefinitionVersion) -> DefinitionRecord:
    return DefinitionRecord(
        scope=row.scope,
        definition_id=row.definition_id,
        version=row.version,
        status=row.status,
        kind=row.kind,
        contract=row.contract,
        plan_hash=row.plan_hash,
        text_digest=row.text_digest,
        format=row.format,
        packaged=row.packaged,
        failure=row.failure or None,
        signal_names=tuple(row.signal_names or ()),
        created_at=row.created_at,
        published_at=row.published_at,
    )


def activation_record(row: Activation) -> ActivationRecord:
    return ActivationRecord(
        scope=row.scope,
        definition_id=row.definition_id,
        target_scope=row.target_scope,
        version=row.version,
        updated_at=row.updated_at,
        updated_by=row.updated_by,
    )


def source_metadata(row: DefinitionVersion) -> SourceMetadata:
    return SourceMetadata(
        source_type=row.source_type,
        source_uri=row.source_uri,
        source_revision=row.source_revision,
        source_author=row.source_author,
        upload_id=row.upload_id,
        format=row.format,
        text_digest=row.text_digest,
        packaged=row.packaged,
    )


# --- reads and locks -------------------------------------------------------------------------


def definition_lock_key(definition_id: str) -> str:
    """The text whose hash names the per-definition-id advisory lock."""
    return f"workflow-definition:{definition_id}"


# -- name: lock_definition_id_shared
# The per-definition-id lock in shared mode: what a start holds from its pin admission until it
# commits, so no lifecycle operation (which takes it exclusively) changes the pinned row's
# status in between, and a retirement's pin count sees the start's PENDING run.
LOCK_DEFINITION_ID_SHARED = "SELECT pg_advisory_xact_lock_shared(hashtextextended(%s, 0))"


def lock_definition_id(definition_id: str) -> None:
    """The per-definition-id lock, held until the transaction ends (see the module docstring)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [definition_lock_key(definition_id)])


def find(scope: str, definition_id: str, version: int, *, for_update: bool = False) -> DefinitionVersion | None:
    rows = DefinitionVersion.objects.filter(scope=scope, definition_id=definition_id, version=version)
    if for_update:
        rows = rows.select_for_update()
    return rows.first()


def get(scope: str, definition_id: str, version: int, *, for_update: bool = False) -> DefinitionVersion:
    row = find(scope, definition_id, version, for_update=for_update)
    if row is None:
        raise DefinitionMissing(f"no version {version} of {_named(definition_id)} in {_named_scope(scope)}")
    return row


def current_activation(scope: str, definition_id: str) -> Activation | None:
    return Activation.objects.filter(scope=scope, definition_id=definition_id).first()


def is_default_current(scope: str, definition_id: str, version: int) -> bool:
    """Whether the default scope's activation record selects this (scope, id, version)."""
    found = current_activation(DEFAULT_SCOPE, definition_id)
    return found is not None and found.target_scope == scope and found.version == version


def live_pins(scope: str, definition_id: str, version: int) -> bool:
    return Run.objects.filter(
        scope=scope, definition_id=definition_id, version=version, status__in=LIVE_STATUSES
    ).exists()


def _named(definition_id: str) -> str:
    return f"'{definition_id}'" if is_safe(definition_id) else "the definition"


def _named_scope(scope: str) -> str:
    return f"scope '{scope}'" if is_safe(scope) else "the scope"


named = _named
named_scope = _named_scope
