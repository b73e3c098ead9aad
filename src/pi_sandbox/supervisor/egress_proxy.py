"""The supervisor's egress proxy: the only way out of a sandbox's network (DESIGN §6).

A sandboxed worker has no network interface but its own loopback. Its relay
(`pi_sandbox.worker.proxy_relay`) forwards a loopback TCP port to this proxy's Unix
socket, which is bind-mounted into the sandbox, and exports ``HTTP_PROXY`` and friends
pointing at that port. The proxy speaks just enough HTTP/1.1 to learn the destination:

- ``CONNECT host:port HTTP/1.1`` opens a byte tunnel (HTTPS, or anything else);
- an absolute-form request (``GET http://host[:port]/path HTTP/1.1``) is sent to the
  origin in origin-form, without ``Proxy-*`` and other hop-by-hop headers and with
  ``Connection: close``; after that request head, bytes are piped unchanged both ways.

Every destination is decided by `NetworkRules.decide` (the policy decides, the proxy
enforces). After an allow, the host is resolved once and the proxy connects to those
addresses, never re-resolving; if an address is not public (`is_public_address`) the
connection is refused unless the allow entry that matched names the host exactly, so a
wildcard cannot be pointed at loopback or the LAN by DNS rebinding.

Answers the proxy itself gives (``text/plain``, ``Connection: close``): 400 for a
malformed request, a head over `MAX_HEAD_BYTES` or `MAX_HEADERS`, an origin-form or
non-``http://`` target, or user information in the URL; 403 with
``pi-sandbox: egress to HOST:PORT denied: REASON`` for a denied destination; 408 for a
head not received within 30 s; 502 when the name cannot be resolved or no address
accepts the connection; 503 beyond ``max_connections``; 504 when resolving and
connecting take longer than ``connect_timeout_s``.

The proxy checks destinations, not contents: inside an allowed tunnel the client may
send any bytes (e.g. another virtual host's name in TLS SNI) to the allowed address.

Audit: one record per request whose destination was decided, never containing request
headers or bodies (they may hold credentials)::

    {"event": "egress", "host": "example.com", "port": 443, "method": "CONNECT",
     "decision": "allow" | "deny", "rule": "*.example.com" | None, "reason": "..."}

A name that cannot be resolved, or whose resolution times out, is recorded as
``deny`` (no connection was attempted) and answered 502 or 504.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import socket as stdlib_socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from pi_sandbox.sandbox.network_rules import (
    NetworkDecision,
    NetworkRules,
    is_public_address,
    normalize_host,
    split_authority,
)

__all__ = ["MAX_HEADERS", "MAX_HEAD_BYTES", "EgressProxy"]

logger = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
"""Largest request head (request line and headers, with the blank line) accepted, in bytes."""

MAX_HEADERS = 100
"""Most header lines accepted in one request head."""

_HEAD_TIMEOUT_S = 30.0  # a client must send its whole request head within this
_RESPONSE_TIMEOUT_S = 5.0  # sending an error response and draining the client's leftovers
_MAX_DRAIN_BYTES = 1024 * 1024
_BUFSIZE = 65536
_LISTEN_BACKLOG = 128

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_PORT = re.compile(r"[0-9]{1,5}")
_REASON_PHRASES = {
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
# Hop-by-hop headers (RFC 9110 §7.6.1) the proxy must not forward. Transfer-Encoding is
# kept: the body is piped unchanged, so the origin needs its framing.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "te", "upgrade", "host"})
_FRAMING = frozenset({"content-length", "transfer-encoding"})

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``await resolve(host, port)`` → the host's addresses as text (``["93.184.216.34"]``)."""


class _BadRequest(Exception):
    """The client sent something that is not a request this proxy serves (400)."""


class _ClientGone(Exception):
    """The client closed before sending a complete request head."""


@dataclass(frozen=True)
class _Request:
    method: str
    host: str  # as written, without IPv6 brackets
    port: int
    version: str
    authority: str  # host[:port] as written, for the Host header
    path: str | None  # origin-form target; None for CONNECT
    headers: tuple[tuple[str, str], ...]


def _printable(text: str, limit: int = 200) -> str:
    """Client-controlled text made safe for a response body, an audit record or a log."""
    cleaned = "".join(c if " " <= c <= "~" else "?" for c in text)
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 3] + "..."


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _read_head(stream: trio.abc.ReceiveStream) -> tuple[bytes, bytes]:
    """Read up to the blank line: (head without the terminator, bytes after it)."""
    buffer = bytearray()
    while True:
        end = buffer.find(b"\r\n\r\n")
        if end >= 0:
            if end + 4 > MAX_HEAD_BYTES:
                break
            return bytes(buffer[:end]), bytes(buffer[end + 4 :])
        if len(buffer) >= MAX_HEAD_BYTES:
            break
        data = await stream.receive_some(_BUFSIZE)
        if not data:
            if buffer:
                raise _BadRequest("incomplete request head")
            raise _ClientGone
        buffer += data
    raise _BadRequest(f"request head larger than {MAX_HEAD_BYTES} bytes")


def _split_authority(authority: str, default_port: int | None) -> tuple[str, int]:
    """``"host:port"``, ``"[v6]:port"`` or (with a default port) ``"host"`` → (host, port)."""
    try:
        host, port_text = split_authority(authority)
    except ValueError as exc:
        raise _BadRequest(f"{exc} in the target") from None
    if not host:
        raise _BadRequest("the target has no host")
    if port_text is None:
        if default_port is None:
            raise _BadRequest("CONNECT needs a host:port target")
        return host, default_port
    if not _PORT.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
        raise _BadRequest("the target's port is not a number from 1 to 65535")
    return host, int(port_text)


def _parse_head(head: bytes) -> _Request:
    """Parse a request head (CRLF-separated lines, without the final blank line)."""
    lines = head.split(b"\r\n")
    if len(lines) - 1 > MAX_HEADERS:
        raise _BadRequest(f"more than {MAX_HEADERS} header lines")
    try:
        request_line = lines[0].decode("ascii")
    except UnicodeDecodeError:
        raise _BadRequest("the request line is not ASCII") from None
    parts = request_line.split(" ")
    if len(parts) != 3 or not all(parts):
        raise _BadRequest("malformed request line")
    method, target, version = parts
    if not _TOKEN.fullmatch(method) or version not in ("HTTP/1.1", "HTTP/1.0"):
        raise _BadRequest("malformed request line")
    if any(not " " < c <= "~" for c in target):
        raise _BadRequest("invalid characters in the request target")

    headers = []
    for raw in lines[1:]:
        if not raw or raw[:1] in (b" ", b"\t"):
            raise _BadRequest("malformed header line")
        name_bytes, colon, value_bytes = raw.partition(b":")
        value = value_bytes.decode("latin-1").strip(" \t")
        name = name_bytes.decode("latin-1")
        if not colon or not _TOKEN.fullmatch(name):
            raise _BadRequest("malformed header line")
        if any((c < " " and c != "\t") or c == "\x7f" for c in value):
            raise _BadRequest("control characters in a header value")
        headers.append((name, value))

    if method == "CONNECT":
        host, port = _split_authority(target, None)
        return _Request(method, host, port, version, target, None, tuple(headers))
    if target[:8].lower() == "https://":
        raise _BadRequest("https:// URLs must be requested with CONNECT")
    if target[:7].lower() != "http://":
        raise _BadRequest("the target must be an absolute http:// URL, or use CONNECT")
    rest = target[7:]
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:].split("#", 1)[0]
    if "@" in authority:
        raise _BadRequest("user information in the URL is not supported")
    host, port = _split_authority(authority, 80)
    if not path.startswith("/"):
        path = "/" + path
    return _Request(method, host, port, version, authority, path, tuple(headers))


def _origin_head(request: _Request) -> bytes:
    """The request head sent to the origin: origin-form, no hop-by-hop headers, close."""
    listed = set()
    for name, value in request.headers:
        if name.lower() == "connection":
            listed.update(token.strip().lower() for token in value.split(","))
    drop = (_HOP_BY_HOP | listed) - _FRAMING
    lines = [f"{request.method} {request.path} {request.version}", f"Host: {request.authority}"]
    for name, value in request.headers:
        lowered = name.lower()
        if lowered in drop or lowered.startswith("proxy-"):
            continue
        lines.append(f"{name}: {value}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _default_resolve(host: str, port: int) -> list[str]:
    infos = await trio.socket.getaddrinfo(host, port, type=stdlib_socket.SOCK_STREAM)
    return [
        str(info[4][0])
        for info in infos
        if info[0] in (stdlib_socket.AF_INET, stdlib_socket.AF_INET6)
    ]


class EgressProxy:
    """An HTTP proxy on a Unix socket that lets sandboxes reach only allowed destinations.

    Args:
        rules: the egress policy.
        socket_path: where to bind the Unix socket. Its directory must exist and should
            be private to the user (0700): the socket file is made 0600 right after
            binding, and the directory closes the gap in between. AF_UNIX limits the
            path to about 107 bytes.
        audit: called synchronously with one record per decided request (see the
            module docstring). If it raises, that client's connection is dropped
            before any connection to the destination is made.
        resolve: ``await resolve(host, port)`` → addresses as text. Default:
            ``trio.socket.getaddrinfo``. An OSError or an empty list means 502.
            IP-literal destinations are not resolved.
        connect_timeout_s: seconds allowed for resolving and connecting together;
            passing it answers 504.
        idle_timeout_s: seconds a tunnel may move no bytes in either direction before
            both sides are closed.
        max_connections: most client connections handled at once (each becomes at
            most one tunnel); further clients are answered 503 and closed.

    Raises:
        ValueError: a timeout is not positive, or ``max_connections`` < 1.
    """

    def __init__(
        self,
        rules: NetworkRules,
        socket_path: Path,
        *,
        audit: Callable[[dict[str, Any]], None],
        resolve: Resolver | None = None,
        connect_timeout_s: float = 10.0,
        idle_timeout_s: float = 300.0,
        max_connections: int = 64,
    ) -> None:
        if connect_timeout_s <= 0 or idle_timeout_s <= 0:
            raise ValueError("EgressProxy timeouts must be positive")
        if max_connections < 1:
            raise ValueError("EgressProxy max_connections must be at least 1")
        self._rules = rules
        self._socket_path = Path(socket_path)
        self._audit = audit
        self._resolve = resolve or _default_resolve
        self._connect_timeout_s = connect_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._max_connections = max_connections
        self._active = 0
        self._rejecting = 0

    @property
    def socket_path(self) -> Path:
        """The Unix socket's path (exists while `serve` runs)."""
        return self._socket_path

    @property
    def active_connections(self) -> int:
        """Client connections being handled now (excluding those being refused with 503)."""
        return self._active

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind the socket and serve clients until cancelled; use ``await nursery.start``.

        ``task_status.started()`` is called once the socket accepts connections. On
        exit (cancellation included) the listening socket is closed, every client
        connection and tunnel is closed, and the socket file is removed (if it is still
        the one this call created). A misbehaving client only ever ends its own
        connection.

        Raises:
            OSError: the socket cannot be bound (path exists, directory missing, path
                too long); raised before ``started()``.
        """
        path = str(self._socket_path)
        sock = trio.socket.socket(stdlib_socket.AF_UNIX, stdlib_socket.SOCK_STREAM)
        inode = None
        try:
            await sock.bind(path)
            inode = os.stat(path).st_ino
            os.chmod(path, 0o600)
            sock.listen(_LISTEN_BACKLOG)
            listener = trio.SocketListener(sock)
            async with trio.open_nursery() as nursery:
                task_status.started()
                while True:
                    stream = await listener.accept()
                    if self._active < self._max_connections:
                        self._active += 1
                        nursery.start_soon(self._handle_client, stream)
                    elif self._rejecting < self._max_connections:
                        self._rejecting += 1
                        nursery.start_soon(self._reject_busy, stream)
                    else:
                        await stream.aclose()
        finally:
            sock.close()
            if inode is not None:
                try:
                    if os.stat(path).st_ino == inode:
                        os.unlink(path)
                except FileNotFoundError:
                    pass

    # --- one client ------------------------------------------------------------------------

    async def _reject_busy(self, stream: trio.SocketStream) -> None:
        try:
            async with stream:
                await self._respond(
                    stream, 503, "pi-sandbox: too many concurrent egress connections"
                )
        except Exception:
            logger.debug("egress proxy: refusing a client failed", exc_info=True)
        finally:
            self._rejecting -= 1

    async def _handle_client(self, stream: trio.SocketStream) -> None:
        try:
            async with stream:
                await self._serve_client(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client or the origin hung up: an ordinary end
        except Exception:
            # One client's failure (a bug included) must not end serve(); the client
            # sees its connection close.
            logger.warning("egress proxy: client connection failed", exc_info=True)
        finally:
            self._active -= 1

    async def _serve_client(self, client: trio.SocketStream) -> None:
        request: _Request | None = None
        leftover = b""
        problem = ""
        with trio.move_on_after(_HEAD_TIMEOUT_S) as head_scope:
            try:
                head, leftover = await _read_head(client)
                request = _parse_head(head)
            except _ClientGone:
                return
            except _BadRequest as exc:
                problem = str(exc)
        if request is None:
            if head_scope.cancelled_caught:
                message = f"pi-sandbox: request head not received within {_HEAD_TIMEOUT_S:g} s"
                await self._respond(client, 408, message)
            else:
                await self._respond(client, 400, f"pi-sandbox: bad proxy request: {problem}")
            return

        decision = self._rules.decide(request.host, request.port)
        try:
            host = normalize_host(request.host)
        except (ValueError, TypeError):
            host = _printable(request.host)
        if not decision.allowed:
            await self._deny(client, request, host, decision)
            return

        upstream = await self._open_upstream(client, request, host, decision)
        if upstream is None:
            return
        async with upstream:
            if request.path is None:
                await client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if leftover:
                    await upstream.send_all(leftover)
            else:
                await upstream.send_all(_origin_head(request) + leftover)
            await self._tunnel(client, upstream)

    async def _open_upstream(
        self,
        client: trio.SocketStream,
        request: _Request,
        host: str,
        decision: NetworkDecision,
    ) -> trio.SocketStream | None:
        """Resolve, check the addresses, audit, connect; or answer the client and return None."""
        target = _host_port(host, request.port)
        addresses: list[str] | None = None
        failure: tuple[int, str] | None = None
        with trio.move_on_after(self._connect_timeout_s):
            try:
                addresses = await self._addresses(host, request.port)
            except (OSError, ValueError) as exc:
                reason = f"name resolution failed: {_printable(str(exc))}"
                self._record(request, host, NetworkDecision(False, decision.rule, reason))
                failure = (502, f"pi-sandbox: cannot resolve {target}: {reason}")
            else:
                refusal = self._refuse_non_public(host, addresses, decision)
                if refusal is not None:
                    self._record(request, host, refusal)
                    failure = (403, self._denial_message(host, request.port, refusal))
                else:
                    self._record(request, host, decision)
                    try:
                        return await self._connect(addresses, request.port)
                    except OSError as exc:
                        why = _printable(exc.strerror or str(exc))
                        failure = (502, f"pi-sandbox: cannot connect to {target}: {why}")
        if failure is None:
            if addresses is None:
                timed_out = NetworkDecision(False, decision.rule, "name resolution timed out")
                self._record(request, host, timed_out)
            what = "resolving" if addresses is None else "connecting to"
            seconds = f"{self._connect_timeout_s:g}"
            failure = (504, f"pi-sandbox: {what} {target} timed out after {seconds} s")
        await self._respond(client, *failure)
        return None

    def _refuse_non_public(
        self, host: str, addresses: list[str], decision: NetworkDecision
    ) -> NetworkDecision | None:
        """Refuse non-public addresses unless an exact entry (not a wildcard) allowed the host."""
        if decision.rule is not None and not decision.rule.startswith("*."):
            return None
        for address in addresses:
            if not is_public_address(address):
                return NetworkDecision(
                    False,
                    decision.rule,
                    f"{host} resolves to the non-public address {address}, which only an "
                    "exact (non-wildcard) allow entry may reach",
                )
        return None

    async def _addresses(self, host: str, port: int) -> list[str]:
        """The addresses to connect to, in order: the literal itself, or the resolver's."""
        try:
            return [str(ipaddress.ip_address(host))]
        except ValueError:
            pass
        resolved = await self._resolve(host, port)
        addresses: list[str] = []
        for address in resolved:
            text = str(ipaddress.ip_address(address))  # ValueError: the resolver erred
            if text not in addresses:
                addresses.append(text)
        if not addresses:
            raise OSError(f"no addresses for {host}")
        return addresses

    async def _connect(self, addresses: list[str], port: int) -> trio.SocketStream:
        """Connect to the first address that answers; raise the last OSError otherwise."""
        last: OSError | None = None
        for address in addresses:
            family = stdlib_socket.AF_INET6 if ":" in address else stdlib_socket.AF_INET
            sock = trio.socket.socket(family, stdlib_socket.SOCK_STREAM)
            try:
                await sock.connect((address, port))
            except OSError as exc:
                sock.close()
                last = exc
                continue
            except BaseException:
                sock.close()
                raise
            return trio.SocketStream(sock)
        raise last or OSError("no addresses to connect to")

    async def _tunnel(self, client: trio.SocketStream, upstream: trio.SocketStream) -> None:
        """Copy bytes both ways until both sides finished or the tunnel idles out."""
        with trio.CancelScope(deadline=trio.current_time() + self._idle_timeout_s) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pipe, client, upstream, scope)
                nursery.start_soon(self._pipe, upstream, client, scope)

    async def _pipe(
        self, source: trio.SocketStream, sink: trio.SocketStream, scope: trio.CancelScope
    ) -> None:
        try:
            while True:
                data = await source.receive_some(_BUFSIZE)
                if not data:
                    break
                scope.deadline = trio.current_time() + self._idle_timeout_s
                await sink.send_all(data)
                scope.deadline = trio.current_time() + self._idle_timeout_s
            # Half-close: the other direction may still be sending (a request body is
            # done, the response is not).
            await sink.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            scope.cancel()

    # --- answers ---------------------------------------------------------------------------

    def _record(self, request: _Request, host: str, decision: NetworkDecision) -> None:
        self._audit(
            {
                "event": "egress",
                "host": host,
                "port": request.port,
                "method": request.method,
                "decision": "allow" if decision.allowed else "deny",
                "rule": decision.rule,
                "reason": decision.reason,
            }
        )

    @staticmethod
    def _denial_message(host: str, port: int, decision: NetworkDecision) -> str:
        reason = _printable(decision.reason, 500)
        return f"pi-sandbox: egress to {_host_port(host, port)} denied: {reason}"

    async def _deny(
        self, client: trio.SocketStream, request: _Request, host: str, decision: NetworkDecision
    ) -> None:
        self._record(request, host, decision)
        await self._respond(client, 403, self._denial_message(host, request.port, decision))

    async def _respond(self, client: trio.SocketStream, status: int, message: str) -> None:
        """Send a short plain-text answer, then half-close and drain the client.

        Draining what the client already sent (an oversized head, a request body)
        keeps the kernel from resetting the connection before the client reads the
        answer.
        """
        body = (_printable(message, 1000) + "\n").encode("ascii")
        head = (
            f"HTTP/1.1 {status} {_REASON_PHRASES[status]}\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode("ascii")
        with trio.move_on_after(_RESPONSE_TIMEOUT_S):
            try:
                await client.send_all(head + body)
                await client.send_eof()
                drained = 0
                while drained < _MAX_DRAIN_BYTES:
                    data = await client.receive_some(_BUFSIZE)
                    if not data:
                        break
                    drained += len(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
