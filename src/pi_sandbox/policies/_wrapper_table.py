"""The curated table of programs that run their arguments as a command (issue 13 §6).

``ssh-agent git push`` runs ``git push``; so do ``gdb --args git push``, ``uv run
git push`` and ``capsh -- -c 'git push'`` (capsh hands the words after ``--`` to
bash). The shell parser (`_shell_grammar`) asks :func:`find_inner` what such a
program runs, and reports that command too, so a rule written for the *inner*
command applies through the wrapper.

Each entry knows the program's own options: which take a value, which are flags,
which mean "no command" (``strace -p PID``) and which hide the command (``gdb -ex
'shell …'``). An option the entry does not know makes the command unparseable
(:class:`WrapperError`): guessing whether it takes a value could pick the wrong
word as the inner program, and an unknown must never become an allow.

The table (also in docs/policy.md, "Wrapper programs"):

======================  ====================================================
program                 what it runs
======================  ====================================================
``ssh-agent``           ``ssh-agent [opts] CMD …``
``capsh``               ``capsh [opts] -- ARGS``: ``bash ARGS``
``gdb``                 ``gdb [opts] --args CMD …`` (``-ex``/``-x``: unparseable)
``perf``                ``perf SUB [opts] -- CMD …`` (``record``/``stat``/``trace``
                        … without ``--``: unparseable)
``strace``/``ltrace``   ``strace [opts] CMD …`` (``-p PID``: none)
``valgrind``            ``valgrind [--opt=value …] CMD …``
``unshare``             ``unshare [opts] CMD …``
``flock``               ``flock [opts] FILE CMD …`` or ``flock FILE -c SCRIPT``
``script``              ``script -c SCRIPT`` (without ``-c``: unparseable)
``firejail``            ``firejail [--opt …] CMD …``
``dbus-run-session``    ``dbus-run-session [opts] [--] CMD …``
``xvfb-run``            ``xvfb-run [opts] CMD …``
``uv``                  ``uv [opts] run [opts] CMD …``, ``uv tool run …``
``uvx``                 ``uvx [opts] CMD …``
``npx``/``bunx``/       ``npx [opts] CMD …`` (``-c SCRIPT``: the script)
``pnpx``
``npm``                 ``npm exec|x [opts] [--] CMD …`` (``-c SCRIPT``)
``pipx``                ``pipx run [opts] APP …``
``poetry``/``pipenv``/  ``… run CMD …``
``pdm``/``hatch``/
``rye``
``conda``/``mamba``     ``conda run [-n ENV|-p PATH] CMD …``
``sshpass``/``chronic``  ``sshpass [opts] CMD …`` (also ``ifne``, ``caffeinate``)
``/``ifne``
``nix-shell``/``nix``   ``nix-shell --run SCRIPT``, ``nix develop|shell … -c CMD …``
``tsp``/``ts``          ``tsp [opts] CMD …`` (task spooler; ``-l``, ``-c ID`` …: none)
``nq``                  ``nq [-c] [-q] CMD …`` (``-t``/``-w``: none)
``entr``                ``entr [opts] CMD …``; ``entr -s SCRIPT`` (a shell script)
``scl``                 ``scl enable|run COLL… -- CMD …``, or ``scl enable COLL…
                        'SCRIPT'`` (the last word, a shell script)
``dbus-launch``         ``dbus-launch [--opt …] [CMD …]``
``direnv``/``pyenv``/   ``PROGRAM exec|run [OPERAND] [--] CMD …`` (``direnv exec
``rbenv``/``nodenv``/   DIR``, ``aws-vault exec PROFILE``; ``mise exec`` needs ``--``)
``asdf``/``bundle``/
``mise``/``aws-vault``/
``op``/``doppler``/
``dotenv``
======================  ====================================================

Wrappers the parser has always unwrapped (``env``, ``sudo``, ``doas``, ``nohup``,
``time``, ``chroot``, ``timeout`` …) are in `_shell_grammar._WRAPPERS`; ``make``'s
command-line recipes are handled there too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["WRAPPER_PROGRAMS", "Inner", "WrapperError", "find_inner"]


class WrapperError(Exception):
    """The wrapper's words cannot be read with confidence (an unknown option, or
    one that hides the command); the caller makes the text unparseable."""


@dataclass(frozen=True)
class Inner:
    """What a wrapper runs: ``prefix + argv[start:]`` as a command, or, when
    ``script`` is set, ``argv[script]`` as a ``sh -c`` script."""

    start: int = 0
    prefix: tuple[str, ...] = ()
    script: int | None = None


@dataclass(frozen=True)
class _Options:
    """A program's own options (strict: anything else is a `WrapperError`)."""

    short_value: str = ""
    short_flags: str = ""
    long_value: frozenset[str] = frozenset()
    long_flags: frozenset[str] = frozenset()
    any_long_flag: bool = False  # every ``--x`` without ``=`` is a flag (valgrind)
    skip_any: bool = False  # every ``-…`` word is one option without value (firejail)
    no_command: frozenset[str] = frozenset()
    hides: frozenset[str] = frozenset()
    script: frozenset[str] = field(default_factory=frozenset)  # option whose value is a script


def _read_options(name: str, argv: Sequence[str], i: int, spec: _Options) -> tuple[int, int | None]:
    """Skip ``spec``'s options from ``argv[i]``; return (index of the first other
    word, index of a script value or None).

    Raises:
        WrapperError: an unknown option, or one in ``spec.hides``.
        _NoCommand: an option in ``spec.no_command``.
    """
    script: int | None = None
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return i + 1, script
        if not word.startswith("-") or word == "-":
            return i, script
        if spec.skip_any:
            i += 1
            continue
        if word.startswith("--"):
            option, eq, _ = word.partition("=")
            if option in spec.hides:
                raise WrapperError(f"{name} {option} runs commands this parser does not read")
            if option in spec.no_command:
                raise _NoCommand
            if option in spec.script:
                script = i + 1 if not eq else None
                if eq:
                    raise WrapperError(f"{name} {option}=… is read as a script elsewhere")
                i += 2
                continue
            if eq:
                i += 1
            elif option in spec.long_value:
                i += 2
            elif option in spec.long_flags or spec.any_long_flag:
                i += 1
            else:
                raise WrapperError(f"{name} option {option} is not in the wrapper table")
            continue
        i += 1
        for offset, letter in enumerate(word[1:], start=2):
            flag = f"-{letter}"
            if flag in spec.hides:
                raise WrapperError(f"{name} {flag} runs commands this parser does not read")
            if flag in spec.no_command:
                raise _NoCommand
            if flag in spec.script:
                if offset != len(word):
                    raise WrapperError(f"{name} {flag} with its script attached")
                script = i
                i += 1
                break
            if letter in spec.short_value:
                if offset == len(word):
                    i += 1
                break
            if letter not in spec.short_flags:
                raise WrapperError(f"{name} option {flag} is not in the wrapper table")
    return i, script


class _NoCommand(Exception):
    pass


_SSH_AGENT = _Options(short_value="aEtPO", short_flags="cDdks")
_STRACE = _Options(
    short_value="abeEIoOpPsSuUX",
    short_flags="cCdDfFhikqrtTvVwxyYzZn",
    long_value=frozenset(
        {
            "--output",
            "--attach",
            "--trace",
            "--signal",
            "--status",
            "--env",
            "--user",
            "--string-limit",
            "--columns",
            "--summary-sort-by",
            "--trace-path",
            "--const-print-style",
        }
    ),
    long_flags=frozenset(
        {
            "--follow-forks",
            "--output-separately",
            "--summary-only",
            "--summary",
            "--summary-wall-clock",
            "--quiet",
            "--syscall-times",
            "--no-abbrev",
            "--verbose",
            "--decode-fds",
            "--decode-pids",
            "--seccomp-bpf",
            "--kill-on-exit",
            "--daemonize",
            "--instruction-pointer",
            "--stack-traces",
            "--timestamps",
            "--relative-timestamps",
            "--absolute-timestamps",
        }
    ),
    no_command=frozenset({"-p", "--attach"}),
)
_LTRACE = _Options(
    short_value="aADeFlnopsuwx",
    short_flags="bcCfhiLrStTV",
    long_value=frozenset({"--output", "--library", "--config", "--indent", "--align"}),
    long_flags=frozenset({"--demangle", "--no-signals"}),
    no_command=frozenset({"-p"}),
)
_VALGRIND = _Options(short_flags="hvqd", any_long_flag=True)
_UNSHARE = _Options(
    short_value="SGRw",
    short_flags="muinpUCTfrcl",
    long_value=frozenset(
        {
            "--setuid",
            "--setgid",
            "--root",
            "--wd",
            "--propagation",
            "--setgroups",
            "--map-user",
            "--map-group",
            "--map-users",
            "--map-groups",
        }
    ),
    long_flags=frozenset(
        {
            "--mount",
            "--uts",
            "--ipc",
            "--net",
            "--pid",
            "--user",
            "--cgroup",
            "--time",
            "--fork",
            "--map-root-user",
            "--map-current-user",
            "--mount-proc",
            "--kill-child",
            "--keep-caps",
            "--map-auto",
        }
    ),
)
_FLOCK = _Options(
    short_value="wE",
    short_flags="sxeunoFhV",
    long_value=frozenset({"--timeout", "--wait", "--conflict-exit-code"}),
    long_flags=frozenset(
        {
            "--shared",
            "--exclusive",
            "--unlock",
            "--nonblock",
            "--nb",
            "--close",
            "--no-fork",
            "--verbose",
        }
    ),
    script=frozenset({"-c", "--command"}),
)
_SCRIPT = _Options(
    short_value="EIOBTm",
    short_flags="aefqh",
    long_value=frozenset(
        {"--echo", "--log-in", "--log-out", "--log-io", "--log-timing", "--logging-format"}
    ),
    long_flags=frozenset({"--append", "--return", "--flush", "--force", "--quiet"}),
    script=frozenset({"-c", "--command"}),
)
_FIREJAIL = _Options(skip_any=True)
_DBUS = _Options(
    long_value=frozenset({"--config-file"}),
    long_flags=frozenset({"--help", "--version"}),
    hides=frozenset({"--dbus-daemon"}),
)
_XVFB = _Options(
    short_value="efnpsw",
    short_flags="ahl",
    long_value=frozenset(
        {"--error-file", "--server-args", "--server-num", "--xauth-protocol", "--wait"}
    ),
    long_flags=frozenset({"--auto-servernum", "--auto-display", "--listen-tcp"}),
)
_UV_GLOBAL = _Options(
    short_flags="qvn",
    long_value=frozenset(
        {"--directory", "--project", "--cache-dir", "--config-file", "--python", "--color"}
    ),
    long_flags=frozenset(
        {
            "--quiet",
            "--verbose",
            "--offline",
            "--no-cache",
            "--native-tls",
            "--no-config",
            "--no-progress",
            "--preview",
            "--no-python-downloads",
            "--managed-python",
            "--no-managed-python",
        }
    ),
)
_UV_RUN = _Options(
    short_value="pf",
    short_flags="qv",
    long_value=_UV_GLOBAL.long_value
    | frozenset(
        {
            "--with",
            "--with-editable",
            "--with-requirements",
            "--package",
            "--extra",
            "--group",
            "--only-group",
            "--no-group",
            "--env-file",
            "--index",
            "--default-index",
            "--index-url",
            "--extra-index-url",
            "--find-links",
            "--from",
            "--python-platform",
            "--index-strategy",
            "--resolution",
            "--prerelease",
            "--exclude-newer",
            "--link-mode",
            "--refresh-package",
            "--reinstall-package",
            "--upgrade-package",
        }
    ),
    long_flags=_UV_GLOBAL.long_flags
    | frozenset(
        {
            "--no-sync",
            "--frozen",
            "--locked",
            "--isolated",
            "--all-extras",
            "--no-dev",
            "--dev",
            "--all-packages",
            "--all-groups",
            "--no-project",
            "--active",
            "--no-active",
            "--exact",
            "--no-env-file",
            "--no-editable",
            "--refresh",
            "--reinstall",
            "--upgrade",
            "--compile-bytecode",
            "--no-build-isolation",
            "--script",
            "--gui-script",
        }
    ),
    no_command=frozenset(),
)
_NPX = _Options(
    short_value="p",
    short_flags="yq",
    long_value=frozenset({"--package", "--workspace", "--prefix", "--registry", "--cache"}),
    long_flags=frozenset({"--yes", "--no", "--quiet", "--include-workspace-root", "--workspaces"}),
    script=frozenset({"-c", "--call"}),
)
_PIPX_RUN = _Options(
    long_value=frozenset({"--spec", "--python", "--pip-args", "--index-url", "--fetch-python"}),
    long_flags=frozenset({"--no-cache", "--path", "--pypackages", "--verbose", "--quiet"}),
    short_flags="vq",
)
_RUNNER_GLOBAL = _Options(
    short_value="CP",
    short_flags="qvnhV",
    long_value=frozenset({"--directory", "--project", "--config", "-C"}),
    long_flags=frozenset(
        {"--quiet", "--verbose", "--no-interaction", "--no-ansi", "--ansi", "--no-plugins"}
    ),
)
_RUN_OPTIONS = _Options(short_flags="v", long_flags=frozenset({"--verbose"}))
_CONDA_RUN = _Options(
    short_value="np",
    long_value=frozenset({"--name", "--prefix", "--cwd"}),
    long_flags=frozenset({"--no-capture-output", "--live-stream", "--debug-wrapper-scripts"}),
)
_GDB_HIDES = frozenset(
    {
        "-ex",
        "--ex",
        "-x",
        "--x",
        "-iex",
        "--iex",
        "-ix",
        "--ix",
        "--eval-command",
        "--init-eval-command",
        "--command",
        "--init-command",
        "-command",
        "-eval-command",
    }
)
_PERF_NO_COMMAND = frozenset(
    {"report", "list", "annotate", "diff", "evlist", "help", "version", "archive", "buildid-list"}
)

WRAPPER_PROGRAMS = frozenset(
    {
        "ssh-agent",
        "capsh",
        "gdb",
        "perf",
        "strace",
        "ltrace",
        "valgrind",
        "unshare",
        "flock",
        "script",
        "firejail",
        "dbus-run-session",
        "xvfb-run",
        "uv",
        "uvx",
        "npx",
        "bunx",
        "pnpx",
        "npm",
        "pnpm",
        "pipx",
        "poetry",
        "pipenv",
        "pdm",
        "hatch",
        "rye",
        "conda",
        "mamba",
        "micromamba",
        "sshpass",
        "chronic",
        "ifne",
        "caffeinate",
        "nix-shell",
        "nix",
        "tsp",
        "ts",
        "nq",
        "entr",
        "scl",
        "dbus-launch",
        *(
            "direnv",
            "pyenv",
            "rbenv",
            "nodenv",
            "asdf",
            "bundle",
            "mise",
            "aws-vault",
            "op",
            "doppler",
            "dotenv",
        ),
    }
)
"""The programs :func:`find_inner` knows (issue 13 §6)."""

_SSHPASS = _Options(short_value="pfdP", short_flags="evhV")
_CHRONIC = _Options(short_flags="ev")
_IFNE = _Options(short_flags="n")
_CAFFEINATE = _Options(short_value="tw", short_flags="dimsu")
# Task spooler (`tsp`, Debian's name; `ts` elsewhere) queues CMD; its actions on
# the queue (`-l`, `-c ID`, `-K` …) run no command (review finding F3).
_TSP = _Options(
    short_value="LDWN",
    short_flags="nEgfmdB",
    no_command=frozenset(
        {f"-{letter}" for letter in "lSCctpoisrwkKTuUhVMX"} | {"--help", "--version"}
    ),
)
_NQ = _Options(short_flags="cq", no_command=frozenset({"-t", "-w"}))
# entr [-acdnprsz] UTILITY [ARG …]; with -s, UTILITY is a script for $SHELL -c.
_ENTR = _Options(short_flags="acdnprsz")
_DBUS_LAUNCH = _Options(
    long_value=frozenset({"--autolaunch", "--config-file"}),
    long_flags=frozenset(
        {
            "--sh-syntax",
            "--csh-syntax",
            "--auto-syntax",
            "--binary-syntax",
            "--close-stderr",
            "--exit-with-session",
            "--exit-with-x11",
        }
    ),
)
# `PROGRAM SUB [OPERANDS…] [--] CMD …`: the subcommands that run a command, and how
# many operands come before it (direnv exec DIR, aws-vault exec PROFILE). An
# option before the command makes it unparseable unless `--` marks the command.
_EXEC_STYLE: dict[str, tuple[frozenset[str], int]] = {
    "direnv": (frozenset({"exec"}), 1),
    "pyenv": (frozenset({"exec"}), 0),
    "rbenv": (frozenset({"exec"}), 0),
    "nodenv": (frozenset({"exec"}), 0),
    "asdf": (frozenset({"exec"}), 0),
    "bundle": (frozenset({"exec"}), 0),
    "mise": (frozenset({"exec", "x"}), -1),  # tool specs before a required `--`
    "aws-vault": (frozenset({"exec"}), 1),
    "op": (frozenset({"run"}), 0),
    "doppler": (frozenset({"run"}), 0),
    "dotenv": (frozenset({"run"}), 0),
}

_SIMPLE: dict[str, _Options] = {
    "sshpass": _SSHPASS,
    "chronic": _CHRONIC,
    "ifne": _IFNE,
    "caffeinate": _CAFFEINATE,
    "ssh-agent": _SSH_AGENT,
    "strace": _STRACE,
    "ltrace": _LTRACE,
    "valgrind": _VALGRIND,
    "unshare": _UNSHARE,
    "firejail": _FIREJAIL,
    "dbus-run-session": _DBUS,
    "xvfb-run": _XVFB,
    "uvx": _UV_RUN,
    "npx": _NPX,
    "bunx": _NPX,
    "pnpx": _NPX,
    "tsp": _TSP,
    "ts": _TSP,
    "nq": _NQ,
    "dbus-launch": _DBUS_LAUNCH,
}
_RUN_SUBCOMMAND: dict[str, tuple[_Options, _Options]] = {
    "poetry": (_RUNNER_GLOBAL, _RUN_OPTIONS),
    "pipenv": (_RUNNER_GLOBAL, _RUN_OPTIONS),
    "pdm": (_RUNNER_GLOBAL, _RUN_OPTIONS),
    "hatch": (_RUNNER_GLOBAL, _RUN_OPTIONS),
    "rye": (_RUNNER_GLOBAL, _RUN_OPTIONS),
    "pipx": (_RUNNER_GLOBAL, _PIPX_RUN),
    "conda": (_RUNNER_GLOBAL, _CONDA_RUN),
    "mamba": (_RUNNER_GLOBAL, _CONDA_RUN),
    "micromamba": (_RUNNER_GLOBAL, _CONDA_RUN),
}


def find_inner(name: str, argv: Sequence[str]) -> Inner | None:
    """What the wrapper program ``name`` (a basename in `WRAPPER_PROGRAMS`) runs.

    Args:
        name: the program's basename.
        argv: the whole command, ``argv[0]`` the program word.

    Returns:
        The inner command (see :class:`Inner`), or None when these words run no
        command (``strace -p 42``, ``uv pip list``, ``ssh-agent -k``).

    Raises:
        WrapperError: the words cannot be read with confidence.
    """
    try:
        return _find_inner(name, argv)
    except _NoCommand:
        return None


def _command_at(index: int, argv: Sequence[str], script: int | None) -> Inner | None:
    if script is not None:
        if script >= len(argv):
            raise WrapperError("the script option has no value")
        return Inner(script=script)
    return Inner(start=index) if index < len(argv) else None


def _find_inner(name: str, argv: Sequence[str]) -> Inner | None:
    if len(argv) == 2 and argv[1] in ("--help", "--version", "-h", "-V"):
        return None
    spec = _SIMPLE.get(name)
    if spec is not None:
        index, script = _read_options(name, argv, 1, spec)
        return _command_at(index, argv, script)
    if name in _RUN_SUBCOMMAND:
        outer, inner = _RUN_SUBCOMMAND[name]
        index, _ = _read_options(name, argv, 1, outer)
        if index >= len(argv) or argv[index] != "run":
            return None
        index, script = _read_options(f"{name} run", argv, index + 1, inner)
        return _command_at(index, argv, script)
    if name == "uv":
        index, _ = _read_options(name, argv, 1, _UV_GLOBAL)
        if index < len(argv) - 1 and argv[index] == "tool" and argv[index + 1] == "run":
            index += 1
        elif index >= len(argv) or argv[index] != "run":
            return None
        index, script = _read_options("uv run", argv, index + 1, _UV_RUN)
        if index < len(argv) and argv[index - 1] in ("-m", "--module"):
            raise WrapperError("uv run -m runs a Python module")
        return _command_at(index, argv, script)
    if name in ("npm", "pnpm"):
        if len(argv) < 2 or argv[1] not in ("exec", "x", "dlx"):
            return None
        index, script = _read_options(f"{name} exec", argv, 2, _NPX)
        return _command_at(index, argv, script)
    if name in _EXEC_STYLE:
        subcommands, operands = _EXEC_STYLE[name]
        index = 1
        while index < len(argv) and argv[index].startswith("-"):
            index += 1  # the program's global options (`dotenv -f x run`)
        if index >= len(argv) or argv[index] not in subcommands:
            return None
        rest = list(argv[index + 1 :])
        if "--" in rest:
            return _command_at(index + 1 + rest.index("--") + 1, argv, None)
        if operands < 0:
            raise WrapperError(f"{name} {argv[index]} without -- hides which word is the command")
        start = index + 1
        for _ in range(operands):
            if start < len(argv) and argv[start].startswith("-"):
                raise WrapperError(f"{name} {argv[index]} option {argv[start]} is not in the table")
            start += 1
        if start < len(argv) and argv[start].startswith("-"):
            raise WrapperError(f"{name} {argv[index]} option {argv[start]} is not in the table")
        return _command_at(start, argv, None)
    if name == "entr":
        index, _ = _read_options(name, argv, 1, _ENTR)
        shell = any(
            w.startswith("-") and not w.startswith("--") and "s" in w for w in argv[1:index]
        )
        return _command_at(index, argv, index if shell and index < len(argv) else None)
    if name == "scl":
        return _scl(argv)
    if name == "nix-shell":
        for i, word in enumerate(argv[1:], start=1):
            if word in ("--run", "--command") and i + 1 < len(argv):
                return Inner(script=i + 1)
        return None
    if name == "nix":
        if len(argv) < 2 or argv[1] not in ("develop", "shell"):
            return None
        for i, word in enumerate(argv[2:], start=2):
            if word in ("-c", "--command"):
                return _command_at(i + 1, argv, None)
        return None
    if name == "capsh":
        # Everything after `--` is handed to bash; `==` re-runs capsh itself and
        # --shell= picks another shell.
        for i, word in enumerate(argv[1:], start=1):
            if word == "--":
                return Inner(start=i + 1, prefix=("bash",))
            if word == "==" or word.startswith("--shell"):
                raise WrapperError(f"capsh {word} runs a program this parser does not read")
        return None
    if name == "gdb":
        for i, word in enumerate(argv[1:], start=1):
            if word.split("=", 1)[0] in _GDB_HIDES:
                raise WrapperError(f"gdb {word} runs debugger commands (shell …)")
            if word in ("--args", "-args"):
                return Inner(start=i + 1) if i + 1 < len(argv) else None
        return None
    if name == "perf":
        if len(argv) < 2 or argv[1] in _PERF_NO_COMMAND or argv[1].startswith("-"):
            return None
        if "--" in argv:
            index = list(argv).index("--") + 1
            return Inner(start=index) if index < len(argv) else None
        raise WrapperError(f"perf {argv[1]} runs a command this parser does not find without --")
    if name == "flock":
        index, script = _read_options(name, argv, 1, _FLOCK)
        if script is not None:
            return _command_at(index, argv, script)
        index += 1  # the lock file or descriptor
        if index < len(argv) and argv[index] in ("-c", "--command"):
            return _command_at(index + 1, argv, index + 1)
        return _command_at(index, argv, None)
    if name == "script":
        index, script = _read_options(name, argv, 1, _SCRIPT)
        if script is None:
            raise WrapperError("script without -c runs a shell that reads standard input")
        return _command_at(index, argv, script)
    raise WrapperError(f"{name} is not in the wrapper table")  # pragma: no cover


def _scl(argv: Sequence[str]) -> Inner | None:
    """``scl enable|run COLL… -- CMD …`` runs CMD; without ``--`` the last word is
    a command line scl hands to ``/bin/sh -c`` (scl-utils' man page). ``scl -l``,
    ``scl list-collections``, ``scl load``/``unload`` (environment modules),
    ``register``/``deregister`` run no command."""
    if len(argv) < 2:
        return None
    if argv[1].startswith("-"):
        if argv[1] in ("-l", "--list", "-h", "--help", "-V", "--version"):
            return None
        raise WrapperError(f"scl option {argv[1]} is not in the wrapper table")
    if argv[1] not in ("enable", "run"):
        return None
    rest = list(argv[2:])
    if "--" in rest:
        start = 2 + rest.index("--") + 1
        return _command_at(start, argv, None)
    if len(rest) < 2:
        return None  # a collection and no command
    if any(w.startswith("-") for w in rest[:-1]):
        raise WrapperError(f"scl {argv[1]} option is not in the wrapper table")
    return Inner(script=len(argv) - 1)


# -- options whose value is a command ----------------------------------------------

# Program → option → how its value runs: "script" (a shell command line, as
# ``sh -c``), "exec=" (a value ``exec=SCRIPT`` among other actions). GTFOBins-style
# spellings (issue 13 §6): ``tar --to-command='git push'``, ``rsync -e 'sh -c …'``.
_SCRIPT_OPTIONS: dict[str, dict[str, str]] = {
    "tar": {
        "--to-command": "script",
        "--use-compress-program": "script",
        "-I": "script",
        "--checkpoint-action": "exec=",
        "--info-script": "script",
        "--new-volume-script": "script",
        "-F": "script",
    },
    "rsync": {"-e": "script", "--rsh": "script"},
    "zip": {"-TT": "script", "--unzip-command": "script"},
    "scp": {"-S": "script"},
    "man": {"-P": "script", "--pager": "script", "-H": "script", "--html": "script"},
}
SCRIPT_OPTION_PROGRAMS = frozenset({*_SCRIPT_OPTIONS, "ssh", "scp", "sftp", "less", "more"}) | (
    frozenset({"vim", "vi", "nvim", "view", "ex", "vimdiff", "gvim"})
)
"""Programs with an option whose value runs as a command (:func:`option_scripts`)."""

_SSH_COMMAND_KEYS = ("proxycommand", "localcommand", "knownhostscommand", "remotecommand")
# ssh's `-o Key=value` and `-o "Key value"`.
_SSH_OPTION = re.compile(r"\s*([A-Za-z]+)\s*(?:=|\s)\s*(.*)\Z", re.DOTALL)


def option_scripts(name: str, argv: Sequence[str]) -> list[tuple[int, str, str]]:
    """The shell scripts ``name``'s options run (issue 13 §6).

    Args:
        name: the program's basename (in `SCRIPT_OPTION_PROGRAMS`).
        argv: the whole command.

    Returns:
        ``(index of the word holding it, script text, label)`` for each.

    Raises:
        WrapperError: the program runs commands in its own language (a vim
            ``-c``/``+`` command that is not a line number or a search).
    """
    found: list[tuple[int, str, str]] = []
    if name in ("vim", "vi", "nvim", "view", "ex", "vimdiff", "gvim"):
        for i, word in enumerate(argv[1:], start=1):
            value = None
            if word in ("-c", "--cmd", "-S") and i + 1 < len(argv):
                value = argv[i + 1] if word != "-S" else "source"
            elif word.startswith("+") and len(word) > 1:
                value = word[1:]
            if value is not None and not (value.isdigit() or value.startswith(("/", "?"))):
                raise WrapperError(f"{name} runs editor commands ({word} …)")
        return found
    if name in ("less", "more"):
        for i, word in enumerate(argv[1:], start=1):
            if word.startswith("+") and "!" in word:
                found.append((i, word.split("!", 1)[1], f"{name} +!"))
        return found
    if name in ("ssh", "scp", "sftp"):
        for i, word in enumerate(argv[1:], start=1):
            value = None
            if word == "-o" and i + 1 < len(argv):
                value, index = argv[i + 1], i + 1
            elif word.startswith("-o") and len(word) > 2:
                value, index = word[2:], i
            if value is None:
                continue
            option = _SSH_OPTION.match(value)
            if option and option.group(1).lower() in _SSH_COMMAND_KEYS:
                found.append((index, option.group(2), f"{name} -o {option.group(1)}"))
        if name != "scp":
            return found
    table = _SCRIPT_OPTIONS.get(name, {})
    for i, word in enumerate(argv[1:], start=1):
        if word == "--":
            break
        option, eq, attached = word.partition("=")
        kind = table.get(option)
        value: str | None = None
        index = i
        if kind is not None:
            if eq:
                value = attached
            elif i + 1 < len(argv):
                value, index = argv[i + 1], i + 1
        elif not word.startswith("--"):
            # A short option with its value attached: `-Ifoo`, `-eCMD`.
            for short, short_kind in table.items():
                if len(short) == 2 and word.startswith(short) and len(word) > 2:
                    kind, value = short_kind, word[2:]
                    break
        if kind is None or value is None:
            continue
        if kind == "exec=":
            if value.startswith("exec="):
                found.append((index, value[5:], f"{name} {option}"))
            continue
        found.append((index, value, f"{name} {option}"))
    return found
