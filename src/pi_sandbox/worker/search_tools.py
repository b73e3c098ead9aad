"""The ``grep`` and ``find`` built-in tools (issue 17 §6), run by the tool worker.

Both follow pi 1.6.0's tools (``dist/core/tools/grep.js``, ``find.js``): the same
parameters, output lines, limits and truncation notices. Each has two engines that
produce the same output for the same tree:

- ``rg`` / ``fd`` when the program is on ``PATH`` inside the sandbox;
- a Python fallback otherwise: a directory walk that honours ``.gitignore`` files
  (matched by ``pathspec``, the library ``black`` and others use), and for ``grep``
  the linear-time RE2 engine (``google-re2``), whose syntax is the one ripgrep's
  default engine accepts (no backreferences, no look-around). A pathological pattern
  such as ``(a+)+$`` therefore costs linear time, not an exponential backtrack. When
  RE2 is not importable the ``regex`` module is used with a time budget per line, and
  a pattern that runs out of it stops the search with an error naming the pattern.

Shared semantics, pinned so both engines agree (and documented in docs/tools.md):

- hidden files are searched (pi passes ``--hidden``); ``.git`` directories never are;
- ``.gitignore`` files are honoured in and above the search directory whether or not
  it is a git repository (``--no-require-git``); ``.ignore``, ``.rgignore``,
  ``.git/info/exclude`` and the user's global excludes are not (the sandbox's view
  of the host's git configuration must not change results);
- symbolic links are not followed while walking (neither rg nor fd follows them by
  default), so a link cannot lead a search out of the directory it was given;
- results come in path order (``rg --sort=path``; fd's results are sorted after);
- a file with a NUL byte in its first 64 KiB is binary and skipped, as ripgrep
  skips it while walking; a binary file named as ``path`` is searched, as ripgrep
  searches it.

Paths a policy ``path`` rule covers (the supervisor's ``exclusions``) are neither
entered nor read by the fallback and are filtered from rg/fd output, so their names
and contents never reach the model (issue 17 §6: "path rules see grep/find paths").

This module runs inside the worker: standard library at import time, everything else
imported inside the functions that need it.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = [
    "FIND_DEFINITION",
    "GREP_DEFINITION",
    "GREP_MAX_LINE_LENGTH",
    "PathFilter",
    "SearchError",
    "find_files",
    "format_size",
    "grep_files",
]

# pi 1.6.0 truncate.js: GREP_MAX_LINE_LENGTH, DEFAULT_MAX_BYTES (50 KiB).
GREP_MAX_LINE_LENGTH = 500
PI_MAX_BYTES = 50 * 1024
GREP_DEFAULT_LIMIT = 100
FIND_DEFAULT_LIMIT = 1000
# ripgrep reads 64 KiB buffers and, while walking, quits a file at a buffer with a NUL.
_BINARY_BLOCK = 64 * 1024
# The fallback's budget per line when it has to use a backtracking engine (seconds).
_REGEX_LINE_BUDGET_S = 0.5

GREP_DEFINITION: dict = {
    "name": "grep",
    "label": "grep",
    "description": (
        "Search file contents for a pattern. Returns matching lines with file paths and "
        "line numbers. Respects .gitignore. Output is truncated to "
        f"{GREP_DEFAULT_LIMIT} matches or {PI_MAX_BYTES // 1024}KB (whichever is hit "
        f"first). Long lines are truncated to {GREP_MAX_LINE_LENGTH} chars."
    ),
    "prompt_snippet": "Search file contents for patterns (respects .gitignore)",
    "parameters": {
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "description": "Search pattern (regex or literal string)",
            },
            "path": {
                "type": "string",
                "description": "Directory or file to search (default: current directory)",
            },
            "glob": {
                "type": "string",
                "description": (
                    "Filter files by glob pattern relative to path, e.g. 'src/**/*.ts'. "
                    "Without '/', e.g. '*.ts', it matches file names at any depth"
                ),
            },
            "ignoreCase": {
                "type": "boolean",
                "description": "Case-insensitive search (default: false)",
            },
            "literal": {
                "type": "boolean",
                "description": (
                    "Treat pattern as literal string instead of regex (default: false)"
                ),
            },
            "context": {
                "type": "number",
                "description": ("Number of lines to show before and after each match (default: 0)"),
            },
            "limit": {
                "type": "number",
                "description": "Maximum number of matches to return (default: 100)",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
}

FIND_DEFINITION: dict = {
    "name": "find",
    "label": "find",
    "description": (
        "Search for files by glob pattern. Returns matching file paths relative to the "
        "search directory. Respects .gitignore. Output is truncated to "
        f"{FIND_DEFAULT_LIMIT} results or {PI_MAX_BYTES // 1024}KB (whichever is hit first)."
    ),
    "prompt_snippet": "Find files by glob pattern (respects .gitignore)",
    "parameters": {
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "description": (
                    "Glob pattern relative to the search directory, e.g. 'src/**/*.ts'. "
                    "Without '/', e.g. '*.ts', it matches file names at any depth"
                ),
            },
            "path": {
                "type": "string",
                "description": "Directory to search in (default: current directory)",
            },
            "limit": {
                "type": "number",
                "description": "Maximum number of results (default: 1000)",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
}


class SearchError(Exception):
    """A tool-level failure of grep or find (bad pattern, missing path, abort)."""


def format_size(size: int) -> str:
    """pi's ``formatSize``: ``512B``, ``50.0KB``, ``1.5MB`` (1 KB = 1024 bytes)."""
    if size < 1024:
        return f"{size}B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f}KB"
    return f"{size / (1024 * 1024):.1f}MB"


def truncate_line(line: str, max_chars: int = GREP_MAX_LINE_LENGTH) -> tuple[str, bool]:
    """pi's ``truncateLine``: ``(text, was_truncated)``, cut lines end in ``... [truncated]``."""
    if len(line) <= max_chars:
        return line, False
    return line[:max_chars] + "... [truncated]", True


def truncate_head_bytes(text: str, max_bytes: int) -> tuple[str, bool]:
    """pi's ``truncateHead`` without a line cap: the whole lines that fit in ``max_bytes``
    UTF-8 bytes, and whether anything was cut (a first line over the cap yields "")."""
    if len(text.encode("utf-8")) <= max_bytes:
        return text, False
    kept: list[str] = []
    used = 0
    for line in text.split("\n"):
        cost = len(line.encode("utf-8")) + (1 if kept else 0)
        if used + cost > max_bytes:
            break
        kept.append(line)
        used += cost
    return "\n".join(kept), True


class PathFilter:
    """Paths the policy hides from recursive tools (``grep``, ``find``, ``ls``).

    Args:
        patterns: regex sources (``re.fullmatch``) from the supervisor, compiled from
            the ``path`` globs of the policy rules that cover this tool
            (`pi_sandbox.policies.path_exclusions`).
        workspace: the session's working directory; paths inside it are matched
            relative to it (``src/a.py``), others as absolute paths, like the gate does.

    A path is hidden when its lexical form or its canonical form (symlinks resolved)
    matches: a link that points into a hidden directory is hidden too.
    """

    def __init__(self, patterns: list[str] | tuple[str, ...], workspace: str) -> None:
        import re

        self._regexes = [re.compile(p, re.DOTALL) for p in patterns]
        self._workspace = os.path.normpath(workspace)
        self._real_workspace = os.path.realpath(workspace)
        self.hidden = 0

    def __bool__(self) -> bool:
        return bool(self._regexes)

    def _form(self, path: str, root: str) -> str:
        if path == root:
            return "."
        if path.startswith(root.rstrip("/") + "/"):
            return path[len(root.rstrip("/")) + 1 :]
        return path

    def hides(self, path: str) -> bool:
        """Whether absolute ``path`` is covered by a rule; counts hidden paths."""
        if not self._regexes:
            return False
        lexical = os.path.normpath(path)
        forms = {self._form(lexical, self._workspace)}
        try:
            forms.add(self._form(os.path.realpath(lexical), self._real_workspace))
        except (OSError, ValueError):
            pass
        if any(r.fullmatch(form) for r in self._regexes for form in forms):
            self.hidden += 1
            return True
        return False


# ---------------------------------------------------------------------------
# Walking with .gitignore


class _IgnoreStack:
    """The ``.gitignore`` rules in force for one directory: ``(base_dir, spec)`` pairs,
    outermost first; deeper files win, and within a file the last matching line."""

    def __init__(self, entries: list[tuple[str, object]]) -> None:
        self.entries = entries

    def child(self, directory: str) -> _IgnoreStack:
        spec = _load_gitignore(directory)
        return _IgnoreStack([*self.entries, (directory, spec)]) if spec is not None else self

    def ignored(self, path: str, is_dir: bool) -> bool:
        for base, spec in reversed(self.entries):
            relative = os.path.relpath(path, base)
            if relative.startswith(".."):
                continue
            result = spec.check_file(relative + ("/" if is_dir else ""))  # type: ignore[attr-defined]
            if result.include is not None:
                return bool(result.include)
        return False


def _load_gitignore(directory: str):
    try:
        with open(os.path.join(directory, ".gitignore"), "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return None
    import pathspec

    lines = data.decode("utf-8", "replace").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ancestor_ignores(directory: str) -> _IgnoreStack:
    """The rules of the ``.gitignore`` files above ``directory`` (ripgrep reads parent
    directories' ignore files too)."""
    chain: list[str] = []
    current = os.path.dirname(directory)
    while True:
        chain.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    stack = _IgnoreStack([])
    for ancestor in reversed(chain):
        stack = stack.child(ancestor)
    return stack


def _walk(
    root: str,
    *,
    hidden: PathFilter | None,
    cancel: Callable[[], None],
) -> Iterator[tuple[str, bool]]:
    """Yield ``(absolute_path, is_dir)`` below ``root`` in path order (depth first,
    names sorted by their bytes, like ``rg --sort=path``), skipping ``.git``,
    ignored and policy-hidden paths. Symlinks are yielded as files, never entered."""
    stack = _ancestor_ignores(root).child(root)

    def visit(directory: str, ignores: _IgnoreStack) -> Iterator[tuple[str, bool]]:
        cancel()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: os.fsencode(e.name))
        except OSError:
            return  # unreadable (the sandbox may mask it): rg skips it with a warning
        for entry in entries:
            if entry.name == ".git":
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            path = entry.path
            if ignores.ignored(path, is_dir):
                continue
            if hidden and hidden.hides(path):
                continue
            yield path, is_dir
            if is_dir:
                yield from visit(path, ignores.child(path))

    yield from visit(root, stack)


# ---------------------------------------------------------------------------
# Globs (rg --glob / fd --glob)


def _glob_regex(pattern: str, *, ignore_case: bool):
    """Compile a globset-style glob: ``*``/``?`` within a component, ``**`` across,
    ``[...]`` classes, ``{a,b}`` alternatives, ``\\`` escapes."""
    import re

    out: list[str] = []
    i = 0
    n = len(pattern)
    depth = 0
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                at_start = i == 0 or pattern[i - 1] == "/"
                j = i + 2
                if at_start and j < n and pattern[j] == "/":
                    out.append("(?:.*/)?")
                    i = j + 1
                    continue
                if at_start and j == n:
                    out.append(".*")
                    i = j
                    continue
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 2)
            if j < 0:
                out.append(re.escape(c))
                i += 1
                continue
            body = pattern[i + 1 : j]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j + 1
        elif c == "{":
            depth += 1
            out.append("(?:")
            i += 1
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
            i += 1
        elif c == "," and depth:
            out.append("|")
            i += 1
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    if depth:
        raise SearchError(f"Invalid glob {pattern!r}: unclosed '{{'")
    flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
    return re.compile("".join(out), flags)


class _GlobFilter:
    """``grep``'s ``glob``: rg ``--glob`` semantics for files below the search root
    (a glob without ``/`` matches the file name at any depth; ``!`` negates)."""

    def __init__(self, glob: str) -> None:
        glob = glob.lstrip()
        self.negate = glob.startswith("!")
        body = glob[1:] if self.negate else glob
        while body.startswith("./"):
            body = body[2:]
        self.by_name = "/" not in body.rstrip("/")
        self.regex = _glob_regex(body.lstrip("/") if not self.by_name else body, ignore_case=False)

    def accepts(self, relative: str) -> bool:
        parts = relative.split("/")
        if self.negate:
            # rg applies an exclusion to directories too: "!build" skips build/ whole.
            for depth in range(1, len(parts)):
                target = parts[depth - 1] if self.by_name else "/".join(parts[:depth])
                if self.regex.fullmatch(target):
                    return False
        target = parts[-1] if self.by_name else relative
        matched = self.regex.fullmatch(target) is not None
        return matched != self.negate


# ---------------------------------------------------------------------------
# grep


class _Event:
    __slots__ = ("is_match", "line_number", "path", "text")

    def __init__(self, path: str, line_number: int, text: str, is_match: bool) -> None:
        self.path = path
        self.line_number = line_number
        self.text = text
        self.is_match = is_match


# A file up to this size is read whole, and searched once before its lines are: most
# files of a tree have no match, and one search of the whole text costs far less
# than a search per line (measured: 10x on 3,000 files).
_WHOLE_FILE_BYTES = 16 << 20


class _Matcher:
    """One pattern, compiled once: ``line(text)`` says whether a line matches;
    ``maybe(text)`` whether a whole file can hold a matching line (False only when
    none can). RE2 when it can be imported (linear time), else ``regex`` with a time
    budget per line."""

    def __init__(self, pattern: str, *, ignore_case: bool, literal: bool) -> None:
        self.line: Callable[[str], bool]
        self.maybe: Callable[[str], bool] = lambda text: True
        if literal:
            if ignore_case:
                needle = pattern.casefold()
                self.line = lambda line: needle in line.casefold()
                self.maybe = lambda text: needle in text.casefold()
            else:
                self.line = self.maybe = lambda text: pattern in text
            return
        try:
            import re2
        except ImportError:
            self._backtracking(pattern, ignore_case)
            return
        options = re2.Options()
        options.case_sensitive = not ignore_case
        options.never_capture = True
        options.log_errors = False
        options.max_mem = 64 << 20  # bounded DFA memory; RE2 then runs slower, not larger
        try:
            compiled = re2.compile(pattern, options)
        except re2.error as exc:
            raise SearchError(f"Invalid regex {pattern!r}: {exc}") from None
        self.line = lambda line: compiled.search(line) is not None
        # A line's match is a match of the whole text in multi-line mode, unless the
        # pattern anchors at the text's ends (\A, \z) or turns multi-line off.
        if not any(token in pattern for token in ("\\A", "\\z", "(?-")):
            try:
                whole = re2.compile("(?m)" + pattern, options)
            except re2.error:
                return
            self.maybe = lambda text: whole.search(text) is not None

    def _backtracking(self, pattern: str, ignore_case: bool) -> None:
        import regex

        try:
            compiled = regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)
        except regex.error as exc:
            raise SearchError(f"Invalid regex {pattern!r}: {exc}") from None

        def search(line: str) -> bool:
            try:
                return compiled.search(line, timeout=_REGEX_LINE_BUDGET_S) is not None
            except TimeoutError:
                raise SearchError(
                    f"The pattern {pattern!r} took over {_REGEX_LINE_BUDGET_S} s on one line "
                    "(catastrophic backtracking); simplify it or use literal=true"
                ) from None

        self.line = search


def _file_lines(path: str, matcher: _Matcher, *, binary_ok: bool = False) -> Iterator[str] | None:
    """The lines of a text file (``\\n`` removed, ``\\r`` kept), decoded lossily; None
    for a binary file (a NUL in the first 64 KiB) and for a file ``matcher`` says
    cannot match. A later block with a NUL ends the file there, as ripgrep quits on
    it. Files up to 16 MiB are read whole; larger ones are streamed. ``binary_ok``:
    search a binary file whole instead (ripgrep does so for a file named explicitly)."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed here or by the generator below
    except OSError:
        return None
    try:
        first = f.read(_BINARY_BLOCK)
        if b"\0" in first and not binary_ok:
            f.close()
            return None
        if len(first) < _BINARY_BLOCK or os.fstat(f.fileno()).st_size <= _WHOLE_FILE_BYTES:
            data = first + f.read(_WHOLE_FILE_BYTES)
            f.close()
            nul = -1 if binary_ok else data.find(b"\0", _BINARY_BLOCK)
            if nul >= 0:  # the 64 KiB block holding it, and the line it cuts, are not searched
                data = data[: nul - nul % _BINARY_BLOCK]
                data = data[: data.rfind(b"\n") + 1]
            text = data.decode("utf-8", "replace")
            if not matcher.maybe(text):
                return None
            lines = text.split("\n")
            if lines[-1] == "":
                lines.pop()
            return iter(lines)
    except OSError:
        f.close()
        return None

    def stream() -> Iterator[str]:
        with f:
            carry = b""
            block = first
            while block:
                if b"\0" in block and not binary_ok:
                    return
                data = carry + block
                parts = data.split(b"\n")
                carry = parts.pop()
                for part in parts:
                    yield part.decode("utf-8", "replace")
                block = f.read(_BINARY_BLOCK)
            if carry:
                yield carry.decode("utf-8", "replace")

    return stream()


def _fallback_events(
    search_path: str,
    is_directory: bool,
    matcher: _Matcher,
    glob: _GlobFilter | None,
    context: int,
    hidden: PathFilter | None,
    cancel: Callable[[], None],
) -> Iterator[_Event]:
    """Match and context events in rg's order, for pi's consumer (`grep_files`)."""
    if is_directory:
        files = (
            path
            for path, is_dir in _walk(search_path, hidden=hidden, cancel=cancel)
            if not is_dir
            and not os.path.islink(path)
            and (glob is None or glob.accepts(os.path.relpath(path, search_path)))
        )
    else:
        files = iter([search_path])
    for path in files:
        cancel()
        lines = _file_lines(path, matcher, binary_ok=not is_directory)
        if lines is None:
            continue
        before: list[tuple[int, str]] = []
        after = 0
        last_emitted = 0
        for number, text in enumerate(lines, 1):
            if number % 4096 == 0:
                cancel()
            if matcher.line(text):
                for n, t in before:
                    if n > last_emitted:
                        yield _Event(path, n, t, False)
                before.clear()
                yield _Event(path, number, text, True)
                last_emitted = number
                after = context
            elif after > 0:
                yield _Event(path, number, text, False)
                last_emitted = number
                after -= 1
            elif context:
                before.append((number, text))
                if len(before) > context:
                    before.pop(0)


def _rg_events(
    rg: str,
    search_path: str,
    is_directory: bool,
    *,
    pattern: str,
    ignore_case: bool,
    literal: bool,
    glob: str | None,
    context: int,
    cancel: Callable[[], None],
    procs: list,
) -> Iterator[_Event]:
    """Events from ``rg --json`` (pi's arguments plus the pinned semantics above)."""
    import base64
    import json

    args = [
        rg,
        "--no-config",
        "--json",
        "--line-number",
        "--color=never",
        "--hidden",
        "--no-require-git",
        "--no-ignore-dot",
        "--no-ignore-exclude",
        "--no-ignore-global",
        "--sort=path",
        "--glob=!.git",
    ]
    if ignore_case:
        args.append("--ignore-case")
    if literal:
        args.append("--fixed-strings")
    if glob:
        args += ["--glob", _strip_dot_slash(glob)]
    if context > 0:
        args += ["--context", str(context)]
    args += ["--", pattern, "." if is_directory else search_path]
    run = _Program(args, cwd=search_path if is_directory else None, name="ripgrep")
    procs.append(run)

    def text_of(data: dict | None) -> str:
        if not isinstance(data, dict):
            return ""
        if isinstance(data.get("text"), str):
            return data["text"]
        if isinstance(data.get("bytes"), str):
            return base64.b64decode(data["bytes"]).decode("utf-8", "replace")
        return ""

    for raw in run.lines(cancel):
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        kind = event.get("type")
        if kind not in ("match", "context"):
            continue
        data = event.get("data") or {}
        path = text_of(data.get("path"))
        number = data.get("line_number")
        if not path or not isinstance(number, int):
            continue
        text = text_of(data.get("lines"))
        if text.endswith("\n"):
            text = text[:-1]
        full = os.path.normpath(os.path.join(search_path, path)) if is_directory else path
        yield _Event(full, number, text, kind == "match")


class _Program:
    """rg or fd as a child process: stdout read line by line while stderr is drained
    (a full stderr pipe would stall the program), the cancel check run every 50 ms
    even while the program prints nothing, and the process killed and reaped by
    `close`."""

    def __init__(self, args: list[str], *, cwd: str | None, name: str) -> None:
        import subprocess

        self.name = name
        self.stderr = b""
        # Set when the program closed both its outputs: it ran to its end, and its
        # exit status counts (it may not be reaped yet when `close` looks).
        self.drained = False
        try:
            self.proc = subprocess.Popen(
                args,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            raise SearchError(f"Failed to run {name}: {exc}") from None

    def lines(self, cancel: Callable[[], None]) -> Iterator[bytes]:
        import selectors

        out, err = self.proc.stdout, self.proc.stderr
        assert out is not None and err is not None
        pending = b""
        with selectors.DefaultSelector() as selector:
            selector.register(out, selectors.EVENT_READ)
            selector.register(err, selectors.EVENT_READ)
            open_streams = 2
            while open_streams:
                cancel()
                for key, _ in selector.select(0.05):
                    data = os.read(key.fd, 1 << 16)
                    if not data:
                        selector.unregister(key.fileobj)
                        open_streams -= 1
                    elif key.fileobj is err:
                        self.stderr = (self.stderr + data)[-8192:]
                    else:
                        pending += data
                        *complete, pending = pending.split(b"\n")
                        yield from complete
        self.drained = True
        if pending:
            yield pending

    def close(self) -> int:
        """Reap the program, killing it first unless it has closed its outputs (then
        it gets a moment to exit); returns its exit status."""
        import subprocess

        if self.drained:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code


def _strip_dot_slash(glob: str) -> str:
    negate = glob.startswith("!")
    body = glob[1:] if negate else glob
    while body.startswith("./"):
        body = body[2:]
    return ("!" if negate else "") + body


def _int_option(value: object, name: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise SearchError(f"Parameter {name!r} must be a number, got {value!r}")
    if value in (float("inf"), float("-inf")):
        return 1 << 31 if value > 0 else 0
    return int(value)


def grep_files(
    params: dict,
    search_path: str,
    *,
    cancel: Callable[[], None],
    hidden: PathFilter | None = None,
    max_bytes: int = PI_MAX_BYTES,
    use_rg: bool | None = None,
) -> tuple[str, dict]:
    """Run ``grep`` (pi 1.6.0 semantics) and format its result.

    Args:
        params: the tool arguments (``pattern`` required; ``glob``, ``ignoreCase``,
            ``literal``, ``context``, ``limit`` optional, as in pi's schema).
        search_path: the absolute directory or file to search (``path`` resolved).
        cancel: raises to abort; called between files and every few thousand lines.
        hidden: paths the policy hides (never read, never shown).
        max_bytes: output cap in UTF-8 bytes (pi: 50 KiB).
        use_rg: force ripgrep (True) or the fallback (False); None: rg when on PATH.

    Returns:
        ``(text, details)``: pi's output lines ``path:N: text`` for matches and
        ``path-N- text`` for context, its notices in one ``[...]`` paragraph, and
        ``details`` with pi's keys (``matchLimitReached``, ``truncation``,
        ``linesTruncated``) plus ``engine`` and ``hiddenByPolicy`` (ours).

    Raises:
        SearchError: a missing path, an invalid pattern or glob, rg failing, abort.
    """
    import shutil

    pattern = params.get("pattern")
    if not isinstance(pattern, str):
        raise SearchError(f"Parameter 'pattern' must be a string, got {pattern!r}")
    glob = params.get("glob")
    if glob is not None and not isinstance(glob, str):
        raise SearchError(f"Parameter 'glob' must be a string, got {glob!r}")
    ignore_case = bool(params.get("ignoreCase"))
    literal = bool(params.get("literal"))
    context = max(0, _int_option(params.get("context"), "context", 0))
    limit = max(1, _int_option(params.get("limit"), "limit", GREP_DEFAULT_LIMIT))
    try:
        st = os.stat(search_path)
    except OSError:
        raise SearchError(f"Path not found: {search_path}") from None
    is_directory = stat.S_ISDIR(st.st_mode)
    if hidden and hidden.hides(search_path):
        raise SearchError(f"Path not found: {search_path}")

    rg = shutil.which("rg") if use_rg is not False else None
    if use_rg and rg is None:
        raise SearchError("ripgrep (rg) is not on PATH")
    procs: list = []
    if rg:
        events = _rg_events(
            rg,
            search_path,
            is_directory,
            pattern=pattern,
            ignore_case=ignore_case,
            literal=literal,
            glob=glob or None,
            context=context,
            cancel=cancel,
            procs=procs,
        )
    else:
        matcher = _Matcher(pattern, ignore_case=ignore_case, literal=literal)
        events = _fallback_events(
            search_path,
            is_directory,
            matcher,
            _GlobFilter(glob) if glob and is_directory else None,
            context,
            hidden,
            cancel,
        )

    def format_path(path: str) -> str:
        if is_directory:
            relative = os.path.relpath(path, search_path)
            if relative and relative != "." and not relative.startswith(".."):
                return relative
        return os.path.basename(path)

    # pi's consumer (grep.js), line for line: it decides what is shown.
    output: list[str] = []
    output_bytes = 0
    match_count = 0
    match_limit_reached = False
    lines_truncated = False
    limit_hit = False
    trailing_end = 0
    last_file: str | None = None

    def push(event: _Event, is_match: bool) -> None:
        nonlocal output_bytes, lines_truncated, last_file
        last_file = event.path
        text = event.text[:-1] if event.text.endswith("\r") else event.text
        shown, cut = truncate_line(text)
        lines_truncated = lines_truncated or cut
        rel = format_path(event.path)
        line = (
            f"{rel}:{event.line_number}: {shown}"
            if is_match
            else (f"{rel}-{event.line_number}- {shown}")
        )
        if output_bytes - 1 <= max_bytes:
            output.append(line)
        output_bytes += len(line.encode("utf-8")) + 1

    try:
        for event in events:
            if rg and hidden and hidden.hides(event.path):
                continue
            if not limit_hit:
                push(event, event.is_match)
                if not event.is_match:
                    continue
                match_count += 1
                if match_count >= limit:
                    limit_hit = True
                    trailing_end = event.line_number + context
                continue
            in_window = event.path == last_file and event.line_number <= trailing_end
            if in_window:
                push(event, False)
            if event.is_match:
                match_limit_reached = True
            if match_limit_reached and not (in_window and event.line_number < trailing_end):
                break
    finally:
        for program in procs:
            code = program.close()
            finished = program.drained
            # 0: matches, 1: none; a program we killed early (limit, abort) is no failure.
            # 2 is also "a file could not be read" (the fallback skips those too), so
            # only a bad pattern or glob fails the call.
            stderr = program.stderr.decode("utf-8", "replace").strip()
            bad_input = "regex parse error" in stderr or "error parsing glob" in stderr
            if finished and code not in (0, 1) and (code != 2 or bad_input or not stderr):
                raise SearchError(stderr or f"ripgrep exited with code {code}")

    details: dict = {"engine": "rg" if rg else "python"}
    if hidden is not None and hidden.hidden:
        details["hiddenByPolicy"] = hidden.hidden
    if match_count == 0:
        return "No matches found", details
    text, truncated = truncate_head_bytes("\n".join(output), max_bytes)
    notices: list[str] = []
    if match_limit_reached:
        notices.append(
            f"{limit} matches limit reached. Use limit={limit * 2} for more, or refine pattern"
        )
        details["matchLimitReached"] = limit
    if truncated:
        notices.append(f"{format_size(max_bytes)} limit reached")
        details["truncation"] = {
            "truncated": True,
            "truncatedBy": "bytes",
            "totalLines": len(output),
            "totalBytes": output_bytes - 1,
            "maxBytes": max_bytes,
        }
    if lines_truncated:
        notices.append(
            f"Some lines truncated to {GREP_MAX_LINE_LENGTH} chars. Use read tool to see full lines"
        )
        details["linesTruncated"] = True
    if notices:
        text += "\n\n[" + ". ".join(notices) + "]"
    return text, details


# ---------------------------------------------------------------------------
# find


def _find_matcher(pattern: str) -> tuple[Callable[[str, str], bool], str]:
    """fd's ``--glob`` matching as pi drives it: a pattern without ``/`` matches the
    name; a relative one with ``/`` the path relative to the search directory; smart
    case (an all-lowercase pattern ignores case). Returns ``(matches, pattern)``."""
    while pattern.startswith("./"):
        pattern = pattern[2:]
    ignore_case = pattern == pattern.lower()
    if "/" not in pattern:
        regex = _glob_regex(pattern, ignore_case=ignore_case)
        return (
            lambda relative, absolute: regex.fullmatch(os.path.basename(relative)) is not None
        ), pattern
    if os.path.isabs(pattern):
        regex = _glob_regex(pattern, ignore_case=ignore_case)
        return (lambda relative, absolute: regex.fullmatch(absolute) is not None), pattern
    regex = _glob_regex(pattern, ignore_case=ignore_case)
    return (lambda relative, absolute: regex.fullmatch(relative) is not None), pattern


def find_files(
    params: dict,
    search_path: str,
    *,
    cancel: Callable[[], None],
    hidden: PathFilter | None = None,
    max_bytes: int = PI_MAX_BYTES,
    use_fd: bool | None = None,
) -> tuple[str, dict]:
    """Run ``find`` (pi 1.6.0 semantics) and format its result.

    Args:
        params: ``pattern`` (glob) required; ``limit`` optional (default 1000).
        search_path: the absolute directory to search.
        cancel, hidden, max_bytes: as for `grep_files`.
        use_fd: force fd (True) or the fallback (False); None: fd when on PATH
            (``fd`` or Debian's ``fdfind``).

    Returns:
        ``(text, details)``: one path per line relative to ``search_path``,
        directories with a trailing ``/``; notices as pi's; ``details`` with pi's
        ``resultLimitReached``/``truncation`` plus ``engine`` and ``hiddenByPolicy``.

    Raises:
        SearchError: a missing path, an invalid glob, fd failing, abort.
    """
    import shutil

    pattern = params.get("pattern")
    if not isinstance(pattern, str):
        raise SearchError(f"Parameter 'pattern' must be a string, got {pattern!r}")
    limit = max(1, _int_option(params.get("limit"), "limit", FIND_DEFAULT_LIMIT))
    if not os.path.exists(search_path) or (hidden and hidden.hides(search_path)):
        raise SearchError(f"Path not found: {search_path}")
    fd = None
    if use_fd is not False:
        fd = shutil.which("fd") or shutil.which("fdfind")
    if use_fd and fd is None:
        raise SearchError("fd is not on PATH")

    results: list[str] = []
    more = False
    if fd:
        results, more = _fd_results(fd, pattern, search_path, limit, hidden, cancel)
    else:
        matches, _ = _find_matcher(pattern)
        for path, is_dir in _walk(search_path, hidden=hidden, cancel=cancel):
            relative = os.path.relpath(path, search_path)
            if matches(relative, path):
                if len(results) == limit:
                    more = True
                    break
                results.append(relative + ("/" if is_dir else ""))

    details: dict = {"engine": "fd" if fd else "python"}
    if hidden is not None and hidden.hidden:
        details["hiddenByPolicy"] = hidden.hidden
    if not results:
        return "No files found matching pattern", details
    raw = "\n".join(results)
    text, truncated = truncate_head_bytes(raw, max_bytes)
    notices: list[str] = []
    if more:
        notices.append(
            f"{limit} results limit reached. Use limit={limit * 2} for more, or refine pattern"
        )
        details["resultLimitReached"] = limit
    if truncated:
        notices.append(f"{format_size(max_bytes)} limit reached")
        details["truncation"] = {
            "truncated": True,
            "truncatedBy": "bytes",
            "totalLines": len(results),
            "totalBytes": len(raw.encode("utf-8")),
            "maxBytes": max_bytes,
        }
    if notices:
        text += "\n\n[" + ". ".join(notices) + "]"
    return text, details


def _fd_results(fd, pattern, search_path, limit, hidden, cancel) -> tuple[list[str], bool]:
    """fd's results (pi's arguments plus the pinned semantics), sorted in path order."""

    effective = pattern
    while effective.startswith("./"):
        effective = effective[2:]
    args = [
        fd,
        "--color=never",
        "--hidden",
        "--no-require-git",
        "--exclude=.git",
        "--glob",
        "--max-results",
        str(limit + 1),
    ]
    if "/" in effective:
        args.append("--full-path")
        if not os.path.isabs(effective):
            root = search_path.rstrip("/")
            for char in "\\*?[]{}":
                root = root.replace(char, "\\" + char)
            if effective == effective.lower():
                args.append("--ignore-case")
            effective = f"{root}/{effective}"
    args += ["--", effective, search_path]
    program = _Program(args, cwd=None, name="fd")
    try:
        lines = [
            text
            for raw in program.lines(cancel)
            if (text := raw.decode("utf-8", "replace").strip())
        ]
    finally:
        code = program.close()
    if code != 0 and not lines:
        raise SearchError(
            program.stderr.decode("utf-8", "replace").strip() or f"fd exited with code {code}"
        )
    entries: list[tuple[tuple[bytes, ...], str]] = []
    for line in lines:
        is_dir = line.endswith("/")
        absolute = os.path.normpath(os.path.join(search_path, line))
        if hidden and hidden.hides(absolute):
            continue
        relative = os.path.relpath(absolute, search_path)
        key = tuple(os.fsencode(part) for part in relative.split("/"))
        entries.append((key, relative + ("/" if is_dir else "")))
    entries.sort()
    more = len(entries) > limit
    return [shown for _, shown in entries[:limit]], more
