"""OpenAI-compatible Chat Completions over streaming HTTP (OpenAI, Ollama, vLLM, llama.cpp).

One ``complete()`` is one ``POST {base_url}/chat/completions`` with ``stream: true``;
the Server-Sent Events answer is decoded by ``sse.SSEDecoder`` and accumulated into an
``AssistantTurn``. Wire format reference: OpenAI "Chat Completions" API, streaming
("chat.completion.chunk" objects, ``data: [DONE]`` terminator, ``stream_options.
include_usage`` for a final usage-only chunk).

The API key lives only in this object and the ``Authorization`` header; it is never
put in an error message or a repr (DESIGN §1: secrets stay in the supervisor).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from pi_sandbox.errors import ProviderError

from .base import (
    AssistantEventCallback,
    AssistantTurn,
    TextDeltaCallback,
    ToolCall,
    ToolDefinition,
    normalise_usage,
)
from .sse import SSEDecoder, SSEEvent, SSEEventTooLarge, loads_json

__all__ = ["OpenAIProvider"]

# Error bodies are read only this far: enough for any JSON error, bounded against a
# proxy that answers with a whole HTML page or an endless stream.
_ERROR_BODY_BYTES = 16 * 1024
_EXCERPT_CHARS = 500

_ErrorFactory = Callable[[str], ProviderError]


def _excerpt(text: str, limit: int = _EXCERPT_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"


class OpenAIProvider:
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Attributes:
        name: always ``"openai"``.
        model: the model id sent as ``model``.
        base_url: the API root without trailing slash, e.g. ``https://api.openai.com/v1``.
    """

    name = "openai"

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None,
        *,
        timeout_s: float = 600,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        """Configure the endpoint; nothing is sent until ``complete()``.

        Args:
            model: model id, e.g. ``"gpt-4o-mini"`` or ``"qwen2.5-coder:7b"``.
            base_url: API root; ``/chat/completions`` is appended.
            api_key: sent as ``Authorization: Bearer <key>``; None sends no header
                (local servers).
            timeout_s: seconds httpx waits for each network step (connect, each read of
                the stream, write); a long generation that keeps streaming never times out.
            client: a shared client the caller owns and closes; by default each request
                uses its own short-lived client, so there is nothing to close.
        """
        self.model = model
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key or None
        self._timeout = httpx.Timeout(timeout_s)
        self._client = client

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def _url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _error(self, message: str) -> ProviderError:
        # Servers and proxies sometimes echo request headers in error bodies. The text
        # may already be cut to an excerpt, so a key cut short is redacted too (any
        # prefix of 8 or more characters).
        key = self._api_key
        if key:
            for length in range(len(key), min(8, len(key)) - 1, -1):
                if key[:length] in message:
                    message = message.replace(key[:length], "<redacted>")
        return ProviderError(f"openai/{self.model}: {message}")

    async def complete(
        self,
        *,
        system_prompt: str,
        messages: list[dict[str, Any]],
        tools: list[ToolDefinition],
        on_text_delta: TextDeltaCallback | None = None,
        on_event: AssistantEventCallback | None = None,
        thinking_level: str = "off",
    ) -> AssistantTurn:
        """Send one streaming request and return the whole assistant turn.

        Args:
            system_prompt: sent as the first, ``system``, message (omitted when empty).
            messages: the conversation in pi's shape (see ``base``).
            tools: offered as ``function`` tools (the ``tools`` key is omitted when empty).
            on_text_delta: awaited with each text fragment as it arrives.
            on_event: awaited with pi's ``assistantMessageEvent`` dicts (``text_*``,
                ``toolcall_*`` with ``contentIndex``); the last event of a request may
                carry ``usage`` (pi's cumulative ``Usage``) when the server sent it.

        Returns:
            The turn; ``stop_reason`` is ``"toolUse"`` when it has tool calls, else
            ``"stop"``; ``usage`` has ``input``/``output`` token counts when the server
            reported them.

        Raises:
            ProviderError: HTTP error status (429 names the rate limit and Retry-After,
                401/403 say authentication failed), connection failure or timeout, a
                malformed or early-ended stream, a tool call with invalid JSON arguments,
                or a message that cannot be converted.
            trio.Cancelled: cancellation propagates; the connection is closed.
        """
        body = _request_body(self.model, system_prompt, messages, tools, self._error)
        headers = {"Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            if self._client is not None:
                return await self._send(self._client, body, headers, on_text_delta, on_event)
            async with httpx.AsyncClient(timeout=self._timeout) as client:
                return await self._send(client, body, headers, on_text_delta, on_event)
        except httpx.TimeoutException as exc:
            raise self._error(
                f"request to {self._url} timed out ({type(exc).__name__}: no progress "
                f"for {self._timeout.read} s)"
            ) from exc
        except httpx.ConnectError as exc:
            raise self._error(f"cannot connect to {self._url}: {exc}") from exc
        except httpx.HTTPError as exc:
            raise self._error(
                f"request to {self._url} failed: {type(exc).__name__}: {exc}"
            ) from exc

    async def _send(
        self,
        client: httpx.AsyncClient,
        body: dict[str, Any],
        headers: dict[str, str],
        on_text_delta: TextDeltaCallback | None,
        on_event: AssistantEventCallback | None = None,
    ) -> AssistantTurn:
        async with client.stream(
            "POST", self._url, json=body, headers=headers, timeout=self._timeout
        ) as response:
            if not response.is_success:
                raise self._http_error(response, await _read_bounded(response))
            content_type = response.headers.get("content-type", "")
            if "json" in content_type and "event-stream" not in content_type:
                text = await _read_bounded(response)
                raise self._error(
                    f"{self._url} answered with {content_type} instead of an event stream: "
                    f"{_server_message(text)}"
                )
            stream = _StreamAccumulator(self._error, on_event)
            decoder = SSEDecoder()
            async for chunk in response.aiter_bytes():
                try:
                    events = decoder.feed_bytes(chunk)
                except SSEEventTooLarge as exc:
                    raise self._error(f"{self._url}: {exc}; the stream was abandoned") from exc
                for event in events:
                    await stream.apply(event, on_text_delta)
                    if stream.done:
                        return await stream.end(self.model)
            for event in decoder.flush():
                await stream.apply(event, on_text_delta)
                if stream.done:
                    break
            return await stream.end(self.model)

    def _http_error(self, response: httpx.Response, text: str) -> ProviderError:
        status = response.status_code
        detail = _server_message(text)
        if status == 429:
            retry_after = response.headers.get("retry-after")
            hint = ""
            if retry_after:
                unit = " s" if retry_after.strip().isdigit() else ""
                hint = f"; the server asks to retry after {retry_after.strip()}{unit} (Retry-After)"
            return self._error(f"rate limit hit at {self._url} (HTTP 429){hint}: {detail}")
        if status in (401, 403):
            advice = (
                "check the API key (OPENAI_API_KEY)"
                if self._api_key
                else "no API key was sent; set OPENAI_API_KEY"
            )
            return self._error(
                f"authentication failed at {self._url} (HTTP {status}): {detail}; {advice}"
            )
        return self._error(f"{self._url} answered HTTP {status}: {detail}")


async def _read_bounded(response: httpx.Response) -> str:
    data = bytearray()
    async for part in response.aiter_bytes():
        data += part
        if len(data) >= _ERROR_BODY_BYTES:
            break
    return bytes(data[:_ERROR_BODY_BYTES]).decode("utf-8", errors="replace")


def _server_message(text: str) -> str:
    """The human part of an error body: OpenAI's ``error.message`` when present."""
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError):
        payload = None
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return _excerpt(error["message"])
        for candidate in (error, payload.get("message"), payload.get("detail")):
            if isinstance(candidate, str) and candidate:
                return _excerpt(candidate)
    return _excerpt(text) or "(empty body)"


# --- request ------------------------------------------------------------------------


def _text_parts(content: Any, *, joiner: str) -> str:
    """Join the text of pi content (a string or a list of parts); images become a note."""
    if isinstance(content, str):
        return content
    texts = []
    for part in content or []:
        if part.get("type") == "text":
            texts.append(part.get("text", ""))
        elif part.get("type") == "image":
            # Chat Completions has no images in tool or assistant messages.
            texts.append(f"[image omitted: {part.get('mimeType', 'image')}]")
    return joiner.join(texts)


def _user_content(content: Any) -> str | list[dict[str, Any]]:
    # A plain string is what every OpenAI-compatible server understands; the parts
    # form is used only when there is an image to send.
    if isinstance(content, str) or not any(p.get("type") == "image" for p in content or []):
        return _text_parts(content, joiner="\n")
    parts: list[dict[str, Any]] = []
    for part in content:
        if part.get("type") == "text":
            parts.append({"type": "text", "text": part.get("text", "")})
        elif part.get("type") == "image":
            url = f"data:{part.get('mimeType', 'image/png')};base64,{part.get('data', '')}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def _convert_message(message: dict[str, Any], error: _ErrorFactory) -> dict[str, Any] | None:
    role = message.get("role")
    if role == "user":
        return {"role": "user", "content": _user_content(message.get("content"))}
    if role == "assistant":
        content = message.get("content") or []
        text = "".join(p.get("text", "") for p in content if p.get("type") == "text")
        calls = [
            {
                "id": p["id"],
                "type": "function",
                "function": {"name": p["name"], "arguments": json.dumps(p.get("arguments", {}))},
            }
            for p in content
            if p.get("type") == "toolCall"
        ]
        if not text and not calls:
            # An empty assistant message (e.g. an aborted turn) is rejected by several
            # servers and carries nothing for the model.
            return None
        wire: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            wire["tool_calls"] = calls
        return wire
    if role == "toolResult":
        return {
            "role": "tool",
            "tool_call_id": message.get("toolCallId"),
            "content": _text_parts(message.get("content"), joiner="\n"),
        }
    raise error(f"cannot send a message with role {role!r} to the model")


def _request_body(
    model: str,
    system_prompt: str,
    messages: list[dict[str, Any]],
    tools: list[ToolDefinition],
    error: _ErrorFactory,
) -> dict[str, Any]:
    wire_messages: list[dict[str, Any]] = []
    if system_prompt:
        wire_messages.append({"role": "system", "content": system_prompt})
    for message in messages:
        converted = _convert_message(message, error)
        if converted is not None:
            wire_messages.append(converted)
    body: dict[str, Any] = {
        "model": model,
        "messages": wire_messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in tools
        ]
    return body


# --- response -----------------------------------------------------------------------


@dataclass
class _PartialToolCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class _StreamAccumulator:
    """Folds ``chat.completion.chunk`` events into one turn."""

    def __init__(
        self, error: _ErrorFactory, on_event: AssistantEventCallback | None = None
    ) -> None:
        self._error = error
        self._on_event = on_event
        # pi's content blocks as they open (issue 16 streaming events): the position
        # of the open text block, and of each tool call by its stream index.
        self._blocks = 0
        self._open_text: int | None = None
        self._text_parts: list[str] = []
        self._call_position: dict[int, int] = {}
        self.text: list[str] = []
        self.calls: dict[int, _PartialToolCall] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, int] = {}
        self.done = False

    async def apply(self, event: SSEEvent, on_text_delta: TextDeltaCallback | None) -> None:
        data = event.data.strip()
        if not data:
            return
        if data == "[DONE]":
            self.done = True
            return
        try:
            chunk = loads_json(data)
        except (ValueError, RecursionError) as exc:
            raise self._error(f"malformed stream chunk (not JSON): {_excerpt(data)}") from exc
        if not isinstance(chunk, dict):
            raise self._error(f"malformed stream chunk (not an object): {_excerpt(data)}")
        if event.event == "error" or "error" in chunk:
            raise self._error(f"the server reported an error mid-stream: {_server_message(data)}")

        usage = chunk.get("usage")
        if isinstance(usage, dict):
            for ours, theirs in (("input", "prompt_tokens"), ("output", "completion_tokens")):
                if isinstance(usage.get(theirs), int):
                    self.usage[ours] = usage[theirs]

        for choice in chunk.get("choices") or []:
            # We never ask for n > 1; other indexes would be a server bug, ignore them.
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            for call_delta in delta.get("tool_calls") or []:
                await self._apply_tool_call(call_delta)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            content = delta.get("content")
            if isinstance(content, str) and content:
                self.text.append(content)
                if self._on_event is not None:
                    await self._text_event(content)
                if on_text_delta is not None:
                    await on_text_delta(content)

    async def _emit(self, event: dict[str, Any]) -> None:
        if self._on_event is not None:
            await self._on_event(event)

    async def _text_event(self, content: str) -> None:
        # A text after a tool call opens a new text block, as pi's openai-completions.
        if self._open_text is None:
            self._open_text, self._blocks = self._blocks, self._blocks + 1
            self._text_parts = []
            await self._emit({"type": "text_start", "contentIndex": self._open_text})
        self._text_parts.append(content)
        await self._on_event(  # type: ignore[misc]  # only called with on_event set
            {"type": "text_delta", "contentIndex": self._open_text, "delta": content}
        )

    async def _close_text(self) -> None:
        if self._open_text is not None:
            index, self._open_text = self._open_text, None
            await self._emit(
                {"type": "text_end", "contentIndex": index, "content": "".join(self._text_parts)}
            )

    async def _apply_tool_call(self, delta: dict[str, Any]) -> None:
        index = delta.get("index")
        if not isinstance(index, int):
            # Some servers omit ``index``: a fresh id starts a new call, otherwise the
            # fragment continues the latest one.
            known_ids = {call.id for call in self.calls.values()}
            starts_new = not self.calls or (delta.get("id") and delta["id"] not in known_ids)
            index = len(self.calls) if starts_new else max(self.calls)
        call = self.calls.setdefault(index, _PartialToolCall())
        if isinstance(delta.get("id"), str) and delta["id"] and not call.id:
            call.id = delta["id"]
        function = delta.get("function") or {}
        if isinstance(function.get("name"), str) and function["name"] and not call.name:
            call.name = function["name"]
        arguments = function.get("arguments")
        fragment = ""
        if isinstance(arguments, str):
            fragment = arguments
        elif isinstance(arguments, dict):  # a few servers send the decoded object
            fragment = json.dumps(arguments)
        if fragment or isinstance(arguments, str):
            call.arguments.append(fragment)
        if self._on_event is None:
            return
        if index not in self._call_position:
            await self._close_text()
            self._call_position[index] = self._blocks
            self._blocks += 1
            await self._emit(
                {
                    "type": "toolcall_start",
                    "contentIndex": self._call_position[index],
                    "id": call.id,
                    "toolName": call.name,
                }
            )
        if fragment:
            await self._emit(
                {
                    "type": "toolcall_delta",
                    "contentIndex": self._call_position[index],
                    "delta": fragment,
                }
            )

    async def end(self, model: str) -> AssistantTurn:
        """``finish``, then the closing ``text_end`` / ``toolcall_end`` events."""
        turn = self.finish(model)
        if self._on_event is None:
            return turn
        ends: list[dict[str, Any]] = []
        if self._open_text is not None:
            ends.append(
                {
                    "type": "text_end",
                    "contentIndex": self._open_text,
                    "content": "".join(self._text_parts),
                }
            )
        # ``finish`` orders the calls by stream index, as ``self.calls``.
        for index, call in zip(sorted(self.calls), turn.tool_calls, strict=True):
            ends.append(
                {
                    "type": "toolcall_end",
                    "contentIndex": self._call_position[index],
                    "toolCall": {
                        "type": "toolCall",
                        "id": call.id,
                        "name": call.name,
                        "arguments": call.arguments,
                    },
                }
            )
        ends.sort(key=lambda event: event["contentIndex"])
        if ends and self.usage:
            # The session lifts this to the record's top-level ``usage`` (pi json.md).
            ends[0]["usage"] = normalise_usage(self.usage)
        for event in ends:
            await self._emit(event)
        return turn

    def finish(self, model: str) -> AssistantTurn:
        if not self.done and self.finish_reason is None:
            raise self._error("stream ended early (no finish_reason and no [DONE])")
        tool_calls = []
        for index in sorted(self.calls):
            partial = self.calls[index]
            call_id = partial.id or f"call_{secrets.token_hex(12)}"
            if not partial.name:
                raise self._error(f"tool call {call_id} (index {index}) has no function name")
            raw = "".join(partial.arguments)
            try:
                arguments = json.loads(raw) if raw.strip() else {}
            except (ValueError, RecursionError) as exc:
                cut = (
                    " (the answer was cut off at the token limit)"
                    if self.finish_reason == "length"
                    else ""
                )
                raise self._error(
                    f"tool call {partial.name!r} (id {call_id}) has invalid JSON arguments"
                    f"{cut}: {exc}: {_excerpt(raw, 200)}"
                ) from exc
            if not isinstance(arguments, dict):
                raise self._error(
                    f"tool call {partial.name!r} (id {call_id}) arguments are a "
                    f"{type(arguments).__name__}, not a JSON object"
                )
            tool_calls.append(ToolCall(id=call_id, name=partial.name, arguments=arguments))
        return AssistantTurn(
            text="".join(self.text),
            tool_calls=tool_calls,
            stop_reason="toolUse" if tool_calls else "stop",
            usage=dict(self.usage),
            provider="openai",
            model=model,
        )
