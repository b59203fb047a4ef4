"""The host's user model as Switchyard sees it: looked up through ``get_user_model()`` and its
``USERNAME_FIELD``, never through a ``username`` column.

A task assigned to a user holds that user's ``get_username()`` (an e-mail address when the
host's user model signs in by e-mail); a group assignment reaches the active members of a
``django.contrib.auth`` group. Everything that turns an assignment back into accounts (the
assignee check, who a new task notifies, the admin's reassign choices) goes through here.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet


def username_field() -> str:
    """The name of the user model's username field (``username``, ``email``, ...)."""
    return str(get_user_model().USERNAME_FIELD)


def email_field() -> str:
    """The name of the user model's e-mail field (``EMAIL_FIELD``, ``email`` by default)."""
    return str(get_user_model().get_email_field_name())


def addresses(mode: str, value: str) -> list[str]:
    """The e-mail addresses of the users an assignment reaches (sorted, no blanks)."""
    name = email_field()
    return sorted({str(v) for v in assignees(mode, value).values_list(name, flat=True) if v})


def active_users() -> QuerySet[Any]:
    """Users who may act: all of them when the model has no ``is_active`` field."""
    model = get_user_model()
    users = model._default_manager.all()
    if any(field.name == "is_active" for field in model._meta.get_fields()):
        users = users.filter(is_active=True)
    return users


def named(users: QuerySet[Any], value: str) -> QuerySet[Any]:
    """``users`` whose username (``USERNAME_FIELD``) is ``value``."""
    return users.filter(**{username_field(): value})


def assignees(mode: str, value: str) -> QuerySet[Any]:
    """The active users an assignment reaches: the user named ``value`` (``mode`` "user"),
    else the active members of group ``value``."""
    users = active_users()
    if mode == "user":
        return named(users, value)
    return users.filter(groups__name=value)


def usernames(users: QuerySet[Any], *, limit: int) -> list[str]:
    """The usernames of ``users``, sorted, at most ``limit``."""
    name = username_field()
    return [str(v) for v in users.order_by(name).values_list(name, flat=True)[:limit]]
