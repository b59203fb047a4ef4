"""ETag and If-Match on a run (issue #31): a run answers its state version as a strong ETag,
and every write under its path made with If-Match is recorded only while the run is at that
state version, compared under the run's lock (412 STATE_VERSION_MISMATCH, nothing written)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import F
from rest_framework.test import APIClient

from tests.api.conftest import SENTINEL, assert_problem
from workflows.models import Command, HistoryEntry, Run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waiting_run(admin_api: APIClient, deployed: Callable[..., Any], drain: Callable[..., int]) -> str:
    """A run of api-purchase waiting for the signal "paid" (state version 1)."""
    deployed()
    started = admin_api.post(
        "/api/v1/runs/",
        {"definition_id": "api-purchase", "business_key": "PO-7", "payload": {"number": "PO-7", "total": 10}},
        format="json",
    )
    assert started.status_code == 202, started.content
    drain()
    return str(started.json()["run"])


def written(run_id: str) -> tuple[int, int, str, int]:
    """What a refused write must leave alone: commands, history, status, state version."""
    run = Run.objects.get(pk=run_id)
    return (
        Command.objects.filter(run_id=run_id).count(),
        HistoryEntry.objects.filter(run_id=run_id).count(),
        run.status,
        run.state_version,
    )


def test_a_run_answers_its_state_version_as_a_strong_etag(
    admin_api: APIClient, waiting_run: str, drain: Callable[..., int]
) -> None:
    answer = admin_api.get(f"/api/v1/runs/{waiting_run}/")
    assert answer.status_code == 200
    seq = Run.objects.get(pk=waiting_run).next_seq
    assert answer["ETag"] == f'"{answer.json()["state_version"]}.{seq}"' == f'"1.{seq}"'

    admin_api.post(f"/api/v1/runs/{waiting_run}/signals/", {"name": "paid", "payload": {"amount": 5}}, format="json")
    drain()
    assert admin_api.get(f"/api/v1/runs/{waiting_run}/")["ETag"] == f'"2.{seq + 1}"'


def test_a_signal_with_the_current_etag_is_recorded_and_a_stale_one_is_412(
    admin_api: APIClient, waiting_run: str, drain: Callable[..., int]
) -> None:
    etag = admin_api.get(f"/api/v1/runs/{waiting_run}/")["ETag"]
    before = written(waiting_run)
    stale = admin_api.post(
        f"/api/v1/runs/{waiting_run}/signals/",
        {"name": "paid", "payload": {"amount": SENTINEL}},
        format="json",
        HTTP_IF_MATCH='"0"',
    )
    body = assert_problem(stale, 412, "STATE_VERSION_MISMATCH")
    assert body["title"] == "The run's state version does not match"
    assert written(waiting_run) == before

    fresh = admin_api.post(
        f"/api/v1/runs/{waiting_run}/signals/",
        {"name": "paid", "payload": {"amount": 5}},
        format="json",
        HTTP_IF_MATCH=etag,
    )
    assert fresh.status_code == 202, fresh.content
    drain()
    run = admin_api.get(f"/api/v1/runs/{waiting_run}/").json()
    assert run["current_step"] == "review" and run["state_version"] == 2
    # the tag read before is stale now
    again = admin_api.post(
        f"/api/v1/runs/{waiting_run}/signals/",
        {"name": "paid", "payload": {"amount": 6}},
        format="json",
        HTTP_IF_MATCH=etag,
    )
    assert_problem(again, 412, "STATE_VERSION_MISMATCH")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("cancel/", {"reason": "no longer needed"}),
        ("retry/", None),
        ("migrate/", {"target_version": 1}),
        ("signals/", {"name": "paid", "payload": {"amount": 1}}),
    ],
)
def test_every_write_under_the_run_refuses_a_stale_etag_and_changes_nothing(
    admin_api: APIClient, waiting_run: str, path: str, body: Any
) -> None:
    before = written(waiting_run)
    answer = admin_api.post(f"/api/v1/runs/{waiting_run}/{path}", body, format="json", HTTP_IF_MATCH='"7"')
    assert_problem(answer, 412, "STATE_VERSION_MISMATCH")
    assert written(waiting_run) == before


def test_cancel_with_the_current_etag_cancels(admin_api: APIClient, waiting_run: str) -> None:
    etag = admin_api.get(f"/api/v1/runs/{waiting_run}/")["ETag"]
    answer = admin_api.post(
        f"/api/v1/runs/{waiting_run}/cancel/", {"reason": "dup"}, format="json", HTTP_IF_MATCH=f'"0.1", {etag}'
    )
    assert answer.status_code == 200, answer.content
    assert answer.json()["status"] == "CANCELLED"


def test_without_if_match_or_with_a_star_the_writes_are_unconditional(admin_api: APIClient, waiting_run: str) -> None:
    # retry has nothing to recover: the refusal of today, not 412
    plain = admin_api.post(f"/api/v1/runs/{waiting_run}/retry/")
    assert_problem(plain, 409, "SIGNAL_REJECTED")
    star = admin_api.post(f"/api/v1/runs/{waiting_run}/retry/", HTTP_IF_MATCH="*")
    assert_problem(star, 409, "SIGNAL_REJECTED")
    # the check comes first: a matching tag lets the operation refuse as it would
    etag = admin_api.get(f"/api/v1/runs/{waiting_run}/")["ETag"]
    matching = admin_api.post(f"/api/v1/runs/{waiting_run}/retry/", HTTP_IF_MATCH=etag)
    assert_problem(matching, 409, "SIGNAL_REJECTED")


def test_a_weak_tag_never_matches_and_a_malformed_header_is_400(admin_api: APIClient, waiting_run: str) -> None:
    before = written(waiting_run)
    weak = admin_api.post(f"/api/v1/runs/{waiting_run}/cancel/", {}, format="json", HTTP_IF_MATCH='W/"1"')
    assert_problem(weak, 412, "STATE_VERSION_MISMATCH")
    malformed = admin_api.post(f"/api/v1/runs/{waiting_run}/cancel/", {}, format="json", HTTP_IF_MATCH=f"1, {SENTINEL}")
    body = assert_problem(malformed, 400, "INVALID_PAYLOAD")
    assert body["violations"][0]["type"] == "header"
    assert written(waiting_run) == before


def test_an_unknown_run_is_404_whatever_the_tag(admin_api: APIClient, waiting_run: str) -> None:
    answer = admin_api.post(
        "/api/v1/runs/00000000-0000-0000-0000-000000000000/cancel/", {}, format="json", HTTP_IF_MATCH='"1"'
    )
    assert_problem(answer, 404, "INSTANCE_NOT_FOUND")


def test_a_repeat_under_the_same_idempotency_key_answers_the_first_signal_not_412(
    admin_api: APIClient, waiting_run: str, drain: Callable[..., int]
) -> None:
    etag = admin_api.get(f"/api/v1/runs/{waiting_run}/")["ETag"]

    def send() -> Any:
        return admin_api.post(
            f"/api/v1/runs/{waiting_run}/signals/",
            {"name": "paid", "payload": {"amount": 5}},
            format="json",
            HTTP_IF_MATCH=etag,
            HTTP_IDEMPOTENCY_KEY="pay-7",
        )

    first = send()
    assert first.status_code == 202, first.content
    drain()
    assert Run.objects.get(pk=waiting_run).state_version == 2
    repeat = send()
    assert repeat.status_code == 202, repeat.content
    assert repeat.json()["id"] == first.json()["id"]
    assert Command.objects.filter(run_id=waiting_run, kind="SIGNAL").count() == 1


def test_the_compare_holds_the_runs_lock(admin_api: APIClient, waiting_run: str) -> None:
    """A check-then-write in the view would read the committed version 1 and record; the
    operation waits for the run's lock, then sees the version the other writer committed."""
    locked, release = threading.Event(), threading.Event()

    def writer() -> None:
        try:
            with transaction.atomic():
                Run.objects.select_for_update().filter(pk=waiting_run).update(state_version=F("state_version") + 1)
                locked.set()
                release.wait(10)
        finally:
            connection.close()

    etag = admin_api.get(f"/api/v1/runs/{waiting_run}/")["ETag"]
    thread = threading.Thread(target=writer)
    thread.start()
    assert locked.wait(10)
    threading.Timer(0.5, release.set).start()
    answer = admin_api.post(
        f"/api/v1/runs/{waiting_run}/signals/",
        {"name": "paid", "payload": {"amount": 5}},
        format="json",
        HTTP_IF_MATCH=etag,
    )
    thread.join(10)
    assert_problem(answer, 412, "STATE_VERSION_MISMATCH")
    assert Command.objects.filter(run_id=waiting_run, kind="SIGNAL").count() == 0


def test_concurrent_writers_holding_one_tag_one_wins_the_rest_are_412(
    admin_api: APIClient, waiting_run: str, make_user: Any, client_for: Any
) -> None:
    """Issue #40: ten concurrent writers holding one tag were all accepted. The tag holds the
    run's next command sequence, which the winning write advances under the run's lock."""
    etag = admin_api.get(f"/api/v1/runs/{waiting_run}/")["ETag"]
    user = make_user("signaller", "workflows.change_run", "workflows.view_run")
    clients = [client_for(user) for _ in range(10)]
    start = threading.Event()
    answers: list[int] = []

    def writer(n: int) -> None:
        try:
            start.wait(10)
            answer = clients[n].post(
                f"/api/v1/runs/{waiting_run}/signals/",
                {"name": "paid", "payload": {"amount": n}},
                format="json",
                HTTP_IF_MATCH=etag,
            )
            answers.append(answer.status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(10)]
    for thread in threads:
        thread.start()
    start.set()
    for thread in threads:
        thread.join(30)
    assert sorted(answers) == [202] + [412] * 9
    assert Command.objects.filter(run_id=waiting_run, kind="SIGNAL").count() == 1
