"""Issue #25: the designer's regular expressions and its live check are bounded.

The story: minting a version with a regular expression froze the web process for 33 s on a
line of ``definitionVersion:`` followed by 20,000 spaces (and could rewrite a line that only
looked like the field); the live check (``/designer/check/``) took 11.7 s and answered 1.4 MB
for a maximum-size document, as often as the editor asked.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

from designer import services
from workflows import conf
from workflows.definitions.documents import parse

pytestmark = pytest.mark.django_db(transaction=True)

HEAD = """\
definitionId: big
definitionVersion: 1
contract: {name: big.v1}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: s0
steps:
"""


def _step(i: int, n: int) -> str:
    target = f"s{i + 1}" if i + 1 < n else "done"
    return (
        f"  - id: s{i}\n    type: decision\n    routes:\n"
        f"      - {{when: \"state.total > {i} && state.number.startsWith('x')\", to: {target}}}\n"
        f"    default: {target}\n"
    )


def maximum_document(limit: int = 262_144) -> str:
    """A document just under the size limit: ~1,700 decisions, each with a CEL expression."""
    n = (limit - len(HEAD) - 64) // len(_step(9999, 10**6))
    return HEAD + "".join(_step(i, n) for i in range(n)) + "  - id: done\n    type: complete\n"


def _client(username: str) -> Client:
    from django.contrib.auth.models import Permission

    user = get_user_model().objects.create_user(username, password="pw", is_staff=True)
    # the designer's pages ask the view-definitions capability (workflows.access)
    user.user_permissions.add(Permission.objects.get(codename="view_definitionversion"))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def checks_per_minute() -> Iterator[int]:
    with override_settings(WORKFLOWS={"DEFINITIONS": {"LIVE_CHECKS_PER_MINUTE": 3}}):
        conf.reload()
        yield 3
    conf.reload()


# --- minting ------------------------------------------------------------------------------------


def test_minting_a_version_line_padded_with_20000_spaces_is_immediate() -> None:
    text = HEAD.replace("definitionVersion: 1\n", "definitionVersion:" + " " * 20_000 + "1\n")
    text += "  - id: s0\n    type: complete\n"
    started = time.monotonic()
    minted = services.set_version(text, 7)
    assert time.monotonic() - started < 2
    assert parse(minted, "yaml").data["definitionVersion"] == 7
    assert minted.splitlines()[2:] == text.splitlines()[2:]


def test_minting_rewrites_the_field_not_a_line_that_looks_like_it() -> None:
    text = HEAD.replace(
        "definitionId: big\n", 'definitionId: big\ndescription: "a text that spans lines\ndefinitionVersion: 99"\n'
    )
    text += "  - id: s0\n    type: complete\n"
    assert parse(text, "yaml").data["description"] == "a text that spans lines definitionVersion: 99"
    minted = services.set_version(text, 5)
    data = parse(minted, "yaml").data
    assert data["definitionVersion"] == 5
    assert data["description"] == "a text that spans lines definitionVersion: 99"


# --- the live check -------------------------------------------------------------------------------


def test_the_live_check_of_a_maximum_size_document_is_bounded_in_time_and_size() -> None:
    client = _client("author")
    text = maximum_document()
    started = time.monotonic()
    answer = client.post("/designer/check/", {"text": text, "scope": "default"}, HTTP_HX_REQUEST="true")
    took = time.monotonic() - started
    assert answer.status_code == 200
    assert len(answer.content) < 20_000, len(answer.content)
    # LIVE_CHECK_SECONDS (2 s) of CEL parsing plus reading the YAML twice; slack for a shared machine
    assert took < 8, took
    page = answer.content.decode()
    assert "longer than 2 s to check" in page or "more than the designer draws" in page


def test_the_live_check_refuses_a_document_over_the_size_limit_unread() -> None:
    client = _client("author")
    text = maximum_document() + "#" * 300_000
    started = time.monotonic()
    answer = client.post("/designer/check/", {"text": text, "scope": "default"}, HTTP_HX_REQUEST="true")
    assert answer.status_code == 200 and time.monotonic() - started < 2
    assert "larger than 262144 bytes" in answer.content.decode()


def test_the_live_check_lists_at_most_50_problems() -> None:
    client = _client("author")
    text = HEAD + "".join(f"  - id: s{i}\n    type: nonsense\n" for i in range(300))
    answer = client.post("/designer/check/", {"text": text, "scope": "default"}, HTTP_HX_REQUEST="true")
    page = answer.content.decode()
    assert page.count('class="problem-message"') == services.LIVE_MAX_PROBLEMS + 1
    assert "more problems (fix these first)" in page


def test_the_live_check_is_rate_limited_per_user(checks_per_minute: int) -> None:
    author, other = _client("author"), _client("other")
    text = HEAD + "  - id: s0\n    type: complete\n"
    for _ in range(checks_per_minute):
        assert (
            author.post("/designer/check/", {"text": text, "scope": "default"}, HTTP_HX_REQUEST="true").status_code
            == 200
        )
    refused = author.post("/designer/check/", {"text": text, "scope": "default"}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "Too many checks" in refused.content.decode()
    # another user has an allowance of their own
    assert other.post("/designer/check/", {"text": text, "scope": "default"}, HTTP_HX_REQUEST="true").status_code == 200
