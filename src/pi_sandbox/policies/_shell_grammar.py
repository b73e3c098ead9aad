"""Find every simple command a shell command line runs, with a real bash grammar.

Issue 4, "Matching → Shell commands", built on the ``tree-sitter-bash`` grammar
(it replaced 0.1.0's ``shlex``-based splitter). :func:`parse_command` returns one
:class:`SimpleCommand` for every simple command anywhere in the text, and the
policy gate takes the strictest decision over all of them. When the text cannot be
mapped onto simple commands with confidence, :class:`UnparseableCommand` is raised
and the gate gives the command the policy's ``unparseable`` decision.

What is found:

- every command of lists and pipelines (``;``, ``&&``, ``||``, ``|``, ``|&``, ``&``,
  newlines), subshells ``( )``, groups ``{ }``, the conditions and bodies of
  ``if``/``while``/``until``/``for``/``select``/``case``, function bodies, and the
  commands of command substitutions (``$( )`` and backticks) and process
  substitutions (``<( )``, ``>( )``) wherever they stand: in arguments, assignments,
  double-quoted strings, ``${...}`` operands, arithmetic, redirection targets,
  here-strings and unquoted here-document bodies;
- the script of ``bash``/``sh``/``dash``/``zsh``/``ksh``/``mksh``/``ash -c SCRIPT``
  (``-lc``, ``-xc``, ``-c`` after other options), ``su -c SCRIPT``, ``eval ARGS``
  (joined with spaces), ``trap ACTION SIGNAL...``, parsed again recursively;
- the command run by a wrapper program (``env``, ``sudo``, ``doas``, ``timeout``,
  ``nice``, ``ionice``, ``taskset``, ``nohup``, ``setsid``, ``stdbuf``, ``time``,
  ``command``, ``builtin``, ``exec``, ``coproc``, ``chroot``, ``busybox``, ``xargs``),
  by a program of the curated wrapper table (`_wrapper_table`: ``strace``, ``gdb
  --args``, ``uv run``, ``npx`` ...), by ``env -S STRING`` (split as env does) and
  by ``find -exec/-execdir/-ok/-okdir``. A wrapper yields **both** its own argv
  and the argv it runs (``sudo rm x`` gives ``("sudo", "rm", "x")`` and
  ``("rm", "x")``);
- what an alias or a ``hash -p`` name runs, at each later use of the name
  (issue 13 §6).

Words filled in at run time (issue 13 §6) are reported, not guessed:
``xargs`` appends words read from standard input
(:attr:`SimpleCommand.more_words`), ``{}`` of ``find -exec`` and ``xargs -I`` are
:attr:`SimpleCommand.runtime_words`. A command that runs code the text does not
show is marked :attr:`SimpleCommand.unseen`: a bare shell reading its script from
standard input (``echo x | sh``, ``sh < f``), and a script file the same text
writes (``echo x > s.sh; bash s.sh``: output redirections and the operands of
`_FILE_WRITERS` against the script files of `_SCRIPT_RUNNERS` and
path-qualified programs, by basename, in any order).

Words come out with quotes removed and escapes resolved (``r"m"`` is ``rm``,
``$'r\\x6d'`` is ``rm``, ``\\rm`` is ``rm``). A part the shell still expands at run
time (``$VAR``, ``${x}``, ``$(...)``, an unquoted glob ``*?[``, a brace expansion
``{a,b}``, ``~``) stays as written, so the caller can treat ``$`` and glob
characters as unknown.

Where tree-sitter-bash reads text differently from bash, this module either works
around it or gives up (each case is in ``tests/unit/test_shell_grammar.py``):

- worked around: unquoted here-document bodies are scanned for ``$(``, ``${``,
  ``$((`` and backticks here (the grammar misses backticks and ``<<-`` bodies);
  code left in ``${x#...}``-style patterns is scanned likewise; backtick bodies are
  unescaped and parsed again (nested ``\\```); words split by a backslash-newline
  (``r\\<newline>m``) are joined; ``$"..."`` is a string;
- unparseable: a reserved word read as a command name (``! if ...``), a line that
  starts with a backslash (``ls<newline>\\rm x`` is read as one command), two
  backtick substitutions in a row (`` `a` `b` ``), a NUL byte (bash drops it).

Redirections (issue 13 §5): each command carries the files its redirections open
(:attr:`SimpleCommand.redirects`), and a word the grammar reads as a second
redirection target (``git 2>/dev/null push``) or a here-document argument
(``cat <<EOF x``) is the command's word, as in bash. A redirection of a function
definition is reported where the function is defined, as the command ``:``.

Over-approximations, which only add commands or strictness: a dangerous variable
set anywhere counts for every later command, subshell or not; a function body is
reported where it is defined; an alias counts from its definition on (bash
expands them only with ``expand_aliases`` and from the next line);
``cat <<EOF | sh`` is unparseable. Unparseable as well: ``enable -f`` (a builtin
from a shared object), an alias defined at run time, ``make`` with a recipe on
its command line, and the programs in `_OPAQUE_RUNNERS` (``watch``,
``parallel`` ...). Not modelled: inline interpreter code (``python -c``,
``node -e``) and ``ssh HOST CMD`` come out as plain commands: rules for the
interpreter (or ``ssh``) see them, the code is opaque.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pi_sandbox.policies._option_grammar import GIT_GLOBAL_OPTIONS_WITH_VALUE
from pi_sandbox.policies._wrapper_table import (
    SCRIPT_OPTION_PROGRAMS,
    WRAPPER_PROGRAMS,
    WrapperError,
    find_inner,
    option_scripts,
)

if TYPE_CHECKING:
    from tree_sitter import Node, Parser, Tree

__all__ = [
    "DANGEROUS_VARIABLES",
    "MAX_DEPTH",
    "MAX_INPUT_BYTES",
    "Redirect",
    "SimpleCommand",
    "UnparseableCommand",
    "parse_command",
]

MAX_DEPTH = 8
"""How many times one command may be reached through another (``bash -c``,
``eval``, a wrapper, a command substitution ...) before the text is unparseable."""

MAX_INPUT_BYTES = 64 * 1024
"""The longest command text (UTF-8 bytes) :func:`parse_command` accepts."""

DANGEROUS_VARIABLES = frozenset(
    {
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "DYLD_INSERT_LIBRARIES",
        "DYLD_LIBRARY_PATH",
        "PATH",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "NODE_OPTIONS",
        "NODE_PATH",
        "PERL5OPT",
        "PERL5LIB",
        "RUBYOPT",
        "RUBYLIB",
        "IFS",
        "PS4",
        "PROMPT_COMMAND",
        # Where programs find their configuration, which can name code to run
        # (git reads ~/.gitconfig and $XDG_CONFIG_HOME/git/config: core.fsmonitor,
        # core.pager, aliases ...).
        "HOME",
        "XDG_CONFIG_HOME",
        "XDG_CONFIG_DIRS",
        "ZDOTDIR",
        "PYTHONHOME",
        "PYTHONUSERBASE",
        "PERLLIB",
        "PERL5DB",
        "GCONV_PATH",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        # Programs that run these as commands.
        "PAGER",
        "MANPAGER",
        "EDITOR",
        "VISUAL",
        "LESSOPEN",
        "LESSCLOSE",
        "SSH_ASKPASS",
        "SUDO_ASKPASS",
        # Aliases and the command hash table (issue 13 §6): `BASH_ALIASES[p]='git
        # push'; p`, `BASH_CMDS[ls]=/x/git`.
        "BASH_ALIASES",
        "BASH_CMDS",
        # make reads options (`--eval=…`) and makefiles from these.
        "MAKEFLAGS",
        "GNUMAKEFLAGS",
        "MAKEFILES",
    }
)
"""Environment variables that change which code a command runs (issue 4 Matching).

Names starting with ``GIT_`` or ``BASH_FUNC_`` are dangerous too (see
:func:`_is_dangerous`)."""

_DANGEROUS_PREFIXES = ("GIT_", "BASH_FUNC_")


@dataclass(frozen=True)
class Redirect:
    """A file a redirection opens for a command (``< f``, ``> f``, ``2>> f``,
    ``&> f``, ``>| f``, ``<> f``, ``exec 3< f``).

    Descriptor duplications (``>&2``, ``<&3``, ``<&-``), here-documents,
    here-strings and process substitutions (``< <(cmd)``) open no file and are not
    reported.

    Attributes:
        target: the file as written, quotes removed (``"a b"`` gives ``a b``); a
            part expanded at run time stays as written (``$D/x``).
        access: ``"read"`` (``<``), ``"write"`` (``>``, ``>>``, ``>|``, ``&>``,
            ``&>>``, ``>&FILE``) or ``"read-write"`` (``<>``).
        known: False when the shell computes the name at run time (``$x``,
            ``$(cmd)``, an unquoted glob ``*?[``, a brace expansion, ``~``...): the
            caller cannot tell which file it is (issue 13 §5: unresolvable).
    """

    target: str
    access: Literal["read", "write", "read-write"]
    known: bool = True


@dataclass(frozen=True)
class SimpleCommand:
    """One simple command that the text would run (issue 4 Matching).

    Attributes:
        argv: its words after unwrapping, quotes removed, redirections dropped
            (the words after one are kept: ``git 2>/dev/null push`` gives
            ``("git", "push")``), e.g. ``("rm", "-rf", "x")``. Never empty. A word
            with a run-time expansion keeps that part as written (``"$f"`` gives
            ``$f``). A redirection without a command (``> f``) is reported as the
            command ``(":",)``, which bash runs the same way.
        assignments: the ``NAME=value`` words that set its environment, e.g.
            ``("AWS_PROFILE=prod",)``: the leading assignments of the command, and
            for a command run by ``env``/``sudo``, theirs plus the wrapper's own.
        dangerous: the names among those assignments (and among the variables set
            by earlier statements of the same text: ``PATH=/x; ls``,
            ``export LD_PRELOAD=y; ls``) that change which code runs:
            :data:`DANGEROUS_VARIABLES`, ``GIT_*``, ``BASH_FUNC_*``. In order of
            appearance, without repeats.
        path_qualified: ``argv[0]`` contains a ``/`` (``./cat``, ``/tmp/x/git``).
            Rules match its basename for deny/ask, and never treat it as a known-safe
            program.
        via: how it was reached, outermost first: ``()`` at top level, else e.g.
            ``("bash -c",)``, ``("xargs",)``, ``("$(...)",)``, ``("sudo", "env")``.
            The other steps are ``"`...`"``, ``"<(...)"``, ``">(...)"``, ``"eval"``,
            ``"trap"``, ``"su -c"``, ``"find -exec"`` (or ``-execdir``/``-ok``/
            ``-okdir``) and each wrapper's name. Its length is the nesting depth, at
            most :data:`MAX_DEPTH`.
        more_words: why words that are not in the text are appended to ``argv`` at
            run time (``"xargs appends words read from standard input"``); empty
            when none are (issue 13 §6).
        runtime_words: positions in ``argv`` of words replaced at run time by text
            the parser cannot see (``{}`` of ``find -exec`` and ``xargs -I``).
        unseen: why the command runs code the text does not show (a shell reading
            its script from standard input, a script file written by the same
            command, an alias the parser could not expand); empty when it does
            not. A rule that does not match such a command cannot be checked
            against it (issue 13 §6).
        redirects: the files its redirections open, in source order: its own
            (``cat < f``, ``< f cat``), and those of the compound command, wrapper
            or shell script it runs within (``while read l; do ...; done < f``
            gives ``f`` to ``read``; ``sudo cat < f`` to ``sudo`` and ``cat``), not
            those of a command substitution's outer command. The policy gate
            matches ``path`` rules against them (issue 13 §5).
    """

    argv: tuple[str, ...]
    assignments: tuple[str, ...] = ()
    dangerous: tuple[str, ...] = ()
    path_qualified: bool = False
    via: tuple[str, ...] = ()
    more_words: str = ""
    runtime_words: tuple[int, ...] = ()
    unseen: str = ""
    redirects: tuple[Redirect, ...] = ()


class UnparseableCommand(Exception):
    """The text cannot be mapped onto simple commands with confidence (issue 4 Matching).

    Raised by :func:`parse_command` for: a shell syntax error (a tree-sitter
    ``ERROR`` or ``MISSING`` node), text longer than :data:`MAX_INPUT_BYTES`, nesting
    deeper than :data:`MAX_DEPTH`, a program name computed at run time (``$CMD x``),
    a script computed at run time (``bash -c "$X"``, ``eval "$X"``), a here-document
    or here-string fed to a shell as its script (``bash <<EOF``), and the few
    constructs the grammar does not model faithfully (``time { ...; }``,
    ``env -S``).

    Attributes:
        reason: a short human-readable cause, e.g.
            ``"the program name is computed at run time"``.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _ParseTimeout(UnparseableCommand):
    """The parse ran out of time (`PARSE_TIMEOUT_S`): a result of the machine's
    load, not of the text, so `parse_command` does not keep it."""


def parse_command(text: str) -> tuple[SimpleCommand, ...]:
    """Return every simple command that ``text`` runs (issue 4 Matching).

    A pure function of ``text``: the results of the last `PARSE_CACHE_ENTRIES`
    texts of at most `PARSE_CACHE_TEXT_CHARS` characters (and at most
    `PARSE_CACHE_COMMANDS` simple commands) are kept and given again (issue 20:
    the gate parses the same command again when it re-checks a call, and an agent
    runs the same commands over and over). A parse that ran out of time
    (`PARSE_TIMEOUT_S`) is never kept: it depends on the machine's load.

    Args:
        text: a shell command line or script, as the ``bash`` tool receives it.

    Returns:
        One :class:`SimpleCommand` per simple command, wrappers and the commands
        they run as separate entries, roughly in source order (outer before inner).
        Empty for text without commands (blank, comments, bare assignments).
        (Frozen objects in a tuple: safe to share between callers.)

    Raises:
        UnparseableCommand: see its docstring for the causes.
    """
    if len(text) > PARSE_CACHE_TEXT_CHARS or type(text) is not str:
        return _parse_uncached(text)
    with _cache_lock:
        found = _cache.get(text)
        if found is not None:
            _cache.move_to_end(text)
    if found is None:
        try:
            found = _parse_uncached(text)
        except _ParseTimeout:
            raise
        except UnparseableCommand as exc:
            found = exc.reason
        if isinstance(found, str) or len(found) <= PARSE_CACHE_COMMANDS:
            with _cache_lock:
                _cache[text] = found
                if len(_cache) > PARSE_CACHE_ENTRIES:
                    _cache.popitem(last=False)
    if isinstance(found, str):
        raise UnparseableCommand(found)
    return found


PARSE_CACHE_ENTRIES = 256
"""How many texts' parses `parse_command` keeps (least recently used goes first)."""

PARSE_CACHE_TEXT_CHARS = 4096
"""The longest text whose parse `parse_command` keeps (characters)."""

PARSE_CACHE_COMMANDS = 64
"""The most simple commands a kept parse may hold (bounds the cache's memory)."""

# text -> its simple commands, or the reason it is unparseable (`parse_command`).
_cache: OrderedDict[str, tuple[SimpleCommand, ...] | str] = OrderedDict()
_cache_lock = threading.Lock()


def _parse_uncached(text: str) -> tuple[SimpleCommand, ...]:
    """`parse_command` without its cache."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_INPUT_BYTES:
        raise UnparseableCommand(f"the command is longer than {MAX_INPUT_BYTES // 1024} KiB")
    if ("@P}" in text and _PROMPT_EXPANSION.search(text)) or (
        _DORMANT_CODE.search(text)
        and _reevaluates(text)
        and (_has_bracket(text) or _DORMANT_CODE_ALONE.search(text))
    ):
        raise UnparseableCommand(
            "a quoted or escaped command substitution can be run by a later evaluation "
            "(arithmetic, ${!x}, ${x@P}, [[ ]], declare, printf -v, read, test -v)"
        )
    walker = _Walker()
    # Dangerous variables set where the walk does not see a name: arithmetic
    # (``(( PATH=1 ))``, ``let IFS=2``) and loop variables (``for PATH in ...``).
    # Over-approximated: they count for every command of the text.
    names = (
        [m.group(1) for m in _LOOP_VARIABLE.finditer(text)]
        if "for" in text or "select" in text  # what every match contains
        else []
    )
    if ("((" in text or "$[" in text or "let" in text) and _ARITHMETIC.search(text):
        names += [m.group(1) or m.group(2) for m in _ARITHMETIC_ASSIGNED.finditer(text)]
    for name in names:
        if _is_dangerous(name):
            walker.set_dangerous.setdefault(name)
    walker.script(text, ())
    walker.finish()
    return tuple(walker.out)


# Bash evaluates some values again as code: arithmetic (``$((x))``, ``((…))``,
# ``let``, ``[[ x -eq y ]]``, array subscripts ``${a[x]}``, offsets ``${x:x}``,
# ``declare -i``) evaluates a variable's value as an expression, including
# ``a[$(cmd)]`` subscripts; ``${!x}`` does the same through indirection; ``${x@P}``
# runs prompt expansion. A value the parser sees only as inert text (a substitution
# inside single quotes, escaped, or spelled with ANSI-C escapes) then runs.
# Both markers together make a text unparseable (adversarial review, issue 4).
# Bash also evaluates an array subscript in a variable *name* taken from a value:
# ``printf -v NAME``, ``read NAME``, ``mapfile NAME``, ``wait -p NAME``, ``getopts
# OPTS NAME``, ``unset NAME``, ``test -v NAME`` / ``[ -v NAME ]``, declarations and
# namerefs (``declare -n r='a[$(cmd)]'``), and ``b[x]=1`` / ``a=([x]=1)``, whose
# subscript is arithmetic. Such code only runs through a subscript, so it needs a
# ``[`` (``_BRACKET``), except for the evaluations in ``_DORMANT_CODE_ALONE``.
_REEVALUATION = re.compile(
    r"\$\(\(|\(\(|\$\[|\$\{!|\[\[|\blet\b"
    # A NAME operand is evaluated only through a subscript: a ``[`` (or its escape)
    # in the same simple command, or a nameref. Narrow on purpose: ``read -r line``,
    # ``printf '%s'``, ``export X=$(pwd)`` are everyday commands.
    r"|\b(?:read|mapfile|readarray|getopts|unset)\b[^;&|\n]*(?:\[|\\x0*5[bB]|\\0*133)"
    r"|\bprintf\s+-v\b|\bwait\s+-\w*p"
    r"|(?<!\S)-[vR]\s+[^;&|\n\]]*\["  # test -v 'a[...]', [ -v 'a[...]' ]
    r"|\b(?:declare|typeset|local|readonly|export)\s+-\w*[niaA]"
    r"|\b(?:declare|typeset|local|readonly|export)\b[^;&|\n]*\w\["
    r"|\]\+?="  # b[x]=1, a=([x]=1)
    r"|\$\{[#!]?(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*])(?:\[|:)"
)
# `_REEVALUATION`'s alternatives, each with literals one of which every match of
# it contains: `_reevaluates` searches only those whose literal is in the text
# (the same truth value as ``_REEVALUATION.search``, without a pass of the whole
# alternation over every character of a long command; issue 20).
_REEVALUATION_PARTS: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = tuple(
    (literals, re.compile(part))
    for literals, part in (
        (("((", "$[", "${!", "[["), r"\$\(\(|\(\(|\$\[|\$\{!|\[\["),
        (("let",), r"\blet\b"),
        (
            ("read", "mapfile", "getopts", "unset"),
            r"\b(?:read|mapfile|readarray|getopts|unset)\b[^;&|\n]*(?:\[|\\x0*5[bB]|\\0*133)",
        ),
        (("printf",), r"\bprintf\s+-v\b"),
        (("wait",), r"\bwait\s+-\w*p"),
        (("[",), r"(?<!\S)-[vR]\s+[^;&|\n\]]*\["),
        (
            ("declare", "typeset", "local", "readonly", "export"),
            r"\b(?:declare|typeset|local|readonly|export)\s+-\w*[niaA]"
            r"|\b(?:declare|typeset|local|readonly|export)\b[^;&|\n]*\w\[",
        ),
        (("]",), r"\]\+?="),
        (("${",), r"\$\{[#!]?(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*])(?:\[|:)"),
    )
)


def _reevaluates(text: str) -> bool:
    """``_REEVALUATION.search(text) is not None``, searching only the alternatives
    whose required literal the text contains (`_REEVALUATION_PARTS`)."""
    for literals, part in _REEVALUATION_PARTS:
        if any(literal in text for literal in literals) and part.search(text):
            return True
    return False


# ``${x@P}`` runs prompt expansion, which decodes ``\044`` and ``\$`` and then runs
# command substitutions: never read with confidence.
_PROMPT_EXPANSION = re.compile(r"@P\}")
# Code the parser does not see run now, or the makings of it: any command
# substitution or backtick (their output, or the text itself through
# ${BASH_EXECUTION_STRING} / declare -f), a ``$`` that starts no expansion
# (``$'``, ``$"``, ``'$'``, ``\$``), a ``$`` in single quotes, ``$`` or a backtick
# spelled as an escape (``$'\x24'``, ``echo -e '\044'``, ``printf '\44'``), and a
# slice or pattern expansion that can cut a ``$`` out of a value.
_DORMANT_CODE = re.compile(
    r"\$\(|`"
    r"|\$(?![A-Za-z0-9_{@*#?!$(-])"
    r"|\\\$"
    r"|'[^']*\$"
    r"|\\(?:x0*(?:24|60)|0*(?:44|140)|[uU]0*(?:24|60))"
    r"|\$\{[#!]?(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*])(?:\[[^]]*\])?(?::|#|%|/|\^|,|@)"
)
# A ``[`` in the text or spelled as an escape (``$'\x5b'``, ``\133``).
_BRACKET = re.compile(r"\[|\\(?:x0*5[bB]|0*133|[uU]0*5[bB])")
# The ``[[``/``]]`` of a test command, in a text whose words cannot carry them
# into a value (no quoting, escapes, comments, here-documents or ``${...}``).
_KEYWORD_BRACKETS = re.compile(r"(?:^|(?<=[\s;&|(]))(?:\[\[|\]\])(?=\s|$)")
_QUOTING = re.compile(r"['\"\\#]|<<|\$\{")


def _has_bracket(text: str) -> bool:
    if not _QUOTING.search(text):
        text = _KEYWORD_BRACKETS.sub(" ", text)
    return _BRACKET.search(text) is not None


# Dormant code that a later evaluation runs without a subscript: the inert
# spellings the previous check caught whatever the evaluation.
_DORMANT_CODE_ALONE = re.compile(
    r"'[^']*(?:\$\(|`)[^']*'"  # '...$(...' or '...`...'
    r"|\\\$\\?\(|\\`"  # \$(  \$\(  \`
    r"|\$'[^']*\\(?:x24|044|u0024|U00000024|x60|140)"  # $'\x24(' ANSI-C spellings
)
# An assignment inside arithmetic (``(( PATH=1 ))``, ``let IFS++``) and a loop
# variable (``for PATH in ...``): see `parse_command`.
_ARITHMETIC = re.compile(r"\(\(|\$\[|\blet\b")
_ARITHMETIC_ASSIGNED = re.compile(
    r"\b([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[[^]]*\])?\s*(?:(?:[-+*/%&|^]|<<|>>)?=(?!=)|\+\+|--)"
    r"|(?:\+\+|--)\s*([A-Za-z_][A-Za-z0-9_]*)"
)
_LOOP_VARIABLE = re.compile(r"\b(?:for|select)\s+([A-Za-z_][A-Za-z0-9_]*)")


_BLANKS_ONLY_TO_THE_GRAMMAR = re.compile("[\r\v\f]")
_BLANK_NAMES = {"\r": "carriage return", "\v": "vertical tab", "\f": "form feed"}


PARSE_TIMEOUT_S = 0.25
"""Longest tree-sitter may take on one script (seconds): some inputs of a few dozen
KiB (``((a`` repeated) take it tens of seconds, on the supervisor's event loop."""


_UNBOUNDED_PARSE_BYTES = 2048


def _parse_bounded(src: bytes) -> Tree:
    """``_parser().parse(src)``, abandoned after `PARSE_TIMEOUT_S`.

    Raises:
        UnparseableCommand: the parse ran out of time (fail closed).
    """
    parser = _parser()
    if len(src) <= _UNBOUNDED_PARSE_BYTES:
        # Small scripts parse in well under the bound even at tree-sitter's worst
        # (quadratic) case, ~35 ms at 2 KiB; the progress callback costs a Python
        # call per parser step, most of a typical command's parse time.
        return parser.parse(src)
    deadline = time.monotonic() + PARSE_TIMEOUT_S
    try:
        return parser.parse(
            lambda offset, _point: src[offset : offset + 65536],
            progress_callback=lambda *_: time.monotonic() > deadline,
        )
    except ValueError as exc:
        parser.reset()  # else the next parse would resume this one
        raise _ParseTimeout(f"parsing took longer than {PARSE_TIMEOUT_S:g} s") from exc


# ----------------------------------------------------------------------------
# The parser, created once per thread on first use.

_local = threading.local()
_language_lock = threading.Lock()
_language: object | None = None


def _parser() -> Parser:
    parser = getattr(_local, "parser", None)
    if parser is None:
        from tree_sitter import Language
        from tree_sitter import Parser as _TSParser

        global _language
        with _language_lock:
            if _language is None:
                import tree_sitter_bash

                _language = Language(tree_sitter_bash.language())
        parser = _TSParser(_language)  # type: ignore[arg-type]
        _local.parser = parser
    return parser


# ----------------------------------------------------------------------------
# Words.


class _Word:
    """A decoded shell word: ``dynamic`` when the shell still expands part of it.

    (A slotted class rather than a frozen dataclass: one is made per word, and
    the dataclass costs several times more to create. Never mutated.)
    """

    __slots__ = ("dynamic", "text")

    def __init__(self, text: str, dynamic: bool = False) -> None:
        self.text = text
        self.dynamic = dynamic

    def __repr__(self) -> str:
        return f"_Word(text={self.text!r}, dynamic={self.dynamic!r})"


class _RuntimeWord(_Word):
    """A word filled in at run time by the program that runs the command (``{}``
    of ``find -exec`` and ``xargs -I``): dynamic, and reported in
    :attr:`SimpleCommand.runtime_words`."""

    __slots__ = ()

    def __init__(self, text: str) -> None:
        super().__init__(text, True)


class _Pieces:
    """Characters of a word being decoded; ``live`` marks unquoted, unescaped ones."""

    __slots__ = ("chars", "dynamic", "live")

    def __init__(self) -> None:
        self.chars: list[str] = []
        self.live: list[bool] = []
        self.dynamic = False

    def add(self, text: str, live: bool) -> None:
        self.chars.extend(text)
        self.live.extend([live] * len(text))

    def word(self) -> _Word:
        text = "".join(self.chars)
        if self.dynamic or not _PATTERN_CHARS.search(text):
            return _Word(text, self.dynamic)
        return _Word(text, _has_pattern(self.chars, self.live))


_PATTERN_CHARS = re.compile(r"[*?\[{]")


def _has_pattern(chars: Sequence[str], live: Sequence[bool]) -> bool:
    """Whether unquoted characters form a glob or a brace expansion."""
    opens: list[int] = []
    for i, (char, is_live) in enumerate(zip(chars, live, strict=True)):
        if not is_live:
            continue
        if char in "*?":
            return True
        if char == "[" and "]" in chars[i + 1 :]:
            return True
        if char == "{":
            opens.append(i)
        elif char == "}" and opens:
            start = opens.pop()
            inner = range(start + 1, i)
            if any(chars[j] == "," and live[j] for j in inner):
                return True
            if "".join(chars[start + 1 : i]).find("..") > 0:
                return True
    return False


_EXPANSIONS = frozenset(
    {
        "simple_expansion",
        "expansion",
        "command_substitution",
        "process_substitution",
        "arithmetic_expansion",
        "brace_expression",
    }
)
_DQUOTE_ESCAPABLE = '$`"\\'


def _decode_unquoted(text: str, out: _Pieces) -> None:
    if "\\" not in text:
        out.add(text, True)
        return
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            if text[i + 1] != "\n":
                out.add(text[i + 1], False)
            i += 2
            continue
        out.add(char, True)
        i += 1


def _decode_dquoted(text: str, out: _Pieces) -> None:
    if "\\" not in text:
        out.add(text, False)  # what the loop below does, character by character
        return
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            following = text[i + 1]
            if following == "\n":
                i += 2
                continue
            if following in _DQUOTE_ESCAPABLE:
                out.add(following, False)
                i += 2
                continue
        out.add(char, False)
        i += 1


_ANSI_SIMPLE = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_ANSI_NUMERIC = re.compile(r"[0-7]{1,3}|x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}")


def _decode_ansi_c(body: str) -> str:
    """Decode the inside of ``$'...'`` as bash does (``\\n``, ``\\xHH``, octal ...)."""
    out: list[str] = []
    i = 0
    while i < len(body):
        char = body[i]
        if char != "\\" or i + 1 >= len(body):
            out.append(char)
            i += 1
            continue
        following = body[i + 1]
        if following in _ANSI_SIMPLE:
            out.append(_ANSI_SIMPLE[following])
            i += 2
            continue
        if following == "c" and i + 2 < len(body):
            out.append(chr(ord(body[i + 2].upper()) ^ 0x40))
            i += 3
            continue
        number = _ANSI_NUMERIC.match(body, i + 1)
        if number:
            digits = number.group()
            code = int(digits, 8) if digits[0] in "01234567" else int(digits[1:], 16)
            out.append(chr(min(code, 0x10FFFF)))
            i = number.end()
            continue
        out.append("\\" + following)
        i += 2
    # bash ends the string at a NUL byte.
    return "".join(out).split("\0", 1)[0]


def _text(node: Node, src: bytes | None = None) -> str:
    """The node's source text. With ``src`` (the bytes the node's tree was parsed
    from) it is sliced from there: the same bytes as ``node.text``, cheaper."""
    if src is None:
        return (node.text or b"").decode("utf-8", "replace")
    return src[node.start_byte : node.end_byte].decode("utf-8", "replace")


def _decode_into(node: Node, src: bytes, out: _Pieces) -> None:
    kind = node.type
    if kind == "word" or kind == "number":
        _decode_unquoted(_text(node, src), out)
    elif kind == "raw_string":
        out.add(_text(node, src)[1:-1], False)
    elif kind == "ansi_c_string":
        out.add(_decode_ansi_c(_text(node, src)[2:-1]), False)
    elif kind in ("string", "translated_string"):
        start = node.start_byte + 1
        for child in node.named_children:
            if child.type == "string_content":
                continue
            if child.type not in _EXPANSIONS:
                raise UnparseableCommand(f"cannot read a {child.type} inside a string")
            _decode_dquoted(src[start : child.start_byte].decode("utf-8", "replace"), out)
            out.add(_text(child, src), False)
            out.dynamic = True
            start = child.end_byte
        _decode_dquoted(src[start : node.end_byte - 1].decode("utf-8", "replace"), out)
    elif kind == "concatenation":
        children = node.children
        start = node.start_byte
        for index, child in enumerate(children):
            if child.start_byte > start:  # defensive: text between the parts
                _decode_unquoted(src[start : child.start_byte].decode("utf-8", "replace"), out)
            _decode_part(children, index, src, out)
            start = child.end_byte
    elif kind in _EXPANSIONS:
        out.add(_text(node, src), False)
        out.dynamic = True
    else:
        raise UnparseableCommand(f"cannot read a shell word of type {kind}")


def _decode_part(nodes: Sequence[Node], index: int, src: bytes, out: _Pieces) -> None:
    node = nodes[index]
    if not node.is_named:
        text = _text(node, src)
        following = nodes[index + 1] if index + 1 < len(nodes) else None
        if text == "$" and following is not None and following.type == "string":
            return  # $"..." is a (locale-translated) double-quoted string
        _decode_unquoted(text, out)
        return
    _decode_into(node, src, out)


def _decode(nodes: Sequence[Node], src: bytes) -> _Word:
    if len(nodes) == 1:
        node = nodes[0]
        kind = node.type
        if (kind == "word" or kind == "number") and node.is_named:
            # The common case, a plain word, without building `_Pieces`: the same
            # result as `_decode_unquoted` then `_Pieces.word` (every character live).
            text = _text(node, src)
            if "\\" not in text:
                if not _PATTERN_CHARS.search(text):
                    return _Word(text, False)
                return _Word(text, _has_pattern(list(text), [True] * len(text)))
        elif kind == "string" or kind == "concatenation":
            quick = _decode_quick(node, kind, src)
            if quick is not None:
                return quick
    out = _Pieces()
    for index in range(len(nodes)):
        _decode_part(nodes, index, src, out)
    return out.word()


def _decode_quick(node: Node, kind: str, src: bytes) -> _Word | None:
    """`_decode` of a ``"..."`` without expansions or of words glued to ``'...'``
    parts, or None for anything else (then `_decode` does the general thing).

    Same result: a double-quoted string without backslashes or expansions is its
    text, nothing live; a concatenation of such parts is their texts, unquoted
    words live, ``'...'`` not (and `_has_pattern` decides when glob or brace
    characters appear).
    """
    if not node.is_named:
        return None
    if kind == "string":
        for child in node.named_children:
            if child.type != "string_content":
                return None
        text = src[node.start_byte + 1 : node.end_byte - 1].decode("utf-8", "replace")
        if "\\" in text:
            return None
        return _Word(text, False)
    parts: list[tuple[str, bool]] = []
    start = node.start_byte
    for child in node.children:
        if child.start_byte > start or child.child_count != 0 or not child.is_named:
            return None
        part_kind = child.type
        if part_kind == "word":
            part = _text(child, src)
            if "\\" in part:
                return None
            parts.append((part, True))
        elif part_kind == "raw_string":
            parts.append((_text(child, src)[1:-1], False))
        else:
            return None
        start = child.end_byte
    text = "".join([part for part, _ in parts])
    if not _PATTERN_CHARS.search(text):
        return _Word(text, False)
    chars: list[str] = []
    live: list[bool] = []
    for part, is_live in parts:
        chars.extend(part)
        live.extend([is_live] * len(part))
    return _Word(text, _has_pattern(chars, live))


_LINE_CONTINUATIONS = re.compile(rb"(?:\\\r?\n)*")


def _group_words(nodes: Sequence[Node], src: bytes) -> list[list[Node]]:
    """Group word nodes that bash reads as one word.

    tree-sitter-bash splits ``r\\<newline>m`` into two words, and ``$"..."`` into
    ``$`` and a string; bash joins parts with no blank between them.
    """
    groups: list[list[Node]] = []
    previous_end = -1
    for node in nodes:
        gap = src[previous_end : node.start_byte] if previous_end >= 0 else None
        # (A gap that is not empty and does not start with a backslash is no line
        # continuation: the regex is only run on the others.)
        if (
            gap is not None
            and groups
            and (not gap or (gap[0] == 0x5C and _LINE_CONTINUATIONS.fullmatch(gap)))
        ):
            groups[-1].append(node)
        else:
            groups.append([node])
        previous_end = node.end_byte
    return groups


# ----------------------------------------------------------------------------
# Wrappers and shells.


@dataclass(frozen=True)
class _Wrapper:
    """How a wrapper program's own options look, so the wrapped command can be found.

    Attributes:
        short_with_arg: short option letters that take a value (``-u root``, ``-uroot``).
        long_with_arg: long options that take the next word as value (``--user root``).
        operands: positional words before the command (``timeout DURATION``).
        assignments: ``NAME=value`` words may precede the command (``env``, ``sudo``).
        opaque: options after which the command cannot be found (``env -S``).
        no_command: options after which the operands are not a command (``ionice -p``).
    """

    short_with_arg: str = ""
    long_with_arg: frozenset[str] = frozenset()
    operands: int = 0
    assignments: bool = False
    opaque: frozenset[str] = frozenset()
    no_command: frozenset[str] = frozenset()


_WRAPPERS: dict[str, _Wrapper] = {
    "env": _Wrapper(
        short_with_arg="uCS",
        long_with_arg=frozenset({"--unset", "--chdir", "--split-string"}),
        assignments=True,
        opaque=frozenset({"-S", "--split-string"}),
    ),
    "timeout": _Wrapper(
        short_with_arg="sk", long_with_arg=frozenset({"--signal", "--kill-after"}), operands=1
    ),
    "nice": _Wrapper(short_with_arg="n", long_with_arg=frozenset({"--adjustment"})),
    "ionice": _Wrapper(
        short_with_arg="cnpPu",
        long_with_arg=frozenset({"--class", "--classdata", "--pid", "--pgid", "--uid"}),
        no_command=frozenset({"-p", "-P", "-u", "--pid", "--pgid", "--uid"}),
    ),
    "taskset": _Wrapper(operands=1, no_command=frozenset({"-p", "--pid"})),
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
                "--max-lines",
                "--process-slot-var",
            }
        ),
    ),
    "sudo": _Wrapper(
        short_with_arg="CDghprtTUu",
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
    "command": _Wrapper(no_command=frozenset({"-v", "-V"})),
    "builtin": _Wrapper(),
    "time": _Wrapper(short_with_arg="fo", long_with_arg=frozenset({"--format", "--output"})),
    "coproc": _Wrapper(),
    "stdbuf": _Wrapper(
        short_with_arg="ioe", long_with_arg=frozenset({"--input", "--output", "--error"})
    ),
    "chroot": _Wrapper(long_with_arg=frozenset({"--groups", "--userspec"}), operands=1),
    "busybox": _Wrapper(),
    "toybox": _Wrapper(),  # `toybox CMD` runs the applet CMD, like busybox
}

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"})
_FIND_ACTIONS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
# Reserved words that bash reads after the `time` and `coproc` keywords; the grammar
# takes those keywords for plain commands, so what follows would be misread.
_RESERVED = frozenset(
    {"{", "}", "!", "(", "((", "[[", "if", "while", "until", "for", "select", "case", "function"}
)
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^]]*\])?\+?=")
_COMPUTED_PROGRAM = "the program name is computed at run time"


def _is_dangerous(name: str) -> bool:
    return name in DANGEROUS_VARIABLES or name.startswith(_DANGEROUS_PREFIXES)


def _unwrap(argv: Sequence[_Word], wrapper: _Wrapper) -> tuple[Sequence[_Word], tuple[str, ...]]:
    """Return the command a wrapper runs (empty if none) and the assignments it adds."""
    name = argv[0].text
    assignments: list[str] = []
    i = 1
    while i < len(argv):
        word = argv[i].text
        if word == "--":
            i += 1
            break
        if word == "-":  # env's spelling of -i
            i += 1
            continue
        if word.startswith("--"):
            option = word.split("=", 1)[0]
            if option in wrapper.opaque:
                raise UnparseableCommand(f"{name} {option} hides the command it runs")
            if option in wrapper.no_command:
                return (), ()
            i += 2 if "=" not in word and option in wrapper.long_with_arg else 1
            continue
        if word.startswith("-") and len(word) > 1:
            i += 1
            for offset, letter in enumerate(word[1:], start=2):
                if f"-{letter}" in wrapper.opaque:
                    raise UnparseableCommand(f"{name} -{letter} hides the command it runs")
                if f"-{letter}" in wrapper.no_command:
                    return (), ()
                if letter in wrapper.short_with_arg:
                    if offset == len(word):  # the value is the next word
                        i += 1
                    break
            continue
        if wrapper.assignments and _ASSIGNMENT.match(word):
            assignments.append(word)
            i += 1
            continue
        break
    return argv[i + wrapper.operands :], tuple(assignments)


def _shell_script(argv: Sequence[_Word]) -> tuple[_Word | None, bool]:
    """Return ``(SCRIPT, reads_stdin)`` for a shell's argv.

    ``SCRIPT`` is the word after ``-c`` (None without ``-c``); ``reads_stdin`` is
    whether the shell reads its script from standard input or a pipe (no ``-c``
    and no file, ``-s``, ``-``, ``/dev/stdin``, a process substitution ``<(...)``).
    """
    has_c = has_s = False
    i = 1
    while i < len(argv):
        word = argv[i].text
        if word in ("--version", "--help") and not has_c:
            return None, False
        if word == "-":
            return None, True
        if word == "--":
            i += 1
            break
        if word.startswith("--"):
            i += 2 if word in ("--rcfile", "--init-file") else 1
            continue
        if word[:1] in ("-", "+") and len(word) > 1:
            letters = word[1:]
            has_c = has_c or (word[0] == "-" and "c" in letters)
            has_s = has_s or (word[0] == "-" and "s" in letters)
            i += 2 if ("o" in letters or "O" in letters) else 1
            continue
        break
    if has_c:
        return (argv[i] if i < len(argv) else None), False
    return None, has_s or i >= len(argv) or _reads_pipe(argv[i])


def _reads_pipe(word: _Word) -> bool:
    """Whether a script file name is standard input, a process substitution or a
    file descriptor (its contents are not in the text)."""
    text = word.text
    return (
        text in _STDIN_SCRIPTS
        or text.startswith(("<(", ">(", "/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"))
        or (word.dynamic and "<(" in text)
    )


def _variables_set(argv: Sequence[_Word]) -> Iterator[str]:
    """The variable names a `_SETS_VARIABLES` builtin may assign: each argument
    that is a name (``PATH``, ``a[1]``, ``PATH=x``, ``PATH+=x``; for ``let`` every
    name assigned in its expressions)."""
    if argv[0].text == "let":
        for word in argv[1:]:
            for match in _ARITHMETIC_ASSIGNED.finditer(word.text):
                yield match.group(1) or match.group(2)
        return
    for word in argv[1:]:
        match = _ASSIGNMENT.match(word.text + "=")
        if match:
            yield match.group(1)


_SU_FLAGS_TEXT = "lmpfP"
_SU_FLAGS = frozenset(_SU_FLAGS_TEXT)
_SU_VALUED = frozenset("csgGw")
_SU_LONG_FLAGS = frozenset(
    {"--login", "--preserve-environment", "--fast", "--pty", "--help", "--version"}
)
_SU_LONG_VALUED = {
    "--command": "c",
    "--session-command": "c",
    "--shell": "s",
    "--group": "g",
    "--supp-group": "G",
    "--whitelist-environment": "w",
}


def _su_script(argv: Sequence[_Word]) -> _Word | None:
    """The script ``su`` runs with ``-c``/``--command``/``--session-command`` (also in
    a cluster: ``-lc CMD``), or None for a plain login shell.

    util-linux su reads its options anywhere (``su root -c CMD``). Anything this
    does not fully understand is unparseable (fail closed, red team of issue 20):
    an unknown option, a word computed at run time, ``-c`` without its script (it
    is then given at run time: ``xargs su -c``), ``-s``/``--shell`` (su runs the
    program it names: ``su -s /bin/rm``), and words after the user name (handed
    to the shell).

    Raises:
        UnparseableCommand: see above.
    """
    script: _Word | None = None
    users = 0
    i = 1
    while i < len(argv):
        word = argv[i]
        text = word.text
        i += 1
        if word.dynamic:
            raise UnparseableCommand("a word of su is computed at run time")
        if text == "-":
            continue  # --login
        inline: str | None
        if text.startswith("--"):
            name, equals, value = text.partition("=")
            if name in _SU_LONG_FLAGS and not equals:
                continue
            if name not in _SU_LONG_VALUED:
                raise UnparseableCommand(f"su option {name} is not known")
            letter, inline = _SU_LONG_VALUED[name], value if equals else None
        elif text.startswith("-"):
            cluster = text[1:]
            flags = len(cluster) - len(cluster.lstrip(_SU_FLAGS_TEXT))
            if flags == len(cluster):
                continue
            letter, name = cluster[flags], f"-{cluster[flags]}"
            if letter not in _SU_VALUED:
                raise UnparseableCommand(f"su option {name} is not known")
            inline = cluster[flags + 1 :] or None
        else:
            users += 1
            if users > 1:
                raise UnparseableCommand("su hands the words after the user name to the shell")
            continue
        if inline is not None:
            given = _Word(inline, False)
        elif i < len(argv):
            given, i = argv[i], i + 1
        else:
            raise UnparseableCommand(f"su {name} has no value: it is given at run time")
        if letter == "s":
            raise UnparseableCommand(f"su {name} runs the program it names")
        if letter == "c":
            script = given
    return script


def _find_actions(argv: Sequence[_Word]) -> Iterator[tuple[str, Sequence[_Word], str]]:
    """Yield ``(action, argv, terminator)`` for the ``-exec``/``-execdir``/``-ok``/
    ``-okdir`` actions (terminator ``";"``, ``"+"``, or ``""`` when missing)."""
    i = 1
    while i < len(argv):
        if argv[i].text in _FIND_ACTIONS:
            end = i + 1
            while end < len(argv) and argv[end].text not in (";", "+"):
                end += 1
            if end > i + 1:
                yield argv[i].text, argv[i + 1 : end], argv[end].text if end < len(argv) else ""
            i = end
        i += 1


def _xargs_replaces(options: Sequence[_Word]) -> bool:
    """Whether xargs's own words (``options``, before its command) give ``-I R``,
    ``-i[R]`` or ``--replace[=R]`` (also inside a cluster: ``-0I{}``)."""
    for word in options:
        text = word.text
        if text.startswith("--replace"):
            return True
        if text.startswith("-") and not text.startswith("--"):
            for letter in text[1:]:
                if letter in "Ii":
                    return True
                if letter in "adEeLlnPs":
                    break  # the rest of the word is this option's value
    return False


def _env_split_string(argv: Sequence[_Word]) -> list[_Word] | None:
    """``env -S STRING …`` as env itself reads it: STRING split into words, in
    its place (issue 13 §6). None without ``-S``.

    Raises:
        UnparseableCommand: the string uses env's own expansions (``${VAR}``,
            escapes) or is computed at run time.
    """
    for i, word in enumerate(argv[1:], start=1):
        text = word.text
        if not text.startswith("-") or text == "-":
            return None
        if text == "--":
            return None
        value: _Word | None = None
        end = i + 1
        if text in ("-S", "--split-string"):
            if i + 1 >= len(argv):
                return None
            value, end = argv[i + 1], i + 2
        elif text.startswith("--split-string="):
            value = _Word(text.partition("=")[2], word.dynamic)
        elif text.startswith("-") and not text.startswith("--") and "S" in text:
            head, _, tail = text[1:].partition("S")
            if any(letter in "uC" for letter in head):
                return None
            if tail:
                value = _Word(tail, word.dynamic)
            elif i + 1 < len(argv):
                value, end = argv[i + 1], i + 2
            if head:
                argv = [*argv[:i], _Word("-" + head), *argv[i:]]
                i, end = i + 1, end + 1
        if value is None:
            continue
        if value.dynamic or "$" in value.text or "\\" in value.text:
            raise UnparseableCommand("env -S expands its string at run time")
        try:
            split = shlex.split(value.text, comments=True)
        except ValueError as exc:
            raise UnparseableCommand("env -S string cannot be split") from exc
        return [*argv[:i], *[_Word(w) for w in split], *argv[end:]]
    return None


def _check_make(name: str, argv: Sequence[_Word]) -> None:
    """``make`` runs its makefile's recipes; the command line can supply them
    (issue 13 §6): ``--eval``/``-E``, a makefile read from standard input, or a
    variable set on the command line (``make CC='git push #'``)."""
    for i, word in enumerate(argv[1:], start=1):
        text = word.text
        if word.dynamic:
            raise UnparseableCommand(f"{name} is given words computed at run time")
        if text.startswith(("--eval", "-E")):
            raise UnparseableCommand(
                f"{name} {text.split('=', 1)[0]} runs a recipe from the command line"
            )
        if text in ("-f", "--file", "--makefile") and i + 1 < len(argv):
            target = argv[i + 1].text
            if target in _STDIN_SCRIPTS or _reads_pipe(argv[i + 1]):
                raise UnparseableCommand(f"{name} reads its makefile from standard input")
        if not text.startswith("-") and _ASSIGNMENT.match(text):
            raise UnparseableCommand(f"{name} {text.split('=', 1)[0]}=… can set a recipe")


def _xargs_replace(argv: Sequence[_Word]) -> str:
    """The replace-string of ``xargs -I R`` / ``-i`` / ``--replace`` ("{}" by
    default), also inside a cluster of short options (``-0I%``)."""
    for i, word in enumerate(argv[1:], start=1):
        text = word.text
        if text.startswith("--replace="):
            return text.split("=", 1)[1]
        if not text.startswith("-") or text.startswith("--"):
            continue
        for offset, letter in enumerate(text[1:], start=2):
            if letter == "I":
                if offset < len(text):
                    return text[offset:]
                return argv[i + 1].text if i + 1 < len(argv) else "{}"
            if letter == "i":
                return text[offset:] or "{}"
            if letter in "adEeLlnPs":
                break  # the rest of the word is this option's value
    return "{}"


# Programs that run a command given in their arguments (or read from their input)
# that `_unwrap` does not find: any use but asking for help or the version is
# unparseable (fail closed).
_OPAQUE_RUNNERS = frozenset(
    {
        "watch",
        "chrt",
        "setpriv",
        "sg",
        "newgrp",
        "fish",
        "tcsh",
        "csh",
        "pkexec",
        "runuser",
        "numactl",
        "nsenter",
        "systemd-run",
        "setarch",
        "linux32",
        "linux64",
        "prlimit",
        "fakeroot",
        "faketime",
        "eatmydata",
        "proot",
        "bwrap",
        "cgexec",
        "catchsegv",
        "unbuffer",
        "rlwrap",
        "tini",
        "dumb-init",
        "chpst",
        "setuidgid",
        "envdir",
        "softlimit",
        "proxychains",
        "proxychains4",
        "torsocks",
        "trickle",
        "nocache",
        "cpulimit",
        "parallel",
        "at",
        "batch",
        # Review finding F3 (issue 13 §6): more programs that run a command in
        # their own syntax. Terminals and multiplexers (`xterm -e CMD`, `tmux
        # new-session 'CMD'`, `screen -dm CMD`), expect's Tcl (`spawn`), programs
        # whose arguments are shell command lines (`hyperfine`, `pee`, `sem`),
        # the dynamic loader run as a program (`ld.so /usr/bin/git push`), and
        # the rest of the lock/daemon/profiler/launcher family.
        "xterm",
        "uxterm",
        "xfce4-terminal",
        "gnome-terminal",
        "konsole",
        "x-terminal-emulator",
        "urxvt",
        "rxvt",
        "kitty",
        "alacritty",
        "wezterm",
        "terminator",
        "tilix",
        "tmux",
        "screen",
        "byobu",
        "zellij",
        "dtach",
        "abduco",
        "expect",
        "hyperfine",
        "pee",
        "sem",
        "lckdo",
        "with-lock-ex",
        "run-parts",
        "runcon",
        "run0",
        "schroot",
        "flatpak-spawn",
        "distrobox-enter",
        "timelimit",
        "daemonize",
        "start-stop-daemon",
        "heaptrack",
        "rr",
        "uftrace",
        "memusage",
        "mpirun",
        "mpiexec",
        "srun",
        "socat",
        "git-shell",
        "ld.so",
        "ld-linux.so.2",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
        "ld-musl-x86_64.so.1",
        "ld-musl-aarch64.so.1",
    }
)
_ONLY_INFORMATION = frozenset({"--help", "--version", "-h", "-V"})
# Builtins that assign the variables named in their arguments (``printf -v NAME``,
# ``read NAME``, ``mapfile NAME``, ``declare NAME``, ``let NAME=1`` ...).
_SETS_VARIABLES = frozenset(
    {
        "printf",
        "read",
        "mapfile",
        "readarray",
        "getopts",
        "wait",
        "let",
        "declare",
        "typeset",
        "local",
        "readonly",
        "export",
        "unset",
    }
)
# A script file name that reads the shell's standard input or a pipe.
_STDIN_SCRIPTS = frozenset({"-", "/dev/stdin", "/proc/self/fd/0", "/dev/fd/0"})

# Interpreters that run a script file named in their arguments (and shells,
# ``source``, ``make -f``): a file the same command writes is code the text does
# not show (issue 13 §6, "bash FILE of a file written earlier in the same call").
_SCRIPT_RUNNERS = frozenset(
    {
        *_SHELLS,
        "source",
        ".",
        "python",
        "python2",
        "python3",
        "pypy",
        "pypy3",
        "node",
        "nodejs",
        "deno",
        "bun",
        "perl",
        "ruby",
        "php",
        "lua",
        "Rscript",
        "make",
        "gmake",
        "awk",
        "gawk",
        "sed",
        "tclsh",
        "osascript",
    }
)
_PYTHON_VERSIONED = re.compile(r"python[0-9.]*\Z")
# Programs that load code from files they are not given (imports from the working
# directory, conftest.py, a Makefile, package.json scripts ...): a file the same
# text writes that matches the family's names or suffixes is code the text does
# not show (issue 13 §6).
_PYTHON_CODE = (
    (".py", ".pth"),
    frozenset({"pyproject.toml", "setup.cfg", "tox.ini", "pytest.ini", "noxfile.py"}),
)
_NODE_CODE = ((".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".json"), frozenset())
_IMPLICIT_CODE: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    **dict.fromkeys(
        ("pytest", "py.test", "tox", "nox", "pip", "pip3", "uv", "uvx", "poetry", "pdm"),
        _PYTHON_CODE,
    ),
    **dict.fromkeys(("hatch", "pipenv", "pipx", "coverage"), _PYTHON_CODE),
    **dict.fromkeys(
        ("node", "nodejs", "npm", "npx", "pnpm", "pnpx", "yarn", "bun", "bunx", "deno"),
        _NODE_CODE,
    ),
    **dict.fromkeys(
        ("make", "gmake"), ((".mk",), frozenset({"Makefile", "makefile", "GNUmakefile"}))
    ),
    "perl": ((".pm", ".pl"), frozenset()),
    **dict.fromkeys(("ruby", "rake", "bundle"), ((".rb",), frozenset({"Rakefile", "Gemfile"}))),
}
# Programs that write the files their arguments name (besides output
# redirections): every operand may be a file written by the command.
_FILE_WRITERS = frozenset(
    {
        "tee",
        "cp",
        "mv",
        "ln",
        "install",
        "dd",
        "curl",
        "wget",
        "touch",
        "truncate",
        "rsync",
        "scp",
        "tar",
        "unzip",
        "patch",
        "sed",
        "perl",
        "base64",
        "xxd",
        "openssl",
        "gzip",
        "gunzip",
        "bzip2",
        "xz",
        "split",
        "csplit",
        "sort",
        "uniq",
    }
)
# A redirection target that writes no file.
_NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})

# Programs whose arguments `_Walker._emit` looks into: any other program is only
# recorded.
_RUNS_OTHER_CODE = frozenset(
    {
        *_WRAPPERS,
        *_SHELLS,
        *_OPAQUE_RUNNERS,
        *_SETS_VARIABLES,
        *WRAPPER_PROGRAMS,
        *SCRIPT_OPTION_PROGRAMS,
        "source",
        ".",
        "su",
        "eval",
        "trap",
        "find",
        "git",
        "alias",
        "hash",
        "enable",
        "make",
        "gmake",
    }
)

# git's global options (before the subcommand): those that take the next word as
# their value, and those that configure code git runs (``-c alias.x=!cmd``,
# ``-c core.fsmonitor=…``).
_GIT_OPTIONS_WITH_VALUE = GIT_GLOBAL_OPTIONS_WITH_VALUE
_GIT_CONFIGURING = frozenset({"-c", "--config-env", "--exec-path"})


def git_dashed_subcommand(name: str) -> str | None:
    """The git subcommand a program basename spells in git's dashed form, or None.

    ``git-push`` → ``"push"``, ``git-send-pack`` → ``"send-pack"``, ``git-lfs`` →
    ``"lfs"``: git runs ``git SUB`` as the program ``git-SUB`` from its exec path
    (``/usr/lib/git-core``) or ``$PATH``, and that program runs directly does the
    same (issue 13 §6, review finding F3). ``git-shell`` is not a subcommand (it is a
    login shell, `_OPAQUE_RUNNERS`).
    """
    if not name.startswith("git-") or len(name) == 4 or name in _NOT_GIT_SUBCOMMANDS:
        return None
    return name[4:]


# `git-*` programs that are not `git SUB`.
_NOT_GIT_SUBCOMMANDS = frozenset({"git-shell"})


def _git_subcommand(argv: Sequence[_Word]) -> tuple[int, bool] | None:
    """Where git's subcommand starts when global options precede it, and whether
    one of them configures code git runs; None without global options."""
    index, configures = 1, False
    while index < len(argv) and argv[index].text.startswith("-"):
        word = argv[index].text
        name = word.split("=", 1)[0]
        configures |= name in _GIT_CONFIGURING
        index += 2 if word in _GIT_OPTIONS_WITH_VALUE else 1
    if index == 1 or index >= len(argv):
        return None
    return index, configures


_SIMPLE_COMMAND_FIELDS = (
    "argv",
    "assignments",
    "dangerous",
    "path_qualified",
    "via",
    "more_words",
    "runtime_words",
    "unseen",
    "redirects",
)


def _new_simple_command(
    argv: tuple[str, ...],
    assignments: tuple[str, ...],
    dangerous: tuple[str, ...],
    path_qualified: bool,
    via: tuple[str, ...],
    more_words: str = "",
    runtime_words: tuple[int, ...] = (),
    unseen: str = "",
    redirects: tuple[Redirect, ...] = (),
) -> SimpleCommand:
    """``SimpleCommand(argv=..., ...)``, about three times cheaper.

    A frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``; this fills the instance dictionary directly, in the
    same order, which gives an equal object (same fields, ``==``, ``hash``,
    ``repr``). Used only while `SimpleCommand` has exactly these fields, a
    ``__dict__`` and no ``__post_init__`` (checked below, else the constructor).
    """
    command = _object_new(SimpleCommand)
    fields = command.__dict__
    fields["argv"] = argv
    fields["assignments"] = assignments
    fields["dangerous"] = dangerous
    fields["path_qualified"] = path_qualified
    fields["via"] = via
    fields["more_words"] = more_words
    fields["runtime_words"] = runtime_words
    fields["unseen"] = unseen
    fields["redirects"] = redirects
    return command


_object_new = object.__new__
if (
    tuple(f.name for f in dataclasses.fields(SimpleCommand)) != _SIMPLE_COMMAND_FIELDS
    or hasattr(SimpleCommand, "__post_init__")
    or hasattr(SimpleCommand, "__slots__")
):  # pragma: no cover - a guard for future changes of SimpleCommand
    _new_simple_command = SimpleCommand  # type: ignore[assignment]  # same positional order


# ----------------------------------------------------------------------------
# The walk.

_SUBSTITUTION_VIA = {"$(": "$(...)", "`": "`...`", "<(": "<(...)", ">(": ">(...)"}
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_HERE_REDIRECTS = frozenset({"heredoc_redirect", "herestring_redirect"})
# Leaves that never hold shell code (text in single quotes, comments ...).
_INERT_LEAVES = frozenset(
    {"raw_string", "ansi_c_string", "comment", "heredoc_start", "heredoc_end"}
)
_CODE_MARKERS = re.compile(r"\$[({\[]|`")


def _code_marked(text: str) -> bool:
    """``_CODE_MARKERS.search(text) is not None``; most words have neither ``$``
    nor a backtick, and ``in`` is cheaper than a regex search (issue 20)."""
    return ("$" in text or "`" in text) and _CODE_MARKERS.search(text) is not None


_DECLARATIONS = frozenset({"declaration_command", "unset_command"})
_MISREAD = "the shell grammar misreads {} here"
_MAX_SCANNED_EXPANSIONS = 64
# Commands (and bare redirections) `_Walker._attach` may visit for one text.
_MAX_REDIRECT_WORK = 100_000
# The text of a backtick substitution up to its closing backtick.
_BACKTICK_END = re.compile(r"(?:[^`\\]|\\.)*`", re.DOTALL)
# A newline in an unquoted word that no backslash escapes.
_RAW_NEWLINE = re.compile(r"(?<!\\)(?:\\\\)*\n")
# Reserved words the grammar may take for a command name ("! if" is read that way);
# bash never runs a command of that name (`time` and `coproc` are handled apart).
_RESERVED_NAMES = frozenset(
    {
        "if",
        "then",
        "elif",
        "else",
        "fi",
        "do",
        "done",
        "while",
        "until",
        "for",
        "in",
        "select",
        "case",
        "esac",
        "function",
        "{",
        "}",
        "!",
        "[[",
        "]]",
    }
)


class _Item:
    """One node waiting to be walked, with the source it belongs to.

    A plain class with slots: the walk makes one per node, and a frozen
    dataclass costs several times more to create. Never mutated.
    """

    __slots__ = ("here", "node", "src", "via")

    def __init__(self, node: Node, src: bytes, via: tuple[str, ...], here: bool) -> None:
        self.node = node
        self.src = src
        self.via = via
        self.here = here  # standard input is a here-document or here-string


class _AttachRedirects:
    """A mark on the walk's stack after the body of a redirected statement: when it
    is reached, every command of the body has been found, and gets ``redirects``
    (`_Walker._attach`). Its `_BeginRedirects`, before the body, sets ``start``."""

    __slots__ = ("redirects", "start", "via")

    def __init__(self, via: tuple[str, ...], redirects: tuple[Redirect, ...]) -> None:
        self.start = -1  # the position in `_Walker.out` where the body's commands start
        self.via = via
        self.redirects = redirects


class _BeginRedirects:
    """A mark on the walk's stack before the body of a redirected statement."""

    __slots__ = ("end",)

    def __init__(self, end: _AttachRedirects) -> None:
        self.end = end


# Bodies whose redirections tree-sitter-bash puts after the whole statement, where
# bash gives them to the last element only (`a | b > f`, `a && b < f`; nested
# to the left: `cat <a | cat <b` is read as `(cat <a | cat) <b`).
_LAST_ELEMENT_TAKES_REDIRECTS = frozenset({"pipeline", "list"})


# The steps of `SimpleCommand.via` that start a command substitution: the
# redirections of the command around one are not its own.
_SUBSTITUTION_STEPS = frozenset(_SUBSTITUTION_VIA.values())


def _redirect_of(node: Node, src: bytes) -> Redirect | None:
    """The file a ``file_redirect`` node opens, or None (a descriptor duplication
    ``>&2``/``<&-``, a process substitution, another kind of redirection)."""
    if node.type != "file_redirect":
        return None
    operator = ""
    target: Node | None = None
    for child in node.children:
        if not child.is_named:
            operator += _text(child, src)
        elif child.type != "file_descriptor" and target is None:
            target = child
    if target is None or target.type == "process_substitution":
        return None
    text = _text(target, src)
    if operator.endswith("&") and (text.isdigit() or text == "-"):
        return None
    access: Literal["read", "write", "read-write"] = (
        "read-write"
        if "<" in operator and ">" in operator
        else "write"
        if ">" in operator
        else "read"
    )
    try:
        word = _decode([target], src)
    except UnparseableCommand:
        return Redirect(text, access, known=False)
    return Redirect(word.text, access, not word.dynamic)


def _words_after_redirect(node: Node, src: bytes) -> list[Node]:
    """The words tree-sitter-bash puts in a redirection that bash gives to the
    command: ``git 2>/dev/null push`` reads ``push`` as a second target of ``2>``,
    ``cat <<EOF x`` as an argument of the here-document."""
    if node.type == "file_redirect":
        targets = [
            child
            for child in node.children
            if child.is_named and child.type not in ("file_descriptor", "comment")
        ]
        return targets[1:]
    if node.type == "heredoc_redirect":
        return [
            child
            for index, child in enumerate(node.children)
            if node.field_name_for_child(index) == "argument"
        ]
    return []


def _is_descriptor(node: Node, src: bytes) -> bool:
    """Whether a word is the descriptor of the redirection it touches (``cat 0< f``,
    which tree-sitter-bash reads as the argument ``0`` and ``< f``)."""
    return src[node.end_byte : node.end_byte + 1] in (b"<", b">") and _text(node, src).isdigit()


# Node types `_Walker._visit` handles before its generic leaf and inner-node cases.
_VISITED_SPECIALLY = frozenset(
    {
        "command",
        *_DECLARATIONS,
        "redirected_statement",
        "heredoc_redirect",
        "command_substitution",
        "process_substitution",
        "variable_assignment",
        "file_redirect",
        "function_definition",
    }
)


def _visit_is_noop(node: Node, src: bytes) -> bool:
    """Whether `_Walker._visit` would do nothing with ``node`` and return no children:
    a leaf it has nothing to check in, or a node it has no case for whose children
    are such leaves. (Such nodes are left out of the walk; it is only cheaper.)"""
    count = node.child_count
    if count == 0:
        kind = node.type
        if kind == "``" or kind in _VISITED_SPECIALLY:
            return False
        named = node.is_named
        if kind != "word" and (not named or kind in _INERT_LEAVES):
            return True
        text = _text(node, src)
        if kind == "word" and ("\n" in text and _RAW_NEWLINE.search(text)):
            return False
        return not (named and kind not in _INERT_LEAVES and _code_marked(text))
    if count > 8 or node.type in _VISITED_SPECIALLY:
        return False
    # `_visit` has no case of its own for this node: it walks the children, and
    # when each is a leaf with nothing to check, nothing happens (a command name,
    # "...", $VAR, a word glued to '...').
    for child in node.children:
        if child.child_count != 0 or not _visit_is_noop(child, src):
            return False
    return True


def _plain_word(node: Node, kind: str, src: bytes, plain: dict[int, str]) -> bool:
    """Note ``node`` in ``plain`` (id -> text) if it is a plain word (`_plain_text`)."""
    if kind != "word":
        return False
    text = _plain_text(node, src)
    if text is None:
        return False
    plain[id(node)] = text
    return True


def _plain_text(node: Node, src: bytes) -> str | None:
    """The text of a plain word, else None. Plain: a named leaf (of type ``word``,
    checked by the callers) without a backslash, a newline or code markers.
    Visiting one does nothing (`_visit_is_noop`), and `_decode` gives its text,
    unquoted as it is."""
    if node.child_count != 0 or not node.is_named:
        return None
    text = _text(node, src)
    if "\\" in text or "\n" in text or _code_marked(text):
        return None
    return text


def _children(node: Node, src: bytes, via: tuple[str, ...], here: bool) -> list[_Item]:
    """The children of ``node`` to walk, in order: all but those `_visit_is_noop`."""
    return [
        _Item(child, src, via, here) for child in node.children if not _visit_is_noop(child, src)
    ]


class _Walker:
    """Walk parse trees, collecting :class:`SimpleCommand` objects into ``out``."""

    def __init__(self) -> None:
        self.out: list[SimpleCommand] = []
        # Dangerous variables set by statements seen so far (PATH=x; export IFS=y).
        self.set_dangerous: dict[str, None] = {}
        # Each expansion found by scanning text costs a parse of the rest of the text.
        self.scans_left = _MAX_SCANNED_EXPANSIONS
        # Issue 13 §6. Aliases (and `hash -p` entries) defined so far: name ->
        # the text that replaces it.
        self.aliases: dict[str, str] = {}
        # Basenames of files the text writes (None: one it cannot name) -> the
        # positions in `out` of the commands that write them (-1: a redirection).
        self.written: dict[str | None, set[int]] = {}
        # (position in `out`, basenames of the files it runs as code).
        self.script_runs: list[tuple[int, tuple[str, ...]]] = []
        # (position in `out`, program) of programs in `_IMPLICIT_CODE` (or Python).
        self.implicit_runs: list[tuple[int, str]] = []
        self.runtime_seen = False
        self.alias_bytes_left = MAX_INPUT_BYTES
        # (id(src), start, end) of a command node -> the words of it that
        # tree-sitter-bash put in the redirections of its statement
        # (`_words_after_redirect`). Not id(node): py-tree-sitter makes a new Node
        # object at each access.
        self.extra_words: dict[tuple[int, int, int], list[Node]] = {}
        self.redirect_work_left = _MAX_REDIRECT_WORK

    def finish(self) -> None:
        """Mark the commands that run a script file the same text writes
        (issue 13 §6): the order is not looked at (a loop can write after)."""
        if not self.written:
            return

        def by_another(name: str | None, index: int) -> bool:
            # `sed -i s/x/y/ f` and `perl -pi -e … f` write the file they read.
            return bool(self.written.get(name, set()) - {index})

        # The written names each family loads, found once per family (a text of
        # 64 KiB can hold thousands of commands and written names).
        loaded: dict[int, list[str | None]] = {}
        for index, program in self.implicit_runs:
            family = _IMPLICIT_CODE.get(program) or _PYTHON_CODE
            names = loaded.get(id(family))
            if names is None:
                suffixes, exact = family
                names = loaded[id(family)] = [
                    name
                    for name in self.written
                    if name is None or name in exact or name.endswith(suffixes)
                ]
            for name in names:
                if by_another(name, index):
                    self.script_runs.append((index, (name or "a file named at run time",)))
                    break
        for index, files in self.script_runs:
            hit = next((f for f in files if by_another(f, index)), None)
            if hit is None and files and by_another(None, index):
                hit = files[0]
            if hit is not None:
                self.out[index] = dataclasses.replace(
                    self.out[index],
                    unseen=f"it runs {hit!r}, a file the same command writes",
                )

    # -- entry points -------------------------------------------------------

    def script(self, text: str, via: tuple[str, ...], *, here: bool = False) -> None:
        """Parse ``text`` as a shell script reached through ``via`` and walk it."""
        _check_depth(via)
        if "\0" in text:
            # bash drops NUL bytes from a script (`r<NUL>m` runs rm); the grammar stops there.
            raise UnparseableCommand("the command contains a NUL byte")
        if (blank := _BLANKS_ONLY_TO_THE_GRAMMAR.search(text)) is not None:
            # tree-sitter-bash reads CR, VT and FF as blanks (and backslash-CR-LF as a
            # line continuation); bash reads them as characters of a word, so
            # `echo x<CR># ; rm -rf d` is one comment to the grammar and runs rm
            # (red team, issue 20). Such a command is not decided on a guess.
            raise UnparseableCommand(
                f"the command contains a {_BLANK_NAMES[blank.group()]}, which bash reads "
                "as part of a word and the parser as a blank"
            )
        src = text.encode("utf-8", "surrogatepass")
        if len(src) > MAX_INPUT_BYTES:
            raise UnparseableCommand(f"the command is longer than {MAX_INPUT_BYTES // 1024} KiB")
        # A script that does not end its last line parses up to ten times slower
        # (tree-sitter-bash keeps several stacks alive at the end of input: `a | b | c`
        # 37 us, `a | b | c` + newline 3 us; issue 20). A newline ends the last
        # command as the end of input does, except after a backslash (a line
        # continuation), so it is added only where it cannot change the parse. Nodes
        # keep their offsets: the newline comes after every byte of `src`.
        ended = src if src[-1:] in (b"\n", b"\\", b"") else src + b"\n"
        root = _parse_bounded(ended).root_node
        if root.has_error:
            if ended is not src:  # the error as found in the text itself
                root = _parse_bounded(src).root_node
            raise UnparseableCommand(_syntax_error(root))
        self._walk(_Item(root, src, via, here))

    def _walk(self, first: _Item) -> None:
        stack: list[_Item | _BeginRedirects | _AttachRedirects] = [first]
        while stack:
            item = stack.pop()
            kind = item.__class__
            if kind is not _Item:
                if kind is _BeginRedirects:
                    item.end.start = len(self.out)  # type: ignore[union-attr]
                else:
                    self._attach(item.start, item.via, item.redirects)  # type: ignore[union-attr]
                continue
            children = self._visit(item)  # type: ignore[arg-type]
            stack.extend(reversed(children))

    def _attach(self, start: int, via: tuple[str, ...], redirects: tuple[Redirect, ...]) -> None:
        """Give ``redirects`` to the commands found since position ``start`` that run
        within the redirected command (not in its command substitutions); without
        any, report the redirection as the command ``:`` (bash opens the file all
        the same: ``> f`` creates it)."""
        self.redirect_work_left -= len(self.out) - start + 1
        if self.redirect_work_left < 0:
            # Each redirected statement visits the commands within it: nested
            # ones (`{ { …; } <a; } <b`) would cost commands × depth.
            raise UnparseableCommand("too many commands within redirected statements")
        depth = len(via)
        found = False
        for index in range(start, len(self.out)):
            command = self.out[index]
            if command.via[:depth] != via or not _SUBSTITUTION_STEPS.isdisjoint(
                command.via[depth:]
            ):
                continue
            self.out[index] = dataclasses.replace(command, redirects=command.redirects + redirects)
            found = True
        if not found:
            self.out.append(
                _new_simple_command(
                    (":",), (), tuple(self.set_dangerous), False, via, redirects=redirects
                )
            )

    # -- nodes --------------------------------------------------------------

    def _visit(self, item: _Item) -> list[_Item]:
        """Handle one node; return the nodes to walk next, in source order."""
        node, kind = item.node, item.node.type
        if kind == "command":
            return self._command(item)
        if kind in _DECLARATIONS:
            return self._declaration(item)
        if kind == "redirected_statement":
            return self._redirected_statement(item)
        if kind == "heredoc_redirect":
            return self._heredoc(item)
        if kind == "file_redirect":
            self._note_redirect(item)
        elif kind == "function_definition":
            # `f() { ...; } < x`: opened when f runs; reported where it is defined,
            # like the function body (`_attach` reports it as `:`). (Not found
            # through `node.parent` at the redirection: that walks from the root.)
            found = tuple(
                filter(
                    None,
                    [_redirect_of(r, item.src) for r in node.children_by_field_name("redirect")],
                )
            )
            if found:
                self._attach(len(self.out), item.via, found)
        if kind in ("command_substitution", "process_substitution"):
            opener = node.children[0].type if node.children else ""
            via = (*item.via, _SUBSTITUTION_VIA.get(opener, "$(...)"))
            _check_depth(via)
            if opener == "`":
                in_dquotes = node.parent is not None and node.parent.type == "string"
                body = item.src[node.start_byte + 1 : node.end_byte - 1].decode("utf-8", "replace")
                if _BACKTICK_END.match(body + "`").end() != len(body) + 1:
                    raise UnparseableCommand(_MISREAD.format("backticks"))
                self.script(_unescape_backticks(body, in_dquotes), via, here=item.here)
                return []
            return [_Item(child, item.src, via, item.here) for child in node.children]
        if kind == "variable_assignment" and (node.parent is None or node.parent.type != "command"):
            self._note_assignment(node)  # a statement of its own: it lasts
        if node.child_count == 0:
            if kind == "``":  # `a` `b` is read as one substitution
                raise UnparseableCommand(_MISREAD.format("backticks"))
            named = node.is_named
            if kind != "word" and (not named or kind in _INERT_LEAVES):
                return []  # punctuation, quoted text, comments: nothing to check
            text = _text(node, item.src)
            if kind == "word" and _RAW_NEWLINE.search(text):
                # "ls\n\\rm x" is read as one command with the argument "\n\\rm".
                raise UnparseableCommand(_MISREAD.format("a line break"))
            if named and kind not in _INERT_LEAVES and _code_marked(text):
                # The grammar left code unparsed in this leaf (``${x#$(cmd)}``).
                self._scan(text, item.via, item.here)
            return []
        return _children(node, item.src, item.via, item.here)

    def _redirected_statement(
        self, item: _Item
    ) -> list[_Item | _BeginRedirects | _AttachRedirects]:
        """A statement with redirections after it (``cat < f``, ``{ ...; } > f``,
        ``while ...; done < f``): its body, with marks around the part the
        redirections apply to (the end mark gives their files to that part's
        commands: `_attach`), then its redirections."""
        node, src, via = item.node, item.src, item.via
        redirects = node.children_by_field_name("redirect")
        here = item.here or any(child.type in _HERE_REDIRECTS for child in redirects)
        extras = [word for child in redirects for word in _words_after_redirect(child, src)]
        # `cat <<EOF > f`: tree-sitter-bash puts `> f` in the here-document.
        files = [
            *redirects,
            *(
                inner
                for child in redirects
                if child.type == "heredoc_redirect"
                for inner in child.children_by_field_name("redirect")
            ),
        ]
        found = tuple(filter(None, [_redirect_of(child, src) for child in files]))
        end = _AttachRedirects(via, found) if found else None
        begun = False
        items: list[_Item | _BeginRedirects | _AttachRedirects] = []
        for index, child in enumerate(node.children):
            if child.type in _REDIRECTS:
                items.append(_Item(child, src, via, item.here))
                continue
            if node.field_name_for_child(index) != "body":
                items.append(_Item(child, src, via, here))
                continue
            # The part the redirections apply to: the last element of a pipeline
            # or list (walked in place of the body: the same children, in order).
            while child.type in _LAST_ELEMENT_TAKES_REDIRECTS:
                parts = child.children
                if not parts or not parts[-1].is_named or parts[-1].type == "comment":
                    break
                items.extend(_Item(part, src, via, here) for part in parts[:-1])
                child = parts[-1]
            if extras:
                if child.type != "command":
                    # bash refuses words after the redirection of a compound command.
                    raise UnparseableCommand(_MISREAD.format("words after a redirection"))
                self.extra_words[(id(src), child.start_byte, child.end_byte)] = extras
                extras = []
            if end is None:
                items.append(_Item(child, src, via, here))
            else:
                # Before the redirections' own items: the commands of a pipeline
                # after a here-document (`cat <<EOF | sh`) stand there.
                items += [_BeginRedirects(end), _Item(child, src, via, here), end]
                begun = True
        if extras:
            raise UnparseableCommand(_MISREAD.format("words after a redirection"))
        if end is not None and not begun:
            items[:0] = [_BeginRedirects(end), end]  # no body: `> f`
        return items

    def _note_redirect(self, item: _Item) -> None:
        """Note the file an output redirection writes (``> f``, ``>> f``, ``&> f``,
        ``<> f``); ``>&2`` duplicates a descriptor and writes no file."""
        node, src = item.node, item.src
        operator = ""
        target: list[Node] = []
        for child in node.children:
            if not child.is_named:
                operator += _text(child, src)
            elif child.type != "file_descriptor":
                target.append(child)
        if ">" not in operator or not target:
            return
        first = _text(target[0], src)
        if operator.endswith("&") and (first.isdigit() or first == "-"):
            return
        try:
            word = _decode(target[:1], src)
        except UnparseableCommand:
            self.written.setdefault(None, set()).add(-1)
            return
        self._note_written(word)

    def _note_written(self, word: _Word, position: int = -1) -> None:
        if word.dynamic:
            self.written.setdefault(None, set()).add(position)
        elif word.text not in _NOT_FILES:
            self.written.setdefault(word.text.rpartition("/")[2], set()).add(position)

    def _note_assignment(self, node: Node) -> None:
        name = _assigned_name(node)
        if name and _is_dangerous(name):
            self.set_dangerous.setdefault(name)

    def _command(self, item: _Item) -> list[_Item]:
        extra = (
            self.extra_words.pop((id(item.src), item.node.start_byte, item.node.end_byte), None)
            if self.extra_words
            else None
        )
        if extra is None:
            fast = self._plain_command(item)
            if fast is not None:
                return fast
        node, src = item.node, item.src
        own_redirects: list[Redirect] = []
        assignments: list[str] = []
        own_dangerous: list[str] = []
        words: list[Node] = []
        here = item.here
        children = node.children
        # The plain leaf words among the words (`_plain_word`): id(node) -> text,
        # and the children whose visit is known to do nothing.
        plain: dict[int, str] = {}
        noop: set[int] = set()
        for index, child in enumerate(children):
            field_name = node.field_name_for_child(index)
            kind = child.type
            if kind == "variable_assignment" and not words:
                assignments.append(_assignment_text(child, src))
                name = _assigned_name(child)
                if name and _is_dangerous(name) and name not in own_dangerous:
                    own_dangerous.append(name)
            elif field_name == "name":
                inner = child.children
                words.extend(inner)
                for word in inner:
                    _plain_word(word, word.type, src, plain)
                if len(inner) == 1 and kind == "command_name" and id(inner[0]) in plain:
                    noop.add(id(child))
            elif field_name == "argument":
                if _is_descriptor(child, src):
                    continue  # `cat 0< f`: the descriptor of the redirection
                words.append(child)
                if _plain_word(child, kind, src, plain):
                    noop.add(id(child))
            elif kind in _HERE_REDIRECTS:
                here = True
            elif kind == "file_redirect":
                found = _redirect_of(child, src)
                if found is not None:
                    own_redirects.append(found)
                if words:  # `git 2>/dev/null push`: `push` is read as a second target
                    words.extend(_words_after_redirect(child, src))
        if extra is not None:
            words.extend(word for word in extra if not _is_descriptor(word, src))
            words.sort(key=lambda word: word.start_byte)
        nested = [
            _Item(child, src, item.via, item.here)
            for child in children
            if id(child) not in noop and not _visit_is_noop(child, src)
        ]
        if not words:
            for name in own_dangerous:  # `PATH=x` alone sets it for what follows
                self.set_dangerous.setdefault(name)
            if own_redirects:
                self._attach(len(self.out), item.via, tuple(own_redirects))
            return nested
        groups = _group_words(words, src)
        first = groups[0][0]
        if len(groups[0]) == 1 and first.type == "word":
            text = plain.get(id(first))
            if text is None:
                text = _text(first, src)
            if text in _RESERVED_NAMES:
                raise UnparseableCommand(_MISREAD.format(f"the reserved word {text!r}"))
        argv: list[_Word] = []
        for group in groups:
            text = plain.get(id(group[0])) if len(group) == 1 else None
            if text is None:
                argv.append(_decode(group, src))
            elif not _PATTERN_CHARS.search(text):  # `_decode` of a plain word
                argv.append(_Word(text, False))
            else:
                argv.append(_Word(text, _has_pattern(list(text), [True] * len(text))))
        dangerous = tuple(dict.fromkeys([*own_dangerous, *self.set_dangerous]))
        position = len(self.out)
        self._emit(argv, tuple(assignments), dangerous, item.via, here)
        if own_redirects:
            self._attach(position, item.via, tuple(own_redirects))
        return nested

    def _plain_command(self, item: _Item) -> list[_Item] | None:
        """`_command` for the most common shape, or None (nothing done) for others:
        a program name that is a plain word (`_plain_text`) and arguments that are
        plain words or numbers, single-quoted strings, double-quoted strings without
        expansions or words glued to single-quoted parts, one blank or more between
        them. Same result: no assignment, no redirection, every word what `_decode`
        makes of it, and no child with anything to walk."""
        node, src = item.node, item.src
        children = node.children
        if not children:
            return None
        name = children[0]
        if name.type != "command_name" or node.field_name_for_child(0) != "name":
            return None
        inner = name.children
        if len(inner) != 1:
            return None
        argv: list[_Word] = []
        previous_end = -1
        for index, word in enumerate(children):
            if index:
                kind = word.type
                if node.field_name_for_child(index) != "argument":
                    return None
            else:
                word = inner[0]
                kind = word.type
            start = word.start_byte
            end = word.end_byte
            if kind == "word" or (kind == "number" and index):
                # `_plain_text` and `_is_descriptor`, inline (issue 20: the most
                # frequent step of the walk); `_decode` reads a number leaf as it
                # reads a word.
                if word.child_count != 0 or not word.is_named:
                    return None
                text = src[start:end].decode("utf-8", "replace")
                if "\\" in text or "\n" in text or _code_marked(text):
                    return None
                if src[end : end + 1] in (b"<", b">") and text.isdigit():
                    return None
                if not _PATTERN_CHARS.search(text):
                    argv.append(_Word(text, False))
                else:
                    argv.append(_Word(text, _has_pattern(list(text), [True] * len(text))))
            elif kind == "raw_string" and index and word.child_count == 0 and word.is_named:
                # '...': its text without the quotes, nothing live (`_decode_into`).
                argv.append(_Word(_text(word, src)[1:-1], False))
            elif (kind == "string" or kind == "concatenation") and index:
                # "..." without expansions, words glued to '...': what `_decode`
                # makes of them (`_decode_quick`), when walking them does nothing
                # (`_visit_is_noop`), as `_command` would find (issue 20).
                quick = _decode_quick(word, kind, src)
                if quick is None or _is_descriptor(word, src) or not _visit_is_noop(word, src):
                    return None
                argv.append(quick)
            else:
                return None
            if previous_end >= 0:
                gap = src[previous_end:start]
                if not gap or (gap[0] == 0x5C and _LINE_CONTINUATIONS.fullmatch(gap)):
                    return None  # joined to the previous word (`_group_words`)
            previous_end = end
        if argv[0].text in _RESERVED_NAMES:
            raise UnparseableCommand(_MISREAD.format(f"the reserved word {argv[0].text!r}"))
        self._emit(argv, (), tuple(dict.fromkeys(self.set_dangerous)), item.via, item.here)
        return []

    def _declaration(self, item: _Item) -> list[_Item]:
        """``export``/``declare``/``local``/``readonly``/``typeset``/``unset``."""
        node, src = item.node, item.src
        argv: list[_Word] = []
        dangerous = tuple(self.set_dangerous)
        for child in node.children:
            if not child.is_named:
                argv.append(_Word(_text(child, src)))
            elif child.type == "variable_assignment":
                argv.append(_Word(_assignment_text(child, src)))
                self._note_assignment(child)
                target = argv[-1].text.partition("=")[2]
                if _is_dangerous(target):  # `declare -n r=PATH; r=x` sets PATH
                    self.set_dangerous.setdefault(target)
            elif child.type == "variable_name":
                argv.append(_Word(_text(child, src)))
                if _is_dangerous(argv[-1].text):  # `export PATH`, `declare -n PATH`
                    self.set_dangerous.setdefault(argv[-1].text)
            elif child.type not in ("comment", *_REDIRECTS):
                argv.append(_decode([child], src))
        self.out.append(
            SimpleCommand(
                argv=tuple([word.text for word in argv]),
                dangerous=dangerous,
                via=item.via,
            )
        )
        return [_Item(child, src, item.via, item.here) for child in node.children]

    def _heredoc(self, item: _Item) -> list[_Item]:
        node, src = item.node, item.src
        quoted = False
        rest: list[_Item] = []
        for child in node.children:
            if child.type == "heredoc_start":
                quoted = any(char in _text(child, src) for char in "'\"\\")
            elif child.type == "heredoc_body":
                if not quoted:
                    # The grammar misses backticks and ``<<-`` bodies: scan the text.
                    body = src[child.start_byte : child.end_byte].decode("utf-8", "replace")
                    self._scan(body, item.via, item.here)
            elif child.is_named:
                # A pipeline or list after `<<EOF` on the same line lands in here.
                rest.append(_Item(child, src, item.via, True))
        return rest

    # -- expansions in free text ---------------------------------------------

    def _scan(self, text: str, via: tuple[str, ...], here: bool) -> None:
        """Walk the substitutions in text that bash expands like a here-document body."""
        i = 0
        while i < len(text):
            char = text[i]
            if char == "\\":
                i += 2
                continue
            if char == "`":
                end = i + 1
                while end < len(text) and text[end] != "`":
                    end += 2 if text[end] == "\\" else 1
                if end >= len(text):
                    raise UnparseableCommand("an unterminated backtick substitution")
                inner = (*via, "`...`")
                _check_depth(inner)
                self.script(_unescape_backticks(text[i + 1 : end], False), inner, here=here)
                i = end + 1
                continue
            if char == "$" and text[i + 1 : i + 2] in ("(", "{", "["):
                length = self._expansion_at(text[i:], via, here)
                i += length
                continue
            i += 1

    def _expansion_at(self, text: str, via: tuple[str, ...], here: bool) -> int:
        """Walk the ``$(...)``/``${...}``/``$((...))`` that starts ``text``; return its length."""
        self.scans_left -= 1
        if self.scans_left < 0:
            raise UnparseableCommand("too many expansions in here-documents")
        src = b": " + text.encode("utf-8", "surrogatepass")
        found = _expansion_node(_parser().parse(src).root_node)
        if found is None or found.has_error:
            raise UnparseableCommand("an expansion in a here-document the grammar cannot read")
        expansion = src[2 : found.end_byte]
        # Parse it again alone, so that the text after it cannot have shaped it.
        alone = b": " + expansion
        root = _parser().parse(alone).root_node
        found = _expansion_node(root)
        if root.has_error or found is None or found.end_byte != len(alone):
            raise UnparseableCommand("an expansion in a here-document the grammar cannot read")
        self._walk(_Item(found, alone, via, here))
        return len(expansion.decode("utf-8", "surrogatepass"))

    # -- what a command runs ---------------------------------------------------

    def _emit(
        self,
        argv: Sequence[_Word],
        assignments: tuple[str, ...],
        dangerous: tuple[str, ...],
        via: tuple[str, ...],
        here: bool,
        more: str = "",
    ) -> None:
        """Record ``argv`` as a simple command, then what it runs in turn.

        ``more``: why words not in the text are appended at run time (``xargs``).
        """
        if not argv:
            return
        if len(via) > MAX_DEPTH:
            _check_depth(via)
        program = argv[0]
        if program.dynamic:
            raise UnparseableCommand(_COMPUTED_PROGRAM)
        path_qualified = "/" in program.text
        name = program.text.rpartition("/")[2]  # posixpath.basename
        if (
            self.aliases
            and not path_qualified
            and name in self.aliases
            and f"alias {name}" not in via  # bash does not expand an alias in itself
        ):
            self._expand_alias(argv, assignments, dangerous, via, here)
        runtime: tuple[int, ...] = ()
        if self.runtime_seen:
            runtime = tuple(i for i, w in enumerate(argv) if isinstance(w, _RuntimeWord))
        position = len(self.out)
        self.out.append(
            _new_simple_command(
                tuple([word.text for word in argv]),
                assignments,
                dangerous,
                path_qualified,
                via,
                more,
                runtime,
            )
        )
        if path_qualified or name in _SCRIPT_RUNNERS or _PYTHON_VERSIONED.match(name):
            files = tuple(
                word.text.rpartition("/")[2]
                for word in (argv if path_qualified else argv[1:])
                if not word.dynamic and not word.text.startswith("-")
            )
            if files:
                self.script_runs.append((position, files))
        if name in _IMPLICIT_CODE or _PYTHON_VERSIONED.match(name):
            self.implicit_runs.append((position, name))
        if name in _FILE_WRITERS:
            for word in argv[1:]:
                text = word.text.partition("=")[2] if word.text.startswith("of=") else word.text
                if not text.startswith("-"):
                    self._note_written(_Word(text, word.dynamic), position)
        sub = git_dashed_subcommand(name)
        if sub is not None:
            # `git-push` (from /usr/lib/git-core or anywhere) is how `git push`
            # runs: a rule on `[git, push]` applies to it (issue 13 §6, F3). The
            # directory stays, so the path-qualified command is still not the
            # known-safe `git` of an allow rule.
            directory = program.text[: len(program.text) - len(name)]
            self._emit(
                [_Word(directory + "git"), _Word(sub), *argv[1:]],
                assignments,
                dangerous,
                (*via, name),
                here,
                more,
            )
            return
        if name not in _RUNS_OTHER_CODE:
            return
        if name in SCRIPT_OPTION_PROGRAMS:
            try:
                scripts = option_scripts(name, [word.text for word in argv])
            except WrapperError as exc:
                raise UnparseableCommand(str(exc)) from exc
            for index, text, label in scripts:
                script = _Word(text, argv[index].dynamic)
                self._run_script(script, label, assignments, dangerous, via, same_shell=False)
        if name in WRAPPER_PROGRAMS:
            self._table_wrapper(name, argv, assignments, dangerous, via, here, more)
            return
        if name in ("alias", "hash", "enable"):
            self._alias_like(name, argv)
            return
        if name in ("make", "gmake"):
            _check_make(name, argv)
            return
        if name in _OPAQUE_RUNNERS:
            if len(argv) == 2 and argv[1].text in _ONLY_INFORMATION:
                return
            raise UnparseableCommand(f"{name} runs a command this parser does not find")
        if name in _SETS_VARIABLES:
            # `printf -v PATH x; ls` sets PATH like `PATH=x; ls` does.
            for variable in _variables_set(argv):
                if _is_dangerous(variable):
                    self.set_dangerous.setdefault(variable)
            return
        if name in _WRAPPERS:
            if name in ("time", "coproc") and any(w.text in _RESERVED for w in argv[1:3]):
                raise UnparseableCommand(f"{name} before a compound command")
            if name == "env":
                split = _env_split_string(argv)
                if split is not None:
                    self._emit(split, assignments, dangerous, (*via, "env -S"), here, more)
                    return
            inner, added = _unwrap(argv, _WRAPPERS[name])
            inner_more = more
            if name == "xargs":
                inner, inner_more = self._xargs_inner(argv, inner)
            elif not inner and more:
                raise UnparseableCommand(f"{name} runs a command read at run time")
            more_dangerous = [a.split("=", 1)[0] for a in added]
            self._emit(
                inner,
                assignments + added,
                tuple(dict.fromkeys([*dangerous, *filter(_is_dangerous, more_dangerous)])),
                (*via, name),
                here,
                inner_more,
            )
        elif name in _SHELLS:
            script, reads_stdin = _shell_script(argv)
            if script is not None:
                self._run_script(
                    script, f"{name} -c", assignments, dangerous, via, same_shell=False
                )
            elif more:
                raise UnparseableCommand(f"the script of {name} is read at run time ({more})")
            elif reads_stdin and here:
                raise UnparseableCommand(f"a here-document or here-string is the script of {name}")
            elif reads_stdin and len(argv) > 1:
                raise UnparseableCommand(
                    f"the script of {name} is read from standard input or a pipe"
                )
            elif reads_stdin:
                # A bare `sh` runs whatever its standard input holds (`echo 'git
                # push' | sh`, `sh < script`): a rule that does not match `sh`
                # cannot be checked against it (issue 13 §6; issue 4 case 1 still
                # holds: sh is uncovered, never laxer than the default).
                self.out[position] = dataclasses.replace(
                    self.out[position],
                    unseen=f"the script of {name} is read from standard input",
                )
        elif name in ("source", ".") and len(argv) > 1:
            if here and argv[1].text in _STDIN_SCRIPTS:
                raise UnparseableCommand(f"a here-document or here-string is sourced by {name}")
            if _reads_pipe(argv[1]):
                raise UnparseableCommand(f"the script sourced by {name} is read from a pipe")
            if argv[1].dynamic or more:
                raise UnparseableCommand(f"the file sourced by {name} is named at run time")
        elif name == "su":
            script = _su_script(argv)
            if script is not None:
                self._run_script(script, "su -c", (), (), via, same_shell=False)
        elif name == "eval" and len(argv) > 1:
            joined = _Word(" ".join(w.text for w in argv[1:]), any(w.dynamic for w in argv[1:]))
            self._run_script(joined, "eval", (), (), via, same_shell=True)
        elif name == "trap":
            self._trap(argv, via)
        elif name == "git":
            # ``git -C . push`` is ``git push`` to a rule (issue 4: rules see what
            # runs); ``-c``/``--config-env`` can make git run anything, so that
            # command is flagged like a dangerous assignment.
            found = _git_subcommand(argv)
            if found is not None:
                start, configures = found
                self._emit(
                    [argv[0], *argv[start:]],
                    assignments,
                    (*dangerous, "git -c") if configures else dangerous,
                    (*via, "git options"),
                    here,
                )
        elif name == "find":
            for action, inner, terminator in _find_actions(argv):
                if "{}" in inner[0].text:
                    raise UnparseableCommand(_COMPUTED_PROGRAM)
                # `{}` is a file name find fills in (a file can be called `push`);
                # with `+` the names are appended.
                found_more = ""
                if terminator == "+" and inner[-1].text == "{}":
                    inner = inner[:-1]
                    found_more = f"find {action} … + appends the names of the files it finds"
                words = [_RuntimeWord(w.text) if "{}" in w.text else w for w in inner]
                self.runtime_seen |= any(isinstance(w, _RuntimeWord) for w in words)
                self._emit(
                    words, assignments, dangerous, (*via, f"find {action}"), False, found_more
                )

    def _xargs_inner(
        self, argv: Sequence[_Word], inner: Sequence[_Word]
    ) -> tuple[Sequence[_Word], str]:
        """The command xargs runs, with its words from standard input (issue 13 §6):
        with ``-I R`` each word holding R is filled in at run time; otherwise the
        words read are appended."""
        replace = _xargs_replace(argv)
        if inner and replace in inner[0].text:
            raise UnparseableCommand(_COMPUTED_PROGRAM)
        if not inner:
            return inner, ""  # xargs runs echo
        if _xargs_replaces(argv[1 : len(argv) - len(inner)]):
            words = [_RuntimeWord(w.text) if replace in w.text else w for w in inner]
            self.runtime_seen |= any(isinstance(w, _RuntimeWord) for w in words)
            return words, ""
        return inner, "xargs appends words read from standard input"

    def _table_wrapper(
        self,
        name: str,
        argv: Sequence[_Word],
        assignments: tuple[str, ...],
        dangerous: tuple[str, ...],
        via: tuple[str, ...],
        here: bool,
        more: str,
    ) -> None:
        """A program of the curated wrapper table (`_wrapper_table`)."""
        try:
            inner = find_inner(name, [word.text for word in argv])
        except WrapperError as exc:
            raise UnparseableCommand(str(exc)) from exc
        if inner is None:
            if more:
                raise UnparseableCommand(f"{name} runs a command read at run time")
            return
        if inner.script is not None:
            self._run_script(
                argv[inner.script], f"{name} script", assignments, dangerous, via, same_shell=False
            )
            return
        words = [_Word(text) for text in inner.prefix] + list(argv[inner.start :])
        self._emit(words, assignments, dangerous, (*via, name), here, more)

    def _alias_like(self, name: str, argv: Sequence[_Word]) -> None:
        """``alias NAME=VALUE``, ``hash -p PATH NAME``, ``enable -f FILE NAME``
        (issue 13 §6): later uses of NAME run VALUE or PATH."""
        if name == "enable":
            if any(w.text.startswith("-") and "f" in w.text for w in argv[1:]):
                raise UnparseableCommand("enable -f loads a builtin from a shared object")
            return
        if name == "hash":
            words = list(argv[1:])
            for i, word in enumerate(words):
                if word.text.startswith("-") and "p" in word.text[1:]:
                    rest = words[i + 1 :]
                    if len(rest) < 2 or any(w.dynamic for w in rest[:2]):
                        raise UnparseableCommand("hash -p names a program at run time")
                    self.aliases[rest[1].text] = shlex.quote(rest[0].text)
                    return
            return
        for word in argv[1:]:
            if word.text.startswith("-"):
                continue
            alias, eq, value = word.text.partition("=")
            if not eq:
                continue
            if word.dynamic:
                raise UnparseableCommand("an alias is defined at run time")
            self.aliases[alias] = value

    def _expand_alias(
        self,
        argv: Sequence[_Word],
        assignments: tuple[str, ...],
        dangerous: tuple[str, ...],
        via: tuple[str, ...],
        here: bool,
    ) -> None:
        """Walk what a use of an alias (or ``hash -p`` name) runs: its value
        followed by the remaining words (issue 13 §6). Over-approximated: an alias
        counts from its definition on, wherever it is used."""
        value = self.aliases[argv[0].text.rpartition("/")[2]]
        rest = " ".join(w.text if w.dynamic else shlex.quote(w.text) for w in argv[1:])
        # Each use parses the value again: bound the work a long alias used many
        # times can cause (fail closed).
        self.alias_bytes_left -= len(value) + len(rest)
        if self.alias_bytes_left < 0:
            raise UnparseableCommand("aliases expand to too much text")
        self._run_script(
            _Word(f"{value} {rest}"),
            f"alias {argv[0].text}",
            assignments,
            dangerous,
            via,
            same_shell=True,
        )

    def _run_script(
        self,
        script: _Word,
        step: str,
        assignments: tuple[str, ...],
        dangerous: tuple[str, ...],
        via: tuple[str, ...],
        *,
        same_shell: bool,
    ) -> None:
        """Parse and walk the script of ``bash -c``, ``eval``, ``trap`` or ``su -c``.

        ``assignments`` and ``dangerous`` are the environment the script runs in;
        ``same_shell`` tells whether variables it sets stay set afterwards (``eval``).
        """
        if script.dynamic:
            raise UnparseableCommand(f"the script of {step} is computed at run time")
        inner = (*via, step)
        _check_depth(inner)
        before = len(self.out)
        saved = dict(self.set_dangerous)
        # The environment of the shell reaches the commands of its script ...
        self.set_dangerous.update(dict.fromkeys(dangerous))
        entered = dict(self.set_dangerous)
        self.script(script.text, inner)
        # ... but not the commands after it; what the script sets stays set if it
        # ran in this shell.
        set_inside = [name for name in self.set_dangerous if name not in entered]
        self.set_dangerous = {**saved, **dict.fromkeys(set_inside if same_shell else ())}
        if assignments:
            self.out[before:] = [
                dataclasses.replace(c, assignments=assignments + c.assignments)
                for c in self.out[before:]
            ]

    def _trap(self, argv: Sequence[_Word], via: tuple[str, ...]) -> None:
        args = list(argv[1:])
        if args and args[0].text == "--":
            args = args[1:]
        if len(args) < 2 or args[0].text.startswith("-"):
            return  # `trap -p`, `trap -l`, `trap - INT`, `trap INT`: no action
        if args[0].text:
            self._run_script(args[0], "trap", (), (), via, same_shell=True)


def _expansion_node(root: Node) -> Node | None:
    """The largest expansion node that starts at byte 2 (after ``": "``)."""
    node = root.descendant_for_byte_range(2, 3)
    found = None
    while node is not None and node.start_byte == 2:
        if node.type in ("command_substitution", "expansion", "arithmetic_expansion"):
            found = node
        node = node.parent
    return found


def _check_depth(via: tuple[str, ...]) -> None:
    if len(via) > MAX_DEPTH:
        raise UnparseableCommand(f"commands nested more than {MAX_DEPTH} levels deep")


def _unescape_backticks(body: str, in_dquotes: bool) -> str:
    """The script inside backticks: ``\\\\``, ``\\```, ``\\$`` (and ``\\"`` in "...") lose the backslash."""
    special = '\\`$"' if in_dquotes else "\\`$"
    return re.sub(r"\\(.)", lambda m: m.group(1) if m.group(1) in special else m.group(0), body)


def _assigned_name(node: Node) -> str | None:
    name = node.child_by_field_name("name")
    if name is None:
        return None
    if name.type == "subscript":
        name = name.child_by_field_name("name")
    return _text(name) if name is not None else None


def _assignment_text(node: Node, src: bytes) -> str:
    """``NAME=value`` with the value's quotes removed (an array keeps its source)."""
    value = node.child_by_field_name("value")
    if value is None:
        return _text(node, src)
    head = src[node.start_byte : value.start_byte].decode("utf-8", "replace")
    try:
        return head + _decode([value], src).text
    except UnparseableCommand:
        return _text(node, src)


def _syntax_error(root: Node) -> str:
    """Describe the first ERROR or MISSING node under ``root``."""
    node = root
    while True:
        bad = next((c for c in node.children if c.has_error or c.is_missing), None)
        if bad is None or bad.is_missing or bad.type == "ERROR":
            node = bad or node
            break
        node = bad
    line, column = node.start_point
    if node.is_missing:
        return f"shell syntax error: missing {node.type!r} at line {line + 1}, column {column + 1}"
    snippet = _text(node)[:30]
    return f"shell syntax error near {snippet!r} at line {line + 1}, column {column + 1}"
