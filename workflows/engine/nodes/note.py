"""``note``: record the step in the run's decisions and continue with ``next``."""

from __future__ import annotations

from workflows.definitions.steps.note import NoteStep
from workflows.engine.drive import Drive
from workflows.engine.nodes.base import Next, Outcome


def execute(drive: Drive, step: NoteStep) -> Outcome:
    drive.decide(step=step.id, outcome="noted")
    return Next(step.next or "")
