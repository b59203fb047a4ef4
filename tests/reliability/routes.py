"""Every route of the URL conf with its arguments filled from real rows, and a fingerprint of
every table, so a suite can ask "did this request change anything?".

Routes are found by walking the resolver (the admin included), so a view added later is
crawled without anyone listing it. A route whose arguments cannot be filled is reported as
skipped, never silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.urls import NoReverseMatch, URLPattern, URLResolver, get_resolver, reverse

from workflows.engine import db

# tables a request may touch without changing what the application holds
UNTRACKED = ("django_session",)


@dataclass(frozen=True)
class Route:
    name: str
    template: str
    url: str


def _walk(patterns: list[Any], prefix: str = "", namespace: str = "") -> list[tuple[str, str, list[str]]]:
    found = []
    for p in patterns:
        if isinstance(p, URLResolver):
            ns = f"{namespace}:{p.namespace}" if namespace and p.namespace else (p.namespace or namespace)
            found += _walk(p.url_patterns, prefix + str(p.pattern), ns)
        elif isinstance(p, URLPattern):
            if not p.name:
                continue
            name = f"{namespace}:{p.name}" if namespace else p.name
            kwargs = list(getattr(p.pattern, "converters", {}) or {}) or list(p.pattern.regex.groupindex)
            found.append((name, prefix + str(p.pattern), kwargs))
    return found


def _admin_model(name: str) -> Any:
    """The model of an admin route named ``admin:<app>_<model>_<action>``."""
    from django.apps import apps
    from django.contrib import admin

    bare = name.split(":", 1)[1]
    for model in admin.site._registry:
        prefix = f"{model._meta.app_label}_{model._meta.model_name}_"
        if bare.startswith(prefix):
            return model
    return apps.get_model("workflows", "Run")


def _value(kwarg: str, name: str, template: str, ids: dict[str, Any]) -> Any:
    if kwarg == "object_id":
        model = _admin_model(name)
        first = model._default_manager.order_by("pk").values_list("pk", flat=True).first()
        return str(first) if first is not None else None
    if kwarg == "id":
        if template.startswith("admin/auth/user/"):
            return ids.get("user")
        for part, key in (
            ("bulk-operations/", "bulk"),
            ("migrations/", "record"),
            ("captures/", "capture"),
            ("runs/", "run"),
            ("tasks/", "task"),
        ):
            if part in template:
                return ids.get(key)
        return None
    return ids.get(kwarg)


def routes(ids: dict[str, Any]) -> tuple[list[Route], list[str]]:
    """(routes with URLs, templates skipped because an argument could not be filled)."""
    found: list[Route] = [Route("root", "", "/")]
    skipped: list[str] = []
    for name, template, kwargs in _walk(get_resolver().url_patterns):
        values = {k: _value(k, name, template, ids) for k in kwargs}
        if any(v is None for v in values.values()):
            skipped.append(template)
            continue
        try:
            url = reverse(name, kwargs=values)
        except NoReverseMatch:
            skipped.append(template)
            continue
        found.append(Route(name, template, url))
    unique = {r.url: r for r in found}
    return list(unique.values()), sorted(set(skipped))


def fingerprint() -> dict[str, tuple[int, int]]:
    """(row count, sum of row hashes) of every table: any insert, update or delete shows."""
    tables = [
        t
        for (t,) in db.fetchall(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
            "AND table_type = 'BASE TABLE' ORDER BY table_name"
        )
        if t not in UNTRACKED
    ]
    sql = " UNION ALL ".join(
        f"SELECT '{t}', count(*), coalesce(sum(hashtext(x::text)::bigint), 0) FROM \"{t}\" x" for t in tables
    )
    return {str(t): (int(n), int(h)) for t, n, h in db.fetchall(sql)}


def changed(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    return sorted(t for t in set(before) | set(after) if before.get(t) != after.get(t))
