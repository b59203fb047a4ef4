"""Suite-wide fixtures: real PostgreSQL (pytest-django), a real Celery worker and beat, and
Debian Chromium through Playwright.

- ``celery_worker_process`` (session): a Celery worker (prefork, 2) and beat as separate
  processes on the suite's broker, connected to the database pytest-django created, with a
  6 s executor lease (``WORKFLOWS_EXECUTOR_LEASE_SECONDS`` unless the environment sets it).
  Tests using it need ``@pytest.mark.django_db(transaction=True)``: the worker only sees
  committed rows.
- ``crash_celery_worker``: ``crash()`` SIGKILLs the worker with its pool and starts a new
  one; ``crash(restart=False)`` leaves it dead until ``celery_worker_process.start_worker()``.
  The worker is running again after the test either way.
- ``browser`` (session) and ``page`` (a fresh context on ``live_server``); ``login`` is in
  ``tests.support.browser``. Skipped with a reason when /usr/bin/chromium is missing.
- ``demo_users``: the users of ``manage.py seed_demo``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, SKIP_REASON
from tests.support.processes import CeleryProcesses

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

# Playwright's sync API runs an event loop in this thread; Django would then refuse ORM
# calls from tests and live_server as "async-unsafe". They are not async: allow them.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
# Every worker the suite starts (the session's, and those tests start with CeleryProcesses from
# this environment) holds its leases for 6 s instead of the production 30 s, so a test that
# kills a worker waits seconds for the lapsed lease to be taken over. Set here, before any
# worker starts; this process's own settings were read before the conftests were imported.
os.environ.setdefault("WORKFLOWS_EXECUTOR_LEASE_SECONDS", "6")


@pytest.fixture(scope="session", autouse=True)
def _fast_password_hashing() -> Iterator[None]:
    # PBKDF2's deliberate slowness costs ~0.25s per demo user and buys nothing in tests.
    from django.test import override_settings

    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture(scope="session", autouse=True)
def _callbacks_discovered() -> None:
    """Every installed app's ``workflow_callbacks`` imported once, as the product's first use
    does, before any test can narrow INSTALLED_APPS (tests/test_checks.py does): discovery runs
    once per process, and under pytest-xdist whichever test comes first in a worker would
    otherwise decide what that worker's registry holds."""
    from workflows.definitions import catalogs

    catalogs.ensure_discovered()


# --- Celery ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def celery_worker_process(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryProcesses]:
    from django.db import connection

    from config.celery import app

    env = {**os.environ, "SWITCHYARD_DB_NAME": connection.settings_dict["NAME"]}
    # Messages left by earlier sessions (or by tests that ran before the worker) would be
    # for rows that no longer exist: start from an empty queue.
    with app.connection_for_write() as conn:
        app.control.purge(connection=conn)
    processes = CeleryProcesses(env, tmp_path_factory.mktemp("celery"))
    try:
        processes.start_worker()
        processes.start_beat()
        yield processes
    finally:
        processes.stop()


@pytest.fixture(autouse=True)
def _worker_quiet_before_flush(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that used the worker, wait until the worker has finished what the test set
    going before pytest-django truncates the tables: a worker transaction still writing while
    TRUNCATE takes its locks one table at a time is a deadlock, and the flush is its victim.

    Requesting pytest-django's helper first makes this teardown run before its flush.
    """
    if not _uses_worker(request.node):
        yield
        return
    request.getfixturevalue("_django_db_helper")
    yield
    _await_worker_quiet(timeout=30.0)


def _flush_retrying_deadlocks() -> None:
    """A beat sweep can still start between the quiet reads and TRUNCATE; PostgreSQL then
    picks one side of the deadlock. When that is the flush, run it again (the sweep's
    transaction is over by then): the next test must start from empty tables."""
    from django.core.management.base import CommandError
    from django.test import testcases

    original = testcases.TransactionTestCase._fixture_teardown

    def teardown(self: Any) -> None:
        for attempt in range(3):
            try:
                return original(self)
            except CommandError as exc:
                if attempt == 2 or "deadlock" not in str(exc.__cause__):
                    raise

    testcases.TransactionTestCase._fixture_teardown = teardown  # type: ignore[method-assign]


_flush_retrying_deadlocks()


def _await_worker_quiet(*, timeout: float) -> None:
    """Nothing runnable, no capture being dispatched, and no other connection to the test
    database inside a transaction, seen on two reads in a row. Gives up quietly at ``timeout``:
    the flush then reports what still held the tables."""
    from django.db import connection

    from tests.support.waiting import eventually
    from workflows.engine import probe

    quiet_reads = 0

    def quiet_twice() -> bool:
        nonlocal quiet_reads
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state IN ('active', 'idle in transaction')"
            )
            busy = cursor.fetchone()[0]
            cursor.execute(
                "SELECT count(*) FROM capture_captures WHERE status = 'DISPATCHING' "
                "OR (status = 'PENDING' AND available_at <= now())"
            )
            capturing = cursor.fetchone()[0]
        quiet = busy == 0 and capturing == 0 and probe.runnable_count() == 0
        quiet_reads = quiet_reads + 1 if quiet else 0
        return quiet_reads >= 2

    try:
        eventually(quiet_twice, timeout=timeout, interval=0.05, what="the worker to go quiet")
    except AssertionError:
        pass


@pytest.fixture
def crash_celery_worker(celery_worker_process: CeleryProcesses) -> Iterator[Callable[..., None]]:
    def crash(*, restart: bool = True) -> None:
        celery_worker_process.kill_worker()
        if restart:
            celery_worker_process.start_worker()

    yield crash
    if not celery_worker_process.worker_running:
        celery_worker_process.start_worker()


# --- browser -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip(SKIP_REASON)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser, live_server: Any) -> Iterator[Page]:
    context = browser.new_context(base_url=live_server.url)
    context.set_default_timeout(15_000)
    try:
        yield context.new_page()
    finally:
        context.close()


# --- data ----------------------------------------------------------------------------------


@pytest.fixture
def demo_users(db: None) -> dict[str, Any]:
    """admin (superuser), alice and bob (group ``approvers``), requester; password = username."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("seed_demo", verbosity=0)
    return {u.username: u for u in get_user_model().objects.filter(username__in=["admin", "alice", "bob", "requester"])}


def _uses_worker(item: pytest.Item) -> bool:
    return "celery_worker_process" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "browser" in fixtures or "page" in fixtures:
            item.add_marker(pytest.mark.browser)
        if _uses_worker(item) or "e2e" in item.path.parts:
            item.add_marker(pytest.mark.e2e)
    # Once started, the session's worker and beat keep claiming committed work. Tests that
    # drive the executor themselves (transactional ones) must not race them, so every test
    # that uses the worker runs last. Within each group the slow tests come first, so that
    # under pytest-xdist a long test overlaps the short ones on the other workers instead of
    # running alone at the end. Stable sort: pytest-django's order holds otherwise.
    # pytest-django's groups are kept (plain, database, transactional: a transactional test's
    # flush empties what the migrations put in, which the rollback tests read).
    items.sort(key=lambda item: (_uses_worker(item), _django_group(item), item.get_closest_marker("slow") is None))


def _django_group(item: pytest.Item) -> int:
    """pytest-django's order: 0 database in a rolled-back transaction, 1 transactional, 2 none."""
    from django.test import TestCase, TransactionTestCase

    cls = getattr(item, "cls", None)
    if cls is not None and issubclass(cls, TransactionTestCase):
        return 0 if issubclass(cls, TestCase) else 1
    fixtures = getattr(item, "fixturenames", ())
    marker = item.get_closest_marker("django_db")
    if marker is not None and (marker.kwargs.get("transaction") or marker.kwargs.get("reset_sequences")):
        return 1
    if "transactional_db" in fixtures or "live_server" in fixtures:
        return 1
    return 0 if marker is not None or "db" in fixtures else 2
