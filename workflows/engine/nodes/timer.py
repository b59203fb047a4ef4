"""``timer``: wait until a delay (database clock) or an instant has passed (a FIRE timer)."""

from __future__ import annotations

from datetime import datetime

from workflows.definitions.plan import Delay, TimerStep
from workflows.engine import timers, waits
from workflows.engine.context import Drive, step_failed
from workflows.engine.evaluate import evaluate
from workflows.engine.nodes.base import WAIT, Outcome
from workflows.models import ParkKind, TimerKind


def delay_of(drive: Drive, delay: Delay, step: str, field: str = "at") -> tuple[float, datetime | None]:
    """Seconds from now, or an instant. ``field`` names the ``at`` in failures (``due.at``)."""
    if delay.at is not None:
        value = evaluate(delay.at, {"state": drive.run["state"]}, step=step, field=field)
        if isinstance(value, datetime):
            return 0.0, value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return max(0.0, float(value)), None  # seconds from now
        if isinstance(value, str):
            try:
                return 0.0, datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError as exc:
                raise step_failed(step, field, "the text is not an RFC 3339 instant") from exc
        raise step_failed(step, field, "must give an instant or a number of seconds")
    return float(delay.seconds or 0.0), None


def execute(drive: Drive, step: TimerStep) -> Outcome:
    wait = waits.enter(drive, step=step.id, kind="timer", park_kind=ParkKind.TIMER, outcome="wait-timer")
    seconds, at = delay_of(drive, step.delay, step.id)
    timer = timers.arm(drive, wait, timer_kind=TimerKind.FIRE, step=step.id, delay_seconds=seconds, at=at)
    wait["fire"] = timer["timer_id"]
    return WAIT
