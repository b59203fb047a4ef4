from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register

from workflows import conf


@register()
def check_workflows_setting(app_configs: Any, **kwargs: Any) -> list[Error]:
    return [
        Error(problem, hint="See docs/operations.md for the WORKFLOWS keys and their minimums.", id="workflows.E001")
        for problem in conf.problems(getattr(settings, "WORKFLOWS", {}))
    ]
