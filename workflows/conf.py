"""The ``WORKFLOWS`` setting: one typed object with the reference defaults.

Unknown keys and unsafe values fail start-up (``AppConfig.ready``) and ``manage.py check``
with a message that names the key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

# section -> key -> (default, minimum or None, type)
SPEC: dict[str, dict[str, tuple[Any, Any, type]]] = {
    "RECORDING": {
        "MAX_PAYLOAD_BYTES": (262144, 1024, int),
        "LOCK_TIMEOUT_MS": (5000, 1, int),
        "MAX_OPEN_SIGNALS_PER_INSTANCE": (100, 1, int),
        "SCHEMA_CACHE_MAX_ENTRIES": (256, 1, int),
    },
    "EXECUTOR": {
        "ENABLED": (True, None, bool),
        "LEASE_SECONDS": (30, 3, int),
        "MAX_ATTEMPTS": (5, 1, int),
        "MAX_STEPS_PER_SEGMENT": (1000, 2, int),
        "TRANSIENT_BACKOFF_BASE_MS": (200, 1, int),
        "TRANSIENT_BACKOFF_MAX_MS": (30000, 1, int),
        "STUCK_AFTER_SECONDS": (300, 1, int),
        "CLAIM_BATCH": (16, 1, int),
        "DRAIN_SECONDS": (20, 1, int),
        "MAX_CALL_DEPTH": (16, 1, int),
        # how long a message the sweep sent for a piece of work (an outbox delivery) is
        # presumed queued: the sweep sends no second one before, and recovers a lost one after
        "MESSAGE_LEASE_SECONDS": (60, 1, int),
        # characters a text rendered from a template (a task's title and description, an
        # e-mail's subject and body) may have; a longer one fails its step at render time
        "MAX_RENDERED_CHARS": (65536, 256, int),
    },
    "DEFINITIONS": {
        "MAX_DOCUMENT_SIZE_BYTES": (262144, 1024, int),
        "CACHE_MAX_ENTRIES": (500, 1, int),
        "CACHE_TTL_SECONDS": (0, 0, int),
        "PUBLICATION_CLAIM_TIMEOUT_SECONDS": (300, 1, int),
        # the designer's live check (/designer/check/): compilations per user per minute
        "LIVE_CHECKS_PER_MINUTE": (60, 1, int),
    },
    "CAPTURE": {
        "LEASE_SECONDS": (300, 3, int),
        "RETAIN_DAYS": (7, 1, int),
    },
    "MIGRATE": {
        "APPLY_BATCH": (200, 1, int),
        # A run moved onto an approval for the same assignees as the one withdrawn does not
        # notify them again. True makes a migration send instead ONE digest per such assignee
        # ("N of your tasks moved to revision X") once nothing of it is left to apply; the
        # default of each new migration record (the dialog's checkbox, the API's
        # ``notify_digest``). Assignees newly assigned by a move are always notified.
        "DIGEST_NOTICES": (False, None, bool),
    },
    # bulk operations (POST /api/v1/bulk-operations/): the largest selection, the runs per
    # batch (one transaction), and how long an open operation may go without a committed batch
    # before the sweep resumes it
    "BULK": {
        "MAX_RUNS": (10000, 1, int),
        "BATCH": (50, 1, int),
        "STALLED_SECONDS": (30, 1, int),
    },
    # Not in the reference texts: the secret webhooks are signed with (its own, never derived
    # from SECRET_KEY outside DEBUG) and the sign-in throttle of the admin and approver pages.
    "SECURITY": {
        "WEBHOOK_SIGNING_SECRET": ("", None, str),
        "SIGN_IN_MAX_FAILURES_PER_USER": (5, 1, int),
        "SIGN_IN_MAX_FAILURES_PER_ADDRESS": (20, 1, int),
        "SIGN_IN_LOCK_SECONDS": (900, 1, int),
    },
    # service webhooks: addresses that are not public (loopback, private, link-local, ...)
    # are refused after DNS resolution unless a network here (CIDR text) contains them
    "SERVICES": {
        "ALLOWED_NETWORKS": ((), None, tuple),
    },
    # work that waits on another party (webhook deliveries, service calls, task notices):
    # the Celery queue its own worker serves, never the executor's, and the deadline of one
    # whole attempt (resolve, connect, TLS, send, status line, headers and body together)
    "OUTBOUND": {
        "QUEUE": ("switchyard.outbound", None, str),
        "ATTEMPT_SECONDS": (10, 1, int),
    },
    # the data lifecycle (docs/operations.md, "Retention"): a key whose default is None may be
    # None (keep forever); ARCHIVE_DIR "" writes no archive
    "RETENTION": {
        "ENDED_RUNS_DAYS": (None, 1, int),
        "FAILED_RUNS_DAYS": (None, 1, int),
        "ARCHIVE_DIR": ("", None, str),
        "BATCH_SIZE": (500, 1, int),
        "MAX_BATCHES_PER_TASK": (20, 1, int),
        "IDEMPOTENCY_KEYS_DAYS": (7, 1, int),
    },
    # the stuck-run radar (/ops/radar/, docs/operations.md): a position's wait is "too long"
    # past the PERCENTILE of its waits closed in the last WINDOW_DAYS (the latest SAMPLE of
    # them), never below FLOOR_SECONDS; THRESHOLDS ("<definition id>:<step>" or a whole
    # "<definition id>" -> seconds) win over both. ROWS: each list shows its most urgent rows
    # and counts them all.
    "RADAR": {
        "PERCENTILE": (0.95, None, float),
        "WINDOW_DAYS": (30, 1, int),
        "SAMPLE": (1000, 1, int),
        "FLOOR_SECONDS": (3600, 0, int),
        "THRESHOLDS": ({}, None, dict),
        "ROWS": (100, 1, int),
    },
}


@dataclass(frozen=True)
class Section:
    values: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass(frozen=True)
class WorkflowSettings:
    RECORDING: Section
    EXECUTOR: Section
    DEFINITIONS: Section
    CAPTURE: Section
    MIGRATE: Section
    BULK: Section
    SECURITY: Section
    SERVICES: Section
    OUTBOUND: Section
    RETENTION: Section
    RADAR: Section


def problems(raw: Any) -> list[str]:
    """Every problem of a raw WORKFLOWS value, each naming its key."""
    found: list[str] = []
    if not isinstance(raw, dict):
        return ["WORKFLOWS must be a dict"]
    for section, keys in raw.items():
        if section not in SPEC:
            found.append(f"WORKFLOWS[{section!r}] is not a known section ({', '.join(SPEC)})")
            continue
        if not isinstance(keys, dict):
            found.append(f"WORKFLOWS[{section!r}] must be a dict")
            continue
        for key, value in keys.items():
            spec = SPEC[section].get(key)
            if spec is None:
                found.append(f"WORKFLOWS[{section!r}][{key!r}] is not a known key")
                continue
            default, minimum, kind = spec
            if value is None and default is None:
                continue  # an optional key: None turns it off
            if kind is bool:
                if not isinstance(value, bool):
                    found.append(f"WORKFLOWS[{section!r}][{key!r}] must be true or false")
            elif kind is str:
                if not isinstance(value, str):
                    found.append(f"WORKFLOWS[{section!r}][{key!r}] must be a string")
                elif (section, key) == ("OUTBOUND", "QUEUE") and not value.strip():
                    found.append(f"WORKFLOWS[{section!r}][{key!r}] must name a queue")
            elif kind is tuple:
                found.extend(_network_problems(section, key, value))
            elif kind is float:
                if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
                    found.append(f"WORKFLOWS[{section!r}][{key!r}] must be a number above 0 and at most 1")
            elif kind is dict:
                found.extend(_threshold_problems(section, key, value))
            elif isinstance(value, bool) or not isinstance(value, kind):
                found.append(f"WORKFLOWS[{section!r}][{key!r}] must be an integer")
            elif minimum is not None and value < minimum:
                found.append(f"WORKFLOWS[{section!r}][{key!r}] must be at least {minimum}")
    return found


def _network_problems(section: str, key: str, value: Any) -> list[str]:
    import ipaddress

    if isinstance(value, str) or not isinstance(value, list | tuple):
        return [f"WORKFLOWS[{section!r}][{key!r}] must be a list of networks (CIDR, e.g. 10.0.0.0/8)"]
    for item in value:
        try:
            ipaddress.ip_network(item, strict=False)
        except (TypeError, ValueError):
            return [f"WORKFLOWS[{section!r}][{key!r}] holds an entry that is not a network (CIDR, e.g. 10.0.0.0/8)"]
    return []


def _threshold_problems(section: str, key: str, value: Any) -> list[str]:
    if not isinstance(value, dict):
        return [f"WORKFLOWS[{section!r}][{key!r}] must be a dict of positions to seconds"]
    for position, seconds in value.items():
        if not isinstance(position, str) or not position.strip():
            return [
                f"WORKFLOWS[{section!r}][{key!r}] holds a key that is not '<definition id>' or '<definition id>:<step>'"
            ]
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            return [f"WORKFLOWS[{section!r}][{key!r}] holds a value that is not a number of seconds (0 or more)"]
    return []


def build(raw: Any) -> WorkflowSettings:
    found = problems(raw)
    if found:
        raise ImproperlyConfigured("; ".join(found))
    sections = {}
    for section, keys in SPEC.items():
        values = {key: spec[0] for key, spec in keys.items()}
        values.update((raw or {}).get(section, {}))
        for key, spec in keys.items():
            if spec[2] is tuple:
                values[key] = tuple(values[key])
            elif spec[2] is dict:
                values[key] = dict(values[key])
            elif spec[2] is float:
                values[key] = float(values[key])
        sections[section] = Section(values)
    return WorkflowSettings(**sections)


@lru_cache(maxsize=1)
def get() -> WorkflowSettings:
    return build(getattr(django_settings, "WORKFLOWS", {}))


def reload() -> WorkflowSettings:
    """Drop the cached settings (tests that override WORKFLOWS call this)."""
    get.cache_clear()
    return get()


def from_environment(environ: Any) -> dict[str, dict[str, Any]]:
    """``WORKFLOWS_<SECTION>_<KEY>`` environment variables as a WORKFLOWS dict (deployment).

    Example: ``WORKFLOWS_EXECUTOR_LEASE_SECONDS=60``, ``WORKFLOWS_EXECUTOR_ENABLED=false``.
    Values that do not parse are passed through as text so validation names the key.
    """
    result: dict[str, dict[str, Any]] = {section: {} for section in SPEC}
    for section, keys in SPEC.items():
        for key, (default, _minimum, kind) in keys.items():
            raw = environ.get(f"WORKFLOWS_{section}_{key}")
            if raw is None:
                continue
            value: Any = raw
            if kind is bool:
                value = raw.strip().lower() in {"1", "true", "yes", "on"}
            elif kind is str:
                value = raw
            elif kind is tuple:  # comma-separated
                value = tuple(part.strip() for part in raw.split(",") if part.strip())
            elif kind is float:
                try:
                    value = float(raw)
                except ValueError:
                    value = raw
            elif kind is dict:  # JSON: WORKFLOWS_RADAR_THRESHOLDS='{"onboarding": 604800}'
                try:
                    value = json.loads(raw)
                except ValueError:
                    value = raw
            elif default is None and raw.strip().lower() in {"", "none", "off"}:
                value = None
            else:
                try:
                    value = int(raw)
                except ValueError:
                    value = raw
            result[section][key] = value
    return result


def webhook_signing_key() -> bytes:
    """The HMAC key of webhook signatures: ``SECURITY.WEBHOOK_SIGNING_SECRET``
    (``WORKFLOWS_SECURITY_WEBHOOK_SIGNING_SECRET``). Receivers hold it, so it is not the site's
    SECRET_KEY: rotating one never changes the other. Only with ``DEBUG`` on does a missing
    secret fall back to a key derived from SECRET_KEY; otherwise a webhook is not sent."""
    secret = str(get().SECURITY.WEBHOOK_SIGNING_SECRET)
    if secret:
        return secret.encode("utf-8")
    if django_settings.DEBUG:
        return hashlib.sha256(("switchyard-webhook:" + django_settings.SECRET_KEY).encode()).digest()
    raise ImproperlyConfigured(
        "WORKFLOWS['SECURITY']['WEBHOOK_SIGNING_SECRET'] is not set: webhooks are not sent unsigned"
    )
