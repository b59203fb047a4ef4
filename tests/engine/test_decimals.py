"""Decimals stay exact on every way in besides the REST API (engine 105).

The bug: the Python API wrote a Decimal into jsonb as a float (1000.10 became 1000.1), task
forms read a number input into a float, definition documents read 0.01 as a float, CEL turned
every decimal it moved into a double, and the decision log compared and logged numbers as
floats. Each test below failed on that code.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.http import QueryDict

from tests.engine import documents
from workflows import jsonvalues, operations
from workflows.definitions import documents as definition_documents
from workflows.definitions.expressions import compile_expression
from workflows.engine.commands import fingerprint
from workflows.engine.history import canonical, diff
from workflows.exceptions import InvalidPayload
from workflows.models import Command, Run
from workflows.presentation import forms

LEDGER = (
    documents.ORDER_SIGNAL.replace("test.reserve", "test.noop")
    .replace("definitionId: order-signal", "definitionId: ledger")
    .replace(
        "initialState: \"{'order': payload.order, 'paid': 0.0}\"",
        "initialState: \"{'order': payload.order, 'paid': 0.0, 'amount': payload.amount}\"",
    )
)


def stored(run_id: Any, key: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT state->>%s FROM workflow_runs WHERE id = %s", [key, run_id])
        return str(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_a_decimal_given_to_the_python_api_is_stored_and_read_back_exactly(deploy: Any, drain: Any) -> None:
    deploy(LEDGER)
    recorded = operations.start(definition_id="ledger", payload={"order": "A-1", "amount": Decimal("1000.10")})
    drain()
    run = Run.objects.get(pk=recorded.run_id)
    assert run.status == "WAITING", run.failure_message
    assert stored(run.id, "amount") == "1000.10"
    assert run.state["amount"] == Decimal("1000.10") and str(run.state["amount"]) == "1000.10"
    # the signal's amount reaches the state through the `set` expression unchanged
    operations.signal(run_id=run.id, name="paid", payload={"amount": Decimal("123456789012345678901234567890.01")})
    drain()
    assert stored(run.id, "paid") == "123456789012345678901234567890.01"


@pytest.mark.django_db
@pytest.mark.parametrize("number", [float("nan"), float("inf"), Decimal("NaN"), Decimal("1e400"), Decimal("1e-400")])
def test_a_number_that_cannot_be_stored_is_refused_by_the_python_api(deploy: Any, number: Any) -> None:
    deploy(LEDGER)
    with pytest.raises(InvalidPayload) as refused:
        operations.start(definition_id="ledger", payload={"order": "A-1", "amount": number})
    assert [v.type for v in refused.value.violations] == ["number"]
    assert not Command.objects.exists()


def test_a_task_form_reads_a_number_input_exactly() -> None:
    form = forms.build(
        "approve", {"type": "object", "properties": {"amount": {"type": "number"}, "n": {"type": "number"}}}
    )
    payload = forms.parse(form, QueryDict("payload/amount=1000.10&payload/n=3"))
    assert payload == {"amount": Decimal("1000.10"), "n": 3}
    assert str(payload["amount"]) == "1000.10" and type(payload["n"]) is int


def test_a_definition_document_reads_decimals_exactly() -> None:
    yaml_doc = definition_documents.parse("a: 1000.10\nb: 0.01\nc: 2\n", "yaml")
    assert yaml_doc.data == {"a": Decimal("1000.10"), "b": Decimal("0.01"), "c": 2}
    assert str(yaml_doc.data["a"]) == "1000.10"
    json_doc = definition_documents.parse('{"a": 1000.10, "c": 2}', "json")
    assert str(json_doc.data["a"]) == "1000.10" and type(json_doc.data["c"]) is int


def test_cel_moves_a_decimal_exactly_and_computes_with_doubles() -> None:
    payload = {"amount": Decimal("1000.10"), "big": Decimal("123456789012345678901234567890.12")}
    moved = compile_expression("{'a': payload.amount, 'b': payload.big}", ["payload"]).evaluate({"payload": payload})
    assert moved == {"a": Decimal("1000.10"), "b": Decimal("123456789012345678901234567890.12")}
    assert str(moved["a"]) == "1000.10"
    assert compile_expression("payload.amount > 1000", ["payload"]).evaluate({"payload": payload}) is True
    assert compile_expression("payload.amount + 1.0", ["payload"]).evaluate({"payload": payload}) == 1001.1


def test_the_decision_log_keeps_decimals_exact() -> None:
    # 1000.10 is written as 1000.10 (not 1000.1); an integer and a decimal still differ
    assert canonical({"a": Decimal("1000.10"), "n": 1}) == '{"a":1000.10,"n":1}'
    assert diff({"n": 1}, {"n": Decimal("1.0")}) == [{"op": "replace", "path": "/n", "value": Decimal("1.0")}]
    assert diff({"n": Decimal("1.0")}, {"n": Decimal("1.00")}) == []  # one value
    # a change beyond a double's precision is a change
    before, after = Decimal("0.10000000000000000001"), Decimal("0.10000000000000000002")
    assert diff({"x": before}, {"x": after}) == [{"op": "replace", "path": "/x", "value": after}]


def test_jsonb_keeps_a_decimal_without_a_fraction_a_decimal() -> None:
    # jsonb writes 1E+2 back as 100 (an integer): the engine writes it as 100.0
    assert jsonvalues.dumps({"a": Decimal("1E+2"), "b": Decimal("2")}) == '{"a":100.0,"b":2.0}'
    assert jsonvalues.loads('{"a": 100.0, "n": 100}') == {"a": Decimal("100.0"), "n": 100}


def test_equal_decimals_have_one_fingerprint_and_an_integer_another() -> None:
    assert fingerprint({"a": Decimal("1000.10")}) == fingerprint({"a": Decimal("1000.1")}) == fingerprint({"a": 1000.1})
    assert fingerprint({"a": 1}) != fingerprint({"a": Decimal("1.0")})


def test_a_placeholder_lookalike_in_a_string_is_left_alone() -> None:
    text = "\x00" + "0" * 32 + ":0"
    value = {"s": text, "d": Decimal("1.5")}
    assert json.loads(jsonvalues.dumps(value)) == {"s": text, "d": 1.5}
    assert math.isclose(json.loads(jsonvalues.dumps([Decimal("0.1")]))[0], 0.1)


def test_a_record_s_decimal_field_is_captured_exactly() -> None:
    from capture.recording import json_value

    assert str(json_value(Decimal("1250.50"))) == "1250.50"
    assert json_value(Decimal("12.00")) == 12 and type(json_value(Decimal("12.00"))) is int  # whole: an integer


def test_the_run_viewer_shows_a_decimal_as_the_number_it_is() -> None:
    from workflows.views import runs

    assert '"amount": 1000.10' in runs._pretty({"amount": Decimal("1000.10")})
