"""Failed sign-ins, counted per user name and per client address (see ``accounts.throttle``)."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class SignInFailures(models.Model):
    """One row per throttle key: the SHA-256 of ``user:<name>`` or ``address:<ip>``, so the
    table never holds what someone typed into the user name field."""

    key = models.CharField(max_length=64, primary_key=True)
    failures = models.PositiveIntegerField(default=0)
    window_started_at = models.DateTimeField()
    locked_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "accounts_sign_in_failures"
        verbose_name = _("failed sign-ins")
        verbose_name_plural = _("failed sign-ins")

    def __str__(self) -> str:
        return f"{self.failures} failed sign-ins"
