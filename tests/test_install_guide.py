"""The install guide is the test (issue #39): docs/install.md's own code blocks, applied in order
to a project made by ``django-admin startproject``, make a working host.

Issue #39's story: a team following the guide was stopped at step 1 (``pip install switchyard``
installs someone else's project), then by a missing ``rest_framework.authtoken``, an undefined
``env()``, a global Celery setting that changed their own tasks, pages empty in their layout
and a 500 from their own URL namespace ``api`` — and the host project test could not see any of
it, because it was written together with the guide instead of from it.

So here nothing of Switchyard's set-up is written by the test: each step comes from a code block
of docs/install.md, found by the ``<!-- guide: ... -->`` comment before it (``append FILE``,
``create FILE``, ``layout FILE``, ``run``, ``start``, ``install``; the guide explains them). What the test does
write is what any host has of its own before it adds Switchyard: a user model that signs in by
e-mail, an app ``leave`` with a ``LeaveRequest`` model, a layout whose blocks are named
``page_title``, ``extra_head`` and ``main`` (not Switchyard's), its own URL namespace ``api``,
a sign-in page, and where its database and broker are. The ``install`` step installs the wheel
built from this tree (the package index is not asked); the guide's block must say
``pip install django-switchyard``.

Then the story: a leave request saved from a shell starts a run; the manager signs in by e-mail
in Chromium, approves from the inbox drawn in the host's layout; the record is updated by the
run; the task notice went out with a link under ``SITE_URL``; ``POST /wf/api/v1/runs/`` with a
token answers 202 next to the host's own ``api`` namespace; Swagger UI comes from static files;
``/healthz`` answers; a request deleted from a management-command process cancels its run; and
``check --deploy`` on the guide's settings says nothing of Switchyard's.

One ``startproject``, one virtualenv, one worker and one beat (the guide's two commands), the
suite's PostgreSQL server with a database of its own, a queue of its own on the suite's broker.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.browser import CHROMIUM, SKIP_REASON
from tests.support.hosting import (
    ROOT,
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

GUIDE = ROOT / "docs" / "install.md"
PASSWORD = "correct horse battery staple"
MANAGER = "maria@leave.test"
ACTIONS = "append|create|layout|run|start|install"
MARKER = re.compile(rf"<!-- guide: (?P<action>{ACTIONS})(?: (?P<path>\S+))? -->\n+```[^\n]*\n")


@dataclass(frozen=True)
class Step:
    action: str
    path: str
    text: str


def guide_steps(markdown: str) -> list[Step]:
    """The marked code blocks of the guide, in order."""
    steps = []
    for match in MARKER.finditer(markdown):
        end = markdown.index("\n```", match.end() - 1)
        steps.append(Step(match["action"], match["path"] or "", markdown[match.end() : end + 1]))
    return steps


def test_the_guide_marks_every_step_a_host_needs() -> None:
    """The markers are found (a changed comment syntax would otherwise make an empty test)."""
    steps = guide_steps(GUIDE.read_text())
    actions = [(step.action, step.path) for step in steps]
    assert actions[0] == ("install", "")
    for needed in (
        ("append", "proj/settings.py"),
        ("append", "proj/urls.py"),
        ("create", "templates/switchyard/base.html"),
        ("create", "proj/celery.py"),
        ("layout", "templates/base.html"),
        ("run", ""),
        ("start", ""),
    ):
        assert needed in actions, needed
    assert steps[0].text.strip() == "pip install django-switchyard"
    # every fenced block of the numbered steps that a host types into a file or a shell is marked
    # (the navigation tag is an optional snippet for the host's own layout)
    body = GUIDE.read_text()
    for fence in re.finditer(r"\n```(python|sh|yaml)\n", body):
        before = body[: fence.start()].rstrip("\n")
        assert before.endswith("-->"), f"an unmarked {fence[1]} block at offset {fence.start()}"


# --- what the host has of its own, before Switchyard -------------------------------------------

HOST_FILES = {
    "people/__init__.py": "",
    "people/models.py": """
from django.contrib.auth.models import AbstractBaseUser, BaseUserManager, PermissionsMixin
from django.db import models


class UserManager(BaseUserManager):
    def create_user(self, email, password=None, **extra):
        user = self.model(email=self.normalize_email(email), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_superuser(self, email, password=None, **extra):
        return self.create_user(email, password, is_staff=True, is_superuser=True, **extra)


class User(AbstractBaseUser, PermissionsMixin):
    email = models.EmailField(unique=True)
    is_active = models.BooleanField(default=True)
    is_staff = models.BooleanField(default=False)

    objects = UserManager()

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
""",
    "leave/__init__.py": "",
    "leave/models.py": """
from django.db import models


class LeaveRequest(models.Model):
    employee = models.CharField(max_length=150)
    days = models.PositiveIntegerField()
    status = models.CharField(max_length=20, default="requested")
""",
    # the host's own REST endpoints, in its own namespace "api"
    "hostapi/__init__.py": "",
    "hostapi/urls.py": """
from django.http import JsonResponse
from django.urls import path

app_name = "api"


def ping(request):
    return JsonResponse({"pong": True})


urlpatterns = [path("ping/", ping, name="ping")]
""",
    # the host's layout: its blocks are not named like Switchyard's
    "templates/base.html": """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>{% block page_title %}Leave{% endblock %} · Leave Co</title>
  {% block extra_head %}{% endblock %}
</head>
<body>
  <header id="host-header">Leave Co {% if user.is_authenticated %}<span>{{ user.email }}</span>{% endif %}
    <a href="{% url 'api:ping' %}">ping</a>
    <nav id="host-nav">{# navigation #}</nav></header>
  {% if messages %}<ul role="status">{% for m in messages %}<li>{{ m }}</li>{% endfor %}</ul>{% endif %}
  <main id="host-main">{% block main %}{% endblock %}</main>
</body>
</html>
""",
    "templates/registration/login.html": """{% extends "base.html" %}
{% block main %}
<form method="post">{% csrf_token %}
  <label for="id_username">E-mail</label> <input type="email" name="username" id="id_username">
  <label for="id_password">Password</label> <input type="password" name="password" id="id_password">
  <input type="hidden" name="next" value="{{ next }}">
  <button type="submit">Sign in</button>
</form>
{% endblock %}
""",
}

HOST_SETTINGS = """
import os

SECRET_KEY = os.environ["HOST_SECRET_KEY"]
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS += ["people", "leave", "hostapi"]
AUTH_USER_MODEL = "people.User"
"""

HOST_URLS = """
from django.urls import include

urlpatterns += [
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/", include("hostapi.urls")),
]
"""

# the host's broker (the guide's CELERY_BROKER_URL reads it from the environment): a queue of its
# own on the suite's broker, or kombu's filesystem transport in a folder of its own
HOST_BROKER = """
CELERY_TASK_DEFAULT_QUEUE = os.environ["HOST_QUEUE"]
if os.environ.get("HOST_BROKER_FOLDER"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": os.environ["HOST_BROKER_FOLDER"],
        "data_folder_out": os.environ["HOST_BROKER_FOLDER"],
    }
"""

MANAGERS = f"""
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
managers, _ = Group.objects.get_or_create(name="managers")
for codename in ("view_run", "add_run"):
    managers.permissions.add(Permission.objects.get(codename=codename, content_type__app_label="workflows"))
get_user_model().objects.create_user("{MANAGER}", "{PASSWORD}").groups.add(managers)
"""

RUN_OF = """
from workflows.models import Run
run = Run.objects.filter(subject_type="leave.leaverequest", subject_id="{pk}").first()
print(f"{{run.id}} {{run.status}}" if run else "-")
"""


class GuideHost:
    """``django-admin startproject proj``, the host's own apps, then the guide's steps."""

    def __init__(self, root: Path, wheel: Path) -> None:
        self.root = root
        self.wheel = wheel
        self.project = root / "project"
        self.processes = Processes(root)
        self.database = HostDatabase("guide")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        broker = broker_env(root / "broker")
        self.venv: HostVenv | None = None
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", str(root)),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "HOST_SECRET_KEY": secrets.token_urlsafe(50),
            "HOST_QUEUE": f"guide-{secrets.token_hex(4)}",
            # the guide's settings read these
            "DB_NAME": self.database.name,
            "DB_HOST": self.database.host,
            "DB_PORT": self.database.port,
            "DB_USER": self.database.user,
            "DB_PASSWORD": self.database.password,
            "CELERY_BROKER_URL": broker["BROKER_URL"],
            "SITE_URL": self.url,
            "EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend",
            "WEBHOOK_SIGNING_SECRET": secrets.token_urlsafe(32),
        }
        if "BROKER_FOLDER" in broker:
            self.env["HOST_BROKER_FOLDER"] = broker["BROKER_FOLDER"]

    def sh(self, line: str) -> str:
        return run(["bash", "-c", line], cwd=self.project, env=self.env)

    def manage(self, *args: str) -> str:
        return run(["python", "manage.py", *args], cwd=self.project, env=self.env)

    def shell(self, code: str) -> str:
        return self.manage("shell", "--no-imports", "-c", code)

    def logs(self) -> str:
        return self.processes.logs()

    def build(self) -> None:
        steps = guide_steps(GUIDE.read_text())
        install, rest = steps[0], steps[1:]
        assert install.action == "install" and install.text.strip() == "pip install django-switchyard"
        self.venv = HostVenv(self.root, self.wheel)  # the wheel built from this tree, not the index
        self.env["PATH"] = f"{self.venv.bin}:{self.env['PATH']}"
        self.project.mkdir()
        self.sh("django-admin startproject proj .")
        for name, text in HOST_FILES.items():
            self.write(name, text)
        self.append("proj/settings.py", HOST_SETTINGS + HOST_BROKER)
        self.append("proj/urls.py", HOST_URLS)
        self.manage("makemigrations", "people", "leave")
        for step in rest:
            if step.action == "append":
                self.append(step.path, step.text)
            elif step.action == "create":
                self.write(step.path, step.text)
            elif step.action == "layout":
                layout = self.project / step.path
                assert "{# navigation #}" in layout.read_text(), step.path
                layout.write_text(layout.read_text().replace("{# navigation #}", step.text.strip()))
            elif step.action == "run":
                for line in filter(None, map(str.strip, step.text.splitlines())):
                    self.sh(line)
            elif step.action == "start":
                for index, line in enumerate(filter(None, map(str.strip, step.text.splitlines()))):
                    self.processes.start(
                        f"guide-{index}", ["bash", "-c", f"exec {line}"], cwd=self.project, env=self.env
                    )

    def write(self, name: str, text: str) -> None:
        path = self.project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.lstrip("\n"))

    def append(self, name: str, text: str) -> None:
        with (self.project / name).open("a") as out:
            out.write("\n" + text)

    def run_of(self, pk: str) -> tuple[str, str] | None:
        line = self.shell(RUN_OF.format(pk=pk)).strip().splitlines()[-1]
        return None if line == "-" else (line.split()[0], line.split()[1])

    def run_with_status(self, pk: str, status: str) -> str | None:
        found = self.run_of(pk)
        return found[0] if found and found[1] == status else None

    def leave_request(self, employee: str, days: int) -> str:
        code = (
            "from leave.models import LeaveRequest; "
            f"print(LeaveRequest.objects.create(employee={employee!r}, days={days}).pk)"
        )
        return self.shell(code).strip().splitlines()[-1]

    def leave_status(self, pk: str) -> str:
        code = f"from leave.models import LeaveRequest; print(LeaveRequest.objects.get(pk={pk}).status)"
        return self.shell(code).strip().splitlines()[-1]


@pytest.fixture(scope="module")
def guide_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuideHost]:
    built = build_distributions(tmp_path_factory.mktemp("source"))
    host = GuideHost(tmp_path_factory.mktemp("guide"), built["wheel"])
    host.database.recreate()
    try:
        host.build()
        host.shell(MANAGERS)
        host.processes.start(
            "web",
            ["python", "manage.py", "runserver", "--noreload", f"127.0.0.1:{host.port}"],
            cwd=host.project,
            env=host.env,
        )
        wait_for(lambda: answers(f"{host.url}/accounts/login/"), what="the host's runserver", logs=host.logs)
        yield host
    finally:
        host.processes.stop()
        host.database.recreate(drop_only=True)


def request(url: str, *, method: str = "GET", body: dict | None = None, token: str = "") -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Token {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def test_a_request_saved_is_approved_in_the_hosts_layout_and_the_record_updated(
    guide_host: GuideHost, browser: Browser
) -> None:
    host = guide_host
    pk = host.leave_request("Ada", 3)
    run_id = wait_for(
        lambda: host.run_with_status(pk, "WAITING"), what="the record trigger to start a run", logs=host.logs
    )

    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(f"{host.url}/wf/tasks/")
        assert page.url.startswith(f"{host.url}/accounts/login/"), page.url  # the host's sign-in
        page.get_by_label("E-mail").fill(MANAGER)
        page.get_by_label("Password").fill(PASSWORD)
        with page.expect_navigation():
            page.get_by_role("button", name="Sign in").click()
        assert page.url == f"{host.url}/wf/tasks/", page.url
        # Switchyard's inbox inside the host's layout, its content in the host's <main>
        assert MANAGER in page.locator("#host-header").inner_text()
        # the guide's navigation tag in the host's own header: the pages this manager may open
        # (the inbox, the runs with view_run; no Ops without the operate capability)
        nav = page.locator("#host-nav")
        assert nav.get_by_role("link", name="Inbox").get_attribute("aria-current") == "page"
        assert nav.get_by_role("link", name="Runs").get_attribute("href") == "/wf/runs/"
        assert nav.get_by_role("link", name="Ops").count() == 0
        page.locator("#host-main").get_by_role("link", name="Leave for Ada: 3 days").click()
        assert page.get_by_role("heading", level=1).inner_text() == "Leave for Ada: 3 days"
        page.get_by_role("button", name="Approve").click()
        assert "Approve" in page.get_by_role("status").first.inner_text()
    finally:
        context.close()

    wait_for(lambda: host.leave_status(pk) == "approved", what="the run to update the record", logs=host.logs)
    wait_for(lambda: host.run_with_status(pk, "COMPLETED"), what="the run to complete", logs=host.logs)
    # the task notice went out (console backend) with a link under SITE_URL, from the worker of
    # the outbound queue (the guide's second `start` line), never the executor's
    outbound = host.processes.log("guide-1")
    assert "New task: Leave for Ada: 3 days" in outbound, host.logs()
    assert f"{host.url}/wf/tasks/" in outbound, host.logs()
    assert "New task:" not in host.processes.log("guide-0"), host.logs()
    assert run_id


def test_the_api_docs_and_health_answer_next_to_the_hosts_own_api_namespace(guide_host: GuideHost) -> None:
    host = guide_host
    token = re.search(r"Generated token (\w+)", host.manage("drf_create_token", MANAGER))
    assert token, "drf_create_token needs rest_framework.authtoken, which the guide installs"
    status, body = request(
        f"{host.url}/wf/api/v1/runs/",
        method="POST",
        body={"definition_id": "leave-approval", "payload": {"id": 424242, "employee": "API", "days": 1}},
        token=token[1],
    )
    assert status == 202, body  # issue #39: a host namespace "api" made this a 500 after recording
    assert json.loads(body)["kind"] == "START", body
    assert request(f"{host.url}/api/ping/") == (200, '{"pong": true}')  # the host's own namespace

    status, docs = request(f"{host.url}/wf/api/docs/")
    assert status == 200, docs
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", docs)
    assert assets and all(a.startswith("/static/") for a in assets), assets  # no CDN
    assert "/wf/api/schema/" in docs
    for asset in assets:
        assert request(f"{host.url}{asset}")[0] == 200, asset
    assert request(f"{host.url}/wf/api/schema/", token=token[1])[0] == 200

    status, health = request(f"{host.url}/healthz")
    assert status == 200 and json.loads(health)["status"] == "ok", health


def test_a_request_deleted_from_a_management_command_cancels_its_run(guide_host: GuideHost) -> None:
    host = guide_host
    pk = host.leave_request("Bob", 2)
    wait_for(lambda: host.run_with_status(pk, "WAITING"), what="the record trigger to start a run", logs=host.logs)
    host.shell(f"from leave.models import LeaveRequest; LeaveRequest.objects.get(pk={pk}).delete()")
    wait_for(
        lambda: host.run_with_status(pk, "CANCELLED"),
        what="the deletion's capture to cancel the run",
        logs=host.logs,
    )


def test_check_on_the_guides_settings_says_nothing_of_switchyard(guide_host: GuideHost) -> None:
    assert "System check identified no issues" in guide_host.manage("check")
    done = guide_host.sh("python manage.py check --deploy 2>&1 || true")
    ours = re.findall(r"\((?:workflows|capture|designer|drf_spectacular)\.[EW]\d+\)", done)
    assert ours == [], done
