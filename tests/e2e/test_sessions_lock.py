"""Two processes continuing one session (issue 15 "Robustness"): the second is refused
at start with a message naming the file and the holder's pid; without the lock (the
control) both append and one's turns silently drop out of the other's history.

Real processes and a real file: our CLI holding a session open in RPC mode, and
small writer processes using `SessionWriter` directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pi_sandbox.supervisor.sessions.session_file import SessionWriter

pytestmark = pytest.mark.e2e

DEADLINE_S = 60

WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from pi_sandbox.supervisor.sessions import session_file as sf
    mode, path, count, tag = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    if mode == "nolock":
        sf._lock = lambda fd, path: None  # the control: the protection switched off
    try:
        writer = sf.SessionWriter.resume(path)
    except sf.SessionLockedError as exc:
        print("refused", exc, flush=True)
        sys.exit(9)
    print("ready", flush=True)
    sys.stdin.readline()
    for n in range(count):
        writer.append_message({"role": "user", "content": f"{tag}{n}", "timestamp": 0})
    writer.close()
    """
)


def env(root: Path) -> dict[str, str]:
    out = {**os.environ, "HOME": str(root / "home"), "PI_CODING_AGENT_DIR": str(root / "agent")}
    out.pop("OPENAI_API_KEY", None)
    return out


def a_session(root: Path) -> Path:
    writer = SessionWriter.create(root / "agent", root)
    writer.append_message({"role": "user", "content": "first", "timestamp": 0})
    writer.close()
    assert writer.path is not None
    return writer.path


def flock_holders(path: Path) -> set[int]:
    st = path.stat()
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    holders = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" not in fields and len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == inode:
            holders.add(int(fields[4]))
    return holders


def test_a_second_process_continuing_a_session_is_refused_naming_file_and_pid(tmp_path):
    (tmp_path / "home").mkdir()
    session = a_session(tmp_path)
    script = tmp_path / "script.yaml"
    script.write_text('- text: "ok"\n')
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pi_sandbox.cli",
            "--session",
            str(session),
            "--script",
            str(script),
            "--mode",
            "rpc",
        ],
        cwd=tmp_path,
        env=env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while first.pid not in flock_holders(session):
            assert first.poll() is None, first.stderr.read().decode() if first.stderr else ""
            assert time.monotonic() < deadline, "the first process never locked the session"
            time.sleep(0.05)
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "pi_sandbox.cli",
                "--session",
                str(session),
                "--script",
                str(script),
                "-p",
                "hello",
            ],
            cwd=tmp_path,
            env=env(tmp_path),
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
        assert second.returncode == 2
        assert str(session) in second.stderr and f"process {first.pid}" in second.stderr
        assert "in use" in second.stderr and "Traceback" not in second.stderr
    finally:
        assert first.stdin is not None
        first.stdin.close()
        first.wait(timeout=DEADLINE_S)
    # The lock was the reason: with the first process gone, the same command runs.
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "pi_sandbox.cli",
            "--session",
            str(session),
            "--script",
            str(script),
            "-p",
            "hello",
        ],
        cwd=tmp_path,
        env=env(tmp_path),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert again.returncode == 0, again.stderr
    texts = [
        json.loads(line).get("message", {}).get("content")
        for line in session.read_text().splitlines()
    ]
    assert "first" in texts and any(isinstance(t, list) and t[0]["text"] == "hello" for t in texts)


def run_two_writers(tmp_path: Path, mode: str) -> tuple[Path, list[subprocess.CompletedProcess]]:
    session = a_session(tmp_path)
    procs = []
    for tag in ("a", "b"):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, mode, str(session), "200", tag],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "ready" (it holds the file) or "refused …"
        procs.append((proc, line))
    for proc, _ in procs:
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
    results = []
    for proc, line in procs:
        out, _ = proc.communicate(timeout=DEADLINE_S)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, line + out, ""))
    return session, results


def test_with_the_lock_the_second_writer_is_refused_and_the_history_stays_whole(tmp_path):
    session, (a, b) = run_two_writers(tmp_path, "lock")
    assert a.returncode == 0 and a.stdout.startswith("ready")
    assert b.returncode == 9 and b.stdout.startswith("refused") and str(session) in b.stdout
    resumed = SessionWriter.resume(session)
    resumed.close()
    assert len(resumed.messages()) == 1 + 200  # every appended entry is on the branch


def test_control_without_the_lock_both_append_and_one_writers_turns_leave_the_history(tmp_path):
    session, (a, b) = run_two_writers(tmp_path, "nolock")
    assert a.returncode == 0 and b.returncode == 0
    resumed = SessionWriter.resume(session)
    resumed.close()
    assert len(resumed.entries) == 1 + 400  # both wrote everything …
    contents = {m["content"][:1] for m in resumed.messages()[1:]}
    assert len(resumed.messages()) == 1 + 200 and len(contents) == 1  # … one branch survives


def test_continuing_a_damaged_session_is_one_clear_error_naming_file_and_line(tmp_path):
    (tmp_path / "home").mkdir()
    session = a_session(tmp_path)
    with session.open("a") as handle:
        handle.write('{"type": "message", "id": "torn-in-the-middle"\n')
        handle.write(
            '{"type": "label", "id": "l1", "parentId": null, "targetId": "x", "label": "y"}\n'
        )
    script = tmp_path / "script.yaml"
    script.write_text('- text: "ok"\n')
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "pi_sandbox.cli",
            "--session",
            str(session),
            "--script",
            str(script),
            "-p",
            "hi",
        ],
        cwd=tmp_path,
        env=env(tmp_path),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert refused.returncode == 2
    assert "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        f"pi: cannot open the session: {session}:3: not valid JSON: Expecting ',' delimiter: "
        "line 1 column 47 (char 46)"
    )
