"""A part of a page that refreshes itself in the background (an htmx poll) is marked
``data-poll``: the request dimming of app.css leaves it alone, so it does not blink every
second nor, dimmed, fail the contrast ratio (an axe check caught the Migrate progress card
mid-poll on a busy machine)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = [*ROOT.glob("workflows/templates/**/*.html"), *ROOT.glob("designer/templates/**/*.html"),
             *ROOT.glob("capture/templates/**/*.html")]  # fmt: skip
POLL = re.compile(r'hx-trigger="[^"]*(\bevery\b|\bload delay:)')
TAG = re.compile(r"<[a-z][^<>]*>", re.S)


def test_every_polled_part_is_marked_data_poll() -> None:
    polled = [
        (path.relative_to(ROOT), tag) for path in TEMPLATES for tag in TAG.findall(path.read_text()) if POLL.search(tag)
    ]
    assert len(polled) >= 3  # the Migrate progress, the dashboard's queue, the inbox
    assert [(str(path), tag) for path, tag in polled if " data-poll" not in tag] == []


def test_the_dimming_of_a_request_spares_polled_parts() -> None:
    css = (ROOT / "workflows/static/workflows/css/app.css").read_text()
    assert ".htmx-request:not([data-poll])" in css
    assert not re.search(r"(^|\n)\.htmx-request\s*\{", css)
