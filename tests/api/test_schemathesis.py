"""Property-based API testing with schemathesis against the OpenAPI schema at /api/schema/.

Every operation of the schema gets at most 50 generated requests (valid and invalid), sent to
the Django WSGI application as a superuser. No answer may be a 5xx, and every answer must
conform to the schema: a documented status, the documented content type, the documented body
shape and headers. Half of the path ids are swapped for a real run / definition, so the
requests also reach real objects (a PENDING run, an AVAILABLE and a CANDIDATE version).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api import documents

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
CONFIG = schemathesis.Config.from_dict({"generation": {"mode": "all"}, "phases": {"stateful": {"enabled": False}}})


@pytest.fixture
def seeded(db: None) -> dict[str, str]:
    """A superuser's token, a run of an AVAILABLE version, and a CANDIDATE version."""
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    from workflows import definitions, operations

    user = User.objects.create_superuser("fuzzer", password="fuzzer")
    token = Token.objects.create(user=user)
    definitions.load(scope="default", text=documents.purchase(1), format="yaml")
    definitions.publish(scope="default", definition_id="api-purchase", version=1)
    definitions.activate(scope="default", definition_id="api-purchase", version=1)
    definitions.load(scope="default", text=documents.purchase(2), format="yaml")
    run = operations.start(definition_id="api-purchase", payload={"number": "PO-1", "total": 1})
    return {"token": token.key, "run": run.run_id}


@pytest.fixture
def api_schema(seeded: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from django.core.cache import cache
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    from config.wsgi import application
    from workflows.api import views

    # No executor runs here: an ?await on a real run would wait its full time.
    monkeypatch.setattr(views, "WAIT_CAP_SECONDS", 0.05)
    # The test's transaction spans every request: Django must not close the connection at
    # the end of a request (its test client disconnects the same handlers).
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    cache.clear()  # throttling history of earlier tests
    try:
        yield schemathesis.openapi.from_wsgi("/api/schema/", application, config=CONFIG)
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def _operation_ids() -> list[str]:
    """The schema's operations, read at collection (generating the schema needs no database)."""
    from drf_spectacular.generators import SchemaGenerator

    spec = SchemaGenerator().get_schema(request=None, public=True)
    return sorted(op["operationId"] for item in spec["paths"].values() for op in item.values() if "operationId" in op)


def _point_at_real_objects(case: Any, seeded: dict[str, str]) -> None:
    """Deterministically (from the generated case) aim half of the requests at real objects."""
    if len(repr(case.body)) % 2:
        return
    if case.path == "/api/v1/runs/" and case.method == "POST" and isinstance(case.body, dict):
        case.body["definition_id"] = "api-purchase"
        if len(repr(case.body)) % 3 == 0:  # and a third of those valid, to start runs
            case.body.update(payload={"number": "PO-2", "total": 2}, version=None, scope=None)
    params = case.path_parameters or {}
    if "id" in params and case.path.startswith("/api/v1/runs/"):
        params["id"] = seeded["run"]
    if "definition_id" in params:
        params["scope"], params["definition_id"] = "default", "api-purchase"
        if "version" in params:
            params["version"] = 1 + len(repr(case.query)) % 2


# schemathesis' own pytest plugin does not run on pytest 9 (it reads Function._nodeid), so the
# cases are drawn with its Hypothesis strategies: one test per operation, valid and invalid data.
@pytest.mark.parametrize("operation_id", _operation_ids())
def test_every_answer_conforms_to_the_schema_and_none_is_a_server_error(
    operation_id: str, api_schema: Any, seeded: dict[str, str]
) -> None:
    operation = api_schema.find_operation_by_id(operation_id)
    cases = st.one_of(
        operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
        operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    )
    headers = {"Authorization": f"Token {seeded['token']}"}

    @given(cases)
    @settings(max_examples=50, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def check(case: Any) -> None:
        _point_at_real_objects(case, seeded)
        case.call_and_validate(headers=headers, checks=CHECKS)

    check()
