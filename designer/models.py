"""The designer's one table: each user's allowance of live checks.

The live check compiles a whole document on every pause in typing; it is rate-limited per
user in the database (the site's cache is per process, so a cache-based counter would give
every web process its own allowance).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class CheckAllowance(models.Model):
    """Live checks a user made in the current one-minute window (see ``services.take_check``)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="+")
    window_start = models.DateTimeField()
    used = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = "live-check allowance"

    def __str__(self) -> str:
        return f"live checks of user {self.user_id}: {self.used} since {self.window_start:%H:%M:%S}"
