"""The egress proxy on a real Unix socket, reached through the in-process relay.

Topology, as inside a sandbox: client → relay (127.0.0.1 TCP) → proxy (Unix socket in
tmp_path) → origin (127.0.0.1 TCP, started by the test). Names other than
``localhost`` are resolved by an injected resolver, so nothing leaves the machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
import trio

from pi_sandbox.sandbox.network_rules import NetworkRules
from pi_sandbox.supervisor.egress_proxy import MAX_HEAD_BYTES, EgressProxy
from pi_sandbox.worker.proxy_relay import proxy_environment, start_relay

# Deadline of each guarded exchange: generous, only a hang reaches it (issue 13 §7).
WAIT_S = 60
SECRET = "c2VjcmV0LXRva2Vu"  # sent in headers; must never reach the audit log or the origin
AUDIT_KEYS = {"event", "host", "port", "method", "decision", "rule", "reason"}

# --- servers and clients --------------------------------------------------------------------


@dataclass
class Origin:
    """A tiny HTTP/1.1 origin: answers every request with ``hello from origin``."""

    port: int = 0
    heads: list[str] = field(default_factory=list)
    body: bytes = b"hello from origin"

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            buffer = b""
            while b"\r\n\r\n" not in buffer:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buffer += data
            self.heads.append(buffer.split(b"\r\n\r\n", 1)[0].decode("latin-1"))
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(self.body), self.body)
            )


async def echo_handler(stream: trio.SocketStream) -> None:
    """Read to end-of-file, then answer ``echo:`` + everything read, then close."""
    async with stream:
        received = b""
        try:
            while data := await stream.receive_some(65536):
                received += data
            await stream.send_all(b"echo:" + received)
        except trio.BrokenResourceError:
            pass


async def start_tcp_server(nursery: trio.Nursery, handler) -> int:
    listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    return listeners[0].socket.getsockname()[1]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Harness:
    proxy: EgressProxy
    socket_path: Path
    relay_port: int
    audit: list[dict]


async def start_proxy(
    nursery: trio.Nursery, tmp_path: Path, allow=(), deny=(), **kwargs
) -> Harness:
    directory = tmp_path / "egress"
    directory.mkdir(mode=0o700)
    socket_path = directory / "proxy.sock"
    audit: list[dict] = []
    kwargs.setdefault("resolve", resolver({}))
    proxy = EgressProxy(
        NetworkRules(allow=tuple(allow), deny=tuple(deny)),
        socket_path,
        audit=audit.append,
        **kwargs,
    )
    await nursery.start(proxy.serve)
    return Harness(proxy, socket_path, start_relay(str(socket_path)), audit)


def resolver(table: dict[str, list[str]]):
    """An injected resolver: ``localhost`` → 127.0.0.1, the table, else a resolution error."""

    async def resolve(host: str, port: int) -> list[str]:
        await trio.lowlevel.checkpoint()
        if host == "localhost":
            return ["127.0.0.1"]
        if host in table:
            return table[host]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    return resolve


async def read_to_eof(stream: trio.abc.ReceiveStream) -> bytes:
    received = b""
    while data := await stream.receive_some(65536):
        received += data
    return received


async def exchange(port: int, request: bytes, *, send_eof: bool = False) -> bytes:
    """Send ``request`` to 127.0.0.1:port and read the answer to end-of-file."""
    with trio.fail_after(WAIT_S):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request)
            if send_eof:
                await stream.send_eof()
            return await read_to_eof(stream)


async def read_head(stream: trio.abc.ReceiveStream) -> tuple[bytes, bytes]:
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        data = await stream.receive_some(65536)
        assert data, f"closed before a response head: {buffer!r}"
        buffer += data
    head, rest = buffer.split(b"\r\n\r\n", 1)
    return head, rest


def status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def body(response: bytes) -> str:
    return response.split(b"\r\n\r\n", 1)[1].decode()


def get(host_port: str, path: str = "/", extra: str = "") -> bytes:
    return (
        f"GET http://{host_port}{path} HTTP/1.1\r\nHost: {host_port}\r\n"
        f"Proxy-Authorization: Basic {SECRET}\r\nProxy-Connection: keep-alive\r\n"
        f"Connection: keep-alive, X-Hop\r\nX-Hop: drop-me\r\nX-Test: kept\r\n"
        f"Authorization: Bearer {SECRET}\r\n{extra}\r\n"
    ).encode()


def connect(host_port: str) -> bytes:
    return (
        f"CONNECT {host_port} HTTP/1.1\r\nHost: {host_port}\r\n"
        f"Proxy-Authorization: Basic {SECRET}\r\n\r\n"
    ).encode()


def assert_audit_is_clean(records: list[dict]) -> None:
    for record in records:
        assert set(record) == AUDIT_KEYS
        assert record["event"] == "egress"
        assert SECRET not in repr(record)
        assert "kept" not in repr(record)


# --- allowed traffic ------------------------------------------------------------------------


async def test_plain_http_to_an_allowed_localhost_port_goes_through_the_relay(nursery, tmp_path):
    origin = Origin()
    origin.port = await start_tcp_server(nursery, origin.handle)
    harness = await start_proxy(nursery, tmp_path, allow=[f"localhost:{origin.port}"], resolve=None)

    response = await exchange(harness.relay_port, get(f"localhost:{origin.port}", "/hi?x=1"))

    assert status(response) == 200
    assert body(response) == "hello from origin"
    [head] = origin.heads
    lines = head.split("\r\n")
    assert lines[0] == "GET /hi?x=1 HTTP/1.1"
    headers = [line.lower() for line in lines[1:]]
    assert f"host: localhost:{origin.port}" in headers
    assert "connection: close" in headers
    assert "x-test: kept" in headers
    assert f"authorization: bearer {SECRET.lower()}" in headers  # end-to-end headers kept
    assert not any(h.startswith(("proxy-", "x-hop", "connection: keep")) for h in headers)
    assert harness.audit == [
        {
            "event": "egress",
            "host": "localhost",
            "port": origin.port,
            "method": "GET",
            "decision": "allow",
            "rule": f"localhost:{origin.port}",
            "reason": f"allowed by 'localhost:{origin.port}'",
        }
    ]
    assert_audit_is_clean(harness.audit)


async def test_connect_to_an_allowed_host_tunnels_bytes_both_ways_with_half_close(
    nursery, tmp_path
):
    echo_port = await start_tcp_server(nursery, echo_handler)
    harness = await start_proxy(nursery, tmp_path, allow=[f"localhost:{echo_port}"])

    with trio.fail_after(WAIT_S):
        stream = await trio.open_tcp_stream("127.0.0.1", harness.relay_port)
        async with stream:
            # Bytes sent right behind the CONNECT head (a TLS ClientHello) are not lost.
            await stream.send_all(connect(f"localhost:{echo_port}") + b"early,")
            head, rest = await read_head(stream)
            assert head == b"HTTP/1.1 200 Connection established"
            await stream.send_all(b"\x00\xffbinary payload")
            await stream.send_eof()
            echoed = rest + await read_to_eof(stream)

    assert echoed == b"echo:early,\x00\xffbinary payload"
    [record] = harness.audit
    assert (record["method"], record["decision"]) == ("CONNECT", "allow")
    assert_audit_is_clean(harness.audit)


async def test_an_exact_entry_reaches_its_resolved_loopback_address_without_re_resolving(
    nursery, tmp_path
):
    origin = Origin()
    origin.port = await start_tcp_server(nursery, origin.handle)
    calls = []

    async def resolve(host, port):
        calls.append((host, port))
        return ["127.0.0.1"]

    harness = await start_proxy(
        nursery, tmp_path, allow=[f"app.internal.test:{origin.port}"], resolve=resolve
    )
    response = await exchange(harness.relay_port, get(f"App.Internal.Test:{origin.port}"))

    assert status(response) == 200
    assert calls == [("app.internal.test", origin.port)]
    assert harness.audit[0]["decision"] == "allow"


async def test_an_allowed_ip_literal_is_connected_to_without_resolving(nursery, tmp_path):
    origin = Origin()
    origin.port = await start_tcp_server(nursery, origin.handle)

    async def resolve(host, port):
        raise AssertionError("an IP literal must not be resolved")

    harness = await start_proxy(
        nursery, tmp_path, allow=[f"127.0.0.1:{origin.port}"], resolve=resolve
    )
    response = await exchange(harness.relay_port, get(f"127.0.0.1:{origin.port}"))
    assert status(response) == 200


# --- denied traffic -------------------------------------------------------------------------


async def test_denied_destinations_get_403_and_one_deny_record_each(nursery, tmp_path):
    origin = Origin()
    origin.port = await start_tcp_server(nursery, origin.handle)
    resolved = []

    async def resolve(host, port):
        resolved.append(host)
        return ["93.184.216.34"]

    harness = await start_proxy(
        nursery,
        tmp_path,
        allow=[f"localhost:{origin.port}", "example.com", "*.example.org"],
        deny=["blocked.example.org"],
        resolve=resolve,
    )
    cases = [
        (connect("nowhere.example:443"), "nowhere.example:443", "not in the allow list"),
        (get("nowhere.example"), "nowhere.example:80", "not in the allow list"),
        (connect(f"127.0.0.1:{origin.port}"), f"127.0.0.1:{origin.port}", "must be listed"),
        (get(f"127.0.0.1:{origin.port}"), f"127.0.0.1:{origin.port}", "must be listed"),
        (connect(f"[::1]:{origin.port}"), f"[::1]:{origin.port}", "must be listed"),
        (connect(f"127.1:{origin.port}"), f"127.1:{origin.port}", "non-canonical"),
        (connect(f"2130706433:{origin.port}"), f"2130706433:{origin.port}", "non-canonical"),
        (connect("example.com:8443"), "example.com:8443", "only 80 and 443"),
        (connect("blocked.example.org:443"), "blocked.example.org:443", "deny entry"),
        (connect("example.org:443"), "example.org:443", "not in the allow list"),
    ]
    for request, target, reason in cases:
        response = await exchange(harness.relay_port, request)
        assert status(response) == 403, (target, response)
        assert body(response).startswith(f"pi-sandbox: egress to {target} denied: "), response
        assert reason in body(response)

    assert origin.heads == []
    assert resolved == []  # denied by the rules: never resolved
    assert len(harness.audit) == len(cases)
    assert all(r["decision"] == "deny" for r in harness.audit)
    assert [r["method"] for r in harness.audit] == [
        "GET" if request.startswith(b"GET") else "CONNECT" for request, _, _ in cases
    ]
    assert harness.audit[-2]["rule"] == "blocked.example.org"
    assert_audit_is_clean(harness.audit)


@pytest.mark.parametrize(
    "addresses",
    [["127.0.0.1"], ["10.0.0.5"], ["93.184.216.34", "192.168.0.1"], ["::ffff:127.0.0.1"]],
)
async def test_a_wildcard_that_resolves_to_a_non_public_address_is_refused(
    nursery, tmp_path, addresses
):
    echo_port = await start_tcp_server(nursery, echo_handler)
    harness = await start_proxy(
        nursery,
        tmp_path,
        allow=[f"*.rebind.test:{echo_port}"],
        resolve=resolver({"evil.rebind.test": addresses}),
    )

    response = await exchange(harness.relay_port, connect(f"evil.rebind.test:{echo_port}"))

    assert status(response) == 403
    assert "non-public address" in body(response)
    [record] = harness.audit
    assert record["decision"] == "deny"
    assert record["rule"] == f"*.rebind.test:{echo_port}"


# --- failures -------------------------------------------------------------------------------


async def test_resolution_and_connection_failures_are_502_and_a_slow_resolver_is_504(
    nursery, tmp_path
):
    refused = closed_port()

    async def resolve(host, port):
        if host == "slow.test":
            await trio.sleep_forever()
        if host == "junk.test":
            return ["not-an-address"]
        if host == "refused.test":
            return ["127.0.0.1"]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    harness = await start_proxy(
        nursery,
        tmp_path,
        allow=["missing.test", "slow.test", "junk.test", f"refused.test:{refused}"],
        resolve=resolve,
        # Only slow.test may reach it: long enough that the refused connection is
        # answered first even on a saturated machine (issue 13 §7).
        connect_timeout_s=2.0,
    )
    missing = await exchange(harness.relay_port, connect("missing.test:443"))
    junk = await exchange(harness.relay_port, connect("junk.test:443"))
    refused_response = await exchange(harness.relay_port, connect(f"refused.test:{refused}"))
    slow = await exchange(harness.relay_port, connect("slow.test:443"))

    assert status(missing) == 502
    assert "cannot resolve missing.test:443" in body(missing)
    assert status(junk) == 502
    assert status(refused_response) == 502
    assert f"cannot connect to refused.test:{refused}" in body(refused_response)
    assert status(slow) == 504
    assert "timed out" in body(slow)
    assert [(r["host"], r["decision"]) for r in harness.audit] == [
        ("missing.test", "deny"),
        ("junk.test", "deny"),
        ("refused.test", "allow"),
        ("slow.test", "deny"),
    ]


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"garbage\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
        b"GET /relative HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"GET https://example.com/ HTTP/1.1\r\n\r\n",
        b"GET ftp://example.com/ HTTP/1.1\r\n\r\n",
        b"GET http://user:pw@localhost/ HTTP/1.1\r\n\r\n",
        b"CONNECT example.com HTTP/1.1\r\n\r\n",
        b"CONNECT example.com:99999 HTTP/1.1\r\n\r\n",
        b"CONNECT ::1:443 HTTP/1.1\r\n\r\n",
        b"CONNECT example.com:443 HTTP/2.0\r\n\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\n folded: header\r\n\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\nno colon here\r\n\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\nX: a\x00b\r\n\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD_BYTES + 4096) + b"\r\n\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\nX: " + b"a" * (3 * MAX_HEAD_BYTES),
        b"CONNECT example.com:443 HTTP/1.1\r\nX: unfinished",
    ],
    ids=lambda b: b[:40].decode("latin-1").replace("\r\n", "|"),
)
async def test_a_malformed_or_oversized_request_gets_400_and_the_next_client_is_served(
    nursery, tmp_path, request_bytes
):
    origin = Origin()
    origin.port = await start_tcp_server(nursery, origin.handle)
    harness = await start_proxy(nursery, tmp_path, allow=[f"localhost:{origin.port}"])

    response = await exchange(harness.relay_port, request_bytes, send_eof=True)

    assert status(response) == 400
    assert body(response).startswith("pi-sandbox: bad proxy request: ")
    assert harness.audit == []
    again = await exchange(harness.relay_port, get(f"localhost:{origin.port}"))
    assert status(again) == 200


async def test_clients_that_hang_up_early_do_not_disturb_the_proxy(nursery, tmp_path):
    origin = Origin()
    origin.port = await start_tcp_server(nursery, origin.handle)
    harness = await start_proxy(nursery, tmp_path, allow=[f"localhost:{origin.port}"])

    assert await exchange(harness.relay_port, b"", send_eof=True) == b""
    for early in (b"GET http://local", connect(f"localhost:{origin.port}")):
        with trio.fail_after(WAIT_S):
            stream = await trio.open_tcp_stream("127.0.0.1", harness.relay_port)
            await stream.send_all(early)
            await stream.aclose()  # gone before (or right after) the answer

    assert status(await exchange(harness.relay_port, get(f"localhost:{origin.port}"))) == 200


# --- limits ---------------------------------------------------------------------------------


async def test_connections_beyond_the_limit_get_503_until_one_ends(nursery, tmp_path):
    echo_port = await start_tcp_server(nursery, echo_handler)
    harness = await start_proxy(
        nursery, tmp_path, allow=[f"localhost:{echo_port}"], max_connections=1
    )
    with trio.fail_after(WAIT_S):
        held = await trio.open_tcp_stream("127.0.0.1", harness.relay_port)
        await held.send_all(connect(f"localhost:{echo_port}"))
        head, _ = await read_head(held)
        assert head == b"HTTP/1.1 200 Connection established"

        busy = await exchange(harness.relay_port, connect(f"localhost:{echo_port}"))
        assert status(busy) == 503

        await held.send_eof()
        assert await read_to_eof(held) == b"echo:"
        await held.aclose()
        while harness.proxy.active_connections:
            await trio.sleep(0.01)  # the close travels through relay threads
        again = await exchange(harness.relay_port, connect(f"localhost:{echo_port}"), send_eof=True)
    assert again == b"HTTP/1.1 200 Connection established\r\n\r\necho:"


async def test_an_idle_tunnel_is_closed_after_the_idle_timeout(nursery, tmp_path):
    echo_port = await start_tcp_server(nursery, echo_handler)
    harness = await start_proxy(
        # Long enough that the test's own next send is never late for it on a
        # saturated machine (issue 13 §7); the test waits this long once.
        nursery,
        tmp_path,
        allow=[f"localhost:{echo_port}"],
        idle_timeout_s=2.0,
    )
    with trio.fail_after(WAIT_S):
        stream = await trio.open_tcp_stream("127.0.0.1", harness.relay_port)
        async with stream:
            await stream.send_all(connect(f"localhost:{echo_port}"))
            head, rest = await read_head(stream)
            assert head == b"HTTP/1.1 200 Connection established"
            await stream.send_all(b"ping")  # activity moves the deadline
            # then silence: the proxy closes both sides, the client sees end-of-file
            assert rest + await read_to_eof(stream) == b""
    with trio.fail_after(WAIT_S):
        while harness.proxy.active_connections:
            await trio.sleep(0.01)


# --- the socket -----------------------------------------------------------------------------


async def test_the_socket_is_private_and_removed_when_serve_is_cancelled(tmp_path):
    directory = tmp_path / "egress"
    directory.mkdir(mode=0o700)
    path = directory / "proxy.sock"
    proxy = EgressProxy(NetworkRules(), path, audit=lambda record: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        mode = path.stat().st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o600
        response = await exchange(start_relay(str(path)), connect("example.com:443"))
        assert status(response) == 403
        assert "allow list is empty" in body(response)
        nursery.cancel_scope.cancel()
    assert not path.exists()


def test_the_relay_refuses_a_missing_socket_and_the_environment_points_at_it(tmp_path):
    with pytest.raises(FileNotFoundError):
        start_relay(str(tmp_path / "absent.sock"))
    env = proxy_environment(4321)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        assert env[name] == env[name.lower()] == "http://127.0.0.1:4321"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"
    assert len(env) == 8
    with pytest.raises(ValueError):
        proxy_environment(0)


# --- curl -----------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_curl_uses_the_proxy_variables(nursery, tmp_path):
    origin = Origin()
    origin.port = await start_tcp_server(nursery, origin.handle)
    harness = await start_proxy(nursery, tmp_path, allow=[f"localhost:{origin.port}"])
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    env |= proxy_environment(harness.relay_port)
    # In a sandbox, NO_PROXY keeps its own loopback direct; here the origin *is* the
    # host's loopback, reached through the proxy.
    del env["NO_PROXY"], env["no_proxy"]

    async def curl(*args: str) -> trio.Process:
        with trio.fail_after(WAIT_S):
            return await trio.run_process(
                ["curl", "-sS", "--max-time", "10", *args],
                env=env,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )

    plain = await curl(f"http://localhost:{origin.port}/plain")
    tunnel = await curl("--proxytunnel", f"http://localhost:{origin.port}/tunnel")
    denied = await curl("https://denied.example/")

    assert (plain.returncode, plain.stdout) == (0, b"hello from origin"), plain.stderr
    assert (tunnel.returncode, tunnel.stdout) == (0, b"hello from origin"), tunnel.stderr
    assert denied.returncode != 0
    assert b"403" in denied.stderr
    assert [head.split("\r\n")[0] for head in origin.heads] == [
        "GET /plain HTTP/1.1",
        "GET /tunnel HTTP/1.1",
    ]
    assert [(r["method"], r["host"], r["decision"]) for r in harness.audit] == [
        ("GET", "localhost", "allow"),
        ("CONNECT", "localhost", "allow"),
        ("CONNECT", "denied.example", "deny"),
    ]
