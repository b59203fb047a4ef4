"""workflows.users: assignments resolved through the user model's USERNAME_FIELD and groups."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from workflows import users

pytestmark = pytest.mark.django_db


@pytest.fixture
def people() -> None:
    model = get_user_model()
    approvers = Group.objects.create(name="approvers")
    model.objects.create_user("ann", email="ann@example.com").groups.add(approvers)
    model.objects.create_user("ben", email="").groups.add(approvers)
    model.objects.create_user("cy", email="cy@example.com", is_active=False).groups.add(approvers)


def test_a_user_assignment_reaches_the_active_user_of_that_username(people: None) -> None:
    assert [u.get_username() for u in users.assignees("user", "ann")] == ["ann"]
    assert not users.assignees("user", "cy").exists()  # inactive
    assert not users.assignees("user", "nobody").exists()


def test_a_group_assignment_reaches_its_active_members(people: None) -> None:
    assert users.usernames(users.assignees("group", "approvers"), limit=10) == ["ann", "ben"]
    assert users.usernames(users.assignees("group", "approvers"), limit=1) == ["ann"]
    assert users.addresses("group", "approvers") == ["ann@example.com"]  # blanks left out


def test_lookups_follow_the_user_models_username_field(people: None, monkeypatch: pytest.MonkeyPatch) -> None:
    model = get_user_model()
    monkeypatch.setattr(model, "USERNAME_FIELD", "email")
    assert users.username_field() == "email"
    assert [u.pk for u in users.assignees("user", "ann@example.com")] == [model.objects.get(username="ann").pk]
    assert users.usernames(users.assignees("group", "approvers"), limit=10) == ["", "ann@example.com"]
