from __future__ import annotations

from django.db import models


class PurchaseOrder(models.Model):
    """A record of the demo shop: purchase orders above a limit need approval."""

    number = models.CharField(max_length=32, unique=True)
    requester = models.CharField(max_length=150)
    total = models.DecimalField(max_digits=12, decimal_places=2)
    description = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.number
