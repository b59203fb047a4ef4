"""The system checks that tell a host project what Switchyard's pages need (docs/install.md)."""

from __future__ import annotations

from django.conf import settings
from django.test import override_settings

from workflows.checks import ACTOR_MIDDLEWARE, HTMX_MIDDLEWARE, REQUEST_PROCESSOR, check_host_project


def ids() -> list[str]:
    return [message.id or "" for message in check_host_project(None)]


def test_the_reference_site_passes_the_host_checks() -> None:
    assert ids() == []


def test_a_host_without_the_request_context_processor_is_warned() -> None:
    processors = [p for p in settings.TEMPLATES[0]["OPTIONS"]["context_processors"] if p != REQUEST_PROCESSOR]
    templates = [{**settings.TEMPLATES[0], "OPTIONS": {"context_processors": processors}}]
    with override_settings(TEMPLATES=templates):
        assert ids() == ["workflows.W001"]


def test_a_host_without_the_htmx_or_the_actor_middleware_is_warned() -> None:
    with override_settings(MIDDLEWARE=[m for m in settings.MIDDLEWARE if m not in (HTMX_MIDDLEWARE, ACTOR_MIDDLEWARE)]):
        assert ids() == ["workflows.W002", "workflows.W003"]
