"""Decimal amounts round-trip exactly (engine 105: "numbers are kept exactly").

The bug: JSON numbers became floats on the way in, so an amount of 1000.10 was stored in
jsonb as 1000.1, logged in the decision log's patches as 1000.1 and answered by the API as
1000.1; a 30-digit decimal lost its last digits, and a `multipleOf: 0.01` money schema refused
1000.10 because 1000.1 / 0.01 is not a whole number in binary floating point. These tests
start runs through the API with the numbers as JSON text, let the real worker move them and
read the exact text back from the API, the history and PostgreSQL itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from tests.api.conftest import SENTINEL, assert_problem
from tests.support.waiting import eventually
from workflows.models import Command, Run

pytestmark = pytest.mark.django_db(transaction=True)

START = "/api/v1/runs/"
BIG = "123456789012345678901234567890.123456789"  # 39 digits: no double holds it

LEDGER = """
definitionId: ledger
definitionVersion: 1
contract:
  name: ledger.v1
  signals:
    adjust:
      type: object
      properties: {amount: {type: number, multipleOf: 0.01}}
      required: [amount]
stateSchema: {type: object}
startPayloadSchema:
  type: object
  properties:
    amount: {type: number, multipleOf: 0.01, minimum: 0.01}
    big: {type: number}
    count: {type: integer}
  required: [amount]
initialState: "{'amount': payload.amount, 'big': payload.big, 'count': payload.count}"
initialStep: wait-adjust
steps:
  - id: wait-adjust
    type: wait-signal
    signal: adjust
    set: "{'amount': payload.amount}"
    next: done
  - id: done
    type: complete
"""


@pytest.fixture
def ledger(admin_api: APIClient) -> None:
    loaded = admin_api.post("/api/v1/definitions/", {"format": "yaml", "text": LEDGER}, format="json")
    assert loaded.status_code == 201, loaded.content
    assert admin_api.post("/api/v1/definitions/default/ledger/1/publish/").status_code == 200
    activated = admin_api.put(
        "/api/v1/activations/default/ledger/", {"version": 1, "target_scope": "default"}, format="json"
    )
    assert activated.status_code == 200, activated.content


class Written(str):
    """A JSON number as the text it was written as (``json.loads(parse_float=Written)``)."""


def post_text(client: APIClient, path: str, text: str) -> Any:
    """A request body sent as written: Python's json would turn 1000.10 into 1000.1 first."""
    return client.post(path, text, content_type="application/json")


def start_text(amount: str, *, big: str = "0.5", count: str = "0", note: str = "") -> str:
    payload = f'{{"amount": {amount}, "big": {big}, "count": {count}, "note": "{note}"}}'
    return '{"definition_id": "ledger", "payload": ' + payload + "}"


def stored_text(run_id: str, key: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT state->>%s FROM workflow_runs WHERE id = %s", [key, run_id])
        return str(cursor.fetchone()[0])


def settled(run_id: str, status: str, worker: Any) -> None:
    eventually(
        lambda: Run.objects.get(pk=run_id).status == status,
        timeout=30,
        what=f"the run to be {status}",
        details=worker.logs,
    )


@pytest.mark.e2e
def test_decimal_amounts_round_trip_exactly_through_the_worker_state_history_and_api(
    admin_api: APIClient, ledger: None, celery_worker_process: Any
) -> None:
    started = post_text(admin_api, START, start_text("1000.10", big=BIG, count="3"))
    assert started.status_code == 202, started.content
    run_id = started.json()["run"]
    settled(run_id, "WAITING", celery_worker_process)

    # stored: jsonb keeps the digits it was given
    assert stored_text(run_id, "amount") == "1000.10"
    assert stored_text(run_id, "big") == BIG
    assert stored_text(run_id, "count") == "3"

    # answered: the JSON number 1000.10, not "1000.10" and not 1000.1
    run = admin_api.get(f"/api/v1/runs/{run_id}/")
    assert run.status_code == 200
    text = run.content.decode()
    assert '"amount":1000.10' in text and f'"big":{BIG}' in text and '"count":3' in text
    assert run.json()["state"]["count"] == 3  # integers stay integers

    adjusted = post_text(
        admin_api, f"/api/v1/runs/{run_id}/signals/", '{"name": "adjust", "payload": {"amount": 2000.20}}'
    )
    assert adjusted.status_code == 202, adjusted.content
    settled(run_id, "COMPLETED", celery_worker_process)
    assert stored_text(run_id, "amount") == "2000.20"

    # logged: the start's baseline holds 1000.10, the signal's patch replaces it with 2000.20
    history = admin_api.get(f"/api/v1/runs/{run_id}/history/?page_size=100")
    assert history.status_code == 200
    history_text = history.content.decode()
    assert '{"op":"replace","path":"/amount","value":2000.20}' in history_text
    # read with each number kept as the text it was written as
    entries = json.loads(history_text, parse_float=Written)["results"]
    baseline = next(e for e in entries if e["type"] == "STATE_BASELINE")
    assert baseline["payload"]["state"]["amount"] == Written("1000.10")
    assert baseline["payload"]["state"]["big"] == Written(BIG)
    # the command payloads copied into the history are exact too
    received = [e["payload"]["payload"] for e in entries if e["type"] == "COMMAND_RECEIVED" and e["payload"]]
    assert {"amount": Written("1000.10"), "big": Written(BIG), "count": 3, "note": ""} in received
    assert {"amount": Written("2000.20")} in received


def test_a_money_schema_accepts_an_amount_in_cents(
    admin_api: APIClient, ledger: None, drain: Callable[..., int]
) -> None:
    # multipleOf 0.01: 1000.10 passes, 1000.105 does not (as decimals, not as doubles)
    started = post_text(admin_api, START, start_text("1000.10"))
    assert started.status_code == 202, started.content
    refused = post_text(admin_api, START, start_text("1000.105"))
    body = assert_problem(refused, 400, "INVALID_PAYLOAD", leaked=("1000.105",))
    assert [(v["pointer"], v["type"]) for v in body["violations"]] == [("/amount", "multipleOf")]
    drain()
    assert stored_text(started.json()["run"], "amount") == "1000.10"


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1e-400", "1" + "0" * 400 + ".5", "0.5e-999"])
def test_numbers_that_cannot_be_kept_are_refused_and_nothing_is_recorded(
    admin_api: APIClient, ledger: None, number: str
) -> None:
    response = post_text(admin_api, START, start_text(number, note=SENTINEL))
    body = assert_problem(response, 400, "INVALID_PAYLOAD", leaked=(SENTINEL, number[:20]))
    assert body["violations"][0]["type"] == "number"
    assert not Run.objects.exists() and not Command.objects.exists()


def test_numbers_at_the_bounds_are_kept(admin_api: APIClient, ledger: None, drain: Callable[..., int]) -> None:
    started = post_text(admin_api, START, start_text("0.01", big="1.5e308"))
    assert started.status_code == 202, started.content
    drain()
    run = admin_api.get(f"/api/v1/runs/{started.json()['run']}/")
    # an exponent is written out in full, and stays a decimal (jsonb would make 1E+308 an integer)
    assert json.loads(run.content)["state"]["big"] == 1.5e308, run.content
    assert '"big":15' + "0" * 307 + ".0" in run.content.decode()
