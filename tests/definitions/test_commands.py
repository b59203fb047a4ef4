"""The definition management commands wrap the public API."""

import pytest
from django.core.management import CommandError, call_command

from tests.definitions.conftest import simple
from workflows import definitions
from workflows.definitions.selection import select_for_start

pytestmark = pytest.mark.django_db


def test_load_publish_activate_from_a_file(tmp_path, capsys):
    path = tmp_path / "simple.yaml"
    path.write_text(simple())
    call_command("definition_load", str(path), "--scope", "tenant-a", "--author", "ann")
    call_command("definition_publish", "simple", "1", "--scope", "tenant-a")
    call_command("definition_activate", "simple", "1", "--scope", "tenant-a")
    out = capsys.readouterr().out
    assert "loaded tenant-a/simple v1 CANDIDATE" in out
    assert "published tenant-a/simple v1 AVAILABLE" in out
    assert select_for_start(start_scope="tenant-a", definition_id="simple").scope == "tenant-a"
    assert definitions.source_metadata(scope="tenant-a", definition_id="simple", version=1).source_author == "ann"


def test_load_with_activate_does_all_three(tmp_path):
    path = tmp_path / "simple.json"
    path.write_text(
        '{"definitionId": "j", "definitionVersion": 1, "contract": "j.v1", "initialStep": "d",'
        ' "steps": [{"id": "d", "type": "complete"}]}'
    )
    with pytest.raises(CommandError, match="UNKNOWN_TYPE_NAME"):
        call_command("definition_load", str(path), "--activate")
    path.write_text(path.read_text().replace('"j.v1"', '{"name": "j.v1"}'))
    call_command("definition_load", str(path), "--activate")
    assert select_for_start(start_scope="default", definition_id="j").version == 1


def test_lifecycle_subcommands(tmp_path, capsys):
    path = tmp_path / "simple.yaml"
    path.write_text(simple())
    call_command("definition_load", str(path), "--publish")
    call_command("definitions", "deprecate", "simple", "1")
    call_command("definitions", "reinstate", "simple", "1")
    call_command("definitions", "list", "--id", "simple")
    call_command("definition_activate", "simple", "1")
    call_command("definitions", "activations")
    with pytest.raises(CommandError, match="INVALID_TRANSITION"):
        call_command("definitions", "retire", "simple", "1")
    call_command("definitions", "deactivate-default", "simple")
    out = capsys.readouterr().out
    assert "deprecate: default/simple v1 DEPRECATED" in out
    assert "default/simple -> default v1" in out


def test_violations_are_listed_with_lines(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(simple() + "scope: x\n")
    with pytest.raises(CommandError) as caught:
        call_command("definition_load", str(path))
    assert "/scope (line 16)" in str(caught.value)
