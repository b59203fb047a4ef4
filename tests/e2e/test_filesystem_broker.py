"""The embedded broker's messages appear whole: a consumer listing the queue folder while a
message is being written does not see it (kombu's own channel creates the file first and
writes it afterwards; a consumer in between read an empty file and its worker stopped)."""

from __future__ import annotations

import os
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from kombu import Connection

from config.filesystem_broker import Transport


@pytest.fixture
def channel(tmp_path: Path) -> Any:
    folder = tmp_path / "queue"
    folder.mkdir()
    options = {"data_folder_in": str(folder), "data_folder_out": str(folder), "store_processed": False}
    with Connection("filesystem://", transport=Transport, transport_options=options) as conn:
        yield conn.default_channel


def test_a_message_being_written_is_not_visible_to_consumers(channel: Any, monkeypatch: Any) -> None:
    seen_during_write: list[Any] = []
    replace = os.replace

    def consumer_looks_first(src: str, dst: str) -> None:
        try:  # what a consumer polling now would take
            seen_during_write.append(channel._get("work"))
        except Empty:
            seen_during_write.append(None)
        replace(src, dst)

    monkeypatch.setattr(os, "replace", consumer_looks_first)
    channel._put("work", {"body": "hello", "headers": {}, "properties": {}})

    assert seen_during_write == [None]  # nothing to take while it was written
    assert channel._get("work")["body"] == "hello"  # then the whole message
    with pytest.raises(Empty):
        channel._get("work")
