"""Every YAML example of docs/authoring.md loads, publishes and activates, through the Python
API and through the management commands an operator runs."""

import re
from pathlib import Path

import pytest
from django.core.management import call_command

from workflows import definitions
from workflows.definitions.selection import select_for_start

DOC = Path(__file__).resolve().parents[2] / "docs" / "authoring.md"
BLOCKS = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.DOTALL)


def test_the_guide_has_examples():
    assert len(BLOCKS) >= 8


@pytest.mark.django_db
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_yaml_example_loads_publishes_and_activates(index):
    text = BLOCKS[index]
    plan = definitions.compile_text(text)
    scope = f"docs-{index}"
    record = definitions.load(scope=scope, text=text, metadata={"source_type": "docs"})
    assert (record.status, record.plan_hash) == ("CANDIDATE", plan.plan_hash)
    published = definitions.publish(scope=scope, definition_id=plan.definition_id, version=plan.version)
    assert published.status == "AVAILABLE"
    assert definitions.activations(scope=scope) == []  # publishing activates nothing

    activation = definitions.activate(scope=scope, definition_id=plan.definition_id, version=plan.version)

    assert (activation.scope, activation.definition_id, activation.target_scope, activation.version) == (
        scope,
        plan.definition_id,
        scope,
        plan.version,
    )
    assert definitions.activations(scope=scope) == [activation]
    chosen = select_for_start(start_scope=scope, definition_id=plan.definition_id)
    assert (chosen.scope, chosen.version, chosen.plan_hash) == (scope, plan.version, plan.plan_hash)
    [listed] = definitions.list(scope=scope, definition_id=plan.definition_id)
    assert (listed.status, listed.plan_hash) == ("AVAILABLE", plan.plan_hash)


@pytest.mark.django_db
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_yaml_example_goes_through_the_management_commands(index, tmp_path, capsys):
    text = BLOCKS[index]
    plan = definitions.compile_text(text)
    definition_id, version = plan.definition_id, str(plan.version)
    path = tmp_path / f"example-{index}.yaml"
    path.write_text(text)

    call_command("definition_load", str(path), "--author", "docs")
    call_command("definition_publish", definition_id, version)
    call_command("definition_activate", definition_id, version)
    call_command("definitions", "list", "--id", definition_id)
    call_command("definitions", "activations", "--scope", "default")

    out = capsys.readouterr().out.splitlines()
    short = plan.plan_hash[:12]
    assert out == [
        f"loaded default/{definition_id} v{version} CANDIDATE plan {short}",
        f"published default/{definition_id} v{version} AVAILABLE plan {short}",
        f"default/{definition_id} -> default v{version}",
        f"default/{definition_id} v{version} AVAILABLE plan {short}",  # the listing
        f"default/{definition_id} -> default v{version}",  # the activation records
    ]
    meta = definitions.source_metadata(scope="default", definition_id=definition_id, version=plan.version)
    assert (meta.source_type, meta.source_uri, meta.source_author) == ("file", path.name, "docs")
    assert select_for_start(start_scope="default", definition_id=definition_id).version == plan.version


def test_the_demo_packaged_document_is_described():
    assert "demo/workflows/purchase-approval.yaml" in DOC.read_text()
