"""The link from a run to the record it is about: its page in the Django admin.

A run's subject names its record as ``{"type": "app_label.modelname", "id": pk}`` (the
convention of record triggers, docs/triggers.md). The link is drawn only when the type is an
installed model registered in the admin and the user may open that page there (``is_staff``
and the model's view or change permission); any other subject stays plain text.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.apps import apps
from django.contrib import admin
from django.urls import NoReverseMatch, reverse

register = template.Library()


@register.simple_tag
def record_url(run: Any, user: Any) -> str:
    """The admin change page of the run's record, or "" when there is none to open."""
    subject = getattr(run, "subject", None)
    if not subject or not getattr(user, "is_staff", False) or not getattr(user, "is_active", False):
        return ""
    try:
        model = apps.get_model(str(subject["type"]))
    except (LookupError, ValueError):
        return ""
    if not admin.site.is_registered(model):
        return ""
    meta = model._meta
    if not any(user.has_perm(f"{meta.app_label}.{action}_{meta.model_name}") for action in ("view", "change")):
        return ""
    try:
        return reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[subject["id"]])
    except NoReverseMatch:
        return ""
