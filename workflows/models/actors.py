from __future__ import annotations

from django.db import models


class ActorKind(models.TextChoices):
    USER = "USER"
    SERVICE = "SERVICE"
    SYSTEM = "SYSTEM"
    NONE = "NONE"


class AttributionStatus(models.TextChoices):
    VERIFIED = "VERIFIED"
    ABSENT = "ABSENT"
    DEGRADED = "DEGRADED"


class ActorColumns(models.Model):
    """Who asked for a command: taken once at recording, never from a payload."""

    actor_kind = models.CharField(max_length=8, choices=ActorKind.choices, default=ActorKind.NONE)
    actor_id = models.CharField(max_length=255, blank=True, default="")
    actor_reason = models.CharField(max_length=255, blank=True, default="")
    on_behalf_of = models.CharField(max_length=255, blank=True, default="")
    attribution_status = models.CharField(
        max_length=8, choices=AttributionStatus.choices, default=AttributionStatus.ABSENT
    )

    class Meta:
        abstract = True
