"""Is a provider error a context-window overflow? (issue 15: compact and retry once).

pi recognises an overflow by the text of the provider's error (pi-ai ``isContextOverflow``,
pi docs compaction.md "A provider context-overflow error ... can select one
compact-and-retry recovery attempt"). The patterns below cover the servers pi names,
each with an example of the message it sends:

- OpenAI: ``Your input exceeds the context window of this model``;
  ``This model's maximum context length is 8192 tokens. However, your messages
  resulted in 9000 tokens`` (``context_length_exceeded``)
- OpenAI-compatible proxies (LiteLLM): ``Requested token count exceeds the model's
  maximum context length of 131072 tokens``; ``Input length (265330) exceeds model's
  maximum context length (262144).``
- Anthropic: ``prompt is too long: 213462 tokens > 200000 maximum``;
  ``request_too_large`` (HTTP 413)
- llama.cpp server: ``the request exceeds the available context size, try increasing it``
- Ollama: ``prompt too long; exceeded max context length by 1200 tokens``
- vLLM: ``This model's maximum context length is 4096 tokens. However, you requested
  200 output tokens and your prompt contains at least 4000 input tokens``
- OpenRouter: ``This endpoint's maximum context length is 8192 tokens. However, you
  requested about 9000 tokens``; ``Input length 9000 exceeds the maximum allowed
  input length of 8192 tokens.``
- also Google, xAI, Groq, Together, LM Studio, GitHub Copilot, MiniMax, Kimi,
  Mistral, Bedrock and the generic ``context_length_exceeded`` / ``token limit
  exceeded`` spellings.

Rate-limit and throttling messages are never overflows, even when they mention tokens
(Bedrock's ``ThrottlingException: Too many tokens, please wait``): retrying them after a
compaction would throw context away for nothing.
"""

from __future__ import annotations

import re

__all__ = ["OVERFLOW_PATTERNS", "is_context_overflow"]

OVERFLOW_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"prompt is too long",  # Anthropic (tokens)
        r"request_too_large",  # Anthropic (bytes, HTTP 413)
        r"input is too long for requested model",  # Amazon Bedrock
        r"exceeds the context window",  # OpenAI Responses / Completions
        r"exceeds (?:the )?(?:model'?s )?maximum context length",  # LiteLLM and proxies
        r"maximum context length is \d[\d,]* tokens",  # OpenAI, OpenRouter, vLLM
        r"this model.?s maximum context length is \d+",  # vLLM
        r"requested \d+ output tokens",  # vLLM
        r"prompt contains.*\d+ input tokens",  # vLLM
        r"input token count.*exceeds the maximum",  # Google
        r"maximum prompt length is \d+",  # xAI
        r"reduce the length of the messages",  # Groq
        r"exceeds (?:the )?maximum allowed input length",  # OpenRouter / Poolside
        r"is longer than the model'?s context length",  # Together
        r"exceeds the limit of \d+",  # GitHub Copilot
        r"exceeds the available context size",  # llama.cpp server
        r"greater than the context length",  # LM Studio
        r"context window exceeds limit",  # MiniMax
        r"exceeded model token limit",  # Kimi
        r"too large for model with \d+ maximum context length",  # Mistral
        r"model_context_window_exceeded",  # z.ai
        r"prompt too long; exceeded (?:max )?context length",  # Ollama
        r"context[_ ]length[_ ]exceeded",  # generic (OpenAI's error code)
        r"too many tokens",  # generic
        r"token limit exceeded",  # generic
    )
)
"""Error texts that mean "the request does not fit the model's context window"."""

_NOT_OVERFLOW: tuple[re.Pattern[str], ...] = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"throttling",
        r"service unavailable",
        r"rate limit",
        r"too many requests",
        r"\bHTTP 429\b",
    )
)


def is_context_overflow(error: str | BaseException | None) -> bool:
    """Whether ``error`` (a provider's error text, or the exception carrying it) says
    the request overflowed the model's context window.

    Args:
        error: the message, or an exception (its ``str()`` and, when present, an
            ``error_message`` attribute are checked); None is no overflow.

    Returns:
        True for a message matching one of `OVERFLOW_PATTERNS` and none of the
        rate-limit / throttling patterns (pi-ai ``isContextOverflow``, error case).
    """
    if error is None:
        return False
    texts = [str(error)]
    extra = getattr(error, "error_message", None)
    if isinstance(extra, str):
        texts.append(extra)
    for text in texts:
        if any(p.search(text) for p in _NOT_OVERFLOW):
            continue
        if any(p.search(text) for p in OVERFLOW_PATTERNS):
            return True
    return False
