"""The ``pi`` command leaves without tearing the interpreter down (issue 20: 60–90 ms
after every run's last output), but only after what that teardown would have done
that matters: other threads joined, ``atexit`` functions run, output flushed, and
`main`'s status kept (`cli.console_main`)."""

from __future__ import annotations

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


def test_a_closed_stdout_or_stderr_keeps_the_status(tmp_path: Path) -> None:
    # red team F2: Python sets sys.stdout/sys.stderr to None when the descriptor was
    # closed at start (cron, daemons); the run's status must stay main's.
    for closed in ("1", "2"):
        code = (
            "import os, sys\n"
            f"os.close({closed})\n"
            "os.execv(sys.executable, [sys.executable, '-c', "
            '\'import sys; from pi_sandbox import cli; sys.argv=["pi", "--version"]; '
            "cli.console_main()'])\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, (closed, done.stderr)
        assert "Traceback" not in done.stderr


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
