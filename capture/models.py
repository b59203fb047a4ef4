"""Captures: one row per model change a record trigger may care about.

A capture is written in the same transaction as the change (``capture/recording.py``) and
dispatched after commit (``capture/dispatch.py``). Its status moves only through the
transitions in ``dispatch.py`` and ``reconcile.py``, each a conditional ``UPDATE``:

    PENDING ──claim──► DISPATCHING ──(starts + status, one transaction)──► DISPATCHED
       ▲                 │  caught failure ──► FAILED (or OUTCOME_UNKNOWN when marked)
       │                 │  lease expired  ──► PENDING (unmarked) / OUTCOME_UNKNOWN (marked)
       └── reconcile(replay) ◄── FAILED / OUTCOME_UNKNOWN ──reconcile(resolve)──► RESOLVED

Every time that is compared (lease, availability, retention) is written on the database
clock, never the app's.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from workflows.models.fields import json_field


class CaptureStatus(models.TextChoices):
    PENDING = "PENDING", _("Pending")
    DISPATCHING = "DISPATCHING", _("Dispatching")
    DISPATCHED = "DISPATCHED", _("Dispatched")
    FAILED = "FAILED", _("Failed")
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN", _("Outcome Unknown")
    RESOLVED = "RESOLVED", _("Resolved")


UNRESOLVED = (CaptureStatus.FAILED, CaptureStatus.OUTCOME_UNKNOWN)


class CaptureEvent(models.TextChoices):
    CREATED = "created", _("Created")
    UPDATED = "updated", _("Updated")
    DELETED = "deleted", _("Deleted")


class Capture(models.Model):
    id = models.BigAutoField(primary_key=True)
    model = models.CharField(max_length=255, help_text=_("app_label.ModelName of the changed record"))
    object_pk = models.CharField(_("record key"), max_length=255)
    event = models.CharField(max_length=16, choices=CaptureEvent.choices)
    # Only the fields the triggers need (bounded: see recording.SNAPSHOT_MAX_BYTES).
    snapshot = json_field(null=True, blank=True)
    previous = json_field(null=True, blank=True)  # updates: the same fields before the change
    changed = json_field(default=list, blank=True)  # updates: names of the fields that changed
    actor_pk = models.CharField(_("acting user id"), max_length=255, blank=True, default="")
    actor_name = models.CharField(_("acting user"), max_length=150, blank=True, default="")
    registry_stamp = models.CharField(
        max_length=255,
        blank=True,
        default="",
        help_text=_("the triggers this process knew at capture time (diagnostic)"),
    )
    status = models.CharField(max_length=16, choices=CaptureStatus.choices, default=CaptureStatus.PENDING)
    claim_token = models.UUIDField(null=True, blank=True)
    claimed_by = models.CharField(max_length=255, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    available_at = models.DateTimeField(db_default=Now())
    # until when a dispatch message the sweep sent is presumed queued (NULL: the message sent
    # when it became available, presumed queued until available_at + MESSAGE_LEASE_SECONDS); a
    # claim consumes it. The sweep sends another only after that (at most one queued).
    enqueued_until = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=1000, blank=True, default="")
    effect_started_at = models.DateTimeField(_("effect marker"), null=True, blank=True)
    runs_started = json_field(default=list, blank=True)  # ids of the runs the dispatch recorded
    runs_cancelled = json_field(default=list, blank=True)  # ids of the runs a deletion tore down
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    dispatched_at = models.DateTimeField(null=True, blank=True)
    reconciled_by = models.CharField(max_length=150, blank=True, default="")
    reconciled_at = models.DateTimeField(null=True, blank=True)
    reconcile_reason = models.CharField(max_length=1000, blank=True, default="")
    replayed = models.BooleanField(
        null=True, blank=True, help_text=_("the last reconcile: replay (yes) or resolve (no)")
    )
    replays = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = _("capture")
        verbose_name_plural = _("captures")
        db_table = "capture_captures"
        ordering = ("-id",)
        permissions = [("reconcile_capture", "Can reconcile captures (replay or resolve)")]
        indexes = [
            models.Index(fields=["available_at"], name="capture_pending", condition=models.Q(status="PENDING")),
            models.Index(fields=["lease_until"], name="capture_claimed", condition=models.Q(status="DISPATCHING")),
            models.Index(fields=["status", "created_at"], name="capture_by_status"),
            models.Index(fields=["model", "object_pk"], name="capture_by_record"),
        ]

    def __str__(self) -> str:
        return f"capture {self.pk}: {self.model} {self.object_pk} {self.event}"

    @property
    def unresolved(self) -> bool:
        return self.status in UNRESOLVED


class EffectMarker(models.Model):
    """Committed on a second connection before a dispatch effect runs (see ``capture/effects.py``).

    It survives the dispatch transaction: a dispatch that ends without committing, while a
    marker of its claim exists, may have had its effect, so it is OUTCOME_UNKNOWN, never
    replayed by itself.
    """

    capture = models.ForeignKey(Capture, on_delete=models.CASCADE, related_name="effect_markers")
    token = models.UUIDField()
    effect = models.CharField(max_length=255)
    started_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "capture_effect_markers"
        indexes = [models.Index(fields=["capture", "token"], name="capture_marker_by_claim")]

    def __str__(self) -> str:
        return f"effect {self.effect} of capture {self.capture_id}"
