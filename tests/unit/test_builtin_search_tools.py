"""The built-in ``grep``, ``find``, multi-edit ``edit``, image ``read`` and ``ls`` as pi
1.6.0 has them (issue 17 §6), run on real files by the tool worker's code.

The rg/fd equality tests run both engines on one fixture tree; they need ``rg``
(the ``ripgrep`` wheel of the test extras puts it next to this interpreter) and
``fd`` (no wheel exists: skipped with that reason unless fd is installed).
"""

from __future__ import annotations

import base64
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from pi_sandbox.policies import evaluate_tool_call, load_policies, path_exclusions
from pi_sandbox.protocol.edit_arguments import prepare_edit_arguments
from pi_sandbox.worker import search_tools
from pi_sandbox.worker.builtin_tools import IMAGE_MAX_BASE64_BYTES, execute_tool

BIN_DIRS = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
RG = shutil.which("rg", path=BIN_DIRS)
FD = shutil.which("fd", path=BIN_DIRS) or shutil.which("fdfind", path=BIN_DIRS)

PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def run(name: str, params: dict, cwd: Path, **kwargs) -> dict:
    kwargs.setdefault("cancel", threading.Event())
    return execute_tool(name, params, cwd=str(cwd), **kwargs)


def text_of(result: dict) -> str:
    return "".join(block.get("text", "") for block in result["content"])


def no_cancel() -> None:
    return None


@pytest.fixture
def no_programs(monkeypatch):
    """Neither rg nor fd on PATH: the Python fallbacks run."""
    monkeypatch.setenv("PATH", "/nonexistent")


@pytest.fixture
def tree(tmp_path) -> Path:
    """A small project: .gitignore'd files, a nested negation, hidden files, a
    binary file, a .git directory, CRLF and long lines."""
    root = tmp_path / "proj"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "build").mkdir()
    (root / ".hidden").mkdir()
    (root / ".git").mkdir()
    (root / "docs").mkdir()
    (root / ".gitignore").write_text("build/\n*.log\n")
    (root / "src" / "a.py").write_text("def foo():\n    return 1\n\n\nfoo()\nFOO = 2\n")
    (root / "src" / "pkg" / "b.py").write_text("import foo\n" + "x = 0\n" * 6 + "foo.bar()\n")
    (root / "src" / "pkg" / ".gitignore").write_text("!keep.log\n")
    (root / "src" / "pkg" / "keep.log").write_text("foo kept\n")
    (root / "src" / "w.txt").write_bytes(b"first\r\nfoo crlf\r\nlast\r\n")
    (root / "build" / "out.txt").write_text("foo built\n")
    (root / "debug.log").write_text("foo logged\n")
    (root / ".hidden" / "h.txt").write_text("foo hidden\n")
    (root / ".git" / "config").write_text("foo in git\n")
    (root / "docs" / "bin.dat").write_bytes(b"foo\0binary\n")
    (root / "docs" / "Long.md").write_text("foo " + "y" * 700 + "\n")
    return root


# --- grep -----------------------------------------------------------------------------


def test_grep_prints_path_line_and_text_relative_to_the_search_directory(tree, no_programs):
    result = run("grep", {"pattern": "foo"}, tree)
    assert not result["is_error"]
    assert text_of(result) == (
        ".hidden/h.txt:1: foo hidden\n"
        f"docs/Long.md:1: foo {'y' * 496}... [truncated]\n"
        "src/a.py:1: def foo():\n"
        "src/a.py:5: foo()\n"
        "src/pkg/b.py:1: import foo\n"
        "src/pkg/b.py:8: foo.bar()\n"
        "src/pkg/keep.log:1: foo kept\n"
        "src/w.txt:2: foo crlf\n"
        "\n"
        "[Some lines truncated to 500 chars. Use read tool to see full lines]"
    )
    assert result["details"]["linesTruncated"] is True
    assert result["details"]["engine"] == "python"


def test_grep_respects_gitignore_and_skips_git_and_binary_files(tree, no_programs):
    text = text_of(run("grep", {"pattern": "foo"}, tree))
    assert "build/out.txt" not in text  # build/ ignored
    assert "debug.log" not in text  # *.log ignored...
    assert "src/pkg/keep.log" in text  # ...but re-included by a nested !keep.log
    assert "in git" not in text
    assert "bin.dat" not in text
    assert ".hidden/h.txt" in text  # hidden files are searched, as pi's --hidden


def test_grep_context_lines_use_dashes_and_merge_overlapping_windows(tree, no_programs):
    result = run("grep", {"pattern": "foo", "path": "src/a.py", "context": 2}, tree)
    assert text_of(result) == (
        "a.py:1: def foo():\n"
        "a.py-2-     return 1\n"
        "a.py-3- \n"
        "a.py-4- \n"
        "a.py:5: foo()\n"
        "a.py-6- FOO = 2"
    )


def test_grep_match_limit_keeps_trailing_context_and_says_how_to_see_more(tree, no_programs):
    result = run("grep", {"pattern": "foo", "path": "src", "limit": 1, "context": 1}, tree)
    assert text_of(result) == (
        "a.py:1: def foo():\n"
        "a.py-2-     return 1\n"
        "\n"
        "[1 matches limit reached. Use limit=2 for more, or refine pattern]"
    )
    assert result["details"]["matchLimitReached"] == 1


def test_grep_exactly_at_the_limit_reports_no_limit_notice(tree, no_programs):
    result = run("grep", {"pattern": "bar", "path": "src", "limit": 1}, tree)
    assert text_of(result) == "pkg/b.py:8: foo.bar()"
    assert "matchLimitReached" not in result["details"]


def test_grep_ignore_case_literal_and_glob(tree, no_programs):
    insensitive = text_of(
        run("grep", {"pattern": "^foo", "path": "src/a.py", "ignoreCase": True}, tree)
    )
    assert insensitive == "a.py:5: foo()\na.py:6: FOO = 2"
    literal = text_of(run("grep", {"pattern": "foo.bar()", "literal": True}, tree))
    assert literal == "src/pkg/b.py:8: foo.bar()"
    by_name = text_of(run("grep", {"pattern": "foo", "glob": "*.py"}, tree))
    assert by_name.splitlines() == [
        "src/a.py:1: def foo():",
        "src/a.py:5: foo()",
        "src/pkg/b.py:1: import foo",
        "src/pkg/b.py:8: foo.bar()",
    ]
    anchored = text_of(run("grep", {"pattern": "foo", "glob": "src/pkg/*.py"}, tree))
    assert anchored.splitlines() == ["src/pkg/b.py:1: import foo", "src/pkg/b.py:8: foo.bar()"]


def test_grep_byte_limit_notice_is_pis(tmp_path, no_programs):
    (tmp_path / "many.txt").write_text("".join(f"match {i:04d}\n" for i in range(300)))
    result = run("grep", {"pattern": "match", "limit": 1000}, tmp_path, max_output_bytes=1024)
    text = text_of(result)
    assert text.endswith("\n\n[1.0KB limit reached]")
    assert len(text.split("\n\n[")[0].encode()) <= 1024
    assert result["details"]["truncation"]["truncated"] is True


def test_grep_without_matches_and_with_a_bad_pattern_or_path(tree, no_programs):
    assert text_of(run("grep", {"pattern": "zzz-none"}, tree)) == "No matches found"
    bad = run("grep", {"pattern": "("}, tree)
    assert bad["is_error"] and "Invalid regex '('" in text_of(bad)
    missing = run("grep", {"pattern": "x", "path": "nope"}, tree)
    assert missing["is_error"] and text_of(missing) == f"Path not found: {tree / 'nope'}"


def test_a_pathological_regex_costs_linear_time_in_the_fallback(tmp_path, no_programs):
    # (a+)+$ against "aaaa…!" backtracks exponentially in Python's re (22 a's: ~0.3 s,
    # each more doubles it); RE2 answers 2 MB of such lines at once.
    (tmp_path / "evil.txt").write_text(("a" * 2000 + "!\n") * 1000)
    started = time.monotonic()
    result = run("grep", {"pattern": "(a+)+$"}, tmp_path)
    assert text_of(result) == "No matches found"
    assert time.monotonic() - started < 10  # generous for a busy machine; typically ~0.05 s


def test_grep_is_aborted_by_cancel(tree, no_programs):
    cancel = threading.Event()
    cancel.set()
    result = run("grep", {"pattern": "foo"}, tree, cancel=cancel)
    assert result["is_error"] and "aborted" in text_of(result)


GREP_CASES = [
    {"pattern": "foo"},
    {"pattern": "foo", "context": 1},
    {"pattern": "foo", "context": 3, "limit": 2},
    {"pattern": "FOO", "ignoreCase": True, "limit": 3},
    {"pattern": "foo.bar()", "literal": True},
    {"pattern": "foo", "glob": "*.py"},
    {"pattern": "foo", "glob": "!*.py"},
    {"pattern": "foo", "glob": "src/**/*.log"},
    {"pattern": "foo", "glob": "!pkg"},
    {"pattern": "foo", "glob": "!src/pkg"},
    {"pattern": "foo", "glob": "src"},
    {"pattern": "foo", "glob": "src/**"},
    {"pattern": "foo", "glob": "**/pkg/*"},
    {"pattern": "foo", "path": "src"},
    {"pattern": "foo", "path": "src/w.txt"},
    {"pattern": "foo", "path": "docs/bin.dat"},
    {"pattern": "(a+)+$"},
    {"pattern": "^$", "path": "src"},
    {"pattern": "^    return"},
    {"pattern": "\\)$"},
    {"pattern": "(?i)FOO", "limit": 4},
]


@pytest.mark.skipif(RG is None, reason="rg is not installed (pip install ripgrep)")
@pytest.mark.parametrize("params", GREP_CASES, ids=[str(c) for c in GREP_CASES])
def test_ripgrep_and_the_fallback_give_the_same_output(tree, params, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(RG))
    path = str(tree / params.get("path", "."))
    with_rg = search_tools.grep_files(params, path, cancel=no_cancel, use_rg=True)
    fallback = search_tools.grep_files(params, path, cancel=no_cancel, use_rg=False)
    assert with_rg[1]["engine"] == "rg" and fallback[1]["engine"] == "python"
    assert with_rg[0] == fallback[0]


@pytest.mark.skipif(RG is None, reason="rg is not installed (pip install ripgrep)")
def test_a_nul_byte_past_the_first_64_kib_ends_the_file_for_both_engines(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(RG))
    (tmp_path / "late.txt").write_bytes(
        b"foo early\n" + b"x" * 70_000 + b"\nfoo before nul\n\0\nfoo after\n"
    )
    (tmp_path / "z-big.txt").write_bytes(b"foo\n" * 200_000)  # 800 KB, read whole
    params = {"pattern": "foo", "limit": 5}
    with_rg = search_tools.grep_files(params, str(tmp_path), cancel=no_cancel, use_rg=True)
    fallback = search_tools.grep_files(params, str(tmp_path), cancel=no_cancel, use_rg=False)
    assert with_rg[0] == fallback[0]
    assert "late.txt:1: foo early" in fallback[0] and "foo after" not in fallback[0]


# --- find -----------------------------------------------------------------------------


def test_find_matches_names_at_any_depth_and_marks_directories(tree, no_programs):
    assert text_of(run("find", {"pattern": "*.py"}, tree)) == "src/a.py\nsrc/pkg/b.py"
    assert text_of(run("find", {"pattern": "pkg"}, tree)) == "src/pkg/"


def test_find_path_patterns_are_anchored_at_the_search_directory(tree, no_programs):
    assert text_of(run("find", {"pattern": "pkg/*.py"}, tree)) == "No files found matching pattern"
    assert text_of(run("find", {"pattern": "src/pkg/*.py"}, tree)) == "src/pkg/b.py"
    assert text_of(run("find", {"pattern": "**/b.py"}, tree)) == "src/pkg/b.py"
    assert text_of(run("find", {"pattern": "./src/*.py"}, tree)) == "src/a.py"


def test_find_is_smart_case(tree, no_programs):
    assert text_of(run("find", {"pattern": "long.md"}, tree)) == "docs/Long.md"
    assert text_of(run("find", {"pattern": "LONG.md"}, tree)) == "No files found matching pattern"


def test_find_respects_gitignore_includes_hidden_and_skips_git(tree, no_programs):
    listed = text_of(run("find", {"pattern": "*"}, tree)).splitlines()
    assert listed == [
        ".gitignore",
        ".hidden/",
        ".hidden/h.txt",
        "docs/",
        "docs/Long.md",
        "docs/bin.dat",
        "src/",
        "src/a.py",
        "src/pkg/",
        "src/pkg/.gitignore",
        "src/pkg/b.py",
        "src/pkg/keep.log",
        "src/w.txt",
    ]


def test_find_limit_notice_is_pis(tree, no_programs):
    result = run("find", {"pattern": "*", "path": "src", "limit": 2}, tree)
    assert text_of(result) == (
        "a.py\npkg/\n\n[2 results limit reached. Use limit=4 for more, or refine pattern]"
    )
    assert result["details"]["resultLimitReached"] == 2


def test_find_of_a_missing_directory_is_an_error(tree, no_programs):
    result = run("find", {"pattern": "*", "path": "gone"}, tree)
    assert result["is_error"] and text_of(result) == f"Path not found: {tree / 'gone'}"


@pytest.mark.skipif(FD is None, reason="fd is not installed and has no pip wheel to install")
@pytest.mark.parametrize("pattern", ["*", "*.py", "src/**/*.py", "pkg", "LONG.md"])
def test_fd_and_the_fallback_give_the_same_output(tree, pattern, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(FD))
    params = {"pattern": pattern}
    with_fd = search_tools.find_files(params, str(tree), cancel=no_cancel, use_fd=True)
    fallback = search_tools.find_files(params, str(tree), cancel=no_cancel, use_fd=False)
    assert with_fd[0] == fallback[0]


def fake_program(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)


def test_fd_output_is_relativised_sorted_limited_and_filtered(tmp_path, monkeypatch):
    # fd itself has no wheel; a stand-in printing what fd prints checks our side of it.
    ws = tmp_path / "ws"
    (ws / "b").mkdir(parents=True)
    (ws / "secret").mkdir()
    listing = "\\n".join(f"{ws}/{p}" for p in ["z.py", "b/", "b/a.py", "secret/k.py", "a.py"])
    fake_program(tmp_path / "bin", "fd", f'printf "{listing}\\n"\n')
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    hidden = search_tools.PathFilter([r"secret(?:/.*)?"], str(ws))
    text, details = search_tools.find_files(
        {"pattern": "*", "limit": 3}, str(ws), cancel=no_cancel, hidden=hidden
    )
    assert details["engine"] == "fd"
    assert (
        text
        == "a.py\nb/\nb/a.py\n\n[3 results limit reached. Use limit=6 for more, or refine pattern]"
    )
    assert details["hiddenByPolicy"] == 1


def test_an_abort_stops_a_search_program_that_prints_nothing(tmp_path, monkeypatch):
    fake_program(tmp_path / "bin", "rg", f"exec {shutil.which('sleep')} 60\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    cancel = threading.Event()
    timer = threading.Timer(0.2, cancel.set)
    timer.start()
    started = time.monotonic()
    try:
        result = run("grep", {"pattern": "x"}, tmp_path, cancel=cancel)
    finally:
        timer.cancel()
    assert result["is_error"] and text_of(result) == "Operation aborted"
    assert time.monotonic() - started < 20  # not the program's 60 s


def test_a_ripgrep_failure_is_an_error_quoting_it(tmp_path, monkeypatch):
    fake_program(tmp_path / "bin", "rg", "echo 'regex parse error: oops' >&2; exit 2\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    result = run("grep", {"pattern": "x"}, tmp_path)
    assert result["is_error"] and text_of(result) == "regex parse error: oops"


# --- policy exclusions ----------------------------------------------------------------

DENY_SECRETS = """
version: 1
tool_call:
  rules:
    - id: secrets
      tool: [read]
      path: ["secret/**", "**/.env"]
      decision: deny
      reason: secrets stay secret
"""


def policy_from(tmp_path: Path, text: str):
    file = tmp_path / "policy.yaml"
    file.write_text(text)
    return load_policies([file])


def test_a_read_path_rule_also_decides_grep_find_and_ls_on_that_path(tmp_path):
    policy = policy_from(tmp_path, DENY_SECRETS)
    for tool in ("grep", "find", "ls"):
        args = {"pattern": "x", "path": "secret"} if tool != "ls" else {"path": "secret"}
        assert evaluate_tool_call(policy, tool, args, workspace=tmp_path).decision == "deny"
        root = {"pattern": "x"} if tool != "ls" else {}
        assert evaluate_tool_call(policy, tool, root, workspace=tmp_path).decision == "allow"
    assert (
        evaluate_tool_call(policy, "write", {"path": "secret/x"}, workspace=tmp_path).decision
        == "allow"
    )


def test_path_exclusions_hide_what_deny_rules_cover_below_the_search_root(tmp_path, no_programs):
    policy = policy_from(tmp_path, DENY_SECRETS)
    exclusions = path_exclusions(policy, "grep")
    assert len(exclusions) == 2
    assert path_exclusions(policy, "write") == ()
    ws = tmp_path / "ws"
    (ws / "secret").mkdir(parents=True)
    (ws / "secret" / "k.txt").write_text("needle SENTINEL\n")
    (ws / "app").mkdir()
    (ws / "app" / ".env").write_text("needle TOKEN\n")
    (ws / "app" / "main.py").write_text("needle = 1\n")
    (ws / "link").symlink_to(ws / "secret")
    grep = run("grep", {"pattern": "needle"}, ws, exclusions=exclusions)
    assert text_of(grep) == "app/main.py:1: needle = 1"
    assert grep["details"]["hiddenByPolicy"] >= 2
    found = text_of(run("find", {"pattern": "*"}, ws, exclusions=exclusions))
    assert found.splitlines() == ["app/", "app/main.py"]  # the link into secret/ is hidden too
    listed = text_of(run("ls", {}, ws, exclusions=exclusions))
    assert listed.splitlines() == ["app/"]
    # The control: without the exclusions the sentinel is found.
    assert "SENTINEL" in text_of(run("grep", {"pattern": "needle"}, ws))


@pytest.mark.skipif(RG is None, reason="rg is not installed (pip install ripgrep)")
def test_ripgrep_output_is_filtered_by_the_exclusions_too(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(RG))
    policy = policy_from(tmp_path, DENY_SECRETS)
    ws = tmp_path / "ws"
    (ws / "secret").mkdir(parents=True)
    (ws / "secret" / "k.txt").write_text("needle SENTINEL\n")
    (ws / "main.py").write_text("needle = 1\n")
    result = run(
        "grep", {"pattern": "needle", "context": 2}, ws, exclusions=path_exclusions(policy, "grep")
    )
    assert result["details"]["engine"] == "rg"
    assert text_of(result) == "main.py:1: needle = 1"


def test_an_exclusion_that_does_not_compile_fails_closed(tmp_path):
    result = run("grep", {"pattern": "x"}, tmp_path, exclusions=["("])
    assert result["is_error"]
    assert "Cannot apply the policy's path rules" in text_of(result)


# --- edit with edits[] ----------------------------------------------------------------


def test_edit_applies_several_disjoint_edits_matched_against_the_original(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("a = 1\nb = 2\nc = 3\n")
    edits = [
        {"oldText": "c = 3", "newText": "c = 30"},
        # "a = 1" only exists in the original: edits are not applied one after another.
        {"oldText": "a = 1", "newText": "a = 1\nb = 2 # copy"},
    ]
    result = run("edit", {"path": "m.py", "edits": edits}, tmp_path)
    assert not result["is_error"], text_of(result)
    assert text_of(result) == "Successfully replaced 2 block(s) in m.py."
    assert f.read_text() == "a = 1\nb = 2 # copy\nb = 2\nc = 30\n"
    assert result["details"]["firstChangedLine"] == 2
    assert result["details"]["edits"] == 2
    assert "+c = 30" in result["details"]["patch"]


def test_edit_with_a_failing_middle_edit_changes_nothing(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("one\ntwo\nthree\n")
    before = f.stat()
    edits = [
        {"oldText": "one", "newText": "1"},
        {"oldText": "missing", "newText": "x"},
        {"oldText": "three", "newText": "3"},
    ]
    result = run("edit", {"path": "m.py", "edits": edits}, tmp_path)
    assert result["is_error"]
    assert text_of(result) == (
        f"Could not find edits[1] in {f}. The oldText must match exactly including all "
        "whitespace and newlines."
    )
    assert result["details"]["failed_edit"] == 1
    assert f.read_text() == "one\ntwo\nthree\n"
    assert f.stat().st_mtime_ns == before.st_mtime_ns


def test_edit_names_the_edit_that_is_not_unique_or_overlaps(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("x = 1\nx = 1\ny = 2\n")
    dup = run(
        "edit",
        {
            "path": "m.py",
            "edits": [{"oldText": "y", "newText": "z"}, {"oldText": "x = 1", "newText": "q"}],
        },
        tmp_path,
    )
    assert text_of(dup).startswith(
        f"Found 2 occurrences of edits[1] in {f}. Each oldText must be unique."
    )
    f.write_text("alpha beta gamma\n")
    overlap = run(
        "edit",
        {
            "path": "m.py",
            "edits": [
                {"oldText": "alpha beta", "newText": "A"},
                {"oldText": "beta gamma", "newText": "B"},
            ],
        },
        tmp_path,
    )
    assert text_of(overlap) == (
        f"edits[0] and edits[1] overlap in {f}. Merge them into one edit or target disjoint regions."
    )
    assert f.read_text() == "alpha beta gamma\n"


def test_edit_keeps_crlf_for_each_of_several_edits(tmp_path):
    f = tmp_path / "w.txt"
    f.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    edits = [{"oldText": "one\ntwo", "newText": "1\n2"}, {"oldText": "three", "newText": "3\n3.5"}]
    assert not run("edit", {"path": "w.txt", "edits": edits}, tmp_path)["is_error"]
    assert f.read_bytes() == b"1\r\n2\r\n3\r\n3.5\r\n"


def test_edit_argument_forms_models_send_become_edits(tmp_path):
    assert prepare_edit_arguments({"path": "p", "oldText": "a", "newText": "b"}) == {
        "path": "p",
        "edits": [{"oldText": "a", "newText": "b"}],
    }
    as_string = prepare_edit_arguments({"path": "p", "edits": '[{"oldText": "a", "newText": "b"}]'})
    assert as_string["edits"] == [{"oldText": "a", "newText": "b"}]
    single = prepare_edit_arguments({"path": "p", "edits": {"oldText": "a", "newText": "b"}})
    assert single["edits"] == [{"oldText": "a", "newText": "b"}]
    (tmp_path / "f").write_text("a\n")
    legacy = run("edit", {"path": "f", "oldText": "a", "newText": "b"}, tmp_path)
    assert not legacy["is_error"] and (tmp_path / "f").read_text() == "b\n"
    empty = run("edit", {"path": "f", "edits": []}, tmp_path)
    assert empty["is_error"] and "edits must contain at least one replacement" in text_of(empty)


# --- read of images -------------------------------------------------------------------

IMAGES = {
    "png": (PNG_1X1, "image/png"),
    "jpeg": (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 32, "image/jpeg"),
    "gif": (b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "image/gif"),
    "webp": (b"RIFF\x1a\x00\x00\x00WEBPVP8 " + b"\x00" * 16, "image/webp"),
}


@pytest.mark.parametrize("kind", sorted(IMAGES))
def test_read_returns_an_image_recognised_by_its_magic_bytes(tmp_path, kind):
    data, mime = IMAGES[kind]
    (tmp_path / "picture.bin").write_bytes(data)  # the name's extension does not matter
    result = run("read", {"path": "picture.bin"}, tmp_path)
    assert not result["is_error"]
    assert result["content"] == [
        {"type": "text", "text": f"Read image file [{mime}]"},
        {"type": "image", "data": base64.b64encode(data).decode(), "mimeType": mime},
    ]
    assert result["details"]["mimeType"] == mime


def test_read_of_an_image_over_the_inline_limit_gives_pis_omitted_note(tmp_path):
    big = PNG_1X1 + b"\x00" * (IMAGE_MAX_BASE64_BYTES // 4 * 3 + 10)
    (tmp_path / "big.png").write_bytes(big)
    result = run("read", {"path": "big.png"}, tmp_path)
    assert [block["type"] for block in result["content"]] == ["text"]
    assert text_of(result).startswith(
        "Read image file [image/png]\n"
        "[Image omitted: could not be resized below the inline image size limit.]"
    )
    assert result["details"]["omitted"] is True


def test_read_of_a_bmp_or_animated_png_is_not_inlined(tmp_path):
    bmp = b"BM" + (70).to_bytes(4, "little") + b"\x00" * 4 + (54).to_bytes(4, "little")
    bmp += (40).to_bytes(4, "little") + b"\x00" * 52
    (tmp_path / "a.bmp").write_bytes(bmp)
    result = run("read", {"path": "a.bmp"}, tmp_path)
    assert text_of(result) == (
        "Read image file [image/bmp]\n"
        "[Image omitted: could not be converted to a supported inline image format.]"
    )
    apng = PNG_1X1[:33] + b"\x00\x00\x00\x08acTL" + b"\x00" * 12 + PNG_1X1[33:]
    (tmp_path / "anim.png").write_bytes(apng)
    assert run("read", {"path": "anim.png"}, tmp_path)["is_error"]  # binary, as pi


# --- ls -------------------------------------------------------------------------------


def test_ls_lists_dotfiles_and_marks_directories(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / ".env").write_text("")
    (tmp_path / "A.txt").write_text("")
    assert text_of(run("ls", {}, tmp_path)) == ".env\nA.txt\nb/"


def test_ls_byte_limit_notice_is_pis(tmp_path):
    for i in range(50):
        (tmp_path / f"file-{i:03d}.txt").write_text("")
    result = run("ls", {}, tmp_path, max_output_bytes=100)
    assert text_of(result).endswith("\n\n[100B limit reached]")
