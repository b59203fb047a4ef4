"""The definition lifecycle: load, publish, deprecate, retire, reinstate and activation records.

Statuses: CANDIDATE after a load, PUBLISHING while a node holds the publication claim,
AVAILABLE once published, later DEPRECATED or RETIRED. Which version a start without a version
runs is decided by activation records, separately from the status.

Every operation runs in the caller's transaction when one is open (as a savepoint), otherwise
in its own; it takes the per-definition-id lock first (see :mod:`store`). Publication is the
exception that spans transactions: claim (short transaction) -> build the plan from the
stored text with no transaction held -> complete the fenced claim (short transaction).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from workflows import conf
from workflows.definitions import store
from workflows.definitions.compiler import compile_document
from workflows.definitions.documents import FORMATS, Document, parse
from workflows.definitions.plan import Plan
from workflows.definitions.schemas import canonical_json
from workflows.definitions.store import DEFAULT_SCOPE, named, named_scope
from workflows.exceptions import (
    ContractMismatch,
    DefinitionError,
    Drift,
    InvalidArgument,
    LifecycleError,
    LoaderMissing,
    NodeRoleError,
    PinnedInstances,
)
from workflows.models import Activation, DefinitionStatus, DefinitionVersion

log = logging.getLogger("workflows.definitions")
S = DefinitionStatus


def _require_executor_role(operation: str) -> None:
    if not conf.get().EXECUTOR.ENABLED:
        raise NodeRoleError(f"{operation} needs a node that builds plans; this node is recording-only")


def _key(scope: str, definition_id: str, version: int) -> str:
    return f"version {version} of {named(definition_id)} in {named_scope(scope)}"


# --- contract rules --------------------------------------------------------------------------


def _contract_signals(plan: Plan) -> dict[str, Any]:
    return {name: schema for name, schema in plan.contract.signals.items()}


def check_contract(scope: str, plan: Plan) -> None:
    """CONTRACT_MISMATCH when the plan's contract conflicts with the stored rows.

    - versions of one id in one scope name one contract;
    - a load into another scope is refused when the default scope holds the id under another
      contract, unless that scope already holds the id;
    - documents naming one contract declare the same signals (names and schemas).
    """
    own = (
        DefinitionVersion.objects.filter(scope=scope, definition_id=plan.definition_id)
        .exclude(contract=plan.contract.name)
        .exists()
    )
    if own:
        raise ContractMismatch(f"other versions of {named(plan.definition_id)} in this scope name another contract")
    if scope != DEFAULT_SCOPE:
        scope_holds = DefinitionVersion.objects.filter(scope=scope, definition_id=plan.definition_id).exists()
        default_other = (
            DefinitionVersion.objects.filter(scope=DEFAULT_SCOPE, definition_id=plan.definition_id)
            .exclude(contract=plan.contract.name)
            .exists()
        )
        if default_other and not scope_holds:
            raise ContractMismatch(f"the default scope holds {named(plan.definition_id)} under another contract")
    declared = canonical_json(_contract_signals(plan))
    for signals in (
        DefinitionVersion.objects.filter(contract=plan.contract.name)
        .exclude(contract_signals=None)
        .values_list("contract_signals", flat=True)
        .distinct()[:50]
    ):
        if canonical_json(signals) != declared:
            raise ContractMismatch(
                f"contract {named(plan.contract.name)} is declared elsewhere with other signals or schemas"
            )


# --- load ------------------------------------------------------------------------------------


def load(
    *,
    scope: str,
    text: str | bytes,
    format: str = "yaml",
    metadata: dict[str, Any] | None = None,
    packaged: bool = False,
) -> store.DefinitionRecord:
    """Parse, validate and compile a document and store it as a CANDIDATE of ``scope``.

    Loading the same text again answers the stored row unchanged. Refuses: INVALID_ARGUMENT
    (scope, format, metadata), DEFINITION_INVALID / UNKNOWN_TYPE_NAME (every violation),
    CONTRACT_MISMATCH, VERSION_EXISTS (the id and version hold other text), NODE_ROLE on a
    recording-only node. A failed load leaves every row untouched.
    """
    scope = store.check_scope(scope)
    if format not in FORMATS:
        raise InvalidArgument("format must be yaml or json")
    meta = store.check_metadata(metadata)
    _require_executor_role("load")
    document = parse(text, format)
    plan = compile_document(document)
    return _insert(scope, document, plan, meta, packaged=packaged)


def _insert(
    scope: str, document: Document, plan: Plan, meta: dict[str, str], *, packaged: bool
) -> store.DefinitionRecord:
    with transaction.atomic():
        store.lock_definition_id(plan.definition_id)
        existing = store.find(scope, plan.definition_id, plan.version, for_update=True)
        if existing is not None:
            if existing.text_digest == document.digest:
                return store.record(existing)
            raise LifecycleError(
                f"{_key(scope, plan.definition_id, plan.version)} exists with other text; load a new version",
                code="VERSION_EXISTS",
            )
        check_contract(scope, plan)
        row = DefinitionVersion.objects.create(
            scope=scope,
            definition_id=plan.definition_id,
            version=plan.version,
            kind="DOCUMENT",
            status=S.CANDIDATE,
            contract=plan.contract.name,
            contract_signals=_contract_signals(plan),
            state_schema=plan.state_schema,
            start_schema=plan.start_schema,
            signal_names=list(plan.signal_names),
            plan_hash=plan.plan_hash,
            format=document.format,
            text=document.text,
            text_digest=document.digest,
            packaged=packaged,
            activate_on_deploy=plan.activate_on_deploy,
            **meta,
        )
        return store.record(row)


# --- publish ---------------------------------------------------------------------------------


def build_row(row: DefinitionVersion) -> Plan:
    """Build the plan of a stored document from its text; checks key and plan hash.

    Raises DefinitionError: the document does not compile, code LOADER_MISSING (no loader for
    its format or a CODE row) or DRIFT (the rebuilt hash or key differs from the row's).
    """
    if row.kind != "DOCUMENT" or row.format not in FORMATS:
        raise DefinitionError(f"no loader for {_key(row.scope, row.definition_id, row.version)}", code="LOADER_MISSING")
    plan = compile_document(parse(row.text, row.format, max_bytes=_restore_limit()))
    if plan.definition_id != row.definition_id or plan.version != row.version:
        raise DefinitionError(
            f"the stored text of {_key(row.scope, row.definition_id, row.version)} names another key", code="DRIFT"
        )
    if plan.plan_hash != row.plan_hash:
        raise DefinitionError(
            f"{_key(row.scope, row.definition_id, row.version)} compiles to plan hash {plan.plan_hash}, "
            f"stored {row.plan_hash}",
            code="DRIFT",
        )
    return plan


def _restore_limit() -> int:
    # the reference's durable-restore envelope: floor(3L/2) bytes for stored text
    return conf.get().DEFINITIONS.MAX_DOCUMENT_SIZE_BYTES * 3 // 2


def publish(*, scope: str, definition_id: str, version: int) -> store.DefinitionRecord:
    """Make a CANDIDATE version AVAILABLE, after building its plan from the stored text.

    Fenced claim: the row goes to PUBLISHING with a token (a claim older than
    PUBLICATION_CLAIM_TIMEOUT_SECONDS is taken over), the plan is built with no transaction
    held, and completion succeeds only while the token is still ours. Publishing an AVAILABLE
    version succeeds without a change; publishing never activates (packaged documents are the
    exception, see :mod:`packaged`). Refuses: DEFINITION_MISSING, INVALID_TRANSITION (other
    status, or a claim held by another publisher), DEFINITION_INVALID / DRIFT / LOADER_MISSING
    (the build; the claim is released and the row stays a CANDIDATE), NODE_ROLE.
    """
    scope = store.check_scope(scope)
    store.check_definition_id(definition_id)
    store.check_version(version)
    _require_executor_role("publish")
    return _publish(scope, definition_id, version, activate_default=False)


def _publish(scope: str, definition_id: str, version: int, *, activate_default: bool) -> store.DefinitionRecord:
    token = uuid.uuid4()
    timeout = conf.get().DEFINITIONS.PUBLICATION_CLAIM_TIMEOUT_SECONDS
    with transaction.atomic():
        store.lock_definition_id(definition_id)
        row = store.get(scope, definition_id, version, for_update=True)
        if row.status == S.AVAILABLE:
            return store.record(row)
        stale = row.claimed_at is not None and row.claimed_at < timezone.now() - timedelta(seconds=timeout)
        if row.status == S.PUBLISHING and not stale:
            raise LifecycleError(f"{_key(scope, definition_id, version)} is being published by another node")
        if row.status not in (S.CANDIDATE, S.PUBLISHING):
            raise LifecycleError(f"{_key(scope, definition_id, version)} is {row.status}, not CANDIDATE")
        row.status, row.claim_token, row.claimed_at = S.PUBLISHING, token, timezone.now()
        row.save(update_fields=["status", "claim_token", "claimed_at", "updated_at"])
    try:
        plan = build_row(row)
    except BaseException:
        _release(row.pk, token)
        raise
    with transaction.atomic():
        store.lock_definition_id(definition_id)
        done = DefinitionVersion.objects.filter(pk=row.pk, status=S.PUBLISHING, claim_token=token).update(
            status=S.AVAILABLE,
            claim_token=None,
            claimed_at=None,
            published_at=timezone.now(),
            signal_names=list(plan.signal_names),
            start_schema=plan.start_schema,
            updated_at=timezone.now(),
        )
        if not done:
            current = DefinitionVersion.objects.get(pk=row.pk)
            if current.status == S.AVAILABLE and current.plan_hash == plan.plan_hash:
                return store.record(current)  # another publisher won with the same plan
            raise LifecycleError(f"the publication claim on {_key(scope, definition_id, version)} was lost")
        if activate_default and scope == DEFAULT_SCOPE and row.activate_on_deploy:
            _activate_if_higher(definition_id, version)
        return store.record(DefinitionVersion.objects.get(pk=row.pk))


def _release(pk: int, token: uuid.UUID) -> None:
    with transaction.atomic():
        DefinitionVersion.objects.filter(pk=pk, status=S.PUBLISHING, claim_token=token).update(
            status=S.CANDIDATE, claim_token=None, claimed_at=None, updated_at=timezone.now()
        )


def _activate_if_higher(definition_id: str, version: int) -> None:
    """First publication of a packaged version: the default record moves up, never down."""
    current = store.current_activation(DEFAULT_SCOPE, definition_id)
    if current is None:
        Activation.objects.create(
            scope=DEFAULT_SCOPE, definition_id=definition_id, target_scope=DEFAULT_SCOPE, version=version
        )
    elif current.target_scope == DEFAULT_SCOPE and current.version < version:
        current.version = version
        current.save(update_fields=["version", "updated_at"])


def reset_stale_claims() -> int:
    """PUBLISHING rows whose claim is older than the timeout go back to CANDIDATE (any scope)."""
    timeout = conf.get().DEFINITIONS.PUBLICATION_CLAIM_TIMEOUT_SECONDS
    cutoff = timezone.now() - timedelta(seconds=timeout)
    return (
        DefinitionVersion.objects.filter(status=S.PUBLISHING)
        .filter(Q(claimed_at__lt=cutoff) | Q(claimed_at=None))
        .update(status=S.CANDIDATE, claim_token=None, claimed_at=None, updated_at=timezone.now())
    )


# --- deprecate / retire / reinstate ----------------------------------------------------------


def _refuse_default_current(scope: str, definition_id: str, version: int, operation: str) -> None:
    if store.is_default_current(scope, definition_id, version):
        raise LifecycleError(
            f"{_key(scope, definition_id, version)} is the default scope's current version: activate another "
            f"version or deactivate the default before you {operation} it"
        )


def deprecate(*, scope: str, definition_id: str, version: int) -> store.DefinitionRecord:
    """AVAILABLE -> DEPRECATED (already DEPRECATED: accepted). New starts and migrations to it
    are refused with DEPRECATED; pinned runs keep running. Refuses: DEFINITION_MISSING,
    INVALID_TRANSITION (other status, or the default scope's current version)."""
    scope = store.check_scope(scope)
    store.check_definition_id(definition_id)
    store.check_version(version)
    with transaction.atomic():
        store.lock_definition_id(definition_id)
        row = store.get(scope, definition_id, version, for_update=True)
        if row.status == S.DEPRECATED:
            return store.record(row)
        if row.status != S.AVAILABLE:
            raise LifecycleError(f"{_key(scope, definition_id, version)} is {row.status}; only AVAILABLE deprecates")
        _refuse_default_current(scope, definition_id, version, "deprecate")
        row.status = S.DEPRECATED
        row.save(update_fields=["status", "updated_at"])
        return store.record(row)


def retire(*, scope: str, definition_id: str, version: int) -> store.DefinitionRecord:
    """CANDIDATE -> RETIRED, or DEPRECATED -> RETIRED once no PENDING, RUNNING, WAITING or
    COMPENSATING run is pinned to it (checked in the same transaction). Only this row changes.
    Refuses: DEFINITION_MISSING, PINNED_INSTANCES, INVALID_TRANSITION (any other status, or the
    default scope's current version)."""
    scope = store.check_scope(scope)
    store.check_definition_id(definition_id)
    store.check_version(version)
    with transaction.atomic():
        store.lock_definition_id(definition_id)
        row = store.get(scope, definition_id, version, for_update=True)
        if row.status not in (S.CANDIDATE, S.DEPRECATED):
            raise LifecycleError(
                f"{_key(scope, definition_id, version)} is {row.status}; only CANDIDATE or DEPRECATED retires"
            )
        _refuse_default_current(scope, definition_id, version, "retire")
        if row.status == S.DEPRECATED and store.live_pins(scope, definition_id, version):
            raise PinnedInstances(f"live runs are pinned to {_key(scope, definition_id, version)}")
        row.status = S.RETIRED
        row.save(update_fields=["status", "updated_at"])
        return store.record(row)


def reinstate(*, scope: str, definition_id: str, version: int) -> store.DefinitionRecord:
    """RETIRED or DEPRECATED -> AVAILABLE. A retired document must still build from its stored
    text to the stored plan hash. Refuses: DEFINITION_MISSING, DRIFT (the rebuilt hash or key
    differs), LOADER_MISSING (no loader for the row), INVALID_TRANSITION (any other status),
    DEFINITION_INVALID (the stored text no longer compiles), NODE_ROLE."""
    scope = store.check_scope(scope)
    store.check_definition_id(definition_id)
    store.check_version(version)
    _require_executor_role("reinstate")
    row = store.get(scope, definition_id, version)
    if row.status not in (S.RETIRED, S.DEPRECATED):
        raise LifecycleError(
            f"{_key(scope, definition_id, version)} is {row.status}; only RETIRED or DEPRECATED reinstates"
        )
    if row.status == S.RETIRED:
        try:
            build_row(row)  # the source first, with no transaction held
        except DefinitionError as error:
            if error.code == "DRIFT":
                raise Drift(error.message, violations=error.violations) from None
            if error.code == "LOADER_MISSING":
                raise LoaderMissing(error.message) from None
            raise
    with transaction.atomic():
        store.lock_definition_id(definition_id)
        current = store.get(scope, definition_id, version, for_update=True)
        if current.status not in (S.RETIRED, S.DEPRECATED) or current.plan_hash != row.plan_hash:
            raise LifecycleError(f"{_key(scope, definition_id, version)} changed while it was being reinstated")
        current.status = S.AVAILABLE
        current.save(update_fields=["status", "updated_at"])
        return store.record(current)


# --- activation records ----------------------------------------------------------------------


def activate(
    *, scope: str, definition_id: str, version: int, target_scope: str | None = None, updated_by: str = ""
) -> store.ActivationRecord:
    """Make ``version`` of ``target_scope`` what a start without a version runs in ``scope``,
    replacing the scope's record. ``target_scope`` is the scope itself or the default scope
    (the default scope may target only itself); defaults to ``scope``. Refuses:
    INVALID_ARGUMENT (scope combination), INVALID_TRANSITION (the target is not AVAILABLE in the
    target scope), CONTRACT_MISMATCH (a default-scope target of another contract than the
    scope's own versions)."""
    scope = store.check_scope(scope)
    target_scope = store.check_scope(target_scope or scope)
    store.check_definition_id(definition_id)
    store.check_version(version)
    if target_scope not in (scope, DEFAULT_SCOPE):
        raise InvalidArgument("the target scope must be the scope itself or the default scope")
    with transaction.atomic():
        store.lock_definition_id(definition_id)
        target = store.find(target_scope, definition_id, version)
        if target is None or target.status != S.AVAILABLE:
            raise LifecycleError(f"{_key(target_scope, definition_id, version)} is not AVAILABLE")
        if scope != target_scope:
            other = (
                DefinitionVersion.objects.filter(scope=scope, definition_id=definition_id)
                .exclude(contract=target.contract)
                .exists()
            )
            if other:
                raise ContractMismatch(f"the scope's own versions of {named(definition_id)} name another contract")
        found, _created = Activation.objects.update_or_create(
            scope=scope,
            definition_id=definition_id,
            defaults={"target_scope": target_scope, "version": version, "updated_by": updated_by[:255]},
        )
        return store.activation_record(found)


def follow(*, scope: str, definition_id: str) -> None:
    """Remove a non-default scope's record so its starts follow the default scope again (an
    absent record is accepted). Refuses INVALID_ARGUMENT for the default scope."""
    scope = store.check_scope(scope)
    store.check_definition_id(definition_id)
    if scope == DEFAULT_SCOPE:
        raise InvalidArgument("the default scope follows nothing; use deactivate_default")
    with transaction.atomic():
        store.lock_definition_id(definition_id)
        Activation.objects.filter(scope=scope, definition_id=definition_id).delete()


def deactivate_default(*, definition_id: str) -> None:
    """Clear the default scope's record (absent: accepted). Starts without a version then fail
    with NO_CURRENT_VERSION in every scope that follows the default."""
    store.check_definition_id(definition_id)
    with transaction.atomic():
        store.lock_definition_id(definition_id)
        Activation.objects.filter(scope=DEFAULT_SCOPE, definition_id=definition_id).delete()


def activations(*, scope: str | None = None) -> list[store.ActivationRecord]:
    """The activation records of ``scope``, or of every scope when None."""
    rows = Activation.objects.all()
    if scope is not None:
        rows = rows.filter(scope=store.check_scope(scope))
    return [store.activation_record(r) for r in rows.order_by("scope", "definition_id")]


# --- failure marks ---------------------------------------------------------------------------

FAILURE_RULES = ("STATE_TYPE_NOT_EXTENDED", "NAME_BINDING_UNRESOLVED")


def record_failure(*, scope: str, definition_id: str, version: int, failure: str | None) -> bool:
    """Write (or with None clear) the failure mark of a non-default scope's row, in a statement of
    its own: the executor calls it after a segment or deferral, never inside one. A RETIRED row
    and every default-scope row are never marked. The mark feeds listings only and refuses
    nothing. Answers whether a row changed."""
    scope = store.check_scope(scope)
    store.check_definition_id(definition_id)
    store.check_version(version)
    if failure is not None and failure not in FAILURE_RULES:
        raise InvalidArgument(f"failure must be one of {', '.join(FAILURE_RULES)}")
    if scope == DEFAULT_SCOPE:
        return False
    changed = (
        DefinitionVersion.objects.filter(scope=scope, definition_id=definition_id, version=version)
        .exclude(status=S.RETIRED)
        .exclude(failure=failure or "")
        .update(failure=failure or "", updated_at=timezone.now())
    )
    return bool(changed)


# --- reads -----------------------------------------------------------------------------------


def list_versions(
    *, scope: str | None = None, definition_id: str | None = None, status: str | Iterable[str] | None = None
) -> list[store.DefinitionRecord]:
    """Metadata of stored versions (never the text), by scope, id, version."""
    rows = DefinitionVersion.objects.defer("text", "state_schema", "start_schema", "contract_signals")
    if scope is not None:
        rows = rows.filter(scope=store.check_scope(scope))
    if definition_id is not None:
        rows = rows.filter(definition_id=definition_id)
    if status is not None:
        rows = rows.filter(status__in=[status] if isinstance(status, str) else list(status))
    return [store.record(r) for r in rows.order_by("scope", "definition_id", "version")]


def source_metadata(*, scope: str, definition_id: str, version: int) -> store.SourceMetadata:
    """Attribution of a stored version, without its text. Refuses DEFINITION_MISSING."""
    scope = store.check_scope(scope)
    store.check_definition_id(definition_id)
    store.check_version(version)
    return store.source_metadata(store.get(scope, definition_id, version))


def next_version(*, scope: str, definition_id: str) -> int:
    """One more than the highest version of the id in the scope (any status), or 1."""
    scope = store.check_scope(scope)
    store.check_definition_id(definition_id)
    top = DefinitionVersion.objects.filter(scope=scope, definition_id=definition_id).aggregate(m=Max("version"))["m"]
    return (top or 0) + 1


__all__ = [
    "activate",
    "activations",
    "build_row",
    "check_contract",
    "deactivate_default",
    "deprecate",
    "follow",
    "list_versions",
    "load",
    "next_version",
    "publish",
    "record_failure",
    "reinstate",
    "reset_stale_claims",
    "retire",
    "source_metadata",
]
