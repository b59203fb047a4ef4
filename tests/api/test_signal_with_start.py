"""Signals addressed by business key, and signal-with-start (issue #31): one idempotent call
that signals the open run with a key or starts one and signals it; concurrent calls for one
key start one run."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction
from rest_framework.test import APIClient

from tests.api.conftest import SENTINEL, assert_problem
from tests.support.waiting import eventually
from workflows.definitions import store
from workflows.models import Command, Run

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

WITH_START = "/api/v1/runs/by-key/signal-with-start/"
BY_KEY = "/api/v1/runs/by-key/signals/"


def body(key: str = "PO-9", amount: Any = 5, **more: Any) -> dict[str, Any]:
    return {
        "definition_id": "api-purchase",
        "business_key": key,
        "start_payload": {"number": key, "total": 100},
        "name": "paid",
        "payload": {"amount": amount},
        **more,
    }


def runs_with(key: str) -> list[Run]:
    return list(Run.objects.filter(business_key=key))


def start(api: APIClient, key: str) -> str:
    started = api.post(
        "/api/v1/runs/",
        {"definition_id": "api-purchase", "business_key": key, "payload": {"number": key, "total": 1}},
        format="json",
    )
    assert started.status_code == 202, started.content
    return str(started.json()["run"])


def test_without_an_open_run_it_starts_one_and_signals_it(
    admin_api: APIClient, deployed: Callable[..., Any], drain: Callable[..., int]
) -> None:
    deployed()
    answer = admin_api.post(WITH_START, body(), format="json")
    assert answer.status_code == 202, answer.content
    data = answer.json()
    [run] = runs_with("PO-9")
    assert answer["Location"] == f"/api/v1/runs/{run.id}/"
    assert data == {
        "run": str(run.id),
        "started": True,
        "start": {"id": data["start"]["id"], "run": str(run.id), "kind": "START", "status": "PENDING", "seq": 1},
        "signal": {"id": data["signal"]["id"], "run": str(run.id), "kind": "SIGNAL", "status": "PENDING", "seq": 2},
    }
    drain()
    run.refresh_from_db()
    assert (run.status, run.current_step, run.state["paid"]) == ("WAITING", "review", 5)


def test_with_an_open_run_it_signals_that_run_and_starts_nothing(
    admin_api: APIClient, deployed: Callable[..., Any], drain: Callable[..., int]
) -> None:
    deployed()
    run_id = start(admin_api, "PO-9")
    drain()
    answer = admin_api.post(WITH_START, body(), format="json")
    assert answer.status_code == 202, answer.content
    assert answer.json()["run"] == run_id and answer.json()["started"] is False and answer.json()["start"] is None
    assert answer.json()["signal"]["kind"] == "SIGNAL"
    assert len(runs_with("PO-9")) == 1


def test_an_ended_run_does_not_count(admin_api: APIClient, deployed: Callable[..., Any]) -> None:
    deployed()
    ended = start(admin_api, "PO-9")
    assert admin_api.post(f"/api/v1/runs/{ended}/cancel/", {}, format="json").status_code == 200
    answer = admin_api.post(WITH_START, body(), format="json")
    assert answer.status_code == 202, answer.content
    assert answer.json()["started"] is True and answer.json()["run"] != ended


def test_a_repeat_with_the_same_idempotency_key_answers_the_first_answer_and_starts_nothing(
    admin_api: APIClient, deployed: Callable[..., Any], drain: Callable[..., int]
) -> None:
    deployed()
    first = admin_api.post(WITH_START, body(), format="json", HTTP_IDEMPOTENCY_KEY="pay-9")
    assert first.status_code == 202, first.content
    drain()
    # even once the run has ended, the repeat starts no new run
    assert admin_api.post(f"/api/v1/runs/{first.json()['run']}/cancel/", {}, format="json").status_code == 200
    repeat = admin_api.post(WITH_START, body(), format="json", HTTP_IDEMPOTENCY_KEY="pay-9")
    assert repeat.status_code == 202, repeat.content
    assert repeat.json()["run"] == first.json()["run"] and repeat.json()["started"] is True
    assert repeat.json()["start"]["id"] == first.json()["start"]["id"]
    assert repeat.json()["signal"]["id"] == first.json()["signal"]["id"]
    assert repeat.json()["start"]["status"] == "COMPLETE"
    assert len(runs_with("PO-9")) == 1
    assert Command.objects.filter(run_id=first.json()["run"], kind="SIGNAL").count() == 1

    other = admin_api.post(WITH_START, body(amount=SENTINEL), format="json", HTTP_IDEMPOTENCY_KEY="pay-9")
    assert_problem(other, 409, "IDEMPOTENCY_CONFLICT")


def test_two_concurrent_calls_start_one_run(
    make_user: Callable[..., Any], client_for: Callable[..., APIClient], deployed: Callable[..., Any]
) -> None:
    """Both calls are held behind the definition's lock (which a start takes after its look-up),
    so both have looked for the key before either can start: only the business key's lock
    keeps the second from starting a run of its own."""
    deployed()
    user = make_user("integrator", "workflows.add_run", "workflows.change_run")
    held, release = threading.Event(), threading.Event()
    answers: list[Any] = []

    def holder() -> None:
        try:
            with transaction.atomic():
                store.lock_definition_id("api-purchase")
                held.set()
                release.wait(20)
        finally:
            connection.close()

    def caller(key: str) -> None:
        try:
            answers.append(client_for(user).post(WITH_START, body(), format="json", HTTP_IDEMPOTENCY_KEY=key))
        finally:
            connection.close()

    lock = threading.Thread(target=holder)
    lock.start()
    assert held.wait(10)
    callers = [threading.Thread(target=caller, args=(key,)) for key in ("a", "b")]
    for thread in callers:
        thread.start()

    def waiting_on_locks() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            return int(cursor.fetchone()[0])

    eventually(lambda: waiting_on_locks() >= 2, timeout=10, what="both calls waiting")
    release.set()
    for thread in [lock, *callers]:
        thread.join(20)

    assert sorted(a.status_code for a in answers) == [202, 202], [a.content for a in answers]
    [run] = runs_with("PO-9")
    assert {a.json()["run"] for a in answers} == {str(run.id)}
    assert sorted(a.json()["started"] for a in answers) == [False, True]
    assert Command.objects.filter(run=run, kind="SIGNAL").count() == 2


def test_an_open_run_that_ends_before_the_signal_is_replaced_by_a_new_run(
    make_user: Callable[..., Any], client_for: Callable[..., APIClient], deployed: Callable[..., Any]
) -> None:
    """Issue #40: 3-4 of 20 concurrent calls answered 409 when the open run ended between the
    look-up and the signal. Here the run ends (a transaction holding its lock commits COMPLETED)
    while the call, having read it as open, waits for that lock: the call starts a new run."""
    deployed()
    user = make_user("integrator", "workflows.add_run", "workflows.change_run")
    admin_api = client_for(make_user("boss", "workflows.add_run", "workflows.change_run", "workflows.view_run"))
    ending = start(admin_api, "PO-9")
    held, release = threading.Event(), threading.Event()
    answers: list[Any] = []

    def ender() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("UPDATE workflow_runs SET status = 'COMPLETED' WHERE id = %s", [ending])
                held.set()
                release.wait(20)
        finally:
            connection.close()

    def caller() -> None:
        try:
            answers.append(client_for(user).post(WITH_START, body(), format="json"))
        finally:
            connection.close()

    end = threading.Thread(target=ender)
    end.start()
    assert held.wait(10)
    call = threading.Thread(target=caller)
    call.start()

    def waiting_on_locks() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            return int(cursor.fetchone()[0])

    eventually(lambda: waiting_on_locks() >= 1, timeout=10, what="the call waiting on the run's lock")
    release.set()
    for thread in (end, call):
        thread.join(20)

    [answer] = answers
    assert answer.status_code == 202, answer.content
    assert answer.json()["started"] is True and answer.json()["run"] != ending
    assert not Command.objects.filter(run_id=ending, kind="SIGNAL").exists()
    assert Command.objects.filter(run_id=answer.json()["run"], kind="SIGNAL").count() == 1


def test_signal_with_start_needs_both_capabilities(
    make_user: Callable[..., Any], client_for: Callable[..., APIClient], deployed: Callable[..., Any]
) -> None:
    deployed()
    signaller = client_for(make_user("signaller", "workflows.change_run"))
    assert_problem(signaller.post(WITH_START, body(), format="json"), 403, "PERMISSION_DENIED")
    starter = client_for(make_user("starter", "workflows.add_run"))
    assert_problem(starter.post(WITH_START, body(), format="json"), 403, "PERMISSION_DENIED")
    assert runs_with("PO-9") == []


def test_signal_with_start_refuses_a_bad_start_payload_and_records_nothing(
    admin_api: APIClient, deployed: Callable[..., Any]
) -> None:
    deployed()
    answer = admin_api.post(WITH_START, body(start_payload={"number": SENTINEL}), format="json")
    assert_problem(answer, 400, "INVALID_PAYLOAD")
    assert runs_with("PO-9") == []


# --- signal by business key ----------------------------------------------------------------


def test_a_signal_by_key_reaches_the_open_run(
    admin_api: APIClient, deployed: Callable[..., Any], drain: Callable[..., int]
) -> None:
    deployed()
    run_id = start(admin_api, "PO-9")
    drain()
    signal = {"definition_id": "api-purchase", "business_key": "PO-9", "name": "paid", "payload": {"amount": 3}}
    answer = admin_api.post(BY_KEY, signal, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert answer.status_code == 202, answer.content
    assert answer.json()["run"] == run_id and answer.json()["started"] is False
    drain()
    assert Run.objects.get(pk=run_id).current_step == "review"
    again = admin_api.post(BY_KEY, signal, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert again.json()["signal"]["id"] == answer.json()["signal"]["id"]


def test_a_signal_by_key_without_an_open_run_is_404(admin_api: APIClient, deployed: Callable[..., Any]) -> None:
    deployed()
    ended = start(admin_api, SENTINEL)
    admin_api.post(f"/api/v1/runs/{ended}/cancel/", {}, format="json")
    signal = {"definition_id": "api-purchase", "business_key": SENTINEL, "name": "paid", "payload": {"amount": 3}}
    body = assert_problem(admin_api.post(BY_KEY, signal, format="json"), 404, "INSTANCE_NOT_FOUND")
    assert body["detail"] == "no open run of the definition has this business key"


def test_a_signal_by_an_ambiguous_key_is_409_and_records_nothing(
    admin_api: APIClient, deployed: Callable[..., Any]
) -> None:
    deployed()
    runs = [start(admin_api, SENTINEL), start(admin_api, SENTINEL)]
    before = Command.objects.filter(run_id__in=runs).count()
    signal = {"definition_id": "api-purchase", "business_key": SENTINEL, "name": "paid", "payload": {"amount": 3}}
    for path, data in ((BY_KEY, signal), (WITH_START, body(SENTINEL))):
        answer = admin_api.post(path, data, format="json")
        problem = assert_problem(answer, 409, "BUSINESS_KEY_AMBIGUOUS")
        assert problem["title"] == "More than one open run has this business key"
    assert Command.objects.filter(run_id__in=runs).count() == before
    assert len(runs_with(SENTINEL)) == 2


def test_a_blank_business_key_is_refused(admin_api: APIClient, deployed: Callable[..., Any]) -> None:
    deployed()
    answer = admin_api.post(WITH_START, body(" "), format="json")
    problem = assert_problem(answer, 400, "INVALID_PAYLOAD")
    assert problem["violations"][0]["pointer"] == "/business_key"


# --- with the worker -----------------------------------------------------------------------


def test_with_the_worker_the_signalled_run_moves_on(
    admin_api: APIClient, deployed: Callable[..., Any], celery_worker_process: Any
) -> None:
    deployed()
    answer = admin_api.post(f"{WITH_START}?await=20", body("PO-E2E"), format="json", HTTP_IDEMPOTENCY_KEY="e2e")
    assert answer.status_code == 200, answer.content
    run = answer.json()
    assert (run["status"], run["current_step"], run["state"]["paid"]) == ("WAITING", "review", 5)
    assert [w["kind"] for w in run["waits"]] == ["TASK"]
