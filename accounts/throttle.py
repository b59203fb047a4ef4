"""The sign-in throttle of the admin and the approvers' sign-in page.

Failed sign-ins are counted per user name and per client address in PostgreSQL, so every web
process (and every node) sees the same counts; a count is one atomic upsert, so parallel
guesses cannot slip past it. When a user name reaches
``WORKFLOWS["SECURITY"]["SIGN_IN_MAX_FAILURES_PER_USER"]`` failures, or an address
``SIGN_IN_MAX_FAILURES_PER_ADDRESS``, within ``SIGN_IN_LOCK_SECONDS``, that name or address is
refused — even with the right password — until ``SIGN_IN_LOCK_SECONDS`` have passed. A
successful sign-in clears its user name's count (not the address's: one valid account must
not reset the count of an address guessing others).

The client address is ``REMOTE_ADDR``, never a forwarded header a client can write.
"""

from __future__ import annotations

import hashlib

from django.db import connection
from django.http import HttpRequest

from workflows import conf

# One statement per failure: a new window when the last one ran out (or its lock expired),
# otherwise one more failure; the failure that reaches the limit sets the lock.
RECORD_FAILURE = """
INSERT INTO accounts_sign_in_failures AS f (key, failures, window_started_at, locked_until)
VALUES (%(key)s, 1, now(), CASE WHEN %(limit)s <= 1 THEN now() + make_interval(secs => %(lock)s) END)
ON CONFLICT (key) DO UPDATE SET
  failures = CASE WHEN f.locked_until <= now()
                    OR (f.locked_until IS NULL AND f.window_started_at <= now() - make_interval(secs => %(lock)s))
                  THEN 1 ELSE f.failures + 1 END,
  window_started_at = CASE WHEN f.locked_until <= now()
                    OR (f.locked_until IS NULL AND f.window_started_at <= now() - make_interval(secs => %(lock)s))
                  THEN now() ELSE f.window_started_at END,
  locked_until = CASE WHEN f.locked_until <= now()
                    OR (f.locked_until IS NULL AND f.window_started_at <= now() - make_interval(secs => %(lock)s))
                  THEN CASE WHEN %(limit)s <= 1 THEN now() + make_interval(secs => %(lock)s) END
                  WHEN f.locked_until IS NULL AND f.failures + 1 >= %(limit)s
                  THEN now() + make_interval(secs => %(lock)s)
                  ELSE f.locked_until END
RETURNING locked_until IS NOT NULL AND locked_until > now()
"""
LOCKED = "SELECT EXISTS (SELECT 1 FROM accounts_sign_in_failures WHERE key = ANY(%s) AND locked_until > now())"
CLEAR = "DELETE FROM accounts_sign_in_failures WHERE key = %s"


def _key(kind: str, value: str) -> str:
    return hashlib.sha256(f"{kind}:{value}".encode()).hexdigest()


def user_key(username: str) -> str:
    return _key("user", username.strip().casefold())


def address_key(request: HttpRequest | None) -> str | None:
    address = (request.META.get("REMOTE_ADDR") or "").strip() if request is not None else ""
    return _key("address", address) if address else None


def _keys(username: str, request: HttpRequest | None) -> list[str]:
    address = address_key(request)
    return [user_key(username)] + ([address] if address else [])


def is_locked(username: str, request: HttpRequest | None) -> bool:
    """Whether this user name or this client address is locked now."""
    with connection.cursor() as cursor:
        cursor.execute(LOCKED, [_keys(username, request)])
        row = cursor.fetchone()
    return bool(row and row[0])


def record_failure(username: str, request: HttpRequest | None) -> bool:
    """Count a failed sign-in for the user name and the address; answers whether either is
    locked now."""
    security = conf.get().SECURITY
    lock = int(security.SIGN_IN_LOCK_SECONDS)
    limits = [int(security.SIGN_IN_MAX_FAILURES_PER_USER), int(security.SIGN_IN_MAX_FAILURES_PER_ADDRESS)]
    locked = False
    with connection.cursor() as cursor:
        for key, limit in zip(_keys(username, request), limits, strict=False):
            cursor.execute(RECORD_FAILURE, {"key": key, "limit": limit, "lock": lock})
            row = cursor.fetchone()
            locked = locked or bool(row and row[0])
    return locked


def record_success(username: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(CLEAR, [user_key(username)])
