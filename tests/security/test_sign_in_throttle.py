"""Sign-in throttling on the approvers' page and the admin's (issue #25).

The story: 30 wrong passwords for ``admin`` on ``/admin/login/`` were each answered "wrong
password", and the 31st, right one signed in — nothing slowed a guesser down. Failed sign-ins
are now counted per user name and per client address in PostgreSQL (every web process sees
them); at the limit the name or address is refused, right password included, until the lock
expires.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models.expressions import RawSQL
from django.test import Client, override_settings

from accounts.forms import LOCKED_MESSAGE
from accounts.models import SignInFailures
from workflows import conf

pytestmark = pytest.mark.django_db

PAGES = {"approvers": "/accounts/login/", "admin": "/admin/login/"}
LIMITS = {"SIGN_IN_MAX_FAILURES_PER_USER": 5, "SIGN_IN_MAX_FAILURES_PER_ADDRESS": 20, "SIGN_IN_LOCK_SECONDS": 900}


@pytest.fixture(autouse=True)
def _limits() -> Any:
    with override_settings(WORKFLOWS={"SECURITY": LIMITS}):
        conf.reload()
        yield
    conf.reload()


def database_now() -> Any:
    """The database's now(): in this test's transaction, the instant the transaction began."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def sign_in(page: str, username: str, password: str, *, address: str = "192.0.2.10") -> Any:
    client = Client(REMOTE_ADDR=address)
    response = client.post(PAGES[page], {"username": username, "password": password, "next": "/tasks/"})
    response.signed_in = "_auth_user_id" in client.session  # type: ignore[attr-defined]
    return response


@pytest.mark.parametrize("page", PAGES)
def test_thirty_wrong_passwords_then_the_right_one_is_refused(page: str, demo_users: dict[str, Any]) -> None:
    answers = [sign_in(page, "admin", f"guess-{n}").status_code for n in range(30)]

    right = sign_in(page, "admin", "admin")

    assert answers[:4] == [200] * 4  # the form again, "wrong password"
    assert set(answers[4:]) == {429}  # the fifth failure locks
    assert right.status_code == 429
    assert not right.signed_in
    assert str(LOCKED_MESSAGE) in right.content.decode()


def test_a_locked_user_name_is_refused_from_every_address(demo_users: dict[str, Any]) -> None:
    for n in range(5):
        sign_in("approvers", "alice", f"guess-{n}", address=f"198.51.100.{n}")

    assert not sign_in("approvers", "alice", "alice", address="203.0.113.7").signed_in
    assert sign_in("approvers", "bob", "bob", address="203.0.113.7").signed_in  # another name is not locked


def test_an_address_guessing_many_names_is_locked_for_every_name(demo_users: dict[str, Any]) -> None:
    for n in range(20):
        sign_in("approvers", f"user-{n}", "guess", address="192.0.2.66")

    refused = sign_in("approvers", "bob", "bob", address="192.0.2.66")

    assert refused.status_code == 429 and not refused.signed_in
    assert sign_in("approvers", "bob", "bob", address="192.0.2.67").signed_in


def test_the_lock_expires_after_the_configured_time(demo_users: dict[str, Any]) -> None:
    for n in range(5):
        sign_in("admin", "admin", f"guess-{n}")
    assert not sign_in("admin", "admin", "admin").signed_in

    # the lock's time passes. The database clock decides, and in this test's transaction its
    # now() is the transaction's start, which on a busy machine may be seconds before Python's
    # clock or the current statement's (Django's Now() is STATEMENT_TIMESTAMP()): move the lock
    # into the past of the very clock the throttle reads.
    SignInFailures.objects.update(locked_until=RawSQL("now() - interval '1 second'", ()))

    assert sign_in("admin", "admin", "admin").signed_in


def test_the_lock_time_and_limits_come_from_the_workflows_setting(demo_users: dict[str, Any]) -> None:
    with override_settings(WORKFLOWS={"SECURITY": {**LIMITS, "SIGN_IN_MAX_FAILURES_PER_USER": 2}}):
        conf.reload()
        sign_in("approvers", "bob", "guess-1")
        sign_in("approvers", "bob", "guess-2")
        locked_until = SignInFailures.objects.exclude(locked_until=None).get().locked_until

    assert not sign_in("approvers", "bob", "bob").signed_in
    assert locked_until is not None
    assert locked_until - database_now() == timedelta(seconds=900)


def test_a_successful_sign_in_clears_the_names_count(demo_users: dict[str, Any]) -> None:
    for n in range(4):
        sign_in("approvers", "bob", f"guess-{n}")
    assert sign_in("approvers", "bob", "bob").signed_in
    for n in range(4):
        sign_in("approvers", "bob", f"again-{n}")

    assert sign_in("approvers", "bob", "bob").signed_in


def test_the_lock_message_and_the_stored_rows_repeat_nothing_typed(demo_users: dict[str, Any]) -> None:
    secret_guess = "hunter2-typed-into-the-name-field"
    for _ in range(5):
        response = sign_in("approvers", secret_guess, "pw")

    alert = response.content.decode().split('role="alert">')[1].split("</p>")[0]
    assert alert.strip() == str(LOCKED_MESSAGE)
    stored = [str(v) for row in SignInFailures.objects.values_list("key", "failures") for v in row]
    assert not [v for v in stored if secret_guess in v or "192.0.2.10" in v]
