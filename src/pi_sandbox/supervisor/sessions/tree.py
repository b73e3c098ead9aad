"""The session tree: RPC views (``get_tree``, ``get_entries``, ``get_fork_messages``),
navigation with branch summaries, and branch copies for ``fork``/``clone``
(issue 15 §tree; pi 1.6.0 rpc-commands.md "Session", compaction.md "Branch
Summarization", session-format.md "Tree Structure").

Entries are the writer's records (dicts in pi's shape); nothing here writes to the
session except through `SessionWriter` appends and `write_branch_file`.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pi_sandbox.supervisor.json_lines import dumps_line
from pi_sandbox.supervisor.sessions.session_file import new_session_id

__all__ = [
    "BRANCH_SUMMARY_ASK",
    "branch_path_records",
    "branch_summary_settings",
    "collect_for_branch_summary",
    "entries_since",
    "fork_messages",
    "labels_of",
    "navigate",
    "serialise_branch",
    "target_leaf",
    "tree_json",
    "write_branch_file",
]


def labels_of(entries: list[dict[str, Any]]) -> dict[str, tuple[str, str | None]]:
    """``{target id: (label, label timestamp)}`` from the ``label`` entries in append
    order; a later entry replaces an earlier one, a null/empty label clears it
    (pi's ``labelsById``)."""
    labels: dict[str, tuple[str, str | None]] = {}
    for record in entries:
        if record.get("type") != "label" or not isinstance(record.get("targetId"), str):
            continue
        label = record.get("label")
        if isinstance(label, str) and label.strip():
            labels[record["targetId"]] = (label, record.get("timestamp"))
        else:
            labels.pop(record["targetId"], None)
    return labels


def tree_json(entries: list[dict[str, Any]], leaf_id: str | None) -> str:
    """``{"tree": [node…], "leafId": …}`` as JSON text (pi's ``getTree``): each node
    ``{"entry", "children", "label"?, "labelTimestamp"?}``, roots first (entries
    with a null, self or missing parent), children ordered by timestamp.

    Serialised without recursion: a long linear session nests as deep as it is long,
    deeper than ``json.dumps`` (or a Python client's ``json.loads``) goes; clients
    that cannot read deep JSON use ``get_entries``.
    """
    labels = labels_of(entries)
    children: dict[str, list[dict[str, Any]]] = {}
    by_id = {r["id"]: r for r in entries if isinstance(r.get("id"), str)}
    roots: list[dict[str, Any]] = []
    for record in entries:
        entry_id = record.get("id")
        if not isinstance(entry_id, str):
            continue
        parent = record.get("parentId")
        if parent is None or parent == entry_id or parent not in by_id:
            roots.append(record)
        else:
            children.setdefault(parent, []).append(record)
    for kids in children.values():
        kids.sort(key=lambda r: str(r.get("timestamp") or ""))

    def node_head(record: dict[str, Any]) -> str:
        head = '{"entry": ' + dumps_line(record)
        label = labels.get(record["id"])
        if label is not None:
            head += ', "label": ' + dumps_line(label[0])
            head += ', "labelTimestamp": ' + dumps_line(label[1])
        return head + ', "children": ['

    parts: list[str] = ['{"tree": [']
    # Stack of (siblings, next index); the text of a node is opened when visited
    # and closed when its children are exhausted.
    stack: list[tuple[list[dict[str, Any]], int]] = [(roots, 0)]
    while stack:
        siblings, index = stack.pop()
        if index >= len(siblings):
            parts.append("]")
            if stack:
                parts.append("}")
            continue
        if index:
            parts.append(", ")
        record = siblings[index]
        stack.append((siblings, index + 1))
        parts.append(node_head(record))
        stack.append((children.get(record["id"], []), 0))
    parts.append(', "leafId": ' + dumps_line(leaf_id) + "}")
    return "".join(parts)


def entries_since(entries: list[dict[str, Any]], since: str | None) -> list[dict[str, Any]]:
    """The entries strictly after the one with id ``since`` (all when None), in
    append order (rpc-commands.md ``get_entries``).

    Raises:
        KeyError: no entry has id ``since``.
    """
    if since is None:
        return list(entries)
    for index, record in enumerate(entries):
        if record.get("id") == since:
            return entries[index + 1 :]
    raise KeyError(since)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            b.get("text", "")
            for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        )
    return ""


def fork_messages(entries: list[dict[str, Any]]) -> list[dict[str, str]]:
    """``[{"entryId", "text"}]`` for every user message of the session (pi's
    ``getUserMessagesForForking``: all branches, append order)."""
    out = []
    for record in entries:
        message = record.get("message")
        is_message = record.get("type") == "message" and isinstance(message, dict)
        if is_message and message.get("role") == "user":
            out.append({"entryId": record["id"], "text": _text(message.get("content"))})
    return out


def collect_for_branch_summary(
    by_id: dict[str, dict[str, Any]], old_leaf: str | None, target_id: str
) -> tuple[list[dict[str, Any]], str | None]:
    """The entries from the old leaf back to the deepest common ancestor with the
    target, oldest first, and that ancestor's id (pi's
    ``collectEntriesForBranchSummary``)."""
    if old_leaf is None:
        return [], None

    def path(leaf: str | None) -> list[str]:
        chain, seen = [], set()
        while leaf is not None and leaf in by_id and leaf not in seen:
            seen.add(leaf)
            chain.append(leaf)
            leaf = by_id[leaf].get("parentId")
        return chain

    old_path = set(path(old_leaf))
    common = next((i for i in path(target_id) if i in old_path), None)
    collected = []
    current: str | None = old_leaf
    while current is not None and current != common and current in by_id:
        collected.append(by_id[current])
        current = by_id[current].get("parentId")
    return collected[::-1], common


def target_leaf(record: dict[str, Any]) -> tuple[str | None, str | None]:
    """``(new leaf id, editor text)`` for navigating to ``record`` (pi's
    ``navigateTree``): a user or custom message is re-asked, so the leaf becomes its
    parent and its text is returned for editing; any other entry becomes the leaf."""
    message = record.get("message")
    is_message = record.get("type") == "message" and isinstance(message, dict)
    if is_message and message.get("role") == "user":
        return record.get("parentId"), _text(message.get("content"))
    if record.get("type") == "custom_message":
        return record.get("parentId"), _text(record.get("content"))
    return record["id"], None


def branch_summary_settings(agent_dir: Path, cwd: Path, project_trusted: bool) -> dict[str, Any]:
    """pi's ``branchSummary`` settings (settings.md "Branch summaries"):
    ``{"skipPrompt": bool, "reserveTokens": int}`` from ``<agent_dir>/settings.json``,
    then ``<cwd>/.pi/settings.json`` when the project is trusted (a project's file
    is never read before trust). A malformed file or value is ignored with the
    default (``False``, ``16384``); the problems are returned under ``"problems"``.
    """
    result: dict[str, Any] = {"skipPrompt": False, "reserveTokens": 16384, "problems": []}
    files = [agent_dir / "settings.json"]
    if project_trusted:
        files.append(cwd / ".pi" / "settings.json")
    for path in files:
        try:
            if os.path.getsize(path) > 1024 * 1024:
                result["problems"].append(f"{path}: larger than 1 MiB; ignored")
                continue
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            result["problems"].append(f"{path}: cannot be read: {exc}")
            continue
        section = data.get("branchSummary") if isinstance(data, dict) else None
        if section is None:
            continue
        if not isinstance(section, dict):
            result["problems"].append(f"{path}: branchSummary: expected an object")
            continue
        if "skipPrompt" in section:
            if isinstance(section["skipPrompt"], bool):
                result["skipPrompt"] = section["skipPrompt"]
            else:
                result["problems"].append(f"{path}: branchSummary.skipPrompt: expected a boolean")
        if "reserveTokens" in section:
            value = section["reserveTokens"]
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                result["reserveTokens"] = value
            else:
                result["problems"].append(
                    f"{path}: branchSummary.reserveTokens: expected a positive integer"
                )
    return result


BRANCH_SUMMARY_ASK = (
    "The conversation above is a branch of a coding session that the user is leaving to "
    "continue from an earlier point. Summarise it so the work is not lost, in these "
    "sections: Goal, Constraints & Preferences, Progress, Key Decisions, Next Steps. "
    "Be concise and concrete (files, commands, outcomes)."
)
"""The request for a branch summary (pi's branch-summary format, compaction.md
"Summary Format": no Critical Context section)."""


async def navigate(
    *,
    writer: Any,
    target_id: str,
    summarize: bool,
    custom_instructions: str | None,
    replace_instructions: bool,
    label: str | None,
    dispatch: Callable[[str, dict[str, Any]], Awaitable[Any]],
    report: Callable[[list[dict[str, str]], str], Awaitable[None]],
    notify: Callable[[str, dict[str, Any]], Awaitable[None]],
    summarise: Callable[[str, str], Awaitable[str]],
    max_supplied_chars: int,
) -> dict[str, Any]:
    """Move the session's leaf to ``target_id`` (pi's ``navigateTree``).

    ``session_before_tree`` handlers see the preparation (``target_id``,
    ``old_leaf_id``, ``common_ancestor_id``, ``entries_to_summarize``,
    ``user_wants_summary``, ``custom_instructions``, ``replace_instructions``,
    ``label``) and may cancel (a failing handler cancels too: fail-closed, see
    `pi_sandbox.protocol.hook_kinds`), supply ``{"summary": {"summary": str,
    "details"?}}`` or override the instructions and label. With ``summarize`` and
    something abandoned, the summary (the extension's, else the model's via
    ``summarise(transcript, ask)``, the transcript from `serialise_branch`) is written as a ``branch_summary`` entry whose
    parent is the new leaf; a ``label`` goes on the summary entry, else on the
    target. ``session_tree`` follows.

    Returns:
        ``{"cancelled": False, "editorText"?: str, "summaryEntry"?: dict}`` or
        ``{"cancelled": True}``.

    Raises:
        KeyError: no entry ``target_id``.
        ProviderError: the summary request failed (nothing was written).
    """
    by_id = writer.by_id
    if target_id not in by_id:
        raise KeyError(target_id)
    old_leaf = writer.last_id
    if target_id == old_leaf:
        return {"cancelled": False}
    abandoned, common = collect_for_branch_summary(by_id, old_leaf, target_id)
    outcome = await dispatch(
        "session_before_tree",
        {
            "target_id": target_id,  # kept from before issue 15
            "preparation": {
                "target_id": target_id,
                "old_leaf_id": old_leaf,
                "common_ancestor_id": common,
                "entries_to_summarize": abandoned,
                "user_wants_summary": summarize,
                "custom_instructions": custom_instructions,
                "replace_instructions": replace_instructions,
                "label": label,
            },
        },
    )
    await report(outcome.errors, "session_before_tree")
    result = outcome.state.get("result")
    if isinstance(result, dict) and result.get("cancel") is True:
        return {"cancelled": True}
    supplied: dict[str, Any] | None = None
    from_extension = False
    if isinstance(result, dict):
        if isinstance(result.get("custom_instructions"), str):
            custom_instructions = result["custom_instructions"]
        if isinstance(result.get("replace_instructions"), bool):
            replace_instructions = result["replace_instructions"]
        if isinstance(result.get("label"), str):
            label = result["label"]
        candidate = result.get("summary")
        if summarize and isinstance(candidate, dict) and isinstance(candidate.get("summary"), str):
            supplied, from_extension = candidate, True
    summary_text: str | None = None
    details: Any = None
    if supplied is not None:
        summary_text = supplied["summary"][:max_supplied_chars]
        details = supplied.get("details")
    elif summarize and abandoned:
        transcript = serialise_branch(abandoned)
        ask = BRANCH_SUMMARY_ASK
        if custom_instructions:
            ask = (
                custom_instructions
                if replace_instructions
                else f"{ask}\nAdditional instructions: {custom_instructions}"
            )
        summary_text = await summarise(transcript, ask)
        details = {"readFiles": [], "modifiedFiles": []}
    new_leaf, editor_text = target_leaf(by_id[target_id])
    summary_entry: dict[str, Any] | None = None
    if summary_text:
        summary_entry = _append_branch_summary(
            writer, old_leaf, summary_text, new_leaf, details, from_extension
        )
        if label:
            writer.append_label(summary_entry["id"], label)
    else:
        writer.last_id = new_leaf  # None: the next entry is a new root (pi's resetLeaf)
        if label:
            writer.append_label(target_id, label)
    await notify(
        "session_tree",
        {
            "target_id": target_id,  # kept from before issue 15, with previous_leaf_id
            "previous_leaf_id": old_leaf,
            "new_leaf_id": writer.last_id,
            "old_leaf_id": old_leaf,
            "summary_entry": summary_entry,
            "from_extension": from_extension if summary_entry else None,
        },
    )
    answer: dict[str, Any] = {"cancelled": False}
    if editor_text is not None:
        answer["editorText"] = editor_text
    if summary_entry is not None:
        answer["summaryEntry"] = summary_entry
    return answer


MAX_TRANSCRIPT_CHARS = 400_000
"""The longest branch transcript sent for a summary (characters, about 100k
tokens); older parts of a longer branch are cut (pi budgets by
``branchSummary.reserveTokens``, newest first)."""


def serialise_branch(records: list[dict[str, Any]]) -> str:
    """The abandoned branch as text for the summariser (pi's
    ``serializeConversation``: ``[User]: …``, ``[Assistant]: …``, tool calls and
    results), newest kept when longer than `MAX_TRANSCRIPT_CHARS`."""
    lines: list[str] = []
    for record in records:
        kind = record.get("type")
        message = record.get("message")
        if kind == "message" and isinstance(message, dict):
            role = message.get("role")
            content = message.get("content")
            if role == "user":
                lines.append(f"[User]: {_text(content)}")
            elif role == "assistant":
                text = _text(content)
                if text:
                    lines.append(f"[Assistant]: {text}")
                for block in content if isinstance(content, list) else []:
                    if isinstance(block, dict) and block.get("type") == "toolCall":
                        arguments = json.dumps(block.get("arguments"), ensure_ascii=False)
                        lines.append(f"[Assistant tool call]: {block.get('name')}({arguments})")
            elif role == "toolResult":
                lines.append(f"[Tool result]: {_text(content)[:2000]}")
            elif role == "bashExecution":
                lines.append(f"[User ran]: {message.get('command')}")
        elif kind == "custom_message":
            lines.append(f"[Extension message]: {_text(record.get('content'))}")
        elif kind in ("branch_summary", "compaction") and isinstance(record.get("summary"), str):
            lines.append(f"[Earlier summary]: {record['summary']}")
    text = "\n\n".join(lines)
    return text[-MAX_TRANSCRIPT_CHARS:]


def _append_branch_summary(
    writer: Any,
    from_leaf: str | None,
    summary: str,
    parent_id: str | None,
    details: Any,
    from_extension: bool,
) -> dict[str, Any]:
    """pi's ``branchWithSummary``: a ``branch_summary`` child of ``parent_id``."""
    append = getattr(writer, "append_branch_summary", None)
    if append is not None:  # the session store's own method, where it has one
        record: dict[str, Any] = append(
            from_leaf,
            summary,
            parent_id=parent_id,
            details=details,
            from_extension=from_extension,
        )
        return record
    writer.last_id = parent_id
    return writer._append(
        {
            "type": "branch_summary",
            "fromId": from_leaf or "root",
            "summary": summary,
            "details": details,
            "fromHook": from_extension,
        }
    )


def branch_path_records(
    by_id: dict[str, dict[str, Any]], leaf_id: str | None
) -> list[dict[str, Any]]:
    """The records from the root to ``leaf_id`` for a new session (pi's
    ``createBranchedSession``): ``label`` entries on the path are left out and the
    path re-chained around them, then one label entry per labelled path entry is
    appended with its current label."""
    chain: list[dict[str, Any]] = []
    current, seen = leaf_id, set()
    while current is not None and current in by_id and current not in seen:
        seen.add(current)
        chain.append(by_id[current])
        current = by_id[current].get("parentId")
    chain.reverse()
    out: list[dict[str, Any]] = []
    parent: str | None = None
    for record in chain:
        if record.get("type") == "label":
            continue
        out.append({**record, "parentId": parent})
        parent = record["id"]
    labels = labels_of(list(by_id.values()))
    ids = {r["id"] for r in out}
    for target, (label, stamp) in labels.items():
        if target not in ids:
            continue
        label_id = uuid.uuid4().hex[:8]
        while label_id in ids:
            label_id = uuid.uuid4().hex[:8]
        ids.add(label_id)
        out.append(
            {
                "type": "label",
                "id": label_id,
                "parentId": parent,
                "timestamp": stamp,
                "targetId": target,
                "label": label,
            }
        )
        parent = label_id
    return out


def write_branch_file(
    records: list[dict[str, Any]], directory: Path, cwd: str, parent_session: str | None
) -> Path:
    """A new session file in ``directory``: a header (new UUID, ``cwd``,
    ``parentSession``) and ``records``; written at once and fsync'd.

    Raises:
        OSError: it cannot be written (never overwrites a file).
    """
    stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    session_id = new_session_id()
    header: dict[str, Any] = {
        "type": "session",
        "version": 3,
        "id": session_id,
        "timestamp": stamp,
        "cwd": cwd,
    }
    if parent_session is not None:
        header["parentSession"] = parent_session
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / f"{stamp.replace(':', '-').replace('.', '-')}_{session_id}.jsonl"
    payload = "".join(dumps_line(r) + "\n" for r in [header, *records]).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return path
