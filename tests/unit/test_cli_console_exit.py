"""The ``pi`` command leaves without tearing the interpreter down (issue 20: 60–90 ms
after every run's last output), but only after what that teardown would have done
that matters: other threads joined, ``atexit`` functions run, output flushed, and
`main`'s status kept (`cli.console_main`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from pi_sandbox import __version__


def run_console(prelude: str, *args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(prelude) + textwrap.dedent(
        f"""
        import sys
        from pi_sandbox import cli
        sys.argv = ["pi", *{list(args)!r}]
        cli.console_main()
        print("NOT-REACHED")
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )


def test_the_status_and_the_output_of_main_are_kept(tmp_path: Path) -> None:
    done = run_console("", "--version", tmp_path=tmp_path)
    assert done.returncode == 0
    assert __version__ in done.stdout and "NOT-REACHED" not in done.stdout
    usage = run_console("", "--modle", "x", tmp_path=tmp_path)
    assert usage.returncode == 2
    assert "--modle" in usage.stderr and "NOT-REACHED" not in usage.stdout


SCRIPT = """\
- tool_calls:
    - {name: bash, arguments: {command: echo PROGRESS-OUTPUT}}
- text: FINAL-ANSWER
"""


def run_with_closed(
    fd: int, *args: str, tmp_path: Path, fill: bool = True, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``pi ARGS…`` (through `cli.console_main`) started with descriptor ``fd`` closed,
    as cron or ``pi … 2>&-`` start it; with ``fill=False`` the filling is switched off
    (the control)."""
    (tmp_path / "s.yaml").write_text(SCRIPT)
    code = (
        "import sys\n"
        "from pi_sandbox import cli\n"
        + ("" if fill else "cli._fill_closed_standard_descriptors = lambda: None\n")
        + f"sys.argv = ['pi', *{list(args)!r}]\n"
        "cli.console_main()\n"
    )
    wrapper = (
        "import os, sys\n"
        f"os.close({fd})\n"
        "os.execv(sys.executable, [sys.executable, '-c', sys.argv[1]])\n"
    )
    env = {**os.environ, "PI_CODING_AGENT_DIR": str(tmp_path / "agent"), "HOME": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-c", wrapper, code],
        capture_output=True,  # the wrapper closes ``fd`` in the child
        input=stdin,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )


RUN = ("-p", "--no-sandbox", "--no-session", "--model", "scripted", "--script", "s.yaml", "go")


def test_with_stderr_closed_progress_is_discarded_not_written_into_the_answer(tmp_path):
    done = run_with_closed(2, *RUN, tmp_path=tmp_path)
    assert done.returncode == 0
    assert done.stdout.strip() == "FINAL-ANSWER"


def test_control_without_filling_progress_lands_in_the_answer(tmp_path):
    # red team of 0.8.0: print() to a None sys.stderr writes to stdout.
    done = run_with_closed(2, *RUN, tmp_path=tmp_path, fill=False)
    assert "PROGRESS-OUTPUT" in done.stdout and "FINAL-ANSWER" in done.stdout


def test_with_stdout_closed_the_answer_that_cannot_be_written_is_status_1(tmp_path):
    for args in (RUN, ("--mode", "json", *RUN[1:]), ("--version",)):
        done = run_with_closed(1, *args, tmp_path=tmp_path)
        assert done.returncode == 1, (args, done.stderr)
        assert "pi: cannot write output" in done.stderr, args
        assert "Traceback" not in done.stderr, args


def test_with_stdout_closed_an_rpc_session_is_status_1_too(tmp_path):
    # second red team: the message was printed, but the status was 0.
    prompt = '{"type": "prompt", "id": "1", "message": "go"}\n'
    args = ("--mode", "rpc", "--no-sandbox", "--no-session", "--model", "scripted")
    done = run_with_closed(1, *args, "--script", "s.yaml", tmp_path=tmp_path, stdin=prompt)
    assert done.returncode == 1, done.stderr
    assert "pi: cannot write output" in done.stderr and "Traceback" not in done.stderr


def test_with_stdin_closed_a_run_reads_nothing_and_answers(tmp_path):
    done = run_with_closed(0, *RUN, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "FINAL-ANSWER"
    assert "PROGRESS-OUTPUT" in done.stderr


def test_atexit_functions_and_other_threads_finish_before_the_process_leaves(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "thread-finished"
    prelude = f"""
        import atexit, tempfile, threading, time
        from pathlib import Path
        kept = tempfile.TemporaryDirectory(dir={str(tmp_path)!r}, prefix="finalized-")
        atexit.register(lambda: print("ATEXIT-RAN", flush=True))
        def late():
            time.sleep(0.3)
            Path({str(marker)!r}).write_text("done")
        threading.Thread(target=late).start()
    """
    done = run_console(prelude, "--version", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "ATEXIT-RAN" in done.stdout
    assert marker.read_text() == "done"  # the non-daemon thread was joined
    # weakref.finalize callbacks (a TemporaryDirectory's cleanup) ran too
    assert not list(tmp_path.glob("finalized-*"))


def test_control_os_exit_alone_would_skip_them(tmp_path: Path) -> None:
    # What console_main guards against: leaving with os._exit straight away.
    code = textwrap.dedent(
        f"""
        import atexit, os, tempfile
        kept = tempfile.TemporaryDirectory(dir={str(tmp_path)!r}, prefix="finalized-")
        atexit.register(lambda: print("ATEXIT-RAN", flush=True))
        os._exit(0)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "ATEXIT-RAN" not in done.stdout
    assert list(tmp_path.glob("finalized-*"))


def test_the_installed_pi_command_is_console_main() -> None:
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    assert 'pi = "pi_sandbox.cli:console_main"' in pyproject.read_text()
