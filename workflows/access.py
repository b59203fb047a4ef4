"""Who may do what: the one permission model of the API, the HTML pages, the radar, the
designer and the admin (docs/reliability.md, "Permission matrix").

Before this module there were three drifted copies of the checks: cancelling asked for
``change_run`` in the API, ``change_definitionversion`` in the run viewer and ``cancel_runs``
on the radar; the run viewer, the operations pages and the designer let in any staff user
(one of them without even asking ``is_active``). Now every surface asks :func:`has` for a
:class:`Capability`, and each capability is one row of :data:`MATRIX`.

Rules:

- inactive and signed-out users hold no capability; superusers hold every one;
- ``is_staff`` only lets a user into the Django admin site: it grants no capability;
- a capability is held through any one of the Django permissions of its row (the first is its
  own; the others are broader permissions that have always granted it: ``change_*`` implies
  ``view_*`` as in the Django admin, and deploying a revision lets its author move the runs
  parked on the one it replaced);
- cancelling is its own permission (``cancel_runs``): ``change_run`` signals and retries,
  which a run survives, but does not tear runs down;
- approvers act on their tasks through the task's assignment (``workflows.queries``), not
  through these permissions; ``workflows.change_task`` lets a user act on any task.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any


class Capability(enum.StrEnum):
    VIEW_RUNS = "view runs"
    START = "start runs"
    SIGNAL = "signal runs"
    CANCEL = "cancel runs"
    RETRY = "retry runs"
    MIGRATE = "migrate runs"
    VIEW_DEFINITIONS = "view definitions"
    DEPLOY = "deploy definitions"
    OPERATE = "operate"
    VIEW_CAPTURES = "view captures"
    ACT_ON_ANY_TASK = "act on any task"
    VIEW_WEBHOOKS = "view webhooks"
    MANAGE_WEBHOOKS = "manage webhooks"


@dataclass(frozen=True)
class Rule:
    permissions: tuple[str, ...]  # any one grants the capability; the first is its own
    allows: str  # what it allows, in words (the matrix in the docs says it per surface)


MATRIX: dict[Capability, Rule] = {
    Capability.VIEW_RUNS: Rule(
        ("workflows.view_run", "workflows.change_run"),
        "read runs, their history and state: API run list/detail/history, the run viewer, the run admin",
    ),
    Capability.START: Rule(("workflows.add_run",), "start runs (API POST /runs/)"),
    Capability.SIGNAL: Rule(("workflows.change_run",), "send signals to runs: API, the run viewer's Send signal"),
    Capability.CANCEL: Rule(
        ("workflows.cancel_runs",),
        "cancel runs: API cancel, the run viewer's Cancel run, the radar's bulk cancel",
    ),
    Capability.RETRY: Rule(
        ("workflows.change_run",),
        "retry runs: API, the run viewer's Retry, the radar's retry and bulk retry, the run and command admin's retry",
    ),
    Capability.MIGRATE: Rule(
        ("workflows.migrate_runs", "workflows.change_definitionversion"),
        "move parked runs between revisions: API run migrate and /migrations/, the Migrate dialog",
    ),
    Capability.VIEW_DEFINITIONS: Rule(
        ("workflows.view_definitionversion", "workflows.change_definitionversion"),
        "read definitions and activations (API), the designer's pages and editor (no deploy)",
    ),
    Capability.DEPLOY: Rule(
        ("workflows.change_definitionversion",),
        "load, publish, deprecate, retire, reinstate, activate: API, designer Deploy, definition admin",
    ),
    Capability.OPERATE: Rule(
        ("workflows.change_command", "capture.reconcile_capture"),
        "the /ops/ dashboard and radar, reconciling OUTCOME_UNKNOWN commands and captures, the capture list",
    ),
    Capability.VIEW_CAPTURES: Rule(
        ("capture.view_capture", "capture.reconcile_capture", "workflows.change_command"),
        "read captures (API /captures/, the capture admin's list); the operate permissions grant it too",
    ),
    Capability.ACT_ON_ANY_TASK: Rule(
        ("workflows.change_task",),
        "see, complete and reassign any task (others only the tasks assigned to them or their groups)",
    ),
    Capability.VIEW_WEBHOOKS: Rule(
        ("workflows.view_webhooksubscription", "workflows.change_webhooksubscription"),
        "read webhook subscriptions and their delivery log: API /webhooks/, the webhook admin (model permissions)",
    ),
    Capability.MANAGE_WEBHOOKS: Rule(
        ("workflows.change_webhooksubscription",),
        "create, change, delete webhook subscriptions, rotate their secrets, redeliver events: API, webhook admin",
    ),
}


# --- the matrix by route ------------------------------------------------------------------------

# Routes that need no capability, and why. Everything else is in ROUTES with its capability.
PUBLIC = "public"  # anyone: health, sign-in/out, the OpenAPI schema and its docs page
# any signed-in user, for what is theirs: the tasks assigned to them (or ACT_ON_ANY_TASK), the runs they started
ASSIGNMENT = "assignment"
TOKEN = "metrics token"  # Authorization: Bearer <settings.METRICS_TOKEN>
ADMIN = "django admin"  # is_staff opens the admin site; each model page asks its model permission

Guard = Capability | str | tuple[Capability, ...] | frozenset[Capability]
# a tuple: one of them, by the request (ops:bulk and api:bulk-operations by its action); a frozenset: all of them
# (signal-with-start both starts and signals)

# URL name -> {HTTP method: what it needs}. Every named route of the site is here or under
# ``admin:`` (ADMIN unless listed); the route test (tests/reliability/test_permission_matrix.py)
# walks the URL conf and fails on a route missing from this table.
ROUTES: dict[str, dict[str, Guard]] = {
    "healthz": {"GET": PUBLIC},
    "login": {"GET": PUBLIC, "POST": PUBLIC},
    "logout": {"POST": PUBLIC},
    "signed_out": {"GET": PUBLIC},
    "switchyard_api:schema": {"GET": PUBLIC},
    "switchyard_api:docs": {"GET": PUBLIC},
    "switchyard_ops:metrics": {"GET": TOKEN},
    # API
    "switchyard_api:runs": {"GET": Capability.VIEW_RUNS, "POST": Capability.START},
    "switchyard_api:run": {"GET": Capability.VIEW_RUNS},
    "switchyard_api:run-history": {"GET": Capability.VIEW_RUNS},
    "switchyard_api:run-signals": {"POST": Capability.SIGNAL},
    "switchyard_api:runs-signal-by-key": {"POST": Capability.SIGNAL},
    "switchyard_api:runs-signal-with-start": {"POST": frozenset({Capability.START, Capability.SIGNAL})},
    "switchyard_api:run-cancel": {"POST": Capability.CANCEL},
    "switchyard_api:run-retry": {"POST": Capability.RETRY},
    "switchyard_api:run-migrate": {"POST": Capability.MIGRATE},
    "switchyard_api:tasks": {"GET": ASSIGNMENT},
    "switchyard_api:tasks-all": {"GET": Capability.OPERATE},
    "switchyard_api:task": {"GET": ASSIGNMENT},
    "switchyard_api:task-complete": {"POST": ASSIGNMENT},
    "switchyard_api:task-reassign": {"POST": ASSIGNMENT},
    "switchyard_api:definitions": {"GET": Capability.VIEW_DEFINITIONS, "POST": Capability.DEPLOY},
    "switchyard_api:definition-publish": {"POST": Capability.DEPLOY},
    "switchyard_api:definition-deprecate": {"POST": Capability.DEPLOY},
    "switchyard_api:definition-retire": {"POST": Capability.DEPLOY},
    "switchyard_api:definition-reinstate": {"POST": Capability.DEPLOY},
    "switchyard_api:activations": {"GET": Capability.VIEW_DEFINITIONS},
    "switchyard_api:activation": {"PUT": Capability.DEPLOY, "DELETE": Capability.DEPLOY},
    "switchyard_api:captures": {"GET": Capability.VIEW_CAPTURES},
    "switchyard_api:capture-reconcile": {"POST": Capability.OPERATE},
    "switchyard_api:migrations": {"GET": Capability.MIGRATE, "POST": Capability.MIGRATE},
    "switchyard_api:migration": {"GET": Capability.MIGRATE},
    "switchyard_api:migration-apply": {"POST": Capability.MIGRATE},
    "switchyard_api:migration-runs": {"GET": Capability.MIGRATE},
    "switchyard_api:bulk-operations": {
        "GET": Capability.VIEW_RUNS,
        "POST": (Capability.CANCEL, Capability.RETRY, Capability.SIGNAL),
    },
    "switchyard_api:bulk-operation": {"GET": Capability.VIEW_RUNS},
    "switchyard_api:bulk-operation-results": {"GET": Capability.VIEW_RUNS},
    "switchyard_api:migration-pause": {"POST": Capability.MIGRATE},
    "switchyard_api:migration-resume": {"POST": Capability.MIGRATE},
    "switchyard_api:migration-close": {"POST": Capability.MIGRATE},
    "switchyard_api:webhooks": {"GET": Capability.VIEW_WEBHOOKS, "POST": Capability.MANAGE_WEBHOOKS},
    "switchyard_api:webhook": {
        "GET": Capability.VIEW_WEBHOOKS,
        "PATCH": Capability.MANAGE_WEBHOOKS,
        "DELETE": Capability.MANAGE_WEBHOOKS,
    },
    "switchyard_api:webhook-rotate-secret": {"POST": Capability.MANAGE_WEBHOOKS},
    "switchyard_api:webhook-deliveries": {"GET": Capability.VIEW_WEBHOOKS},
    "switchyard_api:webhook-redeliver": {"POST": Capability.MANAGE_WEBHOOKS},
    # approvers' pages
    "workflows:inbox": {"GET": ASSIGNMENT},
    "workflows:task": {"GET": ASSIGNMENT, "POST": ASSIGNMENT},
    "workflows:task-claim": {"POST": ASSIGNMENT},
    "workflows:completed": {"GET": ASSIGNMENT},
    # requesters' pages
    "workflows:requests:new": {"GET": Capability.START},
    "workflows:requests:start": {"GET": Capability.START, "POST": Capability.START},
    "workflows:requests:mine": {"GET": ASSIGNMENT},
    "workflows:requests:detail": {"GET": ASSIGNMENT},
    # run viewer
    "workflows:runs:list": {"GET": Capability.VIEW_RUNS},
    "workflows:runs:detail": {"GET": Capability.VIEW_RUNS},
    "workflows:runs:history": {"GET": Capability.VIEW_RUNS},
    "workflows:runs:change": {"GET": Capability.VIEW_RUNS},
    "workflows:runs:cancel": {"GET": Capability.CANCEL, "POST": Capability.CANCEL},
    "workflows:runs:signal": {"GET": Capability.SIGNAL, "POST": Capability.SIGNAL},
    "workflows:runs:retry": {"GET": Capability.RETRY, "POST": Capability.RETRY},
    # Migrate dialog
    "workflows:migrate:dialog": {"GET": Capability.MIGRATE},
    "workflows:migrate:picker": {"GET": Capability.MIGRATE},
    "workflows:migrate:target-graph": {"GET": Capability.MIGRATE},
    "workflows:migrate:preview": {"POST": Capability.MIGRATE},
    "workflows:migrate:records": {"GET": Capability.MIGRATE},
    "workflows:migrate:record": {"GET": Capability.MIGRATE},
    "workflows:migrate:apply": {"POST": Capability.MIGRATE},
    "workflows:migrate:progress": {"GET": Capability.MIGRATE},
    "workflows:migrate:discard": {"POST": Capability.MIGRATE},
    "workflows:migrate:pause": {"POST": Capability.MIGRATE},
    "workflows:migrate:resume": {"POST": Capability.MIGRATE},
    "workflows:migrate:close": {"POST": Capability.MIGRATE},
    # operations dashboard and radar
    "switchyard_ops:dashboard": {"GET": Capability.OPERATE},
    "switchyard_ops:radar": {"GET": Capability.OPERATE},
    "switchyard_ops:retry": {"POST": Capability.RETRY},
    "switchyard_ops:bulk": {"POST": (Capability.RETRY, Capability.CANCEL)},
    "switchyard_ops:reconcile": {"GET": Capability.OPERATE, "POST": Capability.OPERATE},
    # designer
    "switchyard_designer:list": {"GET": Capability.VIEW_DEFINITIONS},
    "switchyard_designer:workflow": {"GET": Capability.VIEW_DEFINITIONS},
    "switchyard_designer:compare": {"GET": Capability.VIEW_DEFINITIONS},
    "switchyard_designer:new": {"GET": Capability.VIEW_DEFINITIONS},
    "switchyard_designer:edit": {"GET": Capability.VIEW_DEFINITIONS},
    "switchyard_designer:check": {"POST": Capability.VIEW_DEFINITIONS},
    "switchyard_designer:cel": {"POST": Capability.VIEW_DEFINITIONS},
    "switchyard_designer:step_form": {"POST": Capability.VIEW_DEFINITIONS},
    "switchyard_designer:step_apply": {"POST": Capability.VIEW_DEFINITIONS},
    "switchyard_designer:deploy": {"POST": Capability.DEPLOY},
    # admin pages of our own (the rest of admin: is ADMIN)
    "admin:capture_capture_reconcile": {"GET": Capability.OPERATE},
    "admin:capture_capture_reconcile_confirm": {"GET": Capability.OPERATE, "POST": Capability.OPERATE},
}


def route_guard(name: str) -> dict[str, Guard] | None:
    """What a named route needs, per method; None for a route the matrix does not know."""
    if name in ROUTES:
        return ROUTES[name]
    if name.startswith("admin:"):
        return {"GET": ADMIN, "POST": ADMIN}
    return None


def is_active_user(user: Any) -> bool:
    return bool(user is not None and getattr(user, "is_authenticated", False) and getattr(user, "is_active", False))


def has(user: Any, capability: Capability) -> bool:
    """Whether ``user`` holds ``capability`` (never because of ``is_staff``)."""
    if not is_active_user(user):
        return False
    if getattr(user, "is_superuser", False):
        return True
    return any(user.has_perm(permission) for permission in MATRIX[capability].permissions)


def refusal(capability: Capability) -> str:
    """The value-free text of a refusal: which capability and which permission grants it."""
    return f"this needs the {capability.value} capability (permission {MATRIX[capability].permissions[0]})"


def forbidden(request: Any, capability: Capability) -> Any:
    """The project's 403 page for a refused capability, as a response: Django logs it as one
    "Forbidden" warning line. (Raised as ``PermissionDenied`` out of a view, the same refusal
    is logged with a full traceback, an operator's log buried under expected refusals.)"""
    from django.core.exceptions import PermissionDenied
    from django.urls import get_resolver, get_urlconf

    handler: Callable[..., Any] = get_resolver(get_urlconf()).resolve_error_handler(403)
    return handler(request, exception=PermissionDenied(refusal(capability)))


def capabilities(user: Any) -> set[Capability]:
    return {c for c in Capability if has(user, c)}


def _sign_in(request: Any) -> Any:
    """The way to the sign-in page. A plain request is redirected there (302). An htmx request
    (a live check, a fragment refresh, a step form) would follow a 302 and swap the sign-in
    page into the fragment's place (issue #30): it gets ``HX-Redirect`` instead, so the browser
    loads the sign-in page whole, coming back afterwards to the page the user was on
    (``HX-Current-URL``), not to the fragment's endpoint."""
    from urllib.parse import urlsplit

    from django.contrib.auth.views import redirect_to_login
    from django.utils.http import url_has_allowed_host_and_scheme

    if request.headers.get("HX-Request") != "true":
        return redirect_to_login(request.get_full_path())
    from django_htmx.http import HttpResponseClientRedirect

    current = request.headers.get("HX-Current-URL", "")
    page = "/"
    if current and url_has_allowed_host_and_scheme(current, {request.get_host()}, request.is_secure()):
        parts = urlsplit(current)
        page = parts.path + (f"?{parts.query}" if parts.query else "")
    elif request.method == "GET":
        page = request.get_full_path()
    response = HttpResponseClientRedirect(redirect_to_login(page).url)
    response["Vary"] = "HX-Request"
    return response


def page_requires(capability: Capability) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """An HTML view decorator: signed-out visitors go to the sign-in page (an htmx request by
    ``HX-Redirect``, see :func:`_sign_in`); signed-in users without the capability get a 403
    page (never a login page, never the content)."""

    def decorate(view: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(view)
        def guarded(request: Any, *args: Any, **kwargs: Any) -> Any:
            if not getattr(request.user, "is_authenticated", False):
                return _sign_in(request)
            if not has(request.user, capability):
                return forbidden(request, capability)
            return view(request, *args, **kwargs)

        guarded.capability = capability  # type: ignore[attr-defined]  # the route test reads it
        return guarded

    return decorate


def assignee_problem(*, mode: str, value: str) -> str | None:
    """Why a task cannot be assigned to ``mode``/``value`` (value-free), or None when it can:
    a user must exist and be active (looked up by the user model's ``USERNAME_FIELD``, the
    name task assignments hold), a group must exist."""
    from django.contrib.auth.models import Group

    from workflows import users

    if mode == "user":
        found = users.assignees(mode, value).exists()
        return None if found else "no active user has this username"
    if mode in ("group", "role"):
        return None if Group.objects.filter(name=value).exists() else "no group has this name"
    return None
