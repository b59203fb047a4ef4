from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class ActorKind(models.TextChoices):
    USER = "USER", _("User")
    SERVICE = "SERVICE", _("Service")
    SYSTEM = "SYSTEM", _("System")
    NONE = "NONE", _("None")


class AttributionStatus(models.TextChoices):
    VERIFIED = "VERIFIED", _("Verified")
    ABSENT = "ABSENT", _("Absent")
    DEGRADED = "DEGRADED", _("Degraded")


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
