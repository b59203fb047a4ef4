"""Every problem code the API answers: problem+json, the stable code, the status, and not one
submitted value repeated anywhere in the body."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.db import OperationalError, connection, transaction
from django.test import override_settings
from rest_framework.test import APIClient
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle

from tests.api import documents
from tests.api.conftest import SENTINEL, assert_problem
from workflows import conf

START = "/api/v1/runs/"
SCHEMA = "/api/schema/"


@pytest.fixture
def workflows_settings() -> Iterator[Callable[..., None]]:
    """Override WORKFLOWS keys for one test (the typed settings object is cached)."""
    overrides: list[Any] = []

    def _set(section: str, **keys: Any) -> None:
        from django.conf import settings

        current = {name: dict(values) for name, values in settings.WORKFLOWS.items()}
        current.setdefault(section, {}).update(keys)
        override = override_settings(WORKFLOWS=current)
        override.enable()
        overrides.append(override)
        conf.reload()

    yield _set
    for override in reversed(overrides):
        override.disable()
    conf.reload()


def start(api: APIClient, payload: Any = None, **body: Any) -> Any:
    data = {"definition_id": "api-purchase", "payload": payload or {"number": "PO-1", "total": 10}, **body}
    return api.post(START, data, format="json")


# --- request shape and bounds -----------------------------------------------------------------


@pytest.mark.django_db
class TestInvalidPayload:
    def test_a_missing_field_is_named_by_pointer(self, admin_api: APIClient) -> None:
        body = assert_problem(
            admin_api.post(START, {"payload": {"x": SENTINEL}}, format="json"), 400, "INVALID_PAYLOAD"
        )
        assert {"pointer": "/definition_id", "type": "required", "message": "This field is required."} in body[
            "violations"
        ]

    def test_a_start_payload_that_fails_the_start_schema_lists_pointers(
        self, admin_api: APIClient, deployed: Callable[..., Any]
    ) -> None:
        deployed()
        body = assert_problem(start(admin_api, {"number": SENTINEL * 3, "total": 1}), 400, "INVALID_PAYLOAD")
        assert any(v["pointer"] == "/number" for v in body["violations"]), body

    def test_a_20000_deep_body_is_refused_before_parsing(self, admin_api: APIClient) -> None:
        deep = '{"definition_id": "api-purchase", "payload": ' + "[" * 20000 + '"' + SENTINEL + '"' + "]" * 20000 + "}"
        response = admin_api.post(START, deep, content_type="application/json")
        body = assert_problem(response, 400, "INVALID_PAYLOAD")
        assert body["violations"][0]["type"] == "depth"

    def test_a_payload_nested_64_deep_is_accepted_and_65_refused(
        self, admin_api: APIClient, deployed: Callable[..., Any]
    ) -> None:
        deployed()

        def nested(depth: int) -> Any:
            value: Any = {"number": "PO-9", "total": 1}
            for _ in range(depth - 1):
                value = {"number": "PO-9", "total": 1, "x": value}
            return value

        assert start(admin_api, nested(64)).status_code == 202
        assert_problem(start(admin_api, nested(65)), 400, "INVALID_PAYLOAD")

    def test_a_payload_over_max_payload_bytes_is_refused(
        self, admin_api: APIClient, deployed: Callable[..., Any]
    ) -> None:
        deployed()
        big = {"number": "PO-1", "total": 1, "blob": SENTINEL * 20000}  # ~360 KB, under the body cap
        body = assert_problem(start(admin_api, big), 400, "INVALID_PAYLOAD")
        assert body["violations"][0]["type"] == "size"

    def test_nul_characters_are_refused_with_the_member_named(self, admin_api: APIClient) -> None:
        body = assert_problem(start(admin_api, {"note": SENTINEL + "\x00"}), 400, "INVALID_PAYLOAD")
        assert body["violations"][0]["pointer"] == "/payload"

    def test_unpaired_surrogates_are_refused(self, admin_api: APIClient) -> None:
        raw = '{"definition_id": "api-purchase", "payload": {"note": "' + SENTINEL + '\\ud800"}}'
        assert_problem(admin_api.post(START, raw, content_type="application/json"), 400, "INVALID_PAYLOAD")

    def test_malformed_json_is_refused(self, admin_api: APIClient) -> None:
        response = admin_api.post(START, '{"definition_id": "' + SENTINEL, content_type="application/json")
        body = assert_problem(response, 400, "INVALID_PAYLOAD")
        assert body["violations"] == [{"pointer": "", "type": "parse", "message": "not valid JSON"}]

    def test_nan_is_not_json(self, admin_api: APIClient) -> None:
        raw = '{"definition_id": "api-purchase", "payload": {"total": NaN}}'
        assert_problem(admin_api.post(START, raw, content_type="application/json"), 400, "INVALID_PAYLOAD")

    def test_a_number_beyond_double_range_is_not_json(self, admin_api: APIClient) -> None:
        raw = '{"definition_id": "api-purchase", "payload": {"total": 1e400}}'
        assert_problem(admin_api.post(START, raw, content_type="application/json"), 400, "INVALID_PAYLOAD")

    def test_a_body_that_is_not_an_object_is_refused(self, admin_api: APIClient) -> None:
        assert_problem(
            admin_api.post(START, json.dumps([SENTINEL]), content_type="application/json"), 400, "INVALID_PAYLOAD"
        )

    def test_an_invalid_choice_does_not_repeat_the_value(self, admin_api: APIClient) -> None:
        response = admin_api.post(
            f"/api/v1/runs/{uuid.uuid4()}/migrate/", {"target_version": 2, "action": SENTINEL}, format="json"
        )
        body = assert_problem(response, 400, "INVALID_PAYLOAD")
        assert body["violations"] == [
            {"pointer": "/action", "type": "invalid_choice", "message": "not one of the allowed values"}
        ]

    def test_an_await_out_of_bounds_is_refused_before_recording(
        self, admin_api: APIClient, deployed: Callable[..., Any]
    ) -> None:
        deployed()
        response = admin_api.post(
            f"{START}?await=31",
            {"definition_id": "api-purchase", "payload": {"number": "PO-1", "total": 1}},
            format="json",
        )
        body = assert_problem(response, 400, "INVALID_PAYLOAD")
        assert body["violations"][0]["pointer"] == "/await"
        assert admin_api.get(START).json()["results"] == []

    def test_a_bad_list_filter_is_refused(self, admin_api: APIClient) -> None:
        response = admin_api.get(START, {"status": SENTINEL, "created_after": SENTINEL})
        body = assert_problem(response, 400, "INVALID_PAYLOAD")
        assert {v["pointer"] for v in body["violations"]} == {"/status/0", "/created_after"} or {
            v["pointer"] for v in body["violations"]
        } == {"/status", "/created_after"}

    def test_a_reassignment_needs_a_mode_and_a_value(self, admin_api: APIClient) -> None:
        response = admin_api.post(f"/api/v1/tasks/{uuid.uuid4()}/reassign/", {"value": SENTINEL}, format="json")
        # an unknown task is not found before the body is read
        assert_problem(response, 404, "TASK_NOT_FOUND")


@pytest.mark.django_db
class TestProtocol:
    def test_a_body_over_the_upload_limit_is_413_without_parsing(self, admin_api: APIClient) -> None:
        with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000):
            response = admin_api.post(START, {"definition_id": "x", "payload": SENTINEL * 100}, format="json")
        assert_problem(response, 413, "PAYLOAD_TOO_LARGE")

    def test_another_media_type_is_415(self, admin_api: APIClient) -> None:
        response = admin_api.post(START, SENTINEL, content_type="text/plain")
        assert_problem(response, 415, "UNSUPPORTED_MEDIA_TYPE")

    def test_an_accept_header_the_api_cannot_answer_is_406(self, admin_api: APIClient) -> None:
        assert_problem(admin_api.get(START, HTTP_ACCEPT="text/html"), 406, "NOT_ACCEPTABLE")

    def test_an_unknown_method_is_405(self, admin_api: APIClient) -> None:
        assert_problem(admin_api.delete(START), 405, "METHOD_NOT_ALLOWED")

    def test_an_unknown_path_under_the_api_is_a_problem_404(self, admin_api: APIClient) -> None:
        assert_problem(admin_api.get(f"/api/v1/{SENTINEL}/"), 404, "NOT_FOUND")
        assert_problem(admin_api.get("/api/v1/runs"), 404, "NOT_FOUND")
        assert_problem(admin_api.post("/api/v1/definitions/x/%0A/-1/publish/"), 404, "NOT_FOUND")

    def test_an_invalid_cursor_is_404(self, admin_api: APIClient) -> None:
        assert_problem(admin_api.get(START, {"cursor": SENTINEL}), 404, "NOT_FOUND")
        assert_problem(admin_api.get("/api/v1/definitions/", {"cursor": SENTINEL}), 404, "NOT_FOUND")

    def test_no_credentials_is_401_with_a_token_challenge(self) -> None:
        response = APIClient().get(START)
        assert_problem(response, 401, "NOT_AUTHENTICATED")
        assert response["WWW-Authenticate"] == "Token"

    def test_a_wrong_token_is_401(self) -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {SENTINEL}")
        assert_problem(client.get(START), 401, "AUTHENTICATION_FAILED")

    def test_too_many_requests_are_throttled_per_user(
        self, admin_api: APIClient, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        cache.clear()
        monkeypatch.setattr(UserRateThrottle, "rate", "2/minute", raising=False)
        assert admin_api.get(START).status_code == 200
        assert admin_api.get(START).status_code == 200
        response = admin_api.get(START)
        assert_problem(response, 429, "THROTTLED")
        assert int(response["Retry-After"]) >= 1
        cache.clear()

    def test_too_many_anonymous_requests_are_throttled_per_address(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """THROTTLE_ANON. DRF checks permissions before throttles, so an anonymous request to a
        v1 endpoint is a 401 first: the anonymous rate guards what anyone may read, the schema."""
        cache.clear()
        monkeypatch.setattr(AnonRateThrottle, "rate", "2/minute", raising=False)
        anonymous = APIClient()
        assert anonymous.get(SCHEMA).status_code == 200
        assert anonymous.get(SCHEMA).status_code == 200
        response = anonymous.get(SCHEMA, HTTP_ACCEPT="application/json")
        assert_problem(response, 429, "THROTTLED")
        assert int(response["Retry-After"]) >= 1
        other = APIClient(REMOTE_ADDR="192.0.2.7")
        assert other.get(SCHEMA).status_code == 200
        cache.clear()

    def test_a_throttled_schema_request_without_an_accept_header_is_json(self, monkeypatch: pytest.MonkeyPatch) -> None:
        cache.clear()
        monkeypatch.setattr(AnonRateThrottle, "rate", "1/minute", raising=False)
        anonymous = APIClient()
        assert anonymous.get(SCHEMA).status_code == 200
        try:
            assert_problem(anonymous.get(SCHEMA), 429, "THROTTLED")
        finally:
            cache.clear()

    def test_a_database_failure_is_503_without_the_drivers_text(
        self, admin_api: APIClient, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from workflows import queries

        def broken(**kwargs: Any) -> Any:
            raise OperationalError(f"connection lost while sending {SENTINEL}")

        monkeypatch.setattr(queries, "query", broken)
        response = admin_api.get(f"/api/v1/runs/{uuid.uuid4()}/")
        assert_problem(response, 503, "PERSISTENCE")
        assert response["Retry-After"] == "1"


# --- runs and tasks --------------------------------------------------------------------------


@pytest.mark.django_db
class TestRunProblems:
    def test_an_unknown_run_is_instance_not_found(self, admin_api: APIClient) -> None:
        assert_problem(admin_api.get(f"/api/v1/runs/{uuid.uuid4()}/"), 404, "INSTANCE_NOT_FOUND")
        assert_problem(admin_api.get(f"/api/v1/runs/{SENTINEL}/"), 404, "INSTANCE_NOT_FOUND")
        assert_problem(admin_api.get(f"/api/v1/runs/{uuid.uuid4()}/history/"), 404, "INSTANCE_NOT_FOUND")
        response = admin_api.post(f"/api/v1/runs/{SENTINEL}/signals/", {"name": "paid"}, format="json")
        assert_problem(response, 404, "INSTANCE_NOT_FOUND")
        assert_problem(admin_api.post(f"/api/v1/runs/{uuid.uuid4()}/cancel/"), 404, "INSTANCE_NOT_FOUND")

    def test_an_unknown_task_is_task_not_found(self, admin_api: APIClient) -> None:
        response = admin_api.post(f"/api/v1/tasks/{uuid.uuid4()}/complete/", {"decision": "approve"}, format="json")
        assert_problem(response, 404, "TASK_NOT_FOUND")
        assert_problem(admin_api.get(f"/api/v1/tasks/{SENTINEL}/"), 404, "TASK_NOT_FOUND")

    def test_a_key_reused_with_another_payload_is_idempotency_conflict(
        self, admin_api: APIClient, deployed: Callable[..., Any]
    ) -> None:
        deployed()
        body = {"definition_id": "api-purchase", "payload": {"number": "PO-1", "total": 10}}
        first = admin_api.post(START, body, format="json", HTTP_IDEMPOTENCY_KEY="order-1")
        assert first.status_code == 202
        again = admin_api.post(START, body, format="json", HTTP_IDEMPOTENCY_KEY="order-1")
        assert again.status_code == 202 and again.json() == first.json()
        other = admin_api.post(
            START,
            {"definition_id": "api-purchase", "payload": {"number": SENTINEL[:20], "total": 10}},
            format="json",
            HTTP_IDEMPOTENCY_KEY="order-1",
        )
        assert_problem(other, 409, "IDEMPOTENCY_CONFLICT")

    def test_a_blank_idempotency_key_is_invalid(self, admin_api: APIClient, deployed: Callable[..., Any]) -> None:
        deployed()
        response = admin_api.post(
            START,
            {"definition_id": "api-purchase", "payload": {"number": "P", "total": 1}},
            format="json",
            HTTP_IDEMPOTENCY_KEY="   ",
        )
        assert_problem(response, 400, "INVALID_PAYLOAD")

    def test_an_undeclared_signal_is_rejected(self, admin_api: APIClient, deployed: Callable[..., Any]) -> None:
        deployed()
        run = start(admin_api).json()["run"]
        response = admin_api.post(
            f"/api/v1/runs/{run}/signals/", {"name": "refunded", "payload": {"x": SENTINEL}}, format="json"
        )
        assert_problem(response, 409, "SIGNAL_REJECTED")

    def test_the_open_signal_limit_is_429(
        self, admin_api: APIClient, deployed: Callable[..., Any], workflows_settings: Callable[..., None]
    ) -> None:
        workflows_settings("RECORDING", MAX_OPEN_SIGNALS_PER_INSTANCE=1)
        deployed()
        run = start(admin_api).json()["run"]
        url = f"/api/v1/runs/{run}/signals/"
        assert admin_api.post(url, {"name": "paid", "payload": {"amount": 1}}, format="json").status_code == 202
        response = admin_api.post(url, {"name": "paid", "payload": {"amount": SENTINEL}}, format="json")
        assert_problem(response, 429, "SIGNAL_LIMIT")

    def test_cancelling_a_cancelled_run_is_signal_rejected(
        self, admin_api: APIClient, deployed: Callable[..., Any]
    ) -> None:
        deployed()
        run = start(admin_api).json()["run"]
        cancelled = admin_api.post(f"/api/v1/runs/{run}/cancel/", {"reason": "duplicate order"}, format="json")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"
        again = admin_api.post(f"/api/v1/runs/{run}/cancel/", {"reason": SENTINEL}, format="json")
        assert_problem(again, 409, "SIGNAL_REJECTED")
        assert_problem(admin_api.post(f"/api/v1/runs/{run}/retry/"), 409, "SIGNAL_REJECTED")

    def test_a_run_with_nothing_to_retry_is_signal_rejected(
        self, admin_api: APIClient, deployed: Callable[..., Any]
    ) -> None:
        deployed()
        run = start(admin_api).json()["run"]
        assert_problem(admin_api.post(f"/api/v1/runs/{run}/retry/"), 409, "SIGNAL_REJECTED")

    def test_a_migration_to_a_scope_not_admitted_is_refused(
        self, admin_api: APIClient, deployed: Callable[..., Any]
    ) -> None:
        deployed()
        run = start(admin_api).json()["run"]
        response = admin_api.post(
            f"/api/v1/runs/{run}/migrate/", {"target_version": 1, "target_scope": "tenant-zz"}, format="json"
        )
        assert_problem(response, 409, "MIGRATION_ILLEGAL_STATE")


@pytest.mark.django_db
class TestStartSelection:
    def test_no_activation_is_no_current_version(self, admin_api: APIClient, deployed: Callable[..., Any]) -> None:
        deployed(activate=False)
        assert_problem(start(admin_api), 422, "NO_CURRENT_VERSION")

    def test_an_unpublished_version_is_not_runnable(self, admin_api: APIClient) -> None:
        admin_api.post("/api/v1/definitions/", {"text": documents.purchase(1)}, format="json")
        assert_problem(start(admin_api, version=1), 422, "VERSION_NOT_RUNNABLE")

    def test_a_deprecated_version_is_refused(self, admin_api: APIClient, deployed: Callable[..., Any]) -> None:
        deployed(1)
        deployed(2)
        assert admin_api.post("/api/v1/definitions/default/api-purchase/1/deprecate/").status_code == 200
        assert_problem(start(admin_api, version=1), 409, "DEPRECATED")

    def test_a_retired_version_is_an_invalid_transition(
        self, admin_api: APIClient, deployed: Callable[..., Any]
    ) -> None:
        deployed(1)
        deployed(2)
        admin_api.post("/api/v1/definitions/default/api-purchase/1/deprecate/")
        assert admin_api.post("/api/v1/definitions/default/api-purchase/1/retire/").status_code == 200
        assert_problem(start(admin_api, version=1), 409, "INVALID_TRANSITION")


# --- definitions -----------------------------------------------------------------------------


@pytest.mark.django_db
class TestDefinitionProblems:
    def test_a_document_that_does_not_compile_lists_every_violation(self, admin_api: APIClient) -> None:
        text = f"definitionId: broken\ndefinitionVersion: 1\nsteps: []\nnote: {SENTINEL}\n"
        body = assert_problem(
            admin_api.post("/api/v1/definitions/", {"text": text}, format="json"), 422, "DEFINITION_INVALID"
        )
        assert body["violations"] and all(v["pointer"].startswith("/") for v in body["violations"])

    def test_an_unknown_type_name_is_named_by_code(self, admin_api: APIClient) -> None:
        text = documents.purchase(1).replace("stateSchema: {type: object}", "stateSchema: nowhere.State")
        assert_problem(admin_api.post("/api/v1/definitions/", {"text": text}, format="json"), 422, "UNKNOWN_TYPE_NAME")

    def test_the_same_version_with_other_text_is_version_exists(self, admin_api: APIClient) -> None:
        assert admin_api.post("/api/v1/definitions/", {"text": documents.purchase(1)}, format="json").status_code == 201
        changed = documents.purchase(1) + f"# {SENTINEL}\n"
        assert_problem(admin_api.post("/api/v1/definitions/", {"text": changed}, format="json"), 409, "VERSION_EXISTS")

    def test_another_contract_for_the_same_id_is_a_mismatch(self, admin_api: APIClient) -> None:
        admin_api.post("/api/v1/definitions/", {"text": documents.purchase(1)}, format="json")
        response = admin_api.post("/api/v1/definitions/", {"text": documents.OTHER_CONTRACT}, format="json")
        assert_problem(response, 409, "CONTRACT_MISMATCH")

    def test_an_unknown_version_is_definition_missing(self, admin_api: APIClient) -> None:
        assert_problem(admin_api.post("/api/v1/definitions/default/api-purchase/7/publish/"), 404, "DEFINITION_MISSING")

    def test_retiring_an_available_version_is_an_invalid_transition(
        self, admin_api: APIClient, deployed: Callable[..., Any]
    ) -> None:
        deployed(activate=False)
        assert_problem(admin_api.post("/api/v1/definitions/default/api-purchase/1/retire/"), 409, "INVALID_TRANSITION")

    def test_retiring_a_version_live_runs_are_pinned_to_is_refused(
        self, admin_api: APIClient, deployed: Callable[..., Any]
    ) -> None:
        deployed(1)
        assert start(admin_api).status_code == 202
        deployed(2)
        admin_api.post("/api/v1/definitions/default/api-purchase/1/deprecate/")
        assert_problem(admin_api.post("/api/v1/definitions/default/api-purchase/1/retire/"), 409, "PINNED_INSTANCES")

    def test_an_invalid_scope_combination_is_an_invalid_argument(
        self, admin_api: APIClient, deployed: Callable[..., Any]
    ) -> None:
        deployed(activate=False)
        response = admin_api.put(
            "/api/v1/activations/tenant-a/api-purchase/", {"version": 1, "target_scope": "tenant-b"}, format="json"
        )
        assert_problem(response, 400, "INVALID_ARGUMENT")

    def test_a_control_character_in_a_scope_is_an_invalid_argument(self, admin_api: APIClient) -> None:
        response = admin_api.post(
            "/api/v1/definitions/", {"scope": "a\x07b", "text": documents.purchase(1)}, format="json"
        )
        assert_problem(response, 400, "INVALID_ARGUMENT")

    def test_a_recording_only_node_refuses_loads(
        self, admin_api: APIClient, workflows_settings: Callable[..., None]
    ) -> None:
        workflows_settings("EXECUTOR", ENABLED=False)
        response = admin_api.post("/api/v1/definitions/", {"text": documents.purchase(1)}, format="json")
        assert_problem(response, 409, "NODE_ROLE")


# --- the execution lock ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_run_busy_beyond_the_lock_timeout_is_503_with_retry_after(
    admin_api: APIClient, deployed: Callable[..., Any], workflows_settings: Callable[..., None]
) -> None:
    workflows_settings("RECORDING", LOCK_TIMEOUT_MS=200)
    deployed()
    run = start(admin_api).json()["run"]
    locked, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute("SELECT 1 FROM workflow_runs WHERE id = %s FOR UPDATE", [run])
                locked.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_lock)
    holder.start()
    try:
        assert locked.wait(timeout=10)
        response = admin_api.post(
            f"/api/v1/runs/{run}/signals/", {"name": "paid", "payload": {"amount": SENTINEL}}, format="json"
        )
    finally:
        release.set()
        holder.join(timeout=30)
    assert not holder.is_alive()
    assert_problem(response, 503, "LOCK_TIMEOUT")
    assert response["Retry-After"] == "1"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/captures/?model=order%00" + SENTINEL,
        "/api/v1/runs/?business_key=" + SENTINEL + "%00",
        "/api/v1/tasks/?q%00=" + SENTINEL,
    ],
)
def test_a_nul_character_in_a_query_is_refused_not_sent_to_the_database(admin_api: APIClient, path: str) -> None:
    """PostgreSQL cannot take a NUL in text: a query string with one is bad input (400), never a
    database failure (the fuzzer found GET /captures/?model=...%00... answered 503)."""
    body = assert_problem(admin_api.get(path), 400, "INVALID_PAYLOAD")
    assert body["violations"][0]["type"] == "encoding"


# --- a stored document that no longer builds as it was stored -----------------------------------


def stored_document_tampered(**fields: Any) -> None:
    """What an upgrade that changed the compiler, or a hand-edited row, leaves behind."""
    from workflows.models import DefinitionVersion

    assert DefinitionVersion.objects.filter(definition_id="api-purchase", version=1).update(**fields) == 1


def lifecycle(api: APIClient, action: str) -> Any:
    return api.post(f"/api/v1/definitions/default/api-purchase/1/{action}/")


def stored_status(api: APIClient) -> str:
    [row] = api.get("/api/v1/definitions/", {"definition_id": "api-purchase"}).json()["results"]
    return str(row["status"])


@pytest.mark.django_db
class TestStoredDocumentProblems:
    # The submitted value of these calls is the document loaded before them: a sentinel in
    # it must not come back in the refusal.
    TEXT = documents.purchase(1) + f"# {SENTINEL}\n"

    def load(self, api: APIClient) -> None:
        assert api.post("/api/v1/definitions/", {"text": self.TEXT}, format="json").status_code == 201

    def test_publishing_a_document_that_compiles_to_another_plan_hash_is_drift(self, admin_api: APIClient) -> None:
        self.load(admin_api)
        stored_document_tampered(plan_hash="0" * 64)
        assert_problem(lifecycle(admin_api, "publish"), 422, "DRIFT")
        assert stored_status(admin_api) == "CANDIDATE"

    def test_publishing_a_document_no_loader_reads_is_loader_missing(self, admin_api: APIClient) -> None:
        self.load(admin_api)
        stored_document_tampered(format="toml")
        assert_problem(lifecycle(admin_api, "publish"), 422, "LOADER_MISSING")
        assert stored_status(admin_api) == "CANDIDATE"

    def test_reinstating_a_retired_document_that_drifted_is_refused(self, admin_api: APIClient) -> None:
        self.load(admin_api)
        assert lifecycle(admin_api, "publish").status_code == 200
        assert lifecycle(admin_api, "deprecate").status_code == 200
        assert lifecycle(admin_api, "retire").status_code == 200
        stored_document_tampered(plan_hash="f" * 64)
        assert_problem(lifecycle(admin_api, "reinstate"), 409, "DRIFT")
        assert stored_status(admin_api) == "RETIRED"

    def test_reinstating_a_retired_document_no_loader_reads_is_refused(self, admin_api: APIClient) -> None:
        self.load(admin_api)
        assert lifecycle(admin_api, "retire").status_code == 200
        stored_document_tampered(format="toml")
        assert_problem(lifecycle(admin_api, "reinstate"), 409, "LOADER_MISSING")
        assert stored_status(admin_api) == "RETIRED"


# --- an expression that fails where the API reports it ------------------------------------------

FAILING_TRIGGER = """
definitionId: api-po-audit
definitionVersion: 1
contract: {name: api-po-audit.v1, signals: {}}
stateSchema: {type: object}
trigger:
  model: demo.PurchaseOrder
  on: [created]
  when: "record.missing == 1"
initialStep: done
steps:
  - {id: done, type: complete}
"""


@pytest.mark.django_db
def test_a_trigger_expression_that_fails_shows_expression_failed_on_the_capture(
    admin_api: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EXPRESSION_FAILED is no answer of a request (expressions run in the executor and in
    capture dispatch, after the request): the API shows it on the capture it failed."""
    from decimal import Decimal

    from capture import dispatch, recording, triggers
    from demo.models import PurchaseOrder

    monkeypatch.setattr(recording, "send", lambda capture_id, countdown=None: None)  # dispatched below
    assert admin_api.post("/api/v1/definitions/", {"text": FAILING_TRIGGER}, format="json").status_code == 201
    assert admin_api.post("/api/v1/definitions/default/api-po-audit/1/publish/").status_code == 200
    activated = admin_api.put(
        "/api/v1/activations/default/api-po-audit/", {"version": 1, "target_scope": "default"}, format="json"
    )
    assert activated.status_code == 200
    triggers.refresh()
    PurchaseOrder.objects.create(number=SENTINEL, requester="requester", total=Decimal("10"))
    [listed] = admin_api.get("/api/v1/captures/").json()["results"]
    assert dispatch.dispatch(listed["id"]) == "FAILED"

    [failed] = admin_api.get("/api/v1/captures/", {"status": "FAILED"}).json()["results"]
    assert failed["id"] == listed["id"] and failed["runs_started"] == []
    assert failed["last_error"].startswith("trigger of api-po-audit v1: EXPRESSION_FAILED"), failed["last_error"]
    assert SENTINEL not in failed["last_error"]
