"""The one filter every page's times go through (issue #30): a <time> element with the
absolute ISO time (offset included) in datetime and title, and a fallback text with its
numeric offset, never a bare "UTC"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from django.template import Context, Template
from django.test import override_settings


def render(value: object, arg: str = "") -> str:
    source = "{% load switchyard_time %}{{ value|local_time" + (f':"{arg}"' if arg else "") + " }}"
    return Template(source).render(Context({"value": value}))


def test_a_time_renders_as_a_time_element_with_its_iso_time() -> None:
    moment = datetime(2031, 7, 14, 15, 30, 5, tzinfo=UTC)
    assert render(moment) == (
        '<time datetime="2031-07-14T15:30:05+00:00" title="2031-07-14T15:30:05+00:00">2031-07-14 15:30 +0000</time>'
    )
    assert ">2031-07-14 15:30:05 +0000</time>" in render(moment, "seconds")


@override_settings(TIME_ZONE="Europe/Berlin")
def test_the_fallback_text_names_the_servers_offset() -> None:
    shown = render(datetime(2031, 1, 2, 8, 0, tzinfo=timezone(timedelta(hours=-5))))
    assert 'datetime="2031-01-02T14:00:00+01:00"' in shown and ">2031-01-02 14:00 +0100<" in shown


def test_nothing_for_no_time_and_escaped_text_for_anything_else() -> None:
    assert render(None) == ""
    assert render("<b>") == "&lt;b&gt;"
