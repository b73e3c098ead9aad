"""Wiring for a non-interactive run (``-p`` and ``--mode json``).

Order of work (DESIGN §8): load the policy (a malformed one is fatal), build the
provider, discover extensions with the trust decision already made, start every
worker, then run the agent loop and shut everything down — workers are always
reaped, even when the run fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
import trio

from pi_sandbox.errors import (
    AuditLogError,
    PiSandboxError,
    PolicyError,
    ProviderError,
    SandboxError,
    SandboxUnavailableError,
    UsageError,
    WorkerCrashedError,
    WorkerError,
)
from pi_sandbox.supervisor.modes.prompt_input import PromptInput, build_prompt_input

__all__ = ["RunOptions", "run_print_session"]


MAX_UPDATE_BYTES_PER_CALL = 1024 * 1024
"""Progress (``tool_execution_update``) streamed per tool call, in bytes of JSON."""

UPDATE_TAIL_CHARS = 16 * 1024
"""The output tail one ``tool_execution_update`` snapshot shows, in characters."""

UPDATE_INTERVAL_S = 0.1
"""The least time between two snapshots of one call's output, in seconds."""


@dataclass
class RunOptions:
    """Everything the CLI resolved for one run (paths absolute)."""

    message: str
    cwd: Path
    agent_dir: Path
    mode: str = "print"  # "print" | "json" | "rpc" | "interactive" (issue 18)
    model: str = "scripted"
    script: Path | None = None
    base_url: str | None = None
    api_key: str | None = None
    context_window: int | None = None  # --context-window (tokens), for compaction
    extensions: list[Path] = field(default_factory=list)
    no_extensions: bool = False
    sandbox: bool = False
    policies: list[Path] = field(default_factory=list)
    trust: str | None = None
    skills: list[Path] = field(default_factory=list)  # --skill PATH
    no_skills: bool = False
    prompt_templates: list[Path] = field(default_factory=list)  # --prompt-template PATH
    no_prompt_templates: bool = False
    system_prompt: str | None = None  # --system-prompt (text, or a file's text)
    append_system_prompt: list[str] = field(default_factory=list)
    session: bool = True
    home: Path = field(default_factory=Path.home)
    audit_log: Path | None = None
    ci: bool = False
    notices: list[str] = field(default_factory=list)  # shown once the run starts
    tools: Any = None  # a ToolSelection (or a set of names); None: every tool
    mcp: bool = True  # --no-mcp: no MCP server connects (issue 19)
    explicit_no_sandbox: bool = False  # --no-sandbox given: MCP servers run unsandboxed
    argv: list[str] = field(default_factory=list)  # re-parsed with extension flags
    message_from_stdin: bool = False  # the prompt was read from stdin, not arguments
    images: list[dict[str, Any]] = field(default_factory=list)  # @image files: first prompt
    rest_messages: list[str] = field(default_factory=list)  # further prompts, sent in turn
    stdin_text: str | None = None  # piped stdin (prepended to the first prompt)
    no_context_files: bool = False  # --no-context-files
    verbose: bool = False  # --verbose: model text between tool calls, whole tool results
    managed_policy_dirs: tuple[Path, ...] = (Path("/etc/pi/policy.d"),)
    extra_managed_policy_dirs: tuple[Path, ...] = ()
    # issue 16: --provider, --thinking, --models, --verbose. ``model`` None: settings
    # defaultProvider/defaultModel, else the first built-in provider with a key.
    provider: str | None = None
    thinking: str | None = None
    models: str | None = None
    # Which session to open (issue 15; sessions.startup.SessionChoice); None: a new
    # session of ``cwd`` under ``agent_dir/sessions`` (or none with ``session`` False).
    session_choice: Any = None


CI_AUDIT_LOG = Path("pi-output") / "audit.jsonl"
"""CI mode's audit log, relative to the working directory, unless ``--audit-log``."""

EXIT_DENIED = 3
"""CI mode: the run finished but the policy denied at least one tool call."""


@dataclass
class _Start:
    """What the policy decided before any worker starts."""

    policy: Any
    store: Any
    trust: str | None
    trust_source: str
    audit_paths: list[Path]
    session_id: str = field(default_factory=lambda: _new_session_id())
    trust_info: Any = None  # resources.resource_set.TrustDecision
    base_policy: Any = None  # the managed and user tiers only (before trust)
    base_locations: Any = None
    model_choice: Any = None  # providers.model_selection.ModelChoice (None: scripted)
    provider_factory: Any = None  # providers.model_selection.ProviderFactory

    def apply_trust(self, options: RunOptions, info: Any) -> None:
        """Take ``info`` (a `TrustDecision`) as the run's decision: the project's
        ``.pi/policy.yaml`` joins (``yes``/``sandboxed``) or leaves the policy.

        Raises:
            PolicyError: the project's policy file is malformed.
        """
        policy, locations = _policy_for_trust(options, self.base_locations, self.base_policy, info)
        self.policy = policy
        self.store.locations = locations
        self.store.current = policy
        self.trust = info.decision
        self.trust_source = info.source
        self.trust_info = info


def run_print_session(options: RunOptions) -> int:
    """Run one prompt to completion; returns the process exit status.

    0: the agent finished; 1: provider or agent failure; 2: bad configuration (policy
    file, provider arguments, a trust decision the policy forbids, an audit log that
    cannot be opened); 3: a sandbox was required and bwrap cannot run — except in
    CI mode (``options.ci``, issue 4), where that is 2 and 3 means the run finished
    but the policy denied at least one tool call.
    """
    from pi_sandbox.supervisor.modes.output_modes import (
        JsonOutput,
        PrintOutput,
        printable,
        silence_stdout,
    )

    def fail(text: str, code: int) -> int:
        print(printable(f"pi: {text}"), file=sys.stderr, flush=True)
        return code

    try:
        start = _load_policy(options)
    except PolicyError as exc:
        return fail(f"policy error: {exc}", 2)
    except UsageError as exc:
        return fail(str(exc), 2)
    try:
        provider = _create_provider(options, start)
    except UsageError as exc:
        if options.argv:
            # Unknown options wait for the extensions' flags, which load later; a typo
            # must not hide behind "no API key" (issue 17 §5).
            from pi_sandbox.cli import build_parser
            from pi_sandbox.supervisor.extensions.session_host import unknown_option_message

            if unknown := unknown_option_message(build_parser(), options.argv):
                return fail(f"{unknown} (and {exc})", 2)
        return fail(str(exc), 2)
    except ProviderError as exc:
        return fail(f"provider error: {exc}", 2)
    output: Any
    if options.mode == "interactive":
        # issue 18: the terminal UI is one more consumer of the event stream.
        from pi_sandbox.supervisor.tui import TerminalFrontend

        output = TerminalFrontend(options)
    else:
        output = (
            JsonOutput()
            if options.mode in ("json", "rpc")
            else PrintOutput(verbose=options.verbose)
        )
    if options.mode == "rpc":
        from pi_sandbox.supervisor.modes.rpc_wire import RpcWire

        output = RpcWire(output)  # pi's RPC records (issue 17 §2)
    from pi_sandbox.supervisor.audit_log import AuditLog

    policy = start.policy
    try:
        audit = AuditLog(
            start.audit_paths,
            include=policy.audit.include,
            arguments=policy.audit.arguments,
            fatal=options.ci,
        )
    except OSError as exc:
        return fail(f"cannot open audit log {exc.filename}: {exc.strerror or exc}", 2)
    choice = options.session_choice
    if choice is not None and choice.session_id is not None:
        start.session_id = choice.session_id  # resumed, or --session-id
    audit.session = start.session_id  # the session file, if any, gets this id too
    try:
        audit.record(
            {
                "event": "policy",
                "action": "loaded",
                "files": [{"tier": f.tier, "file": str(f.path)} for f in policy.files],
                "diagnostics": list(policy.diagnostics),
            }
        )
    except AuditLogError as exc:
        audit.close()
        return fail(str(exc), 2)
    from pi_sandbox.supervisor.modes.run_signals import RunStop

    stop = RunStop()
    stop.hold()  # released after the last audit record (the finally below)
    try:
        return trio.run(_run_stoppable, options, provider, start, output, audit, stop)
    except UsageError as exc:
        return fail(str(exc), 2)
    except AuditLogError as exc:
        return fail(f"{exc} (CI mode: audit records must not be lost)", 1)
    except SandboxUnavailableError as exc:
        return fail(
            f"a sandbox is required (--sandbox, --ci, or --trust sandboxed with project "
            f"extensions) but bubblewrap cannot run here: {exc}",
            2 if options.ci else 3,  # CI mode: 3 means "a tool call was denied"
        )
    except SandboxError as exc:
        return fail(str(exc), 2)
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    except BaseExceptionGroup as group:
        # Ctrl-C can arrive while several tasks run: trio then groups the interrupts.
        if group.subgroup(KeyboardInterrupt) is not None:
            return fail("interrupted", 130)
        import traceback

        traceback.print_exception(group, file=sys.stderr)
        return fail(f"internal error: {group!r}", 1)
    except OSError as exc:
        # Output could not be written (broken pipe, full disk) outside the run's own
        # handling: a one-line message, not a traceback.
        silence_stdout()
        if not isinstance(exc, BrokenPipeError):
            return fail(f"cannot write output: {exc.strerror or exc}", 1)
        return 0 if options.mode in ("json", "rpc") else 1
    except Exception as exc:  # the last line of defence: a clear message, never a bare traceback
        import traceback

        traceback.print_exc(file=sys.stderr)
        return fail(f"internal error: {type(exc).__name__}: {exc}", 1)
    finally:
        audit.close()
        stop.release()


def _outer_project_policy(cwd: Path) -> str | None:
    """A warning when a directory above ``cwd`` (up to the git root) has a
    ``.pi/policy.yaml``: as in pi, a project's ``.pi/`` is read from the working
    directory only, so that policy is not in force for this run (red-team finding:
    starting in a subdirectory dropped the repository's rules silently)."""
    from pi_sandbox.resources.project_trust import _git_root

    root = _git_root(cwd)
    if root is None or root == cwd:
        return None
    here = cwd.parent
    while True:
        candidate = here / ".pi" / "policy.yaml"
        if os.path.lexists(candidate):
            return (
                f"{candidate} is not in force for this run: a project's .pi/ is read from "
                f"the working directory only (as pi). Run from {here} (or with -C {here}) "
                "to apply it, or pass it with --policy"
            )
        if here == root or here.parent == here:
            return None
        here = here.parent


def _new_session_id() -> str:
    from pi_sandbox.supervisor.sessions.session_file import new_session_id

    return new_session_id()  # a UUIDv7, as pi 1.6.0


def _compactor(options: RunOptions, trust: Callable[[], str | None]) -> Any:
    """Compaction for the run: the ``compaction`` settings (the project's only when it
    is trusted; ``trust()`` is the current decision, read again at every reload) and
    ``--context-window`` (issue 15).

    Raises:
        UsageError: a malformed ``compaction`` value, naming the file and field.
    """
    from pi_sandbox.supervisor.sessions.compaction_runner import Compactor
    from pi_sandbox.supervisor.sessions.compaction_settings import load_compaction_config

    def load() -> Any:
        return load_compaction_config(
            options.agent_dir, options.cwd, project_trusted=trust() in ("yes", "sandboxed")
        )

    return Compactor(config=load(), context_window=options.context_window, loader=load)


def _load_policy(options: RunOptions) -> _Start:
    """Load the managed and user tiers, decide trust, then add the project tier.

    Trust is decided by `resolve_trust` (``--trust``, refused if the policy's
    ``trust.users_may_trust`` forbids it; no project resources; the trust store;
    the policy's or settings' default — ``ask`` without a UI leaves the project
    untrusted); an extension's ``project_trust`` answer may still change it once
    the bootstrap extensions run (`_run`). The project's ``.pi/policy.yaml`` is read
    only once the project is trusted (``yes`` or ``sandboxed``), never before
    (issue 4, DESIGN §8).

    Raises:
        PolicyError: a policy file of any tier is malformed (fatal, issue 4).
        UsageError: the requested trust decision is forbidden by policy; an audit
            file named by the policy cannot be used.
    """
    from pi_sandbox.policies import PolicyLocations, PolicyStore, load_effective_policy

    locations = PolicyLocations(
        policy_files=tuple(options.policies),
        managed_dirs=options.managed_policy_dirs,
        extra_managed_dirs=options.extra_managed_policy_dirs,
        user_file=options.agent_dir / "policy.yaml",
    )
    from pi_sandbox.resources.resource_set import resolve_trust

    base_policy = policy = load_effective_policy(locations)
    base_locations = locations
    try:
        info = resolve_trust(
            options.cwd,
            agent_dir=options.agent_dir,
            home=options.home,
            requested=options.trust,
            rules=policy.trust,
            bind_unbound=True,  # a decision pi saved gets bound to today's content
            # issue 18: the interactive mode can ask; "ask" is answered at start (_run).
            has_ui=options.mode == "interactive",
        )
    except ValueError as exc:
        raise UsageError(f"argument --trust: {exc}") from exc
    policy, locations = _policy_for_trust(options, locations, policy, info)
    audit_paths: list[Path] = []
    if options.audit_log is not None:
        audit_paths.append(options.audit_log)
    elif options.ci:
        default = options.cwd / CI_AUDIT_LOG
        try:
            default.parent.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"CI mode writes its audit log to {default} but cannot create "
                f"{default.parent}: {exc.strerror or exc}; give --audit-log FILE"
            ) from exc
        # The repository may ship pi-output (or the log) as a symlink, a FIFO or a
        # file with forged records: the supervisor neither appends outside the
        # workspace on its behalf nor continues a log it did not start.
        if default.parent.is_symlink() or not default.parent.is_dir():
            raise UsageError(
                f"CI mode: {default.parent} is a symlink or not a directory; "
                "remove it or give --audit-log FILE"
            )
        if os.path.lexists(default):
            raise UsageError(
                f"CI mode: {default} already exists (from the repository or an earlier run); "
                "CI mode starts a fresh audit log: remove it or give --audit-log FILE"
            )
        audit_paths.append(default)
    for written, source in policy.audit.files:
        path = options.home / written[2:] if written.startswith("~/") else Path(written)
        if not path.parent.is_dir():
            raise UsageError(
                f"policy {source}: audit.file {written}: directory {path.parent} does not exist"
            )
        audit_paths.append(path)
    _check_limits_fit(policy)
    if policy.sandbox_required_by is not None and not options.sandbox:
        options.sandbox = True  # the policy's sandbox.required (issue 4 review)
        options.notices.append(
            f"policy {policy.sandbox_required_by} requires the sandbox: this run is sandboxed"
        )
    elif policy.has_sandbox_section and not options.sandbox:
        options.notices.append(
            "the policy's sandbox section applies only to sandboxed runs (--sandbox, --ci, "
            "or sandbox.required: true in the policy); this run is not sandboxed"
        )
    store = PolicyStore(locations, policy)
    return _Start(
        policy,
        store,
        info.decision,
        info.source,
        audit_paths,
        trust_info=info,
        base_policy=base_policy,
        base_locations=base_locations,
    )


def _policy_for_trust(
    options: RunOptions, locations: Any, policy: Any, info: Any
) -> tuple[Any, Any]:
    """The policy with the project tier when ``info`` trusts the project (the file
    is not even looked at otherwise), and its locations.

    Raises:
        PolicyError: the project's ``.pi/policy.yaml`` is malformed.
    """
    from pi_sandbox.policies import load_effective_policy

    if info.decision in ("yes", "sandboxed"):
        project_file = options.cwd / ".pi" / "policy.yaml"
        if os.path.lexists(project_file):
            locations = dataclasses.replace(locations, project_file=project_file)
            policy = load_effective_policy(locations)
    return policy, locations


_RLIMIT_KEYS = {
    "RLIMIT_AS": "address_space_mb",
    "RLIMIT_NPROC": "processes",
    "RLIMIT_NOFILE": "open_files",
    "RLIMIT_FSIZE": "file_size_mb",
}


def _check_limits_fit(policy: Any) -> None:
    """A policy limit above this process's hard rlimit cannot be applied inside the
    sandbox (no privilege there to raise it): say so now, naming the key and file,
    instead of failing every worker start.

    Raises:
        UsageError: such a limit, set by a policy file.
    """
    import resource

    limits = policy.sandbox.limits.rlimits()
    for origin in policy.provenance:
        if not origin.key.startswith("sandbox.limits.") or origin.tier == "default":
            continue
        key = origin.key.removeprefix("sandbox.limits.")
        for name, field_name in _RLIMIT_KEYS.items():
            if field_name != key:
                continue
            hard = resource.getrlimit(getattr(resource, name))[1]
            if hard != resource.RLIM_INFINITY and limits[name] > hard:
                unit = " MiB" if key.endswith("_mb") else ""
                shown = hard // (1024 * 1024) if unit else hard
                raise UsageError(
                    f"policy {', '.join(origin.files)}: sandbox.limits.{key}: "
                    f"{origin.value} is above this machine's hard limit ({shown}{unit}, "
                    f"{name}); the sandbox cannot raise it"
                )


def _forbid_ptrace_and_proc_reads() -> None:
    """Make the supervisor non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``).

    Its ``/proc/<pid>/environ`` and memory then stop being readable by other
    processes of the same (non-root) user — defence in depth for ``--no-sandbox``
    runs, where workers share the user's identity. Best effort: failures are ignored.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def _create_provider(options: RunOptions, start: _Start) -> Any:
    """The run's provider (issue 16): ``scripted``, or the model ``--model``/
    ``--models``/settings choose, with its key; a trusted project's ``.pi/models.json``
    and ``.pi/settings.json`` count (trust as decided at start). Stores the choice and
    the factory on ``start`` for RPC model commands. Raises ``UsageError``."""
    from pi_sandbox.supervisor.providers import create_provider
    from pi_sandbox.supervisor.providers.extension_provider import ExtensionProvider
    from pi_sandbox.supervisor.providers.model_selection import UnknownProviderError, choose_model

    if options.model is not None and options.model.partition("/")[0] == "scripted":
        return create_provider(options.model, script=options.script)
    if options.model is None and options.script is not None:
        return create_provider("scripted", script=options.script)
    trusted = start.trust in ("yes", "sandboxed")
    try:
        choice, factory = choose_model(
            agent_dir=options.agent_dir,
            project_dir=options.cwd if trusted else None,
            model=options.model,
            provider=options.provider,
            thinking=options.thinking,
            models=options.models,
            cli_key=options.api_key,
            base_url=options.base_url,
        )
    except UnknownProviderError:
        head, _, tail = (options.model or "").partition("/")
        if not tail or (options.no_extensions and not options.extensions):
            raise
        # An extension may register it (checked once the extensions have loaded).
        return ExtensionProvider(head, tail)
    provider = factory.build(choice.model, initial=True)
    start.model_choice, start.provider_factory = choice, factory
    return provider


async def _run_stoppable(
    options: RunOptions, provider: Any, start: _Start, output: Any, audit: Any, stop: Any
) -> int:
    """`_run` with ``SIGTERM``/``SIGINT``/``SIGHUP`` received for its whole length,
    its tear-down included (`pi_sandbox.supervisor.modes.run_signals`, issue 14 §3)."""
    with stop.receiving() as signals:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stop.serve, signals)
                try:
                    return await _run(options, provider, start, output, audit, stop)
                finally:
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # `serve` never raises: the group holds what `_run` raised (itself
            # grouped when it came from an ``except*``), which the caller maps to an
            # exit status by its type.
            single: BaseException = group
            while isinstance(single, BaseExceptionGroup) and len(single.exceptions) == 1:
                single = single.exceptions[0]
            if single is group:
                raise
            raise single from None


async def _import_after_spawn() -> None:
    """Import what the run needs once its workers are up, while they start: the task
    first runs when `WorkerPool.start` has spawned every worker and waits for their
    handshakes, so ~100 ms of imports use the time the workers' interpreters and
    sandboxes take to start on the other core instead of adding to it (issue 20)."""


async def _run(
    options: RunOptions,
    provider: Any,
    start: _Start,
    output: Any,
    audit: Any,
    stop: Any = None,
) -> int:
    from pi_sandbox.protocol.messages import NotificationMessage, ToolUpdateParams
    from pi_sandbox.resources.resource_set import trust_store_path
    from pi_sandbox.supervisor.extensions.extension_requirements import (
        inactive_warnings,
        load_stop_reason,
    )
    from pi_sandbox.supervisor.modes.output_modes import printable, silence_stdout
    from pi_sandbox.supervisor.modes.run_signals import RunStop, RunStopped
    from pi_sandbox.supervisor.sessions.session_file import SessionWriter
    from pi_sandbox.supervisor.workers.worker_pool import (
        PoolConfig,
        WorkerPool,
        discover_extensions,
    )

    # The agent loop, the tool pipeline (jsonschema) and the modes are imported once
    # the workers have been spawned, while they start (`_import_after_spawn`).

    _forbid_ptrace_and_proc_reads()
    stop = stop if stop is not None else RunStop()
    if options.session:
        # Before any profile is built: a masked path must exist to be masked, and the
        # session store is masked from every worker (it may lie inside a workspace).
        with contextlib.suppress(OSError):
            (options.agent_dir / "sessions").mkdir(parents=True, exist_ok=True, mode=0o700)
        if options.session_choice is not None:
            # --session-dir: masked like the default store (PoolConfig.session_dir).
            with contextlib.suppress(OSError):
                options.session_choice.directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def discover(
        refused: list[Any] | None = None, trust: str | None = None, bootstrap: bool = False
    ) -> tuple[list[Any], list[str]]:
        # At start, and again at every reload (settings and directories re-read).
        # bootstrap: the user-level and -e extensions only (seed 000 §2.3).
        return discover_extensions(
            cwd=options.cwd,
            agent_dir=options.agent_dir,
            cli_paths=options.extensions,
            no_extensions=options.no_extensions,
            project_trust="no" if bootstrap else start.trust,
            rules=start.policy.extensions,
            refused=refused,
        )

    def make_config() -> PoolConfig:
        policy = start.policy
        settings = policy.sandbox
        # Issue 13 §3: the project tier does not govern non-project extensions' workers.
        extension_settings = policy.higher_tier_sandbox
        if options.ci and not policy.workspace_write_granted:
            # CI mode: a read-only workspace unless a managed or user policy grants it.
            settings = dataclasses.replace(settings, workspace_writable=False)
            if extension_settings is not None:
                extension_settings = dataclasses.replace(
                    extension_settings, workspace_writable=False
                )
        return PoolConfig(
            cwd=options.cwd,
            agent_dir=options.agent_dir,
            home=options.home,
            sandbox=options.sandbox,
            project_trust=start.trust,
            mode=options.mode,
            # rpc: dialogs go to the client (extension_ui_request / extension_ui_response);
            # interactive: to the terminal UI, which answers them the same way (issue 18).
            has_ui=options.mode in ("rpc", "interactive"),
            settings=settings,
            audit=audit.record,
            # Every tier's files stay read-only in every sandbox: a tool must not rewrite
            # the policy that a reload or the next run reads.
            policy_files=tuple(dict.fromkeys([*options.policies, *policy.sources])),
            audit_logs=tuple(start.audit_paths),
            extension_rules=policy.extensions,
            hook_timeout_s=policy.extensions.handler_timeout_s,
            extension_settings=extension_settings,
            session_dir=_custom_session_dir(options),
        )

    config = make_config()
    # Phase one (seed 000 §2.3–§2.4): with project resources and no --trust, the
    # user-level and -e extensions start first and may answer project_trust.
    bootstrap: list[Any] = []
    if options.trust is None and start.trust_info.resources:
        bootstrap, _ = discover(bootstrap=True)

    def update_event(tool_call_id: str | None, text: str) -> dict[str, Any]:
        """A ``tool_execution_update`` in pi's shape (pi docs json.md): the call's
        ``toolName`` and ``args``, and ``partialResult`` ``{content, details}``."""
        name, args = (pipeline.running.get(tool_call_id or "") if pipeline else None) or ("", {})
        return {
            "type": "tool_execution_update",
            "toolCallId": tool_call_id,
            "toolName": name,
            "args": args,
            "partialResult": {"content": [{"type": "text", "text": text}], "details": {}},
        }

    async def progress_note(tool_call_id: str | None, note: str) -> None:
        """A ``tool_execution_update`` whose partial result is one text: what pi
        says instead of the progress it does not stream."""
        await output(update_event(tool_call_id, note))

    async def on_tool_update(worker: Any, message: NotificationMessage) -> None:
        try:
            update = ToolUpdateParams.model_validate(message.params)
        except pydantic.ValidationError:
            return  # progress is cosmetic; a malformed update is dropped, not fatal
        if pool.running_calls.get(update.tool_call_id or "") is not worker:
            return  # only the worker executing a call may report progress for it
        call_id = update.tool_call_id or ""
        if (to_user := pool.user_bash_output.get(call_id)) is not None:
            # The user's own RPC bash command: its output is the user's, streamed as
            # pi's bash_execution_update (no tool_result hook sees it).
            text = update.update.get("text") if isinstance(update.update, dict) else None
            sent = update_bytes.get(call_id, 0)
            if isinstance(text, str) and text and sent <= MAX_UPDATE_BYTES_PER_CALL:
                # Bounded as tool progress is; the response has the output's tail.
                update_bytes[call_id] = sent + len(text.encode())
                await to_user(text)
            return
        if pool.subscribed("tool_result"):
            # issue 13 §1: a tool_result hook may redact the result; streamed raw,
            # the output would reach stdout before (or without, when the hook fails)
            # the redaction. One note per call instead of the progress.
            if call_id not in held_back:
                held_back.add(call_id)
                await progress_note(
                    update.tool_call_id,
                    "[pi: progress is not streamed: a tool_result hook may redact this result]",
                )
            return
        # Progress is bounded per call: a command printing without end must not
        # stream gigabytes through the JSON event stream (the result is truncated).
        sent = update_bytes.get(call_id, 0)
        if sent > MAX_UPDATE_BYTES_PER_CALL:
            return
        # pi's bash reports a snapshot of its output's tail (replace, not append):
        # the chunks are gathered per call; a snapshot goes out at most every
        # UPDATE_INTERVAL_S (the final result follows in tool_execution_end).
        chunk = update.update.get("text")
        tail = update_tails.get(call_id, "") + (chunk if isinstance(chunk, str) else "")
        update_tails[call_id] = tail = tail[-UPDATE_TAIL_CHARS:]
        now = trio.current_time()
        if now - update_sent_at.get(call_id, -UPDATE_INTERVAL_S) < UPDATE_INTERVAL_S:
            return
        update_sent_at[call_id] = now
        event = update_event(update.tool_call_id, tail)
        size = len(json.dumps(event, ensure_ascii=False))
        update_bytes[call_id] = sent + size
        if sent + size > MAX_UPDATE_BYTES_PER_CALL:
            await progress_note(
                update.tool_call_id,
                f"[pi: progress output past {MAX_UPDATE_BYTES_PER_CALL} "
                "bytes is not streamed; the result has the output's tail]",
            )
            return
        await output(event)
        if pool.subscribed("tool_execution_update") and pool._nursery is not None:
            # Not awaited here: this runs on the tool worker's channel reader, which a
            # slow extension handler must not hold up.
            pool._nursery.start_soon(
                pool.dispatch,
                "tool_execution_update",
                {"tool_call_id": update.tool_call_id, "partial_result": update.update},
            )

    update_bytes: dict[str, int] = {}
    update_tails: dict[str, str] = {}
    update_sent_at: dict[str, float] = {}
    held_back: set[str] = set()

    from pi_sandbox.sandbox.profile import PROTECTED_IN_WORKSPACE
    from pi_sandbox.sandbox.repository_scan import find_repositories

    # A sandboxed run's persistence guard quarantines persistence paths its tools
    # create (issue 14 §1); unsandboxed tools can create them, and then the run at
    # least says so, so nobody trusts a planted .pi/ or .git unawares.
    absent_at_start = [
        rel for rel in PROTECTED_IN_WORKSPACE if not os.path.lexists(options.cwd / rel)
    ]
    pool = WorkerPool(config)
    stop.on_hurry.append(pool.kill_all)

    async def report_quarantine(finding: Any) -> None:
        from pi_sandbox.supervisor.agent.tool_pipeline import quarantine_event

        await output(quarantine_event(finding))

    pool.on_quarantine = report_quarantine
    pipeline: ToolPipeline | None = None
    writer: SessionWriter | None = None
    status = 0
    keep_logs = False
    # Repositories under the tool worker's writable roots at start (sandboxed runs):
    # a new one at the end is something a later `git` would execute config from.
    repositories_at_start: dict[str, Any] = {}
    # Trust-requiring resources under the writable roots at start (sandboxed runs):
    # what the run created or changed is reported at the end (issue 14 §4).
    resource_watch: Any = None
    # SIGHUP is received from the start (`_run_stoppable`): a reload requested while
    # workers start is applied (the pipeline picks up the store's policy when it is
    # created).
    reload_target: dict[str, Any] = {"pipeline": None}
    stop.reload = lambda: _reload_policy(start.store, reload_target, output, audit)
    frontend = output if options.mode == "interactive" else None
    try:
        async with trio.open_nursery() as nursery:
            mcp: Any = None
            try:
                trust_notices: list[str] = []
                if frontend is not None:
                    # The screen and the editor first: typing starts at once, and the
                    # trust question below needs them (issue 18).
                    await frontend.start(nursery)
                if bootstrap:
                    with stop.guard():
                        await pool.start_bootstrap(
                            nursery, bootstrap, on_tool_update=on_tool_update
                        )
                        await _ask_extensions_for_trust(options, start, pool, trust_notices)
                    pool.config = make_config()
                if frontend is not None and start.trust_info.decision == "ask":
                    # Phase two (seed 000 §2.4): no extension answered; the user does.
                    with stop.guard():
                        await _ask_user_for_trust(options, start, frontend, trust_notices)
                    pool.config = make_config()
                # The decision, before any project resource is read (the bootstrap
                # extensions above are user-level or -e ones).
                audit.record(
                    {
                        "event": "trust",
                        "action": "decided",
                        "project": str(options.cwd),
                        **start.trust_info.as_dict(),
                        "store": str(trust_store_path(options.agent_dir)),
                    }
                )
                refused: list[Any] = []
                sources, notices = discover(refused)
                for source, why in refused:
                    audit.record(
                        {
                            "event": "extension",
                            "action": "refused",
                            "extension": str(source.path),
                            "origin": source.origin,
                            "reason": why,
                        }
                    )
                notices = [
                    *options.notices,
                    *trust_notices,
                    *(f"Policy: {line}" for line in start.policy.diagnostics),
                    *start.trust_info.change_notices(),
                    *_untrusted_notice(start.trust_info, options.cwd, start.base_policy.trust),
                    *notices,
                ]
                if options.mcp:
                    # issue 19 §4: servers connect in parallel with the workers' start.
                    mcp = await _start_mcp(options, start, pool, output, audit.record, nursery)
                # Workers first: a run that cannot start its sandbox leaves no session file.
                nursery.start_soon(_import_after_spawn)
                with stop.guard():
                    await pool.start(nursery, sources, on_tool_update=on_tool_update)
                from pi_sandbox.supervisor.agent.agent_session import AgentSession
                from pi_sandbox.supervisor.agent.tool_pipeline import (
                    ToolPipeline,
                    quarantine_event,
                    report_extension_errors,
                )
                from pi_sandbox.supervisor.extensions.session_host import SessionHost
                from pi_sandbox.supervisor.modes.rpc_mode import serve_rpc

                if options.mcp and pool.mcp_servers:
                    if mcp is None:
                        mcp = await _start_mcp(
                            options, start, pool, output, audit.record, nursery, empty_ok=True
                        )
                    await _add_registered_mcp(mcp, pool)
                if pool.guard_warning is not None:
                    await output({"type": "pisandbox_warning", "message": pool.guard_warning})
                tool_profile = pool.tool_worker.spec.sandbox if pool.tool_worker else None
                if tool_profile is not None:
                    for root in tool_profile.rw_binds:
                        repositories_at_start[root] = await trio.to_thread.run_sync(
                            find_repositories, root
                        )
                    from pi_sandbox.supervisor.extensions.resource_changes import (
                        ResourceWatch,
                        watched_roots,
                    )

                    resource_watch = ResourceWatch(
                        watched_roots(options.cwd, tool_profile.rw_binds), options.home
                    )
                    await resource_watch.start()
                try:
                    if options.session_choice is not None:
                        from pi_sandbox.supervisor.sessions.startup import open_writer

                        writer = open_writer(options.session_choice, start.session_id)
                    else:
                        writer = (
                            SessionWriter.create(options.agent_dir, options.cwd, start.session_id)
                            if options.session
                            else SessionWriter.in_memory(options.cwd, start.session_id)
                        )
                except OSError as exc:
                    raise UsageError(
                        f"cannot write the session file under {options.agent_dir / 'sessions'}: "
                        f"{exc} (use --no-session, or set PI_CODING_AGENT_DIR)"
                    ) from exc
                # pi docs json.md "Session header": id and timestamp also under
                # --no-session (the session exists in memory); `path` is ours.
                header: dict[str, Any] = {
                    "type": "session",
                    "version": 3,
                    "id": writer.header.id,
                    "timestamp": writer.header.timestamp,
                    "cwd": str(options.cwd),
                }
                if writer.path is not None:
                    header["path"] = str(writer.path)
                if options.mode == "json":  # pi's RPC stream opens with nothing (rpc.md)
                    await output(header)
                for notice in notices:
                    await output({"type": "pisandbox_notice", "message": notice})
                if (
                    not options.sandbox
                    and pool.tool_worker
                    and pool.tool_worker.spec.sandbox is not None
                ):
                    await output(
                        {
                            "type": "pisandbox_notice",
                            "message": "Tools and every extension run in the sandbox too: project "
                            "extensions loaded with --trust sandboxed can steer tool calls",
                        }
                    )
                for source, worker in pool.extensions:
                    audit.record(
                        {
                            "event": "extension",
                            "action": "loaded",
                            "extension": str(source.path),
                            "origin": source.origin,
                            "sandboxed": worker.spec.sandbox is not None,
                            "capabilities": pool.capabilities(source),
                        }
                    )
                for failure in pool.load_errors:
                    audit.record(
                        {
                            "event": "extension",
                            "action": "failed",
                            "extension": failure.get("path"),
                            "reason": failure.get("message"),
                        }
                    )
                for source, worker in pool.extensions:
                    where = (
                        "in a sandbox" if worker.spec.sandbox is not None else "without a sandbox"
                    )
                    await output(
                        {
                            "type": "pisandbox_notice",
                            "message": f"Loaded {source.origin} extension {source.path} ({where})",
                        }
                    )
                keep_logs = bool(pool.load_errors)
                await report_extension_errors(output, pool.load_errors, "load")
                # issue 13 §2: a guard that did not load is never silently absent.
                pool.refused = refused
                if (load_stop := load_stop_reason(pool, ci=options.ci)) is not None:
                    raise UsageError(load_stop)
                for warning in inactive_warnings(pool):
                    await output({"type": "pisandbox_warning", "message": warning})
                if (outer := _outer_project_policy(options.cwd)) is not None:
                    await output({"type": "pisandbox_warning", "message": outer})
                pipeline = ToolPipeline(
                    pool=pool,
                    policy=start.store.current,
                    cwd=options.cwd,
                    emit=output,
                    tool_timeout_s=float(pool.config.settings.limits.tool_timeout_s),
                    # issue 18: the terminal's or RPC client's user answers a policy ``ask``.
                    has_ui=pool.config.has_ui,
                )
                if pool.config.has_ui and not options.ci:
                    # issue 18: ask is put to the user; --ci keeps ask = deny.
                    from pi_sandbox.supervisor.approvals import ApprovalBroker
                    from pi_sandbox.supervisor.approvals.settings import approval_timeout_s

                    pipeline.approvals = ApprovalBroker(
                        emit=output,
                        audit=audit.record,
                        timeout_s=approval_timeout_s(options.agent_dir),
                    )
                reload_target["pipeline"] = pipeline
                session = AgentSession(
                    provider=provider,
                    pool=pool,
                    pipeline=pipeline,
                    emit=output,
                    cwd=options.cwd,
                    writer=writer,
                    retry=await _auto_retry(options, start, provider, output),
                )
                session.compactor = _compactor(options, lambda: start.trust)
                for notice in session.compactor.config.notices:
                    await output({"type": "pisandbox_notice", "message": notice})
                from pi_sandbox.supervisor.modes.model_commands import ModelControl

                choice = start.model_choice
                if choice is not None:
                    session.thinking_level = choice.thinking_level
                # pi records the model and thinking level at a session's start, and on a
                # continued session what differs from its branch.
                writer.record_settings(provider.name, provider.model, session.thinking_level)

                def new_writer() -> SessionWriter:
                    if options.session and options.session_choice is not None:
                        from pi_sandbox.supervisor.sessions.startup import new_session_writer

                        fresh = new_session_writer(options.session_choice.directory, options.cwd)
                    elif options.session:
                        fresh = SessionWriter.create(options.agent_dir, options.cwd)
                    else:
                        fresh = SessionWriter.in_memory(options.cwd)
                    # A new session starts with its model and thinking level, as pi's.
                    fresh.record_settings(provider.name, provider.model, session.thinking_level)
                    return fresh

                host = SessionHost(
                    pool=pool,
                    session=session,
                    emit=output,
                    audit=audit.record,
                    discover=discover,
                    new_writer=new_writer,
                    tools_filter=options.tools,
                    argv=options.argv,
                    parse_flags=_flag_parser() if options.argv else None,
                    agent_dir=options.agent_dir,
                    load_resources=lambda contributed: _load_resource_set(
                        options, start, pool, contributed
                    ),
                    change_trust=lambda decision, save: _change_trust(
                        options, start, pool, pipeline, audit, decision, save, make_config
                    ),
                    trust_info=lambda: start.trust_info,
                )
                host.models = ModelControl(
                    session,
                    choice.model if choice is not None else None,
                    start.provider_factory,
                    choice.scope if choice is not None else None,
                )
                if options.session_choice is not None:
                    host.session_dirs = (options.session_choice.directory,)
                stop.on_stop.append(host.abort)
                host.mcp = mcp
                try:
                    with stop.guard():
                        await host.start(nursery)
                    if hasattr(provider, "bind"):
                        provider.bind(pool)  # an extension's provider (issue 16)
                    if options.mode == "rpc":
                        with stop.guard():
                            await serve_rpc(host, output)
                        final_text = None
                    elif frontend is not None:
                        with stop.guard():
                            await frontend.serve(host, _interactive_context(options, start, pool))
                        final_text = None
                    else:
                        prompts = PromptInput(
                            options.message, options.images, options.rest_messages
                        )
                        if host.message_from_flags is not None:
                            # Re-parsed with the extensions' flags: a word may have
                            # been a string flag's value, not part of the prompt.
                            prompts = build_prompt_input(
                                host.message_from_flags, options.stdin_text, options.cwd
                            )
                        if not prompts.first.strip():
                            raise UsageError(
                                "no message: give one as arguments or on stdin (the words "
                                "given were values of extension flags)"
                            )
                        answer: dict[str, str] = {}

                        async def prompt_job() -> None:
                            # pi docs cli.md: the first prompt carries stdin and the
                            # @files; every further message is sent once it settled.
                            answer["text"] = await host.submit(
                                prompts.first, prompts.images or None
                            )
                            for message in prompts.rest:
                                answer["text"] = await host.submit(message)

                        host.enqueue(prompt_job)
                        with stop.guard():
                            await host.wait_quiet()
                        final_text = answer.get("text", "")
                    if host.errors:
                        raise host.errors[0]
                    if (required := pool.required_failure()) is not None:
                        # Mid-run (issue 13 §2): its tool calls were blocked; the run fails.
                        raise WorkerCrashedError(required)
                finally:
                    with trio.CancelScope(shield=True), trio.move_on_after(10):
                        # Not abortable: after a stop signal aborted the prompt, the
                        # extensions still hear that the session ends (pi 1.6.0 does).
                        await session.notify(
                            "session_shutdown", {"reason": "quit"}, abortable=False
                        )
                    if mcp is not None:
                        with trio.move_on_after(10):
                            await mcp.aclose()
                    writer = session.writer
                if frontend is not None:
                    frontend.close()  # the terminal is restored before anything is printed
                if final_text is not None and options.mode != "json":
                    try:
                        print(printable(final_text), flush=True)
                    except OSError as exc:
                        silence_stdout()
                        if not isinstance(exc, BrokenPipeError):
                            print(
                                f"pi: cannot write output: {exc.strerror or exc}",
                                file=sys.stderr,
                                flush=True,
                            )
                        status = 1
                if options.verbose and options.mode == "print":
                    # issue 16: the session's usage and cost, after the answer.
                    from pi_sandbox.supervisor.modes.model_commands import session_stats, usage_line

                    ref = f"{session.provider.name}/{session.provider.model}"
                    stats = session_stats(session, host.models.model)
                    print(f"pi: {usage_line(stats, ref)}", file=sys.stderr, flush=True)
            except UsageError as exc:
                await output({"type": "pisandbox_error", "error": str(exc)})
                print(printable(f"pi: {exc}"), file=sys.stderr, flush=True)
                status = 2
            except ProviderError as exc:
                await output({"type": "pisandbox_error", "error": f"provider error: {exc}"})
                print(printable(f"pi: provider error: {exc}"), file=sys.stderr, flush=True)
                status = 1
            except (WorkerError, PolicyError) as exc:
                keep_logs = True
                await output({"type": "pisandbox_error", "error": str(exc)})
                print(printable(f"pi: {exc}"), file=sys.stderr, flush=True)
                status = 1
            except RunStopped as exc:
                # Said on stderr when the signal came (run_signals); the event stream
                # says it too. The finally below tears everything down as usual.
                if options.mode in ("json", "rpc"):
                    await output(
                        {"type": "pisandbox_error", "error": f"{exc} (exit {stop.exit_status})"}
                    )
                status = stop.exit_status or 1
            finally:
                if frontend is not None:
                    frontend.close()
                keep_logs = keep_logs or bool(pool.disabled)
                if mcp is not None:
                    with trio.move_on_after(10):
                        await mcp.aclose()
                await pool.aclose(keep_logs=keep_logs)
                # Every sandbox is gone: the last look, for what a background process
                # made after the last call (issue 14 §1).
                for finding in await pool.check_persistence():
                    await output(quarantine_event(finding))
                for rel in absent_at_start if not pool.guarded else ():
                    path = options.cwd / rel
                    if os.path.lexists(path):
                        await output(
                            {
                                "type": "pisandbox_warning",
                                "message": f"{path} did not exist when the run started and a "
                                "tool created it; review it before you trust this project",
                            }
                        )
                for root, before in repositories_at_start.items():
                    after = await trio.to_thread.run_sync(find_repositories, root)
                    if not after.complete:
                        why = (
                            f"{len(after.unreadable)} directories could not be read "
                            f"(e.g. {after.unreadable[0]})"
                            if after.unreadable
                            else f"it has more than {after.visited} directories"
                        )
                        await output(
                            {
                                "type": "pisandbox_warning",
                                "message": f"the check of {root} for git repositories created "
                                f"during the run was incomplete: {why}; review new .git "
                                "directories and HEAD files before running git below it",
                            }
                        )
                    for path in sorted(after.found - before.found):
                        if pool.accepted_worktree(path):
                            continue
                        # A new repository whose config runs code: quarantined, not
                        # only reported (red-team F1c).
                        for finding in await pool.check_repository(path):
                            await output(quarantine_event(finding))
                        await output(
                            {
                                "type": "pisandbox_warning",
                                "message": f"a tool made {path} a git repository during the run; "
                                "git run there would use its config and hooks: review or delete it",
                            }
                        )
                if pool.repeated_findings:
                    await output(
                        {
                            "type": "pisandbox_warning",
                            "message": f"pi quarantined {pool.repeated_findings} more entries "
                            "at paths it had already reported (see the quarantine records in "
                            "the audit log)",
                        }
                    )
                if pool.guard_failure is not None and status == 0:
                    await output({"type": "pisandbox_error", "error": pool.guard_failure})
                    print(printable(f"pi: {pool.guard_failure}"), file=sys.stderr, flush=True)
                    status = 1
                if resource_watch is not None:
                    await resource_watch.report(output, audit.record)
                if keep_logs:
                    print(f"pi: worker logs kept in {pool.log_dir}", file=sys.stderr, flush=True)
                nursery.cancel_scope.cancel()
    except* PiSandboxError as group:
        # SandboxUnavailableError and friends raised inside (nested) nurseries arrive
        # grouped: surface the first one as itself.
        first: BaseException = group
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
    finally:
        if writer is not None:
            writer.close()
    if getattr(output, "failed", False):
        status = status or 1
    if stop.exit_status is not None:
        status = stop.exit_status  # a stop signal after the last guarded wait
    # The last record: a log without it was cut short (crash, kill, full disk).
    audit.record(
        {
            "event": "run",
            "action": "end",
            "exit_status": EXIT_DENIED
            if options.ci and status == 0 and pipeline is not None and pipeline.denied
            else status,
            "denied": pipeline.denied if pipeline is not None else 0,
        }
    )
    if options.ci and status == 0 and pipeline is not None and pipeline.denied:
        print(
            f"pi: CI mode: the policy denied {pipeline.denied} tool call(s) (exit 3); "
            "see the tool_call records in the audit log",
            file=sys.stderr,
            flush=True,
        )
        status = EXIT_DENIED
    return status


async def _start_mcp(
    options: RunOptions,
    start: _Start,
    pool: Any,
    output: Any,
    audit: Any,
    nursery: Any,
    *,
    empty_ok: bool = False,
) -> Any:
    """Load ``mcp.json`` (the project's only with trust ``yes``) and connect its servers
    in the background (issue 19); servers extensions register are added once the
    workers loaded (`_add_registered_mcp`). None when there is nothing to connect or
    report (unless ``empty_ok``)."""
    from pi_sandbox.supervisor.mcp.config import load_mcp_config
    from pi_sandbox.supervisor.mcp.manager import McpManager
    from pi_sandbox.supervisor.providers.auth_store import read_auth

    config = load_mcp_config(options.agent_dir, options.cwd, project_trusted=start.trust == "yes")
    if not (empty_ok or config.servers or config.errors or config.ignored_project_file):
        return None  # nothing to connect or say: no manager, no cost

    def auth_key(provider: str) -> str | None:
        entry = read_auth(options.agent_dir).get(provider)
        if isinstance(entry, dict):
            key = entry.get("key") or entry.get("access")
            return key if isinstance(key, str) else None
        return None

    manager = McpManager(
        config,
        pool=pool,
        rules=start.store.current.mcp if start.store.current is not None else None,
        cwd=options.cwd,
        home=options.home,
        agent_dir=options.agent_dir,
        sandbox_mode="required"
        if pool.config.sandbox
        else "off"
        if options.explicit_no_sandbox
        else "default",
        emit=output,
        audit=audit,
        auth_key=auth_key,
    )
    await manager.start(nursery)
    return manager


async def _add_registered_mcp(manager: Any, pool: Any) -> None:
    """Connect the servers extensions registered (``pi.register_mcp_server``)."""
    from pi_sandbox.supervisor.mcp.config import validate_server

    registered = []
    errors = []
    for name, (path, entry) in pool.mcp_servers.items():
        try:
            registered.append(
                validate_server(name, entry, source=f"extension:{path}", scope="extension")
            )
        except ValueError as exc:
            errors.append(f"extension {path}: {exc}")
    if registered or errors:
        await manager.add_servers(registered, errors)


async def _auto_retry(options: RunOptions, start: _Start, provider: Any, output: Any) -> Any:
    """The run's `AutoRetry` from the ``retry`` settings and ``httpIdleTimeoutMs``
    (issue 16); the provider gets the idle timeout. A project's settings count only
    when the project is trusted (DESIGN §8)."""
    from pi_sandbox.supervisor.providers.retry import AutoRetry, load_retry_settings

    trusted = start.trust in ("yes", "sandboxed")
    settings, notices = load_retry_settings(options.agent_dir, options.cwd if trusted else None)
    for notice in notices:
        await output({"type": "pisandbox_warning", "message": notice})
    if hasattr(provider, "idle_timeout_s"):
        provider.idle_timeout_s = settings.idle_timeout_s
    return AutoRetry(settings)


def _custom_session_dir(options: RunOptions) -> Path | None:
    """The ``--session-dir`` to mask in every sandbox, when it lies outside the
    agent directory (whose ``sessions`` are masked already)."""
    choice = options.session_choice
    if choice is None or (not choice.persist and not choice.directory.is_dir()):
        return None
    real = Path(os.path.realpath(choice.directory))
    if real.is_relative_to(os.path.realpath(options.agent_dir)):
        return None
    return choice.directory


def _flag_parser() -> Any:
    from pi_sandbox.cli import build_parser
    from pi_sandbox.supervisor.extensions.session_host import parse_extension_flags

    def parse(argv: Any, flags: list[Any]) -> tuple[dict[str, Any], list[str]]:
        return parse_extension_flags(argv, flags, build_parser)

    return parse


async def _reload_policy(store: Any, target: dict[str, Any], output: Any, audit: Any) -> None:
    """Reload the policy (one ``SIGHUP``, received by `run_signals.RunStop`); a bad
    file keeps the last valid policy (issue 4 case 8) and the error is reported on
    the output and in the audit log."""
    try:
        result = store.reload()
    except Exception as exc:  # never let a reload take the session down
        from pi_sandbox.policies import ReloadResult

        result = ReloadResult(ok=False, error=f"{type(exc).__name__}: {exc}")
    audit.record(
        {
            "event": "policy",
            "action": "reloaded" if result.ok else "reload_failed",
            "error": result.error,
            "files": [{"tier": f.tier, "file": str(f.path)} for f in store.current.files],
        }
    )
    if not result.ok:
        message = f"policy reload failed; the last valid policy stays in force: {result.error}"
        await output({"type": "pisandbox_error", "error": message})
        print(f"pi: {message}", file=sys.stderr, flush=True)
        return
    if target["pipeline"] is not None:
        target["pipeline"].policy = store.current
    note = "policy reloaded; tool-call rules apply from the next call"
    if result.sandbox_changed:
        note += "; sandbox changes apply to the next run (running workers keep theirs)"
    if result.other_changed:
        note += "; extensions, trust and audit changes apply to the next run"
    await output({"type": "pisandbox_notice", "message": note})


async def _ask_extensions_for_trust(
    options: RunOptions, start: _Start, pool: Any, notices: list[str]
) -> None:
    """Emit ``project_trust`` to the bootstrap extensions (seed 000 §2.4): the first
    ``yes``/``no``/``sandboxed`` answer decides ahead of the trust store and the
    defaults (never ahead of ``--trust``, which skips this), limited by the policy.
    A failing handler is reported and the next one asked."""
    from pi_sandbox.resources.resource_set import resolve_trust

    if not pool.subscribed("project_trust"):
        return
    info = start.trust_info
    outcome = await pool.dispatch(
        "project_trust",
        {
            "cwd": str(options.cwd),
            "project_resources": [str(p) for p in info.resources],
            "stored": info.as_dict()["stored"],
        },
    )
    for error in outcome.errors:
        notices.append(
            f"project_trust handler of {error.get('path')} failed: {error.get('message')}"
        )
    answer = outcome.state.get("result")
    if answer not in ("yes", "no", "sandboxed"):
        return
    decided = resolve_trust(
        options.cwd,
        agent_dir=options.agent_dir,
        home=options.home,
        rules=start.base_policy.trust,
        extension_answer=answer,
    )
    start.apply_trust(options, decided)
    notices.append(f"Project trust: {decided.decision} (from {decided.source})")


async def _ask_user_for_trust(
    options: RunOptions, start: _Start, frontend: Any, notices: list[str]
) -> None:
    """Ask the terminal's user about an undecided project (issue 18, seed 000 §2.4):
    ``yes``/``sandboxed``/``no``, for this run or saved in the trust store. Only the
    answers the policy allows are offered; no answer leaves the project untrusted.

    Raises:
        UsageError: the trust store cannot be written when the user asked to save.
    """
    import dataclasses as dc

    from pi_sandbox.resources.resource_set import resolve_trust, trust_store_path

    info = start.trust_info
    rules = start.base_policy.trust
    allowed = [d for d in ("yes", "sandboxed", "no") if rules is None or not rules.refusal(d)]
    answer = await frontend.ask_trust(options.cwd, list(info.resources), allowed)
    if answer is None:
        start.apply_trust(options, dc.replace(info, decision=None, source="not answered"))
        return
    decision, save = answer
    decided = dc.replace(
        resolve_trust(
            options.cwd,
            agent_dir=options.agent_dir,
            home=options.home,
            requested=decision,
            rules=rules,
        ),
        source="the trust prompt",
    )
    if save:
        path = trust_store_path(options.agent_dir)
        await _save_trust_decision(
            options, decision, failure=f"cannot save the trust decision in {path}"
        )
        decided = dc.replace(decided, stored=(decision, options.cwd), store_error=None)
    start.apply_trust(options, decided)
    notices.append(f"Project trust: {decision} (from the trust prompt{', saved' if save else ''})")


async def _save_trust_decision(options: RunOptions, decision: str, *, failure: str) -> None:
    """Store ``decision`` (``"yes"``, ``"sandboxed"`` or ``"no"``) for ``options.cwd`` in the
    trust store of ``options.agent_dir``, with the fingerprint of what it approves (issue 14
    §4; none for ``"no"``), measured in a thread and outside the store's lock.

    Raises:
        UsageError: ``"<failure>: <reason>"`` when the store cannot be read or written.
    """
    from pi_sandbox.resources.project_trust import TrustStore, TrustStoreError
    from pi_sandbox.resources.resource_set import trust_store_path
    from pi_sandbox.resources.trust_fingerprint import decision_fingerprint

    fingerprint = (
        await trio.to_thread.run_sync(lambda: decision_fingerprint(options.cwd, home=options.home))
        if decision != "no"
        else None
    )
    try:
        TrustStore.update(
            trust_store_path(options.agent_dir),
            lambda store: store.set(options.cwd, decision, fingerprint=fingerprint),
        )
    except (TrustStoreError, OSError) as exc:
        raise UsageError(f"{failure}: {exc}") from exc


def _interactive_context(options: RunOptions, start: _Start, pool: Any) -> dict[str, Any]:
    """What the terminal UI shows beside the event stream (issue 18): the effective
    policy's files, the sandbox state and the trust decision, read when asked."""

    def sandboxed() -> bool:
        tool = pool.tool_worker  # read each time: a reload may replace it
        return tool is not None and tool.spec.sandbox is not None

    return {
        "cwd": options.cwd,
        "agent_dir": options.agent_dir,
        "policy": lambda: start.store.current,
        "trust": lambda: start.trust_info,
        "sandboxed": sandboxed,
        "sandbox_requested": options.sandbox,
    }


def _untrusted_notice(info: Any, cwd: Path, rules: Any = None) -> list[str]:
    """What an untrusted project's run skipped, and how to trust it (issue 6 case 5)
    — only the ways the policy (``rules``, `TrustRules`) allows."""
    store_problem = [f"the trust store was ignored: {info.store_error}"] if info.store_error else []
    if info.trusted or not info.resources:
        return store_problem
    shown = ", ".join(str(p) for p in info.resources[:8])
    more = f" and {len(info.resources) - 8} more" if len(info.resources) > 8 else ""
    allowed = getattr(rules, "users_may_trust", "yes")
    import shlex

    cwd = shlex.quote(str(cwd))  # copied into a shell: a directory name may hold $(…)
    head = (
        f"Project not trusted ({info.decision or 'undecided'}, from {info.source}): its "
        f"resources were not loaded: {shown}{more}."
    )
    if allowed == "no":
        how = f" The policy {rules.users_may_trust_source} forbids trusting projects."
    elif allowed == "sandboxed":
        how = (
            f" To trust it sandboxed (the policy {rules.users_may_trust_source} allows "
            f"only that): `pi trust sandboxed {cwd}` (saved), --trust sandboxed (this "
            "run), or /trust sandboxed during a session"
        )
    else:
        how = (
            f" To trust it: `pi trust yes {cwd}` or `pi trust sandboxed {cwd}` (saved), "
            "--trust yes|sandboxed (this run), or /trust yes|sandboxed during a session"
        )
    return [head + how, *store_problem]


def _load_resource_set(options: RunOptions, start: _Start, pool: Any, contributed: Any) -> Any:
    """The skills, templates and context files the run's trust admits (issue 6)."""
    from pi_sandbox.resources.resource_set import load_resources

    return load_resources(
        options.cwd,
        agent_dir=options.agent_dir,
        home=options.home,
        trust=start.trust_info,
        cli_skills=tuple(options.skills),
        no_skills=options.no_skills,
        cli_prompts=tuple(options.prompt_templates),
        no_prompts=options.no_prompt_templates,
        packages=tuple(source.path for source, _ in pool.extensions if source.path.is_dir()),
        contributed=contributed,
        system_prompt=options.system_prompt,
        append_system_prompt=tuple(options.append_system_prompt),
        no_context_files=options.no_context_files,
    )


async def _change_trust(
    options: RunOptions,
    start: _Start,
    pool: Any,
    pipeline: Any,
    audit: Any,
    decision: str,
    save: bool,
    make_config: Any,
) -> Any:
    """``/trust`` and RPC ``set_trust``: decide again as ``--trust DECISION`` would
    (the policy may refuse it), swap the project's policy tier in or out, and
    optionally save the decision; the caller reloads extensions and resources.

    Raises:
        UsageError: the policy forbids ``decision``; the project's policy file is
            malformed; ``sandboxed`` would put project extensions beside unsandboxed
            tools (restart with ``--trust sandboxed`` or ``--sandbox``); the trust
            store cannot be written.
    """
    import dataclasses as dc

    from pi_sandbox.resources.resource_set import resolve_trust, trust_store_path
    from pi_sandbox.supervisor.workers.worker_pool import discover_extensions

    try:
        info = resolve_trust(
            options.cwd,
            agent_dir=options.agent_dir,
            home=options.home,
            requested=decision,
            rules=start.base_policy.trust,
        )
    except ValueError as exc:
        raise UsageError(f"/trust: {exc}") from exc
    info = dc.replace(info, source="/trust")
    tool_sandboxed = pool.tool_worker is not None and pool.tool_worker.spec.sandbox is not None
    if decision == "sandboxed" and not tool_sandboxed:
        trial, _ = discover_extensions(
            cwd=options.cwd,
            agent_dir=options.agent_dir,
            cli_paths=options.extensions,
            no_extensions=options.no_extensions,
            project_trust="sandboxed",
            rules=start.policy.extensions,
        )
        if any(source.origin == "project" for source in trial):
            raise UsageError(
                "/trust sandboxed: the project's extensions would steer tools that run "
                "without a sandboxed tool worker in this session; start again with "
                "--trust sandboxed (or --sandbox)"
            )
    previous = (
        start.policy,
        start.store.locations,
        start.trust,
        start.trust_source,
        start.trust_info,
    )
    try:
        start.apply_trust(options, info)
    except PolicyError as exc:
        start.policy, start.store.locations, start.trust, start.trust_source, start.trust_info = (
            previous
        )
        start.store.current = start.policy
        raise UsageError(f"/trust {decision}: the project's policy is malformed: {exc}") from exc
    pool.config = make_config()
    if pipeline is not None:
        pipeline.policy = start.store.current
    audit.record(
        {"event": "trust", "action": "changed", "project": str(options.cwd), **info.as_dict()}
    )
    if save:
        path = trust_store_path(options.agent_dir)
        await _save_trust_decision(
            options, decision, failure="/trust --save: cannot update the trust store"
        )
        info = dc.replace(info, stored=(decision, options.cwd), store_error=None)
        start.trust_info = info
        audit.record(
            {
                "event": "trust",
                "action": "saved",
                "project": str(options.cwd),
                "decision": decision,
                "store": str(path),
            }
        )
    return info
