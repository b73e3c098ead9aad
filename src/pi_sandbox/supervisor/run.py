"""Wiring for a non-interactive run (``-p`` and ``--mode json``).

Order of work (DESIGN §8): load the policy (a malformed one is fatal), build the
provider, discover extensions with the trust decision already made, start every
worker, then run the agent loop and shut everything down — workers are always
reaped, even when the run fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
import trio

from pi_sandbox.errors import (
    PiSandboxError,
    PolicyError,
    ProviderError,
    SandboxError,
    SandboxUnavailableError,
    UsageError,
    WorkerError,
)

__all__ = ["RunOptions", "run_print_session"]


MAX_UPDATE_BYTES_PER_CALL = 1024 * 1024
"""Progress (``tool_execution_update``) streamed per tool call, in bytes of JSON."""


@dataclass
class RunOptions:
    """Everything the CLI resolved for one run (paths absolute)."""

    message: str
    cwd: Path
    agent_dir: Path
    mode: str = "print"  # "print" | "json"
    model: str = "scripted"
    script: Path | None = None
    base_url: str | None = None
    api_key: str | None = None
    extensions: list[Path] = field(default_factory=list)
    no_extensions: bool = False
    sandbox: bool = False
    policies: list[Path] = field(default_factory=list)
    trust: str | None = None
    session: bool = True
    home: Path = field(default_factory=Path.home)
    audit_log: Path | None = None


def run_print_session(options: RunOptions) -> int:
    """Run one prompt to completion; returns the process exit status.

    0: the agent finished; 1: provider or agent failure; 2: bad configuration (policy
    file, provider arguments); 3: a sandbox was required and bwrap cannot run.
    """
    from pi_sandbox.policies import load_policies
    from pi_sandbox.supervisor.output_modes import (
        JsonOutput,
        PrintOutput,
        printable,
        silence_stdout,
    )
    from pi_sandbox.supervisor.providers import create_provider

    def fail(text: str, code: int) -> int:
        print(printable(f"pi: {text}"), file=sys.stderr, flush=True)
        return code

    try:
        policy = load_policies(options.policies) if options.policies else None
    except PolicyError as exc:
        return fail(f"policy error: {exc}", 2)
    try:
        provider = create_provider(
            options.model, script=options.script, base_url=options.base_url, api_key=options.api_key
        )
    except UsageError as exc:
        return fail(str(exc), 2)
    except ProviderError as exc:
        return fail(f"provider error: {exc}", 2)
    output = JsonOutput() if options.mode == "json" else PrintOutput()
    from pi_sandbox.supervisor.audit_log import AuditLog

    try:
        audit = AuditLog(options.audit_log)
    except OSError as exc:
        return fail(
            f"argument --audit-log: cannot open {options.audit_log}: {exc.strerror or exc}", 2
        )
    try:
        return trio.run(_run, options, provider, policy, output, audit)
    except UsageError as exc:
        return fail(str(exc), 2)
    except SandboxUnavailableError as exc:
        return fail(
            f"a sandbox is required (--sandbox, or --trust sandboxed with project extensions) "
            f"but bubblewrap cannot run here: {exc}",
            3,
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
        return 0 if options.mode == "json" else 1
    except Exception as exc:  # the last line of defence: a clear message, never a bare traceback
        import traceback

        traceback.print_exc(file=sys.stderr)
        return fail(f"internal error: {type(exc).__name__}: {exc}", 1)
    finally:
        audit.close()


def _is_leftover_placeholder(path: Path, pool: Any) -> bool:
    """An empty directory the sandbox made to protect a missing path (still held
    by a concurrent sandboxed run), not something a tool created."""
    try:
        return str(path) in pool.placeholders and path.is_dir() and not any(path.iterdir())
    except OSError:
        return False


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


async def _run(options: RunOptions, provider: Any, policy: Any, output: Any, audit: Any) -> int:
    from pi_sandbox.protocol.messages import NotificationMessage, ToolUpdateParams
    from pi_sandbox.sandbox.settings import SandboxSettings
    from pi_sandbox.supervisor.agent_session import AgentSession
    from pi_sandbox.supervisor.output_modes import printable, silence_stdout
    from pi_sandbox.supervisor.session_file import SessionWriter
    from pi_sandbox.supervisor.tool_pipeline import ToolPipeline, report_extension_errors
    from pi_sandbox.supervisor.worker_pool import PoolConfig, WorkerPool, discover_extensions

    _forbid_ptrace_and_proc_reads()
    if options.session:
        # Before any profile is built: a masked path must exist to be masked, and the
        # session store is masked from every worker (it may lie inside a workspace).
        with contextlib.suppress(OSError):
            (options.agent_dir / "sessions").mkdir(parents=True, exist_ok=True, mode=0o700)
    sources, notices = discover_extensions(
        cwd=options.cwd,
        agent_dir=options.agent_dir,
        cli_paths=options.extensions,
        no_extensions=options.no_extensions,
        project_trust=options.trust,
    )
    config = PoolConfig(
        cwd=options.cwd,
        agent_dir=options.agent_dir,
        home=options.home,
        sandbox=options.sandbox,
        project_trust=options.trust,
        mode=options.mode,
        has_ui=False,
        settings=policy.sandbox if policy is not None else SandboxSettings(),
        audit=audit.record,
        policy_files=tuple(options.policies),
        audit_log=options.audit_log,
    )

    async def on_tool_update(worker: Any, message: NotificationMessage) -> None:
        try:
            update = ToolUpdateParams.model_validate(message.params)
        except pydantic.ValidationError:
            return  # progress is cosmetic; a malformed update is dropped, not fatal
        if pool.running_calls.get(update.tool_call_id or "") is not worker:
            return  # only the worker executing a call may report progress for it
        # Progress is bounded per call: a command printing without end must not
        # stream gigabytes through the JSON event stream (the result is truncated).
        call_id = update.tool_call_id or ""
        sent = update_bytes.get(call_id, 0)
        if sent > MAX_UPDATE_BYTES_PER_CALL:
            return
        size = len(json.dumps(update.update, ensure_ascii=False))
        update_bytes[call_id] = sent + size
        if sent + size > MAX_UPDATE_BYTES_PER_CALL:
            await output(
                {
                    "type": "tool_execution_update",
                    "toolCallId": update.tool_call_id,
                    "partialResult": {
                        "content": [
                            {
                                "type": "text",
                                "text": f"[pi: progress output past {MAX_UPDATE_BYTES_PER_CALL} "
                                "bytes is not streamed; the result has the output's tail]",
                            }
                        ]
                    },
                }
            )
            return
        await output(
            {
                "type": "tool_execution_update",
                "toolCallId": update.tool_call_id,
                "partialResult": update.update,
            }
        )

    update_bytes: dict[str, int] = {}

    from pi_sandbox.sandbox.profile import PROTECTED_IN_WORKSPACE
    from pi_sandbox.sandbox.repository_scan import find_repositories

    # Sandboxed tools cannot create persistence paths (placeholders protect missing
    # ones); unsandboxed tools can, and then the run at least says so, so nobody
    # trusts a planted .pi/ or .git unawares.
    absent_at_start = [
        rel for rel in PROTECTED_IN_WORKSPACE if not os.path.lexists(options.cwd / rel)
    ]
    pool = WorkerPool(config)
    writer: SessionWriter | None = None
    status = 0
    keep_logs = False
    # Repositories under the tool worker's writable roots at start (sandboxed runs):
    # a new one at the end is something a later `git` would execute config from.
    repositories_at_start: dict[str, Any] = {}
    try:
        async with trio.open_nursery() as nursery:
            try:
                # Workers first: a run that cannot start its sandbox leaves no session file.
                await pool.start(nursery, sources, on_tool_update=on_tool_update)
                tool_profile = pool.tool_worker.spec.sandbox if pool.tool_worker else None
                if tool_profile is not None:
                    for root in tool_profile.rw_binds:
                        repositories_at_start[root] = await trio.to_thread.run_sync(
                            find_repositories, root
                        )
                try:
                    writer = (
                        SessionWriter.create(options.agent_dir, options.cwd)
                        if options.session
                        else None
                    )
                except OSError as exc:
                    raise UsageError(
                        f"cannot write the session file under {options.agent_dir / 'sessions'}: "
                        f"{exc} (use --no-session, or set PI_CODING_AGENT_DIR)"
                    ) from exc
                header: dict[str, Any] = {"type": "session", "version": 3, "cwd": str(options.cwd)}
                if writer is not None:
                    audit.session = writer.header.id
                    header.update(
                        id=writer.header.id,
                        timestamp=writer.header.timestamp,
                        path=str(writer.path),
                    )
                if options.mode == "json":
                    await output(header)
                for notice in notices:
                    await output({"type": "notice", "message": notice})
                if (
                    not options.sandbox
                    and pool.tool_worker
                    and pool.tool_worker.spec.sandbox is not None
                ):
                    await output(
                        {
                            "type": "notice",
                            "message": "Tools run in the sandbox too: project extensions loaded with "
                            "--trust sandboxed can steer tool calls",
                        }
                    )
                for source, worker in pool.extensions:
                    where = (
                        "in a sandbox" if worker.spec.sandbox is not None else "without a sandbox"
                    )
                    await output(
                        {
                            "type": "notice",
                            "message": f"Loaded {source.origin} extension {source.path} ({where})",
                        }
                    )
                keep_logs = bool(pool.load_errors)
                await report_extension_errors(output, pool.load_errors, "load")
                pipeline = ToolPipeline(
                    pool=pool,
                    policy=policy,
                    cwd=options.cwd,
                    emit=output,
                    tool_timeout_s=float(config.settings.limits.tool_timeout_s),
                )
                session = AgentSession(
                    provider=provider,
                    pool=pool,
                    pipeline=pipeline,
                    emit=output,
                    cwd=options.cwd,
                    writer=writer,
                )
                await session.start()
                try:
                    final_text = await session.prompt(options.message)
                finally:
                    await session.shutdown()
                if options.mode != "json":
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
            except ProviderError as exc:
                await output({"type": "error", "error": f"provider error: {exc}"})
                print(printable(f"pi: provider error: {exc}"), file=sys.stderr, flush=True)
                status = 1
            except (WorkerError, PolicyError) as exc:
                keep_logs = True
                await output({"type": "error", "error": str(exc)})
                print(printable(f"pi: {exc}"), file=sys.stderr, flush=True)
                status = 1
            finally:
                keep_logs = keep_logs or bool(pool.disabled)
                await pool.aclose(keep_logs=keep_logs)
                for rel in absent_at_start:
                    path = options.cwd / rel
                    if os.path.lexists(path) and not _is_leftover_placeholder(path, pool):
                        await output(
                            {
                                "type": "warning",
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
                                "type": "warning",
                                "message": f"the check of {root} for git repositories created "
                                f"during the run was incomplete: {why}; review new .git "
                                "directories and HEAD files before running git below it",
                            }
                        )
                    for path in sorted(after.found - before.found):
                        await output(
                            {
                                "type": "warning",
                                "message": f"a tool made {path} a git repository during the run; "
                                "git run there would use its config and hooks: review or delete it",
                            }
                        )
                if keep_logs:
                    print(f"pi: worker logs kept in {pool.log_dir}", file=sys.stderr, flush=True)
                nursery.cancel_scope.cancel()
    except* PiSandboxError as group:
        # SandboxUnavailableError and friends raised inside the nursery arrive grouped.
        raise group.exceptions[0] from None
    finally:
        if writer is not None:
            writer.close()
    if getattr(output, "failed", False):
        status = status or 1
    return status
