"""Accessibility checks in Chromium with axe-core, vendored for the tests only.

The product does not ship axe-core: ``tests/support/static/axe.min.js`` (4.10.2, MPL-2.0, its
licence beside it) is injected into the page under test, never fetched from a CDN, so the check
runs on this machine's closed network and always with the same rules. Only serious and
critical violations fail a test; moderate and minor ones are advice, not a gate.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.sync_api import Page

AXE = Path(__file__).resolve().parent / "static" / "axe.min.js"
FAILING = ("serious", "critical")


def _describe(violation: dict[str, Any]) -> str:
    targets = ", ".join(" ".join(node["target"]) for node in violation["nodes"])
    return f"- {violation['id']} ({violation['impact']}): {violation['help']} — {targets}"


def assert_accessible(page: Page, what: str) -> None:
    """Run axe-core on ``page`` as it is now; fail listing every serious or critical violation."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    violations = page.evaluate("async () => (await axe.run(document)).violations")
    failing = [v for v in violations if v["impact"] in FAILING]
    assert not failing, f"{what} ({page.url}) has {len(failing)} serious/critical axe violations:\n" + "\n".join(
        _describe(v) for v in failing
    )
