"""Debian Chromium through Playwright: never a downloaded browser."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium keeps dialling Google's hosts, which this
# machine's closed network refuses; --no-sandbox because CI runs as root.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
SKIP_REASON = (
    f"Debian Chromium is not installed at {CHROMIUM} (apt-get install -y chromium); the suite never downloads a browser"
)


def base_url(server: Any) -> str:
    """The URL of a live_server fixture, or a plain base URL string."""
    return str(getattr(server, "url", server)).rstrip("/")


def login(page: Page, live_server: Any, username: str, password: str, *, next: str = "/") -> None:
    """Sign in through the site's login form and land on ``next``.

    Fails (AssertionError) when the form answers with an error instead of signing in.
    """
    root = base_url(live_server)
    page.goto(f"{root}/accounts/login/?next={next}")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    with page.expect_navigation():
        page.click("button[type=submit]")
    cookies = {c["name"] for c in page.context.cookies(root)}
    assert "sessionid" in cookies, f"login as {username!r} failed: still at {page.url}"
