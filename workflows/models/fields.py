"""The JSON column of every model: decimals exact in both directions.

Django's JSONField reads jsonb with ``json.loads`` (decimals become floats: ``1000.10`` would
come back as ``1000.1``) and writes with ``json.dumps`` (which refuses a ``Decimal``). These
read decimals as ``Decimal`` and write them digit for digit (``workflows.jsonvalues``), as the
engine's own SQL does.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models.fields import NOT_PROVIDED

from workflows.jsonvalues import ExactDecoder, ExactEncoder


def json_field(*, null: bool = False, blank: bool = False, default: Any = NOT_PROVIDED) -> models.JSONField[Any, Any]:
    return models.JSONField(encoder=ExactEncoder, decoder=ExactDecoder, null=null, blank=blank, default=default)
