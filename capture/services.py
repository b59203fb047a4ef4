"""The capture operations other code calls (the admin, the API, scripts)."""

from capture.reconcile import CaptureNotFound, NotAdministrator, ReconcileRefused, is_administrator, reconcile

__all__ = ["CaptureNotFound", "NotAdministrator", "ReconcileRefused", "is_administrator", "reconcile"]
