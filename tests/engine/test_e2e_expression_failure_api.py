"""Through a real worker: a failing expression's step, field and reason reach the API's run
(``failure``), its history (the FAILED entry's payload) and the run viewer, value-free
(issue 39; the in-process cases of every expression site: ``test_expression_failures.py``)."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.support.waiting import eventually
from workflows import operations
from workflows.models import Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECRET = "LEAK-SECRET-39w"
DOCUMENT = """
definitionId: x39-worker
definitionVersion: 1
contract: {name: x39-worker.v1}
initialStep: route
steps:
  - id: route
    type: decision
    routes:
      - {when: 'state.rush', to: done}
      - {when: 'state.total > 1000', to: done}
    default: done
  - id: done
    type: complete
"""


def test_the_failure_names_step_field_and_reason_in_the_api_history_and_viewer(
    celery_worker_process: Any, deploy: Any
) -> None:
    deploy(DOCUMENT)
    run_id = operations.start(definition_id="x39-worker", payload={"rush": False, "total": SECRET}).run_id
    eventually(
        lambda: Run.objects.get(pk=run_id).status == "FAILED",
        timeout=60,
        what="the run to fail at its second route",
        details=celery_worker_process.logs,
    )
    reason = "no matching overload (operand types differ)"
    message = f"DETERMINISTIC_FAILURE: routes.1.when of step route failed: {reason}"

    admin = get_user_model().objects.create_user("x39-root", password="x39-root", is_superuser=True, is_staff=True)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=admin).key}")
    run = api.get(f"/api/v1/runs/{run_id}/").json()
    assert (run["status"], run["failure"]) == ("FAILED", {"code": "DETERMINISTIC_FAILURE", "message": message})
    entries = api.get(f"/api/v1/runs/{run_id}/history/?page_size=200").json()["results"]
    [failed] = [e for e in entries if e["type"] == "FAILED"]
    assert (failed["step"], failed["payload"]) == (
        "route",
        {"step": "route", "field": "routes.1.when", "reason": reason},
    )
    assert SECRET not in repr([e for e in entries if e["type"] in ("FAILED", "COMMAND_FAILED", "WORKFLOW_FAILED")])

    viewer = Client()
    viewer.force_login(admin)
    page = viewer.get(f"/runs/{run_id}/")
    assert page.status_code == 200
    words = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.content.decode())).split())
    assert message in words and 'field: "routes.1.when"' in words and "Failed at route" in words
