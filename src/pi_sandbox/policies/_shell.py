"""Split a shell command line into the simple commands it runs (DESIGN §7).

This is the milestone-one parser, built on :mod:`shlex`; a later issue replaces it
with a real shell grammar. It errs on the strict side: when it cannot tell what
would run, it raises :class:`UnparseableCommand`, and the policy gives the command
its ``unparseable`` decision. Extra simple commands (a quoted ``;`` splits a word in
two here) only ever add matches, never hide a command.

What it understands:

- lists and pipelines: ``;``, ``&&``, ``||``, ``|``, ``|&``, ``&``, newlines;
- redirections (``> f``, ``2>&1``, ``<<< word``), removed from the argv;
- leading ``NAME=value`` assignments and the reserved words that can precede a
  command (``if``, ``then``, ``do``, ``!``, ``{`` ...);
- wrapper programs (``env``, ``timeout``, ``nice``, ``nohup``, ``xargs``,
  ``setsid``, ``sudo``, ``exec`` ...), ``find -exec``, ``eval`` and
  ``bash -c``/``sh -c`` strings, recursively. A wrapper yields both its own argv
  and the argv it runs, so ``command: [sudo]`` and ``command: [rm]`` both match
  ``sudo rm x``.

What makes a command unparseable: command or process substitution (``$(``,
backticks, ``<(``, ``>(``), ANSI-C or locale quoting (``$'...'``, ``$"..."``),
parentheses (subshells, function definitions, arithmetic), here-documents,
``case`` and ``function``, unbalanced quotes, and nesting deeper than
``_MAX_DEPTH``.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = ["UnparseableCommand", "simple_commands"]

_MAX_DEPTH = 8

# Checked on the raw text, quoted or not: being wrong here only costs a prompt.
_UNPARSEABLE_MARKERS = (
    ("$(", "command substitution '$('"),
    ("`", "command substitution '`'"),
    ("<(", "process substitution '<('"),
    (">(", "process substitution '>('"),
    ("$'", 'ANSI-C quoting "$\'"'),
    ('$"', "locale quoting '$\"'"),
)

_PUNCTUATION = "();<>|&\n"
_OPERATOR = re.compile(r"&>>|<<<|&&|\|\||;;|\|&|>>|>&|<&|&>|<<|<>|>\||[;&|()<>\n]")
_SEPARATORS = frozenset({";", "&", "|", "&&", "||", "|&", "\n"})
_REDIRECTIONS = frozenset({">", ">>", "<", ">&", "<&", "&>", "&>>", ">|", "<>", "<<<"})
# A backslash escapes the next character; a backslash-newline pair is a line
# continuation and disappears before tokenising.
_ESCAPED_CHAR = re.compile(r"\\(\n|.)", re.DOTALL)
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")

# Reserved words that may stand before the command of a simple command.
_LEADING_RESERVED = frozenset(
    {"!", "{", "}", "if", "then", "elif", "else", "fi", "while", "until", "do", "done", "esac"}
)
# Headers whose words are a list of values, not a command.
_SKIPPED_HEADERS = frozenset({"for", "select"})
_UNSUPPORTED_KEYWORDS = {"case": "case statement", "function": "function definition"}

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"})
_FIND_ACTIONS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


class UnparseableCommand(Exception):
    """The command cannot be split into simple commands with confidence.

    Attributes:
        why: a short human-readable cause, e.g. ``"command substitution '$('"``.
    """

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass(frozen=True)
class _Wrapper:
    """How a wrapper program's own options look, so the wrapped command can be found.

    Attributes:
        short_with_arg: short option letters that take a value (``-u root``, ``-uroot``).
        long_with_arg: long options that take a value as the next word (``--user root``).
        operands: positional words before the command (``timeout DURATION``).
        assignments: ``NAME=value`` words may precede the command (``env``, ``sudo``).
        opaque: options after which the command cannot be found (``env -S``).
    """

    short_with_arg: str = ""
    long_with_arg: frozenset[str] = frozenset()
    operands: int = 0
    assignments: bool = False
    opaque: frozenset[str] = frozenset()


_WRAPPERS: dict[str, _Wrapper] = {
    "env": _Wrapper(
        short_with_arg="uC",
        long_with_arg=frozenset({"--unset", "--chdir"}),
        assignments=True,
        opaque=frozenset({"-S", "--split-string"}),
    ),
    "timeout": _Wrapper(
        short_with_arg="sk", long_with_arg=frozenset({"--signal", "--kill-after"}), operands=1
    ),
    "nice": _Wrapper(short_with_arg="n", long_with_arg=frozenset({"--adjustment"})),
    "nohup": _Wrapper(),
    "setsid": _Wrapper(),
    "xargs": _Wrapper(
        short_with_arg="adEILnPs",
        long_with_arg=frozenset(
            {
                "--arg-file",
                "--delimiter",
                "--max-args",
                "--max-procs",
                "--max-chars",
                "--process-slot-var",
            }
        ),
    ),
    "sudo": _Wrapper(
        short_with_arg="CDgprtTUu",
        long_with_arg=frozenset(
            {
                "--chdir",
                "--close-from",
                "--command-timeout",
                "--group",
                "--host",
                "--other-user",
                "--prompt",
                "--role",
                "--type",
                "--user",
            }
        ),
        assignments=True,
    ),
    "doas": _Wrapper(short_with_arg="Cu"),
    "exec": _Wrapper(short_with_arg="a"),
    "command": _Wrapper(),
    "builtin": _Wrapper(),
    "time": _Wrapper(short_with_arg="fo", long_with_arg=frozenset({"--format", "--output"})),
    "stdbuf": _Wrapper(
        short_with_arg="ioe", long_with_arg=frozenset({"--input", "--output", "--error"})
    ),
    "chroot": _Wrapper(long_with_arg=frozenset({"--groups", "--userspec"}), operands=1),
    "busybox": _Wrapper(),
}


def simple_commands(text: str) -> tuple[tuple[str, ...], ...]:
    """Return the argv of every simple command ``text`` would run, in source order.

    Args:
        text: a shell command line as the ``bash`` tool receives it.

    Returns:
        One argv tuple per simple command, including the outer argv of each
        wrapper, ``bash -c`` and ``eval`` together with the commands found inside
        them. Words keep ``$VAR`` and glob characters unexpanded.

    Raises:
        UnparseableCommand: the text uses a construct this parser does not model
            (see the module docstring).
    """
    return tuple(_parse(text, depth=0))


def _parse(text: str, *, depth: int) -> Iterator[tuple[str, ...]]:
    if depth > _MAX_DEPTH:
        raise UnparseableCommand(f"commands nested more than {_MAX_DEPTH} levels deep")
    for marker, why in _UNPARSEABLE_MARKERS:
        if marker in text:
            raise UnparseableCommand(why)
    for words in _split(_tokens(text)):
        yield from _expand(words, depth=depth)


def _tokens(text: str) -> list[str]:
    text = _ESCAPED_CHAR.sub(lambda m: "" if m.group(1) == "\n" else m.group(0), text)
    lexer = shlex.shlex(text, posix=True, punctuation_chars=_PUNCTUATION)
    lexer.whitespace_split = True
    # Newlines separate commands, so they are punctuation here, not whitespace.
    lexer.whitespace = " \t\r"
    # shlex would start a comment at a '#' inside a word ("a#b; rm x"), hiding
    # commands that bash runs; treating '#' as a plain character over-matches instead.
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError as exc:
        raise UnparseableCommand(f"shell syntax: {exc}") from exc


def _split(tokens: Sequence[str]) -> Iterator[list[str]]:
    """Group tokens into the words of each simple command, dropping redirections."""
    words: list[str] = []
    expect_target = False
    for token in tokens:
        if not (token and all(char in _PUNCTUATION for char in token)):
            if expect_target:
                expect_target = False
            else:
                words.append(token)
            continue
        # A run of punctuation ("&&(", ";\n") may hold several operators.
        for operator in _OPERATOR.findall(token):
            if expect_target:
                raise UnparseableCommand(f"redirection without a target before {operator!r}")
            if operator in _SEPARATORS:
                if words:
                    yield words
                words = []
            elif operator in _REDIRECTIONS:
                # "2>file": shlex splits the fd number off as a word of its own.
                if words and words[-1].isdigit():
                    words.pop()
                expect_target = True
            elif operator == "<<":
                raise UnparseableCommand("here-document '<<'")
            elif operator == ";;":
                raise UnparseableCommand("case statement ';;'")
            else:
                raise UnparseableCommand(f"subshell or grouping parenthesis {operator!r}")
    if expect_target:
        raise UnparseableCommand("redirection without a target at the end")
    if words:
        yield words


def _expand(words: Sequence[str], *, depth: int) -> Iterator[tuple[str, ...]]:
    """Yield ``words`` as an argv, then whatever argv it runs in turn."""
    if depth > _MAX_DEPTH:
        raise UnparseableCommand(f"commands nested more than {_MAX_DEPTH} levels deep")
    start = 0
    while start < len(words) and (
        words[start] in _LEADING_RESERVED or _ASSIGNMENT.match(words[start])
    ):
        start += 1
    argv = tuple(words[start:])
    if not argv:
        return
    head = argv[0]
    if head in _SKIPPED_HEADERS:
        return
    if head in _UNSUPPORTED_KEYWORDS:
        raise UnparseableCommand(_UNSUPPORTED_KEYWORDS[head])
    yield argv
    name = posixpath.basename(head)
    if name in _WRAPPERS:
        inner = _unwrap(argv, _WRAPPERS[name])
        if inner:
            yield from _expand(inner, depth=depth + 1)
    elif name in _SHELLS:
        script = _shell_command_string(argv)
        if script is not None:
            yield from _parse(script, depth=depth + 1)
    elif name == "eval":
        yield from _parse(" ".join(argv[1:]), depth=depth + 1)
    if name == "find" or head in _FIND_ACTIONS:
        # "-exec a \; -exec b \;": the escaped ';' splits the command here, so a
        # fragment starting with "-exec" is still part of a find.
        for inner in _find_actions(argv):
            yield from _expand(inner, depth=depth + 1)


def _unwrap(argv: Sequence[str], wrapper: _Wrapper) -> Sequence[str]:
    """Return the command a wrapper program runs (empty when it runs none)."""
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            break
        if word == "-":  # env's spelling of -i
            i += 1
            continue
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            if name in wrapper.opaque:
                raise UnparseableCommand(f"{argv[0]} {name}")
            i += 2 if "=" not in word and name in wrapper.long_with_arg else 1
            continue
        if word.startswith("-") and len(word) > 1:
            i += 1
            for offset, letter in enumerate(word[1:], start=2):
                if f"-{letter}" in wrapper.opaque:
                    raise UnparseableCommand(f"{argv[0]} -{letter}")
                if letter in wrapper.short_with_arg:
                    if offset == len(word):  # the value is the next word
                        i += 1
                    break
            continue
        if wrapper.assignments and _ASSIGNMENT.match(word):
            i += 1
            continue
        break
    return argv[i + wrapper.operands :]


def _shell_command_string(argv: Sequence[str]) -> str | None:
    """Return the script of ``bash -c SCRIPT`` (None when the shell reads a file or stdin)."""
    has_c = False
    i = 1
    while i < len(argv):
        word = argv[i]
        if word in ("--", "-"):
            i += 1
            break
        if word.startswith("--"):
            i += 2 if word in ("--rcfile", "--init-file") else 1
            continue
        if word[:1] in ("-", "+") and len(word) > 1:
            letters = word[1:]
            has_c = has_c or (word[0] == "-" and "c" in letters)
            i += 2 if ("o" in letters or "O" in letters) else 1
            continue
        break
    if has_c and i < len(argv):
        return argv[i]
    return None


def _find_actions(argv: Sequence[str]) -> Iterator[Sequence[str]]:
    """Yield the commands of ``-exec``/``-execdir``/``-ok``/``-okdir`` actions."""
    i = 0
    while i < len(argv):
        if argv[i] in _FIND_ACTIONS:
            end = i + 1
            while end < len(argv) and argv[end] not in (";", "+"):
                end += 1
            if end > i + 1:
                yield argv[i + 1 : end]
            i = end
        i += 1
