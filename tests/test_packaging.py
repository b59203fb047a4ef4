"""The distribution as an outsider installs it (issue #39): its name is ours, its version is
written once, and its declared dependencies bring everything the three apps import.

Issue #39's story: ``pip install switchyard`` installed someone else's project (the name on the
package index is not ours), and in a clean virtualenv the worker died at start with
``ModuleNotFoundError: No module named 'packaging'`` from ``kombu.transport.redis`` (kombu
declares it only under its ``redis`` extra) — the suite's own virtualenv held it, so nothing here
noticed.

How the dependency check works, and why not a real clean virtualenv: installing the wheel with
its dependencies from the package index takes minutes and needs the network. Instead the
declared requirements are resolved transitively (extras and markers included) against the
metadata of the distributions installed in the suite's virtualenv, and a subprocess imports
every module of workflows, capture and designer (Django set up with the apps a host lists)
with an import hook that makes every other installed package absent, as it is in a clean
virtualenv: the suite's tooling (pytest, playwright, ...) and whatever no declared dependency
brings raise ``ModuleNotFoundError``. Optional imports of other packages (DRF tries
``requests``, ``jinja2``, ...) then take their fallback, as they would for a host. A static pass
adds the imports the runtime pass cannot reach (inside functions): every package our code
imports by name must be a *direct* requirement, not one that happens to come with another.
Both take a few seconds.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
APPS = ("workflows", "capture", "designer")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Made at start-up by the interpreter, setuptools' .pth hook or Cython's runtime: no distribution.
NOT_PACKAGES = re.compile(r"^(__main__|__mp_main__|_distutils_hack|_sysconfigdata_.*|cython_runtime|_cython_.*)$")

# A clean virtualenv simulated: top-level packages outside ALLOWED are absent. Then Django set up
# as a host has it (docs/install.md's INSTALLED_APPS), and every module of the apps imported.
IMPORT_EVERYTHING = """
import importlib, importlib.abc, json, os, pkgutil, sys

ALLOWED = set(json.loads(os.environ["ALLOWED_MODULES"]))
blocked = set()

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in ALLOWED or top in sys.stdlib_module_names or top.startswith("_"):
            return None
        blocked.add(top)
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Absent())

import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=[
        "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
        "django.contrib.sessions", "django.contrib.messages", "django.contrib.staticfiles",
        "rest_framework", "rest_framework.authtoken", "drf_spectacular", "drf_spectacular_sidecar",
        "django_htmx", "workflows", "capture", "designer",
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "never-connected"}},
    ROOT_URLCONF="workflows.api.urls", USE_TZ=True, SECRET_KEY="import-check-" * 5,
)
django.setup()
failed, imported = {}, 0
for app in ("workflows", "capture", "designer"):
    for info in pkgutil.walk_packages(importlib.import_module(app).__path__, app + "."):
        try:
            importlib.import_module(info.name)
            imported += 1
        except Exception as error:
            failed[info.name] = type(error).__name__ + ": " + str(error)
print(json.dumps({"failed": failed, "imported": imported, "absent": sorted(blocked)}))
"""


def requirement_closure(requirements: list[str]) -> dict[str, str]:
    """Every distribution the requirements bring (canonical name -> the declared requirement
    that brought it), following each installed distribution's Requires-Dist with its extras."""
    brought: dict[str, str] = {}
    pending = [(Requirement(text), text) for text in requirements]
    seen: set[tuple[str, frozenset[str]]] = set()
    while pending:
        requirement, origin = pending.pop()
        name = canonicalize_name(requirement.name)
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        brought.setdefault(name, origin)
        try:
            requires = importlib.metadata.distribution(requirement.name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue  # a requirement whose marker holds but is not installed: the import pass reports it
        for text in requires:
            child = Requirement(text)
            extras = requirement.extras or {""}
            if child.marker is None or any(
                child.marker.evaluate({**default_environment(), "extra": extra}) for extra in extras
            ):
                pending.append((child, origin))
    return brought


def distributions_of(module: str) -> set[str]:
    return {canonicalize_name(d) for d in importlib.metadata.packages_distributions().get(module, [])}


def modules_of(distributions: set[str]) -> set[str]:
    """The top-level modules the installed distributions provide."""
    return {
        module
        for module, owners in importlib.metadata.packages_distributions().items()
        if {canonicalize_name(owner) for owner in owners} & distributions
    }


def static_imports() -> dict[str, str]:
    """Top-level packages named by an import statement anywhere in the apps (lazy imports
    included, ``if TYPE_CHECKING:`` blocks excluded) -> one file naming it."""
    found: dict[str, str] = {}
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            skipped = {
                id(node)
                for block in ast.walk(tree)
                if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                for stmt in block.body
                for node in ast.walk(stmt)
            }
            for node in ast.walk(tree):
                if id(node) in skipped:
                    continue
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], path.relative_to(ROOT).as_posix())
    return found


def test_the_distribution_is_django_switchyard_with_its_version_written_once() -> None:
    import workflows

    project = PYPROJECT["project"]
    assert project["name"] == "django-switchyard"  # `switchyard` on the package index is someone else's
    assert "version" not in project and project["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "workflows.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", workflows.__version__)


def test_every_module_of_the_apps_imports_with_only_the_declared_dependencies() -> None:
    brought = requirement_closure(PYPROJECT["project"]["dependencies"])
    allowed = modules_of(set(brought)) | set(APPS)
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERYTHING],
        cwd=ROOT,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(ROOT),
            "LANG": "C.UTF-8",
            "ALLOWED_MODULES": json.dumps(sorted(allowed)),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["failed"] == {}, f"modules that fail without an undeclared package: {report['failed']}"
    assert report["imported"] > 100, report  # every module of the three apps, not an empty walk
    # kombu's Redis transport (workflows.broker) needs packaging: celery[redis] brings it
    assert "packaging" in allowed and "packaging" not in report["absent"], report["absent"]


def test_every_package_the_apps_import_by_name_is_a_direct_dependency() -> None:
    direct = {canonicalize_name(Requirement(text).name) for text in PYPROJECT["project"]["dependencies"]}
    missing = {}
    for top, where in static_imports().items():
        if top in sys.stdlib_module_names or top in APPS:
            continue
        if not distributions_of(top) & direct:
            missing[top] = where
    assert missing == {}, f"imported by name but not declared in pyproject.toml: {missing}"


def test_the_sdist_manifest_prunes_every_top_level_folder_but_the_apps() -> None:
    """Newer setuptools put ``tests/test*.py`` into every sdist by default (issue #39: eight stray
    test files), whatever the package settings say; the suite builds with an older setuptools that
    does not, so the manifest itself is checked: each folder of the repository other than the
    three apps is pruned, and so is a new one added later."""
    tracked = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    folders = {name.split("/")[0] for name in tracked if "/" in name} - set(APPS)
    manifest = (ROOT / "MANIFEST.in").read_text().splitlines()
    pruned = {line.split()[1] for line in manifest if line.startswith("prune ")}
    assert folders - pruned == set(), f"MANIFEST.in does not prune {sorted(folders - pruned)}"
    files = {name for name in tracked if "/" not in name and name.endswith(".py")}
    excluded = {word for line in manifest if line.startswith("exclude ") for word in line.split()[1:]}
    assert files - excluded == set(), f"MANIFEST.in does not exclude {sorted(files - excluded)}"
