"""Shared fixtures: catalog entries registered for one test and removed after it."""

from __future__ import annotations

import pytest

from workflows.definitions import catalogs
from workflows.definitions.cache import plan_cache


class Registry:
    def __init__(self):
        self._undo = []

    def callback(self, name, category, func=None):
        func = func or (lambda state: state)
        catalogs.callbacks.add(name, func, category=category)
        self._undo.append(lambda: catalogs.callbacks.unregister(name, category))
        return func

    def type(self, name, schema):
        catalogs.types.register(name, schema)
        self._undo.append(lambda: catalogs.types.unregister(name))

    def contract(self, name, *, signals=None, start_schema=None):
        catalogs.contracts.register(name, signals=signals, start_schema=start_schema)
        self._undo.append(lambda: catalogs.contracts.unregister(name))

    def undo(self):
        for step in reversed(self._undo):
            step()


@pytest.fixture
def registry():
    found = Registry()
    yield found
    found.undo()


@pytest.fixture(autouse=True)
def _fresh_plan_cache():
    plan_cache.clear()
    yield
    plan_cache.clear()


SIMPLE = """\
definitionId: {id}
definitionVersion: {version}
contract:
  name: {contract}
  signals:
    go: {{type: object}}
initialStep: wait
steps:
  - id: wait
    type: wait-signal
    signal: go
    set: '{{"went": true}}'
    next: done
  - id: done
    type: complete
"""


def simple(definition_id="simple", version=1, contract="simple.v1", comment=""):
    return SIMPLE.format(id=definition_id, version=version, contract=contract) + comment
