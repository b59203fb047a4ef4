"""``join``: never executed as a node; a branch's path stops at its join before reaching it
(the driver), and the join is decided by the fork/join coordinator (``engine/forks.py``)."""

from __future__ import annotations

from workflows.definitions.plan import JoinStep
from workflows.engine.context import DeterministicFailure, Drive
from workflows.engine.nodes.base import Outcome


def execute(drive: Drive, step: JoinStep) -> Outcome:
    raise DeterministicFailure(f"DETERMINISTIC_FAILURE: join {step.id} reached outside its fork")
