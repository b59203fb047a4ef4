"""Start selection: which (scope, version) a new run is pinned to.

One read, on the caller's connection and transaction: the stored versions of the id in the
start scope and the default scope (status, contract, failure mark, plan hash, and for an
AVAILABLE version only its signal names and start schema — never the text) and the activation
records of both scopes. Everything is decided from that result; no plan is built.

Rules (the reference's "Activation Records And The Current Version"):

- an explicit version resolves in the start scope when the start scope holds it, otherwise in
  the default scope (a ``target_scope`` pins it to one of the two);
- without a version: the start scope's record, then the default scope's record. A scope's own
  record applies only to clients of the contract the scope's own versions implement; the
  default record applies only when the default scope's versions implement the client's
  contract. No record: NO_CURRENT_VERSION (never computed from the versions);
- the chosen row: AVAILABLE runs; DEPRECATED is refused with DEPRECATED (named or selected by a
  record alike); RETIRED with INVALID_TRANSITION; a candidate or no row with
  VERSION_NOT_RUNNABLE. A failure mark refuses nothing here.

At READ COMMITTED the read sees every activation, deprecation and retirement committed before
it; at higher isolation levels it sees the caller's snapshot (the engine's pin admission is the
fence for status).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection

from workflows import jsonvalues
from workflows.definitions.store import DEFAULT_SCOPE, check_definition_id, check_scope, named, named_scope
from workflows.exceptions import DefinitionMissing, Deprecated, LifecycleError, NoCurrentVersion, VersionNotRunnable

# -- name: selection_read
# The versions of one id in two scopes and the activation records of both, in one statement.
SELECTION_READ = """
SELECT 'version' AS entry, d.scope, d.version, d.status, d.contract, d.failure, d.plan_hash,
       CASE WHEN d.status = 'AVAILABLE' THEN d.signal_names END AS signal_names,
       CASE WHEN d.status = 'AVAILABLE' THEN d.start_schema END AS start_schema,
       NULL::varchar AS target_scope
  FROM workflow_definitions d
 WHERE d.definition_id = %(id)s AND d.scope IN (%(scope)s, %(default)s)
UNION ALL
SELECT 'activation', a.scope, a.version, NULL, NULL, NULL, NULL, NULL, NULL, a.target_scope
  FROM workflow_activations a
 WHERE a.definition_id = %(id)s AND a.scope IN (%(scope)s, %(default)s)
"""


@dataclass(frozen=True)
class Selection:
    """The chosen pin of a new run."""

    scope: str  # the definition scope of the chosen row
    definition_id: str
    version: int
    plan_hash: str
    contract: str
    start_schema: Any  # JSON Schema of the start payload, or None
    signal_names: tuple[str, ...]
    failure: str | None
    start_scope: str


@dataclass(frozen=True)
class _Version:
    scope: str
    version: int
    status: str
    contract: str
    failure: str
    plan_hash: str
    signal_names: Any
    start_schema: Any


def _json(value: Any) -> Any:
    return jsonvalues.loads(value) if isinstance(value, str) else value


Fetch = Callable[[str, dict[str, Any]], list[tuple[Any, ...]]]


def _fetch_on_connection(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def read(
    start_scope: str, definition_id: str, fetch: Fetch | None = None
) -> tuple[list[_Version], dict[str, tuple[str, int]]]:
    """The selection read: (versions, {scope: (target scope, version)}). ``fetch`` runs it
    (the engine's recording passes its prepared-statement runner); by default Django's cursor."""
    params = {"id": definition_id, "scope": start_scope, "default": DEFAULT_SCOPE}
    rows = (fetch or _fetch_on_connection)(SELECTION_READ, params)
    versions: list[_Version] = []
    records: dict[str, tuple[str, int]] = {}
    for entry, scope, version, status, contract, failure, plan_hash, signals, start_schema, target in rows:
        if entry == "activation":
            records[scope] = (target, version)
        else:
            schema = _json(start_schema)
            names = _json(signals)
            versions.append(_Version(scope, version, status, contract, failure or "", plan_hash, names, schema))
    return versions, records


def select_for_start(
    *,
    start_scope: str | None,
    definition_id: str,
    version: int | None = None,
    target_scope: str | None = None,
    contract: str | None = None,
    fetch: Fetch | None = None,
) -> Selection:
    """Choose the pin of a new run from one selection read (see the module docstring).

    Refuses: DEFINITION_MISSING (a target scope that is neither the start scope nor the
    default), NO_CURRENT_VERSION, VERSION_NOT_RUNNABLE, DEPRECATED, INVALID_TRANSITION
    (retired), CONTRACT_MISMATCH is left to the caller (``contract`` only filters records).
    """
    start_scope = check_scope(start_scope or DEFAULT_SCOPE)
    check_definition_id(definition_id)
    if target_scope is not None and target_scope not in (start_scope, DEFAULT_SCOPE):
        raise DefinitionMissing("the target scope must be the start scope or the default scope")
    versions, records = read(start_scope, definition_id, fetch)
    by_key = {(v.scope, v.version): v for v in versions}

    if version is not None:
        scopes = [target_scope] if target_scope else [start_scope, DEFAULT_SCOPE]
        for scope in scopes:
            if (scope, version) in by_key:
                return _admit(by_key[(scope, version)], definition_id, start_scope)
        raise VersionNotRunnable(f"no version {version} of {named(definition_id)} can be started")

    def contract_of(scope: str) -> str | None:
        names = {v.contract for v in versions if v.scope == scope}
        return next(iter(names)) if len(names) == 1 else (sorted(names)[0] if names else None)

    def applies(scope: str) -> bool:
        # a record serves only clients of the contract its scope's own versions implement
        return scope in records and (contract is None or contract_of(scope) == contract)

    chosen: tuple[str, int] | None = None
    if start_scope != DEFAULT_SCOPE and applies(start_scope):
        chosen = records[start_scope]
    if chosen is None and applies(DEFAULT_SCOPE):
        chosen = records[DEFAULT_SCOPE]
    if chosen is None:
        raise NoCurrentVersion(f"{named(definition_id)} has no current version in {named_scope(start_scope)}")
    found = by_key.get(chosen)
    if found is None:
        raise VersionNotRunnable(f"the current version of {named(definition_id)} has no published row")
    return _admit(found, definition_id, start_scope)


def _admit(row: _Version, definition_id: str, start_scope: str) -> Selection:
    key = f"version {row.version} of {named(definition_id)}"
    if row.status == "DEPRECATED":
        raise Deprecated(f"{key} is deprecated")
    if row.status == "RETIRED":
        raise LifecycleError(f"{key} is retired")
    if row.status != "AVAILABLE":
        raise VersionNotRunnable(f"{key} is not published")
    return Selection(
        scope=row.scope,
        definition_id=definition_id,
        version=row.version,
        plan_hash=row.plan_hash,
        contract=row.contract,
        start_schema=row.start_schema,
        signal_names=tuple(row.signal_names or ()),
        failure=row.failure or None,
        start_scope=start_scope,
    )
