"""``<agent_dir>/auth.json``: stored API keys, and which key a provider uses.

Format (pi docs providers.md): ``{"anthropic": {"type": "api_key", "key": "sk-…"}}``;
``key`` may be ``"!command"`` (run when first needed, its output cached for the
process, as pi). Other credential types (pi's OAuth) are kept untouched but not used
(issue 16: OAuth is out of scope).

The file is written atomically (a temporary file in the same directory, fsync,
``rename``) with mode 0600 in a 0700 directory, under pi 1.6.0's own lock (the
proper-lockfile directory ``auth.json.lock`` beside the resolved file, `pi_lock`), so
two ``pi auth login`` runs — or ours and pi's ``/login`` — do not lose each other's
keys (issue 17 §4). pi rewrites the file in place under that lock, so a read that
finds it empty or cut short is retried once under the lock. Reading is fail-safe: a file
that is not a regular file, is not owned by the current user, or that group or
others may read or write is refused with an error saying how to fix it — its key
may already be exposed, and a key others could replace could redirect nothing but
still must not be trusted silently.

Key precedence (pi docs models.md "Authenticate"): ``--api-key``, then auth.json,
then the provider's ``apiKey`` in models.json, then its environment variables.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pi_sandbox.errors import UsageError
from pi_sandbox.pi_lock import PiLockError, lock_path_for, pi_lock

from .catalogue import ProviderInfo

__all__ = [
    "AuthStoreError",
    "KeySource",
    "auth_file",
    "read_auth",
    "remove_api_key",
    "resolve_key",
    "store_api_key",
    "write_auth",
]

MAX_AUTH_BYTES = 1024 * 1024

AUTH_LOCK_STALE_S = 30.0
"""pi 1.6.0 takes the ``auth.json`` lock with proper-lockfile's ``stale`` 30 s for
its writes (auth-storage.js), refreshing it every 15 s: a younger lock is live."""

AUTH_LOCK_TIMEOUT_S = 40.0
"""How long we wait for the lock: longer than a killed holder's lock lasts."""


class AuthStoreError(UsageError):
    """auth.json is unsafe, unreadable or malformed; the message names the file."""


def auth_file(agent_dir: Path) -> Path:
    """``<agent_dir>/auth.json``."""
    return agent_dir / "auth.json"


def read_auth(agent_dir: Path) -> dict[str, Any]:
    """The credentials in ``<agent_dir>/auth.json`` (``{}`` when it does not exist).

    pi 1.6.0 rewrites the file in place (truncate, write) under its lock, so content
    that is empty or not JSON is read again once under that lock (`_locked`) before
    it counts: a read racing pi's write never loses the keys or fails.

    Raises:
        AuthStoreError: not a regular file, owned by another user, group- or
            world-accessible (``chmod 600 FILE`` fixes it), too large, not JSON, or
            not an object of objects (names the entry).
    """
    try:
        return _read_auth(agent_dir, torn_ok=False)
    except _TornRead as torn:
        try:
            with _locked(agent_dir):
                return _read_auth(agent_dir, torn_ok=True)
        except OSError:
            # Not ours to lock (a read-only agent directory): the first answer stands.
            if torn.error is None:
                return {}
            raise torn.error from None


class _TornRead(Exception):
    """The file was empty or not JSON: maybe a write of pi's in progress."""

    def __init__(self, error: AuthStoreError | None) -> None:
        super().__init__(str(error or "empty"))
        self.error = error  # None: the file was empty


def _read_auth(agent_dir: Path, *, torn_ok: bool) -> dict[str, Any]:
    """`read_auth` once; with ``torn_ok=False`` empty or non-JSON content raises
    `_TornRead` (the caller retries under the lock), else it is final."""
    path = auth_file(agent_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise AuthStoreError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        # Checked on the open file: what is read is what was checked.
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise AuthStoreError(f"{path}: not a regular file; refusing to read keys from it")
        if info.st_uid != os.geteuid():
            raise AuthStoreError(
                f"{path}: owned by uid {info.st_uid}, not by you (uid {os.geteuid()}); "
                "refusing to use keys another user controls"
            )
        if info.st_mode & 0o077:
            raise AuthStoreError(
                f"{path}: group or others may access it (mode {stat.S_IMODE(info.st_mode):04o}); "
                f"its keys may be exposed. Run: chmod 600 {path}"
            )
        raw = handle.read(MAX_AUTH_BYTES + 1)
    if len(raw) > MAX_AUTH_BYTES:
        raise AuthStoreError(f"{path}: larger than {MAX_AUTH_BYTES} bytes")
    if not raw.strip():
        if not torn_ok:
            raise _TornRead(None)
        return {}
    try:
        # utf-8-sig: pi strips a byte-order mark (an editor's) before parsing.
        data = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        # The message never quotes the file: it holds secrets.
        where = f" (line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
        error = AuthStoreError(f"{path}: not valid JSON{where}")
        if not torn_ok:
            raise _TornRead(error) from None
        raise error from None
    if not isinstance(data, dict):
        raise AuthStoreError(f"{path}: expected an object keyed by provider")
    for name, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
            raise AuthStoreError(f"{path}: {name}: expected an object with a string 'type'")
        # pi 1.6.0 allows an api_key entry without "key" (only "env" values for
        # the provider); such an entry supplies no key here.
        if entry["type"] == "api_key" and not isinstance(entry.get("key", ""), str):
            raise AuthStoreError(f"{path}: {name}.key: expected a string")
    return data


@contextlib.contextmanager
def _locked(agent_dir: Path) -> Any:
    """Hold pi 1.6.0's lock on ``auth.json`` (`pi_lock`: the directory
    ``auth.json.lock`` beside the resolved file, stale after 30 s as pi's writes).

    Raises:
        AuthStoreError: another process held it for `AUTH_LOCK_TIMEOUT_S`, or the
            lock is not a directory.
        OSError: the agent directory cannot be created.
    """
    agent_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        with pi_lock(
            lock_path_for(auth_file(agent_dir)),
            timeout=AUTH_LOCK_TIMEOUT_S,
            stale=AUTH_LOCK_STALE_S,
        ):
            # The flock file of pi-sandbox before issue 17; unused now.
            with contextlib.suppress(OSError):
                old = agent_dir / ".auth.json.lock"
                if stat.S_ISREG(os.lstat(old).st_mode):
                    os.unlink(old)
            yield
    except PiLockError as exc:
        raise AuthStoreError(str(exc.strerror)) from None


def write_auth(agent_dir: Path, data: dict[str, Any]) -> None:
    """Replace ``<agent_dir>/auth.json`` with ``data`` atomically, mode 0600.

    A temporary file (created 0600 by ``mkstemp``) in the same directory is written,
    fsynced and renamed over the file, so a reader sees the old or the new file,
    never a partial one, and the key is never in a file others may read.

    Raises:
        OSError: the directory or file cannot be written.
    """
    import tempfile  # only `pi auth login/logout` write

    agent_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    # A symlinked auth.json (dotfiles) is written where it points, as pi does.
    target = Path(os.path.realpath(auth_file(agent_dir)))
    directory = target.parent
    fd, temp = tempfile.mkstemp(prefix=".auth.json.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)
            json.dump(data, handle, indent=2)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def store_api_key(agent_dir: Path, provider: str, key: str) -> None:
    """Save ``key`` for ``provider`` (``{"type": "api_key", "key": key}``), keeping the
    other entries. Raises ``AuthStoreError`` for an unsafe existing file, ``OSError``."""
    with _locked(agent_dir):
        data = _read_auth(agent_dir, torn_ok=True)
        data[provider] = {"type": "api_key", "key": key}
        write_auth(agent_dir, data)


def remove_api_key(agent_dir: Path, provider: str) -> bool:
    """Remove ``provider``'s stored credential; returns whether there was one."""
    with _locked(agent_dir):
        data = _read_auth(agent_dir, torn_ok=True)
        if provider not in data:
            return False
        del data[provider]
        write_auth(agent_dir, data)
        return True


@dataclass(frozen=True)
class KeySource:
    """Where a provider's key comes from: ``kind`` is ``"--api-key"``,
    ``"auth.json"``, ``"models.json"``, ``"env"`` or ``"none"``; ``detail`` names
    the file or variable (never the key)."""

    kind: str
    detail: str = ""

    def describe(self) -> str:
        """For ``pi auth status`` and error messages."""
        return f"{self.kind} ({self.detail})" if self.detail else self.kind

    @property
    def users(self) -> bool:
        """True when the key is the user's own (not set by a project file)."""
        return self.kind in ("--api-key", "auth.json", "env") or (
            self.kind == "models.json" and not self.detail.endswith("(project)")
        )


@cache
def _run_stored_command(command: str) -> str | None:
    # pi: auth.json commands run once and are cached for the process lifetime.
    from .models_config import resolve_value

    return resolve_value(command, what="auth.json key")


def resolve_key(
    provider: ProviderInfo,
    *,
    cli_key: str | None,
    auth: dict[str, Any],
    agent_dir: Path | None = None,
    resolve: bool = True,
) -> tuple[str | None, KeySource]:
    """The key for ``provider`` and where it came from, in pi's precedence.

    With ``resolve=False`` nothing is run or read from the environment beyond
    checking a variable is set (``pi auth status``); the returned key is then None.
    """
    from .models_config import resolve_value

    if cli_key:
        return cli_key, KeySource("--api-key")
    entry = auth.get(provider.id)
    if isinstance(entry, dict) and entry.get("type") == "api_key" and entry.get("key"):
        where = str(auth_file(agent_dir)) if agent_dir else "auth.json"
        stored = entry["key"]
        if not resolve:
            return None, KeySource("auth.json", where + (" command" if stored[:1] == "!" else ""))
        key = _run_stored_command(stored) if stored.startswith("!") else stored
        if key:
            return key, KeySource("auth.json", where)
    if provider.api_key is not None:
        origin = provider.sources[-1] if provider.sources else "models.json"
        if provider.project:
            origin += " (project)"
        if not resolve:
            return None, KeySource("models.json", origin)
        key = resolve_value(provider.api_key, what="apiKey")
        if key:
            return key, KeySource("models.json", origin)
    for name in provider.env_keys:
        if os.environ.get(name):
            return (os.environ[name] if resolve else None), KeySource("env", f"${name}")
    return None, KeySource("none")
