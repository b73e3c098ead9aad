"""Read a command's options the way its program does, so rules match options as a set.

Issue 13 §6, "Flag-aware matching": a ``command: [rm, -rf]`` rule must match
``rm -fr``, ``rm -r -f``, ``rm --recursive --force`` and ``rm -Rf``. Both the
rule's words and each simple command's words are read into :class:`Arguments`
(options and operands) with the same table, then compared
(:func:`match_arguments`):

- every option of the rule must be among the command's options, in any order,
  anywhere before ``--`` (a value given in the rule must be the command's value);
- the rule's operands must be the first operands of the command, in order.

How words are read (the option grammar, also in docs/policy.md):

- ``--`` ends the options: every later word is an operand.
- ``--name=value`` is the option ``--name`` with ``value``; ``--name value`` is the
  same when the table knows ``--name`` takes a value. For an option the table
  does not know, ``--name word`` is read both ways (the word may be its value or an
  operand).
- ``-abc`` is ``-a -b -c``; when the table knows ``-b`` takes a value, the rest of
  the word (``-bVALUE``) or else the next word is its value. ``-`` alone is an
  operand.
- Known spellings are brought to one name: ``-R``, ``--recursive`` → ``-r`` for
  ``rm``; ``--force`` → ``-f`` ... (`_TABLES`). A program with subcommands
  (``git``, ``docker``, ``kubectl``, ``npm``, ``pip``) reads its global options,
  then its subcommand (the first operand), then that subcommand's options.
- ``find`` reads every ``-word`` as one option (``-delete``, ``-exec``); ``tar``
  also reads a first word without a dash as a cluster (``tar xzf f``).

A word the shell still expands (``$x``, a glob, a brace expansion) or that is
filled in at run time (``find -exec … {}``, ``xargs``) is *unknown*: when the rule
does not match and such a word could supply what is missing, the outcome is
unknown, never "no match" (fail closed).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "Arguments",
    "OptionTable",
    "match_arguments",
    "read_arguments",
    "table_for",
]


@dataclass(frozen=True)
class OptionTable:
    """How one program (or subcommand) spells its options.

    Attributes:
        with_value: option names (canonical, after ``aliases``) that take a value.
        aliases: spelling → canonical name (``"--recursive": "-r"``).
        atomic: every ``-word`` is one option (``find -delete``), never a cluster.
        subcommands: the first operand is a subcommand; its own table is
            ``sub[name]`` merged over this one (else this one).
        sub: tables of subcommands.
        old_style_cluster: a first word without a dash is a cluster (``tar xzf``).
        multi_letter_short: short options of two letters (``wget -nv``).
        sub_aliases: other spellings of subcommands (``npm i`` is ``npm install``).
    """

    with_value: frozenset[str] = frozenset()
    aliases: Mapping[str, str] = field(default_factory=dict)
    atomic: bool = False
    subcommands: bool = False
    sub: Mapping[str, OptionTable] = field(default_factory=dict)
    old_style_cluster: bool = False
    multi_letter_short: frozenset[str] = frozenset()
    sub_aliases: Mapping[str, str] = field(default_factory=dict)

    def canon(self, name: str) -> str:
        return self.aliases.get(name, name)

    def merged(self, other: OptionTable) -> OptionTable:
        """``other`` over this table (a subcommand's table over the program's)."""
        return OptionTable(
            with_value=self.with_value | other.with_value,
            aliases={**self.aliases, **other.aliases},
            atomic=other.atomic,
            multi_letter_short=self.multi_letter_short | other.multi_letter_short,
        )


@dataclass(frozen=True)
class Option:
    """One option of a command: ``name`` (canonical), its ``value`` (None: none
    given), and for an option of unknown arity the word after it (``following``),
    which may be its value."""

    name: str
    value: str | None = None
    following: str | None = None


@dataclass(frozen=True)
class Arguments:
    """A command's words after the program, read with an :class:`OptionTable`.

    Attributes:
        options: the options, in order.
        operands: the operands, in order, with for each whether it may instead be
            the value of an option of unknown arity (``maybe_value``).
        unknown: words whose text is not known until run time: each may be any
            option or operand.
        global_options: for a program with subcommands, the names of the options
            before the subcommand (``git -c x=y status``: ``("-c",)``).
        options_before: per operand, how many options come before it.
    """

    options: tuple[Option, ...]
    operands: tuple[tuple[str, bool], ...]
    unknown: tuple[str, ...] = ()
    global_options: tuple[str, ...] = ()
    options_before: tuple[int, ...] = ()


def _letters(spec: str) -> frozenset[str]:
    return frozenset(f"-{letter}" for letter in spec)


def _aliases(*pairs: str) -> dict[str, str]:
    """``"-r=-R=--recursive"`` → every spelling to the first one."""
    out: dict[str, str] = {}
    for pair in pairs:
        first, *rest = pair.split("=")
        for spelling in rest:
            out[spelling] = first
    return out


_RM = OptionTable(
    aliases=_aliases(
        "-r=-R=--recursive", "-f=--force", "-i=--interactive", "-d=--dir", "-v=--verbose"
    ),
)
_CHMOD = OptionTable(
    with_value=frozenset({"--reference"}),
    aliases=_aliases("-R=--recursive", "-c=--changes", "-f=--silent=--quiet", "-v=--verbose"),
)
_CHOWN = OptionTable(
    with_value=frozenset({"--reference", "--from"}),
    aliases=_aliases(
        "-R=--recursive",
        "-c=--changes",
        "-f=--silent=--quiet",
        "-v=--verbose",
        "-h=--no-dereference",
    ),
)
_CURL = OptionTable(
    with_value=_letters("oXdHTFuxKAebcwmrCEYyzUtQPD")
    | frozenset(
        {
            "--data-raw",
            "--data-binary",
            "--data-urlencode",
            "--json",
            "--url",
            "--cacert",
            "--capath",
            "--key",
            "--connect-timeout",
            "--retry",
            "--resolve",
            "--proxy-header",
            "--oauth2-bearer",
            "--output-dir",
            "--unix-socket",
            "--interface",
            "--max-redirs",
            "--limit-rate",
            "--connect-to",
            "--form-string",
            "--pinnedpubkey",
        }
    ),
    aliases=_aliases(
        "-o=--output",
        "-O=--remote-name",
        "-X=--request",
        "-d=--data",
        "-H=--header",
        "-k=--insecure",
        "-L=--location",
        "-s=--silent",
        "-S=--show-error",
        "-f=--fail",
        "-T=--upload-file",
        "-F=--form",
        "-u=--user",
        "-x=--proxy",
        "-K=--config",
        "-A=--user-agent",
        "-e=--referer",
        "-b=--cookie",
        "-c=--cookie-jar",
        "-I=--head",
        "-v=--verbose",
        "-w=--write-out",
        "-m=--max-time",
        "-r=--range",
        "-C=--continue-at",
        "-E=--cert",
        "-G=--get",
        "-i=--include",
        "-n=--netrc",
        "-N=--no-buffer",
        "-Z=--parallel",
        "-J=--remote-header-name",
        "-R=--remote-time",
        "-Y=--speed-limit",
        "-y=--speed-time",
        "-z=--time-cond",
        "-U=--proxy-user",
        "-t=--telnet-option",
        "-Q=--quote",
        "-P=--ftp-port",
        "-D=--dump-header",
        "-4=--ipv4",
        "-6=--ipv6",
    ),
)
_WGET = OptionTable(
    with_value=_letters("OoPiUtTweaBDlQARIX")
    | frozenset({"--post-data", "--post-file", "--header", "--user", "--password", "--method"}),
    aliases=_aliases(
        "-O=--output-document",
        "-o=--output-file",
        "-q=--quiet",
        "-c=--continue",
        "-r=--recursive",
        "-P=--directory-prefix",
        "-i=--input-file",
        "-U=--user-agent",
        "-N=--timestamping",
        "-t=--tries",
        "-T=--timeout",
        "-w=--wait",
        "-e=--execute",
        "-a=--append-output",
        "-B=--base",
        "-D=--domains",
        "-l=--level",
        "-Q=--quota",
        "-A=--accept",
        "-R=--reject",
        "-m=--mirror",
        "-k=--convert-links",
        "-p=--page-requisites",
        "-b=--background",
        "-x=--force-directories",
        "-v=--verbose",
        "-nv=--no-verbose",
        "-nc=--no-clobber",
        "-nd=--no-directories",
        "-nH=--no-host-directories",
        "-np=--no-parent",
    ),
    multi_letter_short=frozenset({"-nv", "-nc", "-nd", "-nH", "-np"}),
)
_FIND = OptionTable(atomic=True, aliases=_aliases("-o=-or", "-a=-and", "!=-not"))
_TAR = OptionTable(
    with_value=_letters("fCTXIgNFKLV")
    | frozenset({"--to-command", "--checkpoint-action", "--exclude", "--transform"}),
    aliases=_aliases(
        "-x=--extract=--get",
        "-c=--create",
        "-f=--file",
        "-z=--gzip=--gunzip=--ungzip",
        "-j=--bzip2",
        "-J=--xz",
        "-v=--verbose",
        "-t=--list",
        "-C=--directory",
        "-P=--absolute-names",
        "-r=--append",
        "-u=--update",
        "-T=--files-from",
        "-X=--exclude-from",
        "-I=--use-compress-program",
        "-k=--keep-old-files",
        "-U=--unlink-first",
        "-p=--preserve-permissions=--same-permissions",
    ),
    old_style_cluster=True,
)
GIT_GLOBAL_OPTIONS_WITH_VALUE = frozenset(
    {
        "-C",
        "-c",
        "--git-dir",
        "--work-tree",
        "--namespace",
        "--super-prefix",
        "--config-env",
        "--exec-path",
        "--attr-source",
        "--list-cmds",
    }
)
"""git's global options that take a value (before the subcommand); also read by the
shell grammar (`_shell_grammar`) to find the subcommand."""

_GIT = OptionTable(
    with_value=GIT_GLOBAL_OPTIONS_WITH_VALUE,
    aliases=_aliases("-P=--no-pager", "-p=--paginate"),
    subcommands=True,
    sub={
        "push": OptionTable(
            with_value=frozenset({"--repo", "--receive-pack", "--exec", "-o", "--push-option"}),
            aliases=_aliases(
                "-f=--force",
                "-u=--set-upstream",
                "-n=--dry-run",
                "-d=--delete",
                "-q=--quiet",
                "-v=--verbose",
                "-o=--push-option",
            ),
        ),
        "clean": OptionTable(
            with_value=frozenset({"-e", "--exclude"}),
            aliases=_aliases("-f=--force", "-d=-d", "-x=-x", "-n=--dry-run", "-q=--quiet"),
        ),
        "reset": OptionTable(aliases=_aliases("-q=--quiet")),
        "checkout": OptionTable(with_value=frozenset({"-b", "-B"}), aliases=_aliases("-f=--force")),
        "branch": OptionTable(
            aliases=_aliases("-d=--delete", "-f=--force", "-m=--move", "-c=--copy")
        ),
        "commit": OptionTable(
            with_value=frozenset({"-m", "-F", "-C", "-c", "--author", "--date"}),
            aliases=_aliases(
                "-m=--message",
                "-F=--file",
                "-a=--all",
                "-n=--no-verify",
                "-C=--reuse-message",
            ),
        ),
        "rm": OptionTable(aliases=_aliases("-r=-r", "-f=--force", "-q=--quiet")),
        "config": OptionTable(with_value=frozenset({"-f", "--file", "--blob"})),
        "remote": OptionTable(),
        # `git subtree -P lib push o m`: the options before its own subcommand take
        # values, so `push` is still the first operand (review finding F3).
        "subtree": OptionTable(
            with_value=frozenset({"-P", "-m", "-b", "--onto", "--annotate"}),
            aliases=_aliases("-P=--prefix", "-m=--message", "-b=--branch"),
        ),
        "fetch": OptionTable(aliases=_aliases("-f=--force")),
        "pull": OptionTable(aliases=_aliases("-f=--force")),
    },
)
_DOCKER_RUN = OptionTable(
    with_value=frozenset(
        {
            "-v",
            "-e",
            "-p",
            "-u",
            "-w",
            "-l",
            "-h",
            "-m",
            "-a",
            "--name",
            "--network",
            "--net",
            "--entrypoint",
            "--mount",
            "--env-file",
            "--cap-add",
            "--cap-drop",
            "--security-opt",
            "--device",
            "--pid",
            "--ipc",
            "--userns",
            "--platform",
            "--add-host",
            "--restart",
            "--gpus",
            "--runtime",
            "--ulimit",
            "--tmpfs",
            "--log-driver",
            "--log-opt",
            "--dns",
            "--expose",
            "--link",
            "--volumes-from",
            "--cidfile",
            "--cpus",
            "--shm-size",
            "--uts",
            "--cgroupns",
        }
    ),
    aliases=_aliases(
        "-v=--volume",
        "-e=--env",
        "-p=--publish",
        "-u=--user",
        "-w=--workdir",
        "-l=--label",
        "-h=--hostname",
        "-m=--memory",
        "-a=--attach",
        "-i=--interactive",
        "-t=--tty",
        "-d=--detach",
        "-P=--publish-all",
        "--network=--net",
    ),
)
_DOCKER = OptionTable(
    with_value=frozenset({"-H", "-c", "-l", "--config", "--context", "--host", "--log-level"}),
    aliases=_aliases("-H=--host", "-c=--context", "-l=--log-level", "-D=--debug"),
    subcommands=True,
    sub={
        "run": _DOCKER_RUN,
        "create": _DOCKER_RUN,
        "exec": OptionTable(
            with_value=frozenset({"-e", "-u", "-w", "--env-file"}),
            aliases=_aliases(
                "-e=--env",
                "-u=--user",
                "-w=--workdir",
                "-i=--interactive",
                "-t=--tty",
                "-d=--detach",
            ),
        ),
        "rm": OptionTable(aliases=_aliases("-f=--force", "-v=--volumes", "-l=--link")),
        "rmi": OptionTable(aliases=_aliases("-f=--force")),
        "system": OptionTable(aliases=_aliases("-a=--all", "-f=--force")),
        "image": OptionTable(aliases=_aliases("-a=--all", "-f=--force")),
        "volume": OptionTable(aliases=_aliases("-a=--all", "-f=--force")),
        "container": OptionTable(aliases=_aliases("-a=--all", "-f=--force")),
        "push": OptionTable(aliases=_aliases("-a=--all-tags", "-q=--quiet")),
        "build": OptionTable(
            with_value=frozenset({"-t", "-f", "--build-arg", "--target", "--platform"}),
            aliases=_aliases("-t=--tag", "-f=--file", "-q=--quiet"),
        ),
    },
)
_KUBECTL = OptionTable(
    with_value=frozenset(
        {
            "-n",
            "-l",
            "-o",
            "-f",
            "-c",
            "-s",
            "--context",
            "--cluster",
            "--kubeconfig",
            "--user",
            "--token",
            "--as",
            "--as-group",
            "--selector",
            "--field-selector",
            "--grace-period",
            "--timeout",
            "--cascade",
            "--container",
            "--server",
        }
    ),
    aliases=_aliases(
        "-n=--namespace",
        "-l=--selector",
        "-o=--output",
        "-f=--filename",
        "-c=--container",
        "-s=--server",
        "-A=--all-namespaces",
        "-i=--stdin",
        "-t=--tty",
        "-R=--recursive",
        "-w=--watch",
    ),
    subcommands=True,
)
_NPM = OptionTable(
    with_value=frozenset({"-w", "--workspace", "--prefix", "--registry", "--tag", "-C"}),
    aliases=_aliases(
        "-g=--global",
        "-D=--save-dev",
        "-S=--save",
        "-E=--save-exact",
        "-f=--force",
        "-w=--workspace",
        "-y=--yes",
        "-C=--prefix",
    ),
    subcommands=True,
    sub_aliases={
        **dict.fromkeys(
            ("i", "in", "ins", "inst", "insta", "instal", "isnt", "isnta", "isntal", "isntall"),
            "install",
        ),
        "add": "install",
        **dict.fromkeys(("un", "unlink", "remove", "rm", "r"), "uninstall"),
        **dict.fromkeys(("run-script", "rum", "urn"), "run"),
        **dict.fromkeys(("t", "tst"), "test"),
        "x": "exec",
        "c": "config",
    },
)
_PIP = OptionTable(
    with_value=frozenset(
        {
            "-r",
            "-c",
            "-e",
            "-i",
            "-t",
            "--requirement",
            "--constraint",
            "--editable",
            "--index-url",
            "--extra-index-url",
            "--target",
            "--prefix",
            "--root",
            "--python",
            "--trusted-host",
            "-f",
            "--find-links",
        }
    ),
    aliases=_aliases(
        "-r=--requirement",
        "-c=--constraint",
        "-e=--editable",
        "-i=--index-url",
        "-t=--target",
        "-U=--upgrade",
        "-I=--ignore-installed",
        "-q=--quiet",
        "-v=--verbose",
        "-y=--yes",
        "-f=--find-links",
    ),
    subcommands=True,
)

_TABLES: dict[str, OptionTable] = {
    "rm": _RM,
    "chmod": _CHMOD,
    "chown": _CHOWN,
    "chgrp": _CHOWN,
    "curl": _CURL,
    "wget": _WGET,
    "find": _FIND,
    "tar": _TAR,
    "git": _GIT,
    "docker": _DOCKER,
    "podman": _DOCKER,
    "kubectl": _KUBECTL,
    "npm": _NPM,
    "pip": _PIP,
    "pip3": _PIP,
}
"""The programs whose options are known (issue 13 §6): spellings and arity."""

_GENERIC = OptionTable()


def table_for(program: str) -> OptionTable:
    """The option table of ``program`` (a basename), or the generic one: clusters
    split, no option known to take a value, no aliases."""
    return _TABLES.get(program, _GENERIC)


def read_arguments(
    program: str, words: Sequence[str], unknown: Sequence[bool] | None = None
) -> Arguments:
    """Read ``words`` (the argv after the program) into options and operands.

    Args:
        program: the program's basename (chooses the table).
        words: the words after the program.
        unknown: per word, whether its text is not known until run time; such a
            word is neither an option nor an operand but goes to ``unknown``.

    Returns:
        The :class:`Arguments` (see the module docstring for the grammar).
    """
    table = table_for(program)
    options: list[Option] = []
    operands: list[tuple[str, bool]] = []
    unknowns: list[str] = []
    current = table
    chose_sub = not table.subcommands
    i = 0
    n = len(words)
    ended = False
    if table.old_style_cluster and n and words[0][:1] not in ("-", "") and words[0].isalpha():
        words = ["-" + words[0], *words[1:]]
        if unknown is not None:
            unknown = [False, *unknown[1:]]
    global_options: list[str] = []
    options_before: list[int] = []
    while i < n:
        if not chose_sub:
            global_options.extend(option.name for option in options[len(global_options) :])
        word = words[i]
        if unknown is not None and unknown[i]:
            unknowns.append(word)
            i += 1
            continue
        if ended or word == "-" or not word.startswith("-") or (current.atomic and word == "!"):
            if not chose_sub and not ended:
                chose_sub = True
                word = table.sub_aliases.get(word, word)
                sub = table.sub.get(word)
                current = table.merged(sub) if sub is not None else table.merged(_GENERIC)
            operands.append((word, False))
            options_before.append(len(options))
            i += 1
            continue
        if word == "--":
            ended = True
            i += 1
            continue
        if word.startswith("--") or current.atomic or word in current.multi_letter_short:
            name, eq, value = word.partition("=")
            canon = current.canon(name)
            if eq:
                options.append(Option(canon, value))
            elif canon in current.with_value or name in current.with_value:
                following = words[i + 1] if i + 1 < n else None
                options.append(Option(canon, following))
                i += 1
            elif (
                word.startswith("--")
                and chose_sub
                and i + 1 < n
                and not words[i + 1].startswith("-")
                and canon not in current.aliases.values()
                and name not in current.aliases
            ):
                # Unknown arity: the next word may be its value, and stays an operand.
                options.append(Option(canon, None, words[i + 1]))
                operands.append((words[i + 1], True))
                options_before.append(len(options))
                if not chose_sub:
                    chose_sub = True
                i += 2
                continue
            else:
                options.append(Option(canon))
            i += 1
            continue
        # A cluster of short options.
        letters = word[1:]
        i += 1
        for offset, letter in enumerate(letters):
            name = current.canon(f"-{letter}")
            if name in current.with_value or f"-{letter}" in current.with_value:
                rest = letters[offset + 1 :]
                if rest:
                    options.append(Option(name, rest))
                elif i < n:
                    options.append(Option(name, words[i]))
                    i += 1
                else:
                    options.append(Option(name))
                break
            options.append(Option(name))
    if not chose_sub:
        global_options.extend(option.name for option in options[len(global_options) :])
    return Arguments(
        tuple(options),
        tuple(operands),
        tuple(unknowns),
        tuple(global_options),
        tuple(options_before),
    )


def _could_be_option(word: str) -> bool:
    """Whether a word the shell expands could become one starting with ``-``
    (``$x``; a glob such as ``*`` names a file called ``-rf`` as readily as any)."""
    return "$" in word or word[:1] in ("*", "?", "[", "-", "{")


def match_arguments(
    rule: Arguments, command: Arguments, *, more_words: bool = False, exact_globals: bool = False
) -> tuple[bool, str | None]:
    """Compare a rule's arguments with a command's (both from :func:`read_arguments`).

    Args:
        rule: the rule's words after its program.
        command: the command's words after its program.
        more_words: words not in the text are appended at run time (``xargs``).
        exact_globals: for ``allow`` rules: options before a subcommand, or before
            the last of the rule's operands, that the rule does not name make it
            not match (``git -c core.pager=… status`` is not the ``git status`` an
            allow names, ``make -f x.mk test`` not the ``make test``).

    Returns:
        ``(True, None)`` when the rule matches; ``(False, None)`` when it cannot;
        ``(False, word)`` when it does not match as written but ``word`` (unknown
        until run time) could make it match — the caller treats that as unknown.
    """
    missing_word: str | None = None
    if exact_globals and not set(command.global_options) <= set(rule.global_options):
        return False, None
    # Operands: the rule's are the first of the command's, in order. A command
    # operand that may be an option's value is skipped when it does not fit.
    position = 0
    ops = command.operands
    for expected, rule_maybe_value in rule.operands:
        if rule_maybe_value:
            continue  # the value of the rule's option before it (checked below)
        while position < len(ops):
            word, maybe_value = ops[position]
            if word == expected:
                break
            if _expandable(word) and _may_produce(word, expected):
                return False, word
            if not maybe_value:
                break
            position += 1
        if position < len(ops) and ops[position][0] == expected:
            if exact_globals and command.options_before:
                named = {option.name for option in rule.options}
                before = command.options[: command.options_before[position]]
                if any(option.name not in named for option in before):
                    return False, None
            position += 1
            continue
        if command.unknown:
            return False, command.unknown[0]
        if position < len(ops) and _expandable(ops[position][0]):
            return False, ops[position][0]
        if position >= len(ops) and more_words:
            return False, "words read at run time"
        return False, None
    # Options: each of the rule's among the command's.
    for option in rule.options:
        found = False
        wanted = option.value if option.value is not None else option.following
        for have in command.options:
            if have.name != option.name:
                continue
            if wanted is None or have.value == wanted or have.following == wanted:
                found = True
                break
            if have.value is not None and _expandable(have.value):
                missing_word = have.value
        if found:
            continue
        if command.unknown:
            return False, command.unknown[0]
        for word, _ in command.operands:
            if _expandable(word) and _could_be_option(word):
                return False, word
        if missing_word is not None:
            return False, missing_word
        if more_words:
            return False, "words read at run time"
        return False, None
    return True, None


_BRACE_EXPANSION = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")


def _expandable(word: str) -> bool:
    """Whether the shell still expands ``word`` (``$``, a glob, ``{a,b}``)."""
    return (
        "$" in word
        or "*" in word
        or "?" in word
        or "[" in word
        or ("{" in word and _BRACE_EXPANSION.search(word) is not None)
    )


def _may_produce(word: str, expected: str) -> bool:
    if "$" in word or ("{" in word and _BRACE_EXPANSION.search(word)):
        return True
    return fnmatch.fnmatchcase(expected.lower(), word.lower())
