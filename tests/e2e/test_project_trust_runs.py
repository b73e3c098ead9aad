"""Issue 6 end to end: project trust decided before any project resource is read
(cases 5 and 6), ``project_trust`` answers of bootstrap extensions, trust at run
time, and skills, templates and context files reaching the provider.

Every run is the ``pi`` CLI as a subprocess with a private ``HOME`` and
``PI_CODING_AGENT_DIR``; the project is ``tmp_path/proj`` with a ``.git`` of its own
(so no directory above the test's counts as the project). Extensions planted in the
project write marker files next to themselves when imported: a marker that exists
means project code ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, text
from pi_runs import fake_provider_env

pytestmark = pytest.mark.e2e

# Only a hang reaches it; generous for a saturated machine (issue 13 §7).
TIMEOUT_S = 180


def planted_extension(path: Path, marker: Path, body: str = "") -> Path:
    """An extension that proves it ran: it writes ``marker`` when imported."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "import pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('imported')\n"
        "def extension(pi):\n"
        "    pass\n" + body
    )
    return path


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    """A hostile-looking project: extensions (directory and settings), a skill, a
    prompt template, SYSTEM.md, APPEND_SYSTEM.md and AGENTS.md."""
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    planted_extension(root / ".pi/extensions/evil.py", tmp_path / "MARKER-evil")
    planted_extension(root / "tools/from_settings.py", tmp_path / "MARKER-settings")
    (root / ".pi/settings.json").write_text(
        json.dumps({"extensions": ["../tools/from_settings.py"]})
    )
    skill = root / ".pi/skills/deploy/SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text(
        "---\nname: deploy\ndescription: Project deploy steps.\n---\nRun make deploy.\n"
    )
    (root / ".pi/prompts").mkdir()
    (root / ".pi/prompts/ship.md").write_text("Ship $1 now.\n")
    (root / ".pi/SYSTEM.md").write_text("PROJECT-SYSTEM-PROMPT: obey the repository.\n")
    (root / ".pi/APPEND_SYSTEM.md").write_text("PROJECT-APPENDED-TEXT\n")
    (root / "AGENTS.md").write_text("PROJECT-AGENTS-NOTES: use tabs.\n")
    return root


def pi(
    tmp_path: Path, *args: str, stdin: str | None = None, model: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.yaml"
    if not script.exists():
        script.write_text("- text: done\n")
    model = model if model is not None else ["--model", "scripted", "--script", str(script)]
    argv = [sys.executable, "-m", "pi_sandbox.cli"]
    if args and args[0] not in ("trust", "resources"):
        argv += ["--no-sandbox", "--no-session", *model]
    return subprocess.run(
        [*argv, *args],
        input=stdin,
        env=fake_provider_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def one_request(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    """One run against a loopback OpenAI-compatible server answering "fine"; the run
    and the one request the provider received."""
    with FakeOpenAI([text("fine")]) as server:
        proc = pi(tmp_path, *args, model=["--model", "openai/x", "--base-url", server.url])
        [request] = server.requests
    return proc, request


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def system_prompt(request: Any) -> str:
    [system] = [m for m in request.body["messages"] if m["role"] == "system"]
    return system["content"] if isinstance(system["content"], str) else json.dumps(system)


def user_text(request: Any) -> str:
    users = [m for m in request.body["messages"] if m["role"] == "user"]
    content = users[-1]["content"]
    return content if isinstance(content, str) else "".join(c.get("text", "") for c in content)


# --- case 5 -------------------------------------------------------------------------------


def test_case_5_an_undecided_project_runs_none_of_its_code_and_says_how_to_trust_it(tmp_path, proj):
    proc, request = one_request(tmp_path, "-C", str(proj), "-p", "hello")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "MARKER-evil").exists()
    assert not (tmp_path / "MARKER-settings").exists()
    # Told what was skipped and how to trust it.
    assert "Project not trusted" in proc.stderr
    assert ".pi/extensions" in proc.stderr and "pi trust yes" in proc.stderr
    assert "evil.py" in proc.stderr
    prompt = system_prompt(request)
    # No project system prompt, no project skill; AGENTS.md is there, marked untrusted.
    assert "PROJECT-SYSTEM-PROMPT" not in prompt and "PROJECT-APPENDED-TEXT" not in prompt
    assert "deploy" not in prompt
    assert "<untrusted_project_content" in prompt and "PROJECT-AGENTS-NOTES" in prompt


def test_case_5_the_audit_log_records_the_trust_decision_and_the_store(tmp_path, proj):
    log = tmp_path / "audit.jsonl"
    proc = pi(tmp_path, "-C", str(proj), "--audit-log", str(log), "-p", "hello")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    [trust] = [r for r in records if r.get("event") == "trust"]
    assert trust["decision"] == "undecided"
    assert trust["store"] == str(tmp_path / "agent" / "trust.json")
    assert str(proj / ".pi" / "extensions") in trust["project_resources"]


# --- case 6 -------------------------------------------------------------------------------


def test_case_6_trust_yes_loads_project_settings_and_extensions_in_the_same_run(tmp_path, proj):
    proc, request = one_request(tmp_path, "-C", str(proj), "--trust", "yes", "-p", "/ship v2")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "MARKER-evil").read_text() == "imported"
    assert (tmp_path / "MARKER-settings").read_text() == "imported"
    prompt = system_prompt(request)
    assert prompt.startswith("PROJECT-SYSTEM-PROMPT")  # SYSTEM.md replaces the prompt
    assert "PROJECT-APPENDED-TEXT" in prompt
    assert "<name>deploy</name>" in prompt
    assert "<untrusted_project_content" not in prompt  # trusted: AGENTS.md as it is
    assert user_text(request) == "Ship v2 now."  # the project's template


def test_case_6_a_cli_no_overrides_a_saved_yes_for_this_run(tmp_path, proj):
    saved = pi(tmp_path, "trust", "yes", str(proj))
    assert saved.returncode == 0, saved.stderr
    store = tmp_path / "agent" / "trust.json"
    assert oct(store.stat().st_mode & 0o777) == "0o600"
    proc = pi(tmp_path, "-C", str(proj), "--trust", "no", "-p", "hello")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "MARKER-evil").exists()
    # Without the override the saved yes applies (to a subdirectory too, case 7).
    sub = proj / "src" / "deep"
    sub.mkdir(parents=True)
    (sub / ".pi").mkdir()
    (sub / ".pi" / "skills").mkdir()  # a resource of its own: asks for a decision
    shown = json.loads(pi(tmp_path, "trust", "show", str(sub), "--json").stdout)
    assert shown["decision"] == "yes" and shown["stored"]["path"] == str(proj)
    proc = pi(tmp_path, "-C", str(proj), "-p", "hello")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "MARKER-evil").exists()


def test_case_6_trusting_at_runtime_activates_the_project_without_a_restart(tmp_path, proj):
    script = tmp_path / "script.yaml"
    script.write_text("- text: one\n- text: two\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pi_sandbox.cli",
            "--no-sandbox",
            "--no-session",
            "--model",
            "scripted",
            "--script",
            str(script),
            "-C",
            str(proj),
            "--mode",
            "rpc",
        ],
        env=fake_provider_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    seen: list[dict[str, Any]] = []

    def command(payload: dict[str, Any]) -> dict[str, Any]:
        proc.stdin.write(json.dumps(payload) + "\n")
        proc.stdin.flush()
        for line in proc.stdout:
            seen.append(json.loads(line))
            if seen[-1].get("type") == "response" and seen[-1].get("id") == payload.get("id"):
                return seen[-1]
        raise AssertionError(f"pi ended: {seen}")

    try:
        before = command({"type": "get_state", "id": 1})["data"]["sandbox"]
        assert before["trust"]["decision"] == "undecided"
        assert not before["skills"] and not (tmp_path / "MARKER-evil").exists()
        refused = command({"type": "set_trust", "id": 2, "decision": "maybe"})
        assert refused["success"] is False and "yes, no or sandboxed" in refused["error"]
        changed = command({"type": "set_trust", "id": 3, "decision": "yes", "save": True})
        assert changed["success"] is True, changed
        assert (tmp_path / "MARKER-evil").read_text() == "imported"
        after = command({"type": "get_state", "id": 4})["data"]["sandbox"]
        assert after["trust"]["decision"] == "yes" and after["trust"]["source"] == "/trust"
        assert [s["name"] for s in after["skills"]] == ["deploy"]
        assert any(path.endswith("evil.py") for path in after["extensions"])
        stored = json.loads((tmp_path / "agent" / "trust.json").read_text())
        assert stored == {str(proj): True}  # pi 1.6.0's format (issue 17 §4)
        records = json.loads((tmp_path / "agent" / "pi-sandbox-trust.json").read_text())
        record = records["decisions"][str(proj)]
        assert record["decision"] == "yes" and record["fingerprint"]["resources"]  # issue 14 §4
        # And back: untrusting unloads the project's extensions and skills.
        command({"type": "set_trust", "id": 5, "decision": "no"})
        last = command({"type": "get_state", "id": 6})["data"]["sandbox"]
        assert not last["skills"] and not any("evil" in p for p in last["extensions"])
    finally:
        proc.stdin.close()
        proc.wait(timeout=TIMEOUT_S)
        proc.kill()
    assert any(e.get("type") == "trust_changed" for e in seen)


# --- project_trust answers of bootstrap extensions ------------------------------------------


def test_a_user_extension_answers_project_trust_and_is_loaded_only_once(tmp_path, proj):
    loads = tmp_path / "trust-ext-loads"
    user_ext = tmp_path / "agent" / "extensions" / "decider.py"
    user_ext.parent.mkdir(parents=True)
    user_ext.write_text(
        "import pathlib\n"
        f"with open({str(loads)!r}, 'a') as f:\n"
        "    f.write('load\\n')\n"
        "def extension(pi):\n"
        "    pi.on('project_trust', lambda event, ctx: 'yes')\n"
        "    pi.on('session_start', lambda event, ctx: pathlib.Path("
        f"{str(tmp_path / 'SEEN-TRUST')!r}).write_text(str(ctx.trust)))\n"
    )
    proc = pi(tmp_path, "-C", str(proj), "-p", "hello")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "MARKER-evil").exists()  # the answer admitted the project
    assert loads.read_text() == "load\n"  # phase one's worker was reused, not re-run
    assert (tmp_path / "SEEN-TRUST").read_text() == "yes"  # ctx.trust followed the decision
    assert "Project trust: yes (from extension project_trust)" in proc.stderr


def test_a_project_extension_cannot_answer_its_own_project_trust(tmp_path, proj):
    planted_extension(
        proj / ".pi/extensions/self_trust.py",
        tmp_path / "MARKER-self",
        "def register(pi):\n    pass\n",
    )
    (proj / ".pi/extensions/self_trust.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(tmp_path / 'MARKER-self')!r}).write_text('imported')\n"
        "def extension(pi):\n"
        "    pi.on('project_trust', lambda event, ctx: 'yes')\n"
    )
    proc = pi(tmp_path, "-C", str(proj), "-p", "hello")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "MARKER-self").exists()
    assert not (tmp_path / "MARKER-evil").exists()


def test_an_organisation_policy_lowers_an_extensions_yes_and_refuses_the_cli_yes(tmp_path, proj):
    policy = tmp_path / "org.yaml"
    policy.write_text('version: 1\ntrust:\n  users_may_trust: "no"\n')
    user_ext = tmp_path / "agent" / "extensions" / "decider.py"
    user_ext.parent.mkdir(parents=True)
    user_ext.write_text(
        "def extension(pi):\n    pi.on('project_trust', lambda event, ctx: 'yes')\n"
    )
    proc = pi(tmp_path, "--policy", str(policy), "-C", str(proj), "-p", "hello")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "MARKER-evil").exists()
    assert "limited by policy" in proc.stderr
    refused = pi(tmp_path, "--policy", str(policy), "-C", str(proj), "--trust", "yes", "-p", "x")
    assert refused.returncode == 2 and "not allowed" in refused.stderr
    saved = pi(tmp_path, "trust", "yes", str(proj), "--policy", str(policy))
    assert saved.returncode == 2 and "not allowed" in saved.stderr


# --- skills, templates and context files in a run -------------------------------------------


def test_user_skills_reach_the_prompt_and_skill_commands_expand(tmp_path, proj):
    skill = tmp_path / "agent" / "skills" / "pdf" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text(
        "---\nname: pdf\ndescription: Work with <PDF> files & forms.\n---\nUse pdftotext.\n"
    )
    hidden = tmp_path / "agent" / "skills" / "secret.md"
    hidden.write_text(
        "---\ndescription: Hidden one.\ndisable-model-invocation: true\n---\nHidden body.\n"
    )
    with FakeOpenAI([text("a"), text("b"), text("c")]) as server:
        model = ["--model", "openai/x", "--base-url", server.url]
        first = pi(tmp_path, "-C", str(proj), "-p", "/skill:pdf extract page 2", model=model)
        second = pi(tmp_path, "-C", str(proj), "-p", "/skill:nope hi", model=model)
        third = pi(tmp_path, "-C", str(proj), "--tools", "ls", "-p", "hi", model=model)
        requests = list(server.requests)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert third.returncode == 0, third.stderr
    prompt = system_prompt(requests[0])
    assert "<name>pdf</name>" in prompt
    assert "Work with &lt;PDF&gt; files &amp; forms." in prompt
    assert "secret" not in prompt  # disable-model-invocation hides it from the index
    expanded = user_text(requests[0])
    assert expanded.startswith('<skill name="pdf"')
    assert f"References are relative to {skill.parent}." in expanded
    assert "Use pdftotext." in expanded and "name: pdf" not in expanded
    assert expanded.endswith("extract page 2")
    assert user_text(requests[1]) == "/skill:nope hi"  # unknown: unchanged, reported
    assert 'unknown skill "nope"' in second.stderr
    # Neither read nor bash active: no skills index.
    assert "<available_skills>" not in system_prompt(requests[2])


def test_skill_and_prompt_options_and_system_prompt_options(tmp_path, proj):
    extra = tmp_path / "extra-skill.md"
    extra.write_text("---\nname: extra\ndescription: Extra skill.\n---\nBody.\n")
    template = tmp_path / "review.md"
    template.write_text("Review $1 carefully. Extra: $@\n")
    (tmp_path / "agent" / "skills" / "user-one").mkdir(parents=True)
    (tmp_path / "agent" / "skills" / "user-one" / "SKILL.md").write_text(
        "---\ndescription: User one.\n---\nx\n"
    )
    proc, request = one_request(
        tmp_path,
        "-C",
        str(proj),
        "--no-skills",
        "--skill",
        str(extra),
        "--prompt-template",
        str(template),
        "--system-prompt",
        "CUSTOM-BASE",
        "--append-system-prompt",
        "APPENDED-ONE",
        "-p",
        "/review a.py now",
    )
    assert proc.returncode == 0, proc.stderr
    prompt = system_prompt(request)
    assert prompt.startswith("CUSTOM-BASE") and "APPENDED-ONE" in prompt
    assert "<name>extra</name>" in prompt and "user-one" not in prompt
    assert user_text(request) == "Review a.py carefully. Extra: a.py now"


def test_bad_resource_options_name_the_argument(tmp_path, proj):
    proc = pi(tmp_path, "-C", str(proj), "--skill", str(tmp_path / "missing"), "-p", "x")
    assert proc.returncode == 2 and "argument --skill" in proc.stderr
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = pi(tmp_path, "-C", str(proj), "--system-prompt", str(fifo), "-p", "x")
    assert proc.returncode == 2 and "--system-prompt" in proc.stderr


# --- pi resources and pi trust --------------------------------------------------------------


def test_pi_resources_json_is_the_public_contract(tmp_path, proj):
    (proj / ".pi/skills/broken").mkdir()
    (proj / ".pi/skills/broken/SKILL.md").write_text("---\nname: [unclosed\n---\nx\n")
    untrusted = json.loads(pi(tmp_path, "resources", "-C", str(proj), "--json").stdout)
    assert untrusted["trust"]["decision"] == "undecided"
    assert untrusted["skills"] == [] and untrusted["extensions"] == []
    assert [c["trusted"] for c in untrusted["context_files"]] == [False]
    trusted = json.loads(
        pi(tmp_path, "resources", "-C", str(proj), "--trust", "yes", "--json").stdout
    )
    assert set(trusted) >= {
        "trust",
        "skills",
        "prompts",
        "context_files",
        "extensions",
        "diagnostics",
    }
    assert trusted["trust"] == {**trusted["trust"], "decision": "yes", "source": "--trust"}
    [deploy] = trusted["skills"]
    assert deploy == {
        **deploy,
        "name": "deploy",
        "description": "Project deploy steps.",
        "source": "project",
        "path": str(proj / ".pi/skills/deploy/SKILL.md"),
    }
    assert [p["name"] for p in trusted["prompts"]] == ["ship"]
    assert {Path(e["path"]).name for e in trusted["extensions"]} == {"evil.py", "from_settings.py"}
    [error] = [d for d in trusted["diagnostics"] if d["type"] == "error"]
    assert error["path"] == str(proj / ".pi/skills/broken/SKILL.md")
    assert error["message"].startswith(f"{error['path']}:2: ")  # file and line
    assert trusted["system_prompt"]["replaced_by"] == str(proj / ".pi/SYSTEM.md")
    # The text form names the decision and how to trust.
    shown = pi(tmp_path, "resources", "-C", str(proj))
    assert "trust undecided" in shown.stdout and "pi trust yes" in shown.stdout


def test_pi_trust_forget_and_show(tmp_path, proj):
    assert pi(tmp_path, "trust", "sandboxed", str(proj)).returncode == 0
    shown = json.loads(pi(tmp_path, "trust", "show", str(proj), "--json").stdout)
    assert shown["decision"] == "sandboxed" and shown["decisions"] == {str(proj): "sandboxed"}
    forgot = pi(tmp_path, "trust", "forget", str(proj))
    assert forgot.returncode == 0 and "forgotten" in forgot.stdout
    shown = json.loads(pi(tmp_path, "trust", "show", str(proj), "--json").stdout)
    assert shown["decision"] == "undecided" and shown["decisions"] == {}
    bad = tmp_path / "agent" / "trust.json"
    bad.write_text("{not json")
    broken = pi(tmp_path, "trust", "show", str(proj))
    assert broken.returncode == 2 and str(bad) in broken.stderr


# --- extension-contributed resources --------------------------------------------------------


def discovering_extension(path: Path, skill_dir: str) -> Path:
    """An extension whose resources_discover names ``skill_dir`` (as given)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "def extension(pi):\n"
        "    pi.on('resources_discover', lambda event, ctx: "
        f"{{'skill_paths': [{skill_dir!r}]}})\n"
    )
    return path


def write_skill(directory: Path, name: str) -> Path:
    path = directory / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\nname: {name}\ndescription: The {name} skill.\n---\nBody of {name}.\n")
    return path


def test_a_user_extensions_discovered_skills_are_read_by_the_supervisor(tmp_path, proj):
    package = tmp_path / "agent" / "extensions" / "skillpack"
    discovering_extension(package / "__init__.py", "bundled")
    write_skill(package / "bundled", "bundled-skill")
    elsewhere = write_skill(tmp_path / "elsewhere", "far-skill")
    discovering_extension(
        tmp_path / "agent" / "extensions" / "far.py", str(elsewhere.parent.parent)
    )
    proc, request = one_request(
        tmp_path, "-C", str(proj), "--mode", "json", "/skill:bundled-skill go"
    )
    assert proc.returncode == 0, proc.stderr
    prompt = system_prompt(request)
    # A user extension is trusted: its own files and paths elsewhere both load.
    assert "<name>bundled-skill</name>" in prompt and "<name>far-skill</name>" in prompt
    assert "Body of bundled-skill." in user_text(request)


@pytest.mark.usefixtures("require_bwrap")
def test_a_sandboxed_project_extension_may_only_contribute_its_own_files(tmp_path, proj):
    (proj / ".pi/extensions/evil.py").unlink()
    (proj / ".pi/settings.json").unlink()
    secret_skill = write_skill(tmp_path / "home" / "private-skills", "private")
    discovering_extension(proj / ".pi/extensions/grabber.py", str(secret_skill.parent.parent))
    discovering_extension(proj / ".pi/extensions/own.py", "own-skills")
    write_skill(proj / ".pi/extensions/own-skills", "own")
    proc = pi(tmp_path, "-C", str(proj), "--trust", "sandboxed", "--mode", "json", "hello")
    assert proc.returncode == 0, proc.stderr
    found = events(proc.stdout)
    diagnostics = [e for e in found if e.get("type") == "resource_diagnostic"]
    refused = [d for d in diagnostics if d["diagnostic"] == "error"]
    assert len(refused) == 1 and "outside its directory" in refused[0]["message"]
    assert refused[0]["path"] == str(secret_skill.parent.parent)
    assert "Body of private" not in proc.stdout


def test_a_user_extension_failing_in_phase_one_is_not_run_twice(tmp_path, proj):
    runs = tmp_path / "broken-runs"
    broken = tmp_path / "agent" / "extensions" / "broken.py"
    broken.parent.mkdir(parents=True)
    broken.write_text(
        f"open({str(runs)!r}, 'a').write('run\\n')\n"
        "def extension(pi):\n"
        "    raise RuntimeError('broken on purpose')\n"
    )
    proc = pi(tmp_path, "-C", str(proj), "--trust", "no", "-p", "hello")
    assert proc.returncode == 0, proc.stderr
    assert runs.read_text() == "run\n"  # --trust given: no phase one at all
    runs.unlink()
    log = tmp_path / "audit.jsonl"
    proc = pi(tmp_path, "-C", str(proj), "--audit-log", str(log), "-p", "hello")
    assert proc.returncode == 0, proc.stderr
    assert runs.read_text() == "run\n"  # phase one ran it; the final start did not
    assert proc.stderr.count("broken on purpose") == 1
    records = [json.loads(line) for line in log.read_text().splitlines()]
    trust = [r for r in records if r.get("event") == "trust"]
    assert [r["action"] for r in trust] == ["decided"]
