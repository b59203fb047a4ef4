"""The per-process plan cache: the only way the engine gets a document's plan.

- **One read and one build per key**: concurrent requests for a key the cache does not hold
  share one load (the first caller builds, the others wait at most :data:`LOAD_TIMEOUT_SECONDS`).
  The load reads the row, compiles its stored text and checks the rebuilt plan hash against the
  row's (and against ``expected_hash``, the run's pin, when given).
- **What is remembered**: a :class:`DefinitionError` (does not compile, no loader, a rebuilt
  hash that differs from the stored one) fails every later request for the key. An absent row,
  a row that is not AVAILABLE or DEPRECATED, a database error and a timeout are never
  remembered: the next request reads again.
- **Size and expiry**: LRU over ``CACHE_MAX_ENTRIES`` entries (remembered failures count), and
  with a positive ``CACHE_TTL_SECONDS`` an entry is dropped that long after it was built.
- **Held for the segment**: a caller keeps the :class:`Plan` object it got for as long as it
  needs it; an eviction only drops the cache's reference, never a plan in use.
- The status of the row is not kept: a start reads the row, so a plan the cache still holds is
  not used to start a retired or deprecated version.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass

from workflows import conf
from workflows.definitions.plan import Plan
from workflows.definitions.store import named
from workflows.exceptions import DefinitionError, VersionNotRunnable
from workflows.models import DefinitionStatus, DefinitionVersion

log = logging.getLogger("workflows.definitions")
LOAD_TIMEOUT_SECONDS = 30.0
Key = tuple[str, str, int]


@dataclass(frozen=True)
class _Entry:
    plan: Plan | None
    failure: DefinitionError | None
    built_at: float


class PlanCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._loading: dict[Key, Future[_Entry]] = {}
        self.builds = 0  # completed loads (for tests and metrics)

    def get(self, scope: str, definition_id: str, version: int, expected_hash: str | None = None) -> Plan:
        """The plan of (scope, id, version). Raises VersionNotRunnable (not remembered) or
        DefinitionError (remembered; codes DEFINITION_INVALID, UNKNOWN_TYPE_NAME, DRIFT,
        LOADER_MISSING)."""
        key = (scope, definition_id, version)
        entry = self._resident(key)
        if (
            entry is not None
            and expected_hash is not None
            and entry.plan is not None
            and (entry.plan.plan_hash != expected_hash)
        ):
            # the resident plan is not the pinned one: read the row again before refusing
            with self._lock:
                self._entries.pop(key, None)
            entry = None
        if entry is None:
            entry = self._load(key)
        if entry.failure is not None:
            failure = entry.failure
            raise type(failure)(failure.message, violations=failure.violations, code=failure.code)
        assert entry.plan is not None
        if expected_hash is not None and entry.plan.plan_hash != expected_hash:
            raise VersionNotRunnable(f"version {version} of {named(definition_id)} does not have the pinned plan hash")
        return entry.plan

    def _resident(self, key: Key) -> _Entry | None:
        ttl = conf.get().DEFINITIONS.CACHE_TTL_SECONDS
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if ttl > 0 and time.monotonic() - entry.built_at > ttl:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return entry

    def _load(self, key: Key) -> _Entry:
        with self._lock:
            pending = self._loading.get(key)
            owner = pending is None
            if owner:
                pending = Future()
                self._loading[key] = pending
        assert pending is not None
        if not owner:
            try:
                return pending.result(timeout=LOAD_TIMEOUT_SECONDS)
            except TimeoutError:
                raise VersionNotRunnable("the plan is still being built; retry") from None
        try:
            entry = self._build(key)
        except BaseException as error:
            with self._lock:
                self._loading.pop(key, None)
            pending.set_exception(error)
            raise
        with self._lock:
            self._loading.pop(key, None)
            self._store(key, entry)
        pending.set_result(entry)
        return entry

    def _build(self, key: Key) -> _Entry:
        from workflows.definitions.lifecycle import build_row

        scope, definition_id, version = key
        row = DefinitionVersion.objects.filter(scope=scope, definition_id=definition_id, version=version).first()
        if row is None or row.status not in (DefinitionStatus.AVAILABLE, DefinitionStatus.DEPRECATED):
            raise VersionNotRunnable(f"version {version} of {named(definition_id)} is not published")
        try:
            plan = build_row(row)
        except DefinitionError as error:
            log.warning("definition does not build: scope=%r id=%r version=%s", scope, definition_id, version)
            self.builds += 1
            return _Entry(plan=None, failure=error, built_at=time.monotonic())
        self.builds += 1
        return _Entry(plan=plan, failure=None, built_at=time.monotonic())

    def _store(self, key: Key, entry: _Entry) -> None:
        limit = conf.get().DEFINITIONS.CACHE_MAX_ENTRIES
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > limit:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


plan_cache = PlanCache()


def get_plan(*, scope: str, definition_id: str, version: int, expected_hash: str | None = None) -> Plan:
    """Module-level shortcut for :meth:`PlanCache.get` on the process's cache."""
    return plan_cache.get(scope, definition_id, version, expected_hash)
