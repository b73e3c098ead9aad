"""Which session a run opens: ``--continue``, ``--resume``, ``--session``,
``--session-id``, ``--fork``, ``--session-dir``, ``--name`` (issue 15 §CLI, pi cli.md
"Sessions", pi's ``createSessionManager``).

`choose_session` runs in the CLI before anything else is decided, because the
session decides the working directory: a resumed session runs in the cwd recorded
in its header (sessions.md "Continue or switch sessions"), so the trust decision,
policy and sandbox that follow are those of a new run in that directory.
`open_writer` opens or creates the file once the workers have started (a run that
cannot start its sandbox leaves no new session file, not even a fork).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pi_sandbox.errors import UsageError
from pi_sandbox.supervisor.sessions.catalog import (
    SessionLookupError,
    check_session_id,
    fork_session_file,
    list_sessions,
    lookup_directory,
    most_recent_session,
    read_header,
    recent_listing,
    resolve_session,
)
from pi_sandbox.supervisor.sessions.session_file import (
    SessionHeader,
    SessionWriter,
    new_session_id,
)

__all__ = [
    "SESSION_DIR_ENV",
    "SessionChoice",
    "choose_session",
    "configured_session_dir",
    "new_session_writer",
    "normalise_name",
    "open_writer",
]

SESSION_DIR_ENV = "PI_CODING_AGENT_SESSION_DIR"
"""pi's environment variable for the session directory (below ``--session-dir``)."""


def configured_session_dir(agent_dir: Path, cwd: Path, env: Mapping[str, str]) -> Path | None:
    """The session directory chosen without ``--session-dir``: ``$PI_CODING_AGENT_SESSION_DIR``,
    else the ``sessionDir`` of the user's ``<agent_dir>/settings.json`` (pi docs
    settings.md; ``~`` expanded, a relative path from ``cwd``), else None (the store
    under ``<agent_dir>/sessions``). Shared with pi 1.6.0 so both keep sessions in
    one place (issue 17 §4). A project's ``.pi/settings.json`` is not read: pi reads
    its ``sessionDir`` before the trust decision, which we do not. A settings file
    that is missing, unreadable or not an object, or a value that is not a
    non-empty string, means no setting (the settings loaders report such files).
    """
    if env.get(SESSION_DIR_ENV):
        return Path(os.path.abspath(Path(env[SESSION_DIR_ENV]).expanduser()))
    from pi_sandbox.regular_files import read_regular_file

    try:
        data = json.loads(read_regular_file(agent_dir / "settings.json", 1024 * 1024))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    value = data.get("sessionDir") if isinstance(data, dict) else None
    if not isinstance(value, str) or not value.strip():
        return None
    return Path(os.path.abspath(cwd / Path(value).expanduser()))


@dataclass
class SessionChoice:
    """What `choose_session` decided.

    ``cwd`` is where the run works (the session's recorded cwd when resuming);
    ``open_path`` an existing file to continue; ``fork_from`` a file to copy into
    ``directory`` as a new session; neither: a new session (``session_id`` when
    given). ``persist`` False: in memory only (``--no-session``).
    """

    cwd: Path
    directory: Path
    persist: bool = True
    open_path: Path | None = None
    fork_from: Path | None = None
    session_id: str | None = None
    name: str | None = None
    notices: list[str] = field(default_factory=list)


def normalise_name(name: str) -> str:
    """pi's session name normalisation: line breaks become spaces, then trimmed.

    Raises:
        UsageError: nothing is left.
    """
    value = " ".join(part for part in name.replace("\r", "\n").split("\n") if part).strip()
    if not value:
        raise UsageError("argument -n/--name: requires a non-empty value")
    return value


def _conflicts(option: str, given: dict[str, bool]) -> None:
    clash = [flag for flag, present in given.items() if present]
    if clash:
        raise UsageError(f"argument {option}: cannot be combined with {', '.join(clash)}")


def choose_session(
    *,
    agent_dir: Path,
    cwd: Path,
    cwd_given: bool = False,
    continue_: bool = False,
    resume: bool = False,
    session: str | None = None,
    session_id: str | None = None,
    fork: str | None = None,
    session_dir: str | None = None,
    name: str | None = None,
    no_session: bool = False,
    env: dict[str, str] | None = None,
) -> SessionChoice:
    """Decide the session of a non-interactive run (print, JSON or RPC mode).

    Rules (pi 1.6.0 cli.md and ``createSessionManager``): ``--fork`` excludes
    ``--session``, ``--continue``, ``--resume`` and ``--no-session``;
    ``--session-id`` excludes ``--session``, ``--continue`` and ``--resume`` and,
    with ``--fork``, names the fork. ``--continue`` takes the most recent session
    of ``cwd`` (a new one when there is none). ``--session PATH|ID`` resumes in the
    session's recorded cwd; an id found only under another directory is refused
    here (pi asks whether to fork it; there is no one to ask). ``--session-id``
    continues ``cwd``'s session with exactly that id or starts one with it.
    ``--resume`` needs the picker of the interactive mode: refused, listing the
    recent sessions with their ids. A resumed session whose recorded directory is
    gone is refused, naming the choices (pi's ``MissingSessionCwdError``).

    Raises:
        UsageError: every refusal above, a bad id or name, an unknown or ambiguous
            id prefix (candidates listed), a session file that cannot be read.
    """
    env = os.environ if env is None else env
    directory_override: Path | None = None
    if session_dir is not None:
        directory_override = Path(os.path.abspath(Path(session_dir).expanduser()))
    else:
        directory_override = configured_session_dir(agent_dir, cwd, env)
    if (
        directory_override is not None
        and directory_override.exists()
        and not directory_override.is_dir()
    ):
        raise UsageError(f"argument --session-dir: not a directory: {directory_override}")
    if fork is not None:
        _conflicts(
            "--fork",
            {
                "--session": session is not None,
                "--continue": continue_,
                "--resume": resume,
                "--no-session": no_session,
            },
        )
    if session_id is not None:
        _conflicts(
            "--session-id",
            {"--session": session is not None, "--continue": continue_, "--resume": resume},
        )
        try:
            check_session_id(session_id)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if continue_ and resume:
        raise UsageError("argument --continue: cannot be combined with --resume")
    if session is not None and (continue_ or resume):
        raise UsageError("argument --session: cannot be combined with --continue or --resume")
    if no_session and (continue_ or resume or session is not None):
        raise UsageError(
            "argument --no-session: cannot be combined with --continue, --resume or --session"
        )
    label = normalise_name(name) if name is not None else None
    directory = lookup_directory(agent_dir, cwd, directory_override)
    choice = SessionChoice(cwd=cwd, directory=directory, name=label, session_id=session_id)
    if no_session:
        choice.persist = False
        return choice

    def lookup(argument: str, option: str) -> tuple[str, Path, str | None]:
        try:
            found = resolve_session(
                argument,
                agent_dir=agent_dir,
                cwd=cwd,
                session_dir=directory_override,
                option=option,
            )
        except SessionLookupError as exc:
            raise UsageError(str(exc)) from None
        return found.kind, found.path, found.cwd

    if fork is not None:
        if session_id is not None and _find_exact(directory, session_id, cwd) is not None:
            raise UsageError(f"argument --session-id: a session with id {session_id!r} exists")
        _, path, _ = lookup(fork, "--fork")
        choice.fork_from = path
        return choice
    if resume:
        rows = list_sessions(agent_dir, cwd, session_dir=directory_override)
        raise UsageError(
            "argument --resume: choosing a session needs the interactive picker, which is not "
            "available in print, JSON or RPC mode; name the session with --session ID-PREFIX "
            "(or use --continue for the most recent)"
            + recent_listing(rows, heading=f"recent sessions of {cwd}")
        )
    if session is not None:
        kind, path, recorded = lookup(session, "--session")
        if kind == "global":
            raise UsageError(
                f"argument --session: {session!r} is a session of another directory "
                f"({recorded}), not of {cwd}. Resume it there with --session {path}, or copy "
                f"it into this directory as a new session with --fork {session}"
            )
        return _open(choice, path, cwd, cwd_given, agent_dir, directory_override)
    if continue_:
        recent = most_recent_session(agent_dir, cwd, directory_override)
        if recent is None:
            choice.notices.append(f"No session of {cwd} to continue; starting a new one")
            return choice
        return _open(choice, recent, cwd, cwd_given, agent_dir, directory_override)
    if session_id is not None:
        existing = _find_exact(directory, session_id, cwd)
        if existing is not None:
            return _open(choice, existing, cwd, cwd_given, agent_dir, directory_override)
        choice.notices.append(
            f"No session of {cwd} has id {session_id!r}; starting a new session with that id"
        )
    return choice


def _find_exact(directory: Path, session_id: str, cwd: Path) -> Path | None:
    """pi's ``findById``: the file in ``directory`` whose header has this id (and,
    in a shared ``--session-dir``, this cwd)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return None
    for name in names:
        if not name.endswith(".jsonl"):
            continue
        header = read_header(directory / name)
        if header is None or header.get("id") != session_id:
            continue
        recorded = header.get("cwd")
        if isinstance(recorded, str) and os.path.normpath(recorded) != os.path.normpath(cwd):
            continue
        return directory / name
    return None


def _open(
    choice: SessionChoice,
    path: Path,
    cwd: Path,
    cwd_given: bool,
    agent_dir: Path,
    override: Path | None,
) -> SessionChoice:
    header = read_header(path)
    if header is None:
        raise UsageError(f"{path}:1: not a session file (missing or malformed session header)")
    recorded = header.get("cwd")
    choice.open_path = path
    choice.session_id = header["id"]
    if not isinstance(recorded, str) or not recorded:
        return choice  # pi runs such a session in the current directory
    recorded_path = Path(recorded)
    if not recorded_path.is_dir():
        raise UsageError(
            f"stored session working directory does not exist: {recorded}\n"
            f"Session file: {path}\nCurrent working directory: {cwd}\n"
            f"Choices: copy it into the current directory as a new session (new id, the "
            f"original kept) with `pi --fork {path}`, or recreate {recorded} and resume it "
            "again"
        )
    recorded_path = recorded_path.resolve()
    if recorded_path != cwd and not _in_store(path, agent_dir, override):
        # The recorded cwd becomes the sandbox's writable workspace: a file from
        # outside the session store (a download, a repository) must not choose it.
        raise UsageError(
            f"{path} is not in the session store ({agent_dir / 'sessions'}"
            + (f" or {override}" if override is not None else "")
            + f") and was recorded in {recorded_path}, not {cwd}; pi-sandbox does not move "
            "the workspace on the word of such a file. Resume it there with "
            f"`pi -C {recorded_path} --session {path}`, or copy it into {cwd} with "
            f"`pi --fork {path}`"
        )
    if recorded_path != cwd:
        note = "given with -C" if cwd_given else "the current directory"
        choice.notices.append(
            f"Resuming session {header['id']} in its working directory {recorded_path} "
            f"(not {cwd}, {note})"
        )
    choice.cwd = recorded_path
    # New sessions of this run (new_session, clone) belong to the directory it runs in.
    choice.directory = lookup_directory(agent_dir, recorded_path, override)
    return choice


def _in_store(path: Path, agent_dir: Path, override: Path | None) -> bool:
    """``path`` lies in the session store (``<agent_dir>/sessions`` or the
    ``--session-dir``), symlinks resolved."""
    real = Path(os.path.realpath(path))
    stores = [agent_dir / "sessions", *([override] if override is not None else [])]
    return any(real.is_relative_to(os.path.realpath(store)) for store in stores)


def new_session_writer(directory: Path, cwd: Path, session_id: str | None = None) -> SessionWriter:
    """A new session file in ``directory`` (pi's name: ``<timestamp>_<id>.jsonl``).

    Raises:
        OSError: the directory or file cannot be created.
    """
    session_id = session_id or new_session_id()
    stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    header = SessionHeader(id=session_id, cwd=str(cwd), timestamp=stamp)
    name = f"{stamp.replace(':', '-').replace('.', '-')}_{session_id}.jsonl"
    return SessionWriter(directory / name, header)


def open_writer(choice: SessionChoice, session_id: str) -> SessionWriter:
    """Open the session `choose_session` chose: continue ``open_path``, fork
    ``fork_from`` (with ``session_id`` as the new id), or start a new file (or an
    in-memory session) with ``session_id``; then append ``--name``.

    Raises:
        UsageError: the file cannot be read (file and line named) or written.
    """
    try:
        if not choice.persist:
            writer = SessionWriter.in_memory(choice.cwd, session_id)
        elif choice.open_path is not None:
            writer = SessionWriter.resume(choice.open_path)
        elif choice.fork_from is not None:
            path = fork_session_file(
                choice.fork_from, choice.cwd, choice.directory, session_id=session_id
            )
            writer = SessionWriter.resume(path)
        else:
            writer = new_session_writer(choice.directory, choice.cwd, session_id)
    except ValueError as exc:  # SessionFileError: FILE:LINE: problem
        raise UsageError(f"cannot open the session: {exc}") from exc
    except OSError as exc:
        raise UsageError(
            f"cannot write the session file in {choice.directory}: "
            f"{exc.strerror or exc} (use --no-session, --session-dir, or set "
            "PI_CODING_AGENT_DIR)"
        ) from exc
    if choice.name is not None:
        writer.append_session_info(choice.name)
    return writer
