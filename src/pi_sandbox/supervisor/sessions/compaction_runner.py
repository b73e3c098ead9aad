"""Running a compaction: hooks, the summary request, the entry, the events (issue 15).

`Compactor` is what the agent loop and the session host call:

- ``compact(session, reason="manual", instructions=…)``: ``/compact``, RPC ``compact``,
  ``ctx.compact()``;
- ``before_request(session)``: before every model request, compact when the context
  passes ``context window - reserveTokens`` (reason ``threshold``);
- ``recover_overflow(session, error)``: after a provider's context-overflow error,
  compact (reason ``overflow``) so the caller retries the request once.

One compaction (pi docs compaction.md, extensions.md, json.md "Compaction events"):

1. `prepare_compaction` picks the cut; nothing to summarise → no events.
2. ``compaction_start {reason}`` is emitted.
3. ``session_before_compact`` (transaction, fails closed: a failed handler cancels):
   ``{"cancel": true}`` cancels; ``{"compaction": {"summary", "details"?, "usage"?}}``
   supplies the summary. The cut is always the preparation's (an extension cannot
   move ``firstKeptEntryId`` and break the invariants).
4. Otherwise the model writes it: one request without tools (two for a split turn),
   the conversation serialised as text. Read/modified files are appended.
5. The last user message, when it is summarised, is appended to the summary verbatim.
6. A ``compaction`` entry (``summary``, ``firstKeptEntryId``, ``tokensBefore``,
   ``details``, ``usage``, ``fromHook``) is appended; ``compaction_end {reason, result,
   aborted: false, willRetry}`` is emitted and ``session_compact`` dispatched.

A cancelled or failed compaction emits ``compaction_end`` without ``result``
(``aborted: true`` when cancelled or aborted, else ``errorMessage``) and dispatches
``session_compact_failed``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from pi_sandbox.errors import ProviderError
from pi_sandbox.supervisor.providers.base import normalise_usage
from pi_sandbox.supervisor.providers.overflow import is_context_overflow
from pi_sandbox.supervisor.sessions.compaction import (
    CompactionPreparation,
    ContextEstimate,
    estimate_context_tokens,
    extend_context_estimate,
    format_file_operations,
    prepare_compaction,
    serialize_conversation,
    should_compact,
    user_text,
)
from pi_sandbox.supervisor.sessions.compaction_settings import (
    CompactionConfig,
    CompactionSettings,
)
from pi_sandbox.supervisor.sessions.session_file import SessionWriter, now_ms

if TYPE_CHECKING:
    from pi_sandbox.supervisor.agent.agent_session import AgentSession

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "MAX_SUPPLIED_SUMMARY_CHARS",
    "CompactionCancelledError",
    "Compactor",
]

DEFAULT_CONTEXT_WINDOW = 128_000
"""Tokens assumed for a model whose context window is unknown (pi's default for a
custom model without ``contextWindow``)."""

MAX_SUPPLIED_SUMMARY_CHARS = 200_000
"""Longest summary an extension may supply; a longer one is cut."""

MAX_SUPPLIED_DETAILS_BYTES = 1024 * 1024
"""Largest ``details`` (JSON bytes) an extension may supply; a larger one is dropped."""

SUMMARY_SYSTEM_PROMPT = (
    "You summarise conversations between a user and an AI coding assistant so that "
    "another assistant can continue the work. Do not continue the conversation and do "
    "not answer questions in it: write only the summary, in the requested format."
)

_FORMAT = """Use exactly this format:

## Goal
[What the user wants to accomplish]

## Constraints & Preferences
- [Requirements and preferences the user stated, or "(none)"]

## Progress
### Done
- [x] [Completed work]

### In Progress
- [ ] [Current work]

### Blocked
- [Problems, if any]

## Key Decisions
- **[Decision]**: [Why]

## Next Steps
1. [What should happen next]

## Critical Context
- [Data, file paths, names and error messages needed to continue, or "(none)"]

Be concise. Keep file paths, function names and error messages exact."""

_SUMMARY_ASK = (
    "The text in <conversation> tags is a conversation to summarise as a checkpoint "
    "that another model will use to continue the work.\n\n" + _FORMAT
)

_UPDATE_ASK = (
    "The text in <conversation> tags holds NEW messages of a conversation whose earlier "
    "part is summarised in <previous-summary> tags. Update that summary with them: keep "
    "everything still relevant, add new progress, decisions and context, move finished "
    "items to Done and revise the next steps.\n\n" + _FORMAT
)

_PREFIX_ASK = """The text in <conversation> tags is the beginning of one long turn that \
did not fit; its end is kept verbatim. Summarise the beginning so the kept end makes sense:

## Original Request
[What the user asked for in this turn]

## Early Progress
- [Decisions and work done so far]

## Context for Suffix
- [What is needed to understand the kept recent work]

Be concise."""


class CompactionCancelledError(Exception):
    """A ``session_before_compact`` handler cancelled the compaction (or failed, which
    cancels it: the event fails closed). ``reason`` is the handler's reason, if any."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason or "cancelled by a session_before_compact handler")
        self.reason = reason


@dataclass
class Compactor:
    """Compaction for one run: its settings and what it is doing.

    Attributes:
        config: the ``compaction`` settings (resolved per model).
        context_window: ``--context-window`` override (tokens); None: the provider's
            ``context_window`` attribute when it has one, else `DEFAULT_CONTEXT_WINDOW`.
        auto: RPC ``set_auto_compaction`` (None: the settings' ``enabled``). Not
            written to any settings file.
        compacting: a compaction is in progress (RPC ``get_state`` ``isCompacting``).
        loader: reads the settings again (``/reload``); None: they never change.
    """

    config: CompactionConfig = field(default_factory=CompactionConfig)
    context_window: int | None = None
    auto: bool | None = None
    compacting: bool = False
    loader: Callable[[], CompactionConfig] | None = None
    # issue 20 target 3: the last estimate, for `estimate`.
    _estimated: tuple[Any, tuple[int, int], ContextEstimate] | None = field(
        default=None, repr=False
    )

    def estimate(self, writer: SessionWriter) -> ContextEstimate:
        """``estimate_context_tokens(writer.branch())``, looking only at the entries
        appended since the last call when the branch only grew (issue 20 target 3)."""
        known = self._estimated
        mark = known[1] if known is not None and known[0] is writer else None
        new_mark, entries, whole = writer.branch_tail(mark)
        result = None
        if not whole and known is not None:
            result = extend_context_estimate(known[2], known[1][1], entries)
        if result is None:
            result = estimate_context_tokens(entries if whole else writer.branch())
        self._estimated = (writer, new_mark, result)
        return result

    def reload(self) -> tuple[str, ...]:
        """Read the settings again (``/reload``, a trust change); returns the notices
        of files that could not be read.

        Raises:
            CompactionSettingsError: a malformed value; the previous settings stay.
        """
        if self.loader is None:
            return ()
        self.config = self.loader()
        return self.config.notices

    # --- settings ------------------------------------------------------------------------

    def settings_for(self, session: AgentSession) -> CompactionSettings:
        """The settings for the session's current model."""
        provider = session.provider
        return self.config.for_model(provider.name, provider.model)

    def auto_enabled(self, session: AgentSession) -> bool:
        """Whether threshold and overflow compaction run (``compaction.enabled``, or
        RPC ``set_auto_compaction``)."""
        return self.auto if self.auto is not None else self.settings_for(session).enabled

    def window_for(self, session: AgentSession) -> int:
        """The model's context window in tokens (see ``context_window``)."""
        if self.context_window is not None:
            return self.context_window
        known = getattr(session.provider, "context_window", None)
        if isinstance(known, int) and not isinstance(known, bool) and known > 0:
            return known
        return DEFAULT_CONTEXT_WINDOW

    # --- automatic -----------------------------------------------------------------------

    async def before_request(self, session: AgentSession) -> None:
        """Compact (reason ``threshold``) when the context passes the threshold.

        A failed threshold compaction is reported (``compaction_end`` with
        ``errorMessage`` and a warning) and the request goes on; a cancelled one too.
        Cancellation (abort) propagates.
        """
        if not self.auto_enabled(session):
            return
        settings = self.settings_for(session)
        tokens = self.estimate(session.writer).tokens
        if not should_compact(tokens, self.window_for(session), _enabled(settings)):
            return
        try:
            await self.compact(session, reason="threshold")
        except CompactionCancelledError:
            pass
        except ProviderError as exc:
            await session.emit(
                {
                    "type": "pisandbox_warning",
                    "message": f"automatic compaction failed, the request goes on: {exc}",
                }
            )

    async def recover_overflow(self, session: AgentSession, error: ProviderError) -> bool:
        """After a provider error: when it is a context overflow (`is_context_overflow`)
        and automatic compaction is on, compact (reason ``overflow``, ``willRetry``).

        Returns:
            True when the context was compacted and the caller should retry the
            request (once); False when ``error`` is no overflow or compaction is off.

        Raises:
            ProviderError: the overflow could not be recovered from: nothing to
                summarise, cancelled by a hook, or the summary request failed. The
                message starts with the provider's and says why no retry follows.
        """
        if not is_context_overflow(error) or not self.auto_enabled(session):
            return False
        try:
            result = await self.compact(session, reason="overflow", will_retry=True)
        except CompactionCancelledError as exc:
            raise ProviderError(
                f"{error} (context overflow: compaction was cancelled ({exc}); not retried)"
            ) from error
        except ProviderError as exc:
            raise ProviderError(
                f"{error} (context overflow: compaction failed: {exc}; not retried)"
            ) from error
        if result is None:
            raise ProviderError(
                f"{error} (context overflow: nothing left to compact; not retried)"
            ) from error
        return True

    # --- one compaction ------------------------------------------------------------------

    async def compact(
        self,
        session: AgentSession,
        *,
        reason: str,
        instructions: str | None = None,
        will_retry: bool = False,
    ) -> dict[str, Any] | None:
        """Compact the session's current branch (see the module docstring).

        Args:
            reason: ``"manual"``, ``"threshold"`` or ``"overflow"``.
            instructions: what the summary should focus on (``/compact <text>``).
            will_retry: the request that overflowed is retried afterwards.

        Returns:
            pi's compaction result ``{"summary", "firstKeptEntryId", "tokensBefore",
            "estimatedTokensAfter", "usage"?, "details"?}``, or None when there is
            nothing to summarise.

        Raises:
            CompactionCancelledError: a ``session_before_compact`` handler cancelled it
                or failed.
            ProviderError: the summary request failed.
            trio.Cancelled: aborted; nothing was written.
        """
        writer = session.writer
        settings = self.settings_for(session)
        preparation = prepare_compaction(writer.branch(), settings)
        if preparation is None:
            return None
        self.compacting = True
        from_extension = False
        try:
            await session.emit({"type": "compaction_start", "reason": reason})
            supplied = await self._ask_extensions(
                session, preparation, instructions, reason, will_retry
            )
            if supplied is not None:
                summary, details, usage = supplied
                from_extension = True
            else:
                summary, usage = await self._generate(session, preparation, instructions)
                read_files, modified_files = preparation.file_ops.lists()
                summary += format_file_operations(read_files, modified_files)
                details = {"readFiles": read_files, "modifiedFiles": modified_files}
            summary += _carried(preparation)
            entry = writer.append_compaction(
                summary,
                preparation.first_kept_entry_id,
                preparation.tokens_before,
                from_extension=from_extension,
                details=details,
                **({"usage": usage} if usage is not None else {}),
            )
        except CompactionCancelledError as exc:
            await self._failed(session, reason, will_retry, aborted=True, message=str(exc))
            raise
        except ProviderError as exc:
            await self._failed(
                session,
                reason,
                will_retry,
                aborted=False,
                message=str(exc),
                from_extension=from_extension,
            )
            raise
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                await self._failed(session, reason, will_retry, aborted=True, message=None)
            raise
        finally:
            self.compacting = False
        result: dict[str, Any] = {
            "summary": summary,
            "firstKeptEntryId": preparation.first_kept_entry_id,
            "tokensBefore": preparation.tokens_before,
            "estimatedTokensAfter": estimate_context_tokens(writer.branch()).tokens,
        }
        if usage is not None:
            result["usage"] = usage
        if details is not None:
            result["details"] = details
        await session.emit(
            {
                "type": "compaction_end",
                "reason": reason,
                "result": result,
                "aborted": False,
                "willRetry": will_retry,
            }
        )
        await session.notify(
            "session_compact",
            {
                "compaction_entry": entry,
                "from_extension": from_extension,
                "reason": reason,
                "will_retry": will_retry,
            },
        )
        return result

    async def _failed(
        self,
        session: AgentSession,
        reason: str,
        will_retry: bool,
        *,
        aborted: bool,
        message: str | None,
        from_extension: bool = False,
    ) -> None:
        event: dict[str, Any] = {
            "type": "compaction_end",
            "reason": reason,
            "aborted": aborted,
            "willRetry": False,
        }
        if not aborted and message:
            event["errorMessage"] = message
        await session.emit(event)
        payload: dict[str, Any] = {
            "reason": reason,
            "aborted": aborted,
            "will_retry": will_retry,
            "from_extension": from_extension,
        }
        if not aborted and message:
            payload["error_message"] = message
        await session.notify("session_compact_failed", payload, abortable=False)

    async def _ask_extensions(
        self,
        session: AgentSession,
        preparation: CompactionPreparation,
        instructions: str | None,
        reason: str,
        will_retry: bool,
    ) -> tuple[str, Any, dict[str, Any] | None] | None:
        """``session_before_compact``: None (the model summarises), or the extension's
        ``(summary, details, usage)``.

        Raises:
            CompactionCancelledError: cancelled, or a handler failed (fails closed).
        """
        from pi_sandbox.supervisor.agent.tool_pipeline import report_extension_errors

        event = "session_before_compact"
        if not session.pool.subscribed(event):
            return None
        payload = {
            "preparation": preparation.as_event(),
            "custom_instructions": instructions,
            "instructions": instructions,
            "reason": reason,
            "will_retry": will_retry,
        }
        if session.running:
            outcome = None
            async with session.abortable():
                outcome = await session.pool.dispatch(event, payload)
            if outcome is None:  # the run was aborted while the handlers ran
                raise CompactionCancelledError("aborted")
        else:
            outcome = await session.pool.dispatch(event, payload)
        await report_extension_errors(session.emit, outcome.errors, event)
        result = outcome.state.get("result")
        if outcome.failure is not None:
            raise CompactionCancelledError(
                f"a session_before_compact handler failed: {outcome.failure}"
            )
        if isinstance(result, dict) and result.get("cancel") is True:
            raise CompactionCancelledError(
                str(result["reason"]) if isinstance(result.get("reason"), str) else None
            )
        supplied = result.get("compaction") if isinstance(result, dict) else None
        if not (isinstance(supplied, dict) and isinstance(supplied.get("summary"), str)):
            if result is not None:
                await report_extension_errors(
                    session.emit,
                    [
                        {
                            "message": "session_before_compact: a result must be {'cancel': "
                            "true} or {'compaction': {'summary': str}}; ignored, the model "
                            "summarises"
                        }
                    ],
                    event,
                )
            return None
        details = supplied.get("details")
        if details is not None:
            try:
                size = len(json.dumps(details, allow_nan=False))
            except (TypeError, ValueError):
                size = MAX_SUPPLIED_DETAILS_BYTES + 1
            if size > MAX_SUPPLIED_DETAILS_BYTES:
                details = None
        usage = supplied.get("usage")
        return (
            supplied["summary"][:MAX_SUPPLIED_SUMMARY_CHARS],
            details,
            normalise_usage(usage) if isinstance(usage, dict) else None,
        )

    async def _generate(
        self, session: AgentSession, preparation: CompactionPreparation, instructions: str | None
    ) -> tuple[str, dict[str, Any] | None]:
        """The model's summary and the usage of the request(s) that wrote it."""
        usages: list[dict[str, Any]] = []
        history = "No prior history."
        if preparation.messages_to_summarize or not preparation.is_split_turn:
            ask = _UPDATE_ASK if preparation.previous_summary else _SUMMARY_ASK
            history = await self._request(
                session,
                serialize_conversation(preparation.messages_to_summarize),
                ask,
                instructions,
                preparation.previous_summary,
                usages,
            )
        if not preparation.is_split_turn:
            summary = history
        else:
            prefix = await self._request(
                session,
                serialize_conversation(preparation.turn_prefix_messages),
                _PREFIX_ASK,
                None,
                None,
                usages,
            )
            summary = f"{history}\n\n---\n\n**Turn Context (split turn):**\n\n{prefix}"
        return summary, _sum_usage(usages) if usages else None

    async def _request(
        self,
        session: AgentSession,
        conversation: str,
        ask: str,
        instructions: str | None,
        previous_summary: str | None,
        usages: list[dict[str, Any]],
    ) -> str:
        text = f"<conversation>\n{conversation}\n</conversation>\n\n"
        if previous_summary:
            text += f"<previous-summary>\n{previous_summary}\n</previous-summary>\n\n"
        text += ask
        if instructions:
            text += f"\n\nAdditional focus: {instructions}"
        messages = [
            {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": now_ms()}
        ]
        if session.running:
            turn = None
            async with session.abortable():
                turn = await session.provider.complete(
                    system_prompt=SUMMARY_SYSTEM_PROMPT, messages=messages, tools=[]
                )
            if turn is None:  # the run was aborted during the summary request
                raise CompactionCancelledError("aborted")
        else:
            turn = await session.provider.complete(
                system_prompt=SUMMARY_SYSTEM_PROMPT, messages=messages, tools=[]
            )
        if turn.stop_reason == "error":
            raise ProviderError(f"the summary request failed: {turn.error_message or 'error'}")
        if turn.usage:
            usages.append(normalise_usage(turn.usage))
        return turn.text.strip() or "(the model returned an empty summary)"


def _enabled(settings: CompactionSettings) -> CompactionSettings:
    # The RPC toggle already decided; should_compact must not veto it again.
    from dataclasses import replace

    return replace(settings, enabled=True)


def _carried(preparation: CompactionPreparation) -> str:
    """The last user message, verbatim, when the compaction summarises it."""
    message = preparation.carried_user_message
    if message is None:
        return ""
    return (
        "\n\n<last-user-message>\n" + user_text(message.get("content")) + "\n</last-user-message>"
    )


def _sum_usage(usages: list[dict[str, Any]]) -> dict[str, Any]:
    total = normalise_usage({})
    for usage in usages:
        for key in ("input", "output", "cacheRead", "cacheWrite", "totalTokens"):
            total[key] += usage.get(key, 0)
        for key, value in usage.get("cost", {}).items():
            total["cost"][key] = total["cost"].get(key, 0.0) + value
    return total
