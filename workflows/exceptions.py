"""The exception hierarchy. Each error carries a stable ``code``, an HTTP ``status`` for the
API's problem+json mapping, ``retryable`` and value-free ``violations``.

Messages are framework-composed text: they may name a definition id, a version, a step, a
signal name or a field pointer, but never a submitted value, exception text or class name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Violation:
    """One value-free problem: an RFC 6901 pointer, a type (schema keyword...) and a message.

    In a definition document, ``line`` and ``column`` (1-based) say where in the source text;
    a CEL problem also has ``expression_column``, the 1-based character in the expression."""

    pointer: str
    type: str
    message: str
    line: int | None = None
    column: int | None = None
    expression_column: int | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"pointer": self.pointer, "type": self.type, "message": self.message}
        if self.line is not None:
            data["line"] = self.line
        if self.column is not None:
            data["column"] = self.column
        if self.expression_column is not None:
            data["expressionColumn"] = self.expression_column
        return data


class WorkflowError(Exception):
    code = "WORKFLOW_ERROR"
    status = 400
    retryable = False
    title = "Workflow error"

    def __init__(self, message: str = "", *, violations: list[Violation] | None = None, code: str | None = None):
        super().__init__(message or self.title)
        self.message = message or self.title
        self.violations: list[Violation] = list(violations or [])
        if code:
            self.code = code


class InvalidPayload(WorkflowError):
    code = "INVALID_PAYLOAD"
    title = "Invalid payload"


class IdempotencyConflict(WorkflowError):
    code = "IDEMPOTENCY_CONFLICT"
    status = 409
    title = "Idempotency key reused with another request"


class InstanceNotFound(WorkflowError):
    code = "INSTANCE_NOT_FOUND"
    status = 404
    title = "Run not found"


class TaskNotFound(WorkflowError):
    code = "TASK_NOT_FOUND"
    status = 404
    title = "Task not found"


class TaskNotWaiting(WorkflowError):
    code = "TASK_NOT_WAITING"
    status = 409
    title = "Task is not waiting for a decision"


class SignalRejected(WorkflowError):
    code = "SIGNAL_REJECTED"
    status = 409
    title = "Signal rejected"


class SignalLimit(WorkflowError):
    code = "SIGNAL_LIMIT"
    status = 429
    title = "Too many open signals for this run"


class MigrationIllegalState(WorkflowError):
    code = "MIGRATION_ILLEGAL_STATE"
    status = 409
    title = "Migration refused"


class RunsInOpenMigration(MigrationIllegalState):
    """Selected runs are frozen in another migration that is not over (previewed, applying or
    paused): a run belongs to one open migration at a time."""

    code = "RUNS_IN_OPEN_MIGRATION"
    title = "Runs already in an open migration"

    def __init__(self, message: str = "", *, record_id: int | None = None, runs: int = 0, status: str = ""):
        super().__init__(message)
        self.record_id = record_id
        self.runs = runs
        self.record_status = status


class LockTimeout(WorkflowError):
    """The run was busy for longer than LOCK_TIMEOUT_MS: retry the whole transaction."""

    code = "LOCK_TIMEOUT"
    status = 503
    retryable = True
    title = "Run is busy; retry"


class PersistenceError(WorkflowError):
    """A database failure. Transient ones (connection loss, lock timeout, deadlock,
    serialization) are retryable (503); any other is a technical failure (``technical``: 500,
    not retryable), which a retry of the same transaction would meet again."""

    code = "PERSISTENCE"
    status = 503
    retryable = True
    title = "Database failure"  # one title for both kinds: a problem type has one title

    @classmethod
    def technical(cls, message: str) -> PersistenceError:
        error = cls(message)
        error.retryable = False
        error.status = 500
        return error


class NodeRoleError(WorkflowError):
    code = "NODE_ROLE"
    status = 409
    title = "Not available on a recording-only node"


# --- definitions --------------------------------------------------------------------------


class DefinitionError(WorkflowError):
    """A document that does not parse, validate or compile (every violation listed)."""

    code = "DEFINITION_INVALID"
    status = 422
    title = "Invalid definition"


class UnknownTypeName(DefinitionError):
    code = "UNKNOWN_TYPE_NAME"
    title = "Unknown name"


class ContractMismatch(DefinitionError):
    code = "CONTRACT_MISMATCH"
    status = 409
    title = "Contract mismatch"


class DefinitionMissing(WorkflowError):
    code = "DEFINITION_MISSING"
    status = 404
    title = "Definition not found"


class NoCurrentVersion(WorkflowError):
    code = "NO_CURRENT_VERSION"
    status = 422
    title = "No current version"


class VersionNotRunnable(WorkflowError):
    code = "VERSION_NOT_RUNNABLE"
    status = 422
    title = "Version not runnable"


class LifecycleError(WorkflowError):
    """A refused lifecycle transition; ``code`` is the reference's reason."""

    code = "INVALID_TRANSITION"
    status = 409
    title = "Transition refused"  # INVALID_TRANSITION: one title, whatever refused it


class Deprecated(LifecycleError):
    code = "DEPRECATED"
    title = "Version is deprecated"


class PinnedInstances(LifecycleError):
    code = "PINNED_INSTANCES"
    title = "Live runs are pinned to this version"


# --- definitions: additions ---------------------------------------------------------------


class InvalidArgument(WorkflowError, ValueError):
    """An argument that can never be valid (blank scope key, control characters, version < 1)."""

    code = "INVALID_ARGUMENT"
    status = 400
    title = "Invalid argument"


class ExpressionFailed(WorkflowError):
    """A CEL expression or template failed at evaluation (missing key, type mismatch, budget)."""

    code = "EXPRESSION_FAILED"
    status = 422
    title = "Expression failed"
    # which part of the field failed, appended to the field's name: ``.total`` (an entry of a
    # ``set`` map), `` placeholder 2`` (of a template); never a value
    where = ""


class Drift(LifecycleError):
    code = "DRIFT"
    title = "Stored definition drifted from its compiled plan"


class LoaderMissing(LifecycleError):
    code = "LOADER_MISSING"
    title = "No loader for the stored document"


# --- run viewer and administration -----------------------------------------------------------


class NotPermitted(WorkflowError):
    """The caller lacks the permission an administrative operation needs."""

    code = "NOT_PERMITTED"
    status = 403
    title = "Not permitted"


class CommandNotFound(WorkflowError):
    code = "COMMAND_NOT_FOUND"
    status = 404
    title = "Command not found"


class CommandNotReconcilable(WorkflowError):
    """Only an OUTCOME_UNKNOWN command can be reconciled (and resolved only with its marker)."""

    code = "COMMAND_NOT_RECONCILABLE"
    status = 409
    title = "Command cannot be reconciled"


class AlreadyMovedOn(WorkflowError):
    """A confirmed cancel found the run resumed (by an approver, a signal or a timer) since
    the confirmation was shown: the run is left alone."""

    code = "ALREADY_MOVED_ON"
    status = 409
    title = "The run has already moved on"


# --- permissions and assignments ---------------------------------------------------------------


class AssigneeNotFound(WorkflowError):
    """A task reassigned to a user that does not exist or is inactive, or to a group that does
    not exist: nobody could ever act on it, so the assignment is refused."""

    code = "ASSIGNEE_NOT_FOUND"
    status = 422
    title = "No such active user or group"


# --- conditional writes and business keys ----------------------------------------------------


class StateVersionMismatch(WorkflowError):
    """A write conditioned on the run's state version (the API's ``If-Match``) found another
    one under the run's lock: nothing was recorded."""

    code = "STATE_VERSION_MISMATCH"
    status = 412
    title = "The run's state version does not match"


class BusinessKeyAmbiguous(WorkflowError):
    """More than one open run of a definition carries the business key a call addressed
    (keys are not unique among runs): address the run by its id."""

    code = "BUSINESS_KEY_AMBIGUOUS"
    status = 409
    title = "More than one open run has this business key"


class WebhookNotFound(WorkflowError):
    """No webhook subscription (or delivery of one) has this id."""

    code = "WEBHOOK_NOT_FOUND"
    status = 404
    title = "Webhook not found"


class DeliveryInFlight(WorkflowError):
    """A delivery being attempted right now cannot be redelivered; ask again once it settled."""

    code = "DELIVERY_IN_FLIGHT"
    status = 409
    title = "Delivery in flight"
