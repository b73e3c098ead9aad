"""`RpcChannel` on a socket stream reads and writes the descriptor directly (issue 20):
frames must stay whole and in order, a peer that goes away must still fail the
requests waiting on it, and a flooding peer must not starve other tasks."""

from __future__ import annotations

import json
import socket
import threading

import pytest
import trio

from pi_sandbox.errors import WorkerCrashedError
from pi_sandbox.supervisor.workers.rpc_channel import RpcChannel

WAIT_S = 30


class EchoPeer:
    """A blocking peer on a thread: records every frame and answers each request
    with its params (unless ``answer`` is False)."""

    def __init__(self, sock: socket.socket, *, answer: bool = True) -> None:
        self.sock = sock
        self.answer = answer
        self.frames: list[dict] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        reader = self.sock.makefile("rb")
        for line in reader:
            frame = json.loads(line)
            self.frames.append(frame)
            if self.answer and "id" in frame:
                reply = {"jsonrpc": "2.0", "id": frame["id"], "result": frame["params"]}
                self.sock.sendall(json.dumps(reply).encode() + b"\n")


def channel_pair(**kwargs) -> tuple[RpcChannel, socket.socket]:
    ours, theirs = socket.socketpair()
    # A small buffer, so a frame does not fit and the write is partial.
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
    return RpcChannel(stream, name="peer", **kwargs), theirs


async def test_concurrent_large_requests_arrive_whole_and_are_each_answered():
    channel, theirs = channel_pair()
    assert channel._socket is not None  # the direct path is the one under test
    peer = EchoPeer(theirs)
    results: dict[int, object] = {}

    async def ask(i: int) -> None:
        results[i] = await channel.request("echo", {"i": i, "pad": "x" * 300_000}, timeout_s=WAIT_S)

    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.run)
            async with trio.open_nursery() as askers:
                for i in range(8):
                    askers.start_soon(ask, i)
            nursery.cancel_scope.cancel()
    assert sorted(results) == list(range(8))
    assert all(results[i]["i"] == i and len(results[i]["pad"]) == 300_000 for i in results)
    assert sorted(f["params"]["i"] for f in peer.frames) == list(range(8))
    theirs.close()


async def test_a_peer_that_closes_fails_the_waiting_request_at_once():
    channel, theirs = channel_pair()
    EchoPeer(theirs, answer=False)
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.run)

            async def close_soon() -> None:
                await trio.sleep(0.05)
                theirs.shutdown(socket.SHUT_RDWR)

            nursery.start_soon(close_soon)
            with pytest.raises(WorkerCrashedError):
                await channel.request("echo", {}, timeout_s=WAIT_S)
    assert channel.closed


async def test_sending_after_the_supervisor_closed_the_channel_raises_crashed():
    channel, theirs = channel_pair()
    await channel.aclose()
    with pytest.raises(WorkerCrashedError):
        await channel.send({"jsonrpc": "2.0", "method": "x", "params": {}})
    theirs.close()


async def test_a_peer_flooding_notifications_does_not_starve_other_tasks():
    seen = 0

    async def on_notification(message) -> None:
        nonlocal seen
        seen += 1

    channel, theirs = channel_pair(on_notification=on_notification)
    line = json.dumps({"jsonrpc": "2.0", "method": "log", "params": {"message": "x"}}).encode()

    def flood() -> None:
        try:
            while True:
                theirs.sendall((line + b"\n") * 200)
        except OSError:
            pass

    threading.Thread(target=flood, daemon=True).start()
    ticks = 0
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.run)
            # The flood has reached the reader (a condition, not a guess: on a busy
            # machine the flooding thread may start late) ...
            while seen == 0:
                await trio.sleep(0.001)
            # ... and another task keeps getting turns while the reader has data.
            while ticks < 200:
                await trio.lowlevel.checkpoint()
                ticks += 1
            nursery.cancel_scope.cancel()
    assert ticks == 200 and seen > 0
    theirs.close()
