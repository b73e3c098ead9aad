"""MCP servers in real ``pi`` runs driven by the scripted model (issue 19 §Tests).

Every server is a real MCP server written with the ``mcp`` SDK
(``tests/fixtures/mcp``) and, unless a test says otherwise, runs in its own bwrap
sandbox (the default whenever bwrap works).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from mcp_setup import HOSTILE, McpSetup, json_events, messages, results, text_of

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("require_bwrap")]


@pytest.fixture
def setup(tmp_path):
    return McpSetup(tmp_path)


def test_mcp_tools_resources_and_exposure_work_through_the_pipeline(setup):
    setup.user_servers(
        {
            "x": setup.server(
                exposure="direct", toolExposure={"now": "codemode"}, description="Echo things"
            )
        }
    )
    proc = setup.run(
        [
            [
                ("mcp__x__echo", {"text": "hello mcp"}),
                ("mcp__x__add", {"a": 2, "b": 40}),
                ("read_mcp_resource", {"server": "x", "uri": "note://greeting"}),
                ("list_mcp_resources", {}),
            ],
            # codemode exposure: registered for codemode, never declared nor callable here.
            [("mcp__x__now", {})],
        ]
    )
    assert proc.returncode == 0, proc.stderr
    got = results(proc.stdout)
    assert text_of(got["mcp__x__echo"][0]) == "hello mcp"
    assert text_of(got["mcp__x__add"][0]) == "42"
    assert text_of(got["read_mcp_resource"][0]) == "hello from a resource"
    listing = json.loads(text_of(got["list_mcp_resources"][0]))
    assert listing["resources"][0]["uri"] == "note://greeting"
    assert listing["resources"][0]["server"] == "x"
    assert got["mcp__x__now"][0]["isError"]
    assert "not found" in text_of(got["mcp__x__now"][0])


def test_policy_rules_on_mcp_tool_names_and_arguments_apply(setup):
    (setup.root / "managed.d").mkdir()
    (setup.root / "managed.d" / "50-mcp.yaml").write_text(
        """
version: 1
tool_call:
  rules:
    - id: no-secret-echo
      tool: "mcp__x__*"
      arguments: {text: "secret"}
      decision: deny
      reason: No secrets through MCP.
    - id: no-add
      tool: mcp__x__add
      decision: deny
      reason: Adding is forbidden.
"""
    )
    setup.user_servers({"x": setup.server(exposure="direct")})
    proc = setup.run(
        [
            [
                ("mcp__x__echo", {"text": "my secret"}),
                ("mcp__x__echo", {"text": "harmless"}),
                ("mcp__x__add", {"a": 1, "b": 1}),
            ]
        ]
    )
    assert proc.returncode == 0, proc.stderr
    echo = results(proc.stdout)["mcp__x__echo"]
    assert blocked(echo[0]) and "No secrets through MCP." in text_of(echo[0])
    assert not echo[1]["isError"] and text_of(echo[1]) == "harmless"
    add = results(proc.stdout)["mcp__x__add"][0]
    assert blocked(add) and "Adding is forbidden." in text_of(add)


def test_a_project_mcp_json_is_ignored_until_the_project_is_trusted(setup):
    marker = setup.root / "project-server-ran"
    setup.project_servers({"proj": setup.server(exposure="direct", env={"UNUSED": str(marker)})})
    untrusted = setup.run([[("mcp__proj__echo", {"text": "x"})]], "--trust", "no")
    assert untrusted.returncode == 0, untrusted.stderr
    assert "not found" in text_of(results(untrusted.stdout)["mcp__proj__echo"][0])
    assert any(".pi/mcp.json ignored" in m for m in messages(untrusted.stdout, "notice"))
    # Control: the same file, trusted, connects.
    trusted = setup.run([[("mcp__proj__echo", {"text": "x"})]], "--trust", "yes")
    assert trusted.returncode == 0, trusted.stderr
    assert text_of(results(trusted.stdout)["mcp__proj__echo"][0]) == "x"


def test_no_mcp_connects_no_server(setup):
    setup.user_servers({"x": setup.server(exposure="direct")})
    proc = setup.run([[("mcp__x__echo", {"text": "x"})]], "--no-mcp")
    assert proc.returncode == 0, proc.stderr
    assert "not found" in text_of(results(proc.stdout)["mcp__x__echo"][0])


def test_a_policy_can_forbid_mcp_or_allow_list_servers(setup):
    (setup.root / "managed.d").mkdir()
    policy = setup.root / "managed.d" / "50-mcp.yaml"
    setup.user_servers({"x": setup.server(exposure="direct"), "y": setup.server(exposure="direct")})
    policy.write_text("version: 1\nmcp:\n  allow: [x]\n")
    proc = setup.run([[("mcp__x__echo", {"text": "a"}), ("mcp__y__echo", {"text": "b"})]])
    assert proc.returncode == 0, proc.stderr
    got = results(proc.stdout)
    assert text_of(got["mcp__x__echo"][0]) == "a"
    assert "not found" in text_of(got["mcp__y__echo"][0])
    assert any("'y' is not in the mcp.allow list" in m for m in messages(proc.stdout, "warning"))
    policy.write_text("version: 1\nmcp:\n  enabled: false\n")
    off = setup.run([[("mcp__x__echo", {"text": "a"})]])
    assert "not found" in text_of(results(off.stdout)["mcp__x__echo"][0])
    assert any("MCP is disabled by policy" in m for m in messages(off.stdout, "warning"))
    policy.write_text("version: 1\nmcp:\n  commands: [node]\n")
    other = setup.run([[("mcp__x__echo", {"text": "a"})]])
    assert "not found" in text_of(results(other.stdout)["mcp__x__echo"][0])
    assert any("not in the mcp.commands list" in m for m in messages(other.stdout, "warning"))


def test_a_server_killed_mid_call_gives_an_error_result_and_is_started_again(setup):
    setup.user_servers({"h": setup.server(HOSTILE, exposure="direct")})
    proc = setup.run([[("mcp__h__killed", {})], [("mcp__h__echo", {"text": "back"})]])
    assert proc.returncode == 0, proc.stderr
    got = results(proc.stdout)
    killed = got["mcp__h__killed"][0]
    assert killed["isError"] and "the server stopped during tools/call killed" in text_of(killed)
    assert "signal 9" in text_of(killed)
    assert text_of(got["mcp__h__echo"][0]) == "back"


def test_a_server_that_keeps_failing_is_disabled_with_a_notice(setup):
    setup.user_servers({"h": setup.server(HOSTILE, exposure="direct")})
    proc = setup.run(
        [[("mcp__h__crash", {})] for _ in range(5)] + [[("mcp__h__echo", {"text": "x"})]]
    )
    assert proc.returncode == 0, proc.stderr
    got = results(proc.stdout)
    assert all(e["isError"] for e in got["mcp__h__crash"])
    assert "disabled for this session" in text_of(got["mcp__h__echo"][0])
    assert any("disabled for this session after" in m for m in messages(proc.stdout, "warning"))


def test_pi_mcp_add_list_get_and_remove_work_without_a_session(setup):
    added = setup.cli(
        "mcp",
        "add",
        "x",
        "--exposure",
        "direct",
        "--",
        sys.executable,
        str(HOSTILE.parent / "well_behaved_server.py"),
    )
    assert added.returncode == 0, added.stderr
    entry = json.loads((setup.agent / "mcp.json").read_text())["mcpServers"]["x"]
    assert entry["command"] == sys.executable and entry["exposure"] == "direct"
    listed = setup.cli("mcp", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    server = json.loads(listed.stdout)["servers"][0]
    assert server["state"] == "connected" and server["sandboxed"]
    assert {t["name"] for t in server["tools"]} == {"echo", "add", "now", "grow"}
    got = setup.cli("mcp", "get", "x")
    assert got.returncode == 0 and "resource: note://greeting" in got.stdout
    assert "prompt: review" in got.stdout
    removed = setup.cli("mcp", "remove", "x")
    assert removed.returncode == 0
    assert json.loads((setup.agent / "mcp.json").read_text())["mcpServers"] == {}
    bad = setup.cli("mcp", "add", "x", "--", "")
    assert bad.returncode == 2 and "command must not be empty" in bad.stderr


def test_pi_mcp_list_exits_1_naming_the_file_and_field_of_an_invalid_entry(setup):
    path = setup.user_servers({"bad": {"command": "x", "args": "not-a-list"}})
    proc = setup.cli("mcp", "list")
    assert proc.returncode == 1
    assert f'{path}: server "bad": args must be an array of strings' in proc.stdout


def test_a_published_mcp_server_from_pypi_runs_sandboxed(setup, tmp_path):
    try:
        import mcp_server_time  # noqa: F401
    except ImportError:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "mcp-server-time"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if proc.returncode != 0:
            pytest.skip(
                f"mcp-server-time does not install from the registry here: {proc.stderr[-300:]}"
            )
    setup.user_servers(
        {
            "time": {
                "command": sys.executable,
                "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
                "exposure": "direct",
            }
        }
    )
    proc = setup.run([[("mcp__time__get_current_time", {"timezone": "UTC"})]])
    assert proc.returncode == 0, proc.stderr
    result = results(proc.stdout)["mcp__time__get_current_time"][0]
    assert not result["isError"], text_of(result)
    assert '"timezone": "UTC"' in text_of(result)


def test_an_extension_registers_a_server_that_runs_like_a_configured_one(setup):
    extension = setup.root / "adds_server.py"
    extension.write_text(
        "import sys\n\n\n"
        "def extension(pi):\n"
        f"    pi.register_mcp_server('ext', {{'command': sys.executable, 'args': "
        f"[{str(HOSTILE.parent / 'well_behaved_server.py')!r}], 'exposure': 'direct'}})\n"
    )
    proc = setup.run([[("mcp__ext__echo", {"text": "from an extension"})]], "-e", str(extension))
    assert proc.returncode == 0, proc.stderr
    assert text_of(results(proc.stdout)["mcp__ext__echo"][0]) == "from an extension"


@pytest.fixture
def http_server(tmp_path):
    """The well-behaved server on streamable HTTP at 127.0.0.1:PORT/mcp."""
    import socket
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "http.log").open("w")
    process = subprocess.Popen(
        [sys.executable, str(HOSTILE.parent / "well_behaved_server.py"), "--http", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as conn:
            if conn.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(timeout=10)
    log.close()


def test_a_remote_server_is_reached_through_the_egress_proxy_under_the_policy(setup, http_server):
    setup.user_servers(
        {"web": {"url": http_server, "exposure": "direct", "headers": {"X-Token": "${WEB_TOKEN}"}}}
    )
    audit = setup.root / "audit.jsonl"
    env = {**setup.env, "WEB_TOKEN": "t0k"}
    proc = setup.run([[("mcp__web__add", {"a": 1, "b": 2})]], "--audit-log", str(audit), env=env)
    assert proc.returncode == 0, proc.stderr
    assert text_of(results(proc.stdout)["mcp__web__add"][0]) == "3"
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    egress = [r for r in records if r.get("event") == "egress" and r.get("mcp_server") == "web"]
    assert egress and all(r["decision"] == "allow" for r in egress)
    assert "t0k" not in audit.read_text()
    # A policy can forbid remote servers.
    (setup.root / "managed.d").mkdir()
    (setup.root / "managed.d" / "50-mcp.yaml").write_text("version: 1\nmcp:\n  remote: deny\n")
    denied = setup.run([[("mcp__web__add", {"a": 1, "b": 2})]], env=env)
    assert "not found" in text_of(results(denied.stdout)["mcp__web__add"][0])
    assert any(
        "remote MCP servers are not allowed" in m for m in messages(denied.stdout, "warning")
    )


def test_slash_mcp_prints_the_servers_status(setup):
    setup.user_servers({"x": setup.server(exposure="direct"), "off": setup.server(enabled=False)})
    script = setup.root / "none.yaml"
    script.write_text("- text: done\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pi_sandbox.cli",
            "--model",
            "scripted",
            "--script",
            str(script),
            "-C",
            str(setup.ws),
            "--mode",
            "json",
            "--no-session",
            "/mcp",
        ],
        env=setup.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    status = "\n".join(messages(proc.stdout, "notice"))
    assert "off: disabled (config)" in status
    assert "x: connected (4 tools, direct)" in status


def test_a_slow_server_is_reported_and_not_waited_for_beyond_ten_seconds(setup):
    import time

    slow = HOSTILE.parent / "slow_server.py"
    setup.user_servers(
        {
            "fast": setup.server(exposure="direct"),
            "slow": setup.server(slow, "60", exposure="direct"),
        }
    )
    started = time.monotonic()
    proc = setup.run([[("mcp__fast__echo", {"text": "fast"}), ("mcp__slow__echo", {"text": "x"})]])
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    got = results(proc.stdout)
    assert text_of(got["mcp__fast__echo"][0]) == "fast"
    assert "not found" in text_of(got["mcp__slow__echo"][0])
    assert any(
        "MCP servers still connecting after 10 s: slow" in m
        for m in messages(proc.stdout, "notice")
    )
    assert elapsed < 50  # the run did not wait for the 60-second server


def test_a_changed_tool_list_adds_new_tools_and_withdraws_old_ones(setup):
    setup.user_servers({"x": setup.server(exposure="direct")})
    proc = setup.run(
        [
            [("mcp__x__grow", {})],
            [("mcp__x__shout", {"text": "loud"}), ("mcp__x__add", {"a": 1, "b": 2})],
        ]
    )
    assert proc.returncode == 0, proc.stderr
    got = results(proc.stdout)
    assert text_of(got["mcp__x__shout"][0]) == "LOUD"
    assert "not found" in text_of(got["mcp__x__add"][0])


HOOKS = """
def extension(pi):
    def guard(event, ctx):
        if event.tool_name == "mcp__x__add":
            return {"block": True, "reason": "no adding today"}
        if event.tool_name == "mcp__x__echo":
            event.input["text"] = event.input["text"] + " (seen by the hook)"

    def redact(event, ctx):
        if event.tool_name.startswith("mcp__"):
            return {"content": [{"type": "text", "text": "[redacted by tool_result]"}]}

    pi.on("tool_call", guard)
    pi.on("tool_result", redact)
"""


def test_tool_call_and_tool_result_hooks_apply_to_mcp_tools(setup):
    hooks = setup.root / "hooks.py"
    hooks.write_text(HOOKS)
    setup.user_servers({"x": setup.server(exposure="direct")})
    proc = setup.run(
        [[("mcp__x__add", {"a": 1, "b": 2}), ("mcp__x__echo", {"text": "hi"})]], "-e", str(hooks)
    )
    assert proc.returncode == 0, proc.stderr
    got = results(proc.stdout)
    assert blocked(got["mcp__x__add"][0]) and "no adding today" in text_of(got["mcp__x__add"][0])
    echo = got["mcp__x__echo"][0]
    assert text_of(echo) == "[redacted by tool_result]"
    starts = [e for e in json_events(proc.stdout) if e["type"] == "tool_execution_start"]
    assert any(e.get("args", {}).get("text") == "hi (seen by the hook)" for e in starts)


def test_tool_search_activates_a_deferred_mcp_tool_and_codemode_calls_mcp_tools(setup):
    (setup.root / "managed.d").mkdir()
    (setup.root / "managed.d" / "50-mcp.yaml").write_text(
        "version: 1\ntool_call:\n  rules:\n    - id: no-add\n      tool: mcp__c__add\n"
        "      decision: deny\n      reason: Adding is forbidden.\n"
    )
    setup.user_servers(
        {"d": setup.server(exposure="deferred"), "c": setup.server(exposure="codemode")}
    )
    script = (
        "print(tools.mcp__c__echo(text='from a script'))\n"
        "try:\n    tools.mcp__c__add(a=1, b=2)\n"
        "except ToolError as exc:\n    print('denied:', exc.text)\n"
    )
    proc = setup.run(
        [
            [("mcp__d__echo", {"text": "too early"})],
            [("tool_search", {"query": "echo text unchanged"})],
            [("mcp__d__echo", {"text": "found"})],
            [("codemode", {"script": script})],
        ],
        "--sandbox",  # codemode runs scripts only sandboxed
    )
    assert proc.returncode == 0, proc.stderr
    got = results(proc.stdout)
    first, second = got["mcp__d__echo"]
    assert "not found" in text_of(first)  # deferred: not declared before tool_search
    assert "mcp__d__echo" in text_of(got["tool_search"][0])
    assert text_of(second) == "found"
    output = text_of(got["codemode"][0])
    assert "from a script" in output
    assert "denied:" in output and "Adding is forbidden." in output


def blocked(end: dict) -> bool:
    """A ``tool_execution_end`` of a call stopped before it ran: no ``durationMs``,
    and ``result.details.blocked_by`` says by whom (pi's stream has no ``blocked``)."""
    details = (end.get("result") or {}).get("details") or {}
    return "durationMs" not in end and details.get("blocked_by") is not None


def test_a_server_that_cannot_start_is_reported_with_the_reason(tmp_path):
    """A script without the execute bit, and one whose interpreter line names no
    program: each warning says what is wrong (red team of 0.8.0: "not found", and the
    SDK's stream error), and the session goes on."""
    setup = McpSetup(tmp_path)
    plain = setup.root / "plain_server.py"
    plain.write_text("print('never runs')\n")
    plain.chmod(0o644)
    broken = setup.root / "broken_server.py"
    broken.write_text("#!/nonexistent/python3\nprint('never runs')\n")
    broken.chmod(0o755)
    setup.user_servers(
        {
            "plain": {"command": str(plain), "exposure": "direct"},
            "broken": {"command": str(broken), "exposure": "direct"},
        }
    )
    proc = setup.run([[("mcp__broken__x", {})]])
    assert proc.returncode == 0, proc.stderr
    warnings = "\n".join(messages(proc.stdout, "warning"))
    assert f"'plain' not started: command '{plain}' is not executable" in warnings
    assert "'broken'" in warnings and "exited with status" in warnings, warnings
    assert "task_status" not in warnings
