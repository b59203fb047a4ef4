"""The main navigation, the sign-out journey and the error pages (issue #30).

Each navigation link shows only to users whose capability opens its page (never a link that
ends in a bare 403) and only when the host mounted its URL; signing out is a POST that lands
on Switchyard's own signed-out page, whose "Sign in again" lets an approver (not staff) back
in; 403/404/500 are branded pages, and stay problem+json under /api/.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.contrib.staticfiles import finders
from django.core.exceptions import PermissionDenied
from django.test import Client, RequestFactory, override_settings
from django.urls import include, path

from workflows.views import errors

pytestmark = pytest.mark.django_db

# A host that mounted only the approvers' and run pages (no ops, designer, admin or API).
urlpatterns = [
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("workflows.views.urls")),
]


def user(name: str, *permissions: str, **flags: Any) -> User:
    account = User.objects.create_user(name, password=name, **flags)
    for dotted in permissions:
        app_label, codename = dotted.split(".")
        account.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return account


def signed_in(account: User) -> Client:
    client = Client()
    client.force_login(account)
    return client


def nav_links(html: str) -> list[str]:
    nav = re.search(r'<nav class="site-nav" aria-label="Main">(.*?)</nav>', html, re.S)
    assert nav, "no main navigation"
    items = re.search(r"<ul>(.*?)</ul>", nav.group(1), re.S)
    return re.findall(r"<a [^>]*>([^<]+)</a>", items.group(1)) if items else []


@pytest.mark.parametrize(
    ("permissions", "flags", "links"),
    [
        ((), {}, ["Inbox"]),  # an approver: tasks only
        (("workflows.view_run",), {}, ["Inbox", "Runs"]),
        (("workflows.change_command",), {}, ["Inbox", "Ops"]),
        (("capture.reconcile_capture",), {}, ["Inbox", "Ops"]),
        (("workflows.view_definitionversion",), {}, ["Inbox", "Designer"]),
        ((), {"is_staff": True}, ["Inbox", "Admin"]),  # staff opens the admin, nothing more
        (("workflows.migrate_runs",), {}, ["Inbox"]),  # the dialog's links are in the admin
        (("workflows.migrate_runs",), {"is_staff": True}, ["Inbox", "Admin"]),  # cannot read the list
        (
            ("workflows.migrate_runs", "workflows.view_definitionversion"),
            {"is_staff": True},
            ["Inbox", "Designer", "Migrate", "Admin"],
        ),
        (("workflows.change_definitionversion",), {"is_staff": True}, ["Inbox", "Designer", "Migrate", "Admin"]),
        (("workflows.add_run",), {}, ["Inbox", "New request", "My requests"]),  # a requester
        (
            (),
            {"is_superuser": True, "is_staff": True},
            ["Inbox", "Runs", "New request", "My requests", "Ops", "Designer", "Migrate", "Admin"],
        ),
    ],
)
def test_each_link_shows_only_to_users_who_may_open_its_page(
    permissions: tuple[str, ...], flags: dict[str, bool], links: list[str]
) -> None:
    client = signed_in(user("someone", *permissions, **flags))

    response = client.get("/tasks/")

    assert response.status_code == 200
    html = response.content.decode()
    assert nav_links(html) == links
    for href in re.findall(r'<li><a href="([^"]+)"', html):
        assert client.get(href).status_code == 200, f"{href} is in the navigation but does not open"


def test_the_current_section_is_marked_and_sign_out_is_a_post_form() -> None:
    client = signed_in(user("viewer", "workflows.view_run"))

    html = client.get("/runs/").content.decode()

    assert '<a href="/runs/" aria-current="page">Runs</a>' in html
    assert '<a href="/tasks/">Inbox</a>' in html
    form = re.search(r'<form method="post" action="/accounts/logout/">(.*?)</form>', html, re.S)
    assert form and "csrfmiddlewaretoken" in form.group(1) and "Sign out" in form.group(1)


def current_links(html: str) -> list[str]:
    return re.findall(r'<a href="[^"]+" aria-current="page">([^<]+)</a>', html)


def test_only_the_requesters_link_of_the_page_shown_is_current() -> None:
    """Both links live in the requesters' namespace, and both were marked current on any of
    its pages (issue #30): New request is current on the list and the start forms, My requests
    on the list of requests and a request's page."""
    from tests.engine import documents
    from tests.views.test_tasks_pages import deploy
    from workflows import operations

    account = user("requester", "workflows.add_run")
    client = signed_in(account)
    deploy(documents.APPROVAL)
    run_id = operations.start(
        definition_id="approval", payload={"number": "PO-1", "total": 4800, "supplier": "Acme"}, actor=account
    ).run_id

    assert current_links(client.get("/requests/new/").content.decode()) == ["New request"]
    assert current_links(client.get("/requests/new/approval/").content.decode()) == ["New request"]
    assert current_links(client.get("/requests/").content.decode()) == ["My requests"]
    page = client.get(f"/requests/{run_id}/")
    assert page.status_code == 200
    assert current_links(page.content.decode()) == ["My requests"]


def test_signed_out_visitors_see_no_links_but_sign_in() -> None:
    html = Client().get("/accounts/login/").content.decode()

    assert nav_links(html) == []
    assert '<a href="/accounts/login/">Sign in</a>' in html


@override_settings(ROOT_URLCONF=__name__)
def test_links_to_parts_the_host_did_not_mount_are_left_out() -> None:
    client = signed_in(user("root", is_superuser=True, is_staff=True))

    assert nav_links(client.get("/tasks/").content.decode()) == ["Inbox", "Runs", "New request", "My requests"]


def test_the_page_links_its_favicon_which_the_site_also_serves_at_favicon_ico() -> None:
    html = Client().get("/accounts/login/").content.decode()

    assert '<link rel="icon" href="/static/workflows/favicon.svg" type="image/svg+xml">' in html
    response = Client().get("/favicon.ico")
    assert response.status_code == 302 and response["Location"] == "/static/site/favicon.svg"
    assert finders.find("site/favicon.svg")  # the reference site's own, under static/


def test_the_sites_own_assets_live_in_static_and_take_no_path_of_an_apps_asset() -> None:
    site = Path(settings.BASE_DIR) / "static"
    assert [str(d) for d in settings.STATICFILES_DIRS] == [str(site)]
    ours = {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()}
    assert ours and all(name.startswith("site/") for name in ours), ours
    for app in ("workflows", "designer", "capture"):
        folder = Path(apps.get_app_config(app).path) / "static"
        app_assets = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
        assert not ours & app_assets, ours & app_assets


# --- signing out ------------------------------------------------------------------------------


def test_an_approver_signs_out_lands_on_the_signed_out_page_and_signs_in_again() -> None:
    user("alice")
    client = Client(enforce_csrf_checks=True)
    client.post("/accounts/login/", {"username": "alice", "password": "alice", "csrfmiddlewaretoken": _token(client)})
    assert client.get("/tasks/").status_code == 200

    response = client.post("/accounts/logout/", {"csrfmiddlewaretoken": client.cookies["csrftoken"].value})

    assert response.status_code == 302 and response["Location"] == "/accounts/signed-out/"
    page = client.get(response["Location"])
    assert page.status_code == 200
    html = page.content.decode()
    assert "You have signed out" in html
    assert '<a class="button primary" href="/accounts/login/">Sign in again</a>' in html
    assert client.get("/tasks/")["Location"].startswith("/accounts/login/")  # really signed out

    again = client.post(
        "/accounts/login/", {"username": "alice", "password": "alice", "csrfmiddlewaretoken": _token(client)}
    )
    assert again.status_code == 302 and again["Location"] == "/tasks/"
    assert client.get("/tasks/").status_code == 200


def _token(client: Client) -> str:
    client.get("/accounts/login/")
    return str(client.cookies["csrftoken"].value)


def test_sign_out_refuses_a_get_and_a_post_without_the_csrf_token() -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user("alice"))

    assert client.get("/accounts/logout/").status_code == 405
    assert client.post("/accounts/logout/").status_code == 403
    assert client.get("/tasks/").status_code == 200  # still signed in


def test_the_admin_sign_out_lands_on_the_same_page_and_the_admin_is_branded() -> None:
    client = signed_in(user("root", is_superuser=True, is_staff=True))

    html = client.get("/admin/").content.decode()
    assert "<title>Site administration | Switchyard administration</title>" in html
    assert "Switchyard administration" in re.search(r'<div id="site-name">(.*?)</div>', html, re.S).group(1)  # type: ignore[union-attr]

    response = client.post("/admin/logout/")
    assert response.status_code == 302 and response["Location"] == "/accounts/signed-out/"


# --- error pages ------------------------------------------------------------------------------


def test_a_forbidden_page_says_which_permission_is_missing_and_offers_a_way_back() -> None:
    client = signed_in(user("alice"))

    response = client.get("/runs/")

    assert response.status_code == 403
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert "You can't open this page" in html
    assert "Missing: this needs the view runs capability (permission workflows.view_run)." in html
    assert '<a class="button primary" href="/tasks/">Go to your inbox</a>' in html
    assert 'href="/accounts/login/?next=/runs/"' in html
    assert nav_links(html) == ["Inbox"]


def test_a_missing_page_is_branded_and_does_not_echo_the_path() -> None:
    client = signed_in(user("alice"))

    response = client.get("/no-such-page-<b>x</b>/")

    assert response.status_code == 404
    html = response.content.decode()
    assert "Page not found" in html and "no-such-page" not in html
    assert nav_links(html) == ["Inbox"]
    assert "Page not found" in Client().get("/nothing-here/").content.decode()  # signed out too


def test_api_paths_keep_their_problem_answers() -> None:
    client = signed_in(user("alice"))

    refused = client.get("/api/v1/runs/")
    assert refused.status_code == 403 and refused["Content-Type"] == "application/problem+json"
    assert json.loads(refused.content)["code"] == "PERMISSION_DENIED"
    missing = client.get("/api/v1/nothing/")
    assert missing.status_code == 404 and missing["Content-Type"] == "application/problem+json"
    outside = client.get("/api/nothing/")  # under the API's mount but outside v1: the site's handler
    assert outside.status_code == 404 and outside["Content-Type"] == "application/problem+json"
    assert json.loads(outside.content)["code"] == "NOT_FOUND"
    denied = errors.forbidden(
        RequestFactory().get("/api/v1/runs/"), PermissionDenied("this needs the operate capability")
    )
    assert denied.status_code == 403 and denied["Content-Type"] == "application/problem+json"
    assert json.loads(denied.content)["detail"] == "this needs the operate capability"


@pytest.mark.django_db(databases=[])  # any query fails the test
def test_the_500_page_renders_without_a_database_or_request_context() -> None:
    response = errors.server_error(RequestFactory().get("/tasks/"))

    assert response.status_code == 500
    html = response.content.decode()
    assert "Something went wrong" in html and 'href="/"' in html
    assert "Signed in as" not in html and "csrfmiddlewaretoken" not in html

    api = errors.server_error(RequestFactory().get("/api/v1/runs/"))
    assert api.status_code == 500 and api["Content-Type"] == "application/problem+json"
    assert json.loads(api.content)["code"] == "INTERNAL"
