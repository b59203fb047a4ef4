from __future__ import annotations

from django.db import models


class ParkKind(models.TextChoices):
    SIGNAL = "SIGNAL"
    TIMER = "TIMER"
    TASK = "TASK"
    CALL = "CALL"
    JOIN = "JOIN"
    BRANCH = "BRANCH"


class Park(models.Model):
    """Where a run (or one of its branches) waits, since when, and how it left.

    Open parks (``left_at`` null) are the positions the Migrate dialog counts; a partial
    index keeps counting them independent of the number of ended runs.
    """

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(
        "workflows.Run", on_delete=models.CASCADE, related_name="parks", db_index=False  # (run, left_at) serves it
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
                fields=["definition_id", "scope", "version", "node", "kind"],
                name="workflow_park_positions",
                condition=models.Q(left_at__isnull=True),
                # covering: positions of the main path (branch_id = '') and their oldest park are
                # counted by an index-only scan, without visiting a run's or a park's row
                include=["branch_id", "since"],
            ),
            models.Index(fields=["run", "left_at"], name="workflow_park_by_run"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} park at {self.node}"
