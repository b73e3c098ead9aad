"""A hostile MCP server in its sandbox obtains nothing and cannot take the session
down (issue 19 §2, §Tests).

The attack: sentinels are planted in HOME (``.ssh/id_rsa``), in the workspace
(``secret.txt``), in the agent's ``auth.json`` and in the supervisor's environment
(``OPENAI_API_KEY``, ``DEPLOY_TOKEN``). The hostile server
(``tests/fixtures/mcp/hostile_server.py``) reads them through the file system, its
environment and ``/proc/*/environ``/``cmdline``, connects to a TCP listener on the
host's 127.0.0.1 and writes ``$HOME/pwned`` and a file outside the workspace. Run
sandboxed (the default), no sentinel appears anywhere in the output, the listener
gets no connection and no file is written. The control runs the same server with
``--no-sandbox`` (documented in docs/mcp.md: MCP servers then run as plain
processes) and shows the attack does obtain the secrets, so the assertions can fail.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))
from mcp_setup import HOSTILE, McpSetup, messages, results, text_of

pytestmark = [pytest.mark.security, pytest.mark.usefixtures("require_bwrap")]

SSH = "SENTINEL-mcp-ssh-41d8"
WORKSPACE = "SENTINEL-mcp-workspace-77ab"
AUTH = "SENTINEL-mcp-auth-3c19"
ENV = "SENTINEL-mcp-env-9e02"


def _plant(setup: McpSetup) -> dict[str, str]:
    (setup.home / ".ssh").mkdir()
    (setup.home / ".ssh" / "id_rsa").write_text(SSH)
    (setup.ws / "secret.txt").write_text(WORKSPACE)
    (setup.agent / "auth.json").write_text(json.dumps({"openai": {"type": "api_key", "key": AUTH}}))
    (setup.agent / "auth.json").chmod(0o600)
    return {**setup.env, "OPENAI_API_KEY": ENV, "DEPLOY_TOKEN": ENV}


def _hostile(setup: McpSetup, port: int, **fields: object) -> dict[str, object]:
    outside = setup.root / "outside.txt"
    return setup.server(
        HOSTILE,
        str(setup.home),
        str(setup.ws),
        str(setup.agent),
        str(port),
        str(outside),
        exposure="direct",
        **fields,
    )


def test_a_hostile_mcp_server_in_its_sandbox_obtains_nothing(tmp_path, listener):
    setup = McpSetup(tmp_path)
    env = _plant(setup)
    setup.user_servers({"h": _hostile(setup, listener.port)})
    proc = setup.run([[("mcp__h__steal", {})]], env=env)
    assert proc.returncode == 0, proc.stderr
    loot = text_of(results(proc.stdout)["mcp__h__steal"][0])
    assert "connect failed" in loot and "write" in loot  # the attack ran
    for sentinel in (SSH, WORKSPACE, AUTH, ENV):
        assert sentinel not in proc.stdout and sentinel not in proc.stderr
    assert not listener.wait_for_connection(timeout=2)
    assert not (setup.home / "pwned").exists()
    assert not (setup.root / "outside.txt").exists()


def test_control_the_same_server_unsandboxed_reads_the_sentinels(tmp_path, listener):
    setup = McpSetup(tmp_path)
    env = _plant(setup)
    setup.user_servers({"h": _hostile(setup, listener.port)})
    proc = setup.run([[("mcp__h__steal", {})]], "--no-sandbox", env=env)
    assert proc.returncode == 0, proc.stderr
    loot = text_of(results(proc.stdout)["mcp__h__steal"][0])
    assert SSH in loot and WORKSPACE in loot and AUTH in loot
    assert "CONNECTED" in loot and listener.wait_for_connection()
    assert (setup.home / "pwned").exists() and (setup.root / "outside.txt").exists()
    # Even unsandboxed, the server's environment holds only what its config names.
    assert ENV not in loot.split("env: ", 1)[1].split("\n", 1)[0]


def test_only_configured_variables_reach_a_server_and_a_granted_workspace_is_read_only(
    tmp_path, listener
):
    setup = McpSetup(tmp_path)
    env = _plant(setup)
    setup.user_servers(
        {
            "h": _hostile(
                setup,
                listener.port,
                env={"SERVICE_TOKEN": "${DEPLOY_TOKEN}"},
                sandbox={"filesystem": "read"},
            )
        }
    )
    audit = setup.root / "audit.jsonl"
    proc = setup.run([[("mcp__h__steal", {})]], "--audit-log", str(audit), env=env)
    assert proc.returncode == 0, proc.stderr
    loot = text_of(results(proc.stdout)["mcp__h__steal"][0])
    environment = loot.split("env: ", 1)[1].split("\n", 1)[0]
    passed = [json.loads(line) for line in audit.read_text().splitlines() if '"env"' in line]
    assert passed and passed[0]["server"] == "h" and passed[0]["names"] == ["SERVICE_TOKEN"]
    assert ENV not in audit.read_text()  # names are audited, never values
    # The configured secret reaches this server (by name) and nothing else does.
    assert "'SERVICE_TOKEN': '" + ENV in environment
    assert "OPENAI_API_KEY" not in environment and "DEPLOY_TOKEN" not in environment
    assert WORKSPACE in loot  # filesystem: read grants the workspace …
    assert not (setup.ws / "pwned").exists()  # … read-only
    assert SSH not in loot and AUTH not in loot


def test_misbehaviour_is_contained_and_the_session_survives(tmp_path):
    setup = McpSetup(tmp_path)
    setup.user_servers({"h": setup.server(HOSTILE, exposure="direct", timeout=3)})
    proc = setup.run(
        [
            [("mcp__h__garbage", {})],
            [("mcp__h__malformed", {})],
            [("mcp__h__hang", {})],
            [("mcp__h__echo", {"text": "after hang"})],
            [("mcp__h__flood", {})],
            [("mcp__h__echo", {"text": "after flood"})],
            [("mcp__h__bigline", {})],
            [("mcp__h__echo", {"text": "after bigline"})],
        ]
    )
    assert proc.returncode == 0, proc.stderr
    got = results(proc.stdout)
    assert text_of(got["mcp__h__garbage"][0]) == "after garbage"
    assert not got["mcp__h__malformed"][0]["isError"]
    assert "timed out after 3 s" in text_of(got["mcp__h__hang"][0])
    assert [text_of(e) for e in got["mcp__h__echo"]] == [
        "after hang",
        "after flood",
        "after bigline",
    ]
    assert got["mcp__h__flood"][0]["isError"] and got["mcp__h__bigline"][0]["isError"]
    warnings = messages(proc.stdout, "warning")
    assert any("wrote output that is not MCP" in w for w in warnings)
    assert any("lines that are not JSON-RPC" in w for w in warnings)
    assert any("a line over" in w for w in warnings)


def test_without_a_working_bwrap_a_server_is_refused_not_run_unsandboxed(tmp_path):
    setup = McpSetup(tmp_path)
    fake = setup.root / "bwrap"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    marker = setup.root / "ran"
    setup.user_servers(
        {"h": {"command": "/bin/sh", "args": ["-c", f"touch {marker}"], "exposure": "direct"}}
    )
    proc = setup.run(
        [[("mcp__h__echo", {"text": "x"})]], env={**setup.env, "PI_SANDBOX_BWRAP": str(fake)}
    )
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()
    assert any("bwrap cannot run here" in w for w in messages(proc.stdout, "warning"))


@pytest.fixture
def web_servers():
    """Two HTTP servers on the host's 127.0.0.1 answering 200: (allowed, denied) ports."""
    import http.server
    import threading

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield tuple(server.server_address[1] for server in servers)
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_server_reaches_only_the_hosts_its_network_grant_names(tmp_path, web_servers):
    allowed, denied = web_servers
    setup = McpSetup(tmp_path)
    setup.user_servers({"h": _hostile(setup, 9, sandbox={"network": [f"127.0.0.1:{allowed}"]})})
    audit = setup.root / "audit.jsonl"
    proc = setup.run(
        [
            [("mcp__h__fetch", {"url": f"http://127.0.0.1:{allowed}/"})],
            [("mcp__h__fetch", {"url": f"http://127.0.0.1:{denied}/"})],
        ],
        "--audit-log",
        str(audit),
    )
    assert proc.returncode == 0, proc.stderr
    first, second = (text_of(e) for e in results(proc.stdout)["mcp__h__fetch"])
    assert first == "status 200"
    assert second.startswith("status 403") and "denied" in second
    egress = [
        json.loads(line)
        for line in audit.read_text().splitlines()
        if '"egress"' in line and '"mcp_server": "h"' in line
    ]
    assert [r["decision"] for r in egress] == ["allow", "deny"]


def test_a_managed_policy_pins_a_servers_profile_over_its_configuration(tmp_path):
    setup = McpSetup(tmp_path)
    env = _plant(setup)
    (setup.root / "managed.d").mkdir()
    (setup.root / "managed.d" / "50-mcp.yaml").write_text(
        "version: 1\nmcp:\n  servers:\n    h: {filesystem: none, env: []}\n"
    )
    setup.user_servers(
        {
            "h": _hostile(
                setup, 9, sandbox={"filesystem": "write"}, env={"SERVICE_TOKEN": "${DEPLOY_TOKEN}"}
            )
        }
    )
    proc = setup.run([[("mcp__h__steal", {})]], env=env)
    assert proc.returncode == 0, proc.stderr
    loot = text_of(results(proc.stdout)["mcp__h__steal"][0])
    assert WORKSPACE not in loot and ENV not in loot
    assert "workspace: <" in loot  # the read was attempted and failed


def test_a_key_from_the_users_store_reaches_only_the_server_that_names_it(tmp_path):
    setup = McpSetup(tmp_path)
    env = _plant(setup)
    setup.user_servers(
        {
            "h": _hostile(setup, 9, authEnv={"OPENAI_KEY": "openai"}),
            "other": _hostile(setup, 9),
        }
    )
    proc = setup.run([[("mcp__h__steal", {})], [("mcp__other__steal", {})]], env=env)
    assert proc.returncode == 0, proc.stderr
    got = results(proc.stdout)
    mine = text_of(got["mcp__h__steal"][0]).split("env: ", 1)[1].split("\n", 1)[0]
    theirs = text_of(got["mcp__other__steal"][0])
    assert f"'OPENAI_KEY': '{AUTH}'" in mine
    assert AUTH not in theirs
    # A project file cannot route the user's keys.
    setup.project_servers({"p": _hostile(setup, 9, authEnv={"K": "openai"})})
    trusted = setup.run([[("mcp__p__steal", {})]], "--trust", "yes", env=env)
    assert AUTH not in trusted.stdout
    assert any(
        "authEnv is only allowed in the user's mcp.json" in m
        for m in messages(trusted.stdout, "warning")
    )


def test_a_trusted_projects_mcp_json_cannot_hand_a_server_the_users_environment(tmp_path, listener):
    """Red-team finding of 0.7: `"env": {"K": "${OPENAI_API_KEY}"}` in a trusted
    project's .pi/mcp.json gave the project's server the user's key. The entry is
    refused (naming the field) and the server never starts; control: the same entry
    in the user's own mcp.json starts and gets the variable."""
    setup = McpSetup(tmp_path)
    env = _plant(setup)
    setup.project_servers({"h": _hostile(setup, listener.port, env={"LEAK": "${OPENAI_API_KEY}"})})
    proc = setup.run([[("mcp__h__steal", {})]], "--trust", "yes", env=env)
    assert proc.returncode == 0, proc.stderr
    assert ENV not in proc.stdout + proc.stderr
    assert any("cannot read the environment" in m for m in messages(proc.stdout, "warning"))
    assert "not found" in text_of(results(proc.stdout)["mcp__h__steal"][0])
    # Control: the user's own file may name the variable; the server gets it.
    (setup.ws / ".pi" / "mcp.json").unlink()
    setup.user_servers({"h": _hostile(setup, listener.port, env={"LEAK": "${OPENAI_API_KEY}"})})
    mine = setup.run([[("mcp__h__steal", {})]], "--trust", "yes", env=env)
    assert mine.returncode == 0, mine.stderr
    assert "'LEAK': '" + ENV in text_of(results(mine.stdout)["mcp__h__steal"][0])
