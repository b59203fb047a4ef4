"""Status and kind codes in the reader's words: ``{{ run.status|choice_label }}``.

Pages show codes such as ``OUTCOME_UNKNOWN`` as words. The words come from the models'
``TextChoices`` labels, which are translated (``gettext_lazy``), so a German reader sees
"Ergebnis unbekannt" where an English one sees "Outcome unknown". A code no choice knows is
shown as before: lower case with a capital first letter.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.db import models

from workflows.models import (
    CommandKind,
    CommandStatus,
    DefinitionStatus,
    ParkKind,
    RunStatus,
    TaskStatus,
    TimerKind,
)

register = template.Library()

# the first that knows a code names it (a code shared by two, PENDING say, has one word in both)
CHOICES: tuple[type[models.TextChoices], ...] = (
    RunStatus,
    CommandStatus,
    TaskStatus,
    CommandKind,
    ParkKind,
    TimerKind,
    DefinitionStatus,
)


@register.filter
def choice_label(code: Any) -> str:
    text = str(code or "")
    for choices in CHOICES:
        if text in choices.values:
            text = str(choices(text).label)
            break
    return text[:1].upper() + text[1:].lower()
