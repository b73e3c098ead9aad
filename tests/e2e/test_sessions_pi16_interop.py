"""Session files shared with pi 1.6.0 itself (issue 15 "Fidelity, both directions").

Real processes: pi 1.6.0 (the shared `pi16` fixture, tests/e2e/pi16.py: skipped with
the reason when Node/npm cannot install it) and ours. The session files are generated
at test time: pi's with its faux provider (../shared/anchors/pi-faux-provider-1x.ts),
ours with the loopback OpenAI server. Each continuation is pointed at a loopback
OpenAI-compatible server (`fake_openai`; pi through a ``models.json`` custom provider)
that captures the request, so the test compares what each model was shown.

- a session pi 1.6.0 wrote, continued by us: our request holds exactly the file's
  history (built here from the raw JSON lines, independently of our reader) and is
  the one pi sends continuing the same file; pi then continues our continuation and
  sees our turn too;
- a session we wrote, continued by pi 1.6.0: both programs send the same history;
- a session pi 1.6.0 compacted (RPC ``compact``, with its ``systemMessage``
  checkpoint) holding an extension's ``custom_message`` entries: both programs send
  pi's compacted context;
- a session we wrote with every entry that shapes the context (tool calls with and
  without results, a failed turn, custom messages, a bashExecution, a compaction, a
  context edit, a branch summary): both programs send the same request.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from fake_openai import FakeOpenAI, text, tool_calls

if TYPE_CHECKING:
    from pi16 import Pi16

pytest_plugins = ["pi16"]  # the shared `pi16` fixture (tests/e2e/pi16.py)
pytestmark = pytest.mark.e2e

TIMEOUT_S = 120
FAUX_SCRIPT = [
    {"text": "listing", "tool_calls": [{"name": "bash", "arguments": {"command": "echo hi"}}]},
    {"text": "all done"},
]


def agent_env(root: Path) -> dict[str, str]:
    env = {**os.environ, "HOME": str(root / "home"), "PI_CODING_AGENT_DIR": str(root / "agent")}
    env.pop("OPENAI_API_KEY", None)
    return env


def run(argv: list[str], root: Path, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv,
        env={**agent_env(root), **extra},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def pi16_argv(pi16: Pi16, *args: str) -> list[str]:
    return [str(pi16.node), str(pi16.cli), "--offline", *args]


def ours_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "pi_sandbox.cli", *args]


def point_pi_at(root: Path, server: FakeOpenAI) -> None:
    """A ``models.json`` custom provider ``fake`` (model ``x``) speaking OpenAI Chat
    Completions to the loopback server (pi docs models-configuration.md)."""
    agent = root / "agent"
    agent.mkdir(parents=True, exist_ok=True)
    (agent / "models.json").write_text(
        json.dumps(
            {
                "providers": {
                    "fake": {
                        "baseUrl": server.url,
                        "api": "openai-completions",
                        "apiKey": "unused",
                        "models": [{"id": "x", "contextWindow": 100000, "maxTokens": 1000}],
                    }
                }
            }
        )
    )


def the_file(root: Path) -> Path:
    (found,) = (root / "agent" / "sessions").rglob("*.jsonl")
    return found


def history(request_messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """A request's conversation, wire details normalised: the system message left out
    (each program sends its own prompt), content strings and text-block lists alike,
    tool-call arguments decoded."""
    out: list[tuple[Any, ...]] = []
    for message in request_messages:
        role = message["role"]
        if role == "system":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(b.get("text", "") for b in content if b.get("type") == "text")
        calls = tuple(
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"] or "{}"))
            for c in message.get("tool_calls") or []
        )
        out.append((role, content or "", calls, message.get("tool_call_id")))
    return out


def file_history(path: Path) -> list[tuple[Any, ...]]:
    """The conversation in a linear session file, read from its raw JSON lines (not
    with our reader): what any program continuing it must send."""
    out: list[tuple[Any, ...]] = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        message = record.get("message") if record.get("type") == "message" else None
        if message is None or message["role"] == "system":
            continue
        blocks = message["content"]
        texts = (
            blocks
            if isinstance(blocks, str)
            else "".join(b["text"] for b in blocks if b["type"] == "text")
        )
        if message["role"] == "toolResult":
            out.append(("tool", texts, (), message["toolCallId"]))
            continue
        calls = (
            tuple((b["id"], b["name"], b["arguments"]) for b in blocks if b["type"] == "toolCall")
            if isinstance(blocks, list)
            else ()
        )
        out.append((message["role"], texts, calls, None))
    return out


def pi16_session(pi16: Pi16, root: Path, proj: Path) -> Path:
    """A session file written by pi 1.6.0 with its faux provider: a prompt, a bash tool
    call and its result, a final answer."""
    from pi16 import FAUX_SCRIPTED  # lazily: pytest_plugins imports the module first

    (root / "faux.ts").write_text(FAUX_SCRIPTED)
    (root / "script.json").write_text(json.dumps(FAUX_SCRIPT))
    run(
        pi16_argv(
            pi16,
            "-e",
            str(root / "faux.ts"),
            "--provider",
            "faux",
            "--model",
            "faux-1",
            "-p",
            "run echo",
        ),
        root,
        proj,
        PI_FAUX_SCRIPT=str(root / "script.json"),
    )
    return the_file(root)


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (tmp_path / "home").mkdir()
    return root


def continue_with_ours(root: Path, proj: Path, session: Path, prompt: str) -> list[tuple[Any, ...]]:
    with FakeOpenAI([text(f"ours answered {prompt}")]) as server:
        run(
            ours_argv(
                "--session",
                str(session),
                "--model",
                "openai/x",
                "--base-url",
                server.url,
                "-p",
                prompt,
            ),
            root,
            proj,
        )
        (request,) = server.requests
    return history(request.body["messages"])


def continue_with_pi16(
    pi16: Pi16, root: Path, proj: Path, session: Path, prompt: str
) -> list[tuple[Any, ...]]:
    with FakeOpenAI([text(f"pi answered {prompt}")]) as server:
        point_pi_at(root, server)
        run(
            pi16_argv(
                pi16, "--session", str(session), "--provider", "fake", "--model", "x", "-p", prompt
            ),
            root,
            proj,
        )
        (request,) = server.requests
    return history(request.body["messages"])


def test_a_session_pi_1_6_wrote_is_continued_by_us_with_exactly_its_history(pi16, tmp_path, proj):
    original = pi16_session(pi16, tmp_path, proj)
    records = [json.loads(line) for line in original.read_text().splitlines()]
    # What pi 1.6.0 wrote: a UUIDv7 session, its settings, a system message, the turns.
    assert [r["type"] for r in records[:3]] == ["session", "model_change", "thinking_level_change"]
    assert any(r.get("message", {}).get("role") == "system" for r in records)
    expected = file_history(original)
    assert [h[0] for h in expected] == ["user", "assistant", "tool", "assistant"]

    ours_copy, pis_copy = tmp_path / "ours.jsonl", tmp_path / "pis.jsonl"
    shutil.copy(original, ours_copy)
    shutil.copy(original, pis_copy)
    seen_by_ours = continue_with_ours(tmp_path, proj, ours_copy, "next")
    seen_by_pi = continue_with_pi16(pi16, tmp_path, proj, pis_copy, "next")
    assert seen_by_ours == [*expected, ("user", "next", (), None)]
    assert seen_by_ours == seen_by_pi

    # pi 1.6.0 continues our continuation: it sees its history, then our turn.
    seen_after = continue_with_pi16(pi16, tmp_path, proj, ours_copy, "again")
    assert seen_after == [
        *expected,
        ("user", "next", (), None),
        ("assistant", "ours answered next", (), None),
        ("user", "again", (), None),
    ]
    assert seen_after == file_history(ours_copy)[:-1]  # the file then holds pi's answer


def test_a_session_we_wrote_is_continued_by_pi_1_6_with_the_same_history_we_send(
    pi16, tmp_path, proj
):
    with FakeOpenAI(
        [tool_calls(("call_1", "bash", {"command": "echo hi"}), text="listing"), text("all done")]
    ) as server:
        run(
            ours_argv("--model", "openai/x", "--base-url", server.url, "-p", "run echo"),
            tmp_path,
            proj,
        )
    original = the_file(tmp_path)
    records = [json.loads(line) for line in original.read_text().splitlines()]
    assistant = next(
        r["message"] for r in records if r.get("message", {}).get("role") == "assistant"
    )
    assert assistant["api"] == "openai-completions" and "cost" in assistant["usage"]
    assert "thinkingLevel" in assistant
    result = next(r["message"] for r in records if r.get("message", {}).get("role") == "toolResult")
    assert isinstance(result["durationMs"], int)
    expected = file_history(original)
    assert [h[0] for h in expected] == ["user", "assistant", "tool", "assistant"]

    ours_copy, pis_copy = tmp_path / "ours.jsonl", tmp_path / "pis.jsonl"
    shutil.copy(original, ours_copy)
    shutil.copy(original, pis_copy)
    seen_by_pi = continue_with_pi16(pi16, tmp_path, proj, pis_copy, "next")
    seen_by_ours = continue_with_ours(tmp_path, proj, ours_copy, "next")
    assert seen_by_pi == [*expected, ("user", "next", (), None)]
    assert seen_by_pi == seen_by_ours


def every_context_entry_session(path_dir: Path, cwd: Path) -> Path:
    """A session we write holding every entry that shapes the context: a tool call and
    its result, extension messages (shown and hidden), a bashExecution, a tool call
    left without a result, a failed turn, a compaction keeping entries before it, a
    context edit, entries the model never sees, and an abandoned branch left through a
    branch summary."""
    from pi_sandbox.supervisor.sessions.session_file import SessionWriter

    def user(text: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}

    def assistant(text: str, *calls: dict[str, Any]) -> dict[str, Any]:
        return {
            "role": "assistant",
            "content": [{"type": "text", "text": text}, *calls],
            "api": "openai-completions",
            "provider": "openai",
            "model": "x",
            "usage": {},
            "stopReason": "toolUse" if calls else "stop",
            "timestamp": 1,
            "thinkingLevel": "off",
        }

    writer = SessionWriter.create(path_dir, cwd)
    writer.record_settings("openai", "x", "off")
    writer.append_message(user("u1"))
    call = {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "ls"}}
    writer.append_message(assistant("a1", call))
    writer.append_message(
        {
            "role": "toolResult",
            "toolCallId": "c1",
            "toolName": "bash",
            "content": [{"type": "text", "text": "out1"}],
            "isError": False,
            "durationMs": 2,
            "timestamp": 1,
        }
    )
    writer.append_message(assistant("a1 done"))
    kept = writer.append_message(user("u2")).id
    writer.append_custom_message("note", "ext note", True)
    writer.append_custom_message("note", [{"type": "text", "text": "hidden note"}], False)
    bash = {
        "role": "bashExecution",
        "command": "ls",
        "output": "f",
        "exitCode": 1,
        "cancelled": False,
        "truncated": False,
        "timestamp": 1,
    }
    writer.append_message(bash)
    # A tool call whose result never came (the run stopped), then a turn that failed.
    orphan = {"type": "toolCall", "id": "c2", "name": "bash", "arguments": {"command": "x"}}
    writer.append_message(assistant("a2 calls", orphan))
    writer.append_message({**assistant("a2 failed"), "stopReason": "error", "errorMessage": "boom"})
    writer.append_message(assistant("a2"))
    writer.append_compaction("SUM", kept, 5000)
    writer.append_message(user("u3"))
    a3 = writer.append_message(assistant("a3")).id
    writer._append(
        {"type": "context_edit", "targetId": a3, "replacement": {"content": "a3 edited"}}
    )
    writer.append_label(a3, "here")
    writer.append_custom("state", {"n": 1})
    writer._append(
        {
            "type": "usage",
            "kind": "cache_warm",
            "provider": "openai",
            "model": "x",
            "usage": {"input": 1},
        }
    )
    branch_point = writer.append_session_info("everything").get("id")
    writer.append_message(user("u4 abandoned"))
    abandoned = writer.append_message(assistant("a4 abandoned")).id
    writer.append_branch_summary(abandoned, "BR", parent_id=branch_point)
    writer.close()
    assert writer.path is not None
    return writer.path


def test_every_entry_that_shapes_the_context_gives_pi_1_6_and_us_the_same_request(
    pi16, tmp_path, proj
):
    original = every_context_entry_session(tmp_path / "agent", proj)
    ours_copy, pis_copy = tmp_path / "ours.jsonl", tmp_path / "pis.jsonl"
    shutil.copy(original, ours_copy)
    shutil.copy(original, pis_copy)
    seen_by_pi = continue_with_pi16(pi16, tmp_path, proj, pis_copy, "next")
    seen_by_ours = continue_with_ours(tmp_path, proj, ours_copy, "next")
    compacted = (
        "The conversation history before this point was compacted into the following "
        "summary:\n\n<summary>\nSUM\n</summary>"
    )
    branch = (
        "The following is a summary of a branch that this conversation came back from:"
        "\n\n<summary>\nBR</summary>"
    )
    assert seen_by_pi == [
        ("user", compacted, (), None),
        ("user", "u2", (), None),
        ("user", "ext note", (), None),
        ("user", "hidden note", (), None),
        ("user", "Ran `ls`\n```\nf\n```\n\nCommand exited with code 1", (), None),
        ("assistant", "a2 calls", (("c2", "bash", {"command": "x"}),), None),
        ("tool", "No result provided", (), "c2"),
        ("assistant", "a2", (), None),
        ("user", "u3", (), None),
        ("assistant", "a3 edited", (), None),
        ("user", branch, (), None),
        ("user", "next", (), None),
    ]
    assert seen_by_ours == seen_by_pi


# A pi 1.6.0 extension adding a custom message to every run (before_agent_start).
NOTE_EXTENSION = """\
export default function (pi: any) {
  pi.on("before_agent_start", async (event: any) => ({
    message: { customType: "note", content: "ext note for " + event.prompt, display: true },
  }));
}
"""


def pi16_rpc_session_with_compaction(pi16: Pi16, root: Path, proj: Path) -> Path:
    """A session pi 1.6.0 writes in RPC mode: a prompt (with an extension's
    custom_message), a manual ``compact`` (its summary from the faux model, keeping the
    entries from the custom message on, with pi's ``systemMessage`` checkpoint), a
    second prompt, then an RPC ``bash`` command (a ``bashExecution`` message)."""
    from pi16 import FAUX_SCRIPTED

    (root / "faux.ts").write_text(FAUX_SCRIPTED)
    (root / "note.ts").write_text(NOTE_EXTENSION)
    (root / "script.json").write_text(
        json.dumps([{"text": "r1"}, {"text": "SUMMARY BY PI"}, {"text": "r2"}])
    )
    agent = root / "agent"
    agent.mkdir(parents=True, exist_ok=True)
    # A tiny keepRecentTokens: a two-turn session has something to compact.
    (agent / "settings.json").write_text(json.dumps({"compaction": {"keepRecentTokens": 5}}))
    argv = pi16_argv(
        pi16, "-e", str(root / "faux.ts"), "-e", str(root / "note.ts"),
        "--provider", "faux", "--model", "faux-1", "--mode", "rpc",
    )  # fmt: skip
    env = {**agent_env(root), "PI_FAUX_SCRIPT": str(root / "script.json")}
    proc = subprocess.Popen(
        argv, cwd=proj, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None

    def until(done: Any) -> dict[str, Any]:
        while line := proc.stdout.readline():
            event = json.loads(line)
            if done(event):
                return event
        raise AssertionError(f"pi 1.6.0 ended early (exit {proc.wait(timeout=TIMEOUT_S)})")

    def send(command: dict[str, Any]) -> None:
        proc.stdin.write(json.dumps(command) + "\n")
        proc.stdin.flush()

    try:
        send({"type": "prompt", "message": "one", "id": "1"})
        until(lambda e: e.get("type") == "agent_settled")
        send({"type": "compact", "id": "c"})
        compacted = until(lambda e: e.get("type") == "response" and e.get("id") == "c")
        assert compacted["success"], compacted
        send({"type": "prompt", "message": "two", "id": "2"})
        until(lambda e: e.get("type") == "agent_settled")
        send({"type": "bash", "command": "echo hi", "id": "b"})  # a bashExecution message
        ran = until(lambda e: e.get("type") == "response" and e.get("id") == "b")
        assert ran["success"], ran
    finally:
        proc.stdin.close()
        proc.wait(timeout=TIMEOUT_S)
    (agent / "settings.json").unlink()
    return the_file(root)


def test_a_session_pi_1_6_compacted_with_extension_messages_is_continued_by_us_as_by_pi(
    pi16, tmp_path, proj
):
    original = pi16_rpc_session_with_compaction(pi16, tmp_path, proj)
    records = [json.loads(line) for line in original.read_text().splitlines()]
    [compaction] = [r for r in records if r["type"] == "compaction"]
    kept = next(r for r in records if r.get("id") == compaction["firstKeptEntryId"])
    # What pi wrote: its checkpoint, and the kept range starting at a custom_message.
    assert compaction["systemMessage"]["role"] == "system" and kept["type"] == "custom_message"
    assert [r["type"] for r in records].count("custom_message") == 2

    ours_copy, pis_copy = tmp_path / "ours.jsonl", tmp_path / "pis.jsonl"
    shutil.copy(original, ours_copy)
    shutil.copy(original, pis_copy)
    seen_by_pi = continue_with_pi16(pi16, tmp_path, proj, pis_copy, "next")
    seen_by_ours = continue_with_ours(tmp_path, proj, ours_copy, "next")
    assert seen_by_pi == [
        (
            "user",
            "The conversation history before this point was compacted into the following "
            "summary:\n\n<summary>\nSUMMARY BY PI\n</summary>",
            (),
            None,
        ),
        ("user", "ext note for one", (), None),
        ("assistant", "r1", (), None),
        ("user", "two", (), None),
        ("user", "ext note for two", (), None),
        ("assistant", "r2", (), None),
        ("user", "Ran `echo hi`\n```\nhi\n\n```", (), None),  # pi keeps the newline
        ("user", "next", (), None),
    ]
    assert seen_by_ours == seen_by_pi
