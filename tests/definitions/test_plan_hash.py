"""The plan hash covers the compiled structure, not the text."""

import json

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workflows.definitions import compile_text

BASE = {
    "definitionId": "hash-me",
    "definitionVersion": 1,
    "contract": {"name": "hash.v1", "signals": {"go": {"type": "object"}}},
    "stateSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "initialState": '{"n": payload.n}',
    "initialStep": "route",
    "steps": [
        {"id": "route", "type": "decision", "routes": [{"when": "state.n > 10", "to": "wait"}], "default": "done"},
        {
            "id": "wait",
            "type": "wait-signal",
            "signal": "go",
            "set": '{"went": true}',
            "timeout": {"after": "PT15M", "next": "done"},
            "next": "done",
        },
        {"id": "done", "type": "complete"},
    ],
}
BASE_HASH = compile_text(json.dumps(BASE), "json").plan_hash


def shuffled(value, rnd):
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    return value


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    rnd=st.randoms(use_true_random=False),
    indent=st.integers(min_value=2, max_value=6),
    comment=st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=40),
)
def test_key_order_whitespace_and_comments_do_not_change_the_hash(rnd, indent, comment):
    data = shuffled(BASE, rnd)
    text = f"# {comment}\n" + yaml.safe_dump(data, sort_keys=False, indent=indent, width=1000) + f"\n# {comment}\n"
    assert compile_text(text).plan_hash == BASE_HASH
    assert compile_text(json.dumps(data, indent=indent), "json").plan_hash == BASE_HASH


def test_spelled_out_defaults_and_the_deploy_header_do_not_change_the_hash():
    explicit = json.loads(json.dumps(BASE))
    explicit["steps"][1]["timeout"]["after"] = "PT900S"  # the same duration
    assert compile_text(json.dumps(explicit), "json").plan_hash == BASE_HASH
    explicit["activateOnDeploy"] = False  # a deployment header, not behaviour
    assert compile_text(json.dumps(explicit), "json").plan_hash == BASE_HASH


def test_java_style_aliases_hash_like_their_canonical_names(registry):
    registry.type("hash.State", {"type": "object"})
    named = json.loads(json.dumps(BASE))
    named["stateSchema"] = "hash.State"
    aliased = json.loads(json.dumps(BASE))
    del aliased["stateSchema"]
    aliased["stateType"] = "hash.State"
    assert compile_text(json.dumps(named), "json").plan_hash == compile_text(json.dumps(aliased), "json").plan_hash


BEHAVIOUR_CHANGES = [
    ("/initialState", lambda d: d.update(initialState='{"n": payload.n + 1}')),
    ("route when", lambda d: d["steps"][0]["routes"][0].update(when="state.n > 11")),
    ("route default", lambda d: d["steps"][0].update(default="wait")),
    ("timeout", lambda d: d["steps"][1]["timeout"].update(after="PT16M")),
    ("set", lambda d: d["steps"][1].update(set='{"went": false}')),
    ("schema", lambda d: d["stateSchema"]["properties"]["n"].update(type="number")),
    ("contract signal schema", lambda d: d["contract"]["signals"].update(go={"type": "object", "required": ["x"]})),
    ("version", lambda d: d.update(definitionVersion=2)),
    ("id", lambda d: d.update(definitionId="hash-me-too")),
]


@settings(max_examples=len(BEHAVIOUR_CHANGES) * 3, deadline=None)
@given(change=st.sampled_from(BEHAVIOUR_CHANGES), rnd=st.randoms(use_true_random=False))
def test_any_behavioural_change_changes_the_hash(change, rnd):
    data = json.loads(json.dumps(BASE))
    change[1](data)
    assert compile_text(json.dumps(shuffled(data, rnd)), "json").plan_hash != BASE_HASH, change[0]
