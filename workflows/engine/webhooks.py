"""Service webhooks: an HTTPS POST to a public address, never a redirect, never the inside.

A service step's target is written by a workflow author, so the worker must not become a
way into the network it runs in (SSRF): the host is resolved once, every address it
resolves to must be public (not loopback, private, link-local, shared, multicast, reserved
or unspecified; an IPv6 address that carries an IPv4 address — IPv4-mapped, -compatible,
-translated, NAT64, 6to4, ISATAP — judged by that IPv4 address, Teredo refused) unless a network
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


# IPv6 prefixes whose addresses carry an IPv4 address in their last 32 bits: a packet to one
# may reach that IPv4 address (a NAT64 gateway, a dual stack, SIIT), so it is judged by it.
_EMBEDDING_LAST_32 = tuple(
    ipaddress.IPv6Network(n)
    for n in (
        "::ffff:0:0/96",  # IPv4-mapped
        "::/96",  # IPv4-compatible (deprecated; ::1 and :: are themselves not public)
        "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
        "64:ff9b::/96",  # NAT64, the well-known prefix
        "64:ff9b:1::/48",  # NAT64, local use
    )
)
_TEREDO = ipaddress.IPv6Network("2001::/32")


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (IPv4-mapped, IPv4-compatible, IPv4-translated,
    NAT64, 6to4, ISATAP), or None."""
    if address.sixtofour is not None:
        return address.sixtofour
    value = int(address)
    if any(address in network for network in _EMBEDDING_LAST_32):
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if (value >> 32) & 0xFDFFFFFF == 0x00005EFE:  # ISATAP interface id (::0:5efe / ::200:5efe)
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    return None


def _public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        if address in _TEREDO:
            return False  # its IPv4 address is the server's and the client's, obfuscated: refuse
        embedded = embedded_ipv4(address)
        if embedded is not None and int(embedded) > 1:
            # judged by the IPv4 address it carries, also where the IPv6 prefix itself would
            # count as public (NAT64 64:ff9b::/96, IPv4-compatible ::a.b.c.d)
            return _public(embedded)
    return address.is_global and not address.is_multicast


def allowed(address: IPAddress) -> bool:
    """Whether the worker may connect to ``address``: public, or inside an allowed network."""
    if _public(address):
        return True
    candidates: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address) and (embedded := embedded_ipv4(address)) is not None:
        candidates.append(embedded)
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
