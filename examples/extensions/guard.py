"""guard: a small, benign example extension for pi-sandbox.

Load it for one run with ``pi -e examples/extensions/guard.py ...`` or copy it to
``~/.pi/agent/extensions/`` (user level) or ``.pi/extensions/`` (project level).

It shows the three things most extensions do:

1. a ``tool_call`` handler that blocks a dangerous call with a reason
   (written as an ``async def`` to show that async handlers work),
2. a ``tool_result`` handler that patches a result (a plain ``def``),
3. a tool of its own, ``word_count``.

Like every extension, it runs in its own worker process and sees only what the
supervisor sends it (the event and a context snapshot); under ``--sandbox`` that
process is also confined by bubblewrap (read-only workspace, no network).
"""

from __future__ import annotations

import re

_FORCE_PUSH = re.compile(r"\bgit\s+push\b.*(\s--force(?:-with-lease)?\b|\s-f\b)")


def extension(pi):
    # -- 1. tool_call: block `git push --force` -------------------------------------
    # A tool_call event carries `tool_name`, `tool_call_id` and `input` (the
    # arguments). Return {"block": True, "reason": ...} to stop the call: the model
    # gets an error result with the reason. Return None to let it through. (A handler
    # may also change `event.input`; the supervisor then re-validates the new input
    # and runs the policy gate on it again.) If this handler raised, the call would be
    # blocked too: tool_call handlers fail closed.
    async def block_force_push(event, ctx):
        if event.tool_name != "bash":
            return None
        command = event.input.get("command", "")
        if _FORCE_PUSH.search(command):
            return {
                "block": True,
                "reason": "guard: `git push --force` rewrites shared history; push normally or ask a human",
            }
        return None

    pi.on("tool_call", block_force_push)

    # -- 2. tool_result: annotate `read` results ------------------------------------
    # A tool_result handler sees `tool_name`, `input`, `content`, `details` and
    # `is_error`, and returns a patch: any of `content`, `details`, `is_error`.
    # Patches from several extensions are applied in turn (each sees the previous
    # one's output). If this handler raised, the result would pass through unchanged.
    def note_reads(event, ctx):
        if event.tool_name != "read":
            return None
        details = dict(event.details or {})
        details["guard_note"] = f"read by the model in {ctx.cwd}; contents are untrusted input"
        return {"details": details}

    pi.on("tool_result", note_reads)

    # -- 3. a tool: word_count ----------------------------------------------------------
    # `parameters` is a JSON Schema object; the supervisor validates the model's
    # arguments against it before anything runs. `execute(params, ctx)` may return a
    # plain string (shown to the model) or a full result with `details`.
    def word_count(params, ctx):
        words = len(params["text"].split())
        return {
            "content": [{"type": "text", "text": f"{words} words"}],
            "details": {"words": words},
            "is_error": False,
        }

    pi.register_tool(
        name="word_count",
        description="Count the whitespace-separated words in a piece of text.",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The text to count"}},
            "required": ["text"],
            "additionalProperties": False,
        },
        execute=word_count,
    )
