"""Switchyard in someone else's project (issue #28; the second variant next to
tests/test_install_guide.py, which builds its host from docs/install.md itself): the
``django-switchyard`` wheel and sdist are built from pyproject.toml, their contents checked,
and the wheel installed into a fresh
virtualenv with the host project under ``tests/host_project/`` (its own Invoice model, a user
model whose username is the e-mail, its own layout, Switchyard under ``/approvals/``).

Then, as a team adopting Switchyard would: ``migrate``, load the host's packaged definition,
a real Celery worker (with beat) on the suite's broker, an Invoice over the limit saved (its
record trigger starts a review run), an approver signs in by e-mail in Chromium, approves
from the inbox and sees the run completed in the run viewer; the admin pages of the three apps
render; ``check --deploy`` on the host's production settings reports nothing.

The new virtualenv gets only the wheel (``pip install --no-deps``); the dependencies come from
the suite's own virtualenv through a ``.pth`` line, so no registry is asked. The repository is
not on its path: ``workflows`` is imported from the wheel (the test checks it).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.browser import CHROMIUM, SKIP_REASON
from tests.support.hosting import (
    HostDatabase,
    HostVenv,
    Processes,
    answers,
    broker_env,
    build_distributions,
    free_port,
    run,
    wait_for,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=SKIP_REASON),
]

ROOT = Path(__file__).resolve().parent.parent
HOST_PROJECT = ROOT / "tests" / "host_project"
APPS = ("workflows", "capture", "designer")
# the reference site, the tests and the developer's tools never ship
NOT_SHIPPED = (
    "config/",
    "demo/",
    "accounts/",
    "tests/",
    "bench/",
    "static/",
    "templates/",
    "dev.py",
    "manage.py",
    "requirements/",
)
PASSWORD = "correct horse battery staple"


def expected_package_data() -> set[str]:
    """Every template, static file, SQL file, translation catalog and migration of the three apps,
    as archive names."""
    found: set[str] = set()
    for app in APPS:
        for path in (ROOT / app).rglob("*"):
            relative = path.relative_to(ROOT).as_posix()
            if "__pycache__" in relative or not path.is_file():
                continue
            data = any(f"/{kind}/" in relative for kind in ("templates", "static", "locale")) or path.suffix == ".sql"
            if data or ("/migrations/" in relative and path.suffix == ".py"):
                found.add(relative)
    return found


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel, built by setuptools' PEP 517 hooks from a clean copy."""
    return build_distributions(tmp_path_factory.mktemp("source"))


def test_the_wheel_and_the_sdist_hold_the_apps_and_nothing_of_the_reference_site(built: dict[str, Path]) -> None:
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = set(wheel.namelist())
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        wheel_metadata = wheel.read(metadata).decode()
        requires = [line for line in wheel_metadata.splitlines() if line.startswith("Requires-Dist:")]
    import workflows

    assert {name.split("/")[0] for name in names} == {*APPS, f"django_switchyard-{workflows.__version__}.dist-info"}
    assert "Name: django-switchyard" in wheel_metadata, wheel_metadata[:200]
    assert expected_package_data() <= names, sorted(expected_package_data() - names)
    assert "workflows/templates/switchyard/base.html" in names
    assert "workflows/locale/de/LC_MESSAGES/django.mo" in names  # a host compiles nothing of ours
    assert any(n.startswith("workflows/management/commands/") for n in names)
    assert not [n for n in names if n.startswith(NOT_SHIPPED)]
    # runtime dependencies as ranges; the embedded PostgreSQL only as an extra
    assert any(r.startswith("Requires-Dist: Django") and "<6" in r for r in requires), requires
    assert any("pgserver" in r and "extra == " in r for r in requires), requires
    assert not [r for r in requires if re.search(r"[^<>!~=]==\s*\d", r)], requires  # no exact pins

    with tarfile.open(built["sdist"]) as sdist:
        top = sdist.getnames()[0].split("/")[0]
        members = {name.removeprefix(f"{top}/") for name in sdist.getnames()}
    assert expected_package_data() <= members, sorted(expected_package_data() - members)
    assert {"pyproject.toml", "README.md", "MANIFEST.in"} <= members
    # newer setuptools add tests/test*.py to every sdist unless MANIFEST.in prunes them
    assert not [n for n in members if n.startswith(NOT_SHIPPED)]
    assert not [n for n in members if "/test" in f"/{n}" and not n.startswith(APPS)]


# --- the host project ------------------------------------------------------------------------


class Host:
    """The host project in a virtualenv of its own, with the wheel installed."""

    def __init__(self, root: Path, wheel: Path) -> None:
        self.root = root
        self.project = root / "project"
        shutil.copytree(HOST_PROJECT, self.project, ignore=shutil.ignore_patterns("__pycache__"))
        self.python = HostVenv(root, wheel).python
        self.database = HostDatabase("host")
        broker = broker_env(root / "broker")
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", str(root)),
            "LANG": "C.UTF-8",
            "DJANGO_SETTINGS_MODULE": "acme.settings",
            "ACME_SECRET_KEY": secrets.token_urlsafe(50),
            "ACME_WEBHOOK_SIGNING_SECRET": secrets.token_urlsafe(32),
            "PYTHONDONTWRITEBYTECODE": "1",
            "ACME_DB_NAME": self.database.name,
            "ACME_DB_HOST": self.database.host,
            "ACME_DB_PORT": self.database.port,
            "ACME_DB_USER": self.database.user,
            "ACME_DB_PASSWORD": self.database.password,
            "ACME_BROKER_URL": broker["BROKER_URL"],
            "ACME_QUEUE": f"acme-{secrets.token_hex(4)}",  # its own queue on a shared broker
        }
        if "BROKER_FOLDER" in broker:
            self.env["ACME_BROKER_FOLDER"] = broker["BROKER_FOLDER"]
        self.processes = Processes(root)

    def manage(self, *args: str, **env: str) -> str:
        return run([self.python, "manage.py", *args], cwd=self.project, env={**self.env, **env})

    def shell(self, code: str) -> str:
        return self.manage("shell", "--no-imports", "-c", code)

    def start(self, name: str, *argv: str) -> None:
        self.processes.start(name, [self.python, *argv], cwd=self.project, env=self.env)

    def logs(self) -> str:
        return self.processes.logs()

    def stop(self) -> None:
        self.processes.stop()


@pytest.fixture(scope="module")
def host(built: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    project = Host(tmp_path_factory.mktemp("host"), built["wheel"])
    project.database.recreate()
    try:
        yield project
    finally:
        project.stop()
        project.database.recreate(drop_only=True)


SETUP = """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
approvers, _ = Group.objects.get_or_create(name="approvers")
approvers.permissions.add(Permission.objects.get(codename="view_run", content_type__app_label="workflows"))
User = get_user_model()
User.objects.create_user("ada@acme.test", "{password}", full_name="Ada").groups.add(approvers)
User.objects.create_superuser("root@acme.test", "{password}")
print("users ready")
"""

SAVE_INVOICES = """
from decimal import Decimal
from billing.models import Invoice
Invoice.objects.create(number="INV-7", customer="Initech", amount=Decimal("120.00"))
Invoice.objects.create(number="INV-8", customer="Globex", amount=Decimal("9800.00"))
"""

RUNS = """
from workflows.models import Run
print(";".join(f"{r.business_key}={r.status}={r.id}" for r in Run.objects.order_by("created_at")))
"""

# The admin index, and the change list and the first row's change page of every Switchyard model
# registered there (workflows and capture; the designer keeps no records of its own in the admin,
# so its pages are checked instead), as the host's superuser signed in by e-mail.
ADMIN_PAGES = """
from django.contrib import admin
from django.test import Client
from django.urls import reverse
client = Client()
assert client.login(username="root@acme.test", password="{password}")
pages = [
    reverse("admin:index"),
    reverse("switchyard_designer:list"),
    reverse("switchyard_ops:dashboard"),
    reverse("switchyard_ops:radar"),
]
for model in admin.site._registry:
    if model._meta.app_label in ("workflows", "capture"):
        prefix = f"admin:{{model._meta.app_label}}_{{model._meta.model_name}}"
        pages.append(reverse(f"{{prefix}}_changelist"))
        first = model._default_manager.order_by("pk").first()
        if first is not None:
            pages.append(reverse(f"{{prefix}}_change", args=(first.pk,)))
for page in pages:
    response = client.get(page, HTTP_HOST="127.0.0.1")
    assert response.status_code == 200, (page, response.status_code)
print(" ".join(pages))
"""


def test_a_host_project_adds_switchyard_from_the_wheel(host: Host, tmp_path: Path, browser: Browser) -> None:
    where = host.shell("import workflows, capture, designer; print(workflows.__file__, designer.__file__)")
    assert str(host.root / "venv") in where and str(ROOT) not in where, where

    host.manage("migrate", "--no-input")
    assert "invoice-review" in host.manage("load_packaged_definitions")
    host.shell(SETUP.format(password=PASSWORD))
    host.start("worker", "-m", "celery", "-A", "acme", "worker", "-B", "-c", "2", "-l", "info")
    port = free_port()
    host.start("web", "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}")
    root = f"http://127.0.0.1:{port}"

    host.shell(SAVE_INVOICES)  # INV-8 is over the limit: its trigger starts a review

    def review_started() -> str | None:  # the run waits at its human task
        runs = [r.split("=") for r in host.shell(RUNS).strip().split(";") if r]
        return next((run_id for key, status, run_id in runs if key == "INV-8" and status == "WAITING"), None)

    run_id = wait_for(review_started, what="the record trigger to start a review of INV-8", logs=host.logs)
    assert "INV-7" not in host.shell(RUNS)

    wait_for(lambda: answers(f"{root}/login/"), what="the host's runserver", logs=host.logs)
    shots = Path(os.environ.get("HOST_PROJECT_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    context = browser.new_context()  # the suite's Chromium (one Playwright per process)
    try:
        page = context.new_page()
        page.goto(f"{root}/approvals/tasks/")
        assert page.url.startswith(f"{root}/login/"), page.url  # the host's own sign-in page
        page.get_by_label("E-mail").fill("ada@acme.test")
        page.get_by_label("Password").fill(PASSWORD)
        with page.expect_navigation():
            page.get_by_role("button", name="Sign in").click()
        assert page.url == f"{root}/approvals/tasks/", page.url
        # Switchyard's inbox inside Acme's layout
        assert page.locator("#acme-header").inner_text().startswith("Acme Finance")
        assert "ada@acme.test" in page.locator("#acme-header").inner_text()
        page.screenshot(path=str(shots / "host-inbox.png"), full_page=True)
        page.get_by_role("link", name="Review invoice INV-8").click()
        assert page.get_by_role("heading", level=1).inner_text() == "Review invoice INV-8"
        assert page.url.startswith(f"{root}/approvals/tasks/"), page.url
        page.get_by_role("button", name="Approve").click()
        assert "Your decision “Approve” was recorded." in page.get_by_role("status").first.inner_text()

        page.goto(f"{root}/approvals/runs/{run_id}/")

        def completed() -> bool:
            page.reload()
            return page.locator("#run-status").inner_text() == "Completed"

        wait_for(completed, what="the run page to show the run completed", logs=host.logs, timeout=30)
        assert page.locator("#acme-header").is_visible()
        assert "ada@acme.test" in page.content()  # the decision's actor, by e-mail
        page.screenshot(path=str(shots / "host-run.png"), full_page=True)
    finally:
        context.close()

    rendered = host.shell(ADMIN_PAGES.format(password=PASSWORD)).split()
    assert "/approvals/designer/" in rendered and "/admin/workflows/run/" in rendered, rendered
    assert "/admin/capture/capture/" in rendered, rendered

    deploy = host.manage(
        "check", "--deploy", "--fail-level", "WARNING", DJANGO_SETTINGS_MODULE="acme.settings_production"
    )
    assert "System check identified no issues" in deploy, deploy
