"""Service webhooks: an HTTPS POST to a public address, never a redirect, never the inside.

A service step's target is written by a workflow author, so the worker must not become a
way into the network it runs in (SSRF): the host is resolved once, every address it
resolves to must be public (not loopback, private, link-local, shared, multicast, reserved
or unspecified, IPv4-mapped IPv6 addresses judged by their IPv4 address) unless a network
of ``WORKFLOWS["SERVICES"]["ALLOWED_NETWORKS"]`` contains it, and the connection goes to
that vetted address (TLS still verifies the certificate for the host name), so a second DNS
answer cannot swap in another address. Redirects are not followed: a 3xx answer is a
refusal (another host, or https downgraded to http, would be reached unvetted).

Refusals are :class:`UndeliverableTarget` with a value-free reason: the outbox marks the
intent dead at once instead of retrying what would be refused again.

One attempt has one deadline (``WORKFLOWS["OUTBOUND"]["ATTEMPT_SECONDS"]``) for all of it:
resolving the host, connecting, the TLS handshake, sending, the status line, the headers and
the body. A socket timeout alone is per read, so a receiver trickling a byte every few seconds
would hold the worker for as long as it liked; a watchdog shuts the socket down at the
deadline instead, and the attempt is :class:`AttemptTimedOut` whatever was read by then (never
the status of an answer that did not arrive in time).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from workflows import conf

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class UndeliverableTarget(Exception):
    """The target is refused by the network policy; ``reason`` repeats no host or address."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class AttemptTimedOut(TimeoutError):
    """The attempt as a whole went past its deadline (a slow or trickling receiver)."""


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise AttemptTimedOut("the attempt passed its deadline")
    return left


def _public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        for embedded in (address.ipv4_mapped, address.sixtofour):
            if embedded is not None:
                return _public(embedded)
        if address.teredo is not None:
            return False
    return address.is_global and not address.is_multicast


def allowed(address: IPAddress) -> bool:
    """Whether the worker may connect to ``address``: public, or inside an allowed network."""
    if _public(address):
        return True
    candidates = [address]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        candidates.append(address.ipv4_mapped)
    networks = [ipaddress.ip_network(n, strict=False) for n in conf.get().SERVICES.ALLOWED_NETWORKS]
    return any(a.version == n.version and a in n for a in candidates for n in networks)


def _resolve(host: str, port: int, deadline: float | None) -> list[Any]:
    """``getaddrinfo`` within the attempt's deadline (the resolver has no timeout of its own:
    it runs on a helper thread that is abandoned, not waited for, when the deadline passes)."""
    if deadline is None:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    answer: dict[str, Any] = {}

    def resolve() -> None:
        try:
            answer["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except Exception as exc:  # noqa: BLE001 - handed to the attempt's thread
            answer["error"] = exc

    resolver = threading.Thread(target=resolve, name="webhook-resolve", daemon=True)
    resolver.start()
    resolver.join(_remaining(deadline))
    if resolver.is_alive():
        raise AttemptTimedOut("the target's host did not resolve in time")
    if "error" in answer:
        raise answer["error"]
    return list(answer["infos"])


def vetted_address(host: str, port: int, deadline: float | None = None) -> str:
    """The first address of ``host`` after checking every address it resolves to."""
    try:
        infos = _resolve(host, port, deadline)
    except AttemptTimedOut:
        raise  # a slow resolver is retried, not a refusal
    except (OSError, UnicodeError):
        raise UndeliverableTarget("the target's host does not resolve") from None
    addresses = []
    for info in infos:
        text = str(info[4][0]).split("%", 1)[0]  # an IPv6 zone id is no part of the address
        addresses.append(ipaddress.ip_address(text))
    if not addresses:
        raise UndeliverableTarget("the target's host does not resolve")
    # every answer, not just the first: the resolver's order is not ours to rely on
    if not all(allowed(a) for a in addresses):
        raise UndeliverableTarget(
            "the target resolves to a loopback, private, link-local or other non-public address "
            '(allow a network in WORKFLOWS["SERVICES"]["ALLOWED_NETWORKS"])'
        )
    return str(addresses[0])


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """An HTTPS connection to a vetted address; SNI and the certificate use the host name."""

    def __init__(self, host: str, port: int, address: str, **kwargs: Any) -> None:
        super().__init__(host, port, **kwargs)
        self._address = address
        self.raw: socket.socket | None = None  # the connection's socket, for the watchdog
        self.cut = threading.Event()

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.raw = sock
        if self.cut.is_set():  # the deadline passed while connecting
            sock.close()
            raise AttemptTimedOut("the attempt passed its deadline")
        context: ssl.SSLContext = self._context  # type: ignore[attr-defined]
        # wrapping hands the descriptor to the TLS socket (``sock`` is detached): the watchdog
        # shuts that one down, through the plain socket's method (not TLS's own shutdown)
        self.sock = self.raw = context.wrap_socket(sock, server_hostname=self.host)

    def cut_off(self) -> None:
        """The deadline: shut the TCP socket down under whatever read or write is blocked on
        it (the TLS layer then sees the end of the stream), from the watchdog's thread."""
        self.cut.set()
        raw = self.raw
        if raw is not None:
            try:
                socket.socket.shutdown(raw, socket.SHUT_RDWR)
            except OSError:
                pass


def _tls_context() -> ssl.SSLContext:
    """The system's trust store, certificate and host name verified."""
    return ssl.create_default_context()


def attempt_seconds() -> float:
    """The deadline of one whole attempt (``WORKFLOWS["OUTBOUND"]["ATTEMPT_SECONDS"]``)."""
    return float(conf.get().OUTBOUND.ATTEMPT_SECONDS)


def post(url: str, body: bytes, headers: dict[str, str], *, seconds: float | None = None) -> int:
    """POST ``body`` to an https ``url`` at a vetted address; answers the status (no redirect
    followed: a 3xx is refused). The whole attempt, from resolving the host to the end of the
    answer's body (read up to 64 KiB), ends at ``seconds`` (default ``attempt_seconds()``):
    past it the attempt is :class:`AttemptTimedOut`."""
    deadline = time.monotonic() + (attempt_seconds() if seconds is None else seconds)
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise UndeliverableTarget("the target must be an https URL with a host")
    if parts.username or parts.password:
        raise UndeliverableTarget("the target must not carry credentials")
    try:
        port = parts.port or 443
    except ValueError:
        raise UndeliverableTarget("the target's port is not valid") from None
    address = vetted_address(parts.hostname, port, deadline)
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    connection = _PinnedHTTPSConnection(
        parts.hostname, port, address, timeout=_remaining(deadline), context=_tls_context()
    )
    watchdog = threading.Timer(_remaining(deadline), connection.cut_off)
    watchdog.daemon = True
    watchdog.start()
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        response.read(65536)
        status = int(response.status)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if connection.cut.is_set() or time.monotonic() >= deadline:
            raise AttemptTimedOut("the receiver did not answer within the attempt's deadline") from exc
        raise
    finally:
        watchdog.cancel()
        connection.close()
    if connection.cut.is_set():  # the answer was read only as the deadline cut the socket
        raise AttemptTimedOut("the receiver did not answer within the attempt's deadline")
    if 300 <= status < 400:
        raise UndeliverableTarget("the target answered a redirect; redirects are not followed")
    return status
