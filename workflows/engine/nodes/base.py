from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Next:
    step: str


class _Stop:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


WAIT = _Stop("WAIT")  # the run entered a wait
END = _Stop("END")  # the run ended (or failed)
BRANCH_DONE = _Stop("BRANCH_DONE")  # a branch's path reached its join (or a complete step)

Outcome = Next | _Stop
