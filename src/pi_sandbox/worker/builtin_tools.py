"""Built-in tools run by the tool worker: ``read``, ``write``, ``edit``, ``bash``, ``ls``,
``grep``, ``find`` (the last two in `pi_sandbox.worker.search_tools`).

This module runs inside the worker, so it imports only the standard library, and
modules that only one tool needs (``subprocess``, ``selectors``, ``signal``,
``difflib``, ``re``) are imported inside that tool: worker start-up time is a product
metric (DESIGN §2).

Tool semantics follow ``pi``'s built-in tools (names, camelCase parameters,
truncation notices). File access is enforced by the OS sandbox, not by path checks
here (DESIGN §1), so permission errors and read-only file systems are ordinary
outcomes: they come back as error results quoting the OS error, never as
exceptions.

A tool result is a dict::

    {"content": [{"type": "text", "text": str} | {"type": "image", "data": base64,
                 "mimeType": str}], "details": dict, "is_error": bool}
"""

from __future__ import annotations

import codecs
import errno
import math
import os
import stat
import time

from pi_sandbox.protocol.edit_arguments import is_single_edit, prepare_edit_arguments
from pi_sandbox.worker.search_tools import FIND_DEFINITION, GREP_DEFINITION, format_size

TYPE_CHECKING = False
if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

__all__ = ["TOOL_DEFINITIONS", "execute_tool", "kill_running_commands"]

# Process groups of bash commands still running (their shells are session leaders,
# so pgid == pid). The worker kills them when it exits: without bwrap's PID
# namespace nothing else would, and a command could outlive the session.
_RUNNING_GROUPS: set[int] = set()


def kill_running_commands() -> None:
    """SIGKILL the process group of every bash command still running (worker exit)."""
    import signal

    for pgid in list(_RUNNING_GROUPS):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


# pi 1.6.0 truncate.js: 50 KiB and 2000 lines; ls.js: 500 entries.
_DEFAULT_MAX_BYTES = 50 * 1024
_DEFAULT_MAX_LINES = 2000
_DEFAULT_LS_LIMIT = 500
# Images inline in a tool result: the base64 must fit the supervisor's 2 MiB cap on a
# result (tool_pipeline.MAX_RESULT_BYTES) with room for the rest; pi's own cap is
# 4.5 MiB after resizing, which we do not do.
IMAGE_MAX_BASE64_BYTES = 1536 * 1024
# pi utils/mime.js reads this much to recognise an image by its magic bytes.
_IMAGE_SNIFF_BYTES = 4100

# A NUL byte in the first 8 KiB is git's heuristic for "binary"; UTF-8 text has none.
_BINARY_SNIFF_BYTES = 8192
# read() size used when scanning files: bounds memory for files with huge lines.
_READ_CHUNK = 64 * 1024
# How often the bash waiting thread looks at the cancel event and the deadline.
_POLL_S = 0.05
# After SIGTERM the process group gets this long to exit before SIGKILL.
_KILL_GRACE_S = 2.0
# Once the shell has exited, background children that still hold the output pipe get
# this long to finish; after that the call returns and their later output is lost.
_PIPE_DRAIN_GRACE_S = 0.5

TOOL_DEFINITIONS: dict[str, dict] = {
    "read": {
        "name": "read",
        "label": "read",
        "description": (
            # pi's text lists bmp too, which pi converts to PNG; we do not convert.
            "Read the contents of a file. Supports text files and images (jpg, png, gif, "
            "webp). Images are sent as attachments. For text files, output is "
            f"truncated to {_DEFAULT_MAX_LINES} lines or {_DEFAULT_MAX_BYTES // 1024}KB "
            "(whichever is hit first). Use offset/limit for large files. When you need the "
            "full file, continue with offset until complete."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Path to the file to read (relative or absolute)",
                },
                "offset": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Line number to start reading from (1-indexed)",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Maximum number of lines to read",
                },
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    },
    "write": {
        "name": "write",
        "label": "write",
        "description": (
            "Write content to a file. Creates the file if it doesn't exist, overwrites it "
            "if it does. Automatically creates parent directories."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Path to the file to write (relative or absolute)",
                },
                "content": {"type": "string", "description": "Content to write to the file"},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
    },
    "edit": {
        "name": "edit",
        "label": "edit",
        # pi 1.6.0 edit.js; the single oldText/newText form is still accepted
        # (`prepare_edit_arguments`), as pi's prepareArguments accepts it.
        "description": (
            "Edit a single file using exact text replacement. Every edits[].oldText must "
            "match a unique, non-overlapping region of the original file. If two changes "
            "affect the same block or nearby lines, merge them into one edit instead of "
            "emitting overlapping edits. Do not include large unchanged regions just to "
            "connect distant changes."
        ),
        # pi's editToolSystemPromptContribution: the system prompt teaches edits[].
        "prompt_snippet": (
            "Make precise file edits with exact text replacement, including multiple "
            "disjoint edits in one call"
        ),
        "prompt_guidelines": [
            "Use edit for targeted changes. Batch changes to one file in a single call.",
            "Each edits[].oldText must exactly and uniquely match the original file. Keep "
            "matches short and non-overlapping; merge nearby changes without including "
            "large unchanged regions.",
        ],
        "parameters": {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Path to the file to edit (relative or absolute)",
                },
                "edits": {
                    "type": "array",
                    "description": (
                        "One or more targeted replacements. Each edit is matched against "
                        "the original file, not incrementally. Do not include overlapping "
                        "or nested edits. If two changes touch the same block or nearby "
                        "lines, merge them into one edit instead."
                    ),
                    "items": {
                        "type": "object",
                        "properties": {
                            "oldText": {
                                "type": "string",
                                "description": (
                                    "Exact text for one targeted replacement. It must be "
                                    "unique in the original file and must not overlap with "
                                    "any other edits[].oldText in the same call."
                                ),
                            },
                            "newText": {
                                "type": "string",
                                "description": "Replacement text for this targeted edit.",
                            },
                        },
                        "required": ["oldText", "newText"],
                        "additionalProperties": False,
                    },
                },
            },
            "required": ["path", "edits"],
            "additionalProperties": False,
        },
    },
    "bash": {
        "name": "bash",
        "label": "bash",
        "description": (
            "Execute a bash command in the current working directory. Returns stdout and "
            "stderr merged. Output is truncated to the last "
            f"{_DEFAULT_MAX_LINES} lines or {_DEFAULT_MAX_BYTES // 1024}KB (whichever is "
            "hit first). Optionally provide a timeout in seconds."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "Bash command to execute"},
                "timeout": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "Timeout in seconds (optional)",
                },
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    },
    "ls": {
        "name": "ls",
        "label": "ls",
        "description": (
            "List directory contents. Returns entries sorted alphabetically, with '/' "
            "suffix for directories. Includes dotfiles. Output is truncated to "
            f"{_DEFAULT_LS_LIMIT} entries or {_DEFAULT_MAX_BYTES // 1024}KB (whichever is "
            "hit first)."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Directory to list (default: current directory)",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": (
                        f"Maximum number of entries to return (default: {_DEFAULT_LS_LIMIT})"
                    ),
                },
            },
            "additionalProperties": False,
        },
    },
    "grep": GREP_DEFINITION,
    "find": FIND_DEFINITION,
}


def execute_tool(
    name: str,
    params: dict,
    *,
    cwd: str,
    cancel: threading.Event,
    on_update: Callable[[dict], None] | None = None,
    default_timeout_s: float = 300.0,
    max_output_bytes: int = _DEFAULT_MAX_BYTES,
    max_output_lines: int = _DEFAULT_MAX_LINES,
    exclusions: list[str] | tuple[str, ...] = (),
) -> dict:
    """Run one built-in tool to completion in the calling thread.

    Args:
        name: A key of ``TOOL_DEFINITIONS``.
        params: The tool's arguments, already validated against its schema by the
            supervisor; odd values still give an error result, not a crash.
        cwd: Absolute working directory; relative paths and ``bash`` resolve against it.
        cancel: Set from another thread to abort. ``bash`` polls it every 50 ms and
            kills the command's process group; the file tools check it before they
            touch anything (and ``read`` while scanning a large file).
        on_update: Called from the calling thread with ``{"text": chunk}`` for each
            chunk of ``bash`` output as it arrives. Exceptions it raises propagate
            (after the command's process group is killed).
        default_timeout_s: ``bash`` timeout in seconds when the call gives none.
        max_output_bytes: Cap on the UTF-8 bytes of text returned (``read`` keeps the
            head, ``bash`` the tail).
        max_output_lines: Cap on the lines of text returned.
        exclusions: for ``grep``, ``find`` and ``ls``: regex sources (fullmatch) of
            the paths a policy ``path`` rule covers, from the supervisor
            (`pi_sandbox.policies.path_exclusions`); such paths are neither read nor
            listed (issue 17 §6), and ``details["hiddenByPolicy"]`` counts them.

    Returns:
        ``{"content": [{"type": "text", "text": str}, ...], "details": dict,
        "is_error": bool}``; ``read`` of an image adds an
        ``{"type": "image", "data": base64, "mimeType": str}`` block. Tool-level failures (missing file, permission denied,
        non-zero exit, timeout, abort) are results with ``is_error`` True and a message
        naming the path or command outcome. ``details`` per tool is documented on the
        tool's implementation function below.

    Raises:
        ValueError: ``name`` is not a built-in tool.
    """
    try:
        run = _TOOLS[name]
    except KeyError:
        raise ValueError(
            f"unknown built-in tool {name!r}; expected one of {', '.join(sorted(_TOOLS))}"
        ) from None
    ctx = _Context(
        cwd=os.path.abspath(cwd),
        cancel=cancel,
        on_update=on_update,
        default_timeout_s=default_timeout_s,
        max_bytes=max(1, int(max_output_bytes)),
        max_lines=max(1, int(max_output_lines)),
        exclusions=tuple(exclusions or ()),
    )
    if not isinstance(params, dict):
        return _error(f"{name}: parameters must be an object, got {type(params).__name__}")
    try:
        return run(params, ctx)
    except _ToolError as exc:
        return _error(exc.message, exc.details)
    except OSError as exc:
        # Each tool translates the OS errors it expects; this is the backstop that keeps
        # a sandbox denial nobody anticipated a result rather than a worker-level error.
        return _error(f"{name} failed: {_describe_os_error(exc)}")


class _Context:
    """Per-call settings handed to each tool implementation."""

    __slots__ = (
        "cancel",
        "cwd",
        "default_timeout_s",
        "exclusions",
        "max_bytes",
        "max_lines",
        "on_update",
    )

    def __init__(
        self, *, cwd, cancel, on_update, default_timeout_s, max_bytes, max_lines, exclusions=()
    ):
        self.exclusions = exclusions
        self.cwd = cwd
        self.cancel = cancel
        self.on_update = on_update
        self.default_timeout_s = default_timeout_s
        self.max_bytes = max_bytes
        self.max_lines = max_lines


class _ToolError(Exception):
    """A tool-level failure; ``execute_tool`` turns it into an error result."""

    def __init__(self, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


def _result(text: str, details: dict, *, is_error: bool = False) -> dict:
    return {"content": [{"type": "text", "text": text}], "details": details, "is_error": is_error}


def _error(text: str, details: dict | None = None) -> dict:
    return _result(text, details or {}, is_error=True)


def _describe_os_error(exc: OSError) -> str:
    """``"Read-only file system [EROFS]"``: strerror plus the symbolic errno."""
    if exc.errno is None:
        return str(exc)
    code = errno.errorcode.get(exc.errno, str(exc.errno))
    return f"{exc.strerror or os.strerror(exc.errno)} [{code}]"


def _check_not_cancelled(ctx: _Context) -> None:
    if ctx.cancel.is_set():
        raise _ToolError("Operation aborted", {"aborted": True})


# ---------------------------------------------------------------------------
# Parameters


def _short_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _str_param(params: dict, key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str):
        raise _ToolError(f"Parameter {key!r} must be a string, got {_short_repr(value)}")
    return value


def _positive_int_param(params: dict, key: str, default: int | None) -> int | None:
    value = params.get(key)
    if value is None:
        return default
    # JSON numbers may arrive as floats (3.0); bool is an int subclass but never meant.
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value == int(value)
        and value >= 1
    )
    if not ok:
        raise _ToolError(f"Parameter {key!r} must be a positive integer, got {_short_repr(value)}")
    return int(value)


def _path_param(params: dict, key: str, ctx: _Context, default: str | None = None) -> str:
    """Resolve a path parameter to an absolute, normalised path.

    ``~`` expands; relative paths resolve against ``ctx.cwd``. Normalisation is
    lexical (like ``pi``'s ``path.resolve``); symlinks are left for the OS to follow.
    """
    raw = params.get(key)
    if raw in (None, "") and default is not None:
        raw = default
    if not isinstance(raw, str) or not raw:
        raise _ToolError(
            f"Parameter {key!r} must be a non-empty path string, got {_short_repr(raw)}"
        )
    if "\0" in raw:
        raise _ToolError(f"Path {raw!r} contains a NUL byte")
    return os.path.normpath(os.path.join(ctx.cwd, os.path.expanduser(raw)))


def _stat_existing(path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise _ToolError(f"File not found: {path}", {"path": path})
    except NotADirectoryError:
        raise _ToolError(f"File not found: {path} (a parent is not a directory)", {"path": path})
    except OSError as exc:
        raise _ToolError(f"Could not access {path}: {_describe_os_error(exc)}", {"path": path})


def _require_regular_file(path: str, st: os.stat_result, dir_hint: str = "") -> None:
    if stat.S_ISDIR(st.st_mode):
        raise _ToolError(f"{path} is a directory, not a file.{dir_hint}", {"path": path})
    if not stat.S_ISREG(st.st_mode):
        # FIFOs block forever and devices like /dev/zero never end.
        raise _ToolError(f"{path} is not a regular file", {"path": path})


# ---------------------------------------------------------------------------
# read


def _read(params: dict, ctx: _Context) -> dict:
    """``read``: a window of a text file.

    details: ``{"path": abs, "lines": shown, "total_lines": n, "truncated": bool}``;
    ``truncated`` is True when ``max_output_lines``/``max_output_bytes`` cut the
    window, not when the caller's own ``limit`` did.
    """
    path = _path_param(params, "path", ctx)
    offset = _positive_int_param(params, "offset", 1)
    limit = _positive_int_param(params, "limit", None)
    _check_not_cancelled(ctx)
    _require_regular_file(path, _stat_existing(path), " Use ls to list its entries.")
    try:
        with open(path, "rb") as f:
            head = f.read(max(_BINARY_SNIFF_BYTES, _IMAGE_SNIFF_BYTES))
            mime = image_mime_type(head[:_IMAGE_SNIFF_BYTES])
            if mime is not None:
                return _read_image(f, path, mime)
            head = head[:_BINARY_SNIFF_BYTES]
            if b"\0" in head:
                size = os.fstat(f.fileno()).st_size
                raise _ToolError(
                    f"Cannot read {path}: binary file ({size} bytes)",
                    {"path": path, "binary": True, "size": size},
                )
            f.seek(0)
            window = _scan_window(f, offset, limit, ctx)
    except OSError as exc:
        raise _ToolError(f"Could not read {path}: {_describe_os_error(exc)}", {"path": path})

    total = window.total_lines
    if offset > max(total, 1):
        raise _ToolError(
            f"Offset {offset} is beyond end of file {path} ({total} lines total)",
            {"path": path, "total_lines": total},
        )
    shown = len(window.lines)
    first, last = offset, offset + shown - 1
    if offset == 1 and window.lines and window.lines[0].startswith(codecs.BOM_UTF8):
        # edit keeps the BOM by itself, so oldText copied from here must not contain it.
        window.lines[0] = window.lines[0][len(codecs.BOM_UTF8) :]
    cut = window.first_line_size is not None
    text = "\n".join(_decode_line(line, cut=cut) for line in window.lines)
    if total == 0:
        text = "(empty file)"
    truncated = window.stop in ("lines", "bytes")
    if window.first_line_size is not None:
        more = (
            f"Use offset={offset + 1} to continue with the next line, or "
            if total > offset
            else "Use "
        )
        text += (
            f"\n\n[Line {offset} is {window.first_line_size} bytes; showing its first "
            f"{ctx.max_bytes} bytes ({ctx.max_bytes}-byte limit). {more}bash for the rest of "
            f"it, e.g. sed -n '{offset}p' {_shell_quote(path)} | cut -b {ctx.max_bytes + 1}-]"
        )
    elif truncated:
        why = f" ({format_size(ctx.max_bytes)} limit)" if window.stop == "bytes" else ""
        text += (
            f"\n\n[Showing lines {first}-{last} of {total}{why}. "
            f"Use offset={last + 1} to continue.]"
        )
    elif window.stop == "limit":
        text += f"\n\n[{total - last} more lines in file. Use offset={last + 1} to continue.]"
    return _result(
        text, {"path": path, "lines": shown, "total_lines": total, "truncated": truncated}
    )


def image_mime_type(head: bytes) -> str | None:
    """The image type ``read`` recognises by magic bytes, as pi 1.6.0's utils/mime.js:
    ``image/png`` (not animated), ``image/jpeg``, ``image/gif``, ``image/webp``,
    ``image/bmp``; None for anything else. ``head``: the file's first 4100 bytes."""
    if head.startswith(b"\xff\xd8\xff"):
        return None if head[3:4] == b"\xf7" else "image/jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        if len(head) < 16 or head[8:12] != b"\x00\x00\x00\x0d" or head[12:16] != b"IHDR":
            return None
        offset = 8
        while offset + 8 <= len(head):  # an acTL chunk before IDAT: an animated PNG
            kind = head[offset + 4 : offset + 8]
            if kind == b"acTL":
                return None
            if kind == b"IDAT":
                break
            following = offset + 12 + int.from_bytes(head[offset : offset + 4], "big")
            if following <= offset or following > len(head):
                break
            offset = following
        return "image/png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:2] == b"BM" and len(head) >= 26:
        size = int.from_bytes(head[2:6], "little")
        data_offset = int.from_bytes(head[10:14], "little")
        dib = int.from_bytes(head[14:18], "little")
        if (
            (size == 0 or size >= 26)
            and data_offset >= 14 + dib
            and dib in (12, 40, 52, 56, 64, 108, 124)
        ):
            return "image/bmp"
    return None


def _read_image(f, path: str, mime: str) -> dict:
    """``read`` of an image: pi's note ``Read image file [mime]`` and the image block.

    We do not resize or convert (pi does, with a WASM image library): a BMP, which pi
    converts to PNG, and an image whose base64 would exceed ``IMAGE_MAX_BASE64_BYTES``
    get pi's "Image omitted" note instead of the image. details: ``{"path", "mimeType",
    "bytes", "omitted"}``.
    """
    import base64

    size = os.fstat(f.fileno()).st_size
    details = {"path": path, "mimeType": mime, "bytes": size, "omitted": True}
    if mime == "image/bmp":
        note = "[Image omitted: could not be converted to a supported inline image format.]"
        return _result(f"Read image file [{mime}]\n{note}", details)
    if (size + 2) // 3 * 4 > IMAGE_MAX_BASE64_BYTES:
        note = (
            "[Image omitted: could not be resized below the inline image size limit.] "
            f"(pi-sandbox does not resize images; this one is {format_size(size)}, "
            f"the limit is {format_size(IMAGE_MAX_BASE64_BYTES // 4 * 3)})"
        )
        return _result(f"Read image file [{mime}]\n{note}", details)
    f.seek(0)
    data = f.read(size + 1)
    if (len(data) + 2) // 3 * 4 > IMAGE_MAX_BASE64_BYTES:  # it grew while we looked
        note = "[Image omitted: could not be resized below the inline image size limit.]"
        return _result(f"Read image file [{mime}]\n{note}", details)
    details.update(bytes=len(data), omitted=False)
    return {
        "content": [
            {"type": "text", "text": f"Read image file [{mime}]"},
            {"type": "image", "data": base64.b64encode(data).decode("ascii"), "mimeType": mime},
        ],
        "details": details,
        "is_error": False,
    }


class _Window:
    __slots__ = ("first_line_size", "lines", "stop", "total_lines")

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.total_lines = 0
        # "lines" / "bytes": our caps cut the window; "limit": the caller's limit did.
        self.stop: str | None = None
        # Set when the first window line alone is over the byte cap and was cut.
        self.first_line_size: int | None = None


def _scan_window(f, offset: int, limit: int | None, ctx: _Context) -> _Window:
    """Collect lines ``offset..`` of ``f`` within the caps and count all lines.

    Lines are counted like ``str.splitlines``: ``"a\\nb\\n"`` and ``"a\\nb"`` both have
    2 lines, an empty file 0. Memory stays bounded by the byte cap plus one chunk.
    """
    window = _Window()
    max_lines = ctx.max_lines if limit is None else min(limit, ctx.max_lines)
    stop_for_lines = "limit" if limit is not None and limit <= ctx.max_lines else "lines"
    used = 0
    for data, size in _iter_lines(f, ctx.max_bytes + 1):
        window.total_lines += 1
        if window.total_lines < offset:
            continue
        if len(window.lines) >= max_lines:
            window.stop = stop_for_lines
        else:
            cost = size + (1 if window.lines else 0)
            if used + cost <= ctx.max_bytes:
                window.lines.append(data)
                used += cost
                continue
            window.stop = "bytes"
            if not window.lines:
                window.lines.append(data[: ctx.max_bytes])
                window.first_line_size = size
        # The generator stops at a line boundary, so the rest can be counted in bulk.
        window.total_lines += _count_remaining_lines(f, ctx)
        break
    return window


def _iter_lines(f, cap: int):
    """Yield ``(line_without_newline[:cap], full_length_in_bytes)`` for each line."""
    buf = bytearray()
    size = 0
    while True:
        piece = f.readline(_READ_CHUNK)
        if not piece:
            if size:
                yield bytes(buf), size
            return
        ends = piece.endswith(b"\n")
        if ends:
            piece = piece[:-1]
        size += len(piece)
        room = cap - len(buf)
        if room > 0:
            buf += piece[:room]
        if ends:
            yield bytes(buf), size
            buf = bytearray()
            size = 0


def _count_remaining_lines(f, ctx: _Context) -> int:
    count = 0
    last = b"\n"
    while chunk := f.read(1 << 20):
        _check_not_cancelled(ctx)
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (last != b"\n")


def _decode_line(data: bytes, *, cut: bool = False) -> str:
    if data.endswith(b"\r") and not cut:
        data = data[:-1]
    if cut:
        # final=False drops a multi-byte character the byte cap split in half.
        return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)
    return data.decode("utf-8", "replace")


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# ---------------------------------------------------------------------------
# write


def _write(params: dict, ctx: _Context) -> dict:
    """``write``: create or overwrite a file, creating parent directories.

    details: ``{"path": abs, "bytes": n, "created": bool}``.
    """
    path = _path_param(params, "path", ctx)
    content = _str_param(params, "content")
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _ToolError(f"Cannot write {path}: content is not valid Unicode ({exc.reason})")
    _check_not_cancelled(ctx)
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None:
        _require_regular_file(path, st)
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise _ToolError(
            f"Could not create directory {parent} for {path}: {_describe_os_error(exc)}",
            {"path": path},
        )
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as exc:
        raise _ToolError(f"Could not write {path}: {_describe_os_error(exc)}", {"path": path})
    return _result(
        f"Wrote {len(data)} bytes to {path}",
        {"path": path, "bytes": len(data), "created": st is None},
    )


# ---------------------------------------------------------------------------
# edit


def _edit(params: dict, ctx: _Context) -> dict:
    """``edit``: replace each ``edits[i].oldText`` with its ``newText`` (pi 1.6.0).

    Semantics (pi's edit-diff.js ``applyEditsToNormalizedContent``): every oldText is
    matched against the ORIGINAL file, not incrementally; each must occur exactly once;
    no two may overlap. All-or-nothing: any failing edit fails the call, naming it
    (``edits[1]``), and the file is not written. The single ``oldText``/``newText`` form
    is one edit. Unlike pi there is no fuzzy matching (smart quotes, trailing spaces):
    the text must match exactly.

    Line endings: a ``\\n`` in ``oldText`` also matches ``\\r\\n`` in the file, and
    ``newText`` takes the line ending of the text it replaces, so CRLF and mixed files
    keep their endings on every line. A UTF-8 BOM is kept. The new content is computed
    in full before the file is opened, and the file is rewritten in place (same inode,
    permissions and hard links); if that write fails the original bytes are written back.

    details: ``{"path": abs, "diff": unified diff str, "patch": the same (pi's name),
    "first_changed_line": int, "firstChangedLine": int, "edits": n}`` (lines 1-based,
    in the new file).
    """
    import itertools
    import re

    args = prepare_edit_arguments(params)
    path = _path_param(args, "path", ctx)
    shown_path = args.get("path") if isinstance(args.get("path"), str) else path
    edits = args.get("edits")
    if not isinstance(edits, list) or not edits:
        raise _ToolError(
            "Edit tool input is invalid. edits must contain at least one replacement "
            "(or give oldText and newText)."
        )
    total = len(edits)
    for index, edit in enumerate(edits):
        if not is_single_edit(edit):
            raise _ToolError(
                f"edits[{index}] must be an object with string oldText and newText, "
                f"got {_short_repr(edit)}"
            )
        if not edit["oldText"]:
            where = "oldText" if total == 1 else f"edits[{index}].oldText"
            raise _ToolError(f"{where} must not be empty in {path}.")
    _check_not_cancelled(ctx)
    _require_regular_file(path, _stat_existing(path))
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise _ToolError(f"Could not read {path}: {_describe_os_error(exc)}", {"path": path})
    bom = codecs.BOM_UTF8 if raw.startswith(codecs.BOM_UTF8) else b""
    try:
        text = raw[len(bom) :].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _ToolError(
            f"Cannot edit {path}: it is not valid UTF-8 (byte {exc.start + len(bom)}); "
            "edit supports UTF-8 text files only",
            {"path": path},
        )

    spans: list[tuple[int, int, int, str]] = []  # (start, end, edit index, replacement)
    for index, edit in enumerate(edits):
        old_lf = edit["oldText"].replace("\r\n", "\n")
        pattern = re.compile(r"\r?\n".join(re.escape(part) for part in old_lf.split("\n")))
        matches = pattern.finditer(text)
        match = next(matches, None)
        if match is None:
            if total == 1:
                message = (
                    f"Could not find the exact text in {path}. The old text must match "
                    "exactly including all whitespace and newlines."
                )
            else:
                message = (
                    f"Could not find edits[{index}] in {path}. The oldText must match "
                    "exactly including all whitespace and newlines."
                )
            raise _ToolError(message, {"path": path, "failed_edit": index})
        extra = sum(1 for _ in matches)
        if extra:
            if total == 1:
                message = (
                    f"Found {extra + 1} occurrences of the text in {path}. The text must be "
                    "unique. Please provide more context to make it unique."
                )
            else:
                message = (
                    f"Found {extra + 1} occurrences of edits[{index}] in {path}. Each oldText "
                    "must be unique. Please provide more context to make it unique."
                )
            raise _ToolError(
                message, {"path": path, "failed_edit": index, "occurrences": extra + 1}
            )
        newline = _newline_of(match.group(), text)
        replacement = edit["newText"].replace("\r\n", "\n").replace("\n", newline)
        spans.append((match.start(), match.end(), index, replacement))
    spans.sort()
    for previous, current in itertools.pairwise(spans):
        if previous[1] > current[0]:
            raise _ToolError(
                f"edits[{previous[2]}] and edits[{current[2]}] overlap in {path}. Merge them "
                "into one edit or target disjoint regions.",
                {"path": path, "failed_edit": current[2]},
            )
    pieces: list[str] = []
    position = 0
    for start, end, _, replacement in spans:
        pieces.append(text[position:start])
        pieces.append(replacement)
        position = end
    pieces.append(text[position:])
    new_content = "".join(pieces)
    if new_content == text:
        if total == 1:
            message = (
                f"No changes made to {path}. The replacement produced identical content. "
                "This might indicate an issue with special characters or the text not "
                "existing as expected."
            )
        else:
            message = f"No changes made to {path}. The replacements produced identical content."
        raise _ToolError(message, {"path": path})
    _check_not_cancelled(ctx)
    try:
        _rewrite_in_place(path, bom + new_content.encode("utf-8"), raw)
    except OSError as exc:
        raise _ToolError(f"Could not write {path}: {_describe_os_error(exc)}", {"path": path})

    first_changed, diff = _unified_diff(path, text, new_content)
    return _result(
        f"Successfully replaced {total} block(s) in {shown_path}.",
        {
            "path": path,
            "diff": diff,
            "patch": diff,
            "first_changed_line": first_changed,
            "firstChangedLine": first_changed,
            "edits": total,
        },
    )


def _unified_diff(path: str, old: str, new: str) -> tuple[int, str]:
    """``(first_changed_line, diff)`` between two versions of a file, shown with LF.

    One edit changes one region, so only that region plus context goes through
    difflib (cheap on large files) and the hunk headers are shifted back to file line
    numbers.
    """
    import difflib
    import re

    a = old.replace("\r\n", "\n").splitlines()
    b = new.replace("\r\n", "\n").splitlines()
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(a), len(b)) - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    context = 3
    start = max(0, prefix - context)
    a_end = min(len(a), len(a) - suffix + context)
    b_end = min(len(b), len(b) - suffix + context)
    lines = list(
        difflib.unified_diff(
            a[start:a_end], b[start:b_end], fromfile=path, tofile=path, lineterm="", n=context
        )
    )

    def shift(match: re.Match) -> str:
        return f"{match[1]}{int(match[2]) + start}"

    hunk_header = re.compile(r"^@@ .* @@$")
    number = re.compile(r"([-+])(\d+)")
    lines = [number.sub(shift, line) if hunk_header.match(line) else line for line in lines]
    first_changed = max(1, min(prefix + 1, len(b)))
    return first_changed, "\n".join(lines)


def _newline_of(matched: str, text: str) -> str:
    """The line ending the replacement should use: the matched text's, else the file's."""
    index = matched.find("\n")
    if index >= 0:
        return "\r\n" if index > 0 and matched[index - 1] == "\r" else "\n"
    crlf = text.count("\r\n")
    return "\r\n" if crlf > text.count("\n") - crlf else "\n"


def _rewrite_in_place(path: str, new: bytes, old: bytes) -> None:
    # No O_TRUNC: a failure at open (EACCES, EROFS) leaves the file untouched, and a
    # failure while writing (ENOSPC, EFBIG from the sandbox's RLIMIT_FSIZE) is undone
    # by writing the old bytes back, which fit where they were before.
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        try:
            _pwrite_all(fd, new)
            os.ftruncate(fd, len(new))
        except OSError:
            try:
                _pwrite_all(fd, old)
                os.ftruncate(fd, len(old))
            except OSError:
                pass  # the first error is the one worth reporting
            raise
    finally:
        os.close(fd)


def _pwrite_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    written = 0
    while written < len(view):
        written += os.pwrite(fd, view[written:], written)


# ---------------------------------------------------------------------------
# bash


def _bash(params: dict, ctx: _Context) -> dict:
    """``bash``: run ``bash -c command`` in its own session, stdout and stderr merged.

    The command runs in ``ctx.cwd`` with stdin ``/dev/null``, as the leader of a new
    session and process group. On timeout or cancel the whole group gets SIGTERM, then
    SIGKILL after 2 s, and the shell is reaped. On a normal exit nothing is killed;
    background children still holding the output pipe get 0.5 s, then the call
    returns without their later output.

    details: ``{"exit_code": int | None, "timed_out": bool, "aborted": bool,
    "truncated": bool}``; ``exit_code`` is None when the command was timed out or
    aborted, and negative (``-signum``) when the shell itself died of a signal.
    """
    command = _str_param(params, "command")
    timeout = params.get("timeout")
    if timeout is None:
        timeout = ctx.default_timeout_s
    elif (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise _ToolError(
            f"Parameter 'timeout' must be a number of seconds > 0, got {_short_repr(timeout)}"
        )
    details: dict = {"exit_code": None, "timed_out": False, "aborted": False, "truncated": False}
    if ctx.cancel.is_set():
        return _error("Command aborted", {**details, "aborted": True})
    if not os.path.isdir(ctx.cwd):
        raise _ToolError(f"Working directory does not exist: {ctx.cwd}", details)

    import subprocess

    from pi_sandbox.worker import confinement

    ceiling = confinement.tool_timeout_s()
    if ceiling is not None and timeout > ceiling:
        timeout = ceiling  # the policy's wall-clock deadline per tool call wins
    script = command
    cpu_seconds = confinement.command_cpu_seconds()
    if cpu_seconds is not None:
        # RLIMIT_CPU for the command and everything it starts, set by the shell itself
        # before the command runs (soft and hard: it cannot be raised again). On the
        # same line, so the command's line numbers are unchanged. A preexec_fn would
        # do the same at twice the spawn cost (fork instead of vfork).
        # Soft limit: SIGXCPU, which names the cause; hard, a second later: SIGKILL.
        soft = int(cpu_seconds)
        script = f"ulimit -St {soft} && ulimit -Ht {soft + 1} || exit 126; {command}"
    shell = _find_shell()
    try:
        proc = subprocess.Popen(
            [shell, "-c", script],
            cwd=ctx.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        raise _ToolError(f"Could not start {shell}: {_describe_os_error(exc)}", details)

    _RUNNING_GROUPS.add(proc.pid)
    tail = _OutputTail(ctx.max_bytes, ctx.max_lines)
    try:
        outcome, pipe_abandoned = _pump_output(proc, tail, ctx, time.monotonic() + timeout)
    finally:
        if proc.poll() is None:
            # Only reached when on_update (or something below it) raised.
            _kill_process_group(proc)
        proc.stdout.close()
        _RUNNING_GROUPS.discard(proc.pid)

    limit_hit = outcome == "exited" and confinement.process_limit_nearly_reached()
    if limit_hit:
        # Background processes filling the sandbox's process limit (a fork bomb)
        # would leave no room for the next command: take the command's group down.
        _kill_process_group(proc)
    output, notice = tail.finish()
    details["truncated"] = notice is not None
    parts = [output] if output else []
    if notice:
        parts.append(notice)
    if limit_hit:
        parts.append(
            "[The sandbox's process limit was reached; the command's remaining "
            "background processes were stopped]"
        )
    if pipe_abandoned:
        parts.append(
            "[Background processes still held the output open after the shell exited; "
            "their later output was not captured]"
        )
    if outcome == "aborted":
        details["aborted"] = True
        parts.append("Command aborted")
    elif outcome == "timed_out":
        details["timed_out"] = True
        parts.append(f"Command timed out after {timeout:g} seconds")
    else:
        details["exit_code"] = code = proc.returncode
        if code < 0:
            parts.append(f"Command was killed by signal {_signal_name(-code)}{_limit_hint(-code)}")
        elif code > 0:
            parts.append(f"Command exited with code {code}")
    is_error = outcome != "exited" or proc.returncode != 0
    return _result("\n\n".join(parts) or "(no output)", details, is_error=is_error)


def _limit_hint(signum: int) -> str:
    """Why a sandbox limit signal killed a command, for the model."""
    import signal

    from pi_sandbox.worker import confinement

    if signum == signal.SIGXCPU:
        limit = confinement.command_cpu_seconds()
        return f" (the sandbox's CPU time limit of {limit} s per command was reached)"
    if signum == signal.SIGXFSZ:
        return " (the sandbox's file size limit was reached)"
    return ""


def _find_shell() -> str:
    if os.access("/bin/bash", os.X_OK):
        return "/bin/bash"
    import shutil

    return shutil.which("bash") or shutil.which("sh") or "/bin/sh"


def _pump_output(proc, tail: _OutputTail, ctx: _Context, deadline: float) -> tuple[str, bool]:
    """Read output until the shell exits and the pipe closes, a timeout, or a cancel.

    On timeout or cancel the process group is killed here, before the last of the
    output is drained.

    Returns:
        ``(outcome, pipe_abandoned)`` with outcome ``"exited"``, ``"timed_out"`` or
        ``"aborted"``; ``pipe_abandoned`` is True when the shell exited but background
        children kept the pipe open past the drain grace.
    """
    import selectors
    import subprocess

    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    fd = proc.stdout.fileno()
    eof = False
    exited_at: float | None = None

    def emit(text: str) -> None:
        if text:
            tail.feed(text)
            if ctx.on_update is not None:
                ctx.on_update({"text": text})

    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            if not eof:
                if selector.select(_POLL_S):
                    data = os.read(fd, _READ_CHUNK)
                    if data:
                        emit(decoder.decode(data))
                    else:
                        eof = True
                        selector.unregister(fd)
            elif proc.poll() is None:
                # The shell closed its output but is still running. Popen.wait polls with
                # a backoff that starts below a millisecond, so a shell that is about to
                # exit is reaped at once instead of after a whole _POLL_S.
                try:
                    proc.wait(timeout=_POLL_S)
                except subprocess.TimeoutExpired:
                    pass
            now = time.monotonic()
            stopped = "aborted" if ctx.cancel.is_set() else "timed_out" if now >= deadline else None
            if stopped:
                _kill_process_group(proc)
                # Keep what the command wrote just before it died; the bound guards
                # against a writer that escaped the group (setsid) and never stops.
                for _ in range(16):
                    if eof or not selector.select(0):
                        break
                    data = os.read(fd, _READ_CHUNK)
                    eof = not data
                    emit(decoder.decode(data))
                emit(decoder.decode(b"", final=True))
                return stopped, False
            if proc.poll() is not None:
                if eof:
                    emit(decoder.decode(b"", final=True))
                    return "exited", False
                if exited_at is None:
                    exited_at = now
                elif now - exited_at >= _PIPE_DRAIN_GRACE_S:
                    emit(decoder.decode(b"", final=True))
                    return "exited", True


def _kill_process_group(proc) -> None:
    """SIGTERM the process group, SIGKILL it after a grace, and reap the shell."""
    import signal
    import subprocess

    # start_new_session made the shell a session and group leader: pgid == pid. The id
    # stays reserved while any member lives, so it cannot name someone else's group.
    pgid = proc.pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        if _wait_group_gone(proc, pgid, _KILL_GRACE_S):
            break
    try:
        proc.wait(timeout=_KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass  # stuck in uninterruptible sleep; SIGKILL lands when it wakes


def _wait_group_gone(proc, pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        proc.poll()  # reap the shell so it stops counting as a member
        if not _group_has_live_members(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def _group_has_live_members(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is still running (zombies do not count).

    Orphaned children of the killed shell are reparented to PID 1 and stay zombies
    until it reaps them, which some inits do only every second or so; a zombie holds
    no file descriptors and no memory, so waiting for it would only delay SIGKILL and
    the result.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # a member we may not signal: nothing more we can do to it
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return True  # no /proc: trust killpg
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                # "pid (comm) state ppid pgrp ..."; comm may contain spaces and parens.
                fields = f.read().rpartition(b")")[2].split()
        except OSError:
            continue  # exited while we looked
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid:
            return True
    return False


def _signal_name(signum: int) -> str:
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


class _OutputTail:
    """Keeps the tail of a stream of text within byte and line caps.

    Memory is bounded by about four times the byte cap however long the stream is.
    """

    def __init__(self, max_bytes: int, max_lines: int) -> None:
        self._max_bytes = max_bytes
        self._max_lines = max_lines
        self._buf = ""
        self._dropped = False
        self._newlines = 0
        self._fed_any = False

    def feed(self, text: str) -> None:
        self._fed_any = True
        self._newlines += text.count("\n")
        self._buf += text
        # Each kept character is at least one byte, so 2 * max_bytes characters hold
        # more than the byte cap: the possibly partial first line is never selected.
        if len(self._buf) > 4 * self._max_bytes:
            self._buf = self._buf[-2 * self._max_bytes :]
            self._dropped = True

    def finish(self) -> tuple[str, str | None]:
        """Returns ``(kept_text, notice)``; notice is None when nothing was cut."""
        if not self._fed_any:
            return "", None
        ends_with_newline = self._buf.endswith("\n")
        total = self._newlines + (0 if ends_with_newline else 1)
        body = self._buf[:-1] if ends_with_newline else self._buf
        lines = body.split("\n")
        kept: list[str] = []
        used = 0
        for line in reversed(lines):
            if len(kept) >= self._max_lines:
                break
            cost = len(line.encode("utf-8")) + (1 if kept else 0)
            if used + cost > self._max_bytes:
                break
            kept.append(line)
            used += cost
        cut_line = False
        if not kept:
            last = lines[-1].encode("utf-8")[-self._max_bytes :]
            # "ignore" drops a character the cut split in half.
            kept.append(last.decode("utf-8", "ignore"))
            cut_line = True
        kept.reverse()
        text = "\n".join(kept)
        if len(kept) >= total and not cut_line:
            return text, None
        if cut_line:
            why = f" (the last line cut to its final {self._max_bytes} bytes)"
        elif len(kept) < self._max_lines:
            why = f" ({self._max_bytes}-byte limit)"
        else:
            why = ""
        return text, f"[Output truncated: showing last {len(kept)} lines of {total}{why}]"


# ---------------------------------------------------------------------------
# ls


def _ls(params: dict, ctx: _Context) -> dict:
    """``ls``: directory entries sorted case-insensitively, directories suffixed ``/``.

    Symlinks to directories count as directories. Dotfiles are listed. Notices are
    pi 1.6.0's (ls.js): ``[N entries limit reached. Use limit=2N for more]`` and
    ``[50.0KB limit reached]``. Entries a policy ``path`` rule covers are left out
    (``ctx.exclusions``). details: ``{"path": abs, "entries": shown,
    "total_entries": n, "truncated": bool}`` plus pi's ``entryLimitReached`` and our
    ``hiddenByPolicy`` when they apply.
    """
    path = _path_param(params, "path", ctx, default=".")
    limit = _positive_int_param(params, "limit", _DEFAULT_LS_LIMIT)
    _check_not_cancelled(ctx)
    hidden = _path_filter(ctx)
    if hidden and hidden.hides(path):
        raise _ToolError(f"Path not found: {path}", {"path": path})
    try:
        with os.scandir(path) as it:
            entries = sorted(it, key=lambda e: (e.name.casefold(), e.name))
        if hidden:
            entries = [e for e in entries if not hidden.hides(e.path)]
    except FileNotFoundError:
        raise _ToolError(f"Path not found: {path}", {"path": path})
    except NotADirectoryError:
        raise _ToolError(f"Not a directory: {path}", {"path": path})
    except OSError as exc:
        raise _ToolError(f"Could not list {path}: {_describe_os_error(exc)}", {"path": path})

    total = len(entries)
    shown: list[str] = []
    used = 0
    byte_limited = False
    for entry in entries[:limit]:
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        # Undecodable bytes in a name become U+FFFD: the result must be valid UTF-8.
        name = os.fsencode(entry.name).decode("utf-8", "replace") + ("/" if is_dir else "")
        cost = len(name.encode("utf-8")) + (1 if shown else 0)
        if used + cost > ctx.max_bytes:
            byte_limited = True
            break
        shown.append(name)
        used += cost
    text = "\n".join(shown) if entries else "(empty directory)"
    notices = []
    details = {
        "path": path,
        "entries": len(shown),
        "total_entries": total,
        "truncated": len(shown) < total,
    }
    if total > limit:
        notices.append(f"{limit} entries limit reached. Use limit={limit * 2} for more")
        details["entryLimitReached"] = limit
    if byte_limited:
        notices.append(f"{format_size(ctx.max_bytes)} limit reached")
    if hidden is not None and hidden.hidden:
        details["hiddenByPolicy"] = hidden.hidden
    if notices:
        text += "\n\n[" + ". ".join(notices) + "]"
    return _result(text, details)


def _path_filter(ctx: _Context):
    """The policy's hidden paths for this call (`search_tools.PathFilter`), or None."""
    if not ctx.exclusions:
        return None
    from pi_sandbox.worker.search_tools import PathFilter

    try:
        return PathFilter(ctx.exclusions, ctx.cwd)
    except Exception as exc:  # a pattern the supervisor sent that does not compile
        # Fail closed: without the filter the search could show what the policy hides.
        raise _ToolError(f"Cannot apply the policy's path rules: {exc}") from None


# ---------------------------------------------------------------------------
# grep and find (pi_sandbox.worker.search_tools)


def _search(kind: str, params: dict, ctx: _Context) -> dict:
    """``grep`` / ``find``: see `search_tools.grep_files` and `search_tools.find_files`
    for parameters, output and details."""
    from pi_sandbox.worker import search_tools

    pattern = params.get("pattern")
    if not isinstance(pattern, str):
        raise _ToolError(f"Parameter 'pattern' must be a string, got {_short_repr(pattern)}")
    path = _path_param(params, "path", ctx, default=".")
    _check_not_cancelled(ctx)

    def cancel() -> None:
        _check_not_cancelled(ctx)

    run = search_tools.grep_files if kind == "grep" else search_tools.find_files
    try:
        text, details = run(
            params, path, cancel=cancel, hidden=_path_filter(ctx), max_bytes=ctx.max_bytes
        )
    except search_tools.SearchError as exc:
        raise _ToolError(str(exc), {"path": path}) from None
    return _result(text, details)


def _grep(params: dict, ctx: _Context) -> dict:
    return _search("grep", params, ctx)


def _find(params: dict, ctx: _Context) -> dict:
    return _search("find", params, ctx)


_TOOLS = {
    "read": _read,
    "write": _write,
    "edit": _edit,
    "bash": _bash,
    "ls": _ls,
    "grep": _grep,
    "find": _find,
}
