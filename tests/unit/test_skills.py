"""Skill discovery, validation, collisions, prompt index and ``/skill:`` (issue 6)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from pi_sandbox.resources.frontmatter import parse_frontmatter
from pi_sandbox.resources.skills import (
    Skill,
    SkillSource,
    expand_skill_command,
    format_skills_for_prompt,
    load_skills,
)

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "agent-skills"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def skill_md(name: str | None, description: str = "Does a thing.", extra: str = "") -> str:
    name_line = f"name: {name}\n" if name else ""
    return f"---\n{name_line}description: {description}\n{extra}---\n# Body of {name}\n"


def by_type(diagnostics, kind):
    return [d for d in diagnostics if d.type == kind]


# --- issue 6 cases ------------------------------------------------------------------


def test_case_1_project_skill_beats_user_and_package_and_user_beats_package(tmp_path):
    project = write(tmp_path / "project/review/SKILL.md", skill_md("review", "Project."))
    user = write(tmp_path / "user/review/SKILL.md", skill_md("review", "User."))
    package = write(tmp_path / "package/review/SKILL.md", skill_md("review", "Package."))
    sources = [
        SkillSource(tmp_path / "project", "project"),
        SkillSource(tmp_path / "user", "user"),
        SkillSource(tmp_path / "package", "package"),
    ]

    skills, diagnostics = load_skills(sources)
    assert [(s.name, s.description, s.source) for s in skills] == [
        ("review", "Project.", "project")
    ]
    collisions = by_type(diagnostics, "collision")
    assert [d.path for d in collisions] == [user, package]
    assert all(str(project) in d.message for d in collisions)
    assert str(user) in collisions[0].message

    skills, diagnostics = load_skills(sources[1:])
    assert [(s.description, s.source) for s in skills] == [("User.", "user")]
    [collision] = by_type(diagnostics, "collision")
    assert collision.path == package
    assert str(package) in collision.message and str(user) in collision.message


def test_case_2_readme_and_broken_plain_markdown_are_silently_not_skills(tmp_path):
    root = tmp_path / "skills"
    write(root / "README.md", "# Skills\n\nNothing to see.\n")
    write(root / "broken.md", "---\ndescription: [unclosed\nname: x\n---\nbody\n")
    write(root / "root-skill.md", skill_md("root-skill"))
    write(root / "nested/deeper/SKILL.md", skill_md("nested-skill"))

    skills, diagnostics = load_skills([SkillSource(root, "project", "pi")])

    assert sorted(s.name for s in skills) == ["nested-skill", "root-skill"]
    assert diagnostics == []


def test_case_3_block_scalar_keeps_both_lines_and_crlf_parses(tmp_path):
    block = "---\nname: block\ndescription: |\n  First line.\n  Second line.\n---\nbody\n"
    write(tmp_path / "s/block/SKILL.md", block)
    crlf = tmp_path / "s/crlf/SKILL.md"
    crlf.parent.mkdir(parents=True)
    crlf.write_bytes(b"\xef\xbb\xbf---\r\nname: crlf\r\ndescription: Windows file.\r\n---\r\nx\r\n")

    skills, diagnostics = load_skills([SkillSource(tmp_path / "s", "user")])

    assert diagnostics == []
    descriptions = {s.name: s.description for s in skills}
    assert descriptions == {"block": "First line.\nSecond line.", "crlf": "Windows file."}


def test_case_3_invalid_yaml_in_skill_md_gives_one_line_numbered_error(tmp_path):
    bad = write(
        tmp_path / "s/bad/SKILL.md",
        '---\nname: bad\nlicense: x\ndescription: "unterminated\n---\nbody\n',
    )
    write(tmp_path / "s/good/SKILL.md", skill_md("good"))

    skills, diagnostics = load_skills([SkillSource(tmp_path / "s", "project")])

    assert [s.name for s in skills] == ["good"]
    [error] = diagnostics
    assert error.type == "error" and error.path == bad
    _, _, parse_error = parse_frontmatter(bad.read_text(), path=bad)
    assert parse_error is not None and parse_error.line >= 4
    assert f"{bad}:{parse_error.line}:" in error.message


def test_case_3_missing_description_in_skill_md_names_file_and_line(tmp_path):
    blank = write(tmp_path / "s/blank/SKILL.md", "---\nname: blank\ndescription: '  '\n---\n")
    none = write(tmp_path / "s/none/SKILL.md", "# no frontmatter at all\n")

    skills, diagnostics = load_skills([SkillSource(tmp_path / "s", "project")])

    assert skills == []
    messages = {d.path: d.message for d in diagnostics}
    assert [d.type for d in diagnostics] == ["error", "error"]
    assert f"{blank}:3:" in messages[blank]
    assert f"{none}:1:" in messages[none]


def test_case_4_unquoted_colon_in_description_is_read_leniently(tmp_path):
    text = (
        "---\nname: fiction\n"
        "description: Fiction helper. Trigger words: character, scene, plot.\n---\nbody\n"
    )
    write(tmp_path / "s/fiction/SKILL.md", text)
    write(tmp_path / "s/other/SKILL.md", skill_md("other"))
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(text.split("---\n")[1])

    skills, diagnostics = load_skills([SkillSource(tmp_path / "s", "project")])

    assert diagnostics == []
    assert {s.name: s.description for s in skills} == {
        "fiction": "Fiction helper. Trigger words: character, scene, plot.",
        "other": "Does a thing.",
    }


def test_case_4_strict_mode_reports_the_colon_line():
    text = "---\nname: f\ndescription: Fiction helper. Trigger words: a, b.\n---\n"
    data, _, error = parse_frontmatter(text, path="x", lenient=False)
    assert data is None and error is not None and error.line == 3


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"the shared corpus is not at {CORPUS}")
@pytest.mark.parametrize("mode", ["pi", "agents"])
def test_case_8_every_corpus_skill_loads_without_warnings(mode):
    expected = {}
    for path in sorted(CORPUS.glob("*/SKILL.md")):
        frontmatter = yaml.safe_load(path.read_text(encoding="utf-8").split("---\n")[1])
        expected[frontmatter["name"]] = (frontmatter["description"].strip(), path)
    assert expected, "the corpus holds no SKILL.md"

    skills, diagnostics = load_skills([SkillSource(CORPUS, "user", mode)])

    assert diagnostics == []
    assert {s.name: (s.description, s.path) for s in skills} == expected
    assert not any(s.path.parent.name == "reference" for s in skills)


# --- discovery details --------------------------------------------------------------


def test_the_same_file_through_a_symlink_is_silently_one_skill(tmp_path):
    real = write(tmp_path / "a/dedupe/SKILL.md", skill_md("dedupe"))
    (tmp_path / "b").mkdir()
    os.symlink(real.parent, tmp_path / "b/linked")
    os.symlink(tmp_path / "a", tmp_path / "a/dedupe-loop")  # a loop must not hang

    skills, diagnostics = load_skills(
        [SkillSource(tmp_path / "a", "project"), SkillSource(tmp_path / "b", "user")]
    )

    assert [(s.name, s.path) for s in skills] == [("dedupe", real)]
    assert diagnostics == []


def test_symlinked_skill_directory_and_file_are_followed(tmp_path):
    target = write(tmp_path / "elsewhere/linked/SKILL.md", skill_md("linked"))
    plain = write(tmp_path / "elsewhere/plain.md", skill_md("plain"))
    root = tmp_path / "skills"
    root.mkdir()
    os.symlink(target.parent, root / "linked")
    os.symlink(plain, root / "plain.md")
    os.symlink(tmp_path / "missing", root / "dangling.md")

    skills, diagnostics = load_skills([SkillSource(root, "user")])

    assert sorted(s.name for s in skills) == ["linked", "plain"]
    assert diagnostics == []


def test_ignore_files_apply_relative_to_the_scan_root(tmp_path):
    root = tmp_path / "skills"
    write(root / ".gitignore", "drafts/\n/top-only.md\n")
    write(root / ".ignore", "*.wip.md\n")
    write(root / "sub/.fdignore", "secret/\n!keep/\n")
    write(root / "drafts/d/SKILL.md", skill_md("draft"))
    write(root / "top-only.md", skill_md("top-only"))
    write(root / "x.wip.md", skill_md("wip"))
    write(root / "sub/secret/SKILL.md", skill_md("secret"))
    write(root / "sub/keep/SKILL.md", skill_md("keep"))
    write(root / "sub/top-only/SKILL.md", skill_md("nested-top-only"))
    write(root / "kept.md", skill_md("kept"))

    skills, diagnostics = load_skills([SkillSource(root, "project")])

    assert sorted(s.name for s in skills) == ["keep", "kept", "nested-top-only"]
    assert diagnostics == []


def test_an_ignored_skill_md_does_not_make_its_directory_a_skill_root(tmp_path):
    root = tmp_path / "skills"
    write(root / ".gitignore", "outer/SKILL.md\n")
    write(root / "outer/SKILL.md", skill_md("outer"))
    write(root / "outer/inner/SKILL.md", skill_md("inner"))

    skills, _ = load_skills([SkillSource(root, "project")])

    assert [s.name for s in skills] == ["inner"]


def test_hidden_directories_and_node_modules_are_skipped(tmp_path):
    root = tmp_path / "skills"
    write(root / ".hidden/SKILL.md", skill_md("hidden"))
    write(root / "node_modules/pkg/SKILL.md", skill_md("vendored"))
    write(root / "visible/SKILL.md", skill_md("visible"))

    skills, diagnostics = load_skills([SkillSource(root, "project")])

    assert [s.name for s in skills] == ["visible"]
    assert diagnostics == []


def test_a_skill_root_is_not_descended_into(tmp_path):
    root = tmp_path / "skills"
    write(root / "outer/SKILL.md", skill_md("outer"))
    write(root / "outer/references/SKILL.md", skill_md("inner"))
    write(root / "outer/references/guide.md", skill_md("guide"))

    for mode in ("pi", "agents"):
        skills, _ = load_skills([SkillSource(root, "user", mode)])
        assert [s.name for s in skills] == ["outer"]


def test_agents_mode_ignores_root_markdown_but_finds_nested_markdown(tmp_path):
    root = tmp_path / ".agents/skills"
    write(root / "root.md", skill_md("root"))
    write(root / "vendor/review.md", skill_md(None, "Reviews."))

    skills, diagnostics = load_skills([SkillSource(root, "project", "agents")])

    assert [(s.name, s.source) for s in skills] == [("review", "project")]
    assert diagnostics == []


def test_missing_name_falls_back_to_the_parent_directory_and_bad_names_only_warn(tmp_path):
    root = tmp_path / "skills"
    write(root / "from-dir/SKILL.md", skill_md(None))
    bad = write(root / "bad/SKILL.md", skill_md("Bad--Name-", "x" * 1025))

    skills, diagnostics = load_skills([SkillSource(root, "project")])

    assert sorted(s.name for s in skills) == ["Bad--Name-", "from-dir"]
    warnings = by_type(diagnostics, "warning")
    assert len(warnings) == 4 and {d.path for d in warnings} == {bad}
    assert diagnostics == warnings


def test_explicit_file_source_and_missing_explicit_path(tmp_path):
    single = write(tmp_path / "one.md", skill_md("one"))
    missing = tmp_path / "nope"

    skills, diagnostics = load_skills(
        [
            SkillSource(single, "cli", explicit=True),
            SkillSource(missing, "cli", explicit=True),
            SkillSource(tmp_path / "absent-auto", "user"),
        ]
    )

    assert [s.name for s in skills] == ["one"]
    [warning] = diagnostics
    assert warning.type == "warning" and warning.path == missing


def test_discovery_stops_at_the_entry_bound_with_one_warning(tmp_path):
    root = tmp_path / "skills"
    for index in range(30):
        write(root / f"s{index:02d}/SKILL.md", skill_md(f"s{index:02d}"))

    user = tmp_path / "user-skills"
    write(user / "mine/SKILL.md", skill_md("mine"))
    skills, diagnostics = load_skills(
        [SkillSource(root, "project"), SkillSource(user, "user")], max_entries=20
    )

    # The bound is per source: a huge project directory does not hide the user's skills.
    assert [s.name for s in skills[:-1]] == [f"s{index:02d}" for index in range(len(skills) - 1)]
    assert 0 < len(skills) - 1 < 30 and skills[-1].name == "mine"
    [warning] = diagnostics
    assert warning.type == "warning" and "20" in warning.message and str(root) in warning.message


# --- prompt index and /skill: -------------------------------------------------------


def make_skill(tmp_path, name, description, *, hidden=False, body="Do it.\n") -> Skill:
    path = write(tmp_path / name / "SKILL.md", f"---\nname: x\ndescription: y\n---\n{body}")
    return Skill(name, description, path, path.parent, "project", hidden)


def test_prompt_index_escapes_xml_and_leaves_out_hidden_skills(tmp_path):
    shown = make_skill(tmp_path, "a&b", "Use <when> \"asked\" & 'told'")
    hidden = make_skill(tmp_path, "secret", "Hidden.", hidden=True)

    prompt = format_skills_for_prompt([shown, hidden])

    assert "<name>a&amp;b</name>" in prompt
    assert (
        "<description>Use &lt;when&gt; &quot;asked&quot; &amp; &apos;told&apos;</description>"
        in prompt
    )
    assert f"<location>{tmp_path}/a&amp;b/SKILL.md</location>" in prompt
    assert "secret" not in prompt and "Hidden." not in prompt
    assert prompt.count("<skill>") == 1
    assert format_skills_for_prompt([hidden]) == ""


def test_skill_command_expands_body_base_dir_and_arguments(tmp_path):
    skill = make_skill(tmp_path, "review", "Reviews.", hidden=True, body="Step one.\r\n")

    text, error = expand_skill_command("/skill:review src/a.py  now", [skill])

    assert error is None
    assert text == (
        f'<skill name="review" location="{skill.path}">\n'
        f"References are relative to {skill.base_dir}.\n\nStep one.\n</skill>\n\n"
        "src/a.py  now"
    )
    assert "description:" not in text
    assert expand_skill_command("/skill:review", [skill])[0].endswith("</skill>")


def test_skill_command_with_unknown_skill_or_unreadable_file_leaves_text_unchanged(tmp_path):
    skill = make_skill(tmp_path, "gone", "Gone.")
    skill.path.unlink()

    assert expand_skill_command("hello /skill:gone", [skill]) == ("hello /skill:gone", None)
    text, error = expand_skill_command("/skill:nope arg", [skill])
    assert text == "/skill:nope arg" and "nope" in error
    text, error = expand_skill_command("/skill:gone arg", [skill])
    assert text == "/skill:gone arg" and str(skill.path) in error


def test_a_fifo_or_oversized_file_in_a_skills_directory_never_blocks_the_scan(tmp_path):
    import os

    from pi_sandbox.resources.skills import MAX_FILE_BYTES, SkillSource, load_skills

    root = tmp_path / "skills"
    (root / "good").mkdir(parents=True)
    (root / "good" / "SKILL.md").write_text("---\nname: good\ndescription: Works.\n---\nbody\n")
    (root / "big").mkdir()
    (root / "big" / "SKILL.md").write_text(
        "---\nname: big\ndescription: Too big.\n---\n" + "x" * (MAX_FILE_BYTES + 1)
    )
    os.mkfifo(root / ".gitignore")  # would block a plain read
    skills, diagnostics = load_skills([SkillSource(root, "project")])
    assert [s.name for s in skills] == ["good"]
    assert any("larger than" in d.message for d in diagnostics)


def test_a_confined_source_refuses_files_and_directories_resolving_outside(tmp_path):
    project = tmp_path / "proj"
    outside = tmp_path / "outside"
    write(outside / "secret/SKILL.md", skill_md("secret", "Outside secret."))
    write(outside / "loose.md", skill_md("loose", "Outside loose."))
    write(project / ".pi/skills/own/SKILL.md", skill_md("own"))
    (project / ".pi/skills/linked-dir").symlink_to(outside / "secret")
    (project / ".pi/skills/loose.md").symlink_to(outside / "loose.md")
    inside = write(project / "docs/inside.md", skill_md("inside", "Inside."))
    (project / ".pi/skills/inside.md").symlink_to(inside)

    skills, diagnostics = load_skills(
        [SkillSource(project / ".pi/skills", "project", confine=project)]
    )

    assert sorted(s.name for s in skills) == ["inside", "own"]
    refused = sorted(d.path.name for d in diagnostics if d.type == "error")
    assert refused == ["linked-dir", "loose.md"]
    assert all("outside" in d.message for d in diagnostics)
    # Unconfined (the user's own directory), the same links are followed.
    followed, _ = load_skills([SkillSource(project / ".pi/skills", "user")])
    assert sorted(s.name for s in followed) == ["inside", "loose", "own", "secret"]


@pytest.mark.parametrize(
    "pattern,path,expected",
    [
        ("*.md", "a.md", True),
        ("*.md", "dir/a.md", False),
        ("**/x", "x", True),
        ("**/x", "a/b/x", True),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**", "a/x/y", True),
        ("drafts", "drafts", True),
        ("d?afts", "drafts", True),
        ("d?afts", "d/afts", False),
        ("[a-c]x", "bx", True),
        ("[!a-c]x", "bx", False),
        ("[!a-c]x", "zx", True),
        ("\\*x", "*x", True),
        ("\\*x", "ax", False),
        ("a*b*c", "aXXbYYc", True),
        ("a*b*c", "aXXbYY", False),
        ("**/" * 18 + "x", "a/" * 16 + "y", False),
    ],
)
def test_ignore_globs_match_as_gitignore_says(pattern, path, expected):
    from pi_sandbox.resources.skills import _Glob

    assert _Glob(pattern).match(path) is expected


def test_a_pathological_ignore_pattern_does_not_stall_discovery(tmp_path):
    import time

    root = tmp_path / "skills"
    deep = root
    for level in range(16):
        deep = deep / f"d{level}"
    write(deep / "leaf.md", "x")
    write(root / "ok/SKILL.md", skill_md("ok"))
    write(root / ".gitignore", "**/" * 18 + "x\n" + "*" * 40 + "a" * 40 + "\n")
    # CPU seconds of this process, not the wall clock, which a saturated machine
    # stretches several times over (issue 13 §7).
    started = time.process_time()
    skills, _ = load_skills([SkillSource(root, "project")])
    assert time.process_time() - started < 5
    assert [s.name for s in skills] == ["ok"]


def test_many_costly_ignore_patterns_are_bounded_with_a_warning(tmp_path):
    import time

    root = tmp_path / "skills"
    for index in range(300):
        write(root / f"d{index:03d}/x/y/z/leaf.md", "x")
    write(root / "ok/SKILL.md", skill_md("ok"))
    lines = ["*a" * 60 + f"*{index}" for index in range(2000)]
    write(root / ".gitignore", "\n".join(lines) + "\n")
    started = time.process_time()  # CPU seconds (issue 13 §7), not the wall clock
    skills, diagnostics = load_skills([SkillSource(root, "project")])
    assert time.process_time() - started < 10
    assert [s.name for s in skills] == ["ok"]
    assert any("ignore files are too costly" in d.message for d in diagnostics)


# --- bounded frontmatter (issue 13 §4) -------------------------------------------------

_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 10)}]\n"
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)
HOSTILE_FRONTMATTER = {
    "alias-bomb": ("description: Bomb.\n" + _BOMB, "YAML nodes (alias expansion?)"),
    "recursive-alias": ("description: Loop.\nself: &self [*self]\n", "recursive YAML alias"),
    "too-deep": ("description: Deep.\nx: " + "[" * 100 + "]" * 100 + "\n", "nested deeper"),
    "too-many-nodes": ("description: Many.\ntags: [" + "x, " * 20_000 + "x]\n", "YAML nodes"),
    "bad-date": ("description: Date.\nmetadata:\n  when: 2024-13-45\n", "month must be"),
    "bad-tag": ("description: Tag.\nflag: !!bool maybe\n", "'maybe' is not a valid bool"),
}


def test_hostile_skill_frontmatter_is_skipped_with_a_diagnostic_and_good_skills_load(tmp_path):
    import time

    root = tmp_path / "skills"
    paths = {
        name: write(root / name / "SKILL.md", f"---\nname: {name}\n{block}---\n# body\n")
        for name, (block, _) in HOSTILE_FRONTMATTER.items()
    }
    # Control: anchors and aliases as authors use them still load.
    aliases = "defaults: &d {shell: bash}\nmetadata:\n  build: *d\n  lint: *d\n"
    write(root / "aliases" / "SKILL.md", skill_md("aliases", extra=aliases))
    write(root / "good" / "SKILL.md", skill_md("good"))

    started = time.monotonic()
    skills, diagnostics = load_skills([SkillSource(root, "project")])
    assert time.monotonic() - started < 30  # a safety net only; the errors are the test

    assert sorted(s.name for s in skills) == ["aliases", "good"]
    messages = {d.path: d.message for d in diagnostics if d.type == "error"}
    assert set(messages) == set(paths.values())
    for name, (_, expected) in HOSTILE_FRONTMATTER.items():
        message = messages[paths[name]]
        assert message.startswith(f"{paths[name]}:") and "skill skipped: invalid YAML" in message
        assert expected in message
        line = int(message.split(":")[1])  # the file's line, after the path
        assert 3 <= line <= 14, message
