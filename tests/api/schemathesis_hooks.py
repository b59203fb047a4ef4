"""schemathesis hooks of tests/api/test_schemathesis_live.py (``SCHEMATHESIS_HOOKS``).

``positive_data_acceptance`` ("valid data is accepted") replaced by the same check with one
documented exception: a 400 that a *stored definition* decides, which no schema of the API can
state because it differs per definition and version. The exception is as narrow as the rule:

- only on the operations below, and only with the problem code named for each;
- never for a refusal of the request's shape (the serializer's "the request does not have the
  expected shape"), of its encoding, of a bound, or of a header: those the schema states, so
  schemathesis' verdict stands.

| operation | refused by the stored definition |
| --- | --- |
| start, signal (by id, by key, with start) | the payload against its start or signal schema (INVALID_PAYLOAD) |
| complete a task | the decision the task offers and its payload schema (INVALID_PAYLOAD) |
| create a bulk migration | the source and target revisions and the positions of the rows (INVALID_PAYLOAD) |
| activate | a target scope other than the path's scope or ``default`` (INVALID_ARGUMENT: body and path together) |

A reconcile reason must hold a printable character (Python's ``str.isprintable``: Unicode
categories, unassigned code points included, which a JSON Schema pattern cannot list); a
reason without one is refused as blank, and is not judged here either.

A case schemathesis labels positive although it does not conform to the schema is not valid
data, and is not judged here: a header, path or query value that does not match the parameter's
pattern (the coverage phase fills the parameters it is not varying with plain values such as
``If-Match: 0``), or a JSON body its request schema refuses (fuzzed strings holding control
characters a pattern excludes). The body is checked with ``jsonschema`` against the schema's
own request component.

And one rule of the whole API that JSON Schema cannot state for the members a request may add
(the bodies do not forbid additional properties; DRF ignores them): a number anywhere in a
body must lie within 1e-308 and 1e308 in magnitude (docs/api.md, "Numbers"), INVALID_PAYLOAD
with a violation of type ``number``.
"""

from __future__ import annotations

import json
import re
from typing import Any

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


def _decided_by_the_definition(response: Any, case: Any) -> bool:
    if response.status_code != 400:
        return False
    try:
        problem = json.loads(response.content)
    except ValueError:
        return False
    if problem.get("code") == "INVALID_PAYLOAD" and [v.get("type") for v in problem.get("violations", [])] == [
        "number"
    ]:
        return True
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
    values = {"header": case.headers or {}, "path": case.path_parameters or {}, "query": case.query or {}}
    for parameter in case.operation.definition.raw.get("parameters", []):
        pattern = parameter.get("schema", {}).get("pattern")
        given = values.get(parameter.get("in"), {})
        name = parameter.get("name")
        if pattern and name in given:
            items = given[name] if isinstance(given[name], list) else [given[name]]
            if any(re.search(pattern, str(item)) is None for item in items):
                return False
    body = case.operation.definition.raw.get("requestBody", {}).get("content", {}).get("application/json")
    if body and isinstance(case.body, dict | list):
        document = {**body["schema"], "components": case.operation.schema.raw_schema.get("components", {})}
        if not jsonschema.Draft202012Validator(document).is_valid(case.body):
            return False
    return True


@schemathesis.check
def positive_data_acceptance_but_definition_rules(ctx: Any, response: Any, case: Any) -> bool | None:
    try:
        return positive_data_acceptance(ctx, response, case)
    except Failure:
        if (
            _decided_by_the_definition(response, case)
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
