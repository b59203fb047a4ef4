"""The per-process plan cache."""

import threading

import pytest

from tests.definitions.conftest import simple
from workflows import conf, definitions
from workflows.definitions.cache import PlanCache, get_plan, plan_cache
from workflows.exceptions import DefinitionError, VersionNotRunnable
from workflows.models import DefinitionVersion

pytestmark = pytest.mark.django_db


def available(version=1):
    definitions.load(scope="default", text=simple(version=version))
    return definitions.publish(scope="default", definition_id="simple", version=version)


def test_a_plan_is_built_once_and_then_served_from_memory():
    record = available()
    plan = get_plan(scope="default", definition_id="simple", version=1, expected_hash=record.plan_hash)
    assert plan.plan_hash == record.plan_hash
    builds = plan_cache.builds
    assert get_plan(scope="default", definition_id="simple", version=1) is plan
    assert plan_cache.builds == builds


def test_absent_and_unpublished_rows_are_not_runnable_and_not_remembered():
    with pytest.raises(VersionNotRunnable):
        plan_cache.get("default", "simple", 1)
    definitions.load(scope="default", text=simple())
    with pytest.raises(VersionNotRunnable):
        plan_cache.get("default", "simple", 1)
    definitions.publish(scope="default", definition_id="simple", version=1)
    assert plan_cache.get("default", "simple", 1).version == 1


def test_definition_failures_are_remembered():
    available()
    DefinitionVersion.objects.update(plan_hash="a" * 64)
    with pytest.raises(DefinitionError) as caught:
        plan_cache.get("default", "simple", 1)
    assert caught.value.code == "DRIFT"
    DefinitionVersion.objects.update(plan_hash=definitions.compile_text(simple()).plan_hash)
    with pytest.raises(DefinitionError):  # remembered, not read again
        plan_cache.get("default", "simple", 1)
    plan_cache.clear()
    assert plan_cache.get("default", "simple", 1).version == 1


def test_a_pin_with_another_hash_is_not_runnable():
    available()
    with pytest.raises(VersionNotRunnable):
        plan_cache.get("default", "simple", 1, expected_hash="b" * 64)


def test_entries_are_bounded_lru(settings):
    for version in (1, 2, 3):
        available(version)
    settings.WORKFLOWS = {"DEFINITIONS": {"CACHE_MAX_ENTRIES": 2}}
    conf.reload()
    try:
        cache = PlanCache()
        first = cache.get("default", "simple", 1)
        cache.get("default", "simple", 2)
        cache.get("default", "simple", 1)  # 1 is now the most recent
        cache.get("default", "simple", 3)  # evicts 2
        assert len(cache) == 2
        builds = cache.builds
        assert cache.get("default", "simple", 1) is first
        assert cache.builds == builds
        cache.get("default", "simple", 2)
        assert cache.builds == builds + 1
    finally:
        del settings.WORKFLOWS
        conf.reload()


def test_entries_expire_after_the_ttl(settings, monkeypatch):
    available()
    settings.WORKFLOWS = {"DEFINITIONS": {"CACHE_TTL_SECONDS": 60}}
    conf.reload()
    try:
        import workflows.definitions.cache as module

        now = [1000.0]
        monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
        cache = PlanCache()
        first = cache.get("default", "simple", 1)
        now[0] += 30
        assert cache.get("default", "simple", 1) is first
        now[0] += 31
        assert cache.get("default", "simple", 1) is not first
    finally:
        del settings.WORKFLOWS
        conf.reload()


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_share_one_build():
    available()
    cache = PlanCache()
    gate = threading.Barrier(6)
    plans, errors = [], []

    def request():
        from django.db import connection

        try:
            gate.wait(timeout=10)
            plans.append(cache.get("default", "simple", 1))
        except Exception as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=request) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()
    assert not errors
    assert cache.builds == 1
    assert len({id(p) for p in plans}) == 1
