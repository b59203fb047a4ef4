from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class ParkKind(models.TextChoices):
    SIGNAL = "SIGNAL", _("Signal")
    TIMER = "TIMER", _("Timer")
    TASK = "TASK", _("Task")
    CALL = "CALL", _("Call")
    JOIN = "JOIN", _("Join")
    BRANCH = "BRANCH", _("Branch")


class Park(models.Model):
    """Where a run (or one of its branches) waits, since when, and how it left.

    Open parks (``left_at`` null) are the positions the Migrate dialog counts; a partial
    index keeps counting them independent of the number of ended runs.
    """

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(
        "workflows.Run",
        on_delete=models.CASCADE,
        related_name="parks",
        db_index=False,  # (run, left_at) serves it
    )
    scope = models.CharField(max_length=255)
    definition_id = models.CharField(max_length=255)
    version = models.PositiveIntegerField()
    node = models.CharField(max_length=255)
    kind = models.CharField(max_length=8, choices=ParkKind.choices)
    branch_id = models.CharField(max_length=255, blank=True, default="")
    since = models.DateTimeField()
    left_at = models.DateTimeField(null=True, blank=True)
    left_how = models.CharField(max_length=16, blank=True, default="")  # signal/decision/timer/moved/cancelled/ended
    moved_to_version = models.PositiveIntegerField(null=True, blank=True)
    moved_to_scope = models.CharField(max_length=255, blank=True, default="")
    moved_to_node = models.CharField(max_length=255, blank=True, default="")
    moved_by = models.CharField(max_length=255, blank=True, default="")
    migration_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "workflow_parks"
        indexes = [
            models.Index(
                fields=["definition_id", "scope", "version", "node", "kind", "since"],
                name="workflow_park_open",
                condition=models.Q(left_at__isnull=True, branch_id=""),
                # the open main-path parks of a position in waiting order: a position's oldest
                # park is its first entry, a page of the run picker a range of it
            ),
            models.Index(fields=["run", "left_at"], name="workflow_park_by_run"),
            # the stuck-run radar: every open park (branches too), and each position's latest
            # closed waits (its threshold), without reading the closed parks of every run
            models.Index(
                fields=["definition_id", "node"], name="workflow_park_waiting", condition=models.Q(left_at__isnull=True)
            ),
            models.Index(
                fields=["definition_id", "node", "left_at"],
                name="workflow_park_closed",
                condition=models.Q(left_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} park at {self.node}"


class ParkCount(models.Model):
    """How many main-path parks are open per position, kept by a trigger on ``workflow_parks``
    (migration 0008): every open adds one, every close or delete takes one away, in the same
    transaction. A position's count is the sum over its stripes (the stripe is the writing
    backend's pid modulo 16, so concurrent workers rarely wait on the same row), so the Migrate
    dialog counts a position in constant time whatever the backlog."""

    id = models.BigAutoField(primary_key=True)
    definition_id = models.CharField(max_length=255)
    scope = models.CharField(max_length=255)
    version = models.PositiveIntegerField()
    node = models.CharField(max_length=255)
    kind = models.CharField(max_length=8, choices=ParkKind.choices)
    stripe = models.SmallIntegerField()
    runs = models.BigIntegerField(default=0)

    class Meta:
        db_table = "workflow_park_counts"
        constraints = [
            models.UniqueConstraint(
                fields=["definition_id", "scope", "version", "node", "kind", "stripe"], name="workflow_park_count_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.runs} at {self.node} (stripe {self.stripe})"
