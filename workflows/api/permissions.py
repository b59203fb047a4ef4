"""Who may call what. Django model permissions (superusers hold them all):

- start a run: ``workflows.add_run``; signal, cancel, retry: ``workflows.change_run``;
  migrate: ``workflows.migrate_runs``; read runs and history: any of ``view_run``,
  ``add_run``, ``change_run``.
- definitions and activations: ``workflows.change_definitionversion`` (reading the lists
  also with ``view_definitionversion``).
- tasks: any signed-in user, for the tasks they may act on (``workflows.queries``); a task
  someone cannot act on is answered as not found.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

ADD_RUN = "workflows.add_run"
CHANGE_RUN = "workflows.change_run"
VIEW_RUN = "workflows.view_run"
MIGRATE_RUNS = "workflows.migrate_runs"
CHANGE_DEFINITIONS = "workflows.change_definitionversion"
VIEW_DEFINITIONS = "workflows.view_definitionversion"


def _user(request: Request) -> Any:
    user = getattr(request, "user", None)
    return user if user is not None and user.is_authenticated else None


class _HasAll(BasePermission):
    required: tuple[str, ...] = ()

    def has_permission(self, request: Request, view: Any) -> bool:
        user = _user(request)
        return user is not None and user.has_perms(self.required)


class _HasAny(BasePermission):
    any_of: tuple[str, ...] = ()

    def has_permission(self, request: Request, view: Any) -> bool:
        user = _user(request)
        return user is not None and any(user.has_perm(p) for p in self.any_of)


class CanStartRuns(_HasAll):
    required = (ADD_RUN,)
    message = f"starting runs needs the permission {ADD_RUN}"


class CanChangeRuns(_HasAll):
    required = (CHANGE_RUN,)
    message = f"signalling, cancelling and retrying runs needs the permission {CHANGE_RUN}"


class CanMigrateRuns(_HasAll):
    required = (MIGRATE_RUNS,)
    message = f"migrating runs needs the permission {MIGRATE_RUNS}"


class CanReadRuns(_HasAny):
    any_of = (VIEW_RUN, ADD_RUN, CHANGE_RUN)
    message = f"reading runs needs the permission {VIEW_RUN}"


class CanManageDefinitions(BasePermission):
    message = f"managing definitions needs the permission {CHANGE_DEFINITIONS}"

    def has_permission(self, request: Request, view: Any) -> bool:
        user = _user(request)
        if user is None:
            return False
        if request.method in SAFE_METHODS and user.has_perm(VIEW_DEFINITIONS):
            return True
        return bool(user.has_perm(CHANGE_DEFINITIONS))
