from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from workflows.models.actors import ActorColumns
from workflows.models.fields import json_field


class CommandKind(models.TextChoices):
    START = "START", _("Start")
    SIGNAL = "SIGNAL", _("Signal")
    COMPLETION = "COMPLETION", _("Completion")
    TIMER = "TIMER", _("Timer")
    RETRY = "RETRY", _("Retry")
    MIGRATION = "MIGRATION", _("Migration")
    RESUME = "RESUME", _("Resume")  # a called (child) run ended: resume its caller at the call step


class TimerKind(models.TextChoices):
    FIRE = "FIRE", _("Fire")
    TIMEOUT = "TIMEOUT", _("Timeout")
    DUE = "DUE", _("Due")
    REMINDER = "REMINDER", _("Reminder")


class CommandStatus(models.TextChoices):
    PENDING = "PENDING", _("Pending")
    DEFERRED = "DEFERRED", _("Deferred")
    CLAIMED = "CLAIMED", _("Claimed")
    COMPLETE = "COMPLETE", _("Complete")
    PARKED = "PARKED", _("Parked")
    REJECTED = "REJECTED", _("Rejected")
    STALE = "STALE", _("Stale")
    FAILED = "FAILED", _("Failed")
    DEAD = "DEAD", _("Dead")
    CANCELLED = "CANCELLED", _("Cancelled")
    SUPERSEDED = "SUPERSEDED", _("Superseded")
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN", _("Outcome Unknown")


UNSETTLED = (CommandStatus.PENDING, CommandStatus.DEFERRED, CommandStatus.CLAIMED)


class Command(ActorColumns):
    """A recorded command in a run's queue.

    ``order_at`` orders the queue: a timer counts from its ``fire_at`` and every other
    command from when it was recorded (``clock_timestamp()`` under the execution lock), so
    a timer before its fire time blocks nothing and a signal recorded before a timeout's
    fire time runs ahead of it. ``seq`` breaks ties and is the command's position.
    """

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(
        "workflows.Run",
        on_delete=models.CASCADE,
        related_name="commands",
        db_index=False,  # (run, seq) is unique: that index serves every look-up by run
    )
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=CommandKind.choices)
    timer_kind = models.CharField(max_length=8, choices=TimerKind.choices, blank=True, default="")
    status = models.CharField(max_length=16, choices=CommandStatus.choices, default=CommandStatus.PENDING)
    payload = json_field(null=True, blank=True)
    target = json_field(null=True, blank=True)  # signal name/branch, task, timer wait, migration target
    task_id = models.UUIDField(null=True, blank=True)  # COMPLETION and DUE/REMINDER: the task they concern
    timer_id = models.BigIntegerField(null=True, blank=True)
    dedup_key = models.CharField(max_length=255, blank=True, default="")
    fingerprint = models.CharField(max_length=64, blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    transient_count = models.PositiveIntegerField(default=0)
    deferral_count = models.PositiveIntegerField(default=0)
    recorded_at = models.DateTimeField()
    order_at = models.DateTimeField()
    available_at = models.DateTimeField()
    fire_at = models.DateTimeField(null=True, blank=True)
    settled_at = models.DateTimeField(null=True, blank=True)
    token = models.UUIDField(null=True, blank=True)
    claimed_by = models.CharField(max_length=255, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=4000, blank=True, default="")
    context = json_field(null=True, blank=True)
    was_parked = models.BooleanField(default=False)
    reconciled_by = models.CharField(max_length=255, blank=True, default="")
    reconciled_at = models.DateTimeField(null=True, blank=True)
    reconcile_reason = models.CharField(max_length=1000, blank=True, default="")
    reconcile_action = models.CharField(max_length=16, blank=True, default="")

    class Meta:
        verbose_name = _("command")
        verbose_name_plural = _("commands")
        db_table = "workflow_commands"
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="workflow_command_position")]
        indexes = [
            # claimable candidates: only what is due now is in this index
            models.Index(
                fields=["available_at"],
                name="workflow_cmd_due",
                condition=models.Q(status__in=["PENDING", "DEFERRED"]),
            ),
            # the head rule: earlier unsettled commands of the same run
            models.Index(
                fields=["run", "order_at", "seq"],
                name="workflow_cmd_unsettled",
                condition=models.Q(status__in=["PENDING", "DEFERRED", "CLAIMED"]),
            ),
            models.Index(fields=["lease_until"], name="workflow_cmd_leases", condition=models.Q(status="CLAIMED")),
            models.Index(
                fields=["status", "recorded_at"],
                name="workflow_cmd_attention",
                condition=models.Q(status__in=["DEAD", "OUTCOME_UNKNOWN", "PARKED", "FAILED"]),
            ),
            models.Index(fields=["task_id"], name="workflow_cmd_task", condition=models.Q(task_id__isnull=False)),
            models.Index(
                fields=["settled_at"], name="workflow_cmd_settled", condition=models.Q(settled_at__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.seq} of {self.run_id}"


class EffectMarker(models.Model):
    """Committed on a second connection before an email/agent/script effect runs.

    A segment interrupted after its marker leaves the command OUTCOME_UNKNOWN: the effect
    may have happened, so it is never replayed automatically.
    """

    command = models.ForeignKey(Command, on_delete=models.CASCADE, related_name="effect_markers")
    run_id = models.UUIDField()
    token = models.UUIDField()
    step = models.CharField(max_length=255)
    started_at = models.DateTimeField()

    class Meta:
        db_table = "workflow_effect_markers"
        indexes = [models.Index(fields=["command", "token"], name="workflow_marker_claim")]

    def __str__(self) -> str:
        return f"effect at {self.step} of command {self.command_id}"


class Dedup(models.Model):
    """Idempotency claims: (kind, scope, key) -> fingerprint and the recorded result."""

    kind = models.CharField(max_length=16)  # START / SIGNAL / COMPLETION / REASSIGN / SERVICE / CAPTURE
    scope = models.CharField(max_length=600)  # start scope+definition id, run(+branch), task ...
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    run_id = models.UUIDField(null=True, blank=True)
    command_id = models.BigIntegerField(null=True, blank=True)
    result = json_field(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "workflow_dedup"
        constraints = [models.UniqueConstraint(fields=["kind", "scope", "key"], name="workflow_dedup_key")]
        # the expiry of idempotency keys (RETENTION.IDEMPOTENCY_KEYS_DAYS), and the purge's
        # look-up of a purged run's keys
        indexes = [
            models.Index(fields=["created_at"], name="workflow_dedup_age"),
            models.Index(fields=["run_id"], name="workflow_dedup_run", condition=models.Q(run_id__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.kind} key of {self.scope}"


class Timer(models.Model):
    class Status(models.TextChoices):
        SCHEDULED = "SCHEDULED", _("Scheduled")
        FIRED = "FIRED", _("Fired")
        CANCELLED = "CANCELLED", _("Cancelled")
        FAILED = "FAILED", _("Failed")
        STALE = "STALE", _("Stale")

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(
        "workflows.Run",
        on_delete=models.CASCADE,
        related_name="timers",
        db_index=False,  # (run, status) serves it
    )
    command_id = models.BigIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=8, choices=TimerKind.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.SCHEDULED)
    step = models.CharField(max_length=255)
    branch_id = models.CharField(max_length=255, blank=True, default="")
    task_id = models.UUIDField(null=True, blank=True)
    fire_at = models.DateTimeField()
    interval_seconds = models.FloatField(null=True, blank=True)  # recurring reminders
    context = json_field(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "workflow_timers"
        indexes = [
            models.Index(fields=["run", "status"], name="workflow_timer_by_run"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} timer at {self.step}"


class OutboxIntent(models.Model):
    """A side effect a segment decided on, delivered after commit (at least once)."""

    class Status(models.TextChoices):
        PENDING = "PENDING", _("Pending")
        DELIVERING = "DELIVERING", _("Delivering")
        DELIVERED = "DELIVERED", _("Delivered")
        FAILED = "FAILED", _("Failed")
        DEAD = "DEAD", _("Dead")

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey("workflows.Run", on_delete=models.CASCADE, related_name="intents")
    command_id = models.BigIntegerField(null=True, blank=True)
    step = models.CharField(max_length=255, blank=True, default="")
    kind = models.CharField(max_length=16)  # SERVICE / COMPENSATION / EVENT / NOTIFY / DIGEST / RESUME
    target = models.CharField(max_length=2048)
    payload = json_field(null=True, blank=True)
    headers = json_field(default=dict)
    idempotency_key = models.CharField(max_length=255)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    available_at = models.DateTimeField()
    token = models.UUIDField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=4000, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # Until when a delivery message sent by the sweep is presumed queued (its lease; NULL:
    # the message sent after the intent's commit, presumed queued until created_at +
    # EXECUTOR.MESSAGE_LEASE_SECONDS). A claim consumes it (set to the claim's time); the sweep
    # sends another only for a due intent whose message is not presumed queued any more.
    enqueued_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "workflow_outbox"
        constraints = [models.UniqueConstraint(fields=["idempotency_key"], name="workflow_outbox_key")]
        indexes = [
            models.Index(
                fields=["available_at"],
                name="workflow_outbox_due",
                condition=models.Q(status__in=["PENDING", "DELIVERING"]),
            ),
            # a webhook subscription's deliveries (target: the subscription's id), newest first
            models.Index(
                fields=["target", "-id"], name="workflow_outbox_event_target", condition=models.Q(kind="EVENT")
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} intent {self.id}"
