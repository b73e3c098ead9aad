"""Prompt assembly from the command line (issue 17 §5; pi docs cli.md) and the
tool-selection and option-typo helpers."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from pi_sandbox.errors import UsageError
from pi_sandbox.supervisor.agent.tool_selection import ToolSelection
from pi_sandbox.supervisor.modes.option_suggestions import closest_option
from pi_sandbox.supervisor.modes.prompt_input import build_prompt_input, image_mime_type

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


def test_piped_stdin_is_prepended_to_the_first_message_only(tmp_path: Path) -> None:
    prompts = build_prompt_input(["Review this", "and then this"], "diff --git a b\n", tmp_path)
    assert prompts.first == "diff --git a b\nReview this"
    assert prompts.rest == ["and then this"]


def test_text_files_are_inlined_with_their_absolute_name_and_images_attached(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.md").write_text("\ufeffhello\n", encoding="utf-8")
    (tmp_path / "shot.png").write_bytes(PNG)
    (tmp_path / "empty.txt").write_bytes(b"")
    prompts = build_prompt_input(
        ["@notes.md", "@shot.png", "@empty.txt", "What is this?"], None, tmp_path
    )
    assert prompts.first == (
        f'<file name="{tmp_path / "notes.md"}">\nhello\n\n</file>\n'
        f'<file name="{tmp_path / "shot.png"}"></file>\n'
        "What is this?"
    )
    assert prompts.images == [
        {"type": "image", "mimeType": "image/png", "data": base64.b64encode(PNG).decode()}
    ]


def test_a_missing_file_argument_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"argument @gone\.txt: no such file: .*gone\.txt"):
        build_prompt_input(["@gone.txt", "hi"], None, tmp_path)
    with pytest.raises(UsageError, match="not a regular file"):
        build_prompt_input([f"@{tmp_path}"], None, tmp_path)


def test_image_types_are_told_by_their_first_bytes() -> None:
    assert image_mime_type(PNG[:12]) == "image/png"
    assert image_mime_type(b"\xff\xd8\xff\xe0" + b"\x00" * 8) == "image/jpeg"
    assert image_mime_type(b"GIF89a" + b"\x00" * 6) == "image/gif"
    assert image_mime_type(b"RIFF\x00\x00\x00\x00WEBP") == "image/webp"
    assert image_mime_type(b"plain text!!") is None


def test_the_default_selection_is_pi_s_four_builtins_and_every_extension_tool() -> None:
    selection = ToolSelection.from_options()
    selection.builtins = frozenset({"read", "bash", "edit", "write", "ls", "grep", "find"})
    assert [t for t in ("read", "bash", "edit", "write", "ls", "grep") if t in selection] == [
        "read",
        "bash",
        "edit",
        "write",
    ]
    assert "my_extension_tool" in selection


def test_tools_patterns_replace_and_signed_entries_change_the_default() -> None:
    builtins = frozenset({"read", "bash", "edit", "write", "ls"})
    allow = ToolSelection.from_options(tools="re*,ext_*")
    allow.builtins = builtins
    assert {t for t in ("read", "bash", "ext_a", "other") if t in allow} == {"read", "ext_a"}
    signed = ToolSelection.from_options(tools="+ls,-write")
    signed.builtins = builtins
    assert {t for t in builtins | {"ext"} if t in signed} == {"read", "bash", "edit", "ls", "ext"}
    with pytest.raises(UsageError, match="cannot be mixed"):
        ToolSelection.from_options(tools="read,+ls")
    with pytest.raises(UsageError, match="exclude-tools for patterns"):
        ToolSelection.from_options(tools="-mcp__*")


def test_exclude_no_builtin_and_no_tools_apply_last() -> None:
    builtins = frozenset({"read", "bash", "edit", "write"})
    excluded = ToolSelection.from_options(tools="*", exclude_tools="b*")
    excluded.builtins = builtins
    assert "bash" not in excluded and "read" in excluded
    no_builtin = ToolSelection.from_options(no_builtin_tools=True)
    no_builtin.builtins = builtins
    assert "read" not in no_builtin and "ext" in no_builtin
    nothing = ToolSelection.from_options(no_tools=True)
    assert "ext" not in nothing


def test_the_default_tools_setting_changes_the_builtin_default() -> None:
    selection = ToolSelection.from_options(default_tools=["+grep", "-write"])
    selection.builtins = frozenset({"read", "bash", "edit", "write", "grep"})
    assert {t for t in selection.builtins if t in selection} == {"read", "bash", "edit", "grep"}
    assert selection.unknown(["read"]) == []
    named = ToolSelection.from_options(tools="read,nosuch,x*")
    assert named.unknown(["read"]) == ["nosuch"]


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("--modle", "--model"),
        ("--no-sandbx", "--no-sandbox"),
        ("--tols", "--tools"),
        ("--verbos", "--verbose"),
        ("--xyzzy", None),
    ],
)
def test_a_mistyped_option_suggests_the_one_it_is_close_to(typed: str, meant: str | None) -> None:
    known = ["--model", "--mode", "--no-sandbox", "--sandbox", "--tools", "--verbose", "-p"]
    assert closest_option(typed, known) == meant
