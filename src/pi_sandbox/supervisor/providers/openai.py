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

import dataclasses
import json
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pi_sandbox.errors import ProviderError

from .base import (
    AssistantEventCallback,
    AssistantTurn,
    TextDeltaCallback,
    ToolCall,
    ToolDefinition,
    normalise_usage,
)
from .http_stream import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    IdleDeadline,
    StreamIdleTimeout,
    http_timeout,
    shared_ssl_context,
)
from .httpx_import import httpx
from .retry import TRANSIENT_STATUSES, parse_retry_after
from .sse import SSEDecoder, SSEEvent, SSEEventTooLarge, loads_json

__all__ = ["OpenAICompat", "OpenAIProvider"]

# Error bodies are read only this far: enough for any JSON error, bounded against a
# proxy that answers with a whole HTML page or an endless stream.
_ERROR_BODY_BYTES = 16 * 1024
_EXCERPT_CHARS = 500

_ErrorFactory = Callable[..., ProviderError]

# Mid-stream error messages that mean "try again later" (pi retries the same words).
_TRANSIENT_MESSAGE = re.compile(
    r"overloaded|rate.?limit|too many requests|service.?unavailable|server.?error|try again",
    re.IGNORECASE,
)


def _excerpt(text: str, limit: int = _EXCERPT_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"


# --- compatibility switches ---------------------------------------------------------

# pi's thinking levels (base.THINKING_LEVELS) as Chat Completions ``reasoning_effort``
# values. "off" sends nothing; "xhigh" is "high" because most servers reject anything
# above it (override per server with ``reasoning_effort_map``).
_EFFORT = {"minimal": "minimal", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}
# Local servers (Ollama, LM Studio, llama.cpp, vLLM) know low/medium/high only.
_LOCAL_EFFORT = {**_EFFORT, "minimal": "low"}

# pi's ``compat`` field names (pi docs models-configuration.md, "openai-completions")
# and the `OpenAICompat` attribute each sets.
_PI_COMPAT_FIELDS = {
    "supportsDeveloperRole": "supports_developer_role",
    "maxTokensField": "max_tokens_field",
    "supportsUsageInStreaming": "supports_usage_in_streaming",
    "supportsReasoningEffort": "supports_reasoning_effort",
    "thinkingFormat": "thinking_format",
    "requiresNonNullAssistantContent": "requires_non_null_assistant_content",
    "requiresToolsWithToolHistory": "requires_tools_with_tool_history",
    "requiresToolResultName": "requires_tool_result_name",
    "requiresAssistantAfterToolResult": "requires_assistant_after_tool_result",
    "supportsFinishReason": "supports_finish_reason",
}
_THINKING_FORMATS = ("openai", "openrouter")

# Model ids that are reasoning models when nothing (the catalogue, models.json
# ``reasoning``) says otherwise: OpenAI's o-series and GPT-5, and the open reasoning
# families local servers run.
_REASONING_ID = re.compile(r"^(o[1-9]|gpt-5|gpt-oss|deepseek-r1|qwq|qwen3)", re.IGNORECASE)


@dataclass(frozen=True)
class OpenAICompat:
    """How one OpenAI-compatible server differs from the Chat Completions standard.

    pi's ``compat`` switches for the ``openai-completions`` API (pi docs
    models-configuration.md "Compatibility"); `detect` gives pi's defaults for a base
    URL, `with_overrides` applies a models.json ``compat`` object (pi's camelCase
    names) on top.

    Attributes:
        server: what `detect` recognised: ``"openai"``, ``"openrouter"``, ``"ollama"``,
            ``"lm-studio"``, ``"llama.cpp"``, ``"vllm"`` or ``"generic"`` (for messages).
        supports_developer_role: send the system prompt of a reasoning model with the
            ``developer`` role instead of ``system`` (default: only api.openai.com).
        max_tokens_field: ``"max_completion_tokens"`` (api.openai.com) or
            ``"max_tokens"`` (everything else); sent only when a max is configured.
        supports_usage_in_streaming: send ``stream_options: {include_usage: true}``.
        supports_reasoning_effort: send a reasoning parameter for thinking levels.
        thinking_format: ``"openai"`` (top-level ``reasoning_effort``) or
            ``"openrouter"`` (``reasoning: {effort}``).
        requires_non_null_assistant_content: a replayed assistant message with only
            tool calls sends ``content: ""`` instead of ``null``.
        requires_tools_with_tool_history: a request without tools sends ``tools: []``
            when the conversation has tool calls or results (otherwise the key is
            omitted: OpenAI rejects an empty list).
        requires_tool_result_name: tool results carry the tool's ``name``.
        requires_assistant_after_tool_result: a user message right after tool results
            gets a short assistant message in between.
        supports_finish_reason: the server sends ``finish_reason``; when False a stream
            that ends without one (and without ``[DONE]``) is complete, not cut off.
        reasoning_effort_map: thinking level → effort value sent.
    """

    server: str = "generic"
    supports_developer_role: bool = False
    max_tokens_field: str = "max_tokens"
    supports_usage_in_streaming: bool = True
    supports_reasoning_effort: bool = True
    thinking_format: str = "openai"
    requires_non_null_assistant_content: bool = False
    requires_tools_with_tool_history: bool = False
    requires_tool_result_name: bool = False
    requires_assistant_after_tool_result: bool = False
    supports_finish_reason: bool = True
    reasoning_effort_map: Mapping[str, str] = field(default_factory=lambda: dict(_LOCAL_EFFORT))

    @classmethod
    def detect(cls, base_url: str) -> OpenAICompat:
        """pi's defaults for the server at ``base_url``, recognised by host and port:
        api.openai.com, openrouter.ai, Ollama (``:11434`` or "ollama" in the host),
        LM Studio (``:1234``), llama.cpp (``:8080``), vLLM (``:8000``); anything else
        is ``generic`` (the local servers' defaults, which suit most proxies)."""
        parts = urlsplit(base_url)
        host = (parts.hostname or "").lower()
        try:
            port = parts.port
        except ValueError:
            port = None
        if host == "api.openai.com":
            return cls(
                server="openai",
                supports_developer_role=True,
                max_tokens_field="max_completion_tokens",
                reasoning_effort_map=dict(_EFFORT),
            )
        if host == "openrouter.ai" or host.endswith(".openrouter.ai"):
            return cls(
                server="openrouter",
                thinking_format="openrouter",
                reasoning_effort_map=dict(_EFFORT),
            )
        if port == 11434 or "ollama" in host:
            return cls(server="ollama")
        server = {1234: "lm-studio", 8080: "llama.cpp", 8000: "vllm"}.get(port or 0, "generic")
        return cls(server=server)

    def with_overrides(self, overrides: Mapping[str, Any] | None) -> OpenAICompat:
        """A copy with pi's ``compat`` fields from ``overrides`` applied (models.json
        ``compat``, provider-level then model-level; pi docs models-configuration.md).

        Fields pi documents that do not change our requests (``supportsStore``,
        ``promptCacheKeyMode``, …) are ignored.

        Raises:
            ValueError: a known field has the wrong type or value (names the field).
        """
        changes: dict[str, Any] = {}
        for name, value in (overrides or {}).items():
            attribute = _PI_COMPAT_FIELDS.get(name)
            if attribute is None:
                continue
            if attribute == "max_tokens_field":
                if value not in ("max_tokens", "max_completion_tokens"):
                    raise ValueError(
                        f"compat.{name}: expected 'max_tokens' or 'max_completion_tokens', "
                        f"got {value!r}"
                    )
            elif attribute == "thinking_format":
                if value not in _THINKING_FORMATS:
                    raise ValueError(
                        f"compat.{name}: {value!r} is not supported here; "
                        f"known: {', '.join(_THINKING_FORMATS)}"
                    )
            elif not isinstance(value, bool):
                raise ValueError(f"compat.{name}: expected true or false, got {value!r}")
            changes[attribute] = value
        return dataclasses.replace(self, **changes)


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
        timeout_s: float | None = None,
        idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        client: httpx.AsyncClient | None = None,
        compat: OpenAICompat | None = None,
        max_tokens: int | None = None,
        reasoning: bool | None = None,
    ) -> None:
        """Configure the endpoint; nothing is sent until ``complete()``.

        Args:
            model: model id, e.g. ``"gpt-4o-mini"`` or ``"qwen2.5-coder:7b"``.
            base_url: API root; ``/chat/completions`` is appended.
            api_key: sent as ``Authorization: Bearer <key>``; None sends no header
                (local servers).
            timeout_s: the older name of ``idle_timeout_s``; when given it wins.
            idle_timeout_s: the longest silence, in seconds, while waiting for the
                answer's headers or between two chunks of its body (pi's
                ``httpIdleTimeoutMs``, `http_stream`); a long generation that keeps
                streaming never times out. None: no limit.
            connect_timeout_s: seconds to open the connection.
            client: a shared client the caller owns and closes; by default each request
                uses its own short-lived client, so there is nothing to close.
            compat: the server's differences; default ``OpenAICompat.detect(base_url)``.
            max_tokens: the answer's token limit, sent as ``compat.max_tokens_field``;
                None sends none (the server's default).
            reasoning: whether the model reasons (models.json ``reasoning``); decides
                the developer role and whether a thinking level is sent. None guesses
                from the model id (o-series, gpt-5, gpt-oss, deepseek-r1, qwq, qwen3).
        """
        self.model = model
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key or None
        self.idle_timeout_s = timeout_s if timeout_s is not None else idle_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._client = client
        self.compat = compat if compat is not None else OpenAICompat.detect(self.base_url)
        self.max_tokens = max_tokens
        self.reasoning = (
            reasoning if reasoning is not None else bool(_REASONING_ID.match(model.rsplit("/")[-1]))
        )

    @property
    def _timeout(self) -> httpx.Timeout:
        return http_timeout(self.idle_timeout_s, self.connect_timeout_s)

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def _url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _error(self, message: str, **attributes: Any) -> ProviderError:
        # Servers and proxies sometimes echo request headers in error bodies. The text
        # may already be cut to an excerpt, so a key cut short is redacted too (any
        # prefix of 8 or more characters).
        key = self._api_key
        if key:
            for length in range(len(key), min(8, len(key)) - 1, -1):
                if key[:length] in message:
                    message = message.replace(key[:length], "<redacted>")
        return ProviderError(f"openai/{self.model}: {message}", **attributes)

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
            thinking_level: one of ``base.THINKING_LEVELS``; for a reasoning model
                (``reasoning``) whose server takes it, anything but ``"off"`` is sent
                as ``reasoning_effort`` (or OpenRouter's ``reasoning.effort``).
            on_event: awaited with pi's ``assistantMessageEvent`` dicts (``text_*``,
                ``toolcall_*`` with ``contentIndex``); the last event of a request may
                carry ``usage`` (pi's cumulative ``Usage``) when the server sent it.

        Returns:
            The turn; ``stop_reason`` is ``"toolUse"`` when it has tool calls, else
            ``"stop"``; ``usage`` has ``input``/``output`` token counts when the server
            reported them; ``thinking`` holds the reasoning text of servers that stream
            ``reasoning_content`` or ``reasoning`` deltas, as one thinking block.

        Raises:
            ProviderError: HTTP error status (429 names the rate limit and Retry-After,
                401/403 say authentication failed), connection failure, an idle stream
                (no bytes for ``idle_timeout_s``), a malformed, oversized or early-ended
                stream, a tool call with invalid JSON arguments, or a message that
                cannot be converted. Its ``status``, ``retry_after``, ``transient`` and
                ``output_started`` are set (``errors.ProviderError``).
            trio.Cancelled: cancellation propagates; the connection is closed.
        """
        body = _request_body(
            self.model,
            system_prompt,
            messages,
            tools,
            self._error,
            compat=self.compat,
            reasoning=self.reasoning,
            thinking_level=thinking_level,
            max_tokens=self.max_tokens,
        )
        headers = {"Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        # models.json ``headers`` (issue 16), resolved by the supervisor's model selection.
        headers.update(getattr(self, "extra_headers", None) or {})
        stream = _StreamAccumulator(self._error, self.compat, on_event)
        try:
            if self._client is not None:
                return await self._send(self._client, body, headers, on_text_delta, stream)
            async with httpx.AsyncClient(
                timeout=self._timeout, verify=shared_ssl_context()
            ) as client:
                return await self._send(client, body, headers, on_text_delta, stream)
        except ProviderError as exc:
            exc.output_started = exc.output_started or stream.started
            if exc.output_started:
                exc.transient = False
            raise
        except (httpx.ReadTimeout, httpx.WriteTimeout) as exc:
            # httpx's own read timeout and our `IdleDeadline` are the same limit
            # (httpIdleTimeoutMs); whichever notices first, the message is one.
            limit = (
                exc.idle_timeout_s if isinstance(exc, StreamIdleTimeout) else self.idle_timeout_s
            )
            what = (
                "the stream went silent: no bytes"
                if stream.answered
                else "no answer (status line and headers)"
            )
            raise self._transport_error(
                f"request to {self._url} timed out: {what} for {limit:g} s (httpIdleTimeoutMs)",
                exc,
                stream,
            ) from exc
        except httpx.TimeoutException as exc:  # connect or pool
            raise self._transport_error(
                f"request to {self._url} timed out ({type(exc).__name__}: could not connect "
                f"within {self.connect_timeout_s:g} s)",
                exc,
                stream,
            ) from exc
        except httpx.ConnectError as exc:
            raise self._transport_error(
                f"cannot connect to {self._url}: {exc}", exc, stream
            ) from exc
        except httpx.HTTPError as exc:
            raise self._transport_error(
                f"request to {self._url} failed: {type(exc).__name__}: {exc}", exc, stream
            ) from exc

    def _transport_error(
        self, message: str, exc: Exception, stream: _StreamAccumulator
    ) -> ProviderError:
        """A network failure: retryable (issue 16) unless the answer had started —
        then it says so, since a retry would repeat what was already shown."""
        if stream.started:
            message += (
                f" after the answer had started ({stream.shown_chars()} characters "
                "received); not retried, so nothing is repeated"
            )
        return self._error(message, transient=not stream.started, output_started=stream.started)

    async def _send(
        self,
        client: httpx.AsyncClient,
        body: dict[str, Any],
        headers: dict[str, str],
        on_text_delta: TextDeltaCallback | None,
        stream: _StreamAccumulator,
    ) -> AssistantTurn:
        async with client.stream(
            "POST", self._url, json=body, headers=headers, timeout=self._timeout
        ) as response:
            stream.answered = True
            if not response.is_success:
                raise self._http_error(response, await _read_bounded(response))
            content_type = response.headers.get("content-type", "")
            if "event-stream" not in content_type and (
                "json" in content_type or "html" in content_type or "xml" in content_type
            ):
                # A login page or an API error page, not an answer (red-team finding:
                # it was retried as "stream ended early"): never retried.
                text = await _read_bounded(response)
                raise self._error(
                    f"{self._url} answered with {content_type} instead of an event stream "
                    f"(is the base URL an OpenAI-compatible API?): {_server_message(text)}"
                )
            decoder = SSEDecoder()
            with IdleDeadline(self.idle_timeout_s) as idle:
                async for chunk in response.aiter_bytes():
                    try:
                        events = decoder.feed_bytes(chunk)
                    except SSEEventTooLarge as exc:
                        raise self._error(f"{self._url}: {exc}; the stream was abandoned") from exc
                    for event in events:
                        await stream.apply(event, on_text_delta)
                        if stream.done:
                            return await stream.end(self.model)
                    idle.touch()
            for event in decoder.flush():
                await stream.apply(event, on_text_delta)
                if stream.done:
                    break
            return await stream.end(self.model)

    def _http_error(self, response: httpx.Response, text: str) -> ProviderError:
        status = response.status_code
        detail = _server_message(text)
        attributes = {
            "status": status,
            "retry_after": parse_retry_after(response.headers),
            "transient": status in TRANSIENT_STATUSES,
        }
        if status == 429:
            retry_after = response.headers.get("retry-after")
            hint = ""
            if retry_after:
                unit = " s" if retry_after.strip().isdigit() else ""
                hint = f"; the server asks to retry after {retry_after.strip()}{unit} (Retry-After)"
            return self._error(
                f"rate limit hit at {self._url} (HTTP 429){hint}: {detail}", **attributes
            )
        if status in (401, 403):
            advice = (
                "check the API key (OPENAI_API_KEY)"
                if self._api_key
                else "no API key was sent; set OPENAI_API_KEY"
            )
            return self._error(
                f"authentication failed at {self._url} (HTTP {status}): {detail}; {advice}",
                **attributes,
            )
        return self._error(f"{self._url} answered HTTP {status}: {detail}", **attributes)


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


def _convert_message(
    message: dict[str, Any], error: _ErrorFactory, compat: OpenAICompat
) -> dict[str, Any] | None:
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
        empty = "" if compat.requires_non_null_assistant_content else None
        wire: dict[str, Any] = {"role": "assistant", "content": text or empty}
        if calls:
            wire["tool_calls"] = calls
        return wire
    if role == "toolResult":
        result = {
            "role": "tool",
            "tool_call_id": message.get("toolCallId"),
            "content": _text_parts(message.get("content"), joiner="\n"),
        }
        if compat.requires_tool_result_name:
            result["name"] = message.get("toolName") or ""
        return result
    raise error(f"cannot send a message with role {role!r} to the model")


# What pi inserts between tool results and a user message for servers that need an
# assistant turn there (compat ``requiresAssistantAfterToolResult``).
_BRIDGE_TEXT = "I have processed the tool results."


def _request_body(
    model: str,
    system_prompt: str,
    messages: list[dict[str, Any]],
    tools: list[ToolDefinition],
    error: _ErrorFactory,
    *,
    compat: OpenAICompat | None = None,
    reasoning: bool = False,
    thinking_level: str = "off",
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """The JSON body of one streaming request, shaped by ``compat`` (see `OpenAICompat`)."""
    compat = compat if compat is not None else OpenAICompat()
    wire_messages: list[dict[str, Any]] = []
    if system_prompt:
        role = "developer" if compat.supports_developer_role and reasoning else "system"
        wire_messages.append({"role": role, "content": system_prompt})
    tool_history = False
    for message in messages:
        converted = _convert_message(message, error, compat)
        if converted is None:
            continue
        tool_history = tool_history or converted["role"] == "tool" or "tool_calls" in converted
        if (
            compat.requires_assistant_after_tool_result
            and converted["role"] == "user"
            and wire_messages
            and wire_messages[-1]["role"] == "tool"
        ):
            wire_messages.append({"role": "assistant", "content": _BRIDGE_TEXT})
        wire_messages.append(converted)
    body: dict[str, Any] = {"model": model, "messages": wire_messages, "stream": True}
    if compat.supports_usage_in_streaming:
        body["stream_options"] = {"include_usage": True}
    if max_tokens is not None:
        body[compat.max_tokens_field] = max_tokens
    effort = compat.reasoning_effort_map.get(thinking_level)
    if reasoning and compat.supports_reasoning_effort and thinking_level != "off" and effort:
        if compat.thinking_format == "openrouter":
            body["reasoning"] = {"effort": effort}
        else:
            body["reasoning_effort"] = effort
    if not tools and compat.requires_tools_with_tool_history and tool_history:
        body["tools"] = []
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
        self,
        error: _ErrorFactory,
        compat: OpenAICompat | None = None,
        on_event: AssistantEventCallback | None = None,
    ) -> None:
        self._error = error
        self._compat = compat if compat is not None else OpenAICompat()
        self._on_event = on_event
        # pi's content blocks as they open (issue 16 streaming events): the position
        # of the open text block, and of each tool call by its stream index.
        self._blocks = 0
        self._open_text: int | None = None
        self._text_parts: list[str] = []
        self._open_thinking: int | None = None
        self._call_position: dict[int, int] = {}
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, _PartialToolCall] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, int] = {}
        self.done = False
        # The answer has begun: a text, reasoning or tool-call delta arrived. From here
        # a failure is not retried (errors.ProviderError.output_started).
        self.started = False
        self.answered = False  # the status line and headers arrived
        # Which block the stream is in, to order `content` as it arrived.
        self._order: list[str] = []

    def shown_chars(self) -> int:
        """Characters of text and reasoning received so far."""
        return sum(map(len, self.text)) + sum(map(len, self.reasoning))

    def _mark(self, kind: str) -> None:
        self.started = True
        if not self._order or self._order[-1] != kind:
            self._order.append(kind)

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
            message = _server_message(data)
            # OpenRouter and some proxies report an upstream overload this way, before
            # any output: as retryable as the same answer given as an HTTP status.
            transient = not self.started and bool(_TRANSIENT_MESSAGE.search(message))
            raise self._error(
                f"the server reported an error mid-stream: {message}",
                transient=transient,
                output_started=self.started,
            )

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
            # DeepSeek, vLLM and llama.cpp stream reasoning as ``reasoning_content``,
            # Ollama and OpenRouter as ``reasoning``.
            thought = delta.get("reasoning_content")
            if not isinstance(thought, str) or not thought:
                thought = delta.get("reasoning")
            if isinstance(thought, str) and thought:
                self._mark("thinking")
                self.reasoning.append(thought)
                if self._on_event is not None:
                    await self._thinking_event(thought)
            for call_delta in delta.get("tool_calls") or []:
                self._mark("toolCall")
                await self._apply_tool_call(call_delta)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._mark("text")
                self.text.append(content)
                if self._on_event is not None:
                    await self._text_event(content)
                if on_text_delta is not None:
                    await on_text_delta(content)

    async def _emit(self, event: dict[str, Any]) -> None:
        if self._on_event is not None:
            await self._on_event(event)

    async def _thinking_event(self, thought: str) -> None:
        if self._open_thinking is None:
            await self._close_text()
            self._open_thinking, self._blocks = self._blocks, self._blocks + 1
            await self._emit({"type": "thinking_start", "contentIndex": self._open_thinking})
        await self._emit(
            {"type": "thinking_delta", "contentIndex": self._open_thinking, "delta": thought}
        )

    async def _close_thinking(self) -> None:
        if self._open_thinking is not None:
            index, self._open_thinking = self._open_thinking, None
            await self._emit(
                {"type": "thinking_end", "contentIndex": index, "content": "".join(self.reasoning)}
            )

    async def _text_event(self, content: str) -> None:
        # A text after a tool call opens a new text block, as pi's openai-completions.
        await self._close_thinking()
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
            await self._close_thinking()
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
        if self._open_thinking is not None:
            ends.append(
                {
                    "type": "thinking_end",
                    "contentIndex": self._open_thinking,
                    "content": "".join(self.reasoning),
                }
            )
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
        if not self.done and self.finish_reason is None and self._compat.supports_finish_reason:
            # The connection closed cleanly in the middle: retryable before any output.
            raise self._error(
                "stream ended early (no finish_reason and no [DONE]): connection closed",
                transient=not self.started,
                output_started=self.started,
            )
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
        text = "".join(self.text)
        thinking = (
            [{"type": "thinking", "thinking": "".join(self.reasoning)}] if self.reasoning else []
        )
        content: list[dict[str, Any]] | None = None
        if thinking:
            # Chat Completions streams reasoning, text and tool calls as parallel fields;
            # the content keeps the order their first deltas came in.
            blocks: dict[str, list[dict[str, Any]]] = {
                "thinking": thinking,
                "text": [{"type": "text", "text": text}] if text else [],
                "toolCall": [
                    {"type": "toolCall", "id": c.id, "name": c.name, "arguments": c.arguments}
                    for c in tool_calls
                ],
            }
            content = [block for kind in dict.fromkeys(self._order) for block in blocks[kind]]
        return AssistantTurn(
            text=text,
            tool_calls=tool_calls,
            stop_reason="toolUse" if tool_calls else "stop",
            usage=dict(self.usage),
            provider="openai",
            model=model,
            api="openai-completions",
            thinking=thinking,
            content=content,
        )
