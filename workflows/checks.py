"""System checks: the ``WORKFLOWS`` setting, and what a host project must give Switchyard's
pages (docs/install.md, step 2). ``manage.py check`` names the setting to fix; nothing here
depends on the reference site's settings."""

from __future__ import annotations

from pathlib import Path
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


TOKEN_AUTHENTICATION = "rest_framework.authentication.TokenAuthentication"
# The blocks every Switchyard page fills in switchyard/base.html ("head" only adds to <head>:
# a layout without it loses no content, so only these two are required).
PAGE_BLOCKS = ("title", "content")
BASE_TEMPLATE = "switchyard/base.html"
DUMMY_MAIL = "django.core.mail.backends.dummy.EmailBackend"


@register()
def check_host_integration(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """What a host's own settings, packages and templates can silently break (issue #39): each
    of these once gave a 500 or an empty page with no message at start-up."""
    return [
        *_token_authentication(),
        *_shadowed_packages(),
        *_base_template_blocks(),
        *_notice_links(),
    ]


def _token_authentication() -> list[CheckMessage]:
    framework = getattr(settings, "REST_FRAMEWORK", None) or {}
    classes = [str(c) for c in framework.get("DEFAULT_AUTHENTICATION_CLASSES", ())]
    if TOKEN_AUTHENTICATION in classes and not apps.is_installed("rest_framework.authtoken"):
        return [
            Error(
                "REST_FRAMEWORK authenticates with TokenAuthentication, but 'rest_framework.authtoken' is not in "
                "INSTALLED_APPS: every request with an 'Authorization: Token' header would fail.",
                hint=f"Add 'rest_framework.authtoken' to INSTALLED_APPS and migrate. {INSTALL_HINT}",
                id="workflows.E002",
            )
        ]
    return []


def _shadowed_packages() -> list[CheckMessage]:
    """Switchyard's three apps are installed side by side (one distribution): an installed
    app of one of their names that lives elsewhere is a host package shadowing ours."""
    ours = Path(__file__).resolve().parent.parent
    found: list[CheckMessage] = []
    for name in ("workflows", "capture", "designer"):
        if not apps.is_installed(name):
            continue
        where = Path(apps.get_app_config(name.rsplit(".", 1)[-1]).path).resolve()
        if where.parent != ours:
            found.append(
                Error(
                    f"The installed app {name!r} is not Switchyard's: a package of that name comes first on the "
                    "Python path and hides Switchyard's.",
                    hint="Rename your package (Switchyard's apps are named workflows, capture and designer).",
                    obj=str(where),
                    id="workflows.E003",
                )
            )
    return found


def _base_template_blocks() -> list[CheckMessage]:
    from django.template import TemplateDoesNotExist, TemplateSyntaxError
    from django.template.loader import get_template

    try:
        template = get_template(BASE_TEMPLATE)
    except (TemplateDoesNotExist, TemplateSyntaxError) as error:
        return [
            Warning(
                f"{BASE_TEMPLATE} cannot be loaded ({type(error).__name__}): Switchyard's pages cannot be drawn.",
                hint="See docs/install.md, step 3 (your layout).",
                id="workflows.W004",
            )
        ]
    try:
        drawn = _drawn_blocks(getattr(template, "template", template))
    except (TemplateDoesNotExist, TemplateSyntaxError) as error:  # the layout it extends
        return [
            Warning(
                f"{BASE_TEMPLATE} extends a template that cannot be loaded ({type(error).__name__}): "
                "Switchyard's pages cannot be drawn.",
                hint="Check the name in its {% extends %} and your TEMPLATES DIRS. See docs/install.md, step 3.",
                id="workflows.W004",
            )
        ]
    if drawn is None:  # an {% extends %} computed at render time: nothing to say
        return []
    missing = [name for name in PAGE_BLOCKS if name not in drawn]
    if not missing:
        return []
    return [
        Warning(
            f"{BASE_TEMPLATE} as your templates resolve it draws no block {', '.join(missing)}: Switchyard's pages "
            "fill these, so their text would be missing from every page.",
            hint="In your switchyard/base.html, put Switchyard's blocks inside blocks your layout draws, e.g. "
            "{% block main %}{% block content %}{% endblock %}{% endblock %}. See docs/install.md, step 3.",
            id="workflows.W004",
        )
    ]


def _drawn_blocks(template: Any) -> set[str] | None:
    """The names of the blocks a template's rendering draws, following ``{% extends %}`` up to
    the root layout: the root's blocks, then the blocks nested in the most derived definition
    of each drawn block. None when a parent is chosen at render time."""
    from django.template.loader_tags import BlockNode, ExtendsNode

    chain = [template]
    while True:
        extends = next((node for node in chain[-1].nodelist if isinstance(node, ExtendsNode)), None)
        if extends is None:
            break
        expression: Any = extends.parent_name  # a FilterExpression; a constant's var is its text
        parent_name = getattr(expression, "var", None)
        if not isinstance(parent_name, str) or getattr(expression, "filters", None) or len(chain) > 20:
            return None
        # as {% extends %} finds it: a template of the same name further down the loaders
        # when a layout extends the one it replaces
        parent, _ = template.engine.find_template(parent_name, skip=[level.origin for level in chain])
        chain.append(parent)
    definitions: dict[str, Any] = {}
    for level in chain:  # most derived first
        for block in level.nodelist.get_nodes_by_type(BlockNode):
            definitions.setdefault(block.name, block)

    def outermost(nodelist: Any) -> list[Any]:
        found = []
        for node in nodelist:
            if isinstance(node, BlockNode):
                found.append(node)
                continue
            for attr in getattr(node, "child_nodelists", ()):
                found += outermost(getattr(node, attr, None) or [])
        return found

    drawn: set[str] = set()
    pending = [block.name for block in outermost(chain[-1].nodelist)]
    while pending:
        name = pending.pop()
        if name in drawn:
            continue
        drawn.add(name)
        pending += [block.name for block in outermost(definitions[name].nodelist)]
    return drawn


def _notice_links() -> list[CheckMessage]:
    if str(getattr(settings, "EMAIL_BACKEND", "")) == DUMMY_MAIL:
        return []  # no notice is sent
    site = str(getattr(settings, "SITE_URL", "") or "")
    if site.startswith(("http://", "https://")) and len(site.split("://", 1)[1].strip("/")) > 0:
        return []
    return [
        Warning(
            "Task notices (e-mails to assignees) link to the task page at SITE_URL, which is not set to an "
            "http:// or https:// address.",
            hint="Set SITE_URL to the address your users open the site at, e.g. 'https://intranet.example'. "
            f"{INSTALL_HINT}",
            id="workflows.W005",
        )
    ]
