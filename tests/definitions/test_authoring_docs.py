"""Every YAML example of docs/authoring.md compiles and loads."""

import re
from pathlib import Path

import pytest

from workflows import definitions

DOC = Path(__file__).resolve().parents[2] / "docs" / "authoring.md"
BLOCKS = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.DOTALL)


def test_the_guide_has_examples():
    assert len(BLOCKS) >= 8


@pytest.mark.django_db
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_yaml_example_loads_and_publishes(index):
    text = BLOCKS[index]
    plan = definitions.compile_text(text)
    scope = f"docs-{index}"
    record = definitions.load(scope=scope, text=text, metadata={"source_type": "docs"})
    assert record.plan_hash == plan.plan_hash
    published = definitions.publish(scope=scope, definition_id=plan.definition_id, version=plan.version)
    assert published.status == "AVAILABLE"


def test_the_demo_packaged_document_is_described():
    assert "demo/workflows/purchase-approval.yaml" in DOC.read_text()
