"""API test helpers: token-authenticated clients for users with exactly the permissions a
test names, a deployed purchase definition, and the in-process executor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.api import documents

SENTINEL = "LEAK-SENTINEL-5e1d"


def permission(dotted: str) -> Permission:
    app_label, codename = dotted.split(".")
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


@pytest.fixture
def make_user(db: None) -> Callable[..., User]:
    def _make(username: str, *perms: str, superuser: bool = False, groups: tuple[str, ...] = ()) -> User:
        user = User.objects.create_user(username=username, password=username, is_superuser=superuser)
        user.user_permissions.add(*[permission(p) for p in perms])
        for name in groups:
            user.groups.add(Group.objects.get_or_create(name=name)[0])
        return user

    return _make


@pytest.fixture
def client_for() -> Callable[[User | None], APIClient]:
    def _client(user: User | None) -> APIClient:
        client = APIClient()
        if user is not None:
            token, _ = Token.objects.get_or_create(user=user)
            client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return _client


@pytest.fixture
def admin_api(make_user: Callable[..., User], client_for: Callable[[User | None], APIClient]) -> APIClient:
    return client_for(make_user("root", superuser=True))


@pytest.fixture
def deployed(admin_api: APIClient) -> Callable[..., dict[str, Any]]:
    """Load, publish and activate the purchase document through the API."""

    def _deploy(version: int = 1, *, scope: str = "default", activate: bool = True) -> dict[str, Any]:
        loaded = admin_api.post(
            "/api/v1/definitions/",
            {"scope": scope, "format": "yaml", "text": documents.purchase(version)},
            format="json",
        )
        assert loaded.status_code == 201, loaded.content
        published = admin_api.post(f"/api/v1/definitions/{scope}/api-purchase/{version}/publish/")
        assert published.status_code == 200, published.content
        if activate:
            activated = admin_api.put(
                f"/api/v1/activations/{scope}/api-purchase/", {"version": version, "target_scope": scope}, format="json"
            )
            assert activated.status_code == 200, activated.content
        return dict(published.json())

    return _deploy


@pytest.fixture
def drain() -> Callable[..., int]:
    """Run the executor in-process until nothing is runnable (the code Celery tasks run)."""
    from workflows.engine import executor

    def _drain(run_id: Any = None) -> int:
        return executor.drain(run_id=run_id, budget_seconds=10)

    return _drain


def assert_problem(response: Any, status: int, code: str, *, leaked: tuple[str, ...] = (SENTINEL,)) -> dict[str, Any]:
    """A problem+json answer with this status and code, repeating none of ``leaked``."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/problem+json"), response["Content-Type"]
    body = response.json()
    assert body["code"] == code, body
    assert body["status"] == status
    assert set(body) == {"type", "title", "status", "code", "detail", "violations"}
    for violation in body["violations"]:
        assert {"pointer", "type", "message"} <= set(violation)
    text = response.content.decode("utf-8", errors="replace")
    for value in leaked:
        assert value not in text, f"{value!r} echoed in {text}"
    return dict(body)
