"""The API's JSON renderer: a Decimal is answered as the exact JSON number it holds.

DRF's own encoder turns a ``Decimal`` into a float (``1000.10`` would be answered as
``1000.1``); this one writes it digit for digit (``workflows.jsonvalues``), so a run's state,
a history patch and a payload read back exactly as they were sent.
"""

from __future__ import annotations

from rest_framework.renderers import JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

from workflows.jsonvalues import ExactEncoder


class ExactJSONEncoder(ExactEncoder, JSONEncoder):
    """Decimals exact; everything else as DRF encodes it (dates, UUIDs, lazy texts...)."""


class ExactJSONRenderer(JSONRenderer):
    encoder_class = ExactJSONEncoder
