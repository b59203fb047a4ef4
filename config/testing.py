"""What the test suite's processes need of the settings: a broker of their own per pytest-xdist
worker. Imported by ``config/settings.py`` only when pytest runs."""

from __future__ import annotations

from collections.abc import MutableMapping
from urllib.parse import urlsplit, urlunsplit

BROKER_FOLDER_VARIABLE = "SWITCHYARD_BROKER_FOLDER"


def xdist_index(environ: MutableMapping[str, str]) -> int | None:
    """0, 1, ... in a pytest-xdist worker process (``PYTEST_XDIST_WORKER=gwN``), else None."""
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        return int(worker[2:])
    return None


def isolate_xdist_broker(environ: MutableMapping[str, str]) -> None:
    """Give an xdist worker process a broker of its own, in ``environ`` (so that the Celery
    processes it starts inherit it): the next Redis database numbers after the one configured,
    or a broker folder of its own beside the embedded one. Outside xdist, nothing changes."""
    index = xdist_index(environ)
    if index is None:
        return
    url = environ.get("CELERY_BROKER_URL", "")
    if not url:
        environ[BROKER_FOLDER_VARIABLE] = f"broker-gw{index}"
        return
    parts = urlsplit(url)
    if parts.scheme in ("redis", "rediss"):
        first = int(parts.path.strip("/") or 0)
        environ["CELERY_BROKER_URL"] = urlunsplit(parts._replace(path=f"/{first + index}"))
    # any other broker (AMQP) keeps its URL: the tests that need one start their own queues
