"""The sandbox of an arbitrary program that is not our worker: an MCP server (issue 19 §2).

`program_profile` starts from the strictest worker baseline (`worker_profile` with
role ``"sandboxed-extension"``: system directories, the Python installation, the
package, the credential masks, no sockets, no policy read-only paths) and then
applies the server's own grants:

- ``filesystem``: ``"none"`` (default) — the workspace is not mounted at all;
  ``"read"`` — mounted read-only; ``"write"`` — writable like the tool worker's
  (persistence paths such as ``.git/hooks`` and ``.pi`` stay read-only).
- the program itself and every existing file named by an argument are bound
  read-only (only those files): ``python /opt/servers/git_server.py`` must be
  able to read its script, never the directory around it.
- the environment is exactly ``env`` (plus ``PATH``, ``HOME``, ``LANG``, ``TERM``,
  ``TMPDIR``): nothing of the supervisor's environment leaks in.
- network: ``"proxy"`` with ``proxy_socket`` (a proxy whose allowlist is the
  server's), else none.

Pure apart from the filesystem checks `SandboxProfile` makes when validated.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pi_sandbox.errors import SandboxError
from pi_sandbox.sandbox.profile import (
    SandboxProfile,
    _direct_names,
    is_within,
    worker_profile,
)
from pi_sandbox.sandbox.settings import SandboxSettings

__all__ = ["program_profile"]

# System files no server argument may bind (they are not mounted for any worker).
_SYSTEM_SECRETS = (
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/proc",
    "/sys",
)


def program_profile(
    *,
    program: str,
    args: Sequence[str],
    workspace: Path,
    home: Path,
    agent_dir: Path,
    env: Mapping[str, str],
    filesystem: Literal["none", "read", "write"],
    cwd: str | None,
    settings: SandboxSettings | None = None,
    proxy_socket: str | None = None,
    network_allow: Sequence[str] = (),
    protect: Sequence[Path] = (),
    hide: Sequence[Path] = (),
) -> SandboxProfile:
    """Build the profile of one MCP server process.

    Args:
        program: the absolute path of the executable (resolved on the host's PATH).
        args: its arguments; those naming an existing regular file (absolute, or
            relative to ``cwd``) are bound read-only.
        workspace / home / agent_dir: as for `worker_profile`.
        env: the variables the server's configuration names (already expanded).
        filesystem: the workspace grant (see the module docstring). ``"write"`` is
            only honoured when ``settings.workspace_writable``; otherwise it is
            ``"read"`` (the policy decides, the profile enforces).
        cwd: the working directory inside, absolute; None: the workspace when it is
            mounted, else ``/tmp``. A directory that is not mounted becomes ``/tmp``.
        settings: the policy's sandbox settings (limits, deny lists, git mode).
        proxy_socket: the per-server egress proxy's socket, or None for no network.
        network_allow: that proxy's allowlist: a loopback name it names goes through
            the proxy (the host's service), the others stay the sandbox's own.
        protect / hide: as for `worker_profile` (policy files, the audit log).

    Returns:
        The validated profile.

    Raises:
        SandboxError: as `worker_profile` (e.g. a writable workspace that is a symlink),
            or an argument names a file the sandbox hides (credentials, the agent's
            auth.json, the policy's ``deny_read``, system secrets such as
            ``/etc/shadow``).
    """
    settings = settings or SandboxSettings()
    if filesystem == "write" and not settings.workspace_writable:
        filesystem = "read"
    base_cwd = cwd or str(workspace)
    extra: list[Path] = [Path(program)]
    for arg in args:
        candidate = arg if os.path.isabs(arg) else os.path.join(base_cwd, arg)
        if os.path.isfile(candidate):
            extra.append(Path(os.path.realpath(candidate)))
    role = "tool" if filesystem == "write" else "sandboxed-extension"
    # A file named by an argument is bound read-only — never one the sandbox hides
    # (credentials under HOME, the agent's auth.json, the policy's deny_read, the
    # audit log) nor a system secret: otherwise `args: ["~/.ssh/id_rsa"]` in an
    # mcp.json would hand it to the server (red-team finding of 0.7).
    hidden = worker_profile(
        "sandboxed-extension",
        workspace=workspace,
        home=home,
        agent_dir=agent_dir,
        extra_ro=[],
        env={},
        settings=settings,
        tmp_size_bytes="policy",
        protect=protect,
        hide=hide,
    ).deny_read
    for index, path in enumerate(extra):
        real = os.path.realpath(path)
        # The program (index 0) may live anywhere but under a hidden path; the
        # arguments' files also not under a system secret.
        if any(is_within(real, os.path.realpath(masked)) for masked in hidden) or (
            index > 0 and any(is_within(real, system) for system in _SYSTEM_SECRETS)
        ):
            raise SandboxError(
                f"MCP server argument {str(path)!r} names a file the sandbox hides "
                "(credentials or system secrets); it is not given to the server"
            )
    base = worker_profile(
        role,
        workspace=workspace,
        home=home,
        agent_dir=agent_dir,
        extra_ro=extra,
        env={},
        settings=settings,
        tmp_size_bytes="policy",
        protect=protect,
        hide=hide,
    )
    workspace_real = os.path.realpath(workspace)
    ro = list(base.ro_binds)
    if filesystem == "none":
        # Keep only the files bound for the program and its arguments.
        files = {os.path.realpath(p) for p in extra}
        ro = [p for p in ro if not is_within(p, workspace_real) or p in files]
    mounted = [*ro, *base.rw_binds]
    inside_cwd = os.path.realpath(cwd) if cwd else workspace_real
    if not any(is_within(inside_cwd, root) for root in mounted) or not os.path.isdir(inside_cwd):
        inside_cwd = "/tmp"
    full_env = {
        "PATH": dict(base.env).get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": os.environ.get("LANG") or "C.UTF-8",
        "TERM": "dumb",
        "TMPDIR": "/tmp",
        **env,
    }
    fields = base.model_dump()
    fields.update(
        ro_binds=tuple(ro),
        env=tuple(full_env.items()),
        cwd=inside_cwd,
        sockets=(),
        network="proxy" if proxy_socket else "none",
        proxy_socket=proxy_socket,
        proxy_direct=_direct_names(network_allow),
        git_dirs=base.git_dirs if filesystem == "write" else (),
        limits=base.limits,
    )
    return SandboxProfile(**fields)
