"""The system checks that tell a host project what Switchyard's pages need (docs/install.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings
from django.test import override_settings

from workflows.checks import (
    ACTOR_MIDDLEWARE,
    HTMX_MIDDLEWARE,
    REQUEST_PROCESSOR,
    check_host_integration,
    check_host_project,
)

SESSION_AUTHENTICATION = "rest_framework.authentication.SessionAuthentication"


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


# --- what a host's own settings, packages and templates can silently break (issue #39) ---------


def integration_ids() -> list[str]:
    return [message.id or "" for message in check_host_integration(None)]


def test_the_reference_site_passes_the_integration_checks() -> None:
    assert integration_ids() == []


def test_token_authentication_without_the_authtoken_app_is_an_error() -> None:
    # issue #39: every "Authorization: Token ..." request answered 500 and `check` passed
    without = [app for app in settings.INSTALLED_APPS if app != "rest_framework.authtoken"]
    with override_settings(INSTALLED_APPS=without):
        assert integration_ids() == ["workflows.E002"]
    sessions_only = {**settings.REST_FRAMEWORK, "DEFAULT_AUTHENTICATION_CLASSES": [SESSION_AUTHENTICATION]}
    with override_settings(INSTALLED_APPS=without, REST_FRAMEWORK=sessions_only):
        assert integration_ids() == []


def test_a_host_package_shadowing_one_of_the_apps_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue #39: a host package named `designer` came first on the path and `check` passed
    host_package = tmp_path / "designer"
    host_package.mkdir()
    monkeypatch.setattr(apps.get_app_config("designer"), "path", str(host_package))
    messages = check_host_integration(None)
    assert [m.id for m in messages] == ["workflows.E003"]
    assert "'designer'" in messages[0].msg


def write(folder: Path, name: str, text: str) -> None:
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)


def templates_in(folder: Path) -> list[dict[str, object]]:
    return [{**settings.TEMPLATES[0], "DIRS": [folder]}]


LAYOUT = """<html><head><title>{% block page_title %}{% endblock %}</title>{% block extra_head %}{% endblock %}</head>
<body>{% block main %}{% endblock %}</body></html>"""


def test_a_base_template_whose_layout_draws_none_of_switchyards_blocks_is_warned(tmp_path: Path) -> None:
    # issue #39: a host layout with other block names gave every page an empty <main>, status 200
    write(tmp_path, "layout.html", LAYOUT)
    write(tmp_path, "switchyard/base.html", '{% extends "layout.html" %}{% block extra_head %}{% endblock %}')
    with override_settings(TEMPLATES=templates_in(tmp_path)):
        messages = check_host_integration(None)
    assert [m.id for m in messages] == ["workflows.W004"]
    assert "title, content" in messages[0].msg


def test_a_base_template_extending_a_layout_that_cannot_be_found_is_warned_not_a_crash(tmp_path: Path) -> None:
    # an outsider's walk: `check` stopped with TemplateDoesNotExist instead of warning
    write(tmp_path, "switchyard/base.html", '{% extends "base.html" %}{% block main %}{% endblock %}')
    with override_settings(TEMPLATES=templates_in(tmp_path)):
        messages = check_host_integration(None)
    assert [m.id for m in messages] == ["workflows.W004"]
    assert "extends a template that cannot be loaded" in messages[0].msg


def test_a_bridge_that_hands_the_blocks_to_the_layout_passes(tmp_path: Path) -> None:
    write(tmp_path, "layout.html", LAYOUT)
    write(
        tmp_path,
        "switchyard/base.html",
        '{% extends "layout.html" %}{% block page_title %}{% block title %}{% endblock %}{% endblock %}'
        "{% block main %}<div>{% block content %}{% endblock %}</div>{% endblock %}",
    )
    with override_settings(TEMPLATES=templates_in(tmp_path)):
        assert integration_ids() == []
    # the same bridge one level up: a layout that extends another layout
    write(tmp_path, "site.html", LAYOUT)
    write(tmp_path, "layout.html", '{% extends "site.html" %}{% block extra_head %}<style></style>{% endblock %}')
    with override_settings(TEMPLATES=templates_in(tmp_path)):
        assert integration_ids() == []


def test_notices_without_a_site_url_are_warned_unless_no_mail_is_sent() -> None:
    with override_settings(SITE_URL=""):
        assert integration_ids() == ["workflows.W005"]
    with override_settings(SITE_URL="/tasks/"):
        assert integration_ids() == ["workflows.W005"]
    with override_settings(SITE_URL="", EMAIL_BACKEND="django.core.mail.backends.dummy.EmailBackend"):
        assert integration_ids() == []
