"""Bad input, through the API and through ``workflows.operations``: exact payload bounds, bodies
nested 20,000 deep, JSON Schema and CEL attacks, and a leak sentinel in every payload field.

Every adversarial request must be answered 4xx (never 500, never a RecursionError) within
50 ms at the 99th percentile, and the sentinel must appear in no response, no database row,
no ``last_error`` and no log line above DEBUG.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from workflows import operations
from workflows.engine import db, executor
from workflows.exceptions import DefinitionError, InvalidPayload
from workflows.models import Command, Run

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

FULL = os.environ.get("RELIABILITY_MODE") == "full"
SENTINEL = "LEAK-SENTINEL-9c2e"
LIMIT = 262_144
P99_BUDGET_MS = 50.0
# The wall-clock bounds below catch unbounded work (catastrophic backtracking, an evaluation
# without a cost limit: seconds to minutes), not speed. On a shared CI machine a bounded answer
# can still take a few hundred ms, so outside the full mode (a quiet machine, the figures of
# docs/reliability.md) each bound is widened by BOUND_SLACK; the full mode keeps them exact.
BOUND_SLACK = 1 if FULL else 20


def within(budget_ms: float) -> float:
    return budget_ms * BOUND_SLACK


DOCUMENT = """
definitionId: rel-input
definitionVersion: 1
contract:
  name: relinput.v1
  signals:
    paid:
      type: object
      properties: {amount: {type: number}, ref: {type: string, pattern: "^(a+)+$"}}
      required: [amount]
      additionalProperties: false
stateSchema: {type: object}
startPayloadSchema:
  type: object
  properties:
    code: {type: string, pattern: "^(a+)+$"}
    kind: {enum: [small, large]}
    note: {type: string, maxLength: 20}
    count: {type: integer, minimum: 0}
initialStep: wait-paid
steps:
  - id: wait-paid
    type: wait-signal
    signal: paid
    set: "{'paid': payload.amount}"
    next: review
  - id: review
    type: human-task
    title: Review
    assignment: {mode: group, value: approvers}
    decisions:
      - name: approve
        payloadSchema:
          type: object
          properties: {comment: {type: string, maxLength: 50, pattern: "^(a|aa)+$"}, score: {enum: [1, 2, 3]}}
          additionalProperties: false
        next: done
  - {id: done, type: complete}
"""

SMALL = """
definitionId: {id}
definitionVersion: 1
contract: {{name: {id}.v1, signals: {{}}}}
stateSchema: {state}
startPayloadSchema: {{type: object}}
initialState: {initial}
initialStep: done
steps:
  - {{id: done, type: complete}}
"""


def document(definition_id: str, *, state: str = "{type: object}", initial: str = '"{}"') -> str:
    return SMALL.format(id=definition_id, state=state, initial=initial)


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture
def api(db: None) -> APIClient:
    user = User.objects.create_user(username="root", password="root", is_superuser=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


@pytest.fixture
def loud_logs(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], list[str]]]:
    """Every log line above DEBUG, formatted with its exception text."""
    caplog.set_level(logging.INFO)
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    yield lambda: [formatter.format(r) for r in caplog.records if r.levelno > logging.DEBUG]


@pytest.fixture
def run_waiting_for_review(deploy: Callable[..., Any]) -> dict[str, str]:
    deploy(DOCUMENT)
    run_id = operations.start(definition_id="rel-input", payload={}).run_id
    executor.drain(run_id=run_id)
    operations.signal(run_id=run_id, name="paid", payload={"amount": 3})
    executor.drain(run_id=run_id)
    task_id = str(Run.objects.get(pk=run_id).tasks.get().id)
    return {"run": str(run_id), "task": task_id}


# --- building inputs -------------------------------------------------------------------------


def sized(total: int) -> dict[str, str]:
    """``{"blob": ...}`` whose compact UTF-8 JSON is exactly ``total`` bytes (two-byte characters
    included, so bytes and characters differ)."""
    overhead = len('{"blob":""}')
    wide = "é" * 1000  # 2,000 bytes
    text = wide + "a" * (total - overhead - len(wide.encode()))
    value = {"blob": text}
    assert len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()) == total
    return value


def nested(depth: int, leaf: Any = 1) -> dict[str, Any]:
    """An object whose nesting (objects and arrays) is exactly ``depth`` levels."""
    value: Any = leaf
    for _ in range(depth - 1):
        value = [value]
    return {"x": value}


def deep_list(depth: int, leaf: Any = SENTINEL) -> Any:
    value: Any = leaf
    for _ in range(depth):
        value = [value]
    return value


# --- exact bounds ----------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "accepted"), [(LIMIT - 1, True), (LIMIT, True), (LIMIT + 1, False)])
def test_payload_bytes_at_the_limit_pass_and_one_more_is_refused(
    api: APIClient, deploy: Callable[..., Any], size: int, accepted: bool
) -> None:
    deploy(DOCUMENT)
    payload = sized(size)
    if accepted:
        assert operations.start(definition_id="rel-input", payload=payload).command_id
    else:
        with pytest.raises(InvalidPayload) as refused:
            operations.start(definition_id="rel-input", payload=payload)
        assert refused.value.violations[0].type == "size"
    response = api.post("/api/v1/runs/", {"definition_id": "rel-input", "payload": payload}, format="json")
    assert response.status_code == (202 if accepted else 400), response.content[:300]


@pytest.mark.parametrize(("depth", "accepted"), [(63, True), (64, True), (65, False)])
def test_payload_depth_at_the_limit_passes_and_one_more_is_refused(
    api: APIClient, deploy: Callable[..., Any], depth: int, accepted: bool
) -> None:
    deploy(DOCUMENT)
    payload = nested(depth)
    if accepted:
        assert operations.start(definition_id="rel-input", payload=payload).command_id
    else:
        with pytest.raises(InvalidPayload) as refused:
            operations.start(definition_id="rel-input", payload=payload)
        assert refused.value.violations[0].type == "depth"
    response = api.post("/api/v1/runs/", {"definition_id": "rel-input", "payload": payload}, format="json")
    assert response.status_code == (202 if accepted else 400), response.content[:300]


def test_a_value_nested_20000_deep_is_refused_by_every_operation_without_recursion(
    run_waiting_for_review: dict[str, str],
) -> None:
    deep = {"x": deep_list(20_000)}
    calls = [
        lambda: operations.start(definition_id="rel-input", payload=deep),
        lambda: operations.signal(run_id=run_waiting_for_review["run"], name="paid", payload=deep),
        lambda: operations.complete_task(task_id=run_waiting_for_review["task"], decision="approve", payload=deep),
    ]
    for call in calls:
        began = time.perf_counter()
        with pytest.raises(InvalidPayload) as refused:
            call()
        assert refused.value.violations[0].type == "depth"
        assert (time.perf_counter() - began) * 1000 < within(P99_BUDGET_MS)
        assert SENTINEL not in str(refused.value) and SENTINEL not in repr(refused.value.violations)


# --- definitions: schema and CEL attacks, refused when saved ------------------------------------


SAVE_ATTACKS = {
    "remote $ref": document("rel-a1", state="{$ref: 'https://example.com/state.json'}"),
    "cyclic $ref": document("rel-a2", state="{$ref: '#/$defs/a', $defs: {a: {$ref: '#/$defs/a'}}}"),
    "cycle through allOf": document("rel-a3", state="{$defs: {a: {allOf: [{$ref: '#/$defs/a'}]}}, $ref: '#/$defs/a'}"),
    "back-reference pattern": document("rel-a4", state="{type: object, properties: {a: {pattern: '(a)\\1'}}}"),
    "look-ahead pattern": document("rel-a5", state="{type: object, properties: {a: {pattern: '(?=a)a'}}}"),
    "CEL over 4 KiB": document("rel-a6", initial="\"{'a': " + " + ".join(["1"] * 1500) + '}"'),
    "CEL AST too deep": document("rel-a7", initial='"' + "(" * 250 + "1" + ")" * 250 + '"'),
    "CEL comprehensions nested 3 deep": document(
        "rel-a8", initial="\"{'a': [1].map(x, [1].map(y, [1].map(z, x + y + z)))}\""
    ),
    "YAML nested 20,000 deep": document("rel-a9") + "x-extra: " + "[" * 20_000 + "]" * 20_000 + "\n",
    "YAML alias bomb": "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    + document("rel-a10"),
}


@pytest.mark.parametrize("attack", list(SAVE_ATTACKS), ids=list(SAVE_ATTACKS))
def test_a_schema_or_expression_attack_is_refused_when_the_document_is_saved(api: APIClient, attack: str) -> None:
    began = time.perf_counter()
    response = api.post(
        "/api/v1/definitions/", {"scope": "default", "format": "yaml", "text": SAVE_ATTACKS[attack]}, format="json"
    )
    elapsed = (time.perf_counter() - began) * 1000
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:400])
    assert response["Content-Type"].startswith("application/problem+json")
    assert elapsed < within(500), f"{attack}: refused after {elapsed:.0f} ms"


def test_a_cyclic_schema_already_stored_never_fails_a_recording_with_a_server_error() -> None:
    """Bounded at run as well as refused at save: validation against a schema that recurses
    without descending answers a violation instead of raising RecursionError."""
    from workflows.definitions import schemas

    problems = schemas.validate({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}, {"x": SENTINEL})
    assert problems and problems[0].type == "$ref"


def test_catastrophic_patterns_and_huge_enums_are_bounded_when_they_run(
    api: APIClient, run_waiting_for_review: dict[str, str]
) -> None:
    members = ", ".join(f"e{i}" for i in range(20_000))  # a 150 KB enum, inside the document limit
    huge = document("rel-enum").replace(
        "startPayloadSchema: {type: object}",
        f"startPayloadSchema: {{type: object, properties: {{v: {{enum: [{members}]}}}}}}",
    )
    loaded = api.post("/api/v1/definitions/", {"scope": "default", "format": "yaml", "text": huge}, format="json")
    assert loaded.status_code == 201, loaded.content[:300]
    assert api.post("/api/v1/definitions/default/rel-enum/1/publish/").status_code == 200
    assert api.put("/api/v1/activations/default/rel-enum/", {"version": 1}, format="json").status_code == 200
    cases = [
        ("/api/v1/runs/", {"definition_id": "rel-input", "payload": {"code": "a" * 200_000 + "!"}}),
        (f"/api/v1/tasks/{run_waiting_for_review['task']}/complete/",
         {"decision": "approve", "payload": {"comment": "a" * 49 + "b"}}),
        ("/api/v1/runs/", {"definition_id": "rel-enum", "payload": {"v": SENTINEL}}),
    ]  # fmt: skip
    for path, body in cases:
        api.post(path, body, format="json")  # warm the validator cache
        began = time.perf_counter()
        response = api.post(path, body, format="json")
        elapsed = (time.perf_counter() - began) * 1000
        assert response.status_code == 400, (path, response.content[:300])
        assert elapsed < within(P99_BUDGET_MS * 2), f"{path}: {elapsed:.0f} ms"


def test_cel_evaluation_is_bounded_at_run(deploy: Callable[..., Any]) -> None:
    deploy(document("rel-cel", initial="\"{'n': payload.xs.map(x, payload.xs.map(y, x * y)).size()}\""))
    run_id = operations.start(definition_id="rel-cel", payload={"xs": list(range(1000)), "secret": SENTINEL}).run_id
    began = time.perf_counter()
    executor.drain(run_id=run_id)
    assert time.perf_counter() - began < (5 if FULL else 20)  # unbounded would take minutes
    run = Run.objects.get(pk=run_id)
    start = Command.objects.get(run_id=run_id, kind="START")
    assert run.status == "FAILED" and start.status == "FAILED"
    assert SENTINEL not in start.last_error and SENTINEL not in run.failure_message


# --- the adversarial table: every answer 4xx within 50 ms (p99), no sentinel anywhere ---------


def adversarial(run: str, task: str) -> list[tuple[str, str, str, Any, str]]:
    """(name, method, path, body, content type): bodies are bytes (sent as is) or JSON values."""
    deep_array = '{"definition_id": "rel-input", "payload": ' + "[" * 20_000 + json.dumps(SENTINEL) + "]" * 20_000 + "}"
    deep_object = '{"name": "paid", "payload": ' + '{"a": ' * 20_000 + json.dumps(SENTINEL) + "}" * 20_000 + "}"
    s = SENTINEL
    return [
        ("start 20,000-deep array", "post", "/api/v1/runs/", deep_array.encode(), "application/json"),
        ("signal 20,000-deep object", "post", f"/api/v1/runs/{run}/signals/", deep_object.encode(), "application/json"),
        ("complete 20,000-deep array", "post", f"/api/v1/tasks/{task}/complete/",
         ('{"decision": "approve", "payload": ' + "[" * 20_000 + "]" * 20_000 + "}").encode(), "application/json"),
        ("start payload 262,145 bytes", "post", "/api/v1/runs/",
         {"definition_id": "rel-input", "payload": {**sized(LIMIT + 1 - len(',"s":""') - len(s)), "s": s}}, ""),
        ("start payload 65 deep", "post", "/api/v1/runs/",
         {"definition_id": "rel-input", "payload": nested(65, s)}, ""),
        ("body over the upload limit", "post", "/api/v1/runs/",
         ('{"definition_id": "rel-input", "payload": {"blob": "' + s * 60_000 + '"}}').encode(), "application/json"),
        ("catastrophic pattern, long string", "post", "/api/v1/runs/",
         {"definition_id": "rel-input", "payload": {"code": "a" * 100_000 + s}}, ""),
        ("enum miss", "post", "/api/v1/runs/", {"definition_id": "rel-input", "payload": {"kind": s}}, ""),
        ("maxLength", "post", "/api/v1/runs/", {"definition_id": "rel-input", "payload": {"note": s * 3}}, ""),
        ("wrong type", "post", "/api/v1/runs/", {"definition_id": "rel-input", "payload": {"count": s}}, ""),
        ("undeclared signal name", "post", f"/api/v1/runs/{run}/signals/",
         {"name": s + " !", "payload": {"v": s}}, ""),
        ("complete: decision not offered", "post", f"/api/v1/tasks/{task}/complete/",
         {"decision": s + " !", "payload": {"comment": s}}, ""),
        ("complete: payload fails the decision schema", "post", f"/api/v1/tasks/{task}/complete/",
         {"decision": "approve", "payload": {"comment": s, "score": s}}, ""),
        ("complete: extra member", "post", f"/api/v1/tasks/{task}/complete/",
         {"decision": "approve", "payload": {"other": s}}, ""),
        ("NaN", "post", "/api/v1/runs/", b'{"definition_id": "rel-input", "payload": {"v": NaN}}', "application/json"),
        ("1e400", "post", "/api/v1/runs/",
         b'{"definition_id": "rel-input", "payload": {"v": 1e400}}', "application/json"),
        ("5,000-digit integer", "post", "/api/v1/runs/",
         ('{"definition_id": "rel-input", "payload": {"v": ' + "9" * 5000 + "}}").encode(), "application/json"),
        ("invalid UTF-8", "post", "/api/v1/runs/",
         b'{"definition_id": "rel-input", "payload": {"v": "\xff\xfe' + s.encode() + b'"}}', "application/json"),
        ("NUL character", "post", "/api/v1/runs/",
         {"definition_id": "rel-input", "payload": {"v": s + "\x00"}}, ""),
        ("malformed JSON", "post", "/api/v1/runs/", ('{"payload": {"v": "' + s + '"').encode(), "application/json"),
        ("idempotency key too long", "post", "/api/v1/runs/",
         {"definition_id": "rel-input", "payload": {"v": s}, "_key": s * 20}, ""),
        ("business key too long", "post", "/api/v1/runs/",
         {"definition_id": "rel-input", "business_key": s * 20, "payload": {"v": s}}, ""),
        ("unknown run", "post", f"/api/v1/runs/{run[:-4]}ffff/signals/",
         {"name": "paid", "payload": {"amount": s}}, ""),
        ("definition text nested 20,000 deep", "post", "/api/v1/definitions/",
         {"scope": "default", "format": "yaml", "text": document("rel-deep") + "x: " + "[" * 20_000 + "]" * 20_000},
         ""),
        ("definition JSON nested 20,000 deep", "post", "/api/v1/definitions/",
         {"scope": "default", "format": "json", "text": "[" * 20_000 + "]" * 20_000}, ""),
        ("YAML body nested 20,000 deep", "post", "/api/v1/definitions/", ("x: " + "[" * 20_000 + "]" * 20_000).encode(),
         "application/yaml"),
    ]  # fmt: skip


def test_every_adversarial_input_is_a_fast_4xx_that_leaks_nothing(
    api: APIClient, run_waiting_for_review: dict[str, str], loud_logs: Callable[[], list[str]]
) -> None:
    cases = adversarial(run_waiting_for_review["run"], run_waiting_for_review["task"])
    repeats = 30 if FULL else 5
    samples: dict[str, list[float]] = {name: [] for name, *_ in cases}
    statuses: dict[str, set[int]] = {name: set() for name, *_ in cases}
    leaks: list[str] = []
    for repeat in range(repeats + 1):  # the first round warms caches and is not timed
        for name, method, path, body, content_type in cases:
            kwargs: dict[str, Any] = {}
            if isinstance(body, dict) and "_key" in body:
                body = {k: v for k, v in body.items() if k != "_key"}
                kwargs["HTTP_IDEMPOTENCY_KEY"] = SENTINEL * 20
            began = time.perf_counter()
            if isinstance(body, bytes):
                response = getattr(api, method)(path, body, content_type=content_type, **kwargs)
            else:
                response = getattr(api, method)(path, body, format="json", **kwargs)
            elapsed = (time.perf_counter() - began) * 1000
            if repeat:
                samples[name].append(elapsed)
            statuses[name].add(response.status_code)
            if SENTINEL.encode() in response.content or any(SENTINEL in str(v) for v in response.headers.values()):
                leaks.append(f"response to {name}")
    everything = sorted(ms for values in samples.values() for ms in values)
    p99 = everything[min(len(everything) - 1, int(len(everything) * 0.99))]
    leaks += [f"log: {line[:120]}" for line in loud_logs() if SENTINEL in line]
    leaks += [f"table {table}" for table in tables_holding(SENTINEL)]
    report = {
        "mode": "full" if FULL else "lite",
        "kind": "bad-input",
        "ok": True,
        "samples": len(everything),
        "p99_ms": round(p99, 2),
        "max_ms": round(everything[-1], 2),
        "cases": {
            name: {"statuses": sorted(statuses[name]), "max_ms": round(max(samples[name]), 2)} for name in samples
        },
        "leaks": leaks,
    }
    bad_status = {name: s for name, s in statuses.items() if not all(400 <= code < 500 for code in s)}
    report["ok"] = not bad_status and not leaks and p99 <= P99_BUDGET_MS
    write(report, "bad-input")
    assert not bad_status, f"answers that are not 4xx: {bad_status}"
    assert not leaks, leaks
    # The 50 ms p99 is a figure of the full run (python -m tests.reliability.run --full, on an
    # otherwise idle machine), reported in docs/reliability.md; the suite that CI runs on a
    # shared 2-core machine records it but does not fail on timing (no timed unit tests).
    if FULL:
        assert p99 <= P99_BUDGET_MS, f"p99 {p99:.1f} ms over {len(everything)} answers: {report['cases']}"


def test_a_signal_payload_the_contract_refuses_is_rejected_by_the_executor_without_its_values(
    api: APIClient, deploy: Callable[..., Any], loud_logs: Callable[[], list[str]]
) -> None:
    """A signal's payload is validated when the executor applies it (the reference's order):
    recorded (202), then REJECTED with a value-free reason; RE2 keeps the pattern linear."""
    deploy(DOCUMENT)
    payloads = [{"amount": SENTINEL}, {"amount": 1, "extra": SENTINEL}, {"amount": 1, "ref": "a" * 100_000 + SENTINEL}]
    waiting = operations.start(definition_id="rel-input", payload={}).run_id
    executor.drain(run_id=waiting)
    for payload in payloads:
        response = api.post(f"/api/v1/runs/{waiting}/signals/", {"name": "paid", "payload": payload}, format="json")
        assert response.status_code == 202, response.content[:200]
        began = time.perf_counter()
        executor.drain(run_id=waiting)
        assert (time.perf_counter() - began) * 1000 < within(1000)
    signals = Command.objects.filter(run_id=waiting, kind="SIGNAL")
    assert list(signals.values_list("status", flat=True)) == ["REJECTED"] * 3
    texts = list(signals.values_list("last_error", flat=True))
    texts += list(Run.objects.get(pk=waiting).history.values_list("outcome", flat=True)) + loud_logs()
    assert not [t for t in texts if SENTINEL in t], texts


def test_a_sentinel_in_a_payload_that_fails_in_the_executor_leaks_into_no_error(
    deploy: Callable[..., Any], loud_logs: Callable[[], list[str]]
) -> None:
    """A payload accepted at recording whose value then breaks a CEL expression: the command
    fails with framework text; last_error, the failure, the history outcome and the logs
    above DEBUG never quote the value."""
    deploy(document("rel-boom", initial="\"{'n': int(payload.v) + 1}\""))
    run_id = operations.start(definition_id="rel-boom", payload={"v": SENTINEL}).run_id
    executor.drain(run_id=run_id)
    run = Run.objects.get(pk=run_id)
    assert run.status == "FAILED"
    texts = [run.failure_code, run.failure_message]
    texts += list(Command.objects.filter(run_id=run_id).values_list("last_error", flat=True))
    texts += list(run.history.values_list("outcome", flat=True))
    texts += loud_logs()
    assert not [t for t in texts if SENTINEL in t], texts


# --- helpers ---------------------------------------------------------------------------------


def tables_holding(text: str) -> list[str]:
    """Every table with a row whose text holds ``text`` (the whole database is searched)."""
    found = []
    for (table,) in db.fetchall(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
    ):
        with connection.cursor() as cur:
            cur.execute(f'SELECT count(*) FROM "{table}" t WHERE t::text LIKE %s', [f"%{text}%"])
            if cur.fetchone()[0]:
                found.append(table)
    return found


def write(report: dict[str, Any], name: str) -> None:
    folder = os.environ.get("RELIABILITY_RESULTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        (Path(folder) / f"{stamp}-{report['mode']}-{name}.json").write_text(json.dumps(report, indent=2))


def test_document_errors_are_value_free() -> None:
    from workflows.definitions import documents

    with pytest.raises(DefinitionError) as refused:
        documents.parse('{"definitionId": "' + SENTINEL + '", ' + "[" * 20_000, "json")
    assert SENTINEL not in str(refused.value)
