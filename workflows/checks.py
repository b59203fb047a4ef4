"""System checks: the ``WORKFLOWS`` setting, and what a host project must give Switchyard's
pages (docs/install.md, step 2). ``manage.py check`` names the setting to fix; nothing here
depends on the reference site's settings."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from workflows import conf

REQUEST_PROCESSOR = "django.template.context_processors.request"
HTMX_MIDDLEWARE = "django_htmx.middleware.HtmxMiddleware"
ACTOR_MIDDLEWARE = "capture.middleware.CaptureActorMiddleware"
INSTALL_HINT = "See docs/install.md, step 2."


@register()
def check_workflows_setting(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    found: list[CheckMessage] = [
        Error(problem, hint="See docs/operations.md for the WORKFLOWS keys and their minimums.", id="workflows.E001")
        for problem in conf.problems(getattr(settings, "WORKFLOWS", {}))
    ]
    if getattr(settings, "OPS_RADAR", None) is not None:
        found.append(
            Warning(
                "The OPS_RADAR setting is no longer read: the stuck-run radar's settings are WORKFLOWS['RADAR'].",
                hint="Move its keys into WORKFLOWS['RADAR'] (docs/operations.md, 'The stuck-run radar').",
                id="workflows.W010",
            )
        )
    return found


@register()
def check_host_project(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """The pages' navigation reads ``request``; the inbox refreshes through htmx; record
    triggers name who saved a record through capture's middleware."""
    found: list[CheckMessage] = []
    templates: list[dict[str, Any]] = list(settings.TEMPLATES)
    django_backends = [t for t in templates if str(t.get("BACKEND", "")).endswith("DjangoTemplates")]
    if not any(REQUEST_PROCESSOR in t.get("OPTIONS", {}).get("context_processors", []) for t in django_backends):
        found.append(
            Warning(
                f"Switchyard's pages need the {REQUEST_PROCESSOR!r} context processor.",
                hint=f"Add it to TEMPLATES[...]['OPTIONS']['context_processors']. {INSTALL_HINT}",
                id="workflows.W001",
            )
        )
    middleware = list(getattr(settings, "MIDDLEWARE", []))
    if HTMX_MIDDLEWARE not in middleware:
        found.append(
            Warning(
                f"Switchyard's inbox and forms need {HTMX_MIDDLEWARE!r} in MIDDLEWARE.",
                hint=INSTALL_HINT,
                id="workflows.W002",
            )
        )
    if apps.is_installed("capture") and ACTOR_MIDDLEWARE not in middleware:
        found.append(
            Warning(
                f"Without {ACTOR_MIDDLEWARE!r} in MIDDLEWARE, runs started by record triggers from web requests "
                "name no actor.",
                hint=INSTALL_HINT,
                id="workflows.W003",
            )
        )
    return found
