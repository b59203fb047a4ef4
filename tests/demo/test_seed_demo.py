from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command


@pytest.mark.django_db
def test_seed_demo_creates_admin_approvers_and_requester_and_prints_credentials() -> None:
    out = StringIO()

    call_command("seed_demo", stdout=out)

    users = get_user_model().objects
    admin = users.get(username="admin")
    assert admin.is_superuser and admin.is_staff
    assert authenticate(username="admin", password="admin") == admin
    approvers = set(users.filter(groups__name="approvers").values_list("username", flat=True))
    assert approvers == {"alice", "bob"}
    assert authenticate(username="alice", password="alice") is not None
    assert users.filter(username="requester", is_staff=False).exists()
    assert "admin" in out.getvalue() and "alice" in out.getvalue()


@pytest.mark.django_db
def test_seed_demo_is_idempotent_and_keeps_changed_passwords() -> None:
    call_command("seed_demo", verbosity=0)
    alice = get_user_model().objects.get(username="alice")
    alice.set_password("a-new-secret")
    alice.save()

    call_command("seed_demo", verbosity=0)

    assert get_user_model().objects.filter(username__in=["admin", "alice", "bob", "requester"]).count() == 4
    assert authenticate(username="alice", password="a-new-secret") is not None
    assert get_user_model().objects.get(username="alice").groups.count() == 1


@pytest.mark.django_db
def test_seed_demo_reset_passwords_restores_the_demo_ones() -> None:
    call_command("seed_demo", verbosity=0)
    bob = get_user_model().objects.get(username="bob")
    bob.set_password("changed-it")
    bob.save()

    call_command("seed_demo", "--reset-passwords", verbosity=0)

    assert authenticate(username="bob", password="bob") is not None


@pytest.mark.django_db
def test_the_demo_users_hold_the_capabilities_the_readme_gives_them() -> None:
    from workflows.access import Capability, capabilities

    call_command("seed_demo", verbosity=0)
    users = {u.username: u for u in get_user_model().objects.all()}
    assert capabilities(users["admin"]) == set(Capability)
    assert capabilities(users["requester"]) == {Capability.START}  # starts purchase requests
    assert capabilities(users["alice"]) == capabilities(users["bob"]) == set()  # tasks come by assignment
