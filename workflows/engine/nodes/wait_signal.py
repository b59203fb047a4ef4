"""``wait-signal``: wait for a named signal, optionally with a timeout (a TIMEOUT timer)."""

from __future__ import annotations

from workflows.definitions.plan import WaitSignalStep
from workflows.engine import timers, waits
from workflows.engine.context import Drive
from workflows.engine.nodes.base import WAIT, Outcome
from workflows.engine.nodes.timer import delay_of
from workflows.models import ParkKind, TimerKind


def execute(drive: Drive, step: WaitSignalStep) -> Outcome:
    wait = waits.enter(
        drive, step=step.id, kind="signal", park_kind=ParkKind.SIGNAL, outcome="wait-signal", signals=[step.signal]
    )
    if step.timeout is not None:
        seconds, at = delay_of(drive, step.timeout.delay, step.id, "timeout.at")
        timer = timers.arm(
            drive,
            wait,
            timer_kind=TimerKind.TIMEOUT,
            step=step.id,
            delay_seconds=seconds,
            at=at,
            target={"signals": [step.signal]},
        )
        wait["timeout"] = timer["timer_id"]
    return WAIT
