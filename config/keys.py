"""Secrets a local run keeps under its data folder (``SWITCHYARD_DATA_DIR``, default ``.data``).

``python3 dev.py run`` generates the site's SECRET_KEY and the webhook signing secret once and
keeps them in files only their owner can read (mode 0600), so sessions survive a restart and
no known development key ever signs anything. A deployment sets ``SECRET_KEY`` (and
``WORKFLOWS_SECURITY_WEBHOOK_SIGNING_SECRET``) in the environment instead; with ``DEBUG`` off
the settings refuse to start without them. Standard library only: dev.py imports it.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

SECRET_KEY_FILE = "secret_key"
WEBHOOK_SECRET_FILE = "webhook_signing_secret"


def load_or_create(path: Path, *, length: int = 64) -> str:
    """The secret stored in ``path``; a new random one (written 0600, atomically) when missing."""
    try:
        existing = path.read_text().strip()
    except FileNotFoundError:
        existing = ""
    if existing:
        return existing
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(length)
    # Written whole under a temporary name, then linked into place: of two processes creating
    # it together, one link wins and both answer what it holds (never a half-written file).
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(value + "\n")
        try:
            os.link(temporary, path)
        except FileExistsError:
            return path.read_text().strip()
    finally:
        temporary.unlink(missing_ok=True)
    return value
