"""The decision log: applying the patches from the latest baseline reproduces the stored state.

Property-tested on the history buffer itself (random JSON states, random sequences of
changes, oversized states forcing baselines), then checked end to end on runs whose history
went through PostgreSQL's jsonb and back.
"""

from __future__ import annotations

import itertools
import json
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.engine import documents
from workflows import operations
from workflows.engine import history
from workflows.engine.actors import NONE
from workflows.engine.history import HistoryBuffer, _same, canonical, diff, replay
from workflows.models import HistoryEntry

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
KEYS = st.text(alphabet="ab/~-0 é", min_size=0, max_size=4)  # "/" and "~" need escaping in pointers
JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=20,
)
STATES = st.dictionaries(KEYS, JSON, max_size=5)


def stored(value: Any) -> Any:
    """What a value looks like after the canonical JSON text round trip (jsonb keeps 1 vs 1.0)."""
    return json.loads(canonical(value))


@st.composite
def changes(draw: st.DrawFn) -> list[Any]:
    """A run's successive states: small edits of the previous state, or a fresh one."""
    state = draw(STATES)
    states = [state]
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        nxt = json.loads(json.dumps(states[-1]))
        how = draw(st.sampled_from(["set", "remove", "retype", "append", "fresh", "same"]))
        if how == "set":
            nxt[draw(KEYS)] = draw(JSON)
        elif how == "remove" and nxt:
            del nxt[draw(st.sampled_from(sorted(nxt)))]
        elif how == "retype":
            key = draw(KEYS)
            value = nxt.get(key)
            # 1 -> 1.0 and 1.0 -> 1 are changes the log must record
            nxt[key] = float(value) if isinstance(value, int) and not isinstance(value, bool) else 1
        elif how == "append":
            key = draw(KEYS)
            current = nxt.get(key)
            nxt[key] = [*current, draw(JSON)] if isinstance(current, list) else [draw(JSON)]
        elif how == "fresh":
            nxt = draw(STATES)
        states.append(nxt)
    return states


def log_of(states: list[Any]) -> list[dict[str, Any]]:
    """Log the states as a run's segments would: a baseline, then one DECISION per change."""
    buffer = HistoryBuffer(run_id=None, next_seq=1)
    buffer.baseline(states[0], version=1, command_id=None, actor=NONE)
    version = 1
    for before, after in itertools.pairwise(states):
        after_version = version if _same(before, after) else version + 1
        buffer.decision(
            step="s",
            outcome="o",
            before=before,
            after=after,
            version_before=version,
            version_after=after_version,
            command_id=None,
            actor=NONE,
        )
        version = after_version
    return [
        {
            "type": e.type,
            "patch": stored(e.patch) if e.patch is not None else None,
            "payload": stored(e.payload) if e.payload is not None else None,
            "branch_id": e.branch_id,
        }
        for e in buffer.entries
    ]


def assert_only_plain_operations(entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        for op in entry["patch"] or []:
            assert op["op"] in {"add", "remove", "replace"}
            assert "from" not in op
            if op["op"] == "remove":
                assert "value" not in op


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes())
def test_patches_from_the_baseline_reproduce_the_stored_state(states: list[Any]) -> None:
    entries = log_of(states)
    assert_only_plain_operations(entries)
    assert _same(replay(entries), stored(states[-1]))
    # and at every point along the way, not only at the end
    decisions = [i for i, e in enumerate(entries) if e["type"] == "DECISION"]
    for n, index in enumerate(decisions, start=1):
        assert _same(replay(entries[: index + 1]), stored(states[n]))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes())
def test_oversized_changes_are_logged_as_baselines_and_still_replay(states: list[Any]) -> None:
    with mock.patch.object(history, "PATCH_LIMIT", 40):
        entries = log_of(states)
    for i, entry in enumerate(entries):
        if entry["type"] == "DECISION" and entry["patch"] is None:
            assert entries[i + 1]["type"] == "STATE_BASELINE"  # the full state follows at once
    assert _same(replay(entries), stored(states[-1]))


@given(STATES)
def test_an_unchanged_state_logs_an_empty_patch(state: dict[str, Any]) -> None:
    entries = log_of([state, json.loads(json.dumps(state))])
    assert entries[-1]["patch"] == []


def test_an_integer_becoming_a_decimal_is_a_change() -> None:
    assert diff({"n": 1}, {"n": 1.0}) == [{"op": "replace", "path": "/n", "value": 1.0}]
    assert diff({"n": 1.0}, {"n": 1}) == [{"op": "replace", "path": "/n", "value": 1}]
    assert diff({"n": True}, {"n": 1}) == [{"op": "replace", "path": "/n", "value": 1}]
    # 1.0 and 1.00 are the same decimal: once read, they are one value
    assert diff({"n": json.loads("1.0")}, {"n": json.loads("1.00")}) == []
    replayed = replay(log_of([{"n": 1}, {"n": 1.0}]))
    assert type(replayed["n"]) is float


def test_keys_with_slashes_and_tildes_are_escaped() -> None:
    assert diff({}, {"a/b": 1, "c~d": 2}) == [
        {"op": "add", "path": "/a~1b", "value": 1},
        {"op": "add", "path": "/c~0d", "value": 2},
    ]


def test_list_shrinking_removes_from_the_end() -> None:
    patch = diff({"l": [1, 2, 3, 4]}, {"l": [9]})
    assert patch == [
        {"op": "replace", "path": "/l/0", "value": 9},
        {"op": "remove", "path": "/l/3"},
        {"op": "remove", "path": "/l/2"},
        {"op": "remove", "path": "/l/1"},
    ]


# --- through PostgreSQL ----------------------------------------------------------------------


@pytest.fixture
def reserve_service() -> Any:
    from workflows.definitions import catalogs

    catalogs.callbacks.register("test.reserve", category="service")(lambda payload, headers: None)
    yield
    catalogs.callbacks.unregister("test.reserve", "service")


def logged(run_id: Any) -> list[dict[str, Any]]:
    return list(
        HistoryEntry.objects.filter(run_id=run_id, type__in=["DECISION", "STATE_BASELINE"])
        .order_by("seq")
        .values("type", "patch", "payload", "branch_id")
    )


@pytest.mark.django_db(transaction=True)
def test_a_run_s_stored_history_replays_to_its_stored_state(deploy: Any, drain: Any, reserve_service: Any) -> None:
    from workflows.models import Run

    deploy(documents.ORDER_SIGNAL)
    recorded = operations.start(definition_id="order-signal", payload={"order": "A-1"})
    drain()
    run = Run.objects.get(pk=recorded.run_id)
    assert run.state == {"order": "A-1", "paid": 0.0}
    assert _same(replay(logged(run.id)), run.state)

    # paid goes from the decimal 0.0 to the integer 3: a change, kept exactly through jsonb
    operations.signal(run_id=run.id, name="paid", payload={"amount": 3})
    drain()
    run.refresh_from_db()
    assert run.status == "COMPLETED"
    entries = logged(run.id)
    assert {"op": "replace", "path": "/paid", "value": 3} in [op for e in entries for op in (e["patch"] or [])]
    replayed = replay(entries)
    assert _same(replayed, run.state) and type(replayed["paid"]) is int
    assert_only_plain_operations(entries)
