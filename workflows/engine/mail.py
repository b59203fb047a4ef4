"""Mail the engine sends (email steps, task notices), checked completely before any send.

A header value with a line break, NUL or another control character, or an address Django
cannot parse, makes ``send_mail`` raise while it builds the message: inside an email step
that happened after the effect marker had committed, so a run whose message was never sent
was left OUTCOME_UNKNOWN; for a task notice it failed every delivery attempt until the
intent was dropped. Here the whole message is built and rendered first (Django's own header
checks included) and only a message that passed is handed to the backend. Refusals are
:class:`Unsendable` with a value-free reason (the field, never its value).
"""

from __future__ import annotations

import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage
from django.core.validators import validate_email

SUBJECT_MAX_CHARS = 998  # RFC 5322's line limit

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")  # a tab is whitespace
_LINE_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


class Unsendable(ValueError):
    """The message cannot be sent as built; ``reason`` names the field, never its value."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def fold(text: str) -> str:
    """One header line: runs of line breaks and control characters become one space."""
    return _LINE_BREAKS.sub(" ", text).strip()


def _address(value: str, field: str) -> str:
    if not isinstance(value, str) or _CONTROL.search(value):
        raise Unsendable(f"{field} holds a line break or a control character")
    try:
        validate_email(value)
    except ValidationError:
        raise Unsendable(f"{field} is not a valid email address") from None
    return value


def valid_address(value: str) -> bool:
    try:
        _address(value, "an address")
    except Unsendable:
        return False
    return True


def build(subject: str, body: str, recipients: list[str]) -> EmailMessage:
    """A message from ``DEFAULT_FROM_EMAIL`` that the backend will accept as built.

    Raises :class:`Unsendable` when the subject holds a line break or control character, an
    address is invalid, or Django refuses a header while rendering the message."""
    if _CONTROL.search(subject):
        raise Unsendable("the subject holds a line break or a control character")
    if "\x00" in body:
        raise Unsendable("the body holds a NUL character")
    sender = str(settings.DEFAULT_FROM_EMAIL)
    if not _CONTROL.search(sender) and "<" in sender:
        # "Name <address>": the address part is what must be valid
        _address(sender[sender.rfind("<") + 1 :].rstrip(">").strip(), "the sender (DEFAULT_FROM_EMAIL)")
    else:
        _address(sender, "the sender (DEFAULT_FROM_EMAIL)")
    to = [_address(r, "a recipient") for r in recipients]
    message = EmailMessage(subject[:SUBJECT_MAX_CHARS], body, sender, to)
    try:
        message.message()  # renders every header: Django's own checks, without sending
    except (ValueError, TypeError, UnicodeError):
        raise Unsendable("a header of the message is not valid") from None
    return message
