"""Who asked for a command: taken once when it is recorded, never from a payload."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

from workflows.models import ActorKind, AttributionStatus

LIMIT = 255


def sanitise(text: str | None) -> str:
    """Drop control, separator (U+2028/9) and format characters, then cut at 255."""
    if not text:
        return ""
    kept = []
    for ch in str(text):
        cat = unicodedata.category(ch)
        if cat in ("Cc", "Cf", "Zl", "Zp"):
            continue
        kept.append(ch)
    return "".join(kept)[:LIMIT]


@dataclass(frozen=True)
class Actor:
    kind: str = ActorKind.NONE
    id: str = ""
    reason: str = ""
    on_behalf_of: str = ""
    status: str = AttributionStatus.ABSENT

    def columns(self) -> list[str]:
        return [self.kind, self.id, self.reason, self.on_behalf_of, self.status]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id or None, "status": self.status}


NONE = Actor()


def user(identity: Any, *, on_behalf_of: str = "", degraded: bool = False) -> Actor:
    """A Django user (anonymous or missing → NONE). The id is the username."""
    if identity is None or not getattr(identity, "is_authenticated", False):
        return NONE
    ident = sanitise(identity.get_username()) or "[unprintable]"
    behalf = sanitise(on_behalf_of)
    return Actor(
        kind=ActorKind.USER,
        id=ident,
        on_behalf_of=behalf if behalf and behalf != ident else "",
        status=AttributionStatus.DEGRADED if degraded else AttributionStatus.VERIFIED,
    )


def service(service_id: str, *, on_behalf_of: str = "") -> Actor:
    ident = sanitise(service_id) or "[unprintable]"
    behalf = sanitise(on_behalf_of)
    return Actor(
        kind=ActorKind.SERVICE,
        id=ident,
        on_behalf_of=behalf if behalf != ident else "",
        status=AttributionStatus.VERIFIED,
    )


def system(reason: str) -> Actor:
    return Actor(kind=ActorKind.SYSTEM, reason=sanitise(reason), status=AttributionStatus.VERIFIED)


TIMER = system("timer")


def coerce(value: Any) -> Actor:
    """Accept an Actor, a Django user, or None."""
    if isinstance(value, Actor):
        return value
    return user(value)
