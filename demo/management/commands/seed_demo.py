"""Demo users: an administrator, two approvers in the ``approvers`` group and a requester.

Idempotent: running it again creates only what is missing and never changes a password a
person has set, unless ``--reset-passwords`` is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

APPROVERS_GROUP = "approvers"


@dataclass(frozen=True)
class DemoUser:
    username: str
    password: str
    role: str
    superuser: bool = False
    approver: bool = False
    permissions: tuple[str, ...] = ()  # "app_label.codename" (the matrix in docs/reliability.md)


DEMO_USERS = (
    DemoUser("admin", "admin", "administrator (Django admin)", superuser=True),
    DemoUser("alice", "alice", "approver", approver=True),
    DemoUser("bob", "bob", "approver", approver=True),
    # starting runs is the start runs capability (workflows.add_run); approvers need no
    # permission: they act on their tasks through the tasks' assignment
    DemoUser("requester", "requester", "requester", permissions=("workflows.add_run",)),
)


class Command(BaseCommand):
    help = "Create the demo users (admin/admin, approvers alice and bob, requester) if missing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--reset-passwords", action="store_true", help="set every demo user's password back to the demo one"
        )

    @transaction.atomic
    def handle(self, *args: Any, reset_passwords: bool = False, **options: Any) -> None:
        user_model = get_user_model()
        approvers, _ = Group.objects.get_or_create(name=APPROVERS_GROUP)
        lines = []
        for demo in DEMO_USERS:
            user, created = user_model.objects.get_or_create(
                username=demo.username, defaults={"email": f"{demo.username}@example.com"}
            )
            if created or reset_passwords:
                user.set_password(demo.password)
            if demo.superuser:
                user.is_staff = True
                user.is_superuser = True
            user.is_active = True
            user.save()
            if demo.approver:
                user.groups.add(approvers)
            for dotted in demo.permissions:
                app_label, codename = dotted.split(".")
                user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
            note = "" if created or reset_passwords else "  (existing user: password left as it was)"
            lines.append(f"  {demo.username:<10} / {demo.password:<10} {demo.role}{note}")
        if options.get("verbosity", 1) >= 1:
            self.stdout.write("Demo users (username / password):")
            for line in lines:
                self.stdout.write(line)
