"""The "Migrate (N parked)" links on the definition versions' admin pages.

They appear only for users who may migrate runs and only while runs are parked, counting
every revision of the workflow (the current one too). One GROUP BY over the open parks' partial
index per page, however many runs are parked.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse
from django.utils.translation import gettext as _

from workflows import queries

register = template.Library()


def _links(request: Any, pairs: set[tuple[str, str]], *, records: bool) -> dict[str, Any]:
    from workflows.views.migrate import can_migrate

    if request is None or not can_migrate(request.user) or not pairs:
        return {"links": []}
    parked = queries.parked_by_definition(definition_ids=sorted({d for d, _ in pairs}))
    links = []
    for definition_id, scope in sorted(pairs):
        n = parked.get((definition_id, scope), 0)
        if n:
            if len(pairs) == 1:
                label = _("Migrate (%(count)s parked)") % {"count": n}
            else:
                label = _("Migrate %(workflow)s (%(count)s parked)") % {"workflow": definition_id, "count": n}
            links.append({"href": reverse("workflows:migrate:dialog", args=[scope, definition_id]), "label": label})
        if records:
            links.append(
                {
                    "href": reverse("workflows:migrate:records", args=[scope, definition_id]),
                    "label": _("Migration records"),
                }
            )
    return {"links": links}


@register.inclusion_tag("workflows/migrate/_admin_links.html", takes_context=True)
def migrate_links_for_list(context: Any) -> dict[str, Any]:
    """Links for the workflows on the current page of the change list."""
    cl = context.get("cl")
    rows = list(getattr(cl, "result_list", []) or [])
    return _links(context.get("request"), {(r.definition_id, r.scope) for r in rows}, records=False)


@register.inclusion_tag("workflows/migrate/_admin_links.html", takes_context=True)
def migrate_links_for_version(context: Any) -> dict[str, Any]:
    """Links for the workflow of the version being shown."""
    row = context.get("original")
    if row is None:
        return {"links": []}
    return _links(context.get("request"), {(row.definition_id, row.scope)}, records=True)
