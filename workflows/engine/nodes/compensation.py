"""``compensation``: never on a run's path. A saga's compensations are dispatched as outbox
intents when a ``fail`` step compensates (``nodes/terminal.py``, ``outbox.compensate``); a path
that leads into one fails deterministically."""

from __future__ import annotations

from workflows.definitions.plan import CompensationStep
from workflows.engine.context import DeterministicFailure, Drive
from workflows.engine.nodes.base import Outcome


def execute(drive: Drive, step: CompensationStep) -> Outcome:
    raise DeterministicFailure(f"DETERMINISTIC_FAILURE: step type {step.type} cannot run here")
