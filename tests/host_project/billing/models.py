"""The host's own record: invoices over the limit need a review (billing/workflows/)."""

from django.db import models


class Invoice(models.Model):
    number = models.CharField(max_length=32, unique=True)
    customer = models.CharField(max_length=150)
    amount = models.DecimalField(max_digits=12, decimal_places=2)

    def __str__(self) -> str:
        return self.number
