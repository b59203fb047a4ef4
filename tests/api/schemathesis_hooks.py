"""schemathesis hooks of tests/api/test_schemathesis_live.py (``SCHEMATHESIS_HOOKS``).

``positive_data_acceptance`` ("valid data is accepted") replaced by the same check with the
documented exceptions of refusals that *stored data or the deployment* decide, which no
schema of the API can state because they differ per definition, per database or per site. The
exceptions are as narrow as the rules:

- only on the operations below, and only with the problem code (and violations) named for each;
- never for a refusal of the request's shape (the serializer's "the request does not have the
  expected shape"), of its encoding, of a bound, or of a header: those the schema states, so
  schemathesis' verdict stands.

- start, signal (by id, by key, with start): the stored definition, the payload against its
  start or signal schema (INVALID_PAYLOAD);
- complete a task: the stored definition, the decision the task offers and its payload schema
  (INVALID_PAYLOAD);
- create a bulk migration: the stored definitions, the source and target revisions and the
  positions of the rows (INVALID_PAYLOAD);
- activate: the stored versions, a target scope other than the path's scope or ``default``
  (INVALID_ARGUMENT: body and path together);
- create a bulk operation: the stored runs, ids that name no run (INVALID_PAYLOAD, every
  violation ``not_found`` under ``/run_ids``);
- create or change a webhook: the site's network policy, a literal address outside it
  (INVALID_PAYLOAD, every violation the ``/url`` one of a non-public address).

A reconcile reason must hold a printable character (Python's ``str.isprintable``: Unicode
categories, unassigned code points included, which a JSON Schema pattern cannot list); a
reason without one is refused as blank, and is not judged here either.

A case schemathesis labels positive although it does not conform to the schema is not valid
data, and is not judged here: a header, path or query value that does not match the parameter's
pattern (the coverage phase fills the parameters it is not varying with plain values such as
``If-Match: 0``), or a JSON body its request schema refuses. Path values are judged as the
server reads them, percent-decoded: schemathesis keeps them in their encoded form. The body is
checked with ``jsonschema`` (Python's regular expressions, as the server's) against the
request body's schema as schemathesis itself converts it (``nullable`` included).

And one rule of the whole API that JSON Schema cannot state for the members a request may add
(the bodies do not forbid additional properties; DRF ignores them): a number anywhere in a
body must lie within 1e-308 and 1e308 in magnitude (docs/api.md, "Numbers"), INVALID_PAYLOAD
with a violation of type ``number``.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote

import jsonschema
import schemathesis
from hypothesis import strategies as st
from schemathesis.core.failures import Failure
from schemathesis.specs.openapi.checks import positive_data_acceptance

DECIDED_BY_THE_DEFINITION = {
    "POST /api/v1/runs/": {"INVALID_PAYLOAD"},
    "POST /api/v1/runs/{id}/signals/": {"INVALID_PAYLOAD"},
    "POST /api/v1/runs/by-key/signals/": {"INVALID_PAYLOAD"},
    "POST /api/v1/runs/by-key/signal-with-start/": {"INVALID_PAYLOAD"},
    "POST /api/v1/tasks/{id}/complete/": {"INVALID_PAYLOAD"},
    "POST /api/v1/migrations/": {"INVALID_PAYLOAD"},
    "PUT /api/v1/activations/{scope}/{definition_id}/": {"INVALID_ARGUMENT"},
}
# what the API answers for refusals the schema states (shape, bounds, encoding, headers)
SCHEMA_STATED = (
    "the request does not have the expected shape",
    "NUL character",
    "printable characters",
    "If-Match",
    "the request body is",
)


def _run_that_does_not_exist(violation: dict[str, Any]) -> bool:
    return violation.get("type") == "not_found" and str(violation.get("pointer", "")).startswith("/run_ids/")


def _address_outside_the_network_policy(violation: dict[str, Any]) -> bool:
    return violation.get("pointer") == "/url" and "non-public address" in str(violation.get("message", ""))


# operation -> the violations stored runs or the site decide (every violation must be one)
DECIDED_BY_VIOLATIONS = {
    "POST /api/v1/bulk-operations/": _run_that_does_not_exist,
    "POST /api/v1/webhooks/": _address_outside_the_network_policy,
    "PATCH /api/v1/webhooks/{webhook_id}/": _address_outside_the_network_policy,
}


def _decided_by_stored_data(response: Any, case: Any) -> bool:
    if response.status_code != 400:
        return False
    try:
        problem = json.loads(response.content)
    except ValueError:
        return False
    violations = problem.get("violations", [])
    if problem.get("code") == "INVALID_PAYLOAD" and [v.get("type") for v in violations] == ["number"]:
        return True
    decided = DECIDED_BY_VIOLATIONS.get(case.operation.label)
    if decided is not None:
        return problem.get("code") == "INVALID_PAYLOAD" and bool(violations) and all(map(decided, violations))
    codes = DECIDED_BY_THE_DEFINITION.get(case.operation.label, set())
    detail = str(problem.get("detail", ""))
    return problem.get("code") in codes and not any(text in detail for text in SCHEMA_STATED)


def _reason_without_a_printable_character(case: Any) -> bool:
    body = case.body if isinstance(case.body, dict) else {}
    reason = body.get("reason")
    return (
        case.operation.label == "POST /api/v1/captures/{id}/reconcile/"
        and isinstance(reason, str)
        and not any(ch.isprintable() and not ch.isspace() for ch in reason)
    )


def _conforms(case: Any) -> bool:
    # percent-decoded, as the server reads a path (schemathesis keeps the encoded form)
    path = {name: unquote(str(value)) for name, value in (case.path_parameters or {}).items()}
    values = {"header": case.headers or {}, "path": path, "query": case.query or {}}
    for parameter in case.operation.definition.raw.get("parameters", []):
        pattern = parameter.get("schema", {}).get("pattern")
        given = values.get(parameter.get("in"), {})
        name = parameter.get("name")
        if pattern and name in given:
            items = given[name] if isinstance(given[name], list) else [given[name]]
            if any(re.search(pattern, str(item)) is None for item in items):
                return False
    for body in case.operation.body:
        if body.media_type == "application/json" == case.media_type and isinstance(case.body, dict | list):
            validator = jsonschema.Draft202012Validator(
                body.validation_schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
            )
            if not validator.is_valid(case.body):
                return False
    return True


@schemathesis.check
def positive_data_acceptance_but_stored_data_rules(ctx: Any, response: Any, case: Any) -> bool | None:
    try:
        return positive_data_acceptance(ctx, response, case)
    except Failure:
        if (
            _decided_by_stored_data(response, case)
            or _reason_without_a_printable_character(case)
            or not _conforms(case)
        ):
            return None
        raise


# ?state= of the runs list: the text of a JSON object (the schema's format "json-object")
_JSON_SCALAR = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=8)
schemathesis.openapi.format(
    "json-object",
    st.dictionaries(st.text(max_size=8), _JSON_SCALAR, max_size=3).map(lambda value: json.dumps(value)),
)
