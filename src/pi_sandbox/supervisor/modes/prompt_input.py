"""The prompts of a non-interactive run, assembled from the command line as pi does.

``pi [options] [@files…] [messages…]`` (pi docs cli.md "Invocation and output"):

- each ``@path`` word attaches a file to the FIRST prompt: a text file inline as
  ``<file name="ABSOLUTE">\\nTEXT\\n</file>\\n``, an image (PNG, JPEG, GIF, WebP by its
  first bytes) as image content plus an empty ``<file name="…"></file>`` reference;
  empty files are skipped;
- piped stdin is prepended to the first prompt;
- the first prompt is stdin + file text + the first message, joined without a
  separator (pi 1.6.0 ``buildInitialMessage``); every further message is a prompt of
  its own, sent in turn after the previous one settled.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pi_sandbox.errors import UsageError

__all__ = ["MAX_FILE_ARGUMENT_BYTES", "PromptInput", "build_prompt_input", "image_mime_type"]

MAX_FILE_ARGUMENT_BYTES = 20 * 1024 * 1024
"""An ``@file`` larger than this is refused (it would not fit any context window;
reading it whole would only cost memory)."""

_IMAGE_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_mime_type(head: bytes) -> str | None:
    """The MIME type of an image pi accepts, from the file's first 12 bytes, else None."""
    for signature, mime in _IMAGE_SIGNATURES:
        if head.startswith(signature):
            return mime
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass
class PromptInput:
    """What a print/JSON run sends: ``first`` (with ``images``), then each of ``rest``.

    ``first`` is ``""`` when nothing was given (the caller reports the usage error).
    """

    first: str
    images: list[dict[str, Any]] = field(default_factory=list)
    rest: list[str] = field(default_factory=list)


def _attach(word: str, cwd: Path) -> tuple[str, dict[str, Any] | None]:
    """The text and optional image content of one ``@path`` argument.

    Raises:
        UsageError: no such file, not a regular file, unreadable, or too large.
    """
    raw = word[1:]
    path = Path(raw).expanduser()
    path = (path if path.is_absolute() else cwd / path).resolve()
    argument = f"argument {word}"
    if not path.exists():
        raise UsageError(f"{argument}: no such file: {path}")
    if not path.is_file():
        raise UsageError(f"{argument}: not a regular file: {path}")
    try:
        size = path.stat().st_size
        if size > MAX_FILE_ARGUMENT_BYTES:
            raise UsageError(
                f"{argument}: {path} is {size} bytes; at most {MAX_FILE_ARGUMENT_BYTES} "
                "can be attached"
            )
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{argument}: cannot read {path}: {exc.strerror or exc}") from exc
    if not data:
        return "", None
    mime = image_mime_type(data[:12])
    if mime is not None:
        image = {"type": "image", "mimeType": mime, "data": base64.b64encode(data).decode()}
        return f'<file name="{path}"></file>\n', image
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    return f'<file name="{path}">\n{text}\n</file>\n', None


def build_prompt_input(words: Sequence[str], stdin_text: str | None, cwd: Path) -> PromptInput:
    """Assemble the prompts from the positional ``words`` of the command line.

    Args:
        words: positional arguments in order; ``@path`` words attach files, the others
            are messages.
        stdin_text: the piped stdin, or None when stdin is a terminal (or RPC mode).
        cwd: the run's directory (``-C``); relative ``@paths`` resolve against it.

    Raises:
        UsageError: an ``@path`` cannot be attached (names the argument and the path).
    """
    file_text = ""
    images: list[dict[str, Any]] = []
    messages: list[str] = []
    for word in words:
        if word.startswith("@") and len(word) > 1:
            text, image = _attach(word, cwd)
            file_text += text
            if image is not None:
                images.append(image)
        else:
            messages.append(word)
    parts = [p for p in (stdin_text, file_text) if p]
    if messages:
        parts.append(messages.pop(0))
    return PromptInput(first="".join(parts), images=images, rest=messages)
