"""Savepoints whose SAVEPOINT and RELEASE travel with the neighbouring statements: what runs
inside is taken back on failure — engine statements, ORM statements and on-commit callbacks —
and a savepoint inside which nothing ran costs no statement at all."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

from workflows.engine import db
from workflows.models import ParkCount


@pytest.fixture
def sent(monkeypatch: Any) -> list[str]:
    """The deferred control statements as they go out."""
    seen: list[str] = []
    original = db._send

    def recording(raw: Any, controls: list[str]) -> None:
        seen.extend(c.split(" sw_sp_")[0] for c in controls)
        original(raw, controls)

    monkeypatch.setattr(db, "_send", recording)
    return seen


def _marker(name: str) -> None:
    db.execute(
        "INSERT INTO workflow_park_counts (definition_id, scope, version, node, kind, stripe, runs) "
        "VALUES (%s, 'default', 1, 'n', 'TASK', 0, 1)",
        [name],
        prepared=True,
    )


def _markers() -> set[str]:
    return set(ParkCount.objects.values_list("definition_id", flat=True))


class Boom(Exception):
    pass


@pytest.mark.django_db(transaction=True)
def test_a_failure_inside_takes_back_what_ran_inside_and_keeps_what_ran_before(sent: list[str]) -> None:
    called: list[str] = []
    with transaction.atomic():
        _marker("before")
        with pytest.raises(Boom), db.savepoint():
            _marker("inside-engine")
            ParkCount.objects.create(
                definition_id="inside-orm", scope="default", version=1, node="n", kind="TASK", stripe=0, runs=1
            )
            transaction.on_commit(lambda: called.append("inside"))
            raise Boom()
        _marker("after")
        transaction.on_commit(lambda: called.append("after"))
    assert _markers() == {"before", "after"}
    assert called == ["after"]
    assert sent == ["SAVEPOINT"]  # went out with the first statement inside; ROLLBACK TO at once


@pytest.mark.django_db(transaction=True)
def test_an_orm_statement_first_inside_still_opens_the_savepoint(sent: list[str]) -> None:
    with transaction.atomic():
        _marker("before")
        with pytest.raises(Boom), db.savepoint():
            ParkCount.objects.create(
                definition_id="inside-orm", scope="default", version=1, node="n", kind="TASK", stripe=0, runs=1
            )
            raise Boom()
        _marker("after")
    assert _markers() == {"before", "after"}
    assert sent == ["SAVEPOINT"]


@pytest.mark.django_db(transaction=True)
def test_a_savepoint_that_ran_work_is_released_with_the_next_statement(sent: list[str]) -> None:
    with transaction.atomic():
        _marker("before")
        with db.savepoint():
            _marker("inside")
        assert sent == ["SAVEPOINT"]
        _marker("after")
        assert sent == ["SAVEPOINT", "RELEASE SAVEPOINT"]
    assert _markers() == {"before", "inside", "after"}


@pytest.mark.django_db(transaction=True)
def test_a_savepoint_first_in_its_transaction_goes_out_with_the_begin(sent: list[str]) -> None:
    with transaction.atomic():
        with pytest.raises(Boom), db.savepoint():
            _marker("inside")
            raise Boom()
        _marker("after")
    assert _markers() == {"after"}
    assert sent == ["SAVEPOINT"]


@pytest.mark.django_db(transaction=True)
def test_nested_and_empty_savepoints_cost_nothing_and_commit_drops_what_is_left(sent: list[str]) -> None:
    with transaction.atomic():
        _marker("before")
        with db.savepoint(), db.savepoint():
            pass
        with pytest.raises(Boom), db.savepoint():
            raise Boom()
        with db.savepoint():
            with pytest.raises(Boom), db.savepoint():
                _marker("inner")
                raise Boom()
            _marker("outer")
    # after the commit, the next transaction starts clean
    with transaction.atomic():
        _marker("next")
    assert _markers() == {"before", "outer", "next"}
    # the outer and inner SAVEPOINT with the inner statement; the outer's RELEASE, still waiting
    # at COMMIT, was dropped with it
    assert sent == ["SAVEPOINT", "SAVEPOINT"]
    assert connection.in_atomic_block is False
