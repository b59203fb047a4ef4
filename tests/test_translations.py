"""The shipped translations are complete and compiled.

Each app carries its own catalogs (``<app>/locale/<language>/LC_MESSAGES/django.po`` and the
compiled ``.mo`` next to it; the project's templates use ``config/locale``). These tests read
the ``.po`` files with a small parser of their own and the ``.mo`` files with the standard
library's ``gettext``, so neither ``msgfmt`` nor ``polib`` is needed to run them:

- every message has a translation, none is marked fuzzy, and a translation keeps exactly the
  placeholders of its source (``%(name)s``; a lost or misspelt one would fail at render time);
- every ``.mo`` holds exactly what its ``.po`` says (someone edited a ``.po`` and forgot
  ``compilemessages``: the site would keep showing the old text);
- the literal texts of ``{% translate "…" %}`` in the apps' templates are in their app's catalog
  (a string marked after the last ``makemessages`` would stay English).
"""

from __future__ import annotations

import ast
import gettext
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the catalogs this repository ships for the apps it owns (designer has its own, kept by it)
CATALOG_HOMES = ("workflows", "capture", "accounts", "config")
LANGUAGES = ("de",)
PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]|%[sd]")


@dataclass
class Entry:
    msgid: str = ""
    msgid_plural: str | None = None
    msgctxt: str | None = None
    msgstr: dict[int, str] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    obsolete: bool = False


def read_po(path: Path) -> list[Entry]:
    """The entries of a .po file (header included, as the entry with an empty msgid)."""
    entries: list[Entry] = []
    current: Entry | None = None
    last: tuple[str, int] | None = None

    def finish() -> None:
        nonlocal current, last
        if current is not None and current.msgstr:
            entries.append(current)
        current, last = None, None

    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line:
            finish()
            continue
        if line.startswith("#~"):
            if current is None or current.msgstr:
                finish()
                current = Entry()
            current.obsolete = True
            continue
        if line.startswith("#,"):
            if current is not None and current.msgstr:
                finish()
            current = current or Entry()
            current.flags |= {f.strip() for f in line[2:].split(",")}
            continue
        if line.startswith("#"):
            if current is not None and current.msgstr:
                finish()
            continue
        keyword, _, rest = line.partition(" ")
        if keyword.startswith('"'):
            assert current is not None and last is not None, f"{path}: continuation without a keyword: {raw!r}"
            text = ast.literal_eval(line)
            kind, index = last
            if kind == "msgstr":
                current.msgstr[index] += text
            else:
                setattr(current, kind, (getattr(current, kind) or "") + text)
            continue
        text = ast.literal_eval(rest)
        if keyword in ("msgid", "msgctxt") and current is not None and current.msgstr:
            finish()
        current = current or Entry()
        if keyword.startswith("msgstr"):
            index = int(keyword[7:-1]) if keyword != "msgstr" else 0
            current.msgstr[index] = text
            last = ("msgstr", index)
        else:
            setattr(current, keyword, text)
            last = (keyword, 0)
    finish()
    return entries


def catalogs() -> list[Path]:
    found = [
        ROOT / home / "locale" / language / "LC_MESSAGES" / "django.po"
        for home in CATALOG_HOMES
        for language in LANGUAGES
    ]
    missing = [str(p.relative_to(ROOT)) for p in found if not p.is_file()]
    assert not missing, f"catalogs missing: {missing}"
    return found


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("po", catalogs(), ids=_id)
def test_every_message_is_translated_and_none_is_fuzzy(po: Path) -> None:
    entries = [e for e in read_po(po) if e.msgid and not e.obsolete]
    assert entries, f"{_id(po)} holds no messages"
    forms = 2  # German: one and other (the header's Plural-Forms, checked below)
    untranslated = [
        e.msgid for e in entries if not all(e.msgstr.values()) or len(e.msgstr) < (forms if e.msgid_plural else 1)
    ]
    fuzzy = [e.msgid for e in entries if "fuzzy" in e.flags]
    assert not untranslated, f"{_id(po)}: {len(untranslated)} untranslated, e.g. {untranslated[:5]}"
    assert not fuzzy, f"{_id(po)}: fuzzy entries: {fuzzy[:5]}"
    header = next(e for e in read_po(po) if e.msgid == "")
    assert "fuzzy" not in header.flags, f"{_id(po)}: the header is fuzzy, so gettext ignores its Plural-Forms"
    assert "Plural-Forms: nplurals=2; plural=(n != 1);" in header.msgstr[0]


@pytest.mark.parametrize("po", catalogs(), ids=_id)
def test_translations_keep_the_placeholders_of_their_source(po: Path) -> None:
    wrong = []
    for e in read_po(po):
        if not e.msgid or e.obsolete:
            continue
        sources = {e.msgid} | ({e.msgid_plural} if e.msgid_plural else set())
        expected = set().union(*(set(PLACEHOLDER.findall(s)) for s in sources))
        for text in e.msgstr.values():
            if set(PLACEHOLDER.findall(text)) != expected:
                wrong.append((e.msgid, text))
    assert not wrong, f"{_id(po)}: placeholders differ: {wrong[:5]}"


@pytest.mark.parametrize("po", catalogs(), ids=_id)
def test_the_compiled_catalog_matches_its_source(po: Path) -> None:
    mo = po.with_suffix(".mo")
    assert mo.is_file(), f"{_id(mo)} is missing: run `python3 manage.py compilemessages` and commit it"
    with mo.open("rb") as handle:
        compiled = dict(gettext.GNUTranslations(handle)._catalog)  # type: ignore[attr-defined]
    expected: dict[object, str] = {}
    for e in read_po(po):
        if e.obsolete or "fuzzy" in e.flags:
            continue
        key = e.msgid if e.msgctxt is None else f"{e.msgctxt}\x04{e.msgid}"
        if e.msgid_plural is None:
            expected[key] = e.msgstr[0]
        else:
            for index, text in e.msgstr.items():
                expected[(key, index)] = text
    compiled.pop("", None)
    expected.pop("", None)
    stale = {k for k in expected.keys() | compiled.keys() if expected.get(k) != compiled.get(k)}
    assert not stale, f"{_id(mo)} is out of date with its .po (run compilemessages): e.g. {sorted(map(str, stale))[:5]}"


LITERAL = re.compile(r"""\{%\s*(?:translate|trans)\s+(["'])(.+?)\1(?:\s+context\s+(["'])(.+?)\3)?\s*%\}""")


@pytest.mark.parametrize("home", ["workflows", "capture", "accounts"])
def test_the_templates_literal_texts_are_in_their_catalog(home: str) -> None:
    known = {(e.msgctxt, e.msgid) for e in read_po(ROOT / home / "locale" / "de" / "LC_MESSAGES" / "django.po")}
    missing = []
    for template in sorted((ROOT / home / "templates").rglob("*.html")):
        for match in LITERAL.finditer(template.read_text(encoding="utf-8")):
            if (match.group(4), match.group(2)) not in known:
                missing.append(f"{template.relative_to(ROOT)}: {match.group(2)!r}")
    assert not missing, "marked after the last makemessages (see docs/development.md):\n" + "\n".join(missing)
