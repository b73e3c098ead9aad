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
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, field_validator, model_validator

from pi_sandbox.errors import SandboxError
from pi_sandbox.sandbox.persistence_guard import (
    CI_CONFIGURATION,
    PROTECTED_ANYWHERE,
    PROTECTED_SUFFIXES,
    SHELL_STARTUP_FILES,
)
from pi_sandbox.sandbox.settings import MIB, SandboxLimits, SandboxSettings
from pi_sandbox.sandbox.special_files import check_bindable, special_kind

__all__ = [
    "PROC_MASKED",
    "PROC_READ_ONLY",
    "PROTECTED_IN_WORKSPACE",
    "PROXY_SOCKET_IN_SANDBOX",
    "DenyKind",
    "ProtectKind",
    "SandboxProfile",
    "WorkerRole",
    "resolve_policy_path",
    "shared_directories",
    "worker_profile",
]

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
    # CA certificates, for HTTPS through the egress proxy (never /etc/ssl/private).
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "pki/tls/certs",
    "pki/ca-trust/extracted",
)

# Paths inside a writable root whose modification would outlive the sandbox: git runs
# hooks and honours core.* settings (core.fsmonitor, core.hooksPath) outside it, and
# .pi holds the project's extensions and settings that the next session loads.
# .git: with sandbox.filesystem.git "read", all of it (a writable .git lets a tool
# swap in a replacement, `mv .git x; mkdir .git`, or point `commondir` elsewhere);
# with "commit" (the default) the directory is writable but pinned (a mount point
# cannot be renamed: EBUSY) and everything in GIT_READ_ONLY is bound read-only.
# .envrc is run by direnv; .vscode/.idea/.zed hold tasks an editor runs;
# .devcontainer holds commands a dev container runs on creation; .husky holds git
# hooks (husky points core.hooksPath there); .agents, .mcp.json, .claude, .cursor,
# .gemini, .continue, .windsurf and .roo are other agents' configuration (MCP
# servers are commands); .github, .gitlab-ci.yml and .circleci are CI jobs run with
# the repository's secrets; pre-commit and mise run what their files name.
# Not exhaustive: a policy's deny_write adds others.
# An existing entry is bound read-only. A missing one is not mounted (a mount point
# would be a new directory on the host, issue 14 §1): the persistence guard
# (sandbox/persistence_guard.py) quarantines it if a tool creates it. The names are
# the guard's own, so that what is bound and what is quarantined cannot drift apart.
PROTECTED_IN_WORKSPACE = (
    *sorted(PROTECTED_ANYWHERE),
    *CI_CONFIGURATION,
    # mise's variants the guard matches by pattern; the common ones are bound too.
    "mise.local.toml",
    ".mise.local.toml",
    *("/".join(parts) for parts in PROTECTED_SUFFIXES),
)

# Entries of a git directory kept read-only with sandbox.filesystem.git "commit"
# (issue 14 §2): what makes git run code (config: core.fsmonitor, hooksPath, pager,
# sshCommand, filters, aliases, includes; hooks/; info/, for info/attributes) or
# change where it points (commondir, gitdir, objects/info/alternates). Bound when
# they exist; a missing one is quarantined by the persistence guard if created.
GIT_READ_ONLY = (
    "config",
    "config.worktree",
    "hooks",
    "info",
    "commondir",
    "gitdir",
    "objects/info/alternates",
)

# Shell start-up files: protected in a writable root when they exist there; one a
# tool creates at the top of a writable root is quarantined by the persistence guard
# (a writable root that contains HOME, where they do run, is refused by the CLI).
_SHELL_RC_FILES = SHELL_STARTUP_FILES

# Start-up files under HOME that a shell, git or the agent runs later: protected when
# a writable root contains HOME (`pi --sandbox` started in ~).
_PROTECTED_IN_HOME = (
    *_SHELL_RC_FILES,
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
_DENY_IN_AGENT_DIR = (
    "auth.json",
    "models.json",  # may hold literal apiKeys and headers (issue 16)
    "trust.json",
    "trust.json.lock",
    "pi-sandbox-trust.json",  # our trust records beside pi's trust.json (issue 17 §4)
    # pi 1.6.0's, in the shared agent directory (issue 17 §4): MCP servers' env and
    # headers may hold literal tokens (pi docs mcp.md); its provider catalogue cache.
    "mcp.json",
    "models-store.json",
    "policy.yaml",
    "settings.json",
    "sessions",
)

# Directories no policy may make writable: the root, system trees, /etc.
_NEVER_WRITABLE = (
    "/",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/lib32",
    "/etc",
    "/boot",
    "/proc",
    "/sys",
    "/dev",
    "/var",
    "/opt",
)

# /proc entries the sandbox's own /proc must not let it write or read. Writable as
# host uid 0 without any capability (the sysctls under /proc/sys: with
# kernel.core_pattern a process can make the host kernel run a program as root,
# outside every namespace), or leaking host-wide state. The list container
# runtimes use (runc's readonlyPaths and maskedPaths); entries the host lacks are
# skipped when the profile is validated.
PROC_READ_ONLY = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
PROC_MASKED = (
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/proc/timer_list",
    "/proc/timer_stats",
    # Root-only (0400) host-wide files the kernel serves without a capability
    # check; they help kernel exploits (page and slab layout).
    "/proc/kpagecgroup",
    "/proc/kpagecount",
    "/proc/kpageflags",
    "/proc/pagetypeinfo",
    "/proc/slabinfo",
    "/proc/vmallocinfo",
)

PROXY_SOCKET_IN_SANDBOX = "/run/pi-sandbox/egress.sock"
"""Where the supervisor's egress proxy socket appears inside a sandbox."""


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


ProtectKind = Literal["bind"]


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
        rw_binds: writable roots, bound read-write. None may be a symlink, ``/`` or a
            system directory.
        protected: paths inside writable roots kept read-only (deny-write). An
            existing one is re-bound read-only after the writable roots; a missing
            one is not mounted (see `missing_protected`). Each must lie inside some
            ``rw_binds`` entry.
        deny_read: paths masked last, so they win over every bind: an existing
            directory by a read-only tmpfs, any other existing path by ``/dev/null``.
            Whether each path exists and is a directory is recorded when the profile
            is validated (see `deny_masks`); paths that do not exist then are skipped.
        env: ``(name, value)`` pairs, the only environment inside the sandbox.
        cwd: the working directory inside.
        network: ``"none"``: a private network namespace whose only interface is
            its own loopback. ``"proxy"``: the same, plus the supervisor's egress
            proxy socket ``proxy_socket`` bound at `PROXY_SOCKET_IN_SANDBOX`.
        proxy_socket: host path of the egress proxy's Unix socket (``"proxy"`` only).
        proxy_direct: host names that clients inside reach without the proxy
            (``NO_PROXY``): the loopback names the allowlist does not name.
        tmp_size_bytes: size cap of the private ``/tmp`` tmpfs in bytes, or ``None``
            for the kernel default (half of RAM).
        symlinks: ``(target, linkpath)`` pairs created before any bind, for hosts
            whose ``/bin``, ``/lib``… are symlinks into ``/usr`` and for bound paths
            reached through symlinks. ``target`` is used verbatim (may be relative).
        limits: the resource limits the worker applies to itself and its commands.
        seccomp: whether the worker runs under the seccomp filter
            (`pi_sandbox.sandbox.seccomp_filter`); the caller passes its fd.
        git_dirs: writable roots that are git directories outside the workspace
            (a linked worktree's or submodule's, with ``git: commit``), for the
            persistence guard (`pi_sandbox.sandbox.persistence_guard`).
        sockets: ``(host socket, path inside)`` pairs of the policy's
            ``sandbox.sockets`` (issue 13 §5), bound read-only after the deny masks.

    Raises:
        pydantic.ValidationError: a path is relative or contains NUL; a path is both
            ``ro_binds`` and ``rw_binds``; a protected path is outside every writable
            root; an env name is empty, repeated or contains ``=``; a size is not
            positive; ``network`` and ``proxy_socket`` disagree.
        SandboxError: a writable root is itself a symlink (a symlinked root could be
            retargeted between validation and mount; refuse rather than guess), or
            is ``/`` or a system directory.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    ro_binds: tuple[str, ...] = ()
    rw_binds: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()
    deny_read: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = "/"
    network: Literal["none", "proxy"] = "none"
    proxy_socket: str | None = None
    proxy_direct: tuple[str, ...] = ("localhost", "127.0.0.1", "::1")
    tmp_size_bytes: int | None = None
    symlinks: tuple[tuple[str, str], ...] = ()
    limits: SandboxLimits = SandboxLimits()
    seccomp: bool = True
    git_dirs: tuple[str, ...] = ()
    sockets: tuple[tuple[str, str], ...] = ()

    _deny_masks: tuple[tuple[str, DenyKind], ...] = PrivateAttr(default=())
    _protect_mounts: tuple[tuple[str, ProtectKind], ...] = PrivateAttr(default=())
    _missing_protected: tuple[str, ...] = PrivateAttr(default=())
    _pins: tuple[str, ...] = PrivateAttr(default=())
    _proc_covers: tuple[tuple[str, str], ...] = PrivateAttr(default=())

    @field_validator("sockets")
    @classmethod
    def _check_sockets(cls, pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        return tuple((_check_absolute(host), _check_absolute(inside)) for host, inside in pairs)

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
            if os.path.realpath(path) in _NEVER_WRITABLE:
                raise SandboxError(f"writable root {path!r} is a system directory")
        return _canonical_set(paths)

    @field_validator("cwd")
    @classmethod
    def _canonicalise_cwd(cls, path: str) -> str:
        return os.path.realpath(_check_absolute(path))

    @field_validator("proxy_socket")
    @classmethod
    def _check_socket(cls, path: str | None) -> str | None:
        return None if path is None else _check_absolute(path)

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
        if (self.network == "proxy") != (self.proxy_socket is not None):
            raise ValueError("network 'proxy' needs proxy_socket, and only it")
        return self

    def model_post_init(self, context: object, /) -> None:
        masks: list[tuple[str, DenyKind]] = []
        for path in self.deny_read:
            if os.path.isdir(path):
                masks.append((path, "dir"))
            elif os.path.exists(path):
                masks.append((path, "file"))
        self._deny_masks = tuple(masks)
        mounts: dict[str, ProtectKind] = {}
        missing: list[str] = []
        for path in self.protected:
            if os.path.lexists(path):
                mounts.setdefault(path, "bind")
            else:
                # Not mounted: a mount point would be a new entry on the host
                # (issue 14 §1). The persistence guard watches for it instead.
                missing.append(path)
        self._protect_mounts = tuple(sorted(mounts.items(), key=lambda item: path_key(item[0])))
        self._missing_protected = tuple(missing)
        # Every directory between a writable root and a protected path becomes a
        # mount point of its own (a writable bind onto itself): a mount point
        # cannot be renamed or removed (EBUSY), so `mv sub x; mkdir -p sub/.git`
        # cannot move a protected path out of the way and recreate it.
        pins: set[str] = set()
        # Every mount destination inside a writable root: existing protected paths,
        # deny-read masks, read-only binds nested in a writable root.
        # Renamed away, a parent would leave the mask behind in this sandbox and, in
        # the next one (a respawned worker reuses the profile), make bwrap create the
        # destination afresh at the old path, or through a symlink put there.
        masked_dirs = [path for path, kind in self._deny_masks if kind == "dir"]
        destinations = [*mounts]
        destinations += [
            path
            for path, _ in self._deny_masks
            if not any(is_within(path, d) and path != d for d in masked_dirs)
        ]
        destinations += [
            path for path in self.ro_binds if any(is_within(path, r) for r in self.rw_binds)
        ]
        for path in destinations:
            roots = [r for r in self.rw_binds if is_within(path, r)]
            if not roots:
                continue
            root = max(roots, key=len)
            ancestor = os.path.dirname(path)
            while ancestor != root and is_within(ancestor, root):
                pins.add(ancestor)
                ancestor = os.path.dirname(ancestor)
        self._pins = tuple(sorted(pins, key=path_key))
        covers: list[tuple[str, str]] = []
        for path in PROC_READ_ONLY:
            if os.path.exists(path):
                covers.append((path, "ro"))
        for path in PROC_MASKED:
            if os.path.isdir(path):
                covers.append((path, "dir"))
            elif os.path.exists(path):
                covers.append((path, "file"))
        self._proc_covers = tuple(covers)

    @property
    def deny_masks(self) -> tuple[tuple[str, DenyKind], ...]:
        """The ``deny_read`` paths that existed at validation, with their kind.

        ``"dir"`` for a directory, ``"file"`` for anything else (regular file,
        socket, fifo, device). Sorted parents-first.
        """
        return self._deny_masks

    @property
    def protect_mounts(self) -> tuple[tuple[str, ProtectKind], ...]:
        """The ``protected`` paths that existed at validation, as ``(path,
        "bind")``, parents first: each is re-bound read-only onto itself.

        A protected path that did not exist is not mounted (see
        `missing_protected`).
        """
        return self._protect_mounts

    @property
    def missing_protected(self) -> tuple[str, ...]:
        """The ``protected`` paths that did not exist at validation. Nothing is
        mounted for them: bwrap would have to create a mount point, a new entry in
        the user's tree (issue 14 §1). The supervisor's persistence guard
        (`pi_sandbox.sandbox.persistence_guard`) quarantines one a tool creates."""
        return self._missing_protected

    @property
    def proc_covers(self) -> tuple[tuple[str, str], ...]:
        """How the sandbox's ``/proc`` is restricted, for entries the host has:
        ``(path, "ro")`` bound read-only (``PROC_READ_ONLY``), ``(path, "dir")`` or
        ``(path, "file")`` masked (``PROC_MASKED``)."""
        return self._proc_covers

    @property
    def pins(self) -> tuple[str, ...]:
        """Directories between a writable root and a mount inside it (a protected
        path, a deny-read mask, a nested read-only bind), parents first.

        Each is bound writable onto itself so that it is a mount point: its
        contents stay writable, but it cannot be renamed or removed, so a mount
        below it cannot be moved aside (and its path recreated, or replaced by a
        symlink that a respawned sandbox's bwrap would follow).
        """
        return self._pins


def shared_directories(home: str | Path) -> list[tuple[str, str]]:
    """Directories no sandbox may see whole, as ``(what, canonical path)``: HOME
    (every dotfile and token store), the temporary and runtime directories
    (``$XDG_RUNTIME_DIR``, ``/run``) and the sandbox bookkeeping directory (other runs' worker logs, egress proxy
    sockets, persistence guard quarantine; a read-only bind still lets a process connect to
    the Unix sockets in it)."""
    found = [("home directory", os.path.realpath(home))]
    found.append(("temporary directory", os.path.realpath(tempfile.gettempdir())))
    found.append(("temporary directory", "/tmp"))
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        found.append(("runtime directory", os.path.realpath(runtime)))
    # System daemons' sockets (docker.sock, containerd, systemd, D-Bus): as root,
    # connecting to one of them is host root.
    for run in ("/run", "/var/run"):
        if os.path.isdir(run):
            found.append(("system runtime directory", os.path.realpath(run)))
    return list(dict.fromkeys(found))


def resolve_policy_path(path: str, *, workspace: str, home: str) -> str:
    """Turn a policy path (absolute, ``~``/``~/…`` or workspace-relative) into a
    normalised absolute path, without resolving symlinks.

    Raises:
        SandboxError: the path contains a NUL byte or uses ``~user``.
    """
    if "\0" in path:
        raise SandboxError(f"policy path {path!r} contains a NUL byte")
    if path == "~" or path.startswith("~/"):
        path = home + path[1:]
    elif path.startswith("~"):
        raise SandboxError(f"policy path {path!r}: only ~ and ~/ are expanded")
    return os.path.normpath(os.path.join(workspace, path))


def _writable_grant(path: str, *, workspace: str, home: str) -> str:
    """Check one ``writable_roots`` entry (issue 3): it must exist, be a directory,
    not be a symlink, and resolve inside the workspace. Returns the canonical path.

    Raises:
        SandboxError: naming the entry and what is wrong with it.
    """
    absolute = resolve_policy_path(path, workspace=workspace, home=home)
    if os.path.islink(absolute):
        raise SandboxError(
            f"sandbox.filesystem.writable_roots: {path!r} is a symlink to "
            f"{os.path.realpath(absolute)!r}; a writable grant must be a real directory"
        )
    real = os.path.realpath(absolute)
    workspace_real = os.path.realpath(workspace)
    if not is_within(real, workspace_real):
        raise SandboxError(
            f"sandbox.filesystem.writable_roots: {path!r} resolves to {real!r}, "
            f"outside the workspace {workspace_real!r}"
        )
    if not os.path.isdir(real):
        kind = special_kind(os.stat(real).st_mode) if os.path.exists(real) else None
        raise SandboxError(
            f"sandbox.filesystem.writable_roots: {path!r} is not an existing directory"
            + (f" ({real} is {kind}, issue 13 §5)" if kind else "")
        )
    return real


def _socket_binds(
    settings: SandboxSettings, deny: Sequence[str], *, workspace: str, home: str
) -> list[tuple[str, str]]:
    """``sandbox.sockets`` as ``(host socket, path inside)`` pairs (issue 13 §5).

    A socket that does not exist now (the daemon is not running) is skipped.

    Raises:
        SandboxError: an entry is not a Unix socket (also through a symlink), or lies
            under a ``deny_read`` path (the mask would win; refuse rather than guess).
    """
    binds: list[tuple[str, str]] = []
    for entry in settings.sockets:
        inside = resolve_policy_path(entry, workspace=workspace, home=home)
        try:
            mode = os.stat(inside).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise SandboxError(f"sandbox.sockets: {entry!r} cannot be examined: {exc}") from exc
        if not stat.S_ISSOCK(mode):
            kind = special_kind(mode) or ("a directory" if stat.S_ISDIR(mode) else "a file")
            raise SandboxError(f"sandbox.sockets: {entry!r} is {kind}, not a Unix socket")
        host = os.path.realpath(inside)
        for masked in deny:
            if is_within(inside, masked) or is_within(host, os.path.realpath(masked)):
                raise SandboxError(
                    f"sandbox.sockets: {entry!r} is inside a deny_read path ({masked})"
                )
        binds.append((host, inside))
    return binds


WorkerRole = Literal["tool", "extension", "sandboxed-extension"]


def worker_profile(
    role: WorkerRole,
    *,
    workspace: Path,
    home: Path,
    agent_dir: Path,
    extra_ro: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
    settings: SandboxSettings | None = None,
    proxy_socket: str | None = None,
    tmp_size_bytes: int | Literal["policy"] | None = "policy",
    protect: Sequence[Path] = (),
    hide: Sequence[Path] = (),
) -> SandboxProfile:
    """Build the profile for a worker from its role and the policy (DESIGN §6).

    The sandbox sees: ``/usr`` and the top-level system directories (as symlinks
    where the host has them as symlinks), a few ``/etc`` files, the Python
    installation (`sys.prefix`, `sys.base_prefix`, `sys.exec_prefix` and the
    directory of `sys.executable`; only those subtrees, never the HOME they may live
    in), the directory holding the ``pi_sandbox`` package, ``extra_ro``, the
    policy's ``read_only`` paths (trusted roles) and the workspace.

    Roles:
        ``"tool"``: the built-in tools. Writes the workspace when the policy says
        ``workspace: write`` (the default), else only the policy's
        ``writable_roots``. In every writable root the persistence paths
        (``PROTECTED_IN_WORKSPACE``, whether they exist or not; existing shell rc
        files) and the policy's ``deny_write`` stay read-only. Gets the policy's
        network and environment allowlist.
        ``"extension"``: a trusted extension. Workspace read-only; the policy's
        network and environment allowlist.
        ``"sandboxed-extension"``: a project extension loaded with ``sandboxed``
        trust. Workspace read-only; no network, no environment pass-through, no
        extra read-only paths, whatever the policy says.

    Trusted roles also get the policy's ``sockets`` (`_socket_binds`). A
    ``read_only`` entry must be a regular file or a directory without sockets or
    FIFOs below it, and a ``deny_read`` file must have a single name (issue 13 §5).

    Credentials under ``home`` (``_DENY_IN_HOME``), the agent's ``auth.json``,
    ``trust.json``, ``policy.yaml``, ``settings.json`` and ``sessions``, and the
    policy's ``deny_read`` paths are masked wherever a bound path exposes them.

    Args:
        role: see above.
        workspace: the project directory; also the working directory inside. Must
            not itself be a symlink when it is writable.
        home: the user's home directory; ``HOME`` inside is this path as given.
        agent_dir: the agent's state directory (auth and trust files, sessions).
        extra_ro: further host paths to expose read-only (missing ones skipped).
        env: the complete environment inside. ``None`` means the default allowlist:
            ``PATH`` (the directory of `sys.executable` first), ``HOME``, ``LANG``
            (the host's, else ``C.UTF-8``), ``LC_ALL`` (only if the host sets it),
            ``TERM=dumb``, ``PYTHONDONTWRITEBYTECODE=1``, ``TMPDIR=/tmp``, plus the
            policy's ``environment.allow`` names the host sets (trusted roles). No
            provider keys, no ``SSH_AUTH_SOCK``: the policy schema refuses names
            that look like credentials.
        settings: the policy's sandbox settings (defaults when ``None``).
        proxy_socket: host path of the egress proxy socket; used only when the
            policy enables network (allowlist mode with entries) and the role is
            trusted.
        tmp_size_bytes: size cap of ``/tmp`` in bytes (``None``: no cap);
            ``"policy"``: ``limits.tmp_size_mb``.
        protect: further files kept read-only when a writable root contains them
            (the ``--policy`` files in force: a tool must not rewrite the policy
            the next run loads; the audit log).
        hide: further paths masked like ``deny_read`` (the audit log).

    Returns:
        The validated profile.

    Raises:
        SandboxError: the workspace is writable and is itself a symlink; a
            writable grant is a symlink, resolves outside the workspace or does not
            exist; a persistence path in a writable root is a symlink (its link
            could be replaced, and mounts follow links); a ``read_only`` entry is
            or holds a socket, FIFO or device node; a ``sockets`` entry is not a
            socket or lies under a ``deny_read`` path; a ``deny_read`` file has
            another hard link (issue 13 §5).
    """
    settings = settings or SandboxSettings()
    trusted = role != "sandboxed-extension"
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

    workspace_str = os.path.abspath(workspace)
    home_str = os.path.abspath(home)
    if trusted:
        shared = shared_directories(home_str)
        for path in settings.read_only:
            resolved = resolve_policy_path(path, workspace=workspace_str, home=home_str)
            real = os.path.realpath(resolved)
            for what, directory in shared:
                if is_within(directory, real):
                    raise SandboxError(
                        f"sandbox.filesystem.read_only: {path!r} contains your {what} "
                        f"({directory}); name a directory inside it instead"
                    )
            refusal = check_bindable(resolved)
            if refusal is not None:
                # Issue 13 §5: connecting to a bound socket needs no writable mount.
                raise SandboxError(
                    f"sandbox.filesystem.read_only: {path!r}: {refusal}; only regular files "
                    "and directories can be bound (a socket needs sandbox.sockets)"
                )
            expose(resolved)

    # A symlinked workspace is refused by SandboxProfile when writable (it is a
    # writable root); read-only, it is exposed like any other path.
    _record_symlinks(workspace_str, links)
    workspace_real = os.path.realpath(workspace_str)

    rw: list[str] = []
    if role == "tool":
        if settings.workspace_writable:
            rw.append(workspace_str)
        never = [os.path.join(workspace_real, rel) for rel in PROTECTED_IN_WORKSPACE]
        never += [os.path.realpath(os.path.abspath(agent_dir))]
        never += [os.path.realpath(p) for p in protect]
        never += [
            os.path.realpath(resolve_policy_path(p, workspace=workspace_str, home=home_str))
            for p in settings.deny_write
        ]
        for grant in settings.writable_roots:
            real = _writable_grant(grant, workspace=workspace_str, home=home_str)
            for path in never:
                if is_within(real, path):
                    raise SandboxError(
                        f"sandbox.filesystem.writable_roots: {grant!r} is inside {path}, "
                        "which is kept read-only (a persistence path, deny_write, a policy "
                        "file or the agent directory)"
                    )
            if not any(is_within(real, os.path.realpath(r)) for r in rw):
                rw.append(real)
    rw_real = [os.path.realpath(r) for r in rw]
    if not rw or rw_real[0] != workspace_real:
        ro.add(workspace_real)
    for real in rw_real:
        ro.discard(real)

    # A linked worktree's or submodule's git directories live outside it (a .git
    # file names them): with git "commit" they are writable roots of their own, with
    # git's code paths read-only; with "read" they are only visible.
    git_roots: list[str] = []
    for root in list(rw_real):
        located = _repository_git_dirs(root)
        if located is None:
            continue
        for git_dir in dict.fromkeys(located):
            real = os.path.realpath(git_dir)
            if any(is_within(real, r) for r in rw_real) or not os.path.isdir(real):
                continue
            if settings.git == "commit" and real not in _NEVER_WRITABLE:
                rw.append(real)
                rw_real.append(real)
                git_roots.append(real)
                ro.discard(real)
            else:
                expose(real)
    protected = _protected_paths(
        rw_real, settings, workspace=workspace_str, home=home_str, git_roots=git_roots
    )
    # The agent directory inside a writable root (PI_CODING_AGENT_DIR in the
    # project): its extensions/ and settings would load in the next run.
    agent_real = os.path.realpath(os.path.abspath(agent_dir))
    if any(is_within(agent_real, root) for root in rw_real) and agent_real not in protected:
        protected.append(agent_real)
    for path in protect:
        real = os.path.realpath(path)
        if any(is_within(real, root) for root in rw_real) and real not in protected:
            _refuse_symlink(os.path.abspath(path), f"policy file {path}")
            _refuse_hard_links(real, f"{path}")
            protected.append(real)

    deny = [os.path.join(home_str, rel) for rel in _DENY_IN_HOME]
    deny += [os.path.join(os.path.abspath(agent_dir), rel) for rel in _DENY_IN_AGENT_DIR]
    for entry in settings.deny_read:
        masked = resolve_policy_path(entry, workspace=workspace_str, home=home_str)
        _refuse_other_names(masked, entry)
        deny.append(masked)
    deny += [os.path.abspath(p) for p in hide]

    if env is None:
        env = _default_env(home_str)
        if trusted:
            for name in settings.environment_allow:
                if name in os.environ and name not in env:
                    env[name] = os.environ[name]

    network_on = trusted and settings.network_enabled and proxy_socket is not None
    if tmp_size_bytes == "policy":
        tmp_size_bytes = settings.limits.tmp_size_mb * MIB

    sockets = (
        _socket_binds(settings, deny, workspace=workspace_str, home=home_str) if trusted else []
    )
    return SandboxProfile(
        sockets=tuple(sockets),
        ro_binds=tuple(ro),
        rw_binds=tuple(rw),
        protected=tuple(protected),
        deny_read=tuple(deny),
        env=tuple(env.items()),
        cwd=workspace_real,
        network="proxy" if network_on else "none",
        proxy_socket=proxy_socket if network_on else None,
        proxy_direct=_direct_names(settings.network_allow),
        tmp_size_bytes=tmp_size_bytes,
        symlinks=tuple((target, linkpath) for linkpath, target in sorted(links.items())),
        limits=settings.limits,
        git_dirs=tuple(git_roots),
    )


def _direct_names(allow: Sequence[str]) -> tuple[str, ...]:
    """Loopback names that stay direct: those no allow entry names (``NO_PROXY``)."""
    from pi_sandbox.sandbox.network_rules import pattern_host

    named = {pattern_host(entry) for entry in allow}
    return tuple(name for name in ("localhost", "127.0.0.1", "::1") if name not in named)


def _protected_paths(
    roots: Sequence[str],
    settings: SandboxSettings,
    *,
    workspace: str,
    home: str,
    git_roots: Sequence[str] = (),
) -> list[str]:
    """The deny-write paths of every writable root (canonical roots given).

    ``git_roots`` are writable roots that are git directories (a linked worktree's,
    outside the workspace): only git's code paths are protected in them.
    """
    home_real = os.path.realpath(home)
    commit = settings.git == "commit"
    protected: list[str] = []
    for git_root in git_roots:
        protected += _git_read_only(git_root)
    for root in roots:
        if root in git_roots:
            continue
        candidates = [(os.path.join(root, rel), True) for rel in PROTECTED_IN_WORKSPACE]
        candidates += [(os.path.join(root, rel), False) for rel in _SHELL_RC_FILES]
        if is_within(home_real, root):
            candidates += [(os.path.join(home_real, rel), False) for rel in _PROTECTED_IN_HOME]
        if not os.path.lexists(os.path.join(root, ".git")):
            # Without a .git, git would take the root itself for a bare repository
            # if HEAD, objects/ and refs/ appeared in it; a HEAD it cannot create
            # (or change) prevents that.
            candidates.append((os.path.join(root, "HEAD"), True))
        for candidate, even_if_missing in candidates:
            if os.path.islink(candidate):
                # A bind over a symlink lands on its target, and the link itself stays
                # in a writable directory: `rm .pi; mkdir .pi` would get around it.
                target = os.path.realpath(candidate)
                if any(is_within(target, r) for r in roots) or even_if_missing:
                    raise SandboxError(
                        f"{candidate} is a symlink (to {target}); pi cannot keep a symlinked "
                        "persistence path read-only in a writable workspace. Replace the link "
                        "with the directory, or set sandbox.filesystem.workspace: read"
                    )
                continue
            if commit and os.path.basename(candidate) == ".git" and os.path.isdir(candidate):
                protected += _git_read_only(candidate)
                continue
            if even_if_missing or os.path.lexists(candidate):
                protected.append(candidate)
    if roots:
        # Files the repositories' git config makes git run or read on the host
        # (core.hooksPath, include.path, core.fsmonitor …), when a tool could write
        # them. The workspace is read too: read-only, it can still point into a
        # writable root.
        repos = list(dict.fromkeys([os.path.realpath(workspace), *roots]))
        for kind, target in _git_config_targets(repos, home=home_real):
            if kind == "dir" and commit:
                git_paths = _git_read_only(target)
                protected += [p for p in git_paths if any(is_within(p, r) for r in roots)]
                continue
            _protect_git_target(target, kind, roots, protected)
    for path in settings.deny_write:
        given = resolve_policy_path(path, workspace=workspace, home=home)
        absolute = os.path.realpath(given)
        if any(is_within(absolute, r) for r in roots):
            _refuse_symlink(given, f"sandbox.filesystem.deny_write: {path!r}")
            _refuse_hard_links(absolute, f"sandbox.filesystem.deny_write: {path!r}")
            protected.append(absolute)
    return list(dict.fromkeys(protected))


def _git_read_only(git_dir: str, *, depth: int = 0) -> list[str]:
    """The `GIT_READ_ONLY` paths of ``git_dir`` (existing or not), of each linked
    worktree's git directory (``worktrees/*``: ``config.worktree``, ``commondir``,
    ``gitdir``) and, recursively, of each submodule's git directory under
    ``modules/`` (issue 14 §2). With every other entry writable, git can commit.

    A symlink among them would be bound at its target while the link itself stays
    replaceable: then the whole git directory is returned instead (read-only, as
    with git "read"), never a weaker protection.
    """
    paths = [os.path.join(git_dir, rel) for rel in GIT_READ_ONLY]
    for name in _list_dir(os.path.join(git_dir, "worktrees")):
        base = os.path.join(git_dir, "worktrees", name)
        paths += [os.path.join(base, rel) for rel in ("config.worktree", "commondir", "gitdir")]
    if depth < 3:
        pending = [os.path.join(git_dir, "modules")]
        while pending:
            directory = pending.pop()
            for name in _list_dir(directory):
                child = os.path.join(directory, name)
                if os.path.islink(child) or not os.path.isdir(child):
                    if os.path.islink(child):
                        return [git_dir]
                    continue
                if os.path.isfile(os.path.join(child, "HEAD")):
                    paths += _git_read_only(child, depth=depth + 1)
                elif len(pending) < 1000:
                    pending.append(child)  # a submodule named a/b
    if any(os.path.islink(p) for p in paths):
        return [git_dir]
    return paths


def _list_dir(directory: str) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


# Git config keys that name a file git later runs or reads on the host: a hooks
# directory, included config files (which may set anything, core.fsmonitor too) and
# commands. Matched against lower-cased keys (section and variable names are
# case-insensitive; an includeIf condition is not, but is not looked at).
_GIT_CONFIG_KEYS = (
    r"^(core\.hookspath|include\.path|includeif\..*\.path|core\.fsmonitor"
    r"|core\.sshcommand|core\.editor|core\.pager)$"
)
_GIT_INCLUDE_DEPTH = 3  # included files followed this many levels deep
_GIT_TIMEOUT_S = 5.0
_GIT_CONFIG_MAX_BYTES = 1 << 20  # the fallback parser reads no more than this
_GIT_BOOLEANS = frozenset({"", "true", "false", "yes", "no", "on", "off", "1", "0"})

GitTargetKind = Literal["hooks", "file", "dir"]


def _git_config_targets(repos: Sequence[str], *, home: str) -> list[tuple[GitTargetKind, str]]:
    """Absolute paths (not canonicalised) that the git config of the repository at
    the top of each of ``repos`` makes git use on the host: ``("hooks", dir)`` for
    ``core.hooksPath``; ``("file", path)`` for included config files and for the
    programs named by ``core.fsmonitor``, ``core.sshCommand``, ``core.editor`` and
    ``core.pager``; ``("dir", path)`` for a linked worktree's git directories.

    Nothing is run but ``git config --file … --no-includes`` (which only parses), or
    a small parser when git is missing; unreadable files are skipped.
    """
    found: list[tuple[GitTargetKind, str]] = []
    for repo in repos:
        located = _repository_git_dirs(repo)
        if located is None:
            continue
        git_dir, common_dir = located
        found += [("dir", git_dir), ("dir", common_dir)]
        configs = [os.path.join(common_dir, "config"), os.path.join(git_dir, "config.worktree")]
        xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
        configs += [os.path.join(home, ".gitconfig"), os.path.join(xdg, "git", "config")]
        configs.append("/etc/gitconfig")
        pending = [(config, 0) for config in configs]
        seen: set[str] = set()
        while pending:
            config, depth = pending.pop(0)
            real = os.path.realpath(config)
            if real in seen or not os.path.isfile(real):
                continue
            seen.add(real)
            for key, value in _git_config_entries(config):
                if key == "core.hookspath":
                    path = _git_path(value, base=repo, home=home)
                    if path:
                        found.append(("hooks", path))
                elif key == "include.path" or key.startswith("includeif."):
                    path = _git_path(value, base=os.path.dirname(config), home=home)
                    if path:
                        found.append(("file", path))
                        if depth < _GIT_INCLUDE_DEPTH:
                            pending.append((path, depth + 1))
                else:
                    found += [("file", p) for p in _git_command_paths(key, value, repo, home)]
    return found


def _repository_git_dirs(root: str) -> tuple[str, str] | None:
    """``(git dir, common dir)`` of the repository whose worktree top is ``root``
    (``.git`` a directory, or a ``gitdir:`` file for linked worktrees and
    submodules); ``None`` without one."""
    dotgit = os.path.join(root, ".git")
    if os.path.islink(dotgit):
        return None  # refused with the other persistence paths
    if os.path.isdir(dotgit):
        git_dir = dotgit
    elif os.path.isfile(dotgit):
        try:
            with open(dotgit, encoding="utf-8", errors="replace") as handle:
                first = handle.readline(4096).strip()
        except OSError:
            return None
        if not first.startswith("gitdir:") or not first[7:].strip():
            return None
        git_dir = os.path.normpath(os.path.join(root, first[7:].strip()))
    else:
        return None
    common_dir = git_dir
    try:
        with open(os.path.join(git_dir, "commondir"), encoding="utf-8", errors="replace") as f:
            named = f.readline(4096).strip()
        if named:
            common_dir = os.path.normpath(os.path.join(git_dir, named))
    except OSError:
        pass
    return git_dir, common_dir


def _git_path(value: str, *, base: str, home: str) -> str | None:
    """A git pathname value made absolute the way git does (``~/`` is HOME,
    relative is against ``base``); ``None`` for values git would not take as a path
    here (empty, ``~user``, ``%(prefix)/``)."""
    if not value or "\0" in value or value.startswith("%(prefix)"):
        return None
    if value == "~" or value.startswith("~/"):
        value = home + value[1:]
    elif value.startswith("~"):
        return None
    return os.path.normpath(os.path.join(base, value))


def _git_command_paths(key: str, value: str, repo: str, home: str) -> list[str]:
    """The program of a command-valued key when it is named by a path (a bare name
    is looked up in PATH), plus any later word that is an existing file (``sh
    tools/pager.sh``). ``core.fsmonitor`` set to a boolean is git's own daemon."""
    if key == "core.fsmonitor" and value.strip().lower() in _GIT_BOOLEANS:
        return []
    try:
        words = shlex.split(value)
    except ValueError:
        words = value.split()
    found: list[str] = []
    for index, word in enumerate(words):
        if "/" not in word and not word.startswith("~"):
            continue
        path = _git_path(word, base=repo, home=home)
        if path and (index == 0 or os.path.isfile(path)):
            found.append(path)
    return found


def _git_config_entries(config: str) -> list[tuple[str, str]]:
    """The ``_GIT_CONFIG_KEYS`` entries of one config file (lower-cased key, value),
    without following its includes. ``git config --file`` only parses; without
    git, or when git refuses the file, a small parser does its best."""
    config = os.path.abspath(config)
    git = shutil.which("git")
    if git is not None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
        }
        argv = [git, "config", "--file", config, "--no-includes", "-z", "--get-regexp"]
        try:
            proc = subprocess.run(
                [*argv, _GIT_CONFIG_KEYS],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=_GIT_TIMEOUT_S,
                cwd="/",
                env=env,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            proc = None
        if proc is not None and proc.returncode in (0, 1):
            entries = []
            for record in proc.stdout.split(b"\0"):
                if record:
                    key, _, value = record.partition(b"\n")
                    entries.append((os.fsdecode(key).lower(), os.fsdecode(value)))
            return entries
    pattern = re.compile(_GIT_CONFIG_KEYS)
    return [(k, v) for k, v in _parse_git_config(config) if pattern.match(k)]


def _parse_git_config(config: str) -> list[tuple[str, str]]:
    """A lenient reading of a git config file: ``(section[.subsection].name, value)``
    with section and name lower-cased. Never raises."""
    try:
        with open(config, "rb") as handle:
            text = handle.read(_GIT_CONFIG_MAX_BYTES).decode("utf-8", "surrogateescape")
    except OSError:
        return []
    entries: list[tuple[str, str]] = []
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            end = line.find("]")
            if end < 0:
                section = ""
                continue
            name, _, sub = line[1:end].strip().partition(" ")
            sub = sub.strip()
            if len(sub) >= 2 and sub[0] == sub[-1] == '"':
                sub = sub[1:-1].replace('\\"', '"').replace("\\\\", "\\")
            section = f"{name.lower()}.{sub}" if sub else name.lower()
            line = line[end + 1 :].strip()
        if not line or line[0] in "#;" or not section:
            continue
        name, equals, rest = line.partition("=")
        entries.append((f"{section}.{name.strip().lower()}", _config_value(rest) if equals else ""))
    return entries


def _config_value(rest: str) -> str:
    """A config value: quotes removed, escapes applied, a trailing comment dropped."""
    out: list[str] = []
    quoted = False
    chars = iter(rest.strip())
    for char in chars:
        if char == '"':
            quoted = not quoted
        elif char == "\\":
            escaped = next(chars, "")
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(escaped, escaped))
        elif char in "#;" and not quoted:
            break
        else:
            out.append(char)
    return "".join(out).strip()


def _protect_git_target(
    path: str, kind: GitTargetKind, roots: Sequence[str], protected: list[str]
) -> None:
    """Add one `_git_config_targets` path to ``protected`` when a tool could write
    it: like a ``PROTECTED_IN_WORKSPACE`` entry (watched by the persistence guard
    when missing), and
    refused when it is reached through a symlink in a writable root.

    Raises:
        SandboxError: a symlink inside a writable root on the way to ``path``; a
            hooks directory that is a writable root itself; a hard-linked file.
    """
    for root in roots:
        if path == root or not is_within(path, root):
            continue
        prefix = root
        for part in pathlib.PurePosixPath(os.path.relpath(path, root)).parts:
            prefix = os.path.join(prefix, part)
            if os.path.islink(prefix):
                raise SandboxError(
                    f"{prefix} is a symlink (to {os.path.realpath(prefix)}) on the way to "
                    f"{path}, which the repository's git config makes git use on the "
                    "host; pi cannot keep it read-only in a writable workspace. Replace "
                    "the link with the directory, or set sandbox.filesystem.workspace: read"
                )
            if not os.path.lexists(prefix):
                break
    real = os.path.realpath(path)
    if real in roots:
        if kind == "hooks":
            raise SandboxError(
                f"git's core.hooksPath is {real}, a writable root: every hook there could "
                "be planted for the next git command on the host. Point core.hooksPath "
                "elsewhere, or set sandbox.filesystem.workspace: read"
            )
        return
    if not any(is_within(real, root) for root in roots):
        return
    if any(is_within(real, done) for done in protected):
        return
    _refuse_hard_links(real, f"{path} (named by git config)")
    protected.append(real)


def _hard_links(path: str, *, follow_symlinks: bool) -> int:
    """How many names (hard links) the regular file at ``path`` has; 0 when it is
    missing, unreadable or not a regular file (nothing to refuse)."""
    try:
        info = os.stat(path, follow_symlinks=follow_symlinks)
    except OSError:
        return 0
    return info.st_nlink if stat.S_ISREG(info.st_mode) else 0


def _refuse_hard_links(path: str, what: str) -> None:
    """A read-only bind protects one name; another hard link to the same file in a
    writable directory would still change its content: refuse.

    Raises:
        SandboxError: ``path`` is a regular file with more than one link.
    """
    links = _hard_links(path, follow_symlinks=False)
    if links > 1:
        raise SandboxError(
            f"{what} has {links} hard links; through another name a tool could "
            "still change it. Replace the extra links with copies"
        )


def _refuse_other_names(path: str, entry: str) -> None:
    """A mask hides one name of a file; a hard link elsewhere would still show its
    content (issue 13 §5: deny_read matches the file, not a spelling): refuse.

    Raises:
        SandboxError: ``path`` (symlinks followed) is a regular file with more than
            one link; the message names the ``deny_read`` entry.
    """
    links = _hard_links(path, follow_symlinks=True)
    if links > 1:
        raise SandboxError(
            f"sandbox.filesystem.deny_read: {entry!r} has {links} hard links; the "
            "sandbox masks one name and another would still show the file. Replace the "
            "extra links with copies (find / -samefile PATH lists them)"
        )


def _refuse_symlink(path: str, what: str) -> None:
    """A protected symlink's target can be kept read-only, but the link itself
    stays replaceable (``rm link; echo x > link``): refuse.

    Raises:
        SandboxError: ``path`` is a symlink.
    """
    if os.path.islink(path):
        raise SandboxError(
            f"{what} is a symlink (to {os.path.realpath(path)}); a symlink in a writable "
            "root cannot be kept read-only. Name the real file instead"
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
