"""What compaction summarises and what it keeps (pure functions; pi docs compaction.md).

A session's current branch is a list of entries (``writer.branch()``). Compaction
replaces, for the model, the older entries by a summary and keeps the newest ones
verbatim from ``firstKeptEntryId`` on::

    entries:  U  A  T  U  A  T  T  A  T        (U user, A assistant, T toolResult)
              └──┬──┘  └────────┬────────┘
           summarised     kept (firstKeptEntryId = the second U)

Rules (pi docs compaction.md "Cut Point Rules", "Split user-message spans"):

- **Cut points** are entries carrying a user, assistant, bashExecution, custom,
  branchSummary message; never a tool result, and never an entry between an assistant
  message's tool call and that call's result (so a kept tool result always keeps its
  call: the two are never split).
- Walking back from the newest entry, estimated tokens accumulate until they reach
  ``keepRecentTokens``; the cut is the first cut point at or after that entry (the
  last cut point when none follows it: a huge final tool result keeps only its turn).
  Metadata entries just before the cut are kept with it.
- When the cut is not at the start of a user-message span (a *split turn*), the span's
  prefix is summarised separately (``turn_prefix_messages``).
- **The last user message is never dropped.** When it falls in the summarised part
  (a split of the last span), `CompactionPreparation.carried_user_message` holds it
  and the runner appends its text verbatim to the summary (issue 15; pi summarises it
  as "Original Request" instead).
- A later compaction summarises from the previous one's kept boundary (its
  ``firstKeptEntryId``), with the previous summary as context.

Token counts (pi's ``estimateContextTokens``): the context is the last assistant
message's provider usage (``totalTokens``, else the sum of its counts) plus an
estimate (characters / 4, rounded up; an image counts 4 800 characters) of every
message after it. Usage from before the latest compaction describes a context that no
longer exists and is not used.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from pi_sandbox.supervisor.sessions.compaction_settings import CompactionSettings

__all__ = [
    "TOOL_RESULT_SUMMARY_CHARS",
    "CompactionPreparation",
    "ContextEstimate",
    "CutPoint",
    "FileOperations",
    "calculate_context_tokens",
    "context_projection",
    "entry_messages",
    "estimate_context_tokens",
    "estimate_tokens",
    "extend_context_estimate",
    "find_cut_point",
    "format_file_operations",
    "prepare_compaction",
    "serialize_conversation",
    "should_compact",
    "user_text",
]

_IMAGE_CHARS = 4800  # pi's estimate for one image block
TOOL_RESULT_SUMMARY_CHARS = 2000
"""Characters of each tool result put in a summary request (pi docs compaction.md
"Message Serialization"); the rest is replaced by a marker."""

_CUT_ROLES = frozenset({"user", "assistant", "bashExecution", "custom", "branchSummary"})
_TURN_START_ROLES = frozenset({"user", "bashExecution", "custom", "branchSummary"})


# --- messages of entries ---------------------------------------------------------------


def entry_messages(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages ``entry`` contributes to the model's context, in pi's shapes:
    ``message`` → its message; ``custom_message`` → a ``custom`` message;
    ``branch_summary`` → a ``branchSummary`` message; ``compaction`` → its
    ``compactionSummary``; anything else (labels, model changes, custom state) → []."""
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message")
        return [message] if isinstance(message, dict) else []
    if kind == "custom_message":
        return [
            {
                "role": "custom",
                "customType": entry.get("customType"),
                "content": entry.get("content", ""),
                "display": entry.get("display", True),
                "timestamp": entry.get("timestamp"),
            }
        ]
    if kind == "branch_summary":
        return [
            {
                "role": "branchSummary",
                "summary": str(entry.get("summary", "")),
                "fromId": entry.get("fromId"),
                "timestamp": entry.get("timestamp"),
            }
        ]
    if kind == "compaction":
        return [
            {
                "role": "compactionSummary",
                "summary": str(entry.get("summary", "")),
                "tokensBefore": entry.get("tokensBefore"),
                "timestamp": entry.get("timestamp"),
            }
        ]
    return []


def _content_chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    chars = 0
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            chars += len(block["text"])
        elif block.get("type") == "image":
            chars += _IMAGE_CHARS
    return chars


def estimate_tokens(message: dict[str, Any]) -> int:
    """pi's estimate of one message's tokens: characters / 4, rounded up (pi docs
    compaction.md; conservative, it overestimates). Text, thinking and tool-call
    names with their JSON arguments count; an image counts 4 800 characters; unknown
    roles count 0."""
    role = message.get("role")
    chars = 0
    if role in ("user", "custom", "toolResult"):
        chars = _content_chars(message.get("content"))
    elif role == "assistant":
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                chars += len(str(block.get("text", "")))
            elif kind == "thinking":
                chars += len(str(block.get("thinking", "")))
            elif kind == "toolCall":
                chars += len(str(block.get("name", ""))) + len(
                    json.dumps(block.get("arguments", {}), separators=(",", ":"))
                )
    elif role == "bashExecution":
        chars = len(str(message.get("command", ""))) + len(str(message.get("output", "")))
    elif role in ("branchSummary", "compactionSummary"):
        chars = len(str(message.get("summary", "")))
    return math.ceil(chars / 4)


def calculate_context_tokens(usage: dict[str, Any]) -> int:
    """The context size a provider's usage reports: ``totalTokens``, else the sum of
    ``input``, ``output``, ``cacheRead`` and ``cacheWrite`` (pi ``calculateContextTokens``)."""

    def count(key: str) -> int:
        value = usage.get(key)
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0

    return count("totalTokens") or sum(
        count(k) for k in ("input", "output", "cacheRead", "cacheWrite")
    )


def _usable_usage(message: dict[str, Any]) -> dict[str, Any] | None:
    if message.get("role") != "assistant" or message.get("stopReason") in ("aborted", "error"):
        return None
    usage = message.get("usage")
    if isinstance(usage, dict) and calculate_context_tokens(usage) > 0:
        return usage
    return None


@dataclass(frozen=True)
class ContextEstimate:
    """How big the model's context is, in tokens.

    Attributes:
        tokens: ``usage_tokens + trailing_tokens``.
        usage_tokens: from the last usable provider usage (0 when none).
        trailing_tokens: the estimate of the messages after it (or of all messages).
        last_usage_index: index in the branch of the entry whose usage counted, None
            when everything is an estimate.
    """

    tokens: int
    usage_tokens: int
    trailing_tokens: int
    last_usage_index: int | None


def context_projection(branch: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """The context the model sees for ``branch``, as ``(entry index, message)`` pairs:
    after the latest compaction, its summary, then the messages from its
    ``firstKeptEntryId`` up to it, then those after it (pi docs session-format.md
    "Context Building"; the same selection as ``SessionWriter.messages``). System
    messages among the kept entries are dropped in favour of the checkpoint."""
    last = max((i for i, e in enumerate(branch) if e.get("type") == "compaction"), default=None)
    if last is None:
        return [(i, m) for i, e in enumerate(branch) for m in entry_messages(e)]
    compaction = branch[last]
    kept = next(
        (i for i in range(last) if branch[i].get("id") == compaction.get("firstKeptEntryId")),
        last,
    )
    out = [(last, entry_messages(compaction)[0])]
    out += [
        (i, m)
        for i in range(kept, last)
        for m in entry_messages(branch[i])
        if branch[i].get("type") != "compaction" and m.get("role") != "system"
    ]
    out += [(i, m) for i in range(last + 1, len(branch)) for m in entry_messages(branch[i])]
    return out


def estimate_context_tokens(branch: list[dict[str, Any]]) -> ContextEstimate:
    """The context size of ``branch`` (see the module docstring): the last usable
    usage of an assistant message written after the latest compaction, plus estimates
    of the messages that follow it; all estimates when there is none.

    Walks back from the leaf only as far as that usage, so the check before every
    request costs what the newest messages cost, not the session's length.
    """
    trailing = 0
    compaction = -1
    for index in range(len(branch) - 1, -1, -1):
        entry = branch[index]
        if entry.get("type") == "compaction":
            compaction = index
            break
        for message in reversed(entry_messages(entry)):
            usage = _usable_usage(message)
            if usage is not None:
                used = calculate_context_tokens(usage)
                return ContextEstimate(used + trailing, used, trailing, index)
            trailing += estimate_tokens(message)
    # No usable usage: ``trailing`` covers everything after the latest compaction; add
    # that compaction's summary and the entries it kept.
    if compaction >= 0:
        trailing += sum(estimate_tokens(m) for i, m in context_projection(branch[: compaction + 1]))
    return ContextEstimate(trailing, 0, trailing, None)


def extend_context_estimate(
    previous: ContextEstimate, offset: int, entries: list[dict[str, Any]]
) -> ContextEstimate | None:
    """`estimate_context_tokens` of a branch that grew by ``entries`` since
    ``previous`` was computed for its first ``offset`` entries, looking only at the
    new entries (issue 20 target 3: a model that reports no usage would otherwise
    make every request walk the whole session).

    Returns None when the new entries hold a compaction: the caller computes it
    again from the whole branch. The result equals ``estimate_context_tokens`` of
    the whole branch: the backward walk adds the new entries' estimates until it
    meets a usage, and past them goes on exactly as it did for ``previous``.
    """
    trailing = 0
    for index in range(len(entries) - 1, -1, -1):
        entry = entries[index]
        if entry.get("type") == "compaction":
            return None
        for message in reversed(entry_messages(entry)):
            usage = _usable_usage(message)
            if usage is not None:
                used = calculate_context_tokens(usage)
                return ContextEstimate(used + trailing, used, trailing, offset + index)
            trailing += estimate_tokens(message)
    return ContextEstimate(
        previous.tokens + trailing,
        previous.usage_tokens,
        previous.trailing_tokens + trailing,
        previous.last_usage_index,
    )


def should_compact(tokens: int, context_window: int, settings: CompactionSettings) -> bool:
    """Whether automatic compaction starts: enabled and ``tokens > context_window -
    reserve_tokens`` (pi docs compaction.md "When It Triggers")."""
    return settings.enabled and tokens > context_window - settings.reserve_tokens


# --- cut points ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CutPoint:
    """Where a compaction cuts.

    Attributes:
        first_kept_index: index of the first kept entry.
        turn_start_index: the start of the user-message span the cut splits, -1 when
            the cut is at a span start (or no span start precedes it).
        is_split_turn: the cut lies inside a span.
    """

    first_kept_index: int
    turn_start_index: int
    is_split_turn: bool


def _inside_tool_spans(entries: list[dict[str, Any]], start: int, end: int) -> set[int]:
    """Indices in ``[start, end)`` that lie after an assistant's tool call and at or
    before one of that call's results: cutting there would keep a result without its
    call."""
    calls: dict[str, int] = {}
    inside: set[int] = set()
    for index in range(start, end):
        for message in entry_messages(entries[index]):
            role = message.get("role")
            if role == "assistant":
                for block in message.get("content") or []:
                    if isinstance(block, dict) and block.get("type") == "toolCall":
                        calls[str(block.get("id"))] = index
            elif role == "toolResult":
                origin = calls.get(str(message.get("toolCallId")))
                if origin is not None:
                    inside.update(range(origin + 1, index + 1))
    return inside


def _is_cut_point(entry: dict[str, Any]) -> bool:
    if entry.get("type") == "compaction":
        return False
    return any(m.get("role") in _CUT_ROLES for m in entry_messages(entry))


def _starts_turn(entry: dict[str, Any]) -> bool:
    if entry.get("type") == "compaction":
        return False
    return any(m.get("role") in _TURN_START_ROLES for m in entry_messages(entry))


def find_cut_point(
    entries: list[dict[str, Any]], start: int, end: int, keep_recent_tokens: int
) -> CutPoint:
    """The cut that keeps about ``keep_recent_tokens`` of ``entries[start:end]`` (see
    the module docstring for the rules). With no valid cut point, everything from
    ``start`` is kept."""
    inside = _inside_tool_spans(entries, start, end)
    cut_points = [i for i in range(start, end) if i not in inside and _is_cut_point(entries[i])]
    if not cut_points:
        return CutPoint(start, -1, False)
    cut = cut_points[0]
    accumulated = 0
    for index in range(end - 1, start - 1, -1):
        tokens = sum(estimate_tokens(m) for m in entry_messages(entries[index]))
        if tokens == 0:
            continue
        accumulated += tokens
        if accumulated >= keep_recent_tokens:
            cut = next((c for c in cut_points if c >= index), cut_points[-1])
            break
    # Metadata just before the cut (a model change, a label) stays with what it precedes.
    while cut > start:
        previous = entries[cut - 1]
        if previous.get("type") == "compaction" or entry_messages(previous):
            break
        cut -= 1
    if _starts_turn(entries[cut]):
        return CutPoint(cut, -1, False)
    turn_start = next((i for i in range(cut, start - 1, -1) if _starts_turn(entries[i])), -1)
    return CutPoint(cut, turn_start, turn_start != -1)


# --- preparation ---------------------------------------------------------------------------


@dataclass
class FileOperations:
    """Files the summarised tool calls touched (``read``/``write``/``edit`` with a
    ``path`` argument), accumulated over pi-generated compactions."""

    read: set[str] = field(default_factory=set)
    written: set[str] = field(default_factory=set)
    edited: set[str] = field(default_factory=set)

    def add_from(self, message: dict[str, Any]) -> None:
        """Record the file operations of an assistant message's tool calls."""
        if message.get("role") != "assistant":
            return
        for block in message.get("content") or []:
            if not isinstance(block, dict) or block.get("type") != "toolCall":
                continue
            arguments = block.get("arguments")
            path = arguments.get("path") if isinstance(arguments, dict) else None
            if not isinstance(path, str) or not path:
                continue
            target = {"read": self.read, "write": self.written, "edit": self.edited}.get(
                str(block.get("name"))
            )
            if target is not None:
                target.add(path)

    def lists(self) -> tuple[list[str], list[str]]:
        """``(read_files, modified_files)``: files only read, and files written or
        edited, each sorted (pi ``computeFileLists``)."""
        modified = self.written | self.edited
        return sorted(self.read - modified), sorted(modified)

    def as_event(self) -> dict[str, list[str]]:
        """The operations as extensions see them in ``preparation.file_ops``."""
        return {
            "read": sorted(self.read),
            "written": sorted(self.written),
            "edited": sorted(self.edited),
        }


def format_file_operations(read_files: list[str], modified_files: list[str]) -> str:
    """The ``<read-files>`` / ``<modified-files>`` sections pi appends to a summary
    ("" when both are empty)."""
    sections = []
    if read_files:
        sections.append("<read-files>\n" + "\n".join(read_files) + "\n</read-files>")
    if modified_files:
        sections.append("<modified-files>\n" + "\n".join(modified_files) + "\n</modified-files>")
    return "\n\n" + "\n\n".join(sections) if sections else ""


@dataclass
class CompactionPreparation:
    """What one compaction will do (shown to ``session_before_compact`` handlers).

    Attributes:
        first_kept_entry_id: the first entry kept verbatim (never None: pi docs
            session-format.md "firstKeptEntryId is required").
        first_kept_index: its index in the branch.
        messages_to_summarize: the messages replaced by the summary (before the split
            span, if any).
        turn_prefix_messages: the split span's prefix (empty unless ``is_split_turn``).
        is_split_turn: the cut lies inside a user-message span.
        tokens_before: the context size before compaction (`estimate_context_tokens`).
        previous_summary: the previous compaction's summary, for an iterative update.
        file_ops: files touched by the summarised tool calls (and earlier compactions).
        settings: the settings this compaction uses.
        carried_user_message: the last user message, when it is summarised: its text
            is carried verbatim into the summary (never dropped; issue 15).
    """

    first_kept_entry_id: str
    first_kept_index: int
    messages_to_summarize: list[dict[str, Any]]
    turn_prefix_messages: list[dict[str, Any]]
    is_split_turn: bool
    tokens_before: int
    previous_summary: str | None
    file_ops: FileOperations
    settings: CompactionSettings
    carried_user_message: dict[str, Any] | None = None

    def as_event(self) -> dict[str, Any]:
        """The ``preparation`` of a ``session_before_compact`` event (snake_case)."""
        return {
            "first_kept_entry_id": self.first_kept_entry_id,
            "messages_to_summarize": self.messages_to_summarize,
            "turn_prefix_messages": self.turn_prefix_messages,
            "is_split_turn": self.is_split_turn,
            "tokens_before": self.tokens_before,
            "previous_summary": self.previous_summary,
            "file_ops": self.file_ops.as_event(),
            "settings": self.settings.as_event(),
        }


def prepare_compaction(
    branch: list[dict[str, Any]], settings: CompactionSettings
) -> CompactionPreparation | None:
    """Decide what compacting ``branch`` (root to leaf) summarises and keeps.

    Returns:
        The preparation, or None when there is nothing to summarise (the branch ends
        with a compaction, or everything fits in ``keep_recent_tokens``).
    """
    if not branch or branch[-1].get("type") == "compaction":
        return None
    previous = max((i for i, e in enumerate(branch) if e.get("type") == "compaction"), default=-1)
    previous_summary: str | None = None
    start = 0
    if previous >= 0:
        previous_entry = branch[previous]
        previous_summary = str(previous_entry.get("summary", ""))
        start = next(
            (
                i
                for i, e in enumerate(branch)
                if e.get("id") == previous_entry.get("firstKeptEntryId")
            ),
            previous + 1,
        )
    end = len(branch)
    cut = find_cut_point(branch, start, end, settings.keep_recent_tokens)
    if cut.first_kept_index >= end:
        return None
    first_kept = branch[cut.first_kept_index]
    first_kept_id = first_kept.get("id")
    if not isinstance(first_kept_id, str):
        return None
    history_end = cut.turn_start_index if cut.is_split_turn else cut.first_kept_index

    def summarised(lo: int, hi: int) -> list[dict[str, Any]]:
        return [
            m
            for i in range(lo, hi)
            if branch[i].get("type") != "compaction"
            for m in entry_messages(branch[i])
            if m.get("role") != "system"
        ]

    to_summarize = summarised(start, history_end)
    prefix = summarised(cut.turn_start_index, cut.first_kept_index) if cut.is_split_turn else []
    if not to_summarize and not prefix:
        return None
    file_ops = FileOperations()
    if previous >= 0 and not branch[previous].get("fromHook"):
        details = branch[previous].get("details")
        if isinstance(details, dict):
            file_ops.read.update(f for f in details.get("readFiles") or [] if isinstance(f, str))
            file_ops.edited.update(
                f for f in details.get("modifiedFiles") or [] if isinstance(f, str)
            )
    for message in [*to_summarize, *prefix]:
        file_ops.add_from(message)
    last_user = next(
        (
            i
            for i in range(end - 1, -1, -1)
            if any(m.get("role") == "user" for m in entry_messages(branch[i]))
            and branch[i].get("type") == "message"
        ),
        None,
    )
    carried = None
    if last_user is not None and start <= last_user < cut.first_kept_index:
        carried = entry_messages(branch[last_user])[0]
    return CompactionPreparation(
        first_kept_entry_id=first_kept_id,
        first_kept_index=cut.first_kept_index,
        messages_to_summarize=to_summarize,
        turn_prefix_messages=prefix,
        is_split_turn=cut.is_split_turn,
        tokens_before=estimate_context_tokens(branch).tokens,
        previous_summary=previous_summary,
        file_ops=file_ops,
        settings=settings,
        carried_user_message=carried,
    )


# --- serialisation for the summary request ---------------------------------------------------


def user_text(content: Any) -> str:
    """The text of a user-like ``content`` (a string, or the text blocks joined)."""
    if isinstance(content, str):
        return content
    return "".join(
        str(b.get("text", ""))
        for b in content or []
        if isinstance(b, dict) and b.get("type") == "text"
    )


def _truncated(text: str, limit: int = TOOL_RESULT_SUMMARY_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n\n[... {len(text) - limit} more characters truncated]"


def serialize_conversation(messages: list[dict[str, Any]]) -> str:
    """``messages`` as plain text for a summary request, so the model summarises
    instead of continuing them (pi docs compaction.md "Message Serialization")::

        [User]: what they said
        [Assistant]: the answer
        [Assistant tool calls]: read(path="foo.ts"); bash(command="ls")
        [Tool result]: output (at most 2 000 characters)

    Thinking is left out. Extension, bash and summary messages count as user text.
    """
    parts: list[str] = []
    for message in messages:
        role = message.get("role")
        if role in ("user", "custom"):
            text = user_text(message.get("content"))
            if text:
                parts.append(f"[User]: {text}")
        elif role == "bashExecution":
            parts.append(
                f"[User]: Ran `{message.get('command', '')}`\n"
                f"{_truncated(str(message.get('output', '')))}"
            )
        elif role in ("compactionSummary", "branchSummary"):
            parts.append(f"[User]: Summary of earlier work:\n{message.get('summary', '')}")
        elif role == "assistant":
            texts: list[str] = []
            calls: list[str] = []
            for block in message.get("content") or []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and block.get("text"):
                    texts.append(str(block["text"]))
                elif block.get("type") == "toolCall":
                    arguments = block.get("arguments")
                    shown = ", ".join(
                        f"{k}={json.dumps(v, ensure_ascii=False)}"
                        for k, v in (arguments.items() if isinstance(arguments, dict) else [])
                    )
                    calls.append(f"{block.get('name')}({shown})")
            if texts:
                parts.append("[Assistant]: " + "\n".join(texts))
            if calls:
                parts.append("[Assistant tool calls]: " + "; ".join(calls))
        elif role == "toolResult":
            text = user_text(message.get("content"))
            if text:
                parts.append(f"[Tool result]: {_truncated(text)}")
    return "\n\n".join(parts)
