"""An HTTPS receiver on 127.0.0.1 that reads a request whole and then answers one byte every
``interval`` seconds, for ever: the slow receiver of issue #40. A socket timeout per read never
fires against it; only a deadline for the whole attempt ends the attempt.

``connections()`` counts the requests it has read (each one a delivery attempt that reached it).
"""

from __future__ import annotations

import socket
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@dataclass
class TricklingReceiver:
    cert: Path
    key: Path
    interval: float
    port: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _count: int = 0
    _listener: socket.socket | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/hook"

    def connections(self) -> int:
        with self._lock:
            return self._count

    def start(self) -> TricklingReceiver:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        listener.settimeout(0.2)
        self._listener = listener
        self.port = int(listener.getsockname()[1])
        threading.Thread(target=self._accept, args=(context,), daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.close()

    def _accept(self, context: ssl.SSLContext) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                raw, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(context, raw), daemon=True).start()

    def _serve(self, context: ssl.SSLContext, raw: socket.socket) -> None:
        try:
            raw.settimeout(10)
            conn = context.wrap_socket(raw, server_side=True)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                body += chunk
            with self._lock:
                self._count += 1
            for byte in ANSWER * 1000:  # never the whole answer in any attempt's time
                if self._stop.wait(self.interval):
                    return
                conn.sendall(bytes([byte]))
        except OSError:
            return  # the client cut the attempt off
        finally:
            raw.close()
