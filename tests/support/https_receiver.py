"""A live HTTPS receiver for webhook tests: a certificate for 127.0.0.1 made with openssl (the
same recipe as the service-step tests in tests/reliability/test_security_small.py), an
ephemeral port, and every request kept (path, headers, body) for the test to check.

``answer`` sets the status the next requests get. The certificate file is ``cert`` (a client
trusts it through ``ssl.create_default_context(cafile=...)``, or a worker process through the
``SSL_CERT_FILE`` environment variable).
"""

from __future__ import annotations

import http.server
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class HttpsReceiver:
    cert: Path
    port: int = 0
    status: int = 200
    requests: list[Received] = field(default_factory=list)
    _server: Any = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/hook"

    def answer(self, status: int) -> None:
        self.status = status

    def received(self) -> list[Received]:
        with self._lock:
            return list(self.requests)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def make_certificate(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def start(folder: Path) -> HttpsReceiver:
    cert, key = make_certificate(folder)
    receiver = HttpsReceiver(cert=cert)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with receiver._lock:
                receiver.requests.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                status = receiver.status
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    receiver.port = server.server_address[1]
    receiver._server = server
    receiver._thread = threading.Thread(target=server.serve_forever, daemon=True)
    receiver._thread.start()
    return receiver


@contextmanager
def allowed_networks(*networks: str) -> Iterator[None]:
    """WORKFLOWS["SERVICES"]["ALLOWED_NETWORKS"] in this process for the block (the receiver
    listens on 127.0.0.1, which the network policy refuses otherwise)."""
    from django.conf import settings
    from django.test import override_settings

    from workflows import conf

    workflows = {**getattr(settings, "WORKFLOWS", {}), "SERVICES": {"ALLOWED_NETWORKS": list(networks)}}
    with override_settings(WORKFLOWS=workflows):
        conf.reload()
        yield
    conf.reload()
