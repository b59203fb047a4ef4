import time

import pytest

from workflows import conf
from workflows.definitions import schemas
from workflows.definitions.schemas import check_schema, validate, validator_cache

ORDER = {
    "type": "object",
    "required": ["total", "code"],
    "additionalProperties": False,
    "properties": {
        "total": {"type": "number", "minimum": 0},
        "code": {"type": "string", "maxLength": 4, "pattern": "^[A-Z]+$"},
        "lines": {"type": "array", "items": {"type": "integer"}},
    },
}


def test_violations_are_pointer_and_keyword_only():
    found = validate(ORDER, {"total": -5, "code": "abcdefg", "lines": [1, "zz-secret"], "extra-secret": 1})
    assert [(v.pointer, v.type) for v in found] == [
        ("", "additionalProperties"),
        ("/code", "maxLength"),
        ("/code", "pattern"),
        ("/lines/1", "type"),
        ("/total", "minimum"),
    ]
    for v in found:
        for value in ("-5", "abcdefg", "zz-secret", "extra-secret"):
            assert value not in v.message


def test_a_violation_under_a_key_the_caller_chose_points_at_its_object():
    entry = {"type": "object", "properties": {"amount": {"type": "integer"}}}
    prices = {"type": "object", "additionalProperties": entry}
    found = validate(prices, {"sku 1 <S3NT1NEL>": {"amount": "x"}, "sku-2": {"amount": "y"}})
    assert [(v.pointer, v.type) for v in found] == [("", "type"), ("/sku-2/amount", "type")]
    assert all("S3NT1NEL" not in v.pointer + v.message for v in found)
    entry["required"] = ["amount"]
    found = validate(prices, {"sku 1 <S3NT1NEL>": {}, "sku-2": {}})
    assert [(v.pointer, v.type) for v in found] == [("", "required"), ("/sku-2/amount", "required")]


def test_required_names_the_missing_property_pointer():
    found = validate(ORDER, {})
    assert [(v.pointer, v.type) for v in found] == [("/code", "required"), ("/total", "required")]


def test_valid_instance_has_no_violations():
    assert validate(ORDER, {"total": 1, "code": "AB"}) == []
    assert validate(None, {"anything": 1}) == []


@pytest.mark.parametrize("ref", ["https://example.com/s.json", "other.json#/x", "file:///etc/passwd"])
def test_non_local_refs_are_refused_before_compiling(ref):
    schema = {"type": "object", "properties": {"a": {"allOf": [{"$ref": ref}]}}}
    assert [(v.pointer, v.type) for v in check_schema(schema)] == [("/properties/a/allOf/0/$ref", "$ref")]
    before = len(validator_cache)
    assert [v.type for v in validate(schema, {"a": 1})] == ["$ref"]
    assert len(validator_cache) == before


def test_local_refs_work():
    schema = {"$defs": {"pos": {"type": "integer", "minimum": 1}}, "properties": {"n": {"$ref": "#/$defs/pos"}}}
    assert check_schema(schema) == []
    assert [(v.pointer, v.type) for v in validate(schema, {"n": 0})] == [("/n", "minimum")]


def test_catastrophic_patterns_run_in_linear_time():
    schema = {"type": "string", "pattern": "^(a+)+$"}
    started = time.monotonic()
    assert [v.type for v in validate(schema, "a" * 5000 + "b")] == ["pattern"]
    assert time.monotonic() - started < 10  # backtracking would never finish; RE2 takes microseconds


def test_patterns_re2_cannot_run_are_schema_violations():
    assert [v.type for v in check_schema({"pattern": "(a)\\1"})] == ["pattern"]
    assert [v.type for v in check_schema({"patternProperties": {"(?<=x)y": {}}})] == ["pattern"]


def test_invalid_schemas_are_reported():
    assert [v.type for v in check_schema({"type": "no-such-type"})] == ["schema"]
    assert [v.type for v in check_schema("not a schema")] == ["type"]


def test_cache_is_keyed_by_canonical_json_and_bounded(settings):
    validator_cache.clear()
    validate({"type": "object", "minProperties": 1}, {})
    validate({"minProperties": 1.0, "type": "object"}, {})  # same canonical schema
    assert len(validator_cache) == 1
    settings.WORKFLOWS = {"RECORDING": {"SCHEMA_CACHE_MAX_ENTRIES": 2}}
    conf.reload()
    try:
        for n in range(5):
            validate({"maxLength": n + 1}, "x")
        assert len(validator_cache) == 2
    finally:
        del settings.WORKFLOWS
        conf.reload()
        validator_cache.clear()


def test_canonical_json_ignores_key_order_and_integral_floats():
    assert schemas.canonical_json({"b": 1.0, "a": [2.0, 2.5]}) == '{"a":[2,2.5],"b":1}'
