"""Packaged documents: the YAML/JSON files in each installed app's ``workflows/`` folder.

:func:`record_packaged` (run by ``manage.py load_packaged_definitions`` from the start scripts
and CI) records them in the default scope and is idempotent:

- every file is parsed and compiled first; one that does not compile fails the whole step
  naming its file, definition id and version, and nothing is recorded;
- a version with no row is inserted and published; on that first publication the default
  scope's activation record moves to it when it is higher than the record (or there is none),
  unless the document sets ``activateOnDeploy: false``;
- a version whose row holds the same text (same digest) is left as it is (a row left
  CANDIDATE or with a stale claim by an interrupted start is published);
- a version whose row holds other text, even one differing by a comment, whitespace or line
  endings, fails with DRIFT naming both digests: bump the version of a changed document; a
  retired row of the version fails with INVALID_TRANSITION.

Stale PUBLISHING claims of any scope are reset first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from django.apps import apps

from workflows.definitions import lifecycle, store
from workflows.definitions.compiler import compile_document
from workflows.definitions.documents import Document, parse
from workflows.definitions.plan import Plan
from workflows.definitions.store import DEFAULT_SCOPE, named
from workflows.exceptions import DefinitionError, Drift, LifecycleError
from workflows.models import DefinitionStatus

log = logging.getLogger("workflows.definitions")
SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".json": "json"}


@dataclass(frozen=True)
class PackagedDocument:
    path: Path
    document: Document
    plan: Plan


@dataclass(frozen=True)
class Outcome:
    definition_id: str
    version: int
    action: str  # "recorded" | "unchanged" | "published"
    status: str
    path: str


def discover() -> list[Path]:
    """Every packaged document file, sorted by app then file name."""
    found: list[Path] = []
    for config in apps.get_app_configs():
        folder = Path(config.path) / "workflows"
        if folder.is_dir():
            found.extend(sorted(p for p in folder.iterdir() if p.suffix in SUFFIXES and p.is_file()))
    return found


def compile_files(paths: list[Path]) -> list[PackagedDocument]:
    out: list[PackagedDocument] = []
    for path in paths:
        try:
            document = parse(path.read_bytes(), SUFFIXES[path.suffix], max_bytes=_static_limit())
            plan = compile_document(document)
        except DefinitionError as error:
            raise type(error)(f"packaged document {path.name}: {error.message}", violations=error.violations) from None
        out.append(PackagedDocument(path, document, plan))
    seen: dict[tuple[str, int], Path] = {}
    for item in out:
        key = (item.plan.definition_id, item.plan.version)
        if key in seen:
            raise DefinitionError(
                f"packaged documents {seen[key].name} and {item.path.name} both define "
                f"version {item.plan.version} of {named(item.plan.definition_id)}"
            )
        seen[key] = item.path
    return out


def _static_limit() -> int:
    # the reference: static sources have no runtime raw-byte cap; the restore envelope applies
    from workflows import conf

    return conf.get().DEFINITIONS.MAX_DOCUMENT_SIZE_BYTES * 3 // 2


def record_packaged(paths: list[Path] | None = None) -> list[Outcome]:
    """Record and publish the packaged documents in the default scope (see module docstring)."""
    lifecycle.reset_stale_claims()
    documents = compile_files(discover() if paths is None else paths)
    documents.sort(key=lambda d: (d.plan.definition_id, d.plan.version))
    return [_record_one(item) for item in documents]


def _record_one(item: PackagedDocument) -> Outcome:
    plan, document = item.plan, item.document
    key = f"version {plan.version} of {named(plan.definition_id)}"
    row = store.find(DEFAULT_SCOPE, plan.definition_id, plan.version)
    if row is not None:
        if row.status == DefinitionStatus.RETIRED:
            raise LifecycleError(
                f"packaged document {item.path.name}: {key} is retired; remove the file or bump its version"
            )
        if row.text_digest != document.digest:
            raise Drift(
                f"packaged document {item.path.name}: {key} is stored with text digest {row.text_digest}, "
                f"the packaged text has digest {document.digest}; bump the version of a changed document"
            )
        if row.plan_hash != plan.plan_hash:
            raise Drift(
                f"packaged document {item.path.name}: {key} is stored with plan hash {row.plan_hash}, "
                f"it compiles to {plan.plan_hash}"
            )
        if row.status in (DefinitionStatus.CANDIDATE, DefinitionStatus.PUBLISHING):
            published = lifecycle._publish(DEFAULT_SCOPE, plan.definition_id, plan.version, activate_default=True)
            return Outcome(plan.definition_id, plan.version, "published", published.status, item.path.name)
        return Outcome(plan.definition_id, plan.version, "unchanged", row.status, item.path.name)
    meta = {"source_type": "packaged", "source_uri": _source_uri(item.path)}
    lifecycle._insert(DEFAULT_SCOPE, document, plan, meta, packaged=True)
    published = lifecycle._publish(DEFAULT_SCOPE, plan.definition_id, plan.version, activate_default=True)
    log.info("recorded packaged definition %s v%s", plan.definition_id, plan.version)
    return Outcome(plan.definition_id, plan.version, "recorded", published.status, item.path.name)


def _source_uri(path: Path) -> str:
    for config in apps.get_app_configs():
        base = Path(config.path)
        if path.is_relative_to(base):
            return f"app://{config.label}/{path.relative_to(base).as_posix()}"[:2048]
    return path.name[:2048]
