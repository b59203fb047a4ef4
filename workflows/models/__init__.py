from workflows.models.actors import ActorKind, AttributionStatus
from workflows.models.branches import Branch, BranchStatus, Join
from workflows.models.bulk import (
    OPEN_BULK_STATUSES,
    BulkAction,
    BulkItemStatus,
    BulkOperation,
    BulkOperationItem,
    BulkOperationStatus,
)
from workflows.models.commands import (
    Command,
    CommandKind,
    CommandStatus,
    Dedup,
    EffectMarker,
    OutboxIntent,
    Timer,
    TimerKind,
)
from workflows.models.definitions import Activation, DefinitionStatus, DefinitionVersion
from workflows.models.history import HistoryEntry
from workflows.models.migrations_log import MigrationItem, MigrationItemStatus, MigrationRecord, MigrationRecordStatus
from workflows.models.parks import Park, ParkCount, ParkKind
from workflows.models.runs import ENDED_STATUSES, LIVE_STATUSES, OPEN_STATUSES, Run, RunStatus, RunTotal
from workflows.models.segments import SegmentLog
from workflows.models.tasks import Task, TaskStatus
from workflows.models.webhooks import WebhookAttempt, WebhookDelivery, WebhookSubscription

__all__ = [
    "ENDED_STATUSES",
    "LIVE_STATUSES",
    "OPEN_BULK_STATUSES",
    "OPEN_STATUSES",
    "Activation",
    "ActorKind",
    "AttributionStatus",
    "Branch",
    "BranchStatus",
    "BulkAction",
    "BulkItemStatus",
    "BulkOperation",
    "BulkOperationItem",
    "BulkOperationStatus",
    "Command",
    "CommandKind",
    "CommandStatus",
    "Dedup",
    "DefinitionStatus",
    "DefinitionVersion",
    "EffectMarker",
    "HistoryEntry",
    "Join",
    "MigrationItem",
    "MigrationItemStatus",
    "MigrationRecord",
    "MigrationRecordStatus",
    "OutboxIntent",
    "Park",
    "ParkCount",
    "ParkKind",
    "Run",
    "RunStatus",
    "RunTotal",
    "SegmentLog",
    "Task",
    "TaskStatus",
    "Timer",
    "TimerKind",
    "WebhookAttempt",
    "WebhookDelivery",
    "WebhookSubscription",
]
