"""What a sandboxed worker may see and do: `SandboxProfile` and its baseline factory.

A profile is a frozen snapshot of decisions (DESIGN §6): which host paths are bound
read-only or read-write at the same path, which paths inside writable roots are
re-bound read-only, which paths are masked, the complete environment, the working
directory and the network mode. `pi_sandbox.sandbox.bwrap_args.build_bwrap_argv`
turns it into a bwrap argv without touching the filesystem; everything that needs
the host (canonicalising paths, telling a denied file from a denied directory)
happens here, once, when the profile is validated.

The policy gate decides what goes into a profile; the sandbox only enforces it
(STYLE rule 7).
"""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, field_validator, model_validator

from pi_sandbox.errors import SandboxError

__all__ = ["DEFAULT_TMP_SIZE_BYTES", "DenyKind", "SandboxProfile", "worker_profile"]

DEFAULT_TMP_SIZE_BYTES = 256 * 1024 * 1024
"""Size cap of the private ``/tmp`` tmpfs given by `worker_profile`, in bytes."""

DenyKind = Literal["file", "dir"]

# System directories that merged-/usr hosts make symlinks into /usr.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32")

# /etc entries a dynamically linked program or Python's stdlib may read. Deliberately
# not the whole of /etc: it holds shadow, ssh host keys, pip/npm configs with tokens.
_ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "passwd",
    "group",
    "nsswitch.conf",
    "alternatives",
    "os-release",
    "hosts",
)

# Paths inside the workspace whose modification would outlive the sandbox: git runs
# hooks and honours core.* settings (core.fsmonitor, core.hooksPath) outside it, and
# .pi holds the project's extensions and settings that the next session loads.
# The whole of .git, not just hooks/ and config: a writable .git lets a tool swap in
# a replacement (`mv .git x; mkdir .git`) or point `commondir` elsewhere, and git then
# runs the planted hooks and core.fsmonitor on the host. A mount point cannot be
# renamed (EBUSY), so binding .git itself also pins it in place. The cost: git
# commands that write (commit, add, checkout) fail inside the sandbox.
# .envrc is run by direnv; .vscode/.idea hold tasks an IDE runs; .agents, .mcp.json
# and .claude are other agents' configuration an extension could consume.
PROTECTED_IN_WORKSPACE = (
    ".git",
    ".pi",
    ".agents",
    ".vscode",
    ".idea",
    ".envrc",
    ".mcp.json",
    ".claude",
)

# Start-up files under HOME that a shell, git or the agent runs later: protected when
# a writable root contains HOME (`pi --sandbox` started in ~).
_PROTECTED_IN_HOME = (
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".gitconfig",
    ".config/git",
    ".config/fish",
    ".config/autostart",
    ".config/systemd",
    ".local/bin",
    ".pi",
    ".agents",
)

# Credentials and histories conventionally kept under HOME (DESIGN §6 default
# deny-read, extended with other tools' token stores).
_DENY_IN_HOME = (
    ".ssh",
    ".aws",
    ".azure",
    ".gnupg",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".terraform.d",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
)

# The agent's own secrets and records in its agent directory.
_DENY_IN_AGENT_DIR = ("auth.json", "trust.json", "sessions")


def path_key(path: str) -> tuple[str, ...]:
    """Sort key that puts every directory before the paths beneath it."""
    return pathlib.PurePosixPath(path).parts


def is_within(path: str, root: str) -> bool:
    """Whether canonical absolute ``path`` is ``root`` or lies beneath it."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _check_absolute(path: str) -> str:
    if "\0" in path:
        raise ValueError(f"path contains a NUL byte: {path!r}")
    if not os.path.isabs(path):
        raise ValueError(f"path must be absolute: {path!r}")
    return path


def _canonical_set(paths: Iterable[str]) -> tuple[str, ...]:
    canonical = {os.path.realpath(_check_absolute(p)) for p in paths}
    return tuple(sorted(canonical, key=path_key))


class SandboxProfile(BaseModel):
    """The complete description of one worker's sandbox (DESIGN §6).

    Paths are absolute host path strings and are mounted at the same path inside.
    On validation every path field except ``symlinks`` is canonicalised with
    `os.path.realpath`, de-duplicated and sorted parents-first, so two profiles that
    mean the same mounts compare equal. Existence is not required (bwrap reports a
    missing bind source when it starts); `worker_profile` only adds paths that exist.

    Attributes:
        ro_binds: host paths bound read-only (system dirs, the Python prefix, the
            package directory, a read-only workspace).
        rw_binds: writable roots, bound read-write.
        protected: paths inside writable roots that are re-bound read-only after the
            writable roots. Each must lie inside some ``rw_binds`` entry. Only paths
            that exist are meaningful for now: a later change handles persistence
            paths that do not exist yet.
        deny_read: paths masked last, so they win over every bind: an existing
            directory by a read-only tmpfs, any other existing path by ``/dev/null``.
            Whether each path exists and is a directory is recorded when the profile
            is validated (see `deny_masks`); paths that do not exist then are skipped.
        env: ``(name, value)`` pairs, the only environment inside the sandbox.
        cwd: the working directory inside.
        network: ``"none"``: a private network namespace whose only interface is its own loopback (nothing outside is reachable).
        tmp_size_bytes: size cap of the private ``/tmp`` tmpfs in bytes, or ``None``
            for the kernel default (half of RAM).
        symlinks: ``(target, linkpath)`` pairs created before any bind, for hosts
            whose ``/bin``, ``/lib``… are symlinks into ``/usr`` and for bound paths
            reached through symlinks. ``target`` is used verbatim (may be relative).

    Raises:
        pydantic.ValidationError: a path is relative or contains NUL; a path is both
            ``ro_binds`` and ``rw_binds``; a protected path is outside every writable
            root; an env name is empty, repeated or contains ``=``; a size is not
            positive.
        SandboxError: a writable root is itself a symlink (a symlinked root could be
            retargeted between validation and mount; refuse rather than guess).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    ro_binds: tuple[str, ...] = ()
    rw_binds: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()
    deny_read: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = "/"
    network: Literal["none"] = "none"
    tmp_size_bytes: int | None = None
    symlinks: tuple[tuple[str, str], ...] = ()

    _deny_masks: tuple[tuple[str, DenyKind], ...] = PrivateAttr(default=())

    @field_validator("ro_binds", "protected", "deny_read")
    @classmethod
    def _canonicalise(cls, paths: tuple[str, ...]) -> tuple[str, ...]:
        return _canonical_set(paths)

    @field_validator("rw_binds")
    @classmethod
    def _canonicalise_writable(cls, paths: tuple[str, ...]) -> tuple[str, ...]:
        for path in paths:
            if os.path.islink(_check_absolute(path)):
                raise SandboxError(
                    f"writable root {path!r} is a symlink to {os.path.realpath(path)!r}; "
                    "pass the real directory instead"
                )
        return _canonical_set(paths)

    @field_validator("cwd")
    @classmethod
    def _canonicalise_cwd(cls, path: str) -> str:
        return os.path.realpath(_check_absolute(path))

    @field_validator("env")
    @classmethod
    def _check_env(cls, env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        seen: set[str] = set()
        for name, value in env:
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"invalid environment variable name: {name!r}")
            if "\0" in value:
                raise ValueError(f"environment variable {name} contains a NUL byte")
            if name in seen:
                raise ValueError(f"environment variable {name} given twice")
            seen.add(name)
        return env

    @field_validator("symlinks")
    @classmethod
    def _check_symlinks(cls, links: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        for target, linkpath in links:
            if not target or "\0" in target:
                raise ValueError(f"invalid symlink target: {target!r}")
            _check_absolute(linkpath)
        return links

    @field_validator("tmp_size_bytes")
    @classmethod
    def _check_size(cls, size: int | None) -> int | None:
        if size is not None and size <= 0:
            raise ValueError(f"tmp_size_bytes must be positive, got {size}")
        return size

    @model_validator(mode="after")
    def _check_consistency(self) -> SandboxProfile:
        both = set(self.ro_binds) & set(self.rw_binds)
        if both:
            raise ValueError(f"paths are both read-only and read-write: {sorted(both)}")
        for path in self.protected:
            if not any(is_within(path, root) for root in self.rw_binds):
                raise ValueError(f"protected path {path!r} is not inside any writable root")
        return self

    def model_post_init(self, context: object, /) -> None:
        masks: list[tuple[str, DenyKind]] = []
        for path in self.deny_read:
            if os.path.isdir(path):
                masks.append((path, "dir"))
            elif os.path.exists(path):
                masks.append((path, "file"))
        self._deny_masks = tuple(masks)

    @property
    def deny_masks(self) -> tuple[tuple[str, DenyKind], ...]:
        """The ``deny_read`` paths that existed at validation, with their kind.

        ``"dir"`` for a directory, ``"file"`` for anything else (regular file,
        socket, fifo, device). Sorted parents-first.
        """
        return self._deny_masks


def worker_profile(
    role: Literal["tool", "extension"],
    *,
    workspace: Path,
    home: Path,
    agent_dir: Path,
    extra_ro: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
    tmp_size_bytes: int | None = DEFAULT_TMP_SIZE_BYTES,
) -> SandboxProfile:
    """Build the baseline profile for a worker (DESIGN §6).

    The sandbox sees: ``/usr`` and the top-level system directories (as symlinks
    where the host has them as symlinks), a few ``/etc`` files, the Python
    installation (`sys.prefix`, `sys.base_prefix`, `sys.exec_prefix` and the
    directory of `sys.executable`; only those subtrees, never the HOME they may live
    in), the directory holding the ``pi_sandbox`` package, ``extra_ro`` and the
    workspace: read-write for the tool worker, read-only for extension workers. In
    the tool role the persistence paths in the workspace (``PROTECTED_IN_WORKSPACE``:
    all of ``.git``, ``.pi``, ``.agents``, IDE and direnv files), and HOME's start-up
    files when the workspace contains HOME (``_PROTECTED_IN_HOME``), are re-bound
    read-only when they exist. Credentials under ``home`` and the agent's
    ``auth.json``, ``trust.json`` and ``sessions`` in ``agent_dir`` are masked, which
    matters when a bound path (workspace, Python prefix) lies inside HOME. (The CLI
    refuses a sandboxed workspace that contains HOME; the HOME protections here are
    defence in depth for callers of this function.)

    Args:
        role: ``"tool"`` (built-in tools; writes the workspace) or ``"extension"``.
        workspace: the project directory; also the working directory inside. Must
            not itself be a symlink.
        home: the user's home directory; ``HOME`` inside is this path as given.
        agent_dir: the agent's state directory (auth and trust files, sessions).
        extra_ro: further host paths to expose read-only (missing ones skipped).
        env: the complete environment inside. ``None`` means the default allowlist:
            ``PATH`` (the directory of `sys.executable` first), ``HOME``, ``LANG``
            (the host's, else ``C.UTF-8``), ``LC_ALL`` (only if the host sets it),
            ``TERM=dumb``, ``PYTHONDONTWRITEBYTECODE=1``, ``TMPDIR=/tmp``. Nothing
            else crosses: no provider keys, no ``SSH_AUTH_SOCK``.
        tmp_size_bytes: size cap of the private ``/tmp`` in bytes (``None``: no cap).

    Returns:
        The validated profile.

    Raises:
        SandboxError: role is ``"tool"`` and the workspace is itself a symlink.
    """
    ro: set[str] = set()
    links: dict[str, str] = {}

    def expose(path: str) -> None:
        # Recreate every symlink on the way to the path, so it is reachable inside
        # under the name the host uses (PATH entries, /etc/localtime -> /usr/share/…),
        # and bind its canonical form.
        if os.path.exists(path):
            _record_symlinks(path, links)
            ro.add(os.path.realpath(path))

    for path in _SYSTEM_DIRS:
        expose(path)
    for name in _ETC_ENTRIES:
        expose(os.path.join("/etc", name))

    executable = sys.executable or ""
    python_dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    if executable:
        python_dirs.add(os.path.dirname(executable))
        python_dirs.add(os.path.dirname(os.path.realpath(executable)))
    for path in sorted(python_dirs):
        expose(os.path.abspath(path))

    expose(_package_root())
    for path in extra_ro:
        expose(os.path.abspath(path))

    # A symlinked workspace is refused by SandboxProfile for the tool role (it is a
    # writable root); read-only, it is exposed like any other path.
    workspace_str = os.path.abspath(workspace)
    _record_symlinks(workspace_str, links)
    workspace_real = os.path.realpath(workspace_str)

    rw: tuple[str, ...] = ()
    protected: list[str] = []
    if role == "tool":
        rw = (workspace_str,)
        ro.discard(workspace_real)
        home_real = os.path.realpath(os.path.abspath(home))
        candidates = [os.path.join(workspace_real, rel) for rel in PROTECTED_IN_WORKSPACE]
        if is_within(home_real, workspace_real):
            candidates += [os.path.join(home_real, rel) for rel in _PROTECTED_IN_HOME]
        for candidate in candidates:
            # A symlink that leads out of the workspace points at something that is
            # not writable here anyway; binding its target would only expose it.
            exists = os.path.lexists(candidate)
            if (
                exists
                and candidate not in protected
                and is_within(os.path.realpath(candidate), workspace_real)
            ):
                protected.append(candidate)
    else:
        ro.add(workspace_real)

    home_str = os.path.abspath(home)
    deny = [os.path.join(home_str, rel) for rel in _DENY_IN_HOME]
    deny += [os.path.join(os.path.abspath(agent_dir), rel) for rel in _DENY_IN_AGENT_DIR]

    if env is None:
        env = _default_env(home_str)

    return SandboxProfile(
        ro_binds=tuple(ro),
        rw_binds=rw,
        protected=tuple(protected),
        deny_read=tuple(deny),
        env=tuple(env.items()),
        cwd=workspace_real,
        network="none",
        tmp_size_bytes=tmp_size_bytes,
        symlinks=tuple((target, linkpath) for linkpath, target in sorted(links.items())),
    )


def _record_symlinks(path: str, links: dict[str, str]) -> None:
    """Add ``linkpath -> target`` for each symlink met while resolving ``path``.

    Covers symlinks in the final component and in any parent (``/bin``, a symlinked
    ``/home``). Targets are recorded verbatim and followed, so chains are recreated
    link by link.
    """
    pending = [os.path.normpath(path)]
    seen: set[str] = set()
    while pending:
        parts = pathlib.PurePosixPath(pending.pop()).parts
        prefix = "/"
        for index, part in enumerate(parts[1:], start=2):
            prefix = os.path.join(prefix, part)
            if not os.path.islink(prefix):
                continue
            target = os.readlink(prefix)
            links.setdefault(prefix, target)
            resolved = os.path.normpath(
                os.path.join(os.path.dirname(prefix), target, *parts[index:])
            )
            if resolved not in seen:  # a symlink loop ends here
                seen.add(resolved)
                pending.append(resolved)
            break


def _package_root() -> str:
    """The directory holding the ``pi_sandbox`` package (``src/`` for editable installs)."""
    import pi_sandbox

    return os.path.dirname(os.path.dirname(os.path.abspath(pi_sandbox.__file__)))


def _default_env(home: str) -> dict[str, str]:
    executable_dir = os.path.dirname(sys.executable) if sys.executable else ""
    path_entries = [p for p in (executable_dir, "/usr/local/bin", "/usr/bin", "/bin") if p]
    env = {
        "PATH": ":".join(dict.fromkeys(path_entries)),
        "HOME": home,
        "LANG": os.environ.get("LANG") or "C.UTF-8",
        "TERM": "dumb",
        "PYTHONDONTWRITEBYTECODE": "1",
        "TMPDIR": "/tmp",
    }
    # Setting LC_ALL when the host does not would override the host's LANG/LC_*.
    if os.environ.get("LC_ALL"):
        env["LC_ALL"] = os.environ["LC_ALL"]
    return env
