"""Prompt templates: loading, argument parsing and expansion (issue 6 "Prompt templates", case 9)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pi_sandbox.resources.prompt_templates import (
    PromptTemplate,
    expand_prompt_command,
    expand_template,
    load_prompt_templates,
    parse_arguments,
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def template(body: str, name: str = "t") -> PromptTemplate:
    return PromptTemplate(name, "", None, body, Path(f"/{name}.md"), "test")


def names(templates: list[PromptTemplate]) -> list[str]:
    return [t.name for t in templates]


# Case 9


def test_case_9_a_symlinked_template_file_loads(tmp_path):
    target = write(tmp_path / "elsewhere" / "real.md", "Review $1\n")
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "review.md").symlink_to(target)

    templates, diagnostics = load_prompt_templates([(prompts, "project")])

    assert names(templates) == ["review"]
    assert templates[0].body == "Review $1\n"
    assert templates[0].path == prompts / "review.md"
    assert diagnostics == []


def test_case_9_dangling_link_and_link_to_a_directory_are_skipped_without_aborting(tmp_path):
    prompts = tmp_path / "prompts"
    write(prompts / "a.md", "first")
    (prompts / "b.md").symlink_to(tmp_path / "missing.md")
    (tmp_path / "dir.md").mkdir()
    (prompts / "c.md").symlink_to(tmp_path / "dir.md")
    write(prompts / "d.md", "last")

    templates, diagnostics = load_prompt_templates([(prompts, "project")])

    assert names(templates) == ["a", "d"]
    assert all(d.type != "error" for d in diagnostics)
    assert all(d.path == prompts / "b.md" for d in diagnostics)


def test_case_9_review_expands_positional_and_all_arguments(tmp_path):
    write(tmp_path / "review.md", "Review $1 carefully. Extra: $@")
    templates, _ = load_prompt_templates([(tmp_path, "project")])

    assert (
        expand_prompt_command("/review a.py now", templates)
        == "Review a.py carefully. Extra: a.py now"
    )


def test_case_9_an_argument_containing_a_placeholder_is_not_re_expanded():
    t = template("first=$1 second=$2 all=$ARGUMENTS")

    assert expand_template(t, "'$2' x") == "first=$2 second=x all=$2 x"
    assert expand_template(template("$@ | ${@:1}"), "'$1 $@' '${@:2}'") == (
        "$1 $@ ${@:2} | $1 $@ ${@:2}"
    )


# Expansion


def test_slices_take_from_the_nth_argument_with_an_optional_length():
    assert expand_template(template("${@:2}"), "a b c d") == "b c d"
    assert expand_template(template("${@:1:2}"), "a b c d") == "a b"
    assert expand_template(template("${@:3:5}"), "a b c d") == "c d"
    assert expand_template(template("[${@:9}]"), "a b") == "[]"


def test_missing_positional_arguments_become_empty_and_multi_digit_positions_work():
    assert expand_template(template("<$1><$2><$3>"), "only") == "<only><><>"
    args = " ".join(f"a{i}" for i in range(1, 12))
    assert expand_template(template("$10 $11 $1"), args) == "a10 a11 a1"


def test_arguments_and_at_both_mean_all_arguments_joined_by_spaces():
    assert expand_template(template("$ARGUMENTS / $@"), '  x   "y z" ') == "x y z / x y z"
    assert expand_template(template("[$ARGUMENTS]"), "") == "[]"


def test_unknown_commands_and_plain_text_expand_to_none():
    templates = [template("body", name="review")]
    assert expand_prompt_command("/other a", templates) is None
    assert expand_prompt_command("review a", templates) is None
    assert expand_prompt_command("/review", templates) == "body"
    assert expand_prompt_command("/review\nline two", [template("$@", "review")]) == "line two"


# Argument parsing


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a b  c", ["a", "b", "c"]),
        ("", []),
        ('"two words" x', ["two words", "x"]),
        ("'single $1' x", ["single $1", "x"]),
        ('say "it\'s"', ["say", "it's"]),
        (r"a\ b c", ["a b", "c"]),
        (r'"q\"uote"', ['q"uote']),
        ('a "" b', ["a", "", "b"]),
        ("#not-a-comment", ["#not-a-comment"]),
        ('a "unbalanced rest of it', ["a", "unbalanced rest of it"]),
        ("a 'open", ["a", "open"]),
        ("trailing\\", ["trailing\\"]),
        ("$(touch /tmp/x) `id`", ["$(touch", "/tmp/x)", "`id`"]),
    ],
)
def test_arguments_are_split_quote_aware_like_a_shell_without_running_anything(text, expected):
    assert parse_arguments(text) == expected


# Loading


def test_description_falls_back_to_the_first_non_empty_line_cut_to_60_characters(tmp_path):
    long_line = "x" * 80
    write(tmp_path / "long.md", f"\n\n  {long_line}\nsecond\n")
    write(tmp_path / "short.md", "Short first line\nmore")
    write(tmp_path / "empty.md", "")

    templates, diagnostics = load_prompt_templates([(tmp_path, "user")])
    by_name = {t.name: t for t in templates}

    assert by_name["long"].description == "x" * 60 + "..."
    assert by_name["short"].description == "Short first line"
    assert by_name["empty"].description == ""
    assert diagnostics == []


def test_frontmatter_gives_description_and_argument_hint_and_is_stripped_from_the_body(tmp_path):
    write(
        tmp_path / "fix.md",
        "---\ndescription: Fix an issue\nargument-hint: <issue> [scope]\n---\nFix $1\n",
    )

    [fix], diagnostics = load_prompt_templates([(tmp_path, "user")])

    assert fix.description == "Fix an issue"
    assert fix.argument_hint == "<issue> [scope]"
    assert fix.body == "Fix $1\n"
    assert fix.source == "user"
    assert diagnostics == []


def test_frontmatter_with_crlf_and_a_bom_parses(tmp_path):
    path = tmp_path / "win.md"
    path.write_bytes(b"\xef\xbb\xbf---\r\ndescription: |\r\n  Two\r\n  lines\r\n---\r\nBody $1\r\n")

    [win], diagnostics = load_prompt_templates([(path, "cli")])

    assert win.description == "Two\nlines"
    assert win.body == "Body $1\n"
    assert diagnostics == []


def test_invalid_yaml_gives_a_diagnostic_naming_the_file_and_others_still_load(tmp_path):
    write(tmp_path / "bad.md", "---\ndescription: [unclosed\n---\nbody")
    write(tmp_path / "list.md", "---\n- a\n- b\n---\nbody")
    write(tmp_path / "good.md", "---\ndescription: ok\n---\nbody")

    templates, diagnostics = load_prompt_templates([(tmp_path, "project")])

    assert names(templates) == ["good"]
    assert sorted(d.path.name for d in diagnostics) == ["bad.md", "list.md"]
    assert all(d.type == "error" and str(d.path) in d.message for d in diagnostics)
    bad = next(d for d in diagnostics if d.path.name == "bad.md")
    assert "line 2" in bad.message  # the line after the fence


def test_an_unquoted_colon_in_the_description_is_read_leniently(tmp_path):
    write(tmp_path / "fic.md", "---\ndescription: Fiction helper. Trigger words: plot.\n---\nx")

    [fic], diagnostics = load_prompt_templates([(tmp_path, "user")])

    assert fic.description == "Fiction helper. Trigger words: plot."
    assert diagnostics == []


def test_an_unclosed_fence_is_body_text_not_frontmatter(tmp_path):
    write(tmp_path / "rule.md", "---\nJust a rule above\n")

    [rule], diagnostics = load_prompt_templates([(tmp_path, "user")])

    assert rule.body == "---\nJust a rule above\n"
    assert diagnostics == []


def test_a_name_collision_keeps_the_first_and_names_both_paths(tmp_path):
    project = write(tmp_path / "project" / "review.md", "project")
    user = write(tmp_path / "user" / "review.md", "user")

    templates, diagnostics = load_prompt_templates(
        [(project.parent, "project"), (user.parent, "user")]
    )

    assert [t.body for t in templates] == ["project"]
    [collision] = diagnostics
    assert collision.type == "collision"
    assert collision.path == user
    assert collision.other_path == project
    assert str(user) in collision.message and str(project) in collision.message


def test_the_same_file_reached_twice_is_deduplicated_silently(tmp_path):
    real = write(tmp_path / "prompts" / "review.md", "body")
    (tmp_path / "alias.md").symlink_to(real)

    templates, diagnostics = load_prompt_templates(
        [(real.parent, "project"), (real, "settings"), (tmp_path / "alias.md", "cli")]
    )

    assert names(templates) == ["review"]
    assert diagnostics == []


def test_directories_are_not_scanned_recursively_and_only_md_files_count(tmp_path):
    write(tmp_path / "top.md", "top")
    write(tmp_path / "nested" / "deep.md", "deep")
    write(tmp_path / "notes.txt", "text")

    templates, _ = load_prompt_templates([(tmp_path, "project")])

    assert names(templates) == ["top"]


def test_missing_sources_are_skipped_silently(tmp_path):
    write(tmp_path / "a.md", "a")

    templates, diagnostics = load_prompt_templates(
        [(tmp_path / "absent", "user"), (tmp_path, "project")]
    )

    assert names(templates) == ["a"]
    assert diagnostics == []


def test_oversized_and_non_utf8_files_are_skipped_with_a_diagnostic(tmp_path):
    write(tmp_path / "big.md", "x" * 2000)
    (tmp_path / "binary.md").write_bytes(b"\xff\xfe\x00bad")
    write(tmp_path / "ok.md", "fine")

    templates, diagnostics = load_prompt_templates([(tmp_path, "user")], max_file_bytes=1000)

    assert names(templates) == ["ok"]
    assert sorted(d.path.name for d in diagnostics) == ["big.md", "binary.md"]
    assert all(d.type == "error" for d in diagnostics)


def test_a_fifo_in_a_prompts_directory_does_not_hang_the_scan(tmp_path):
    os.mkfifo(tmp_path / "pipe.md")
    write(tmp_path / "ok.md", "fine")

    templates, _ = load_prompt_templates([(tmp_path, "user"), (tmp_path / "pipe.md", "cli")])

    assert names(templates) == ["ok"]


def test_files_per_source_are_bounded_with_a_warning(tmp_path):
    for i in range(5):
        write(tmp_path / f"t{i}.md", "body")

    templates, diagnostics = load_prompt_templates([(tmp_path, "user")], max_files_per_source=3)

    assert names(templates) == ["t0", "t1", "t2"]
    [limit] = diagnostics
    assert limit.type == "warning" and limit.path == tmp_path


def test_a_non_string_description_warns_and_falls_back_to_the_first_line(tmp_path):
    write(tmp_path / "n.md", "---\ndescription: 42\n---\nFirst line\n")

    [n], diagnostics = load_prompt_templates([(tmp_path, "user")])

    assert n.description == "First line"
    assert [d.type for d in diagnostics] == ["warning"]


def test_a_template_with_an_alias_bomb_is_skipped_with_a_diagnostic(tmp_path):
    # Issue 13 §4: frontmatter goes through the bounded YAML walker; other templates load.
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{name}: &{name} [{', '.join([f'*{prev}'] * 10)}]\n"
        for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
    )
    prompts = tmp_path / "prompts"
    bad = write(prompts / "bomb.md", f"---\ndescription: Bomb.\n{bomb}---\nBody\n")
    write(prompts / "ok.md", "---\ndescription: Fine.\nalias: &x [a]\nagain: *x\n---\nBody\n")

    templates, diagnostics = load_prompt_templates([(prompts, "project")])

    assert names(templates) == ["ok"]
    [diagnostic] = diagnostics
    assert diagnostic.type == "error" and diagnostic.path == bad
    assert diagnostic.message.startswith(f"{bad}: line ")
    assert "YAML nodes (alias expansion?)" in diagnostic.message
