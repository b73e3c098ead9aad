"""MCP configuration, naming, exposure, the policy's ``mcp`` section and the server
profile (issue 19), in memory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pi_sandbox.errors import PolicyFileError
from pi_sandbox.policies import LoadedPolicyFile, build_policy, load_policy_file
from pi_sandbox.sandbox.program_profile import program_profile
from pi_sandbox.supervisor.mcp.config import (
    add_server,
    expand_value,
    load_mcp_config,
    remove_server,
    tool_exposure,
    validate_server,
)
from pi_sandbox.supervisor.mcp.manager import render_servers_section
from pi_sandbox.supervisor.mcp.naming import mcp_tool_name, normalise_schema, to_tool_result


def _write(path: Path, servers: dict, **top: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": servers, **top}))
    return path


def test_project_entries_replace_user_entries_only_in_a_trusted_project(tmp_path):
    agent, ws = tmp_path / "agent", tmp_path / "ws"
    _write(agent / "mcp.json", {"a": {"command": "user-a"}, "b": {"command": "user-b"}})
    _write(
        ws / ".pi" / "mcp.json",
        {"a": {"command": "project-a"}, "c": {"url": "https://c.example/mcp"}},
    )
    trusted = load_mcp_config(agent, ws, project_trusted=True)
    assert trusted.servers["a"].command == "project-a" and trusted.servers["a"].scope == "project"
    assert trusted.servers["b"].command == "user-b"
    assert trusted.servers["c"].kind == "http"
    untrusted = load_mcp_config(agent, ws, project_trusted=False)
    assert untrusted.servers["a"].command == "user-a" and "c" not in untrusted.servers
    assert untrusted.ignored_project_file == ws / ".pi" / "mcp.json"


def test_a_project_override_changes_only_enabled_and_exposure(tmp_path):
    agent, ws = tmp_path / "agent", tmp_path / "ws"
    _write(agent / "mcp.json", {"tools": {"command": "t", "env": {"KEY": "${SECRET}"}}})
    project = _write(
        ws / ".pi" / "mcp.json",
        {"tools": {"enabled": False, "exposure": "direct"}, "other": {"env": {"X": "y"}}},
    )
    config = load_mcp_config(agent, ws, project_trusted=True)
    server = config.servers["tools"]
    assert not server.enabled and server.exposure == "direct"
    assert server.env == (("KEY", "${SECRET}"),) and server.override == str(project)
    assert any('server "other" needs "command" or "url"' in e for e in config.errors)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"command": "x", "args": "a b"}, 'server "s": args must be an array of strings'),
        ({"command": 7}, 'server "s": command must be a string'),
        ({"url": "ftp://x"}, 'server "s": url must be an http or https URL'),
        ({"url": "https://x/sse", "type": "sse"}, "legacy SSE transport is not supported"),
        ({"command": "x", "exposure": "sometimes"}, "exposure must be one of"),
        ({"command": "x", "timeout": 0}, "timeout must be a positive number"),
        ({"command": "x", "sandbox": {"filesystem": "all"}}, "sandbox.filesystem must be"),
        ({"command": "x", "frobnicate": 1}, "unknown field 'frobnicate'"),
        ({"args": []}, 'needs either "command" (stdio) or "url"'),
    ],
)
def test_invalid_entries_are_reported_naming_the_file_and_field_and_skipped(
    tmp_path, entry, message
):
    path = _write(tmp_path / "agent" / "mcp.json", {"s": entry, "ok": {"command": "fine"}})
    config = load_mcp_config(tmp_path / "agent", tmp_path, project_trusted=False)
    assert "s" not in config.servers and "ok" in config.servers
    assert len(config.errors) == 1
    assert config.errors[0].startswith(f"{path}: ") and message in config.errors[0]


def test_server_names_that_differ_only_in_dash_and_underscore_conflict(tmp_path):
    _write(tmp_path / "mcp.json", {"my-server": {"command": "a"}, "my_server": {"command": "b"}})
    config = load_mcp_config(tmp_path, tmp_path / "ws", project_trusted=False)
    assert list(config.servers) == ["my-server"]
    assert 'server "my_server" conflicts with "my-server"' in config.errors[0]


def test_values_expand_variables_and_refuse_host_commands():
    assert expand_value("Bearer ${TOKEN}", {"TOKEN": "t"}, where="headers.A") == "Bearer t"
    with pytest.raises(ValueError, match=r"headers\.A: \$\{NOPE\} is not set"):
        expand_value("${NOPE}", {}, where="headers.A")
    with pytest.raises(ValueError, match="would run unsandboxed"):
        expand_value("!gh auth token", {}, where="env.X")


def test_auth_from_the_users_store_is_refused_in_a_project_file():
    entry = {"url": "https://docs.example/mcp", "auth": {"provider": "openai"}}
    assert validate_server("d", entry, source="u", scope="user").auth_provider == "openai"
    with pytest.raises(ValueError, match=r"auth is only allowed in the user.s mcp\.json"):
        validate_server("d", entry, source="p", scope="project")


@pytest.mark.parametrize(
    "entry",
    [
        {
            "url": "http://127.0.0.1:1/mcp",
            "headers": {"Authorization": "Bearer ${ANTHROPIC_API_KEY}"},
        },
        {"command": "python", "args": ["s.py"], "env": {"K": "${OPENAI_API_KEY}"}},
        {"command": "python", "args": ["s.py", "${HOME}/.ssh/id_rsa"]},
        {"url": "http://x.example/${SECRET}"},
    ],
)
def test_a_project_or_extension_entry_cannot_read_the_users_environment(entry):
    """Red-team finding of 0.7: a trusted project's `${ANTHROPIC_API_KEY}` in a header
    sent the user's key to the project's server. Control: the user's own file may."""
    validate_server("s", entry, source="u", scope="user")  # control
    for scope in ("project", "extension"):
        with pytest.raises(ValueError, match="cannot read the environment"):
            validate_server("s", entry, source="p", scope=scope)


def test_tool_names_are_normalised_and_long_or_taken_names_get_a_hash():
    assert mcp_tool_name("dev-radius", "get.issue") == "mcp__dev_radius__get_issue"
    long = mcp_tool_name("s", "x" * 80)
    assert len(long) == 64 and long.startswith("mcp__s__xxx")
    taken = mcp_tool_name("s", "a", lambda name: name == "mcp__s__a")
    assert taken.startswith("mcp__s__a_") and len(taken) == len("mcp__s__a_") + 8
    assert normalise_schema({}) == {"type": "object", "properties": {}}


def test_exact_tool_exposure_wins_over_patterns_and_the_first_pattern_wins():
    server = validate_server(
        "g",
        {
            "command": "x",
            "exposure": "deferred",
            "toolExposure": {"get_*": "codemode", "get_me": "direct", "*": "hidden"},
        },
        source="u",
        scope="user",
    )
    assert tool_exposure(server, "get_me") == "direct"
    assert tool_exposure(server, "get_issue") == "codemode"
    assert tool_exposure(server, "delete") == "hidden"
    legacy = validate_server(
        "g", {"command": "x", "exposure": "codemode-deferred"}, source="u", scope="user"
    )
    assert legacy.exposure == "codemode"


def test_add_and_remove_keep_the_rest_of_the_file(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text('{\n    "other": 1,\n    "mcpServers": {"keep": {"command": "k"}}\n}\n')
    assert add_server(path, "new", {"command": "n", "args": ["-v"]}) is False
    assert add_server(path, "new", {"command": "n2"}) is True
    data = json.loads(path.read_text())
    assert data["other"] == 1 and data["mcpServers"]["keep"] == {"command": "k"}
    assert data["mcpServers"]["new"] == {"command": "n2"}
    assert path.read_text().startswith('{\n    "other"')  # indentation kept
    assert remove_server(path, "new") and not remove_server(path, "new")
    with pytest.raises(ValueError, match="args must be an array"):
        add_server(path, "bad", {"command": "x", "args": "y"})


def test_results_keep_text_images_and_clip_long_text():
    class Block:
        def __init__(self, **fields):
            self.__dict__.update(fields)

    result = Block(
        content=[
            Block(type="text", text="a" * 30_000),
            Block(type="image", data="AAAA", mime_type="image/png"),
        ],
        structured_content={"n": 1},
        is_error=True,
    )
    converted = to_tool_result(result, server="s")
    assert converted["is_error"] and converted["details"]["structured_content"] == {"n": 1}
    assert "chars truncated" in converted["content"][0]["text"]
    assert len(converted["content"][0]["text"]) < 21_000
    assert converted["content"][1] == {"type": "image", "data": "AAAA", "mimeType": "image/png"}


def test_the_servers_section_lists_servers_how_they_are_reached_and_resources():
    direct = validate_server(
        "git", {"command": "g", "exposure": "direct"}, source="u", scope="user"
    )
    hidden = validate_server(
        "docs", {"command": "d", "description": "Product docs\nmore"}, source="u", scope="user"
    )
    section = render_servers_section(
        [(direct, "Git tools", True, 3, "connected"), (hidden, None, False, 0, "connecting")]
    )
    assert section is not None
    lines = section.splitlines()
    assert lines[1] == "- mcp__docs (codemode, connecting): Product docs"
    assert lines[2] == "- mcp__git (direct, resources via read_mcp_resource): Git tools"
    assert render_servers_section([]) is None


def _policy(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_policy_mcp_section_is_validated_with_errors_naming_the_key(tmp_path):
    path = _policy(tmp_path, "version: 1\nmcp:\n  servers:\n    git:\n      filesystem: all\n")
    with pytest.raises(PolicyFileError) as error:
        load_policy_file(path)
    assert str(path) in str(error.value) and "mcp.servers.git.filesystem" in str(error.value)
    with pytest.raises(PolicyFileError, match=r"mcp\.enabled"):
        load_policy_file(_policy(tmp_path, "version: 1\nmcp: {enabled: maybe}\n", "q.yaml"))


def test_policy_mcp_rules_only_tighten_across_tiers(tmp_path):
    managed = _policy(
        tmp_path,
        "version: 1\nmcp:\n  allow: [git, time]\n  servers: {git: {filesystem: read}}\n",
        "m.yaml",
    )
    project = _policy(
        tmp_path,
        "version: 1\nmcp:\n  allow: [git]\n  deny: [tim*]\n  commands: [uvx]\n"
        "  servers: {git: {filesystem: write}}\n",
        "proj.yaml",
    )
    policy = build_policy(
        [
            LoadedPolicyFile("managed", managed, load_policy_file(managed)),
            LoadedPolicyFile("project", project, load_policy_file(project)),
        ]
    )
    rules = policy.mcp
    assert rules.refusal("git", command="/usr/bin/uvx", remote=False) is None
    assert "mcp.allow list" in rules.refusal("other", command="/usr/bin/uvx", remote=False)
    assert "denied by policy" in rules.refusal("time", command="/usr/bin/uvx", remote=False)
    assert "mcp.commands" in rules.refusal("git", command="/usr/bin/node", remote=False)
    pin, source = rules.pin("git")
    assert pin.filesystem == "read" and source == str(managed)  # the project cannot pin
    assert any("mcp.servers ignored" in d for d in policy.diagnostics)


def test_a_server_profile_mounts_no_workspace_unless_granted(tmp_path):
    ws, home, agent = tmp_path / "ws", tmp_path / "home", tmp_path / "agent"
    for path in (ws, home, agent):
        path.mkdir()
    script = tmp_path / "servers" / "server.py"
    script.parent.mkdir()
    script.write_text("")
    (script.parent / "neighbour.txt").write_text("")
    common = dict(
        program=os.path.realpath("/bin/sh"),
        args=[str(script)],
        workspace=ws,
        home=home,
        agent_dir=agent,
        env={"TOKEN": "t"},
        cwd=None,
    )
    none = program_profile(filesystem="none", **common)
    real_ws = os.path.realpath(ws)
    assert real_ws not in none.ro_binds and real_ws not in none.rw_binds
    assert os.path.realpath(script) in none.ro_binds  # the script, not its directory
    assert os.path.realpath(script.parent) not in none.ro_binds
    assert none.cwd == "/tmp" and dict(none.env)["TOKEN"] == "t"
    assert none.network == "none" and none.sockets == ()
    read = program_profile(filesystem="read", **common)
    assert real_ws in read.ro_binds and read.cwd == real_ws
    write = program_profile(filesystem="write", **common)
    assert real_ws in write.rw_binds
    assert os.path.join(real_ws, ".pi") in write.protected  # persistence paths stay read-only


def test_add_refuses_what_the_loader_would_refuse_and_leaves_the_file(tmp_path):
    """Red-team finding of 0.7: `pi mcp add a-b` beside `a_b`, or an `!command`
    value, were written and only refused when loading."""
    from pi_sandbox.supervisor.mcp.config import add_server

    path = tmp_path / "mcp.json"
    add_server(path, "a_b", {"command": "/bin/true"})
    before = path.read_text()
    with pytest.raises(ValueError, match='conflicts with "a_b"'):
        add_server(path, "a-b", {"command": "/bin/true"})
    with pytest.raises(ValueError, match="would run unsandboxed"):
        add_server(path, "bang", {"command": "/bin/true", "env": {"K": "!cat /etc/passwd"}})
    assert path.read_text() == before
    add_server(path, "other", {"command": "/bin/true"})  # control: a distinct name is added
    assert "other" in path.read_text()
