"""The tool-call gate: match a tool call against the effective policy's rules.

Rule semantics (DESIGN §5, §7): a rule applies when its ``tool`` pattern matches the
tool name; it matches when every matcher it has matches (none: every call of the
tool). A ``command`` matcher that cannot be checked because the command cannot be
parsed with confidence makes the rule yield the policy's ``unparseable`` decision
instead of its own. Across the rules that matched, the strictest decision wins
(deny > ask > allow); when none matched, the policy's ``default`` decides.
"""

from __future__ import annotations

import enum
import fnmatch
import functools
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import regex

from pi_sandbox.policies._option_grammar import (
    Arguments,
    match_arguments,
    read_arguments,
    table_for,
)
from pi_sandbox.policies._path_glob import (
    ToolCwds,
    candidate_paths,
    compile_path_glob,
    resolve_candidates,
)
from pi_sandbox.policies._path_resolution import file_identities
from pi_sandbox.policies._schema import Decision, ToolCallRule
from pi_sandbox.policies._shell_grammar import (
    Redirect,
    SimpleCommand,
    UnparseableCommand,
    parse_command,
)

if TYPE_CHECKING:
    from pi_sandbox.policies._effective import Policy

__all__ = [
    "READ_LIKE_TOOLS",
    "PolicyRule",
    "PolicyTier",
    "ToolCallDecision",
    "evaluate_tool_call",
    "path_exclusions",
    "strictest",
]

# Where a rule comes from (DESIGN §7), highest first.
Tier = Literal["managed", "user", "project"]
TIERS: tuple[Tier, ...] = ("managed", "user", "project")

_SEVERITY: dict[str, int] = {"allow": 0, "ask": 1, "deny": 2}

# Examples are matched against this imaginary workspace, lexically: a policy's
# self-test must not depend on the machine that loads it.
_EXAMPLE_WORKSPACE = "/workspace"

_GLOB_CHARS = re.compile(r"[*?\[]")

# Bound on one search of a policy regex (seconds); past it the rule cannot be decided.
REGEX_TIMEOUT_S = 0.25


_REGEX_OUT_OF_TIME = "a regex search ran out of time"

# Bound on all regex searches of one tool-call decision together (seconds): 200
# slow rules must not freeze the supervisor for 200 x REGEX_TIMEOUT_S.
REGEX_BUDGET_S = 0.5


def _search(pattern: regex.Pattern[str], text: str, call: _Call | None = None) -> bool | None:
    """``pattern.search(text)`` with a time bound (the smaller of `REGEX_TIMEOUT_S`
    and what is left of the call's `REGEX_BUDGET_S`); None when it ran out of time."""
    timeout = REGEX_TIMEOUT_S
    if call is not None:
        timeout = min(timeout, call.regex_budget)
        if timeout <= 0:
            return None
        started = time.monotonic()
    try:
        return pattern.search(text, timeout=timeout) is not None
    except TimeoutError:
        return None
    finally:
        if call is not None:
            call.regex_budget -= time.monotonic() - started


_BRACE_EXPANSION = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")


def _may_expand(word: str) -> bool:
    """``"$" in word or _BRACE_EXPANSION.search(word) or _GLOB_CHARS.search(word)``,
    without running the regexes on words that lack the characters they need."""
    if "$" in word:
        return True
    if "{" in word and _BRACE_EXPANSION.search(word):
        return True
    return "*" in word or "?" in word or "[" in word


# ----------------------------------------------------------------------------
# Literal prefilters for policy regexes.
#
# A policy regex is searched in every command text of its tool, through the
# ``regex`` module with a timeout. Most texts cannot match: the regex needs a
# literal (``curl``, ``/etc/``, ``AKIA``) that the text does not contain. The
# prefilter finds, for a regex, literals that every match must contain, as a
# conjunction of disjunctions (``[{"curl", "wget"}, {"|"}, {"sh"}]``: every match
# contains ``curl`` or ``wget``, and ``|``, and ``sh``). When the text lacks one
# of them the regex cannot match, and the search is skipped: the result is the
# same "no match" the search would give, only cheaper. The extraction is
# conservative: anything the small parser below does not fully understand (fuzzy
# matching, ``\\L<list>``, backreferences, unknown escapes, braces that are not a
# plain ``{m,n}``, verbose mode set mid-pattern...) gives no prefilter, and the
# regex is searched as before.

_Conjunction = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class _Prefilter:
    """Literals every match contains: ``all(any(lit in text for lit in d) for d in required)``.

    ``ignorecase``: the literals are lower-case ASCII and are looked up in the
    lower-cased text, which must then be ASCII (otherwise the prefilter is not used:
    case-insensitive matching relates some non-ASCII characters to ASCII ones,
    e.g. the Kelvin sign and ``k``).
    """

    required: _Conjunction
    ignorecase: bool

    def may_match(self, text: str, lowered: str | None = None) -> bool:
        if self.ignorecase:
            if not text.isascii():
                return True
            text = lowered if lowered is not None else text.lower()
        for alternatives in self.required:
            for literal in alternatives:
                if literal in text:
                    break
            else:
                return False
        return True


class _NoPrefilter(Exception):
    """The pattern uses syntax the literal extractor does not model."""


# Flags a policy regex may carry for the prefilter to apply (the defaults, and the
# ones whose effect on literals the extractor models).
_PREFILTER_FLAGS = (
    regex.UNICODE | regex.V0 | regex.IGNORECASE | regex.VERBOSE | regex.MULTILINE
) | (regex.DOTALL | regex.ASCII)
_INLINE_FLAG_LETTERS = frozenset("aimsux-")
_QUANTIFIER_BRACES = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")
_GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*>")


def _prefilter_for(pattern: regex.Pattern[str]) -> _Prefilter | None:
    """The literal prefilter of a compiled policy regex, or None when there is none."""
    if not isinstance(pattern.pattern, str) or pattern.flags & ~_PREFILTER_FLAGS:
        return None
    try:
        parser = _LiteralParser(pattern.pattern, verbose=bool(pattern.flags & regex.VERBOSE))
        required = parser.parse()
    except _NoPrefilter:
        return None
    ignorecase = parser.ignorecase or bool(pattern.flags & regex.IGNORECASE)
    if ignorecase:
        required = [frozenset(literal.lower() for literal in group) for group in required]
    kept: list[tuple[str, ...]] = []
    for group in required:
        literals = tuple(sorted(group))
        if literals and all(literals) and literals not in kept:
            kept.append(literals)
    if not kept:
        return None
    return _Prefilter(tuple(kept), ignorecase)


class _LiteralParser:
    """Required literals of a ``regex`` (version 0) pattern; see the section comment.

    Each ``sequence`` returns a list of disjunctions (sets of literals), all of
    which every match of the sequence satisfies. Literal characters are only ASCII
    ones; any other construct the parser accepts counts as "some text" (no
    requirement) and ends the current run of literal characters.
    """

    def __init__(self, pattern: str, *, verbose: bool) -> None:
        self.p = pattern
        self.i = 0
        self.verbose = verbose
        self.ignorecase = False
        lead = re.match(r"\(\?([a-zA-Z]+)\)", pattern)
        if lead and "x" in lead.group(1):
            if not set(lead.group(1)) <= _INLINE_FLAG_LETTERS:
                raise _NoPrefilter
            self.verbose = True
            self.ignorecase = "i" in lead.group(1)
            self.i = lead.end()
        if self.verbose and any(ch.isspace() and ch not in " \t\n\r\f\v" for ch in pattern):
            raise _NoPrefilter  # keep to plain ASCII whitespace in verbose patterns

    def parse(self) -> list[frozenset[str]]:
        required = self.alternation()
        self.skip()
        if self.i != len(self.p):
            raise _NoPrefilter  # an unbalanced ")"
        return required

    def skip(self) -> None:
        """Skip what verbose mode ignores (whitespace, ``#`` comments)."""
        if not self.verbose:
            return
        p = self.p
        while self.i < len(p):
            ch = p[self.i]
            if ch.isspace():
                self.i += 1
            elif ch == "#":
                end = p.find("\n", self.i)
                self.i = len(p) if end < 0 else end
            else:
                break

    def peek(self) -> str:
        self.skip()
        return self.p[self.i] if self.i < len(self.p) else ""

    def alternation(self) -> list[frozenset[str]]:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        if len(branches) == 1:
            return branches[0]
        union: set[str] = set()
        for branch in branches:
            if not branch:
                return []  # this branch requires nothing
            union |= max(branch, key=lambda group: (min(map(len, group)), -len(group)))
        return [frozenset(union)]

    def sequence(self) -> list[frozenset[str]]:
        required: list[frozenset[str]] = []
        run: list[str] = []

        def close() -> None:
            if run:
                required.append(frozenset({"".join(run)}))
                run.clear()

        while True:
            ch = self.peek()
            if ch in ("", "|", ")"):
                break
            kind, payload = self.atom()
            least = self.quantifier()
            if kind == "char":
                if least is None:
                    run.append(payload)  # type: ignore[arg-type]
                elif least >= 1:
                    run.append(payload)  # type: ignore[arg-type]
                    close()
                else:
                    close()
            elif kind == "group":
                close()
                if least is None or least >= 1:
                    required.extend(payload)  # type: ignore[arg-type]
            else:  # "any" (one unknown character) or "zero" (zero-width)
                close()
        close()
        return required

    def quantifier(self) -> int | None:
        """Parse a quantifier after an atom; return its minimum (None: no quantifier)."""
        ch = self.peek()
        if ch in ("*", "?"):
            self.i += 1
            least: int | None = 0
        elif ch == "+":
            self.i += 1
            least = 1
        elif ch == "{":
            found = _QUANTIFIER_BRACES.match(self.p, self.i)
            if found is None or (not found.group(1) and not found.group(2)):
                raise _NoPrefilter  # a fuzzy constraint, or a literal brace
            self.i = found.end()
            least = int(found.group(1) or 0)
        else:
            return None
        if self.i < len(self.p) and self.p[self.i] in "?+":  # lazy, possessive
            self.i += 1
        if self.peek() in ("*", "+", "?", "{"):
            raise _NoPrefilter
        return least

    def atom(self) -> tuple[str, object]:
        p = self.p
        ch = p[self.i]
        self.i += 1
        if ch == "\\":
            if self.i >= len(p):
                raise _NoPrefilter
            escaped = p[self.i]
            self.i += 1
            if escaped in "dDsSwWnrtfv":
                return "any", None
            if escaped in "bBAZ":
                return "zero", None
            if escaped.isascii() and not escaped.isalnum():
                if escaped.isspace():
                    return "any", None
                return "char", escaped
            raise _NoPrefilter
        if ch == "(":
            return self.group()
        if ch == "[":
            self.char_class()
            return "any", None
        if ch == ".":
            return "any", None
        if ch in "^$":
            return "zero", None
        if ch in "*+?{":
            raise _NoPrefilter
        if ch.isascii() and ch not in "}]#" and ch.isprintable():
            return "char", ch
        return "any", None

    def group(self) -> tuple[str, object]:
        p = self.p
        kind = "group"
        if p.startswith("?", self.i):
            self.i += 1
            head = p[self.i : self.i + 1]
            if head in (":", ">", "=", "!"):
                self.i += 1
                kind = "group" if head in (":", ">") else "zero"
            elif p.startswith(("<=", "<!"), self.i):
                self.i += 2
                kind = "zero"
            elif p.startswith(("<", "P<"), self.i):
                self.i += 1 if head == "<" else 2
                name = _GROUP_NAME.match(p, self.i)
                if name is None:
                    raise _NoPrefilter
                self.i = name.end()
            else:
                flags = re.match(r"([a-zA-Z-]*)([:)])", p[self.i :])
                if flags is None or not set(flags.group(1)) <= _INLINE_FLAG_LETTERS:
                    raise _NoPrefilter
                if "x" in flags.group(1):
                    raise _NoPrefilter  # verbose mode switched on or off mid-pattern
                self.ignorecase |= "i" in flags.group(1)
                self.i += flags.end()
                if flags.group(2) == ")":
                    return "zero", None
        elif p.startswith("*", self.i):
            raise _NoPrefilter  # a control verb
        inner = self.alternation()
        if self.peek() != ")":
            raise _NoPrefilter
        self.i += 1
        return kind, (inner if kind == "group" else None)

    def char_class(self) -> None:
        """Skip a ``[...]`` set (no nested sets: those are version 1 syntax)."""
        p = self.p
        i = self.i
        if p.startswith("^", i):
            i += 1
        if p.startswith("]", i):
            i += 1
        while True:
            if i >= len(p):
                raise _NoPrefilter
            ch = p[i]
            if ch == "\\":
                i += 2
            elif ch == "[":
                raise _NoPrefilter
            elif ch == "]":
                self.i = i + 1
                return
            else:
                i += 1


def strictest(decisions: Sequence[Decision]) -> Decision:
    """Return the strictest of ``decisions`` (deny > ask > allow).

    Raises:
        ValueError: ``decisions`` is empty.
    """
    return max(decisions, key=_SEVERITY.__getitem__)


class _Verdict(enum.Enum):
    NO = "no"
    YES = "yes"
    UNKNOWN = "unknown"  # cannot be decided: the command is not parsed with confidence


@dataclass(frozen=True)
class _Outcome:
    verdict: _Verdict
    why: str = ""  # for UNKNOWN: what made the command unparseable

    @staticmethod
    def combine(outcomes: Sequence[_Outcome]) -> _Outcome:
        """YES if any is YES, else the first UNKNOWN, else NO."""
        for outcome in outcomes:
            if outcome.verdict is _Verdict.YES:
                return outcome
        for outcome in outcomes:
            if outcome.verdict is _Verdict.UNKNOWN:
                return outcome
        return _NO


_NO = _Outcome(_Verdict.NO)
_YES = _Outcome(_Verdict.YES)
_UNSET = object()


class _Call:
    """A tool call's arguments, with the derived forms matchers need, each computed once."""

    def __init__(
        self, arguments: Mapping[str, Any], workspace: str, *, resolve_symlinks: bool
    ) -> None:
        self.arguments = arguments
        self.regex_budget = REGEX_BUDGET_S  # seconds left for regex searches (`_search`)
        # Why the files a shell command names cannot be listed (set by `paths`).
        self.paths_unknown: str | None = None
        # Whether `paths_unknown` is a path that cannot be resolved (issue 13 §5),
        # rather than a command that cannot be parsed.
        self.paths_unresolved = False
        # The absolute canonical targets of the paths (for bind mounts, hard links).
        self._targets: list[str] = []
        self._workspace = workspace
        self._resolve_symlinks = resolve_symlinks
        # id(rule) -> the rule's outcome for each simple command (one matching pass
        # serves both the decision and the per-command breakdown).
        self.command_outcomes: dict[int, list[_Outcome]] = {}
        # id(rule) -> what `PolicyRule._other_matchers_hold` found (the decision and
        # the breakdown both ask; the regexes are searched once).
        self.held: dict[int, bool | None] = {}

    @cached_property
    def first_words(self) -> tuple[tuple[str, str, bool], ...]:
        """Per simple command: (its program word, the word's basename, whether the
        shell could still expand it), computed once for every rule."""
        commands = self.commands
        assert not isinstance(commands, UnparseableCommand)
        facts = []
        for command in commands:
            word = command.argv[0] if command.argv else ""
            # word.rpartition("/")[2] is posixpath.basename(word).
            facts.append((word, word.rpartition("/")[2], _may_expand(word)))
        return tuple(facts)

    @cached_property
    def command_text(self) -> str | None:
        command = self.arguments.get("command")
        return command if isinstance(command, str) else None

    @cached_property
    def lowered_command_text(self) -> str | None:
        """``command_text.lower()``, for case-insensitive literal prefilters."""
        text = self.command_text
        return None if text is None else text.lower()

    @cached_property
    def commands(self) -> tuple[SimpleCommand, ...] | UnparseableCommand:
        """The simple commands the shell would run (tree-sitter-bash; issue 4)."""
        assert self.command_text is not None
        try:
            return parse_command(self.command_text)
        except UnparseableCommand as exc:
            return exc

    @cached_property
    def paths(self) -> tuple[str, ...] | None:
        """The forms ``path`` globs are matched against: the ``path`` argument's,
        or, for a shell command, those of every word of every simple command that
        can name a file (issue 4 case 6: a rule on ``.env`` that lists ``bash``
        catches ``cat .env`` and ``cat link-to-env``). None when there is nothing."""
        path = self.arguments.get("path")
        if isinstance(path, str) and path:
            return self._forms(path)
        if self.command_text is None:
            return None
        commands = self.commands
        if isinstance(commands, UnparseableCommand):
            # The files it names cannot be listed: a path rule cannot be checked.
            self.paths_unknown = commands.reason
            return None
        forms: list[str] = []
        try:
            words = _file_words(commands, self._workspace if self._resolve_symlinks else None)
        except _GlobTooWide as exc:
            self.paths_unknown = str(exc)
            return None
        for word in words:
            forms.extend(self._forms(word))
        for redirect in _redirect_targets(commands):
            forms.extend(self._redirect_forms(redirect))
        return tuple(dict.fromkeys(forms)) or None

    def _redirect_forms(self, redirect: Redirect) -> tuple[str, ...]:
        """The forms of a file a redirection opens (issue 13 §5: ``cat < .env``,
        ``echo x > .git/hooks/pre-commit``). ``path`` rules have no access kind:
        a read (``<``) and a write (``>``, ``>>``, ``&>``, ``>|``, ``<>``) are both
        matched. A name the shell computes at run time is unresolvable."""
        raw = redirect.target
        if redirect.known or not self._resolve_symlinks:
            return self._forms(raw)
        self._unresolved(f"{redirect.access} redirection target {raw!r} is named at run time")
        return candidate_paths(raw, self._workspace, resolve_symlinks=False)

    def _forms(self, raw: str) -> tuple[str, ...]:
        """The forms of one path (`resolve_candidates`); an unresolvable one is
        recorded in `paths_unknown` (its rules yield ``unparseable``)."""
        if not self._resolve_symlinks:
            return candidate_paths(raw, self._workspace, resolve_symlinks=False)
        if "$" in raw:
            # Only words naming a path reach here with "$" (see `_file_words`).
            self._unresolved(f"path {raw!r} depends on a run-time expansion")
            return candidate_paths(raw, self._workspace, resolve_symlinks=False)
        resolved = resolve_candidates(raw, self._workspace, cwds=self._cwds)
        if resolved.unresolved is not None:
            self._unresolved(resolved.unresolved)
        self._targets.extend(resolved.targets)
        return resolved.forms

    @cached_property
    def _cwds(self) -> ToolCwds:
        # Once per decision; the supervisor's own directory only when a path
        # goes through /proc/self/cwd (issue 20: each realpath is a few lstats).
        return ToolCwds(self._workspace)

    def _unresolved(self, why: str) -> None:
        if self.paths_unknown is None:
            self.paths_unknown = why
            self.paths_unresolved = True

    @cached_property
    def identities(self) -> frozenset[tuple[int, int]]:
        """``(st_dev, st_ino)`` of the paths' canonical targets and their parents
        (up to the workspace): a bind mount or a hard link of a file a rule names
        has no other trace (issue 13 §5)."""
        _ = self.paths
        if not self._targets:
            return frozenset()  # what file_identities gives for no paths
        return file_identities(self._targets, stop_at=(self._cwds.real,))

    def identity_of(self, literal: str) -> tuple[int, int] | None:
        """The identity of a rule's literal path (relative: to the workspace)."""
        cache: dict[str, tuple[int, int] | None] = self.__dict__.setdefault("_literal_ids", {})
        if literal not in cache:
            try:
                info = os.stat(os.path.join(self._workspace, os.path.expanduser(literal)))
                cache[literal] = (info.st_dev, info.st_ino)
            except (OSError, ValueError):
                cache[literal] = None
        return cache[literal]


_MAX_FILE_WORDS = 256  # words per call checked against path globs
_MAX_GLOB_MATCHES = 64  # files a glob word may name, per word
_MAX_GLOB_PARTS = 6  # path components of a glob word the gate expands
_MAX_GLOB_SCAN = 4096  # directory entries the gate reads for all globs of one call


# Redirection targets that open no file a rule can protect: the tool's own
# standard streams and the null device (`2>/dev/null`, `>/dev/stderr`).
_STANDARD_STREAMS = frozenset(
    {"/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/zero"}
)


def _redirect_targets(commands: Sequence[SimpleCommand]) -> list[Redirect]:
    """The distinct files the redirections of ``commands`` open, at most
    `_MAX_FILE_WORDS` (more: one unknown target stands for the rest, so the
    rules yield ``unparseable``)."""
    seen: dict[Redirect, None] = {}
    for command in commands:
        for redirect in command.redirects:
            if redirect.known and redirect.target in _STANDARD_STREAMS:
                continue
            if len(seen) >= _MAX_FILE_WORDS and redirect not in seen:
                seen[Redirect("…", redirect.access, known=False)] = None
                return list(seen)
            seen[redirect] = None
    return list(seen)


class _GlobTooWide(Exception):
    """A glob the gate will not expand (outside the workspace, too deep or too wide)."""


def _file_words(commands: Sequence[SimpleCommand], workspace: str | None) -> list[str]:
    """The words of ``commands`` that may name files: arguments, and the value of
    ``--opt=value``; a glob relative to the workspace is expanded against it like
    the shell would (bounded: `_MAX_GLOB_PARTS`, `_MAX_GLOB_SCAN`), and kept as
    written too. Words with run-time expansions (``$x``) cannot be known here: one
    that visibly spells a path (`_spells_a_path`: ``/proc/$$/cwd/x``,
    ``$PWD/.env``) is kept and is unresolvable (issue 13 §5); others are skipped
    (``cat $f``, ``sed 's/a$/b/'``), and the sandbox's ``deny_read`` is the
    boundary for those.
    ``workspace`` None (checking examples): globs are not expanded.

    Raises:
        _GlobTooWide: a glob starts at ``/`` or ``~`` (the gate does not walk the
            host's filesystem: that would be slow and an oracle for files the
            sandbox hides), or needs more than the bounds to expand. The caller
            treats the path matcher as "cannot be checked" (fail closed).
    """
    words: list[str] = []
    scan = [_MAX_GLOB_SCAN]
    for command in commands:
        for word in command.argv[1:]:
            if len(words) >= _MAX_FILE_WORDS:
                return words
            if word.startswith("-"):
                if "=" not in word:
                    continue
                word = word.split("=", 1)[1]
            if not word or "\0" in word:
                continue
            if "$" in word and (workspace is None or not _spells_a_path(word)):
                continue  # not visibly a path: the sandbox's ``deny_read`` is the boundary
            words.append(word)
            if workspace is not None and _GLOB_CHARS.search(word):
                words.extend(_expand_glob(word, workspace, scan))
    return words


def _spells_a_path(word: str) -> bool:
    """Whether a word with a ``$`` is visibly a path: it has a ``/`` and starts like
    one (``/``, ``~``, ``./``, ``../``) or with the expansion (``$PWD/x``). A
    ``$`` quoted literally looks the same here, so ``sed 's/a$/b/'`` must not count."""
    return "/" in word and word.startswith(("/", "~", "$", "./", "../"))


def _expand_glob(pattern: str, workspace: str, scan: list[int]) -> list[str]:
    """The workspace-relative names ``pattern`` matches (hidden names only when the
    component starts with ``.``, as bash does by default).

    Raises:
        _GlobTooWide: see `_file_words`.
    """
    if pattern.startswith(("/", "~")):
        raise _GlobTooWide(f"glob {pattern!r} names files outside the workspace")
    parts = [part for part in pattern.split("/") if part]
    if len(parts) > _MAX_GLOB_PARTS:
        raise _GlobTooWide(f"glob {pattern!r} is deeper than {_MAX_GLOB_PARTS} components")
    current = [""]
    for part in parts:
        following: list[str] = []
        for base in current:
            if not _GLOB_CHARS.search(part):
                following.append(os.path.join(base, part))
                continue
            try:
                entries = os.scandir(os.path.join(workspace, base) if base else workspace)
            except OSError:
                continue
            with entries:
                for entry in entries:
                    scan[0] -= 1
                    if scan[0] < 0:
                        raise _GlobTooWide(f"glob {pattern!r} reads too many directory entries")
                    if entry.name.startswith(".") and not part.startswith("."):
                        continue
                    if fnmatch.fnmatchcase(entry.name, part):
                        following.append(os.path.join(base, entry.name))
        current = following[:_MAX_GLOB_MATCHES]
    return [path for path in current if os.path.lexists(os.path.join(workspace, path))]


@dataclass(frozen=True)
class PolicyRule:
    """A ``tool_call`` rule, compiled, with where it came from.

    Attributes:
        id: the rule id (unique within its file).
        tools: tool names or fnmatch globs.
        decision: what the rule decides when it matches.
        reason: shown to the model and the user when the rule denies or asks.
        source: the policy file that holds the rule.
        tier: the policy tier of that file (``"managed"`` for ``--policy`` files).
        command: the words matched against every simple command, or None.
        command_match: how ``command`` is compared (issue 13 §6): ``"options"``
            (the default) reads options as a set with the program's option grammar
            (`_option_grammar`); ``"literal"`` compares the words one by one as an
            argv prefix, exactly as written.
        command_regex: searched in the whole command text, or None.
        path_globs: the ``path`` globs as written (empty: no path matcher).
        arguments: argument name and compiled regex pairs (empty: none).
    """

    id: str
    tools: tuple[str, ...]
    decision: Decision
    reason: str
    source: Path | None = None
    tier: Tier = "managed"
    command: tuple[str, ...] | None = None
    command_regex: regex.Pattern[str] | None = None
    path_globs: tuple[str, ...] = ()
    arguments: tuple[tuple[str, regex.Pattern[str]], ...] = ()
    command_match: Literal["options", "literal"] = "options"
    # The rule's words after its program, read with its option grammar.
    _rule_arguments: Arguments | None = field(init=False, repr=False, compare=False)
    _path_regexes: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    # Derived once, for the gate's fast path (none changes what matches):
    # the path globs as one alternation, literal prefilters of the regexes, and
    # whether any matcher besides ``command`` exists.
    _path_regex: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _command_prefilter: _Prefilter | None = field(init=False, repr=False, compare=False)
    _argument_checks: tuple[tuple[str, regex.Pattern[str], _Prefilter | None], ...] = field(
        init=False, repr=False, compare=False
    )
    _has_other_matchers: bool = field(init=False, repr=False, compare=False)
    # The path globs without wildcards: files whose identity (device, inode) a
    # bind mount or a hard link keeps under another name (issue 13 §5).
    _literal_paths: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rule_arguments = None
        if self.command and self.command_match == "options":
            program = self.command[0].rpartition("/")[2]
            rule_arguments = read_arguments(program, self.command[1:])
        object.__setattr__(self, "_rule_arguments", rule_arguments)
        regexes = tuple(compile_path_glob(glob) for glob in self.path_globs)
        object.__setattr__(self, "_path_regexes", regexes)
        object.__setattr__(
            self,
            "_literal_paths",
            tuple(glob for glob in self.path_globs if not _GLOB_CHARS.search(glob)),
        )
        # fullmatch of an alternation is "some alternative fullmatches"; the globs
        # compile to flag-free DOTALL regexes without groups that could collide.
        combined = (
            re.compile("|".join(f"(?:{r.pattern})" for r in regexes), re.DOTALL)
            if regexes and all(r.flags == regexes[0].flags for r in regexes)
            else None
        )
        object.__setattr__(self, "_path_regex", combined)
        object.__setattr__(
            self,
            "_command_prefilter",
            _prefilter_for(self.command_regex) if self.command_regex is not None else None,
        )
        object.__setattr__(
            self,
            "_argument_checks",
            tuple((name, rx, _prefilter_for(rx)) for name, rx in self.arguments),
        )
        object.__setattr__(
            self,
            "_has_other_matchers",
            self.command_regex is not None or bool(self.path_globs) or bool(self.arguments),
        )

    @classmethod
    def from_model(
        cls, rule: ToolCallRule, *, source: Path | None = None, tier: Tier = "managed"
    ) -> PolicyRule:
        """Compile a validated rule (its regexes are known to compile)."""
        return cls(
            id=rule.id,
            tools=rule.tool,
            decision=rule.decision,
            reason=rule.reason,
            source=source,
            tier=tier,
            command=rule.command,
            command_match=rule.command_match,
            command_regex=regex.compile(rule.command_regex) if rule.command_regex else None,
            path_globs=rule.path or (),
            arguments=tuple(
                (name, regex.compile(rx)) for name, rx in (rule.arguments or {}).items()
            ),
        )

    def applies_to(self, tool_name: str) -> bool:
        """Whether the rule's ``tool`` names or globs match ``tool_name`` (case-sensitive)."""
        return any(fnmatch.fnmatchcase(tool_name, pattern) for pattern in self.tools)

    def check_example(
        self,
        example: str | Mapping[str, Any],
        *,
        expect_match: bool,
        budget: list[float] | None = None,
    ) -> str | None:
        """Check one of the rule's self-test examples.

        Returns:
            None when the example behaves as declared, else what went wrong
            (e.g. ``"does not match"``).
        """
        if isinstance(example, str):
            kinds = self._argument_names()
            if len(kinds) != 1:
                return (
                    "is a string, but the rule has "
                    + ("no matchers" if not kinds else f"matchers on {', '.join(kinds)}")
                    + "; give it as a mapping of tool arguments"
                )
            arguments: Mapping[str, Any] = {kinds[0]: example}
        else:
            arguments = example
        call = _Call(arguments, _EXAMPLE_WORKSPACE, resolve_symlinks=False)
        if budget is not None:
            # One file's examples share a regex budget: 20,000 slow examples must
            # not hold a run (or a SIGHUP reload) for an hour.
            if budget[0] <= 0:
                return "cannot be checked: the file's examples ran out of regex time"
            call.regex_budget = min(call.regex_budget, budget[0])
            allotted = call.regex_budget
        outcome = self._match(call)
        if budget is not None:
            budget[0] -= allotted - call.regex_budget
        if outcome.verdict is _Verdict.YES and self._allows_only_path_qualified(call):
            outcome = _NO  # as the gate sees it (case 5): ``./cat`` is not ``cat``
        if outcome.verdict is _Verdict.UNKNOWN:
            return f"cannot be checked: the command is unparseable ({outcome.why})"
        if expect_match and outcome.verdict is _Verdict.NO:
            return "does not match"
        if not expect_match and outcome.verdict is _Verdict.YES:
            return "matches"
        return None

    def _allows_only_path_qualified(self, call: _Call) -> bool:
        """An allow ``command`` rule whose every matching command is a path-qualified
        program that the rule names bare: the gate does not allow those (case 5)."""
        if self.decision != "allow" or self.command is None or "/" in self.command[0]:
            return False
        commands = call.commands if call.command_text is not None else ()
        if isinstance(commands, UnparseableCommand) or not commands:
            return False
        matching = [
            command
            for command, outcome in zip(commands, self._command_outcomes(call), strict=True)
            if outcome.verdict is _Verdict.YES
        ]
        return bool(matching) and all("/" in command.argv[0] for command in matching)

    def _argument_names(self) -> list[str]:
        names: list[str] = []
        if self.command is not None or self.command_regex is not None:
            names.append("command")
        if self.path_globs:
            names.append("path")
        names.extend(name for name, _ in self.arguments if name not in names)
        return names

    def _match(self, call: _Call) -> _Outcome:
        held = self._other_matchers_hold(call)
        if held is False:
            return _NO
        if held is None:
            return _Outcome(_Verdict.UNKNOWN, call.paths_unknown or _REGEX_OUT_OF_TIME)
        if self.command is None:
            return _YES
        if call.command_text is None:
            return _NO
        commands = call.commands
        if isinstance(commands, UnparseableCommand):
            return _Outcome(_Verdict.UNKNOWN, commands.reason)
        return _Outcome.combine(self._command_outcomes(call))

    def _command_outcomes(self, call: _Call) -> list[_Outcome]:
        """This rule's outcome for each simple command of ``call``, computed once."""
        cached = call.command_outcomes.get(id(self))
        if cached is None:
            commands = call.commands
            assert not isinstance(commands, UnparseableCommand)
            cached = [
                self._match_command(command, facts)
                for command, facts in zip(commands, call.first_words, strict=True)
            ]
            call.command_outcomes[id(self)] = cached
        return cached

    def _match_command(
        self, command: SimpleCommand, facts: tuple[str, str, bool] | None = None
    ) -> _Outcome:
        """`_match_argv`, but a command that a dangerous leading assignment
        (``LD_PRELOAD=…``, ``PATH=…``, ``GIT_…``) can make run something else is
        UNKNOWN when it would otherwise not match (issue 4 case 3).

        ``facts`` (from `_Call.first_words`) lets a rule whose first word differs
        from the command's program skip the word-by-word comparison: the result
        is the same, it is only cheaper.
        """
        assert self.command is not None
        expected = self.command[0]
        if facts is not None and not facts[2]:
            word, basename, _ = facts
            program = word if "/" in expected else basename
        if facts is not None and not facts[2] and program != expected:
            outcome = _NO
        elif self._rule_arguments is None:
            outcome = self._match_argv(command.argv)
        else:
            outcome = self._match_options(command)
        if outcome.verdict is _Verdict.NO:
            if command.dangerous:
                names = ", ".join(command.dangerous)
                return _Outcome(_Verdict.UNKNOWN, f"{names} changes what {command.argv[0]!r} runs")
            if command.unseen:
                return _Outcome(_Verdict.UNKNOWN, command.unseen)
        return outcome

    def _match_options(self, command: SimpleCommand) -> _Outcome:
        """Compare the rule with one simple command, options as a set (issue 13 §6,
        `_option_grammar`). The program word is compared as in `_match_argv`."""
        assert self.command is not None and self._rule_arguments is not None
        argv = command.argv
        first = self._match_argv(argv[:1], self.command[:1])
        if first.verdict is not _Verdict.YES:
            return first
        program = self.command[0].rpartition("/")[2]
        runtime = command.runtime_words
        arguments = _command_arguments(program, argv, runtime)
        matched, word = match_arguments(
            self._rule_arguments,
            arguments,
            more_words=bool(command.more_words),
            exact_globals=self.decision == "allow",
        )
        if matched:
            return _YES
        if word is None:
            return _NO
        if word == "words read at run time":
            return _Outcome(_Verdict.UNKNOWN, command.more_words)
        if runtime and word in [argv[i] for i in runtime if i < len(argv)]:
            return _Outcome(_Verdict.UNKNOWN, f"{word!r} is filled in at run time")
        if "$" in word or _BRACE_EXPANSION.search(word):
            return _Outcome(_Verdict.UNKNOWN, f"{word!r} is expanded by the shell")
        return _Outcome(_Verdict.UNKNOWN, f"glob {word!r} may expand to what the rule names")

    def _other_matchers_hold(self, call: _Call) -> bool | None:
        """The matchers besides ``command``, which never depend on shell parsing.

        Returns None when no matcher failed but a regex search timed out: a policy's
        regexes are user input, and a backtracking one on a long command must not
        freeze the supervisor (the caller treats None as unparseable, fail-closed).
        Computed once per call (cached in ``call.held``).
        """
        key = id(self)
        held = call.held.get(key, _UNSET)
        if held is _UNSET:
            held = self._check_other_matchers(call) if self._has_other_matchers else True
            call.held[key] = held
        return held  # type: ignore[return-value]

    def _check_other_matchers(self, call: _Call) -> bool | None:
        # Every matcher must hold: the result is False as soon as one fails, else
        # None if a regex search timed out, else True. It does not depend on the
        # order of the checks, so the cheap ones (path globs, the literal
        # prefilters) go before the regex searches.
        if self.command_regex is not None and call.command_text is None:
            return False
        path_unknown = False
        if self._path_regexes:
            paths = call.paths
            if paths is None:
                if call.paths_unknown is None:
                    return False
                path_unknown = True  # cannot be checked: never a silent non-match
            else:
                combined = self._path_regex
                if combined is not None:
                    matched = any(combined.fullmatch(path) for path in paths)
                else:
                    matched = any(
                        pattern.fullmatch(path) for pattern in self._path_regexes for path in paths
                    )
                if not matched and self._literal_paths and call.identities:
                    # Another name of the same file or directory (bind mount, hard link).
                    matched = any(
                        call.identity_of(literal) in call.identities
                        for literal in self._literal_paths
                    )
                if not matched:
                    if call.paths_unknown is None:
                        return False
                    path_unknown = True
        values: list[str] = []
        for name, _, prefilter in self._argument_checks:
            value = call.arguments.get(name)
            if not isinstance(value, str):
                return False
            if prefilter is not None and not prefilter.may_match(value):
                return False  # the regex needs a literal that the value lacks
            values.append(value)
        if self.command_regex is not None:
            text = call.command_text
            assert text is not None
            prefilter = self._command_prefilter
            if prefilter is not None and not prefilter.may_match(
                text, call.lowered_command_text if prefilter.ignorecase else None
            ):
                return False
        timed_out = path_unknown
        if self.command_regex is not None:
            found = _search(self.command_regex, call.command_text, call)  # type: ignore[arg-type]
            if found is False:
                return False
            timed_out |= found is None
        for (_, pattern, _), value in zip(self._argument_checks, values, strict=True):
            found = _search(pattern, value, call)
            if found is False:
                return False
            timed_out |= found is None
        return None if timed_out else True

    def _match_argv(
        self, argv: Sequence[str], expected_words: Sequence[str] | None = None
    ) -> _Outcome:
        """Compare the ``command`` prefix (or ``expected_words``) with one argv,
        word by word: ``command_match: literal``, and the program word of both forms.

        The first word also matches by basename (``/bin/rm`` is ``rm``). A word that
        the shell would still expand (``$X``, a glob that could produce the expected
        word, brace expansion) makes the outcome UNKNOWN rather than NO.
        """
        if expected_words is None:
            assert self.command is not None
            expected_words = self.command
        for index, expected in enumerate(expected_words):
            if index >= len(argv):
                return _NO
            word = argv[index]
            if index == 0 and "/" not in expected:
                word = word.rpartition("/")[2]  # posixpath.basename
            if word == expected:
                continue
            if "$" in word or _BRACE_EXPANSION.search(word):
                return _Outcome(_Verdict.UNKNOWN, f"{argv[index]!r} is expanded by the shell")
            # Case-insensitively: ``shopt -s nocaseglob`` lets ``[P]USH`` name ``push``.
            if _GLOB_CHARS.search(word) and fnmatch.fnmatchcase(expected.lower(), word.lower()):
                return _Outcome(
                    _Verdict.UNKNOWN, f"glob {argv[index]!r} may expand to {expected!r}"
                )
            return _NO
        return _YES


@functools.lru_cache(maxsize=1024)
def _command_arguments(program: str, argv: tuple[str, ...], runtime: tuple[int, ...]) -> Arguments:
    """`read_arguments` of a simple command's words after its program, for the
    option grammar of ``program``; ``runtime``: positions in ``argv`` of words
    filled in at run time. Pure, so kept (issue 20: every ``command`` rule of
    the program reads the same command, and a re-check reads it again)."""
    unknown = [index + 1 in runtime for index in range(len(argv) - 1)] if runtime else None
    return read_arguments(program, argv[1:], unknown)


@dataclass(frozen=True)
class PolicyTier:
    """One tier's ``tool_call`` gate: the rules of its files and their combined defaults.

    Attributes:
        tier: ``"managed"``, ``"user"`` or ``"project"``.
        rules: the tier's rules, in file order then rule order.
        default: the decision when none of the tier's rules matches (the strictest
            of its files').
        unparseable: the decision a ``command`` rule yields for a command that
            cannot be parsed with confidence (the strictest of its files').
        default_source: the file whose ``default`` won (None without files).
        sources: the tier's files, in load order.
    """

    tier: Tier = "managed"
    rules: tuple[PolicyRule, ...] = ()
    default: Decision = "allow"
    unparseable: Decision = "ask"
    default_source: Path | None = None
    sources: tuple[Path, ...] = ()
    _by_tool: dict[str, tuple[PolicyRule, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _plans: dict[str, _ToolPlan] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def rules_for(self, tool_name: str) -> tuple[PolicyRule, ...]:
        """The rules whose ``tool`` patterns match ``tool_name``, in order (cached).

        For ``grep``, ``find`` and ``ls`` (`READ_LIKE_TOOLS`) the rules of ``read``
        count too: they read what ``read`` reads (issue 17 §6), so a rule written
        for ``read`` is not sidestepped by searching instead of reading."""
        found = self._by_tool.get(tool_name)
        if found is None:
            also_read = tool_name in READ_LIKE_TOOLS
            found = tuple(
                rule
                for rule in self.rules
                if rule.applies_to(tool_name) or (also_read and rule.applies_to("read"))
            )
            if len(self._by_tool) < 1024:  # tool names come from models: bound the cache
                self._by_tool[tool_name] = found
        return found

    def _plan_for(self, tool_name: str) -> _ToolPlan:
        """`rules_for`, indexed for the gate (cached like it)."""
        plan = self._plans.get(tool_name)
        if plan is None:
            plan = _ToolPlan(self.rules_for(tool_name))
            if len(self._plans) < 1024:
                self._plans[tool_name] = plan
        return plan


class _ToolPlan:
    """The rules of one tier that apply to one tool name, indexed for the gate.

    ``command`` rules are indexed by the words they expect: for a simple command
    whose program word is not expandable, `PolicyRule._match_command` gives NO to
    every rule expecting another program, and, when its second word is plain too
    (no ``$``, glob or brace expansion), to every rule expecting another second
    word; `candidates` leaves those out, and only the rest is tried.

    ``command_regex`` rules get their literal prefilters checked for all of them at
    once (`rejected_by_prefilters`).
    """

    __slots__ = (
        "_uncovered",
        "always",
        "by_path",
        "by_program",
        "checked",
        "command_positions",
        "prefiltered",
        "rules",
        "yes",
    )

    def __init__(self, rules: tuple[PolicyRule, ...]) -> None:
        self.rules = rules
        # Rules whose own matchers decide without shell parsing: those with a
        # matcher besides ``command`` (checked first), and those with no matcher.
        self.checked = tuple(
            index
            for index, rule in enumerate(rules)
            if rule.command is None or rule._has_other_matchers
        )
        self.command_positions = tuple(
            index for index, rule in enumerate(rules) if rule.command is not None
        )
        by_program: dict[str, list[int]] = {}  # expected first word without "/": basename
        by_path: dict[str, list[int]] = {}  # expected first word with "/": the whole word
        always: list[int] = []  # no first word at all (not loadable from a file)
        for index in self.command_positions:
            command = rules[index].command
            assert command is not None
            if not command:
                always.append(index)
            elif "/" in command[0]:
                by_path.setdefault(command[0], []).append(index)
            else:
                by_program.setdefault(command[0], []).append(index)
        self.by_program = {
            word: _ProgramRules(rules, tuple(found), word) for word, found in by_program.items()
        }
        self.by_path = {word: tuple(found) for word, found in by_path.items()}
        self.always = tuple(always)
        # The candidate of each rule that matched (rules are immutable: made once),
        # and the default's (None: no rule matched; a program: none covers it).
        self.yes = [_Candidate(rule.decision, rule, rule.reason) for rule in rules]
        self._uncovered: dict[str | None, _Candidate] = {}
        # (position, required literal groups, ignorecase) of the command_regex
        # prefilters; the groups with the longest (rarest, fastest to look for)
        # literals first, longest literals first within a group.
        self.prefiltered = tuple(
            (
                index,
                tuple(
                    tuple(sorted(group, key=lambda lit: (-len(lit), lit)))
                    for group in sorted(
                        prefilter.required, key=lambda g: (-min(map(len, g)), len(g), g)
                    )
                ),
                prefilter.ignorecase,
            )
            for index, rule in enumerate(rules)
            if (prefilter := rule._command_prefilter) is not None
        )

    def default_candidate(self, tier: PolicyTier) -> _Candidate:
        """The tier default's candidate when no rule matched the call (made once)."""
        found = self._uncovered.get(None)
        if found is None:
            found = self._uncovered[None] = _Candidate(
                tier.default,
                None,
                f"no {tier.tier} rule matched; the {tier.tier} default is {tier.default!r}",
            )
        return found

    def uncovered_candidate(self, tier: PolicyTier, program: str) -> _Candidate:
        """The tier default's candidate for a simple command no rule covers (made
        once per program; candidates are immutable)."""
        found = self._uncovered.get(program)
        if found is None:
            found = _Candidate(
                tier.default,
                None,
                f"no {tier.tier} rule covers {program!r}; the {tier.tier} default is "
                f"{tier.default!r}",
            )
            if len(self._uncovered) < 4096:  # program names come from models: bound it
                self._uncovered[program] = found
        return found

    def program_candidates(self, word: str, basename: str) -> Sequence[int]:
        """The ``command`` rules that expect the program of a simple command whose
        program word is ``word`` (not expandable), in rule order; every other one
        gives NO (`PolicyRule._match_command`), whatever the other words are."""
        program = self.by_program.get(basename)
        found: Sequence[int] = program.every if program is not None else ()
        if self.by_path or self.always:
            found = sorted({*found, *self.by_path.get(word, ()), *self.always})
        return found

    def candidates(self, word: str, basename: str, argv: Sequence[str]) -> Sequence[int]:
        """The ``command`` rules that can match a simple command whose program word
        is ``word`` (not expandable), in rule order; every other one gives NO."""
        program = self.by_program.get(basename)
        found: Sequence[int] = program.candidates(argv) if program is not None else ()
        if self.by_path or self.always:
            found = sorted({*found, *self.by_path.get(word, ()), *self.always})
        return found

    def rejected_by_prefilters(self, call: _Call) -> set[int]:
        """Positions of the rules whose ``command_regex`` cannot match the call's
        command text: it lacks a literal every match contains (`_Prefilter`).

        Each literal is looked up at most once per text, and only as far as needed
        (the groups of a prefilter are ordered rarest first).
        """
        text = call.command_text
        if text is None or not self.prefiltered:
            return set()
        seen: dict[str, bool] = {}
        seen_ci: dict[str, bool] = {}
        lowered: str | None = None
        rejected: set[int] = set()
        for index, required, ignorecase in self.prefiltered:
            if ignorecase:
                if lowered is None:
                    if not text.isascii():
                        continue  # the regex decides
                    lowered = call.lowered_command_text
                    assert lowered is not None
                haystack, known = lowered, seen_ci
            else:
                haystack, known = text, seen
            for group in required:
                for literal in group:
                    present = known.get(literal)
                    if present is None:
                        present = known[literal] = literal in haystack
                    if present:
                        break
                else:
                    rejected.add(index)
                    break
        return rejected


class _ProgramRules:
    """The ``command`` rules expecting one program, indexed by their second word."""

    __slots__ = ("aliases", "by_second", "every", "short")

    def __init__(
        self, rules: tuple[PolicyRule, ...], positions: tuple[int, ...], program: str = ""
    ) -> None:
        self.every = positions
        # Other spellings of subcommands (`npm i` is `npm install`): options-mode
        # rules are indexed by the canonical one.
        self.aliases = table_for(program).sub_aliases
        # Rules whose second word is not compared with the command's second word
        # (none, or an option matched anywhere: ``command: [rm, -rf]``) are
        # candidates for every command of the program.
        self.short = tuple(
            i
            for i in positions
            if len(rules[i].command or ()) == 1
            or (rules[i].command_match == "options" and rules[i].command[1].startswith("-"))  # type: ignore[index]
        )
        by_second: dict[str, list[int]] = {}
        for i in positions:
            command = rules[i].command or ()
            if len(command) > 1 and i not in self.short:
                second = command[1]
                if rules[i].command_match == "options":
                    second = self.aliases.get(second, second)
                by_second.setdefault(second, []).append(i)
        self.by_second = {word: tuple(found) for word, found in by_second.items()}

    def candidates(self, argv: Sequence[str]) -> Sequence[int]:
        """The rules that can match ``argv`` (its program is theirs), in rule order.

        `PolicyRule._match_argv` gives NO to a rule with a second word when ``argv``
        has none, or when ``argv[1]`` differs from it and is plain (no ``$``, brace
        expansion or glob character that could produce it).
        """
        if len(argv) < 2:
            return self.short
        if _may_expand(argv[1]) or argv[1].startswith("-"):
            # An option may come before the first operand (``git -C x push``).
            return self.every
        second = argv[1]
        same = self.by_second.get(second)
        canonical = self.aliases.get(second)
        if canonical is not None and canonical in self.by_second:
            same = tuple(sorted({*(same or ()), *self.by_second[canonical]}))
        if same is None:
            return self.short
        if not self.short:
            return same
        return sorted(self.short + same)


@dataclass(frozen=True)
class ToolCallDecision:
    """What the policy gate decided about one tool call, as the audit log records it.

    Attributes:
        decision: ``"allow"``, ``"ask"`` or ``"deny"``.
        rule: the id of the deciding rule; None when no rule matched.
        reason: why, for the model and the user.
        tier: the tier of the deciding rule, or of the default that decided when
            ``rule`` is None (``"managed"``, ``"user"``, ``"project"``);
            ``"default"`` when no policy is in effect at all.
        source: the file of the deciding rule, or of the winning ``default``.
        commands: for a call with a string ``command`` argument, one
            ``{"argv": [...], "decision": ...}`` per simple command (wrappers and
            ``bash -c`` contribute their inner commands too), decided by the
            ``command`` rules alone (``command_regex`` rules see the whole text, not
            one command), else by the default; empty when the command could not be
            parsed. JSON-ready.
        unparseable: the decision is the policy's ``unparseable`` setting: the
            command (or a matcher) could not be checked (issue 13 §6: say so).
    """

    decision: Decision
    rule: str | None
    reason: str
    tier: str
    source: str | None = None
    commands: list[dict[str, Any]] = field(default_factory=list)
    unparseable: bool = False


# Built-in tools that read files or directory entries the way ``read`` does.
READ_LIKE_TOOLS = frozenset({"grep", "find", "ls"})


def path_exclusions(policy: Policy | None, tool_name: str) -> tuple[str, ...]:
    """The paths a recursive tool must neither read nor list (issue 17 §6).

    The gate judges a ``grep``/``find``/``ls`` call by its ``path`` argument, like a
    ``read``; but a search of ``.`` reaches ``secrets/`` below it without naming it.
    So the ``path`` globs of every ``deny`` and ``ask`` rule that applies to the tool
    (`PolicyTier.rules_for`, which includes ``read``'s rules for these tools), in
    every tier, are handed to the tool worker, which skips what they cover
    (`pi_sandbox.worker.search_tools.PathFilter`). An ``ask`` rule hides too: a
    search cannot stop to ask about each file. Other matchers of such a rule are
    ignored, which can only hide more.

    Args:
        policy: the effective policy (None: nothing is hidden).
        tool_name: the tool about to run.

    Returns:
        Regex sources for ``re.fullmatch`` against a path relative to the workspace
        (or absolute outside it), as `compile_path_glob` builds them; deduplicated,
        in rule order. Empty when no rule applies.
    """
    if policy is None or not policy.tiers:
        return ()
    found: dict[str, None] = {}
    for tier in policy.tiers:
        for rule in tier.rules_for(tool_name):
            if rule.decision in ("deny", "ask"):
                for regex in rule._path_regexes:
                    found[regex.pattern] = None
    return tuple(found)


def evaluate_tool_call(
    policy: Policy | None,
    tool_name: str,
    arguments: Mapping[str, Any],
    *,
    workspace: Path,
) -> ToolCallDecision:
    """Decide a tool call against the effective policy (DESIGN §5 step 2, §7).

    Each tier decides on its own (its rules, strictest wins; none matched: its
    default); then the strictest tier decision wins, so a lower tier can only
    tighten: a user ``allow`` rule never lifts a managed ``deny`` or a managed
    ``default: ask`` (issue 4, "Tiers and precedence"). Ties go to a rule over a
    default, then to the higher tier.

    Pure apart from reading symlinks under ``workspace`` for ``path`` matchers;
    never raises for odd arguments (a matcher whose argument is missing or not a
    string does not match).

    Args:
        policy: the effective policy; None (or one without tiers) allows
            everything (the sandbox still applies).
        tool_name: the tool's name (``bash``, ``read``, an extension tool...).
        arguments: the tool call's arguments, already schema-validated.
        workspace: the session's working directory; ``path`` globs are relative to it.

    Returns:
        The decision, the rule, tier and file behind it, and the per-command breakdown.
    """
    if policy is None or not policy.tiers:
        if policy is not None and policy.files:
            why = "no policy file in force has a tool_call section"
        else:
            why = "no policy is in effect"
        return ToolCallDecision("allow", None, why, "default")
    call = _Call(arguments, os.path.abspath(workspace), resolve_symlinks=True)
    chosen: ToolCallDecision | None = None
    best: tuple[int, int] | None = None
    breakdowns: list[list[dict[str, Any]]] = []
    for tier in policy.tiers:
        decision, commands = _decide_in_tier(tier, tool_name, call)
        breakdowns.append(commands)
        key = (_SEVERITY[decision.decision], int(decision.rule is not None))
        if best is None or key > best:
            best, chosen = key, decision
    assert chosen is not None
    return ToolCallDecision(
        chosen.decision,
        chosen.rule,
        chosen.reason,
        chosen.tier,
        chosen.source,
        _merge_breakdowns(breakdowns),
        chosen.unparseable,
    )


def _merge_breakdowns(breakdowns: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per simple command, the strictest of the tiers' decisions."""
    if len(breakdowns) == 1:
        return breakdowns[0]
    merged = [dict(entry) for entry in breakdowns[0]]
    for other in breakdowns[1:]:
        for entry, theirs in zip(merged, other, strict=False):
            entry["decision"] = strictest([entry["decision"], theirs["decision"]])
    return merged


@dataclass(frozen=True)
class _Candidate:
    """One decision that takes part in a tier's verdict."""

    decision: Decision
    rule: PolicyRule | None  # None: the tier's default
    reason: str
    definite: bool = True  # False: a rule that could not be checked (unparseable)
    _key: tuple[int, int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "_key",
            (_SEVERITY[self.decision], int(self.definite), int(self.rule is not None)),
        )

    def key(self) -> tuple[int, int, int]:
        # Strictest first; at equal severity a real match beats "cannot be checked",
        # and a rule beats the default.
        return self._key


def _candidate_key(candidate: _Candidate) -> tuple[int, int, int]:
    return candidate._key


def _best(candidates: Sequence[_Candidate]) -> _Candidate:
    """The strictest candidate; ties go to the first (as `max` does)."""
    if len(candidates) == 1:
        return candidates[0]
    return max(candidates, key=_candidate_key)


def _decide_in_tier(
    tier: PolicyTier, tool_name: str, call: _Call
) -> tuple[ToolCallDecision, list[dict[str, Any]]]:
    """One tier's verdict on a call, and its per-simple-command breakdown.

    Rules without a ``command`` matcher judge the whole call. ``command`` rules
    judge each simple command: a command no rule covers gets the tier's default
    (or, when whole-call rules matched, their verdict), so an ``allow`` for
    ``echo`` does not carry ``id`` in ``echo ok && id`` (issue 4 case 1). The
    strictest of all of it is the tier's verdict.

    How it is computed, faster than trying every rule on every command but with the
    same result: a command's verdict is the first strictest of the candidates of
    the rules that did not give it NO, where every matching rule's candidate has
    the key (its decision, definite) and every unparseable one has the same key
    (the ``unparseable`` decision, not definite). So only the matching rules and
    the *first* unparseable one (in rule order) are needed. A command is only tried
    against the rules `_ToolPlan.candidates` says can match it; for a command
    with a dangerous assignment, every other rule gives it UNKNOWN (NO turned
    into "cannot be checked", `PolicyRule._match_command`).
    """
    plan = tier._plan_for(tool_name)
    rules = plan.rules
    whole: list[_Candidate] = []
    # Positions (in ``rules``) of the command rules whose other matchers hold.
    active: list[int] = []
    inactive: set[int] = set()
    has_text = call.command_text is not None
    rejected = plan.rejected_by_prefilters(call)
    for index in plan.checked:
        rule = rules[index]
        if index in rejected:
            held: bool | None = False
        elif rule._has_other_matchers:
            held = rule._other_matchers_hold(call)
        else:
            held = True
        if held is not True and rule.command is not None:
            inactive.add(index)
        if held is False:
            continue
        if held is None:
            why = call.paths_unknown or _REGEX_OUT_OF_TIME
            reason = (
                _unresolved(rule, why, tier.unparseable)
                if call.paths_unresolved
                else _unchecked(rule, why)
            )
            whole.append(_Candidate(tier.unparseable, rule, reason, False))
        elif rule.command is None:
            whole.append(plan.yes[index])
    if has_text:
        if inactive:
            active = [index for index in plan.command_positions if index not in inactive]
        else:
            active = list(plan.command_positions)
    default = plan.default_candidate(tier)
    fallback = _best(whole) if whole else default
    candidates = list(whole)
    breakdown: list[dict[str, Any]] = []
    commands = call.commands if has_text else ()
    if isinstance(commands, UnparseableCommand):
        if active:
            # No rule is blamed: the text could not be read, whatever the rules
            # say (issue 13 §6).
            candidates.append(
                _Candidate(tier.unparseable, None, _unparsed(tier, commands.reason), False)
            )
            if not whole:
                # The commands cannot be listed, so some may be ones no rule covers:
                # an unparseable command is never laxer than the default.
                candidates.append(
                    _Candidate(
                        tier.default,
                        None,
                        f"the command could not be parsed: {commands.reason}; commands no "
                        f"{tier.tier} rule covers get the {tier.tier} default {tier.default!r}, "
                        f"stricter than `unparseable: {tier.unparseable}`",
                        False,
                    )
                )
        commands = ()
    first_words = call.first_words if commands else ()
    for command, facts in zip(commands, first_words, strict=True):
        word, basename, expandable = facts
        # The matching rules' candidates, in rule order, and the first unparseable.
        matched: list[_Candidate] = []
        unknown: tuple[int, str] | None = None
        if active:
            if expandable:
                tried: Sequence[int] = active
            elif command.runtime_words or command.more_words:
                # Words filled in at run time may be any second word, but not the
                # program (the parser refuses that): the rules of other programs
                # give NO all the same (issue 20).
                tried = plan.program_candidates(word, basename)
            else:
                tried = plan.candidates(word, basename, command.argv)
            outcomes: dict[int, _Outcome] = {}
            for index in tried:
                if inactive and index in inactive:
                    continue
                outcome = rules[index]._match_command(command, facts)
                if (
                    outcome.verdict is _Verdict.YES
                    and "/" in word
                    and rules[index].decision == "allow"
                    and "/" not in rules[index].command[0]  # type: ignore[index]
                ):
                    # ``./cat`` is matched by basename for deny and ask, but it is not
                    # the known-safe ``cat`` an allow rule names (issue 4 case 5).
                    outcome = _NO
                outcomes[index] = outcome
                if outcome.verdict is _Verdict.YES:
                    matched.append(plan.yes[index])
                elif outcome.verdict is _Verdict.UNKNOWN and unknown is None:
                    unknown = (index, outcome.why)
            if (command.dangerous or command.unseen) and not expandable:
                # The rules not tried give UNKNOWN here; the first active rule
                # that did not match is the first unparseable one.
                for index in active:
                    outcome = outcomes.get(index, _NO)
                    if outcome.verdict is _Verdict.YES:
                        continue
                    if outcome.verdict is _Verdict.NO:
                        names = ", ".join(command.dangerous)
                        why = (
                            f"{names} changes what {command.argv[0]!r} runs"
                            if names
                            else command.unseen
                        )
                    else:
                        why = outcome.why
                    unknown = (index, why)
                    break
        if unknown is not None:
            rule = rules[unknown[0]]
            expected = rule.command[0] if rule.command else ""  # type: ignore[index]
            related = (word if "/" in expected else basename) == expected
            if not matched and not whole and _SEVERITY[tier.default] > _SEVERITY[tier.unparseable]:
                # A command that cannot be checked is never laxer than one no
                # rule covers.
                matched.append(plan.uncovered_candidate(tier, command.argv[0]))
            if related and not (command.dangerous or command.unseen):
                # The rule names this program: it is the one that cannot be checked.
                matched.append(
                    _Candidate(tier.unparseable, rule, _unchecked(rule, unknown[1], tier), False)
                )
            else:
                # Another program's rule: it is not blamed (issue 13 §6).
                matched.append(
                    _Candidate(tier.unparseable, None, _unparsed(tier, unknown[1]), False)
                )
        if matched:
            verdict = _best(matched)
        elif whole:
            verdict = fallback
        else:
            verdict = plan.uncovered_candidate(tier, command.argv[0] if command.argv else "")
        candidates.append(verdict)
        entry: dict[str, Any] = {"argv": list(command.argv), "decision": verdict.decision}
        if command.dangerous:
            entry["flags"] = list(command.dangerous)
        if command.via:
            entry["via"] = list(command.via)
        unknown = command.unseen or command.more_words
        if unknown:
            entry["unknown"] = unknown  # issue 13 §6: why rules cannot check it
        breakdown.append(entry)
    chosen = _best(candidates) if candidates else default
    rule = chosen.rule
    source = rule.source if rule is not None else tier.default_source
    return (
        ToolCallDecision(
            chosen.decision,
            rule.id if rule is not None else None,
            chosen.reason,
            rule.tier if rule is not None else tier.tier,
            str(source) if source else None,
            unparseable=not chosen.definite and chosen.decision == tier.unparseable,
        ),
        breakdown,
    )


def _unchecked(rule: PolicyRule, why: str, tier: PolicyTier | None = None) -> str:
    if tier is not None:
        return (
            f"the command could not be parsed: {why} → policy `unparseable: "
            f"{tier.unparseable}` ({tier.tier}); rule {rule.id!r} cannot be checked"
        )
    return (
        f"the command cannot be parsed with confidence ({why}), so rule {rule.id!r} "
        "cannot be checked"
    )


def _unparsed(tier: PolicyTier, why: str) -> str:
    """The reason of a decision that the ``unparseable`` setting made (issue 13 §6:
    say so, never blame an unrelated rule)."""
    return f"the command could not be parsed: {why} → policy `unparseable: {tier.unparseable}` ({tier.tier})"


def _unresolved(rule: PolicyRule, why: str, decision: str) -> str:
    return (
        f"the {why} (issue 13 §5), so path rule {rule.id!r} cannot be checked; "
        f"the policy's unparseable: {decision} decides"
    )
