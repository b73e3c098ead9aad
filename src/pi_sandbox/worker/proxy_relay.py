"""Relay a loopback TCP port to the supervisor's egress proxy (worker side, DESIGN §6).

Inside the sandbox there is no network but loopback, and programs expect an HTTP
proxy at a TCP address, not a Unix socket. `start_relay` listens on ``127.0.0.1``
and copies each connection's bytes to and from the proxy's Unix socket, which the
supervisor bind-mounts into the sandbox; `proxy_environment` gives the variables that
point programs at it. The relay decides nothing: the proxy checks every destination.

Stdlib only and cheap to import (DESIGN §2): ``socket``, ``threading``, ``os``. Each
relayed connection costs two daemon threads, which end when both directions have
closed.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
import time

__all__ = ["proxy_environment", "start_relay"]

_BUFSIZE = 65536
_LISTEN_BACKLOG = 128
# accept() failures that concern one connection or a passing shortage, not the listener.
_TRANSIENT_ACCEPT_ERRORS = frozenset(
    {errno.ECONNABORTED, errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.EPROTO}
)


def start_relay(socket_path: str) -> int:
    """Start relaying a new loopback TCP port to the proxy's Unix socket.

    The listening socket and the accepting thread live until the process exits (they
    are daemon threads; the sockets are close-on-exec, so children do not inherit
    them). Each accepted connection is connected to ``socket_path`` and bytes are
    copied both ways; an end-of-file in one direction is passed on as a half-close
    (``shutdown(SHUT_WR)``), and the connection is closed when both directions are
    done or either side fails. If the proxy cannot be reached, the client's
    connection is closed without data.

    Args:
        socket_path: the egress proxy's Unix socket, as seen inside the sandbox.

    Returns:
        The TCP port on ``127.0.0.1`` (ephemeral, chosen by the kernel).

    Raises:
        FileNotFoundError: ``socket_path`` does not exist.
        OSError: the loopback port cannot be bound (no loopback interface).
    """
    if not os.path.exists(socket_path):
        raise FileNotFoundError(errno.ENOENT, "egress proxy socket not found", socket_path)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(_LISTEN_BACKLOG)
        port = listener.getsockname()[1]
        threading.Thread(
            target=_accept_loop,
            args=(listener, socket_path),
            name=f"pi-egress-relay:{port}",
            daemon=True,
        ).start()
    except BaseException:
        listener.close()
        raise
    return port


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def proxy_environment(port: int, direct: tuple[str, ...] = LOOPBACK_NAMES) -> dict[str, str]:
    """The environment that points HTTP clients at the relay on ``127.0.0.1:port``.

    ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and their lower-case forms (curl
    reads only ``http_proxy`` in lower case) are ``http://127.0.0.1:PORT``;
    ``NO_PROXY``/``no_proxy`` list ``direct``: by default the sandbox's own
    loopback (``localhost,127.0.0.1,::1``), so servers a test suite starts inside
    stay reachable; the supervisor leaves out a loopback name the policy's
    allowlist names (``localhost:8080`` means the host's service, via the proxy).

    Args:
        port: the relay's TCP port, 1 to 65535.
        direct: host names clients should reach without the proxy.

    Returns:
        A new dict of 8 variables.

    Raises:
        ValueError: ``port`` is not an int from 1 to 65535.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"relay port must be an int from 1 to 65535, not {port!r}")
    url = f"http://127.0.0.1:{port}"
    env: dict[str, str] = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = url
        env[name.lower()] = url
    env["NO_PROXY"] = env["no_proxy"] = ",".join(direct)
    return env


def _accept_loop(listener: socket.socket, socket_path: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError as exc:
            if exc.errno in _TRANSIENT_ACCEPT_ERRORS:
                # Out of descriptors or memory: let connections finish, then retry.
                time.sleep(0.05)
                continue
            listener.close()
            return
        try:
            threading.Thread(
                target=_relay_connection,
                args=(client, socket_path),
                name="pi-egress-relay-connection",
                daemon=True,
            ).start()
        except RuntimeError:  # can't start a new thread
            client.close()


def _relay_connection(client: socket.socket, socket_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream.connect(socket_path)
        except OSError:
            return
        back = threading.Thread(
            target=_copy, args=(upstream, client), name="pi-egress-relay-copy", daemon=True
        )
        try:
            back.start()
        except RuntimeError:
            return
        _copy(client, upstream)
        back.join()
    finally:
        upstream.close()
        client.close()


def _copy(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until end-of-file, then half-close ``sink``."""
    try:
        while True:
            data = source.recv(_BUFSIZE)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        # One side broke: shut both down so the other direction's thread wakes up too.
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass
