"""kombu's filesystem transport (the embedded broker) with messages that appear whole.

kombu writes a message by creating its file in the queue folder and then writing it, while a
consumer lists that folder, moves the oldest file away and reads it, taking no lock: a consumer
that comes between the two reads an empty file, and the JSON error is "unrecoverable" for the
worker's consumer (seen as a worker that stopped consuming mid-run). This channel writes each
message under a name consumers skip (``.part``) and renames it into place, which is atomic on
one filesystem. Everything else is kombu's: selected with ``CELERY_BROKER_TRANSPORT`` when no
``CELERY_BROKER_URL`` is set (``config/settings.py``).
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    # the signature of kombu's filesystem channel, which its virtual base names differently
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Put ``payload`` onto ``queue``: written in full, then renamed to the name consumers read."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + ".part"  # consumers take only names ending ".<queue>.msg"
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {name!r} to the queue folder") from exc


class Transport(filesystem.Transport):
    Channel = Channel
