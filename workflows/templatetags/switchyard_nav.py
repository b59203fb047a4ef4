"""The main navigation of ``switchyard/base.html``: one link per page the user may open.

A link to a page that answers the user a bare 403 is a dead end (issue #30): each entry names
the capability its page asks (``workflows.access``, the same one its view's ``page_requires``
checks), and a link the host did not mount (its URL name does not reverse) is left out too.

The Migrate dialog belongs to one workflow, so **Migrate** opens where its links are, the
admin's definition versions list ("Migrate (N parked)", docs/migrations.md): for staff who may
both migrate runs and read definitions (the admin's view permission on that list).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from workflows import access
from workflows.access import Capability

register = template.Library()

SIGNED_IN = "signed in"  # any active signed-in user (the inbox lists the tasks assigned to them)
STAFF = "staff"  # is_staff opens the Django admin site


@dataclass(frozen=True)
class Entry:
    label: str | Promise  # translated when the page is drawn
    url_name: str
    needs: tuple[Capability | str, ...]  # all of them
    namespace: str  # the link is current while the request's view is in this namespace
    # ... and, when given, is one of these views (two links share the requesters' namespace)
    views: tuple[str, ...] = ()


ENTRIES = (
    Entry(_("Inbox"), "workflows:inbox", (SIGNED_IN,), "workflows"),
    Entry(_("Runs"), "workflows:runs:list", (Capability.VIEW_RUNS,), "workflows:runs"),
    Entry(
        _("New request"),
        "workflows:requests:new",
        (Capability.START,),
        "workflows:requests",
        ("workflows:requests:new", "workflows:requests:start"),
    ),
    Entry(
        _("My requests"),
        "workflows:requests:mine",
        (Capability.START,),
        "workflows:requests",
        ("workflows:requests:mine", "workflows:requests:detail"),
    ),
    Entry(_("Ops"), "switchyard_ops:dashboard", (Capability.OPERATE,), "switchyard_ops"),
    Entry(_("Designer"), "switchyard_designer:list", (Capability.VIEW_DEFINITIONS,), "switchyard_designer"),
    Entry(
        _("Migrate"),
        "admin:workflows_definitionversion_changelist",
        (STAFF, Capability.MIGRATE, Capability.VIEW_DEFINITIONS),
        "workflows:migrate",
    ),
    Entry(_("Admin"), "admin:index", (STAFF,), "admin"),
)


def holds(user: Any, need: Capability | str) -> bool:
    if need == SIGNED_IN:
        return access.is_active_user(user)
    if need == STAFF:
        return access.is_active_user(user) and bool(getattr(user, "is_staff", False))
    return access.has(user, Capability(need))


def may_open(user: Any, entry: Entry) -> bool:
    return all(holds(user, need) for need in entry.needs)


def _url(name: str) -> str | None:
    try:
        return reverse(name)
    except NoReverseMatch:
        return None


@register.simple_tag(takes_context=True)
def navigation(context: Any) -> list[dict[str, Any]]:
    """The links the signed-in user may follow: ``label``, ``href`` and ``current``."""
    request = context.get("request")
    user = context.get("user") or getattr(request, "user", None)
    match = getattr(request, "resolver_match", None)
    namespace = getattr(match, "namespace", None)
    view_name = getattr(match, "view_name", None)
    links = []
    for entry in ENTRIES:
        href = _url(entry.url_name) if may_open(user, entry) else None
        if href is not None:
            current = namespace == entry.namespace and (not entry.views or view_name in entry.views)
            links.append({"label": entry.label, "href": href, "current": current})
    return links
