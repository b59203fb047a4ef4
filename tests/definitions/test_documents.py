import json

import pytest

from tests.definitions.helpers import assert_value_free, pointers, types
from workflows.definitions.documents import parse, text_digest
from workflows.exceptions import DefinitionError

MINIMAL = "definitionId: a\nsteps: []\n"


def refuse(source, fmt="yaml", **kwargs) -> DefinitionError:
    with pytest.raises(DefinitionError) as caught:
        parse(source, fmt, **kwargs)
    assert caught.value.code == "DEFINITION_INVALID"
    return caught.value


def test_size_limit_is_checked_before_parsing():
    # not even YAML: the size refusal comes first
    error = refuse("{[" * 700, max_bytes=1024)
    assert types(error) == ["maxLength"]


def test_size_limit_counts_utf8_bytes_of_text():
    text = "definitionId: " + "é" * 600  # 1200 bytes, 614 characters
    assert types(refuse(text, max_bytes=1024)) == ["maxLength"]


def test_nul_character_is_refused_with_its_line():
    error = refuse("definitionId: a\nx: b\x00c\n")
    assert types(error) == ["encoding"]
    assert error.violations[0].line == 2


def test_unpaired_surrogate_is_refused():
    assert types(refuse("definitionId: a\ud800\n")) == ["encoding"]


def test_malformed_utf8_is_refused():
    assert types(refuse(b"definitionId: \xff\xfe\xfa\n")) == ["encoding"]


def test_json_escaped_nul_is_refused_in_values():
    error = refuse('{"definitionId": "a\\u0000b"}', "json")
    assert pointers(error) == ["/definitionId"]


def test_json_utf16_with_bom_is_read_and_the_bom_consumed():
    raw = "\ufeff" + json.dumps({"definitionId": "a"})
    document = parse(raw.encode("utf-16"), "json")
    assert document.data == {"definitionId": "a"}
    assert not document.text.startswith("\ufeff")


def test_yaml_aliases_are_refused():
    error = refuse("a: &x [1, 2]\nb: *x\n")
    assert types(error) == ["alias"]
    assert error.violations[0].line == 2


def test_explicit_tags_are_refused():
    assert types(refuse("a: !!binary aGVsbG8=\n")) == ["tag"]
    assert types(refuse("a: !custom x\n")) == ["tag"]


def test_duplicate_keys_are_refused_with_a_pointer():
    error = refuse("a: 1\nsteps:\n  - id: x\n    id: y\n")
    assert pointers(error) == ["/steps/0/id"]
    assert error.violations[0].line == 4
    assert types(refuse('{"a": 1, "a": 2}', "json")) == ["duplicate"]


def test_several_documents_are_refused():
    assert types(refuse("a: 1\n---\nb: 2\n")) == ["syntax"]


def test_nan_and_infinity_are_refused():
    assert types(refuse("a: .nan\n")) == ["type"]
    assert types(refuse('{"a": NaN}', "json")) == ["type"]


def test_yaml_12_core_schema_keeps_on_yes_and_dates_as_text():
    document = parse("on: [created]\nyes: no\nday: 2024-01-01\nn: 0o17\nf: 1.5\nt: true\nz: ~\n")
    assert document.data == {
        "on": ["created"],
        "yes": "no",
        "day": "2024-01-01",
        "n": 15,
        "f": 1.5,
        "t": True,
        "z": None,
    }


def test_the_stored_text_is_the_source_exactly():
    source = "# a comment\r\ndefinitionId:   a   # trailing\r\n\r\nsteps: []\r\n"
    document = parse(source)
    assert document.text == source
    assert document.digest == text_digest(source)


def test_lines_are_recorded_per_pointer():
    document = parse("definitionId: a\nsteps:\n  - id: one\n    type: complete\n  - id: two\n")
    assert document.line("/steps/1/id") == 5
    assert document.line("/steps/0/type") == 4
    assert document.line("/steps/0/nothing") == 3  # the nearest recorded parent


def test_json_documents_get_line_numbers_too():
    document = parse('{\n  "definitionId": "a",\n  "steps": [\n    {"id": "x"}\n  ]\n}', "json")
    assert document.line("/steps/0/id") == 4


def test_syntax_errors_do_not_repeat_the_source():
    error = refuse("definitionId: secret-value-123\n  bad: [unclosed\n")
    assert types(error) == ["syntax"]
    assert_value_free(error, "secret-value-123", "unclosed")


def test_a_top_level_list_is_refused():
    assert types(refuse("- a\n- b\n")) == ["type"]


def test_deep_nesting_is_refused_not_crashing():
    error = refuse("[" * 5000 + "]" * 5000, "json")
    assert types(error) == ["depth"]


def test_unknown_format_is_refused():
    assert types(refuse(MINIMAL, "toml")) == ["format"]


@pytest.fixture(params=["libyaml", "python"])
def yaml_loader(request, monkeypatch):
    """Both YAML front ends refuse the same things the same way: libyaml's scanner and parser
    (when PyYAML has it) and PyYAML's own, each under the strict composer."""
    from workflows.definitions import documents

    if request.param == "libyaml":
        if documents._LOADER is documents._StrictLoader:
            pytest.skip("PyYAML without libyaml")
    else:
        monkeypatch.setattr(documents, "_LOADER", documents._StrictLoader)
    return request.param


@pytest.mark.parametrize(
    ("text", "kind", "line"),
    [
        ("a: &x [1, 2]\nb: *x\n", "alias", 2),
        ("a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\n", "alias", 2),  # an alias bomb stops at once
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "depth", None),
        ("".join("  " * i + f"k{i}:\n" for i in range(300)) + "  " * 300 + "v\n", "depth", None),
        ("a: 1\nb: [1, 2\nc: 3\n", "syntax", 3),
        ("a:\n\t- 1\n", "syntax", 2),
    ],
    ids=["alias", "alias-bomb", "deep-flow", "deep-block", "unclosed", "tab"],
)
def test_each_yaml_front_end_refuses_alike(yaml_loader, text, kind, line):
    error = refuse(text)
    assert types(error) == [kind]
    assert error.violations[0].line == line


def test_each_yaml_front_end_reads_a_document_alike(yaml_loader):
    document = parse("definitionId: a\nsteps:\n  - {id: s, type: complete, note: 'x: y'}\n", "yaml")
    assert document.data == {"definitionId": "a", "steps": [{"id": "s", "type": "complete", "note": "x: y"}]}
