"""The ``pi`` command line (a public contract; later issues extend it).

``pi [options] [message…]``, ``pi sandbox doctor [--json]``,
``pi policy check|show|explain``, ``pi trust [yes|no|sandboxed|forget|show] [PATH]``,
``pi resources [--json]``, ``pi sessions [--json] [-C DIR] [--all]`` and ``pi auth login|logout|status``. Exit status: 0 success; 1 the agent or provider
failed; 2 bad usage or configuration (names the argument or file); 3 a sandbox was
required (``--sandbox``, or ``--trust sandboxed`` with project extensions) and
bubblewrap cannot run here — in ``--ci`` mode that is 2, and 3 means the run
finished but the policy denied at least one tool call; 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pi_sandbox import __version__

__all__ = [
    "EXIT_AGENT_ERROR",
    "EXIT_OK",
    "EXIT_SANDBOX_UNAVAILABLE",
    "EXIT_USAGE",
    "build_parser",
    "main",
    "policy_main",
    "resources_main",
    "sandbox_main",
    "trust_main",
]

EXIT_OK = 0
EXIT_AGENT_ERROR = 1
EXIT_USAGE = 2
EXIT_SANDBOX_UNAVAILABLE = 3


SUBCOMMANDS_HELP = """commands (pi COMMAND --help for each):
  pi sandbox doctor [--json]            what --sandbox enforces on this machine
  pi policy check|show|explain          validate policies; show or explain decisions
  pi trust [yes|no|sandboxed|forget|show] [PATH]
                                        the project trust decision
  pi resources [--json]                 skills, prompts, context files, extensions a run loads
  pi mcp list|get|add|remove [--json]   MCP servers (docs/mcp.md)
  pi sessions [--json] [-C DIR] [--all] the sessions of a directory (docs/sessions.md)
  pi auth login|logout|status PROVIDER  stored API keys (docs/providers.md)

not available in pi-sandbox yet: install, remove, uninstall, update, list, config"""

NOT_YET_SUBCOMMANDS = ("install", "remove", "uninstall", "update", "list", "config")
"""pi 1.6.0 subcommands pi-sandbox does not have yet: refused with exit 2 instead of
being sent to the model as a prompt (issue 17 §5)."""


def agent_dir() -> Path:
    """``$PI_CODING_AGENT_DIR`` if set, else ``~/.pi/agent`` (as in pi)."""
    override = os.environ.get("PI_CODING_AGENT_DIR")
    return Path(override).expanduser() if override else Path.home() / ".pi" / "agent"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; ``argparse`` reports usage errors naming the argument (exit 2)."""
    parser = argparse.ArgumentParser(
        prog="pi",
        usage="pi [options] [--] [@files...] [messages...]\n       pi COMMAND ...",
        description="A coding agent whose extensions and tools each run in a sandboxed worker process.",
        epilog=SUBCOMMANDS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # No abbreviations: an extension's --mo flag must not read as --model/--mode.
        allow_abbrev=False,
    )
    parser.add_argument(
        "message",
        nargs="*",
        help="prompts, sent in turn; @path attaches a file (text inline, images as images) "
        "to the first; piped stdin is prepended to the first",
    )
    parser.add_argument(
        "-p", "--print", action="store_true", help="non-interactive: print the final answer"
    )
    parser.add_argument(
        "--mode",
        choices=["text", "json", "rpc"],
        default="text",
        help="output mode (json: event stream; rpc: JSON commands on stdin, events on stdout)",
    )
    parser.add_argument("-C", dest="directory", metavar="DIR", help="run as if started in DIR")
    parser.add_argument(
        "--model",
        default=None,
        metavar="PATTERN",
        help="PROVIDER/ID[:THINKING], a model id or name pattern (see --list-models), or scripted",
    )
    parser.add_argument(
        "--provider", metavar="NAME", help="restrict the --model lookup to one provider"
    )
    parser.add_argument(
        "--thinking",
        choices=["off", "minimal", "low", "medium", "high", "xhigh", "max"],
        metavar="LEVEL",
        help="thinking level: off, minimal, low, medium, high, xhigh (clamped to the model)",
    )
    parser.add_argument(
        "--models",
        metavar="A,B,C",
        help="model patterns to cycle through (RPC cycle_model); the first starts "
        "when --model is absent",
    )
    parser.add_argument(
        "--list-models",
        nargs="?",
        const="",
        default=None,
        metavar="SEARCH",
        help="list the known models (optionally matching SEARCH) and exit",
    )
    parser.add_argument(
        "--script", type=Path, metavar="FILE", help="YAML script for --model scripted"
    )
    parser.add_argument("--base-url", metavar="URL", help="API base URL for the chosen model")
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help="API key for this run (default: auth.json, models.json, then the "
        "provider's variable, e.g. $OPENAI_API_KEY; `pi auth login` stores one)",
    )
    parser.add_argument(
        "--context-window",
        type=_positive_tokens,
        metavar="TOKENS",
        help="the model's context window, for automatic compaction (default: the model's, "
        "else 128000)",
    )
    parser.add_argument(
        "-e",
        "--extension",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="load an extension",
    )
    parser.add_argument(
        "-ne",
        "--no-extensions",
        action="store_true",
        help="disable extension discovery (-e still loads)",
    )
    tools = parser.add_mutually_exclusive_group()
    tools.add_argument(
        "-t",
        "--tools",
        metavar="LIST",
        help="comma-separated tool names or *-patterns that replace the default selection "
        "(built-in and extension tools alike), or only +name/-name entries that change it",
    )
    tools.add_argument("-nt", "--no-tools", action="store_true", help="no tool is active")
    parser.add_argument(
        "-xt",
        "--exclude-tools",
        metavar="LIST",
        help="comma-separated tool names or *-patterns disabled after every other tool option",
    )
    parser.add_argument(
        "-nbt",
        "--no-builtin-tools",
        action="store_true",
        help="disable the default built-in tools, keep extension tools",
    )
    sandbox = parser.add_mutually_exclusive_group()
    sandbox.add_argument(
        "--sandbox", dest="sandbox", action="store_true", default=None, help="run workers in bwrap"
    )
    sandbox.add_argument(
        "--no-sandbox", dest="sandbox", action="store_false", help="run workers without bwrap"
    )
    parser.add_argument(
        "--no-mcp", action="store_true", help="connect no MCP server for this run (pi cli.md)"
    )
    parser.add_argument(
        "--policy", action="append", default=[], type=Path, metavar="FILE", help="policy YAML file"
    )
    parser.add_argument(
        "--trust", choices=["yes", "no", "sandboxed"], help="trust decision for this project"
    )
    parser.add_argument(
        "-a",
        "--approve",
        dest="trust",
        action="store_const",
        const="yes",
        help="pi's spelling of --trust yes (this run only)",
    )
    parser.add_argument(
        "-na",
        "--no-approve",
        dest="trust",
        action="store_const",
        const="no",
        help="pi's spelling of --trust no (this run only)",
    )
    parser.add_argument(
        "-nc",
        "--no-context-files",
        action="store_true",
        help="do not read AGENTS.md / CLAUDE.md",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print mode: also show on stderr the model's text between tool calls, whole "
        "tool results and a usage and cost line at the end",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="no automatic network activity (pi-sandbox makes none besides model requests; "
        "accepted for pi compatibility)",
    )
    add_resource_options(parser)
    parser.add_argument(
        "--system-prompt",
        metavar="TEXT|FILE",
        help="replace the built-in system prompt (a file's text when FILE exists)",
    )
    parser.add_argument(
        "--append-system-prompt",
        action="append",
        default=[],
        metavar="TEXT|FILE",
        help="append to the system prompt (repeatable; a file's text when FILE exists)",
    )
    parser.add_argument("--no-session", action="store_true", help="do not write a session file")
    add_session_options(parser)
    parser.add_argument(
        "--ci",
        action="store_true",
        help="CI mode: implies --sandbox and -p, asks are denied, read-only workspace and no "
        "network unless the policy grants them, audit log in ./pi-output/audit.jsonl, "
        "exit 3 when a tool call was denied",
    )
    parser.add_argument(
        "--audit-log", type=Path, metavar="FILE", help="append audit records (JSON lines) to FILE"
    )
    parser.add_argument("-v", "--version", action="version", version=f"pi-sandbox {__version__}")
    return parser


def _positive_tokens(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of tokens, got {value}")
    return value


def add_session_options(parser: argparse.ArgumentParser) -> None:
    """pi's session options (cli.md "Sessions", issue 15): ``-c/--continue``,
    ``-r/--resume``, ``--session``, ``--session-id``, ``--fork``, ``--session-dir``,
    ``-n/--name``; resolved by `pi_sandbox.supervisor.sessions.startup.choose_session`."""
    parser.add_argument(
        "-c",
        "--continue",
        dest="continue_",
        action="store_true",
        help="continue the most recent session of this directory",
    )
    parser.add_argument(
        "-r",
        "--resume",
        action="store_true",
        help="choose a session to resume (interactive; otherwise lists recent sessions)",
    )
    parser.add_argument(
        "--session", metavar="PATH|ID", help="resume a session (file or id prefix) in its directory"
    )
    parser.add_argument(
        "--session-id", metavar="ID", help="continue this directory's session ID, or start it"
    )
    parser.add_argument(
        "--fork", metavar="PATH|ID", help="copy a session into this directory as a new session"
    )
    parser.add_argument("--session-dir", metavar="DIR", help="store and look up sessions in DIR")
    parser.add_argument("-n", "--name", metavar="NAME", help="the session's display name")


def sessions_main(argv: Sequence[str]) -> int:
    """``pi sessions [--json] [-C DIR] [--all] [--session-dir DIR]`` (issue 15): list
    sessions without starting one, newest first — this directory's, or with
    ``--all`` every directory's (pi's and ours alike, one layout). ``--json``
    prints one object ``{"sessions": [row…]}``, each row ``id``, ``name``, ``cwd``,
    ``path``, ``created``, ``modified``, ``messageCount``, ``firstPrompt``,
    ``parentSession`` (a public contract). Exit 0, 2 on bad usage.
    """
    parser = argparse.ArgumentParser(prog="pi sessions", description="List sessions.")
    parser.add_argument("-C", dest="directory", metavar="DIR", help="the directory (default: .)")
    parser.add_argument("--all", action="store_true", help="sessions of every directory")
    parser.add_argument("--session-dir", metavar="DIR", help="sessions stored in DIR")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    import json

    from pi_sandbox.supervisor.modes.output_modes import printable
    from pi_sandbox.supervisor.sessions.catalog import list_sessions
    from pi_sandbox.supervisor.sessions.startup import configured_session_dir

    workspace = Path(args.directory).expanduser() if args.directory else Path.cwd()
    if not workspace.is_dir():
        parser.error(f"argument -C: not a directory: {args.directory}")
    workspace = workspace.resolve()
    if args.session_dir:
        session_dir = Path(os.path.abspath(Path(args.session_dir).expanduser()))
    else:  # $PI_CODING_AGENT_SESSION_DIR, then settings.json's sessionDir (as pi)
        session_dir = configured_session_dir(agent_dir(), workspace, os.environ)
    rows = list_sessions(agent_dir(), workspace, session_dir=session_dir, every=args.all)
    if args.json:
        print(json.dumps({"sessions": [r.as_dict() for r in rows]}, indent=2, ensure_ascii=False))
        return EXIT_OK
    say = _printing(printable)
    if not rows:
        say(f"No sessions{'' if args.all else f' of {workspace}'}.")
    for row in rows:
        title = row.name or (row.first_prompt or "(no messages)").replace("\n", " ")[:70]
        say(
            f"{row.id}  {row.modified[:19].replace('T', ' ')}  {row.message_count:>4} msgs  {title}"
        )
        if args.all:
            say(f"    {row.cwd}")
    return EXIT_OK


def add_resource_options(parser: argparse.ArgumentParser) -> None:
    """``--skill``, ``--no-skills``, ``--prompt-template``, ``--no-prompt-templates``
    (shared by runs and ``pi resources``)."""
    parser.add_argument(
        "--skill",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="load a skill file or directory (repeatable; works with --no-skills)",
    )
    parser.add_argument(
        "-ns", "--no-skills", action="store_true", help="no skill discovery (--skill still loads)"
    )
    parser.add_argument(
        "--prompt-template",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="load a prompt template file or directory (repeatable)",
    )
    parser.add_argument(
        "-np",
        "--no-prompt-templates",
        action="store_true",
        help="no prompt template discovery (--prompt-template still loads)",
    )


def _check_resource_paths(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for option, paths in (("--skill", args.skill), ("--prompt-template", args.prompt_template)):
        for path in paths:
            if not os.path.lexists(path):
                parser.error(f"argument {option}: no such file or directory: {path}")


def sandbox_main(argv: Sequence[str]) -> int:
    """``pi sandbox doctor [--json]``: report what the sandbox enforces here.

    Exit 0 when ``--sandbox`` works (verdict ``ok`` or ``degraded``), 3 when it
    cannot be honoured (verdict ``unavailable``), 2 on bad usage.
    """
    parser = argparse.ArgumentParser(prog="pi sandbox", description="Inspect the OS sandbox.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    doctor = commands.add_parser(
        "doctor", help="check what --sandbox can enforce on this machine (paste into bug reports)"
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    from pi_sandbox.sandbox.doctor import run_doctor

    report = run_doctor()
    if args.json:
        import json

        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(report.as_text())
    return EXIT_SANDBOX_UNAVAILABLE if report.verdict == "unavailable" else EXIT_OK


def managed_policy_dirs() -> tuple[Path, ...]:
    """``/etc/pi/policy.d`` plus the directories in ``$PI_MANAGED_POLICY_DIR``
    (``:``-separated). The variable adds managed files with exactly the power of
    ``--policy FILE`` (whoever sets a run's environment can pass options too): they
    come after ``/etc/pi/policy.d``, whose files still bind every value they set and
    whose ``lock`` binds them."""
    from pi_sandbox.policies import MANAGED_POLICY_DIR

    extra = [Path(p) for p in os.environ.get("PI_MANAGED_POLICY_DIR", "").split(":") if p]
    return (MANAGED_POLICY_DIR, *extra)


def policy_main(argv: Sequence[str]) -> int:
    """``pi policy check|show|explain`` (issue 4 CLI).

    ``check FILE…``: validate each file and run its rules' examples; prints one
    line per file (``FILE: ok, N rules`` or the problems, ``FILE:LINE: KEY: …``);
    exit 0 when all are valid, 2 otherwise.

    ``show [--json]`` and ``explain --tool NAME --input JSON [--json]`` load the
    policy a run in ``-C DIR`` would load: ``/etc/pi/policy.d/*.yaml`` (and
    ``$PI_MANAGED_POLICY_DIR``), every ``--policy FILE``, the user's
    ``policy.yaml``, and the project's ``.pi/policy.yaml`` when the project is
    trusted (``--trust yes|sandboxed``, a saved decision, a default — as a run
    decides, extensions' ``project_trust`` answers aside). ``show`` prints every effective value with the
    file and tier it came from, and what was ignored. ``explain`` decides one tool
    call as the gate would: the decision, the rule, its tier and file, the reason,
    and for shell commands each parsed simple command with its own decision;
    ``--json`` prints one object with ``decision``, ``rule``, ``tier``, ``reason``,
    ``source`` and ``commands``. Exit 0 (whatever the decision), 2 on bad usage or
    a bad policy file.
    """
    parser = argparse.ArgumentParser(
        prog="pi policy", description="Check, show and explain policies."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = commands.add_parser("check", help="validate policy files and run their examples")
    check.add_argument("files", nargs="+", type=Path, metavar="FILE")
    show = commands.add_parser(
        "show", help="print the effective policy and where each value came from"
    )
    explain = commands.add_parser("explain", help="show how the policy decides one tool call")
    for sub in (show, explain):
        sub.add_argument(
            "--policy", action="append", default=[], type=Path, metavar="FILE", help="policy file"
        )
        sub.add_argument("-C", dest="directory", metavar="DIR", help="the workspace (default: .)")
        sub.add_argument(
            "--trust",
            choices=["yes", "no", "sandboxed"],
            help="the trust decision to assume (as a run's --trust): yes or sandboxed include "
            "the project's .pi/policy.yaml",
        )
        sub.add_argument("--json", action="store_true", help="print one JSON object")
    explain.add_argument("--tool", required=True, metavar="NAME", help="tool name, e.g. bash")
    explain.add_argument(
        "--input", required=True, metavar="JSON", help='tool arguments, e.g. \'{"command": "ls"}\''
    )
    args = parser.parse_args(argv)

    import dataclasses
    import json

    from pi_sandbox.errors import PolicyError
    from pi_sandbox.policies import (
        PolicyLocations,
        evaluate_tool_call,
        load_effective_policy,
        load_policy_file,
    )

    if args.command == "check":
        status = EXIT_OK
        for path in args.files:
            try:
                loaded = load_policy_file(path)
            except PolicyError as exc:
                print(str(exc), file=sys.stderr)
                status = EXIT_USAGE
                continue
            rules = loaded.tool_call.rules
            examples = sum(len(r.examples.match) + len(r.examples.not_match) for r in rules)
            print(f"{path}: ok, {len(rules)} rules, {examples} examples pass")
        return status

    arguments = None
    if args.command == "explain":
        try:
            arguments = json.loads(args.input)
        except ValueError as exc:
            parser.error(f"argument --input: not JSON: {exc}")
        if not isinstance(arguments, dict):
            parser.error("argument --input: must be a JSON object of tool arguments")
    workspace = Path(args.directory).expanduser() if args.directory else Path.cwd()
    if not workspace.is_dir():
        parser.error(f"argument -C: not a directory: {args.directory}")
    workspace = workspace.resolve()
    for path in args.policy:
        if not path.is_file():
            parser.error(f"argument --policy: no such file: {path}")
    locations = PolicyLocations(
        policy_files=tuple(args.policy),
        managed_dirs=managed_policy_dirs()[:1],
        extra_managed_dirs=managed_policy_dirs()[1:],
        user_file=agent_dir() / "policy.yaml",
    )
    try:
        policy = load_effective_policy(locations)
        # The project tier joins exactly when a run would read it (trust decided
        # the same way; forbidden --trust values are refused the same way).
        from pi_sandbox.resources.resource_set import resolve_trust

        try:
            trust = resolve_trust(
                workspace,
                agent_dir=agent_dir(),
                home=Path.home(),
                requested=args.trust,
                rules=policy.trust,
            ).decision
        except ValueError as exc:
            parser.error(f"argument --trust: {exc}")
        project = workspace / ".pi" / "policy.yaml"
        if trust in ("yes", "sandboxed") and os.path.lexists(project):
            locations = dataclasses.replace(locations, project_file=project)
            policy = load_effective_policy(locations)
    except PolicyError as exc:
        print(f"pi: policy error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "show":
        return _show_policy(policy, as_json=args.json)

    assert arguments is not None
    decision = evaluate_tool_call(policy, args.tool, arguments, workspace=workspace)
    result = {
        "decision": decision.decision,
        "rule": decision.rule,
        "tier": decision.tier,
        "reason": decision.reason,
        "source": decision.source,
        "commands": decision.commands,
        "unparseable": decision.unparseable,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return EXIT_OK
    where = f" ({decision.tier}, {decision.source})" if decision.source else f" ({decision.tier})"
    # Issue 13 §6: a decision of the `unparseable` setting says so.
    deciding = decision.rule or ("unparseable setting" if decision.unparseable else "no rule")
    print(f"{decision.decision}: {deciding}{where}")
    print(f"  reason: {decision.reason}")
    for command in decision.commands:
        extra = ""
        if command.get("via"):
            extra += f"  via {' > '.join(command['via'])}"
        if command.get("flags"):
            extra += f"  flags {', '.join(command['flags'])}"
        if command.get("unknown"):
            extra += f"  unknown: {command['unknown']}"
        print(f"  {command['decision']:5}  {json.dumps(command['argv'])}{extra}")
    return EXIT_OK


def _show_policy(policy: object, *, as_json: bool) -> int:
    """Print the effective policy: every value with its tier and file(s)."""
    import json

    from pi_sandbox.policies import Policy

    assert isinstance(policy, Policy)
    report = {
        "files": [{"tier": f.tier, "file": str(f.path)} for f in policy.files],
        "values": [origin.as_dict() for origin in policy.provenance],
        "ignored": list(policy.diagnostics),
    }
    if as_json:
        print(json.dumps(report, indent=2))
        return EXIT_OK
    if not policy.files:
        print("no policy files: every tool call is allowed (the sandbox still applies)")
    for loaded in policy.files:
        print(f"{loaded.tier:8} {loaded.path}")
    print()
    width = max((len(o.key) for o in policy.provenance), default=10)
    for origin in policy.provenance:
        value = json.dumps(origin.value) if not isinstance(origin.value, str) else origin.value
        where = ", ".join(origin.files) if origin.files else "built-in default"
        print(f"{origin.key:{width}}  {value}  [{origin.tier}: {where}]")
    for line in policy.diagnostics:
        print(f"ignored: {line}")
    return EXIT_OK


def _base_policy(policies: Sequence[Path]) -> object:
    """The managed and user tiers (what decides trust; the project tier never does).

    Raises:
        PolicyError: a policy file is malformed.
    """
    from pi_sandbox.policies import PolicyLocations, load_effective_policy

    locations = PolicyLocations(
        policy_files=tuple(policies),
        managed_dirs=managed_policy_dirs()[:1],
        extra_managed_dirs=managed_policy_dirs()[1:],
        user_file=agent_dir() / "policy.yaml",
    )
    return load_effective_policy(locations)


def trust_main(argv: Sequence[str]) -> int:
    """``pi trust [yes|no|sandboxed|forget|show] [PATH] [--json]`` (issue 6).

    ``yes``/``no``/``sandboxed`` record the decision for PATH (default: the current
    directory) in ``<agent dir>/trust.json`` (pi 1.6.0's format; ``sandboxed`` is
    ``false`` there) and ``<agent dir>/pi-sandbox-trust.json`` (atomic writes, mode
    0600, under pi's lock directory), with a fingerprint of the trust-requiring
    resources it approves: those of PATH and of every directory below it (issue 14
    §4). It applies to PATH and every directory below it without a nearer decision,
    as long as those resources do not change. ``--follow-changes`` (``sandboxed``
    only) keeps it applying, sandboxed, when they change. A decision the
    organisation policy forbids (``trust.users_may_trust``) is refused (exit 2).
    ``forget`` drops the decision recorded for exactly PATH. ``show`` (the default)
    prints the decision a run in PATH would get without ``--trust`` (extensions'
    ``project_trust`` answers aside), where it comes from, the project's
    trust-requiring resources, what changed since the stored decision, and every
    stored decision. Exit 0, 2 on bad usage, an unreadable store or a bad policy file.
    """
    parser = argparse.ArgumentParser(
        prog="pi trust", description="Manage saved project trust decisions."
    )
    parser.add_argument(
        "action",
        nargs="?",
        default="show",
        choices=["yes", "no", "sandboxed", "forget", "show"],
        help="record a decision, forget one, or show (default)",
    )
    parser.add_argument("path", nargs="?", metavar="PATH", help="the project (default: .)")
    parser.add_argument(
        "--policy", action="append", default=[], type=Path, metavar="FILE", help="policy file"
    )
    parser.add_argument("--json", action="store_true", help="show: print one JSON object")
    parser.add_argument(
        "--follow-changes",
        action="store_true",
        help="sandboxed: keep loading the project sandboxed when its resources change",
    )
    args = parser.parse_intermixed_args(argv)
    if args.follow_changes and args.action != "sandboxed":
        parser.error("argument --follow-changes: only with sandboxed")
    import json

    from pi_sandbox.errors import PolicyError
    from pi_sandbox.resources.project_trust import TrustStore, TrustStoreError
    from pi_sandbox.resources.resource_set import resolve_trust, trust_store_path
    from pi_sandbox.resources.trust_fingerprint import decision_fingerprint

    given = Path(os.path.abspath(os.path.expanduser(args.path or ".")))
    # Runs look decisions up by the resolved working directory: a decision saved
    # for a symlink's own path would never apply (issue 6 review).
    target = Path(os.path.realpath(given))
    if args.action != "forget" and not target.is_dir():
        parser.error(f"argument PATH: not a directory: {args.path}")
    for path in args.policy:
        if not path.is_file():
            parser.error(f"argument --policy: no such file: {path}")
    store_path = trust_store_path(agent_dir())
    try:
        store = TrustStore.load(store_path)
    except TrustStoreError as exc:
        print(f"pi: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        policy = _base_policy(args.policy)
    except PolicyError as exc:
        print(f"pi: policy error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    rules = policy.trust  # type: ignore[attr-defined]

    def done(text: str, **fields: Any) -> int:
        if args.json:
            print(json.dumps({"path": str(target), "store": str(store_path), **fields}))
        else:
            print(text)
        return EXIT_OK

    if args.action in ("yes", "no", "sandboxed"):
        refusal = rules.refusal(args.action)
        if refusal is not None:
            print(f"pi trust: {args.action!r} is not allowed: {refusal}", file=sys.stderr)
            return EXIT_USAGE
        # Measured before the lock is taken: pi gives up on a lock held over 200 ms.
        fingerprint = (
            decision_fingerprint(target, home=Path.home()) if args.action != "no" else None
        )
        try:
            TrustStore.update(
                store_path,
                lambda store: store.set(
                    target,
                    args.action,
                    fingerprint=fingerprint,
                    follow_changes=args.follow_changes,
                ),
            )
        except (TrustStoreError, OSError) as exc:
            print(f"pi: cannot update {store_path}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        covered = ""
        if fingerprint is not None:
            _warn_unmeasured(fingerprint)
            covered = (
                f"; bound to the content of {len(fingerprint.resources)} trust-requiring "
                "resource(s)" + (", and follows their changes" if args.follow_changes else "")
            )
        return done(
            f"{target}: {args.action} (saved in {store_path}; applies below it too{covered})",
            action="saved",
            decision=args.action,
            resources=sorted(fingerprint.resources) if fingerprint is not None else [],
        )
    if args.action == "forget":
        candidates = list(dict.fromkeys([target, given]))
        try:
            forgotten = TrustStore.update(
                store_path, lambda store: [p for p in candidates if store.forget(p)]
            )
        except (TrustStoreError, OSError) as exc:
            print(f"pi: cannot update {store_path}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if not forgotten:
            return done(
                f"{target}: no decision recorded for exactly this path in {store_path}",
                action="none",
            )
        return done(f"{target}: decision forgotten ({store_path})", action="forgotten")
    info = resolve_trust(target, agent_dir=agent_dir(), home=Path.home(), rules=rules)
    report = {
        "path": str(target),
        "store": str(store_path),
        **info.as_dict(),
        "decisions": store.decisions,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return EXIT_OK
    print(f"{target}: {info.decision or 'undecided (not trusted)'} (from {info.source})")
    for resource in info.resources:
        print(f"  project resource: {resource}")
    if not info.resources:
        print("  no trust-requiring project resources")
    if info.changes:
        for label, paths in info.changes.as_dict().items():
            for path in paths or ():
                print(f"  changed since the stored decision: {label}: {path}")
    for line in info.change_notices():
        print(f"  {line}")
    print(f"stored decisions ({store_path}):")
    for path, decision in sorted(store.decisions.items()):
        saved = store.saved(path)
        how = ""
        if saved is not None and decision != "no":
            how = "  (content-bound)" if saved.fingerprint is not None else "  (not content-bound)"
            if saved.follow_changes:
                how += " (follows changes)"
        print(f"  {decision:9} {path}{how}")
    if not store.decisions:
        print("  none")
    return EXIT_OK


def _warn_unmeasured(fingerprint: Any) -> None:
    """Say on stderr which resources a new decision could not pin (issue 14 §4):
    they never match, so the decision does not apply where they are loaded."""
    if not fingerprint.complete:
        print(f"pi trust: warning: {fingerprint.note}", file=sys.stderr)
    for path, digest in sorted(fingerprint.resources.items()):
        if not digest.complete:
            print(
                f"pi trust: warning: {path} is too large to fingerprint ({digest.problem}); "
                "the decision will not apply where it is loaded",
                file=sys.stderr,
            )


def resources_main(argv: Sequence[str]) -> int:
    """``pi resources [--json] [-C DIR] [--trust …] [--skill PATH] …`` (issue 6).

    Shows what a run in DIR would load: the trust decision and its source, every
    skill, prompt template, context file and extension (with its source), the
    system-prompt files, and every diagnostic. No extension is run, so
    ``project_trust`` answers and ``resources_discover`` paths of extensions are
    not included (a run shows those). ``--json`` prints one object — a public
    contract — with ``trust``, ``skills`` (``name``, ``description``, ``path``,
    ``source``), ``prompts``, ``context_files``, ``extensions`` and ``diagnostics``
    (``type`` ``warning``/``error``/``collision``, ``message``, ``path``). Exit 0,
    2 on bad usage or a bad policy file.
    """
    parser = argparse.ArgumentParser(
        prog="pi resources",
        description="Show the skills, prompt templates, context files and extensions a run loads.",
    )
    parser.add_argument("-C", dest="directory", metavar="DIR", help="the workspace (default: .)")
    parser.add_argument(
        "--trust", choices=["yes", "no", "sandboxed"], help="the trust decision to assume"
    )
    parser.add_argument("-e", "--extension", action="append", default=[], type=Path, metavar="PATH")
    parser.add_argument("--no-extensions", action="store_true")
    parser.add_argument(
        "--policy", action="append", default=[], type=Path, metavar="FILE", help="policy file"
    )
    add_resource_options(parser)
    parser.add_argument("--system-prompt", metavar="TEXT|FILE")
    parser.add_argument("--append-system-prompt", action="append", default=[], metavar="TEXT|FILE")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    import json

    from pi_sandbox.errors import PolicyError
    from pi_sandbox.resources.resource_set import (
        load_resources,
        notice_path,
        read_prompt_text,
        resolve_trust,
    )
    from pi_sandbox.supervisor.extensions.extension_discovery import discover_extensions

    workspace = Path(args.directory).expanduser() if args.directory else Path.cwd()
    if not workspace.is_dir():
        parser.error(f"argument -C: not a directory: {args.directory}")
    workspace = workspace.resolve()
    _check_resource_paths(parser, args)
    for path in args.policy:
        if not path.is_file():
            parser.error(f"argument --policy: no such file: {path}")
    for path in args.extension:
        if not path.exists():
            parser.error(f"argument -e/--extension: no such file or directory: {path}")
    try:
        system_prompt = (
            read_prompt_text(args.system_prompt, argument="--system-prompt", project=workspace)
            if args.system_prompt is not None
            else None
        )
        appended = tuple(
            read_prompt_text(t, argument="--append-system-prompt", project=workspace)
            for t in args.append_system_prompt
        )
    except ValueError as exc:
        parser.error(str(exc))
    try:
        policy = _base_policy(args.policy)
    except PolicyError as exc:
        print(f"pi: policy error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        info = resolve_trust(
            workspace,
            agent_dir=agent_dir(),
            home=Path.home(),
            requested=args.trust,
            rules=policy.trust,  # type: ignore[attr-defined]
        )
    except ValueError as exc:
        parser.error(f"argument --trust: {exc}")
    sources, notices = discover_extensions(
        cwd=workspace,
        agent_dir=agent_dir(),
        cli_paths=[p.resolve() for p in args.extension],
        no_extensions=args.no_extensions,
        project_trust=info.decision,
        rules=policy.extensions,  # type: ignore[attr-defined]
    )
    found = load_resources(
        workspace,
        agent_dir=agent_dir(),
        home=Path.home(),
        trust=info,
        cli_skills=tuple(Path(os.path.abspath(p)) for p in args.skill),
        no_skills=args.no_skills,
        cli_prompts=tuple(Path(os.path.abspath(p)) for p in args.prompt_template),
        no_prompts=args.no_prompt_templates,
        packages=tuple(s.path for s in sources if s.path.is_dir()),
        system_prompt=system_prompt,
        append_system_prompt=appended,
    )
    diagnostics = [
        *found.diagnostics,
        *({"type": "warning", "message": n, "path": notice_path(n)} for n in notices),
    ]
    if info.trusted and os.path.lexists(workspace / ".pi" / "policy.yaml"):
        # The project's policy joins a trusted run; a bad one stops it (exit 2).
        from pi_sandbox.policies import PolicyLocations, load_effective_policy

        project_policy = workspace / ".pi" / "policy.yaml"
        try:
            load_effective_policy(
                PolicyLocations(
                    policy_files=tuple(args.policy),
                    managed_dirs=managed_policy_dirs()[:1],
                    extra_managed_dirs=managed_policy_dirs()[1:],
                    user_file=agent_dir() / "policy.yaml",
                    project_file=project_policy,
                )
            )
        except PolicyError as exc:
            diagnostics.append(
                {
                    "type": "error",
                    "message": f"policy error (a run stops with exit 2): {exc}",
                    "path": str(project_policy),
                }
            )
    report = {
        "cwd": str(workspace),
        "trust": info.as_dict(),
        "skills": [
            {
                "name": k.name,
                "description": k.description,
                "path": str(k.path),
                "source": k.source,
                "base_dir": str(k.base_dir),
                "disable_model_invocation": k.disable_model_invocation,
            }
            for k in found.skills
        ],
        "prompts": [
            {
                "name": t.name,
                "description": t.description,
                "argument_hint": t.argument_hint,
                "path": str(t.path),
                "source": t.source,
            }
            for t in found.prompts
        ],
        "context_files": [
            {"path": str(c.path), "scope": c.scope, "trusted": c.trusted}
            for c in found.context_files
        ],
        "system_prompt": {
            "replaced_by": found.system_prompt_source,
            "appended": [source for source, _ in found.append_system_prompt],
        },
        "extensions": [
            {"path": str(s.path), "source": s.origin, "discovered": str(s.discovered)}
            for s in sources
        ],
        "diagnostics": diagnostics,
    }
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return EXIT_OK
    from pi_sandbox.supervisor.modes.output_modes import printable

    # File names come from the project: no terminal escapes reach the screen.
    say = _printing(printable)
    trust = report["trust"]
    say(f"Project {workspace}: trust {trust['decision']} (from {trust['source']})")
    if info.resources and not info.trusted:
        say("  not loaded (project not trusted): " + ", ".join(map(str, info.resources)))
        allowed = policy.trust.users_may_trust  # type: ignore[attr-defined]
        where = shlex.quote(str(workspace))
        if allowed == "no":
            say(f"  the policy {policy.trust.users_may_trust_source} forbids trusting projects")  # type: ignore[attr-defined]
        elif allowed == "sandboxed":
            say(f"  trust it with: pi trust sandboxed {where}  (the policy allows only that)")
        else:
            say(f"  trust it with: pi trust yes {where}  (or: pi trust sandboxed {where})")
    sections = (
        ("Skills", [f"{k['name']}  [{k['source']}]  {k['path']}" for k in report["skills"]]),
        (
            "Prompt templates",
            [f"/{t['name']}  [{t['source']}]  {t['path']}" for t in report["prompts"]],
        ),
        (
            "Context files",
            [
                f"{c['path']}  [{c['scope']}{'' if c['trusted'] else ', untrusted'}]"
                for c in report["context_files"]
            ],
        ),
        ("Extensions", [f"{e['path']}  [{e['source']}]" for e in report["extensions"]]),
        ("Diagnostics", [f"{d['type']}: {d['message']}" for d in diagnostics]),
    )
    for title, lines in sections:
        say(f"\n{title} ({len(lines)}):")
        for line in lines:
            say(f"  {line}")
    if found.system_prompt_source:
        say(f"\nSystem prompt replaced by {found.system_prompt_source}")
    for source, _ in found.append_system_prompt:
        say(f"System prompt appended from {source}")
    return EXIT_OK


def _printing(clean: Callable[[str], str]) -> Callable[..., None]:
    """``print`` for text built from untrusted names: each line made printable."""
    import builtins

    def printer(*values: object, **kwargs: Any) -> None:
        builtins.print(clean(" ".join(str(v) for v in values)), **kwargs)

    return printer


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (see the module docstring).

    ``pi sandbox …`` is a subcommand (`sandbox_main`); anything else is a prompt run.
    """
    # Output carries untrusted text; a lone surrogate in it must not crash the run.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sandbox"]:
        return sandbox_main(argv[1:])
    if argv[:1] in (["trust"], ["resources"], ["sessions"]):
        command = {"trust": trust_main, "resources": resources_main, "sessions": sessions_main}[
            argv[0]
        ]
        try:
            return command(argv[1:])
        except BrokenPipeError:  # `pi resources | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_OK
    if argv[:1] == ["auth"]:
        from pi_sandbox.supervisor.providers.commands import auth_main

        return auth_main(argv[1:], agent_dir())
    if argv[:1] == ["policy"]:
        try:
            return policy_main(argv[1:])
        except BrokenPipeError:  # `pi policy explain … | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_OK
    if argv[:1] == ["mcp"]:
        from pi_sandbox.supervisor.mcp.commands import mcp_main

        try:
            return mcp_main(argv[1:], agent_dir())
        except BrokenPipeError:  # `pi mcp list | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_OK
    if argv[:1] and argv[0] in NOT_YET_SUBCOMMANDS:
        print(
            f"pi: `pi {argv[0]}` is not available in pi-sandbox yet (see `pi --help` for "
            "the commands it has)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    parser = build_parser()
    # Flags registered by extensions are only known once they load: unknown options
    # are checked then (`SessionHost` re-parses the whole command line).
    args, unknown = parser.parse_known_args(argv)
    # Words among them may be values of extension string flags (`--label x`); a
    # single-dash option or a word before any unknown option is never one.
    if unknown and (
        not unknown[0].startswith("--")
        or any(t.startswith("-") and not t.startswith("--") for t in unknown)
    ):
        from pi_sandbox.supervisor.extensions.session_host import unknown_option_message

        parser.error(
            unknown_option_message(parser, argv) or f"unrecognized arguments: {' '.join(unknown)}"
        )
    # A mistyped pi option (`--modle`) is refused at once with the option it is close
    # to, rather than taken for an extension's flag (issue 17 §5): an extension flag
    # one typo away from a pi option is not allowed.
    for token in unknown:
        if token.startswith("--"):
            from pi_sandbox.supervisor.modes.option_suggestions import closest_option

            name = token.split("=", 1)[0]
            known = [o for a in parser._actions for o in a.option_strings]
            if close := closest_option(name, known):
                parser.error(f"unknown option {name} (did you mean {close}?)")
    if args.list_models is not None:
        # issue 16: a table of the catalogue (after the user's models.json), no session.
        from pi_sandbox.supervisor.providers.commands import list_models_main

        try:
            return list_models_main(agent_dir(), args.list_models or None)
        except BrokenPipeError:  # `pi --list-models | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_OK
    # Heavy imports after argument parsing: `pi --help` stays fast. trio looks up
    # libpthread (to name its threads) with `ctypes.util.find_library`, which runs
    # `ldconfig -p`: a process on every start unless answered by soname (issue 20).
    from pi_sandbox.shared_libraries import known_sonames

    with known_sonames():
        import trio  # noqa: F401

    from pi_sandbox.supervisor.modes.run import RunOptions, run_print_session

    cwd = Path(args.directory).expanduser() if args.directory else Path.cwd()
    if not cwd.is_dir():
        parser.error(f"argument -C: not a directory: {args.directory}")
    cwd = cwd.resolve()
    from pi_sandbox.errors import UsageError
    from pi_sandbox.supervisor.sessions.startup import choose_session

    if (
        args.resume
        and not args.print
        and not args.ci
        and args.mode == "text"
        and _is_terminal(sys.stdin)
        and _is_terminal(sys.stdout)
    ):
        # issue 15: -r at a terminal is a picker (pi's session selector); the choice
        # then resumes like --session PATH (in its recorded directory).
        picked = _pick_session(cwd, args.session_dir)
        if picked is None:
            return EXIT_OK
        args.resume, args.session = False, str(picked)
    try:
        session_choice = choose_session(
            agent_dir=agent_dir(),
            cwd=cwd,
            cwd_given=args.directory is not None,
            continue_=args.continue_,
            resume=args.resume,
            session=args.session,
            session_id=args.session_id,
            fork=args.fork,
            session_dir=args.session_dir,
            name=args.name,
            no_session=args.no_session,
        )
    except UsageError as exc:
        from pi_sandbox.supervisor.modes.output_modes import printable

        print(printable(f"pi: {exc}"), file=sys.stderr, flush=True)
        return EXIT_USAGE
    cwd = session_choice.cwd  # a resumed session runs where it was recorded
    if args.mode == "rpc" and any(w.startswith("@") and len(w) > 1 for w in args.message):
        parser.error("--mode rpc does not take @file arguments (send files in prompts)")
    stdin_text = _piped_stdin() if args.mode != "rpc" else None
    from pi_sandbox.errors import UsageError
    from pi_sandbox.supervisor.modes.prompt_input import build_prompt_input

    try:
        prompts = build_prompt_input(args.message, stdin_text, cwd)
    except UsageError as exc:
        parser.error(str(exc))
    # pi docs cli.md: a terminal on stdin and stdout, without -p or --mode json|rpc,
    # is interactive mode (issue 18); the arguments, if any, are its first prompt.
    interactive = (
        not args.print
        and not args.ci  # CI mode is never interactive: its ask stays deny (issue 18)
        and args.mode == "text"
        and stdin_text is None
        and _is_terminal(sys.stdin)
        and _is_terminal(sys.stdout)
    )
    if (
        not interactive
        and not args.print
        and not args.ci
        and args.mode == "text"
        and _is_terminal(sys.stdin)
    ):
        # Typed at a terminal, but stdout is a pipe or file: no screen to draw on.
        print(
            "pi: stdout is not a terminal: running in print mode (-p) instead of the "
            "interactive mode",
            file=sys.stderr,
        )
    if not prompts.first.strip() and args.mode != "rpc" and not interactive:
        parser.error(
            "no message: give one as arguments or on stdin (the interactive mode needs "
            "a terminal on stdin and stdout)"
        )
    for path in args.extension:
        if not path.exists():
            parser.error(f"argument -e/--extension: no such file or directory: {path}")
    for path in args.policy:
        if not path.is_file():
            what = "not a file" if path.exists() else "no such file"
            parser.error(f"argument --policy: {what}: {path}")
    if args.script is not None and not args.script.is_file():
        what = "not a file" if args.script.exists() else "no such file"
        parser.error(f"argument --script: {what}: {args.script}")
    if args.base_url is not None and not args.base_url.startswith(("http://", "https://")):
        parser.error(f"argument --base-url: not an http(s) URL: {args.base_url}")
    _check_resource_paths(parser, args)
    from pi_sandbox.resources.resource_set import read_prompt_text

    try:
        system_prompt = (
            read_prompt_text(args.system_prompt, argument="--system-prompt", project=cwd)
            if args.system_prompt is not None
            else None
        )
        appended = [
            read_prompt_text(text, argument="--append-system-prompt", project=cwd)
            for text in args.append_system_prompt
        ]
    except ValueError as exc:
        parser.error(str(exc))
    if args.ci and args.sandbox is False:
        parser.error("argument --ci: CI mode always runs in the sandbox; remove --no-sandbox")
    from pi_sandbox.supervisor.agent.tool_selection import ToolSelection

    try:
        selection = ToolSelection.from_options(
            tools=args.tools,
            exclude_tools=args.exclude_tools,
            no_builtin_tools=args.no_builtin_tools,
            no_tools=args.no_tools,
            default_tools=_default_tools_setting(cwd),
        )
    except UsageError as exc:
        parser.error(str(exc))
    options = RunOptions(
        message=prompts.first,
        images=prompts.images,
        rest_messages=prompts.rest,
        stdin_text=stdin_text,
        no_context_files=args.no_context_files,
        verbose=args.verbose,
        cwd=cwd,
        agent_dir=agent_dir(),
        mode="interactive"
        if interactive
        else {"json": "json", "rpc": "rpc"}.get(args.mode, "print"),
        tools=selection,
        argv=argv if unknown else [],
        message_from_stdin=stdin_text is not None and not args.message,
        model=args.model or ("scripted" if args.script else None),
        provider=args.provider,
        thinking=args.thinking,
        models=args.models,
        script=args.script.resolve() if args.script else None,
        base_url=args.base_url,
        api_key=args.api_key,
        context_window=args.context_window,
        extensions=[p.resolve() for p in args.extension],
        no_extensions=args.no_extensions,
        sandbox=bool(args.sandbox) or args.ci,
        explicit_no_sandbox=args.sandbox is False,
        mcp=not args.no_mcp,
        ci=args.ci,
        managed_policy_dirs=managed_policy_dirs()[:1],
        extra_managed_policy_dirs=managed_policy_dirs()[1:],
        audit_log=args.audit_log.absolute() if args.audit_log else None,
        policies=[p.resolve() for p in args.policy],
        trust=args.trust,
        skills=[Path(os.path.abspath(p)) for p in args.skill],
        no_skills=args.no_skills,
        prompt_templates=[Path(os.path.abspath(p)) for p in args.prompt_template],
        no_prompt_templates=args.no_prompt_templates,
        system_prompt=system_prompt,
        append_system_prompt=appended,
        session=not args.no_session,
        session_choice=session_choice,
        notices=list(session_choice.notices),
    )
    return run_print_session(options)


def _pick_session(cwd: Path, session_dir: str | None) -> Path | None:
    """``pi -r`` at a terminal: the sessions of ``cwd`` (``a``: of every directory),
    newest first, numbered; returns the chosen file, or None when the user quits
    (``q``, an empty answer, Ctrl-D or Ctrl-C)."""
    from pi_sandbox.supervisor.modes.output_modes import printable
    from pi_sandbox.supervisor.sessions.catalog import list_sessions
    from pi_sandbox.supervisor.sessions.startup import configured_session_dir

    chosen_dir = (
        Path(os.path.abspath(Path(session_dir).expanduser()))
        if session_dir
        else configured_session_dir(agent_dir(), cwd, os.environ)
    )
    every = False
    while True:
        rows = list_sessions(agent_dir(), cwd, session_dir=chosen_dir, every=every)[:30]
        where = "every directory" if every else str(cwd)
        print(printable(f"Sessions of {where} (newest first):"))
        for number, row in enumerate(rows, 1):
            title = row.name or (row.first_prompt or "(no messages)").replace("\n", " ")[:60]
            stamp = row.modified[:16].replace("T", " ")
            line = f"{number:>3}. {stamp}  {row.message_count:>4} msgs  {title}"
            print(printable(line + (f"  ({row.cwd})" if every else ""), newlines=False))
        if not rows:
            print("  (none)")
        hint = "" if every else ", a = every directory"
        try:
            answer = input(f"Resume which? [number{hint}, q = quit] ").strip().lower()
        except (EOFError, KeyboardInterrupt):
            print()
            return None
        if answer in ("", "q"):
            return None
        if answer == "a" and not every:
            every = True
            continue
        if answer.isdigit() and 1 <= int(answer) <= len(rows):
            return rows[int(answer) - 1].path
        print(f"pi: {answer!r} is not one of the numbers shown")


def _is_terminal(stream: object) -> bool:
    """Whether ``stream`` (``sys.stdin``/``sys.stdout``) is a terminal; False when it
    is closed or missing."""
    try:
        return stream is not None and stream.isatty()  # type: ignore[attr-defined]
    except (OSError, ValueError):
        return False


def _piped_stdin() -> str | None:
    """Piped or redirected stdin (a pipe or a regular file), read whole; None for a
    terminal, ``/dev/null`` or a closed stdin (pi docs cli.md: piped stdin is
    prepended to the first prompt)."""
    import stat

    try:
        if sys.stdin is None or sys.stdin.isatty():
            return None
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError):
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return None
    return sys.stdin.read()


def _default_tools_setting(cwd: Path) -> list[str] | None:
    """``defaultTools`` from the user's settings (pi docs settings.md), else None.

    The project's ``.pi/settings.json`` is not consulted here: tool selection from a
    project would have to wait for its trust decision (a later change)."""
    import json

    path = agent_dir() / "settings.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("defaultTools") if isinstance(data, dict) else None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def _fill_closed_standard_descriptors() -> None:
    """Put ``/dev/null`` on each of descriptors 0–2 that was closed when ``pi`` started
    (cron, daemons, ``pi … 2>&-``), and a stream on it in `sys`.

    Otherwise the next file ``pi`` opens takes the free number: a session file on fd 2
    would receive whatever is written to standard error, and Python's ``print`` to a
    ``None`` ``sys.stderr`` falls back to stdout (red team of 0.8.0: progress lines in
    the answer). stdin reads as empty; stderr discards; stdout is opened read-only, so
    that every write fails as it would on the closed descriptor and output that cannot
    be written ends the run with status 1, as documented (docs/policy.md exit codes).
    """
    names = ("stdin", "stdout", "stderr")
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        opened = os.open(os.devnull, os.O_WRONLY if fd == 2 else os.O_RDONLY)
        if opened != fd:  # 0..fd-1 are open by now, so this is not expected
            os.dup2(opened, fd)
            os.close(opened)
        mode = "r" if fd == 0 else "w"
        stream = open(fd, mode, encoding="utf-8", closefd=False)  # noqa: SIM115 - for the process
        setattr(sys, names[fd], stream)


def console_main() -> None:
    """The ``pi`` command: `main`, then leave without tearing the interpreter down.

    Unloading ~650 modules and collecting their objects took 60–90 ms after every
    run's last output (issue 20, measured with strace: the run's last write to the
    process's ``exit_group``). What that teardown would do that matters is done
    first: other non-daemon threads are joined, ``atexit`` functions run (these
    include ``weakref.finalize`` callbacks: temporary directories are removed), and
    stdout/stderr are flushed; then ``os._exit`` with `main`'s status. An exception
    other than ``SystemExit`` leaves the normal way (traceback, status 1), and a
    ``SystemExit`` carrying a message too.
    """
    _fill_closed_standard_descriptors()
    try:
        status = main()
    except SystemExit as exc:
        if exc.code is not None and not isinstance(exc.code, int):
            raise
        status = exc.code or 0
    import atexit
    import threading

    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError) as exc:  # output that could not be written: 1
            status = status or 1
            if stream is sys.stdout and not isinstance(exc, BrokenPipeError):
                try:
                    sys.stderr.write(f"pi: cannot write output: {exc}\n")
                    sys.stderr.flush()
                except (OSError, ValueError, AttributeError):
                    pass
    os._exit(status)


if __name__ == "__main__":
    console_main()
