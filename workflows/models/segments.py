from __future__ import annotations

from django.db import models


class SegmentLog(models.Model):
    """One committed segment: when it held the run's execution lock and with which claim.

    Reliability instrumentation, written only when ``SWITCHYARD_SEGMENT_LOG=1`` (see
    ``workflows.engine.faults``), inside the segment's own transaction: a segment that rolls
    back (fenced, failed, killed) leaves no row. ``started_at`` is taken after the lock and the
    fence, ``committed_at`` just before the fenced settlement, both on the database clock, so
    the intervals of one run's segments must never overlap. ``claim_current`` says whether the
    command was still CLAIMED with this token as far as committed data showed at that moment.
    """

    id = models.BigAutoField(primary_key=True)
    run_id = models.UUIDField()
    command_id = models.BigIntegerField()
    token = models.UUIDField()
    executor_id = models.CharField(max_length=255, blank=True, default="")
    started_at = models.DateTimeField()
    committed_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, blank=True, default="")
    claim_current = models.BooleanField(default=False)

    class Meta:
        db_table = "workflow_segment_log"
        indexes = [models.Index(fields=["run_id", "started_at"], name="workflow_segment_by_run")]

    def __str__(self) -> str:
        return f"segment of command {self.command_id}"
