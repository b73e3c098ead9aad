"""``pi mcp list|get|add|remove [--json]``: MCP servers from a shell, without a
session (pi docs cli.md "MCP commands"; issue 19 §Build).

- ``list`` connects to every enabled server (sandboxed as in a session, under the
  policy) and prints its state, tools and errors; exit 1 when an entry is invalid or
  an enabled server did not connect.
- ``get NAME`` the same for one server, with its configuration, tools, resources
  and prompts.
- ``add NAME [--env K=V]… [--cwd DIR] [--exposure E] [--description T]
  [--filesystem none|read|write] [--network HOST]… -- COMMAND [ARGS…]`` or
  ``add NAME --url URL [--header K=V]… [--bearer-token-env-var NAME]``: write the
  user's ``mcp.json`` (``-l``/``--local``: the project's ``.pi/mcp.json``); does not
  connect.
- ``remove NAME [-l]``.

The project's file is read only when the project is trusted (``yes``), as in a run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import trio

from pi_sandbox.supervisor.mcp.config import (
    EXPOSURES,
    add_server,
    load_mcp_config,
    remove_server,
)

__all__ = ["mcp_main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pi mcp", description="Manage MCP servers.")
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="connect to every enabled server and show it")
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--no-sandbox", action="store_true", help="run servers unsandboxed")
    get = sub.add_parser("get", help="connect to one server and show it")
    get.add_argument("name")
    get.add_argument("--json", action="store_true")
    get.add_argument("--no-sandbox", action="store_true", help="run the server unsandboxed")
    add = sub.add_parser("add", help="add or replace a server in mcp.json")
    add.add_argument("name")
    add.add_argument("-l", "--local", action="store_true", help="the project's .pi/mcp.json")
    add.add_argument("--url")
    add.add_argument("--header", action="append", default=[], metavar="KEY=VALUE")
    add.add_argument("--bearer-token-env-var", metavar="NAME")
    add.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    add.add_argument("--cwd")
    add.add_argument("--exposure", choices=EXPOSURES)
    add.add_argument("--description")
    add.add_argument("--filesystem", choices=("none", "read", "write"))
    add.add_argument("--network", action="append", default=[], metavar="HOST")
    add.add_argument("--json", action="store_true")
    remove = sub.add_parser("remove", help="remove a server from mcp.json")
    remove.add_argument("name")
    remove.add_argument("-l", "--local", action="store_true")
    remove.add_argument("--json", action="store_true")
    return parser


def _pairs(values: list[str], option: str) -> dict[str, str]:
    result = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise ValueError(f"argument {option}: expected KEY=VALUE, got {value!r}")
        result[key] = rest
    return result


def mcp_main(argv: list[str], agent_dir: Path, cwd: Path | None = None) -> int:
    """Run ``pi mcp …``; returns the exit status (0, 1: a server failed or an entry is
    invalid, 2: usage)."""
    cwd = (cwd or Path.cwd()).resolve()
    parser = _parser()
    # Everything after `--` is the server's command line, options included.
    command: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    args = parser.parse_args(argv)
    args.command = command
    if args.action in ("add", "remove"):
        path = cwd / ".pi" / "mcp.json" if args.local else agent_dir / "mcp.json"
        try:
            if args.action == "remove":
                removed = remove_server(path, args.name)
                _say(
                    args.json,
                    {"removed": removed, "file": str(path)},
                    f"removed {args.name!r} from {path}"
                    if removed
                    else f"{path} does not define {args.name!r}",
                )
                return EXIT_OK if removed else EXIT_FAILED
            entry = _entry(args)
            replaced = add_server(path, args.name, entry)
        except (ValueError, OSError) as exc:
            print(f"pi mcp: {exc}", file=sys.stderr)
            return EXIT_USAGE
        verb = "replaced" if replaced else "added"
        _say(
            args.json,
            {"action": verb, "file": str(path), "server": entry},
            f"{verb} {args.name!r} in {path}; run `pi mcp list` to check it",
        )
        return EXIT_OK
    return trio.run(_connect_and_show, args, agent_dir, cwd)


def _entry(args: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    command = list(args.command)
    if args.url and command:
        raise ValueError("give either --url or -- COMMAND [ARGS…], not both")
    if args.url:
        entry["url"] = args.url
        headers = _pairs(args.header, "--header")
        if args.bearer_token_env_var:
            headers["Authorization"] = f"Bearer ${{{args.bearer_token_env_var}}}"
        if headers:
            entry["headers"] = headers
    elif command:
        entry["command"] = command[0]
        if command[1:]:
            entry["args"] = command[1:]
        env = _pairs(args.env, "--env")
        if env:
            entry["env"] = env
        if args.cwd:
            entry["cwd"] = args.cwd
    else:
        raise ValueError("give -- COMMAND [ARGS…] for a stdio server or --url URL")
    if args.exposure:
        entry["exposure"] = args.exposure
    if args.description:
        entry["description"] = args.description
    box: dict[str, Any] = {}
    if args.filesystem:
        box["filesystem"] = args.filesystem
    if args.network:
        box["network"] = list(args.network)
    if box:
        entry["sandbox"] = box
    return entry


def _say(as_json: bool, document: Any, text: str) -> None:
    print(json.dumps(document) if as_json else text, flush=True)


def _trusted(cwd: Path, agent_dir: Path) -> tuple[bool, Any]:
    from pi_sandbox.policies import PolicyLocations, load_effective_policy
    from pi_sandbox.resources.resource_set import resolve_trust

    managed = os.environ.get("PI_MANAGED_POLICY_DIR")
    locations = PolicyLocations(
        policy_files=(),
        managed_dirs=(Path(managed),) if managed else (Path("/etc/pi/policy.d"),),
        extra_managed_dirs=(),
        user_file=agent_dir / "policy.yaml",
    )
    policy = load_effective_policy(locations)
    trust = resolve_trust(cwd, agent_dir=agent_dir, home=Path.home(), rules=policy.trust)
    return trust.decision == "yes", policy


async def _connect_and_show(args: Any, agent_dir: Path, cwd: Path) -> int:
    from pi_sandbox.errors import PolicyError
    from pi_sandbox.supervisor.mcp.manager import McpManager
    from pi_sandbox.supervisor.workers.worker_pool import PoolConfig

    try:
        trusted, policy = _trusted(cwd, agent_dir)
    except PolicyError as exc:
        print(f"pi mcp: policy error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    config = load_mcp_config(agent_dir, cwd, project_trusted=trusted)
    if args.action == "get":
        if args.name not in config.servers:
            print(f"pi mcp: no MCP server named {args.name!r}", file=sys.stderr)
            return EXIT_FAILED
        config.servers = {args.name: config.servers[args.name]}
    notices: list[str] = []

    async def emit(event: dict[str, Any]) -> None:
        notices.append(str(event.get("message", "")))

    pool = SimpleNamespace(
        config=PoolConfig(
            cwd=cwd, agent_dir=agent_dir, home=Path.home(), sandbox=False, settings=policy.sandbox
        ),
        tools={},
        external_tools={},
        cgroups=None,
    )
    manager = McpManager(
        config,
        pool=pool,
        rules=policy.mcp,
        cwd=cwd,
        home=Path.home(),
        agent_dir=agent_dir,
        sandbox_mode="off" if args.no_sandbox else "default",
        emit=emit,
    )
    async with trio.open_nursery() as nursery:
        await manager.start(nursery)
        with trio.move_on_after(60):
            for connection in manager.connections.values():
                await connection.ready.wait()
        status = manager.status()
        if args.action == "get":
            await _add_details(manager, status)
        await manager.aclose()
        nursery.cancel_scope.cancel()
    failed = bool(config.errors) or any(
        line["state"] not in ("connected", "disabled (config)") for line in status
    )
    if args.json:
        print(json.dumps({"servers": status, "errors": config.errors}, indent=2))
    else:
        for error in config.errors:
            print(f"config error: {error}")
        for line in status:
            sandbox = "sandboxed" if line["sandboxed"] else "unsandboxed"
            tools = line["tools"]
            print(
                f"{line['name']}: {line['state']} ({line['kind']}, {sandbox}, "
                f"exposure {line['exposure']}, {len(tools)} tools) — {line['source']}"
            )
            if line["error"]:
                print(f"  error: {line['error'].splitlines()[0]}")
            for tool in tools:
                mark = f" [{tool['exposure']}]" if tool["exposure"] != line["exposure"] else ""
                print(f"  - {tool['name']}{mark}: {tool['description']}")
            for name in ("resources", "prompts"):
                if isinstance(line.get(name), list):
                    for item in line[name]:
                        print(f"  {name[:-1]}: {item}")
    return EXIT_FAILED if failed else EXIT_OK


async def _add_details(manager: Any, status: list[dict[str, Any]]) -> None:
    for line in status:
        connection = manager.connections.get(line["name"])
        if connection is None or connection.state != "connected":
            continue
        line["description"] = connection.config.description
        line["instructions"] = connection.instructions
        if connection.has_resources:
            result = await connection.request("resources/list", lambda s: s.list_resources())
            line["resources"] = [str(r.uri) for r in result.resources]
        if connection.has_prompts:
            result = await connection.request("prompts/list", lambda s: s.list_prompts())
            line["prompts"] = [p.name for p in result.prompts]
