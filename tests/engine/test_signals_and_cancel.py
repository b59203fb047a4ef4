"""Issue #26, signals and cancel: branch ids at the recording bound, what a cancel writes and
who a later COMMAND_CANCELLED names.

Executor work runs in-process here (``executor.drain``, the code the worker runs) where a
test arranges a crash the worker would race; the rest is in test_e2e_parked_signals.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.test_e2e_worker_commands import TWO_WAITS
from tests.support.ops import EMAILER, outcome_unknown_next_command
from workflows import operations
from workflows.exceptions import InvalidPayload
from workflows.models import Command, HistoryEntry, Run

SENTINEL = "LEAK-SENTINEL-b7"


@pytest.mark.django_db(transaction=True)
class TestBranchIdBound:
    def test_a_branch_id_over_255_characters_is_refused_value_free_and_writes_nothing(self, deploy: Any) -> None:
        # Issue #26 (engine 162): the Python operation accepted any branch id length.
        deploy(TWO_WAITS)
        run_id = operations.start(definition_id="two-waits", payload={}).run_id
        too_long = SENTINEL + "b" * (256 - len(SENTINEL))
        with pytest.raises(InvalidPayload) as refused:
            operations.signal(run_id=run_id, name="first", branch=too_long, idempotency_key="k-1")
        assert refused.value.code == "INVALID_PAYLOAD"
        assert [(v.pointer, v.type) for v in refused.value.violations] == [("/branch", "size")]
        assert SENTINEL not in str(refused.value) and all(SENTINEL not in v.message for v in refused.value.violations)
        assert not Command.objects.filter(run_id=run_id, kind="SIGNAL").exists()
        assert Run.objects.get(pk=run_id).open_signals == 0
        # the bound is inclusive, and the refused key stayed free
        at_bound = operations.signal(run_id=run_id, name="first", branch="b" * 255, idempotency_key="k-1")
        assert at_bound.kind == "SIGNAL" and not at_bound.replay


def _users() -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    model = get_user_model()
    users = {name: model.objects.create_user(username=name, password=name) for name in ("carol", "alice")}
    users["bob"] = model.objects.create_superuser(username="bob", password="bob")  # may reconcile
    return users


def _cancelled_entries(run_id: Any) -> dict[int, tuple[str, str, str]]:
    return {
        e.command_id: (e.outcome, e.actor_kind, e.actor_id)
        for e in HistoryEntry.objects.filter(run_id=run_id, type="COMMAND_CANCELLED").order_by("seq")
    }


@pytest.mark.django_db(transaction=True)
class TestCancel:
    def test_each_cancelled_commands_reason_names_its_kind_and_the_entries_name_the_canceller(
        self, deploy: Any, drain: Any
    ) -> None:
        # Issue #26 (engine 146): every cancelled command got the same reason, whatever its kind.
        users = _users()
        deploy(TWO_WAITS)
        run_id = operations.start(definition_id="two-waits", payload={}, actor=users["carol"]).run_id
        drain()
        early = operations.signal(run_id=run_id, name="second", payload={"note": SENTINEL}, actor=users["carol"])
        drain()
        assert Command.objects.get(pk=early.command_id).status == "PARKED"
        queued = operations.signal(run_id=run_id, name="first", actor=users["carol"])
        operations.cancel(run_id=run_id, reason="customer asked", actor=users["alice"])

        timeout = Command.objects.get(run_id=run_id, kind="TIMER")
        reasons = dict(
            Command.objects.filter(id__in=[early.command_id, queued.command_id, timeout.id]).values_list(
                "id", "last_error"
            )
        )
        assert reasons == {
            early.command_id: "INSTANCE_CANCELLED: the run was cancelled (SIGNAL not applied)",
            queued.command_id: "INSTANCE_CANCELLED: the run was cancelled (SIGNAL not applied)",
            timeout.id: "INSTANCE_CANCELLED: the run was cancelled (TIMER not applied)",
        }
        assert _cancelled_entries(run_id) == dict.fromkeys(
            [early.command_id, queued.command_id, timeout.id], ("INSTANCE_CANCELLED", "USER", "alice")
        )
        # the commands keep the actor that recorded them
        assert Command.objects.get(pk=queued.command_id).actor_id == "carol"
        assert SENTINEL not in "".join(reasons.values())

    def test_a_command_that_meets_the_cancelled_run_later_is_logged_as_cancelled_by_the_canceller(
        self, deploy: Any, drain: Any
    ) -> None:
        # Issue #26 (engine 91): a COMMAND_CANCELLED written by the executor for a command that
        # met the cancelled run named the command's own recorder instead of the canceller.
        users = _users()
        deploy(EMAILER)
        run_id = operations.start(
            definition_id="emailer", payload={"email": "a@example.com"}, actor=users["carol"]
        ).run_id
        start_id = outcome_unknown_next_command(run_id)  # the worker died after the email's marker
        assert Command.objects.get(pk=start_id).status == "OUTCOME_UNKNOWN"
        operations.cancel(run_id=run_id, reason="duplicate order", actor=users["alice"])
        # an administrator offers the interrupted start again: it meets the cancelled run
        operations.reconcile_command(command_id=start_id, action="replay", reason="checked", actor=users["bob"])
        drain()

        assert _cancelled_entries(run_id) == {start_id: ("INSTANCE_CANCELLED", "USER", "alice")}
        start = Command.objects.get(pk=start_id)
        assert (start.status, start.last_error) == (
            "CANCELLED",
            "INSTANCE_CANCELLED: the run was cancelled (START not applied)",
        )
        assert start.actor_id == "carol"  # the command keeps its recorder
