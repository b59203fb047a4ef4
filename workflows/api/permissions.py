"""Who may call what in the API: DRF permission classes over ``workflows.access`` (the one
permission model; docs/reliability.md, "Permission matrix").

- start a run: start runs; read runs and history: view runs; signal, cancel, retry, migrate:
  the capability of the same name.
- definitions and activations: deploy definitions (reading the lists: view definitions).
- tasks: any signed-in user, for the tasks they may act on (``workflows.queries``); a task
  someone cannot act on is answered as not found.

A refusal is a problem+json 403 (PERMISSION_DENIED) naming the capability, never a value.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from workflows.access import Capability, has, refusal


class Requires(BasePermission):
    """Holds when the caller has ``capability`` (subclasses name it)."""

    capability: Capability = Capability.VIEW_RUNS

    def has_permission(self, request: Request, view: Any) -> bool:
        return has(getattr(request, "user", None), self.capability)

    @property
    def message(self) -> str:  # type: ignore[override]
        return refusal(self.capability)


def requires(capability: Capability) -> type[Requires]:
    """The permission class of one capability (one class per capability, made once)."""
    return _CLASSES[capability]


_CLASSES: dict[Capability, type[Requires]] = {
    c: type(f"Requires{c.name.title().replace('_', '')}", (Requires,), {"capability": c}) for c in Capability
}

CanStartRuns = requires(Capability.START)
CanReadRuns = requires(Capability.VIEW_RUNS)
CanSignalRuns = requires(Capability.SIGNAL)
CanCancelRuns = requires(Capability.CANCEL)
CanRetryRuns = requires(Capability.RETRY)
CanMigrateRuns = requires(Capability.MIGRATE)


class CanManageDefinitions(BasePermission):
    """Reads need view definitions, writes deploy definitions."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = getattr(request, "user", None)
        if request.method in SAFE_METHODS and has(user, Capability.VIEW_DEFINITIONS):
            return True
        self.message = refusal(Capability.DEPLOY)
        return has(user, Capability.DEPLOY)
