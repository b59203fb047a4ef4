"""A typed Python client generated from the schema drives the docs/api.md walk-through (issue #31).

``openapi-python-client`` (pinned in requirements/dev.txt) generates the client from
``/api/schema/`` of ``live_server`` into the test's temporary folder, offline (the server is
local; no template or package is fetched), exactly as docs/api.md tells an integrator to. The
walk-through's core steps then go through it against a real Celery worker: deploy the
definition, start a run, read it, signal it, list and complete the approver's task, search the
runs, and read a problem. What the generated models parse is the contract: a field the server
answers that the schema does not declare, or a declared one it does not answer, fails here.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api import documents

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

GENERATOR = Path(sys.executable).with_name("openapi-python-client")
PACKAGE = "switchyard_api_client"
# no post hooks: the generated code is imported, not committed, so it need not be formatted
CONFIG = f"post_hooks: []\nproject_name_override: switchyard-api-client\npackage_name_override: {PACKAGE}\n"


@pytest.fixture
def generated(live_server: Any, tmp_path: Path) -> Iterator[Any]:
    """The generated package, imported from the temporary folder (and forgotten afterwards)."""
    config = tmp_path / "client.yaml"
    config.write_text(CONFIG)
    result = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--url",
            f"{live_server.url}/api/schema/?format=json",
            "--meta",
            "none",
            "--output-path",
            str(tmp_path / PACKAGE),
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The one part it leaves out, by design of the generator: the raw YAML body of
    # POST /api/v1/definitions/ (the client loads definitions as JSON {format, text}).
    output = result.stdout + result.stderr
    warnings = [line for line in output.splitlines() if line.startswith("WARNING")]
    assert warnings == ["WARNING parsing POST /api/v1/definitions/ within definitions."], output
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def module(name: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.{name}")


def test_the_generated_client_runs_the_walk_through(
    generated: Any, live_server: Any, demo_users: dict[str, Any], celery_worker_process: Any
) -> None:
    from rest_framework.authtoken.models import Token

    def client_of(username: str) -> Any:
        token = Token.objects.get_or_create(user=demo_users[username])[0].key
        return generated.AuthenticatedClient(base_url=live_server.url, token=token, prefix="Token")

    admin, alice = client_of("admin"), client_of("alice")
    models = module("models")

    # deploy: load (JSON body), publish, activate
    load = module("api.definitions.definitions_load")
    loaded = load.sync(
        client=admin,
        body=models.LoadDefinitionInputRequest(
            text=documents.purchase(1), scope="default", format_=models.FormatEnum.YAML
        ),
    )
    assert isinstance(loaded, models.DefinitionOut) and loaded.status == "CANDIDATE", loaded
    published = module("api.definitions.definitions_publish").sync("default", "api-purchase", 1, client=admin)
    assert isinstance(published, models.DefinitionOut) and published.status == "AVAILABLE", published
    activation = module("api.activations.activations_activate").sync(
        "default", "api-purchase", client=admin, body=models.ActivateInputRequest(version=1, target_scope="default")
    )
    assert isinstance(activation, models.ActivationOut) and activation.version == 1, activation

    # start a run and wait for it to park on its signal
    start = module("api.runs.runs_start").sync_detailed(
        client=admin,
        body=models.StartRunInputRequest(
            definition_id="api-purchase", business_key="PO-1001", payload={"number": "PO-1001", "total": 100}
        ),
        await_=20,
    )
    assert start.status_code == 200, start.content
    run = start.parsed
    assert isinstance(run, models.RunOut), run
    assert (run.status, run.current_step, run.business_key) == (
        models.RunOutStatusEnum.WAITING,
        "wait-payment",
        "PO-1001",
    )

    # read it: the typed run and its ETag
    read = module("api.runs.runs_retrieve").sync_detailed(run.id, client=admin)
    assert read.status_code == 200 and read.headers["ETag"].startswith(f'"{read.parsed.state_version}.')
    assert read.parsed.state == {"number": "PO-1001", "total": 100}

    # signal it, conditioned on the state read: the run moves on to the approvers' task
    signalled = module("api.runs.runs_signal").sync_detailed(
        run.id,
        client=admin,
        body=models.SignalInputRequest(name="paid", payload={"amount": 100}),
        if_match=read.headers["ETag"],
        await_=20,
    )
    assert signalled.status_code == 200, signalled.content
    assert signalled.parsed.current_step == "review" and signalled.parsed.state["paid"] == 100

    # the approver lists her tasks and completes the review
    tasks = module("api.tasks.tasks_list").sync(client=alice)
    assert isinstance(tasks, models.PaginatedTaskOutList), tasks
    (task,) = [t for t in tasks.results if t.run == run.id]
    assert task.title == "Approve purchase PO-1001"
    assert [d.name for d in task.decisions] == ["approve", "reject"]
    completed = module("api.tasks.tasks_complete").sync_detailed(
        task.id,
        client=alice,
        body=models.CompleteTaskInputRequest(decision="approve", payload={"comment": "ok"}),
        await_=20,
    )
    assert completed.status_code == 200, completed.content
    assert completed.parsed.status == models.RunOutStatusEnum.COMPLETED

    # search: by status, business key and state containment
    found = module("api.runs.runs_list").sync(
        client=admin,
        status=[models.RunsListStatusItem.COMPLETED],
        business_key="PO-1001",
        state=json.dumps({"paid": 100}),
    )
    assert isinstance(found, models.PaginatedRunOutList), found
    assert [r.id for r in found.results] == [run.id]

    # the history, typed
    history = module("api.runs.runs_history").sync(run.id, client=admin)
    assert isinstance(history, models.PaginatedHistoryEntryOutList) and history.results, history

    # a problem parses as ProblemOut: the stable code, no value repeated
    missing = module("api.runs.runs_retrieve").sync(uuid.UUID(int=0), client=admin)
    assert isinstance(missing, models.ProblemOut), missing
    assert (missing.status, missing.code) == (404, "INSTANCE_NOT_FOUND")
    refused = module("api.runs.runs_list").sync_detailed(client=admin, page_size=0)
    assert refused.status_code == 400 and refused.parsed.violations[0].pointer == "/page_size"
