"""Times in the reader's time zone: ``{{ value|local_time }}`` (``{% load switchyard_time %}``).

Every time a page shows goes through this one filter (issue #30). It renders
``<time datetime="ISO 8601 with offset" title="the same">`` whose text,
for a reader without JavaScript, is the server's rendering with its numeric offset
(``2026-12-03 15:04 +0000``: never a bare "UTC" that reads as the reader's own clock);
``workflows/js/localtime.js`` (loaded by ``switchyard/assets.html``) rewrites the text in the
browser's time zone and language, and the title keeps the absolute time for hover.

``|local_time`` shows minutes, ``|local_time:"seconds"`` seconds too (the script keeps the
precision of the text it replaces). A value that is not a
date and time (``None``, a date) renders as "" or as itself, escaped.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils import dateformat, timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()

FORMATS = {"minutes": "Y-m-d H:i O", "seconds": "Y-m-d H:i:s O"}


@register.filter(is_safe=True)
def local_time(value: Any, precision: str = "minutes") -> SafeString | str:
    if not isinstance(value, datetime):
        return "" if value in (None, "") else format_html("{}", value)
    if timezone.is_naive(value):
        value = timezone.make_aware(value, timezone.get_default_timezone())
    shown = timezone.localtime(value)
    precision = precision if precision in FORMATS else "minutes"
    iso = shown.isoformat()
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        iso,
        iso,
        dateformat.format(shown, FORMATS[precision]),
    )
