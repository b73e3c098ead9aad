"""`RunStop`: what SIGTERM, SIGINT and SIGHUP do to a run (issue 14 §3), in memory
(signals fed from a list) except where the receiver itself is what is tested."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import trio

from pi_sandbox.supervisor.modes.run_signals import RunStop, RunStopped


async def feed(*signums: int):
    for signum in signums:
        yield signum


def test_a_stop_signal_cancels_the_guarded_wait_and_raises_run_stopped_with_143():
    async def main() -> None:
        stop = RunStop()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: stop.serve(feed(signal.SIGTERM)))
            with pytest.raises(RunStopped) as caught, stop.guard():
                await trio.sleep_forever()
        assert caught.value.signum == signal.SIGTERM
        assert stop.exit_status == 143

    trio.run(main)


def test_a_guard_entered_after_the_stop_raises_at_once_and_sigint_means_130():
    async def main() -> None:
        stop = RunStop()
        stop.stop(signal.SIGINT)
        with pytest.raises(RunStopped), stop.guard():
            await trio.sleep_forever()
        assert stop.exit_status == 130

    trio.run(main)


def test_the_first_stop_aborts_once_and_later_ones_hurry(capsys):
    calls: list[str] = []
    stop = RunStop()
    stop.on_stop.append(lambda: calls.append("abort"))
    stop.on_hurry.append(lambda: calls.append("kill"))
    stop.stop(signal.SIGTERM)
    stop.stop(signal.SIGINT)
    stop.stop(signal.SIGTERM)
    assert calls == ["abort", "kill", "kill"]
    assert stop.exit_status == 143  # the first signal decides
    err = capsys.readouterr().err
    assert "SIGTERM received: stopping" in err and "SIGINT again" in err


def test_sighup_reloads_while_the_run_works_and_is_ignored_once_it_stops(capsys):
    reloads: list[int] = []

    async def reload() -> None:
        reloads.append(1)

    async def main() -> None:
        stop = RunStop()
        stop.reload = reload
        await stop.serve(feed(signal.SIGHUP, signal.SIGTERM, signal.SIGHUP, signal.SIGHUP))

    trio.run(main)
    assert reloads == [1]
    assert capsys.readouterr().err.count("SIGHUP ignored: the run is stopping") == 1


def test_a_signal_still_pending_when_the_receiver_closes_does_not_kill_the_process():
    """trio raises unconsumed signals again once its receiver closes; under the
    default action a SIGHUP would end pi after its clean-up (exit 129). Run in a
    child interpreter: a failure must not take the test session down."""
    code = """
import os, signal, trio
from pi_sandbox.supervisor.modes.run_signals import RunStop

# The default action, whatever the test run inherited (under nohup SIGHUP is
# ignored, which would make this pass without proving anything).
signal.signal(signal.SIGHUP, signal.SIG_DFL)
stop = RunStop()

async def main():
    with stop.receiving():
        os.kill(os.getpid(), signal.SIGHUP)
        await trio.sleep(0)  # delivered to trio's handler, never consumed

before = signal.getsignal(signal.SIGHUP)
with stop.holding():
    trio.run(main)
assert signal.getsignal(signal.SIGHUP) == before  # handlers restored
print("alive")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (0, "alive\n"), result.stderr


def test_control_a_plain_trio_receiver_lets_a_pending_sighup_kill_the_process():
    code = """
import os, signal, trio

# The default action, whatever the test run inherited (nohup ignores SIGHUP, and
# an ignored disposition is inherited: the pending signal would then kill nothing).
signal.signal(signal.SIGHUP, signal.SIG_DFL)

async def main():
    with trio.open_signal_receiver(signal.SIGHUP):
        os.kill(os.getpid(), signal.SIGHUP)
        await trio.sleep(0)

trio.run(main)
print("alive")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == -signal.SIGHUP and "alive" not in result.stdout


def test_a_stop_signal_the_parent_ignores_stays_ignored_but_sighup_is_always_handled():
    code = """
import signal
from pi_sandbox.supervisor.modes.run_signals import RunStop

signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
stop = RunStop()
with stop.holding():
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN
    assert signal.SIGTERM in stop.signals() and signal.SIGINT not in stop.signals()
assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr
