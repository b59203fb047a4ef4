"""The whole API contract fuzzed by schemathesis' own runner against a live server (issue #31).

``schemathesis run`` (the CLI, as an integrator or CI would run it) reads ``/api/schema/`` from
``live_server`` and sends what every phase generates (the schema's examples, the coverage
phase's boundary values, fuzzed valid and invalid requests; not the stateful phase, see
``config``), checked by
**every** check it has: no server error, documented statuses, content types, headers and
bodies, valid data accepted and invalid data refused, required headers, unsupported methods,
authentication honoured. A real Celery worker runs what the requests record, so the runs the
fuzzer starts move on while it reads them. Any failure fails the test, with the runner's
report.

The examples per operation are bounded (``MAX_EXAMPLES``) so the run takes a few minutes on
the 2-core CI machine. Path ids are aimed at real objects (a run, a task, a definition
version) half of the time through schemathesis dictionaries, so the requests reach the
endpoints' logic and not only their 404s.

Every pattern of the schema must be one schemathesis can compile (tests/api/test_contract.py):
it drops a pattern its Rust regex engine refuses, with only a warning, and then sends values
the pattern excludes as valid data (issue #31: scopes with control characters in paths, once
the scope pattern named a surrogate range).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.api import documents
from tests.support.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Five fuzzed examples per operation besides the schema's examples and the coverage phase's
# boundary values (every check still runs on each): the run's time is CI's longest test.
MAX_EXAMPLES = 5
REPO = Path(__file__).resolve().parents[2]
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


@pytest.fixture
def fuzzed_site(celery_worker_process: Any) -> dict[str, str]:
    """A superuser's token and real objects to aim at: an AVAILABLE, activated version, a
    CANDIDATE, a run parked on a signal and a run with an open task."""
    from django.contrib.auth.models import User
    from django.core.cache import cache
    from rest_framework.authtoken.models import Token

    from workflows import definitions, operations
    from workflows.models import Task

    cache.clear()  # throttling history of earlier tests
    user = User.objects.create_superuser("fuzzer", password="fuzzer")
    token = Token.objects.create(user=user)
    definitions.load(scope="default", text=documents.purchase(1), format="yaml")
    definitions.publish(scope="default", definition_id="api-purchase", version=1)
    definitions.activate(scope="default", definition_id="api-purchase", version=1)
    definitions.load(scope="default", text=documents.purchase(2), format="yaml")
    parked = operations.start(definition_id="api-purchase", payload={"number": "PO-1", "total": 1})
    reviewed = operations.start(definition_id="api-purchase", payload={"number": "PO-2", "total": 2})
    operations.signal(run_id=reviewed.run_id, name="paid", payload={"amount": 2})
    task = eventually(
        lambda: Task.objects.filter(run_id=reviewed.run_id).first(),
        what="the reviewed run's task",
        details=celery_worker_process.logs,
    )
    return {"token": token.key, "run": str(parked.run_id), "task": str(task.id)}


def config(site: dict[str, str]) -> str:
    """schemathesis.toml: all checks, bounded examples, real ids half of the time."""
    real = {
        "runs": [site["run"]],
        "tasks": [site["task"]],
        "scopes": ["default"],
        "definitions": ["api-purchase"],
        "versions": [1, 2],
    }
    lines = [
        "[checks]",
        "enabled = true",
        # Valid data accepted (tests/api/schemathesis_hooks.py): besides schemathesis'
        # defaults (2xx, 3xx, 401, 403, 404, 409, 429, 5xx, the last judged by
        # not_a_server_error), 412 and 422 answer valid requests by design: 412 when If-Match
        # names another state version than the run's (the header's shape is in the schema, the
        # run's version is not), 422 when a valid request names a stored object in a state that
        # cannot do it (a version that is not runnable, an assignee that does not exist).
        "[checks.positive_data_acceptance]",
        'expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "412", "422", "429", "5xx"]',
        # The stateful phase is off: the schema declares no OpenAPI links, and the links
        # schemathesis infers feed values read from answers into requests as if they were valid
        # for the request's schema (a scope with control characters into a path); every
        # operation is still sent what the other phases generate, positive and negative.
        "[output.sanitization]",  # the report shows the values (a business key is no secret here)
        "enabled = false",
        "[phases.stateful]",
        "enabled = false",
        "[generation]",
        f"max-examples = {MAX_EXAMPLES}",
        'mode = "all"',
        # The API refuses a NUL character and an unpaired surrogate in every string it reads
        # (PostgreSQL stores neither), in bodies, queries, paths and keys of any JSON payload:
        # a rule of the whole API (docs/api.md, "Errors"), which JSON Schema 3.0 cannot state
        # for the keys of free-form payloads. Generated text is therefore UTF-8 without NUL.
        "allow-x00 = false",
        'codec = "utf-8"',
        "[dictionaries]",
        *(f"{name} = {{ values = {json.dumps(values)} }}" for name, values in real.items()),
        "[parameters]",
        '"path.scope" = { dictionary = "scopes", probability = 0.5 }',
        '"path.definition_id" = { dictionary = "definitions", probability = 0.5 }',
        '"path.version" = { dictionary = "versions", probability = 0.5 }',
        "[[operations]]",
        'include-path-regex = "^/api/v1/runs/\\\\{id\\\\}/"',
        "[operations.parameters]",
        '"path.id" = { dictionary = "runs", probability = 0.5 }',
        "[[operations]]",
        'include-path-regex = "^/api/v1/tasks/\\\\{id\\\\}/"',
        "[operations.parameters]",
        '"path.id" = { dictionary = "tasks", probability = 0.5 }',
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(900)  # about 3 minutes alone; the 2-core CI machine is slower under load
def test_schemathesis_with_every_check_finds_no_failure_against_a_live_server(
    live_server: Any, fuzzed_site: dict[str, str], tmp_path: Path
) -> None:
    config_file = tmp_path / "schemathesis.toml"
    config_file.write_text(config(fuzzed_site))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEMATHESIS_")}
    # positive_data_acceptance with the stored definitions' own rules (see the hooks module)
    env.update(SCHEMATHESIS_HOOKS="tests.api.schemathesis_hooks", PYTHONPATH=str(REPO))
    run = subprocess.run(
        [
            str(SCHEMATHESIS),
            "--no-color",
            "--config-file",
            str(config_file),
            "run",
            f"{live_server.url}/api/schema/",
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
            "--header",
            f"Authorization: Token {fuzzed_site['token']}",
            "--workers",
            "1",
            "--request-timeout",
            "60",
            "--suppress-health-check",
            "all",
            "--report-dir",
            str(tmp_path / "reports"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
        check=False,
    )
    (tmp_path / "report.txt").write_text(run.stdout + run.stderr)
    assert run.returncode == 0, run.stdout + run.stderr
