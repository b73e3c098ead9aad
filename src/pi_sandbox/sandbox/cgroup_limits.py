"""Per-worker pids and memory cgroups, where the host lets us create them.

Why: ``RLIMIT_NPROC`` is how an unprivileged user's sandbox is kept from fork-bombing
the machine (it counts the processes of the sandbox's own user namespace), but the
kernel never applies it to host root (the ``INIT_USER`` exemption in ``fork``), and
root is exactly who runs CI containers. A pids cgroup holds for everyone; a memory
cgroup bounds resident memory where ``RLIMIT_AS`` only bounds each process's
address space.

How: one directory per supervisor (per limiter), ``pi-sandbox-<pid>-<n>``, beside the supervisor's
own cgroup in each hierarchy that has the controller (cgroup v2's unified tree, or
v1's ``pids`` and ``memory`` trees), and one child per worker. A worker must be in
its cgroup from its first instruction — a fork bomb at import time must not race
the move — so the supervisor moves *itself* into the worker's cgroup around the
``posix_spawn`` call and straight back (`WorkerCgroup.entered`); the child inherits
the cgroup. Nothing runs in the supervisor in between (trio is single-threaded and
``posix_spawn`` is synchronous).

Where no hierarchy is writable (an unprivileged user under systemd without
delegation, a container without cgroupfs), `CgroupLimiter.detect` returns None and
the rlimits alone apply; ``pi sandbox doctor`` says so.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["CgroupLimiter", "WorkerCgroup", "remove_stale_cgroups"]

_CGROUP_ROOT = "/sys/fs/cgroup"
_PREFIX = "pi-sandbox-"
_limiters = itertools.count(1)  # several pools in one process each get their own tree


def _tree_name() -> str:
    return f"{_PREFIX}{os.getpid()}-{next(_limiters)}"


@dataclass
class WorkerCgroup:
    """The cgroup directories (one per hierarchy) of one worker.

    Attributes:
        dirs: ``(directory, original)`` pairs: the worker's cgroup directory and
            the supervisor's own cgroup directory in the same hierarchy.
    """

    dirs: list[tuple[str, str]] = field(default_factory=list)

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Move the calling process into the worker's cgroups, and back on exit.

        Children created inside the ``with`` block start in the worker's cgroups.

        Raises:
            OSError: the move failed (nothing is left half-moved: moves that
                succeeded are undone).
        """
        pid = str(os.getpid()).encode()
        moved: list[str] = []
        try:
            for directory, _ in self.dirs:
                _write(os.path.join(directory, "cgroup.procs"), pid)
                moved.append(directory)
            yield
        finally:
            for directory, original in self.dirs:
                if directory in moved:
                    with contextlib.suppress(OSError):
                        _write(os.path.join(original, "cgroup.procs"), pid)

    def limit_events(self) -> dict[str, int]:
        """How often each limit has bitten so far: ``{"pids": n, "oom_kill": n}``.

        ``pids``: forks refused because ``pids.max`` was reached (``pids.events``
        ``max``). ``oom_kill``: processes the kernel killed for the memory limit
        (``memory.events`` on v2, ``memory.oom_control`` on v1). Missing files
        count as 0.
        """
        counts = {"pids": 0, "oom_kill": 0}
        for directory, _ in self.dirs:
            for name, key, wanted in (
                ("pids.events", "pids", "max"),
                ("memory.events", "oom_kill", "oom_kill"),
                ("memory.oom_control", "oom_kill", "oom_kill"),
            ):
                try:
                    with open(os.path.join(directory, name)) as handle:
                        for line in handle:
                            parts = line.split()
                            if len(parts) == 2 and parts[0] == wanted:
                                counts[key] += int(parts[1])
                except (OSError, ValueError):
                    continue
        return counts

    def remove(self) -> None:
        """Kill anything left in the cgroups and remove them (best effort)."""
        for directory, _ in self.dirs:
            _kill_members(directory)
            with contextlib.suppress(OSError):
                os.rmdir(directory)


class CgroupLimiter:
    """Creates `WorkerCgroup`s under this supervisor's ``pi-sandbox-<pid>`` dirs.

    Build one with `detect`.
    """

    def __init__(self, hierarchies: list[tuple[str, str, str, tuple[str, ...]]]) -> None:
        # (kind "v1"/"v2", parent dir for our tree, our own cgroup dir, controllers)
        self._hierarchies = hierarchies
        self._count = 0

    @property
    def controllers(self) -> tuple[str, ...]:
        """The controllers in use, e.g. ``("pids", "memory")``."""
        return tuple(c for *_, controllers in self._hierarchies for c in controllers)

    @classmethod
    def detect(cls) -> CgroupLimiter | None:
        """Find hierarchies where a pids (and, if possible, memory) cgroup can be made.

        Creates (and keeps, until `close`) ``pi-sandbox-<our pid>-<n>`` in each
        usable hierarchy.

        Returns:
            A limiter, or None when not even a pids cgroup can be created here.
        """
        hierarchies: list[tuple[str, str, str, tuple[str, ...]]] = []
        own = _own_cgroups()
        name = _tree_name()
        unified = own.get("")
        if unified is not None and os.path.exists(os.path.join(_CGROUP_ROOT, "cgroup.controllers")):
            found = _prepare_v2(_CGROUP_ROOT, unified, name)
            if found is not None:
                hierarchies.append(found)
        if not hierarchies:
            for controller in ("pids", "memory"):
                mount = os.path.join(_CGROUP_ROOT, controller)
                path = own.get(controller)
                if path is None or not os.path.isdir(mount):
                    continue
                found = _prepare_v1(mount, path, controller, name)
                if found is not None:
                    hierarchies.append(found)
        if not any("pids" in controllers for *_, controllers in hierarchies):
            for _, parent, _, _ in hierarchies:
                with contextlib.suppress(OSError):
                    os.rmdir(parent)
            return None
        return cls(hierarchies)

    def create(self, *, pids_max: int, memory_max_bytes: int) -> WorkerCgroup:
        """Make the next worker's cgroup with the given limits.

        Raises:
            OSError: the directory or a limit could not be written.
        """
        self._count += 1
        cgroup = WorkerCgroup()
        try:
            for kind, parent, own, controllers in self._hierarchies:
                directory = os.path.join(parent, f"w{self._count}")
                os.mkdir(directory, 0o755)
                cgroup.dirs.append((directory, own))
                if "pids" in controllers:
                    _write(os.path.join(directory, "pids.max"), str(pids_max).encode())
                if "memory" in controllers:
                    name = "memory.max" if kind == "v2" else "memory.limit_in_bytes"
                    _write(os.path.join(directory, name), str(memory_max_bytes).encode())
                    if kind == "v2":
                        with contextlib.suppress(OSError):
                            _write(os.path.join(directory, "memory.swap.max"), b"0")
        except OSError:
            cgroup.remove()
            raise
        return cgroup

    def close(self) -> None:
        """Remove this supervisor's cgroup tree (workers' cgroups first).

        Retries for up to a second: a cgroup cannot be removed until the kernel
        has reaped the last of its processes.
        """
        deadline = time.monotonic() + 1.0
        for _, parent, _, _ in self._hierarchies:
            _remove_tree(parent)
            while os.path.isdir(parent) and time.monotonic() < deadline:
                time.sleep(0.02)
                _remove_tree(parent)


def remove_stale_cgroups() -> None:
    """Remove ``pi-sandbox-<pid>-<n>`` trees of supervisors that are gone (SIGKILL)."""
    own = _own_cgroups()
    candidates = []
    if "" in own:
        candidates.append(os.path.join(_CGROUP_ROOT, own[""].lstrip("/")))
    for controller in ("pids", "memory"):
        if controller in own:
            candidates.append(os.path.join(_CGROUP_ROOT, controller, own[controller].lstrip("/")))
    for base in candidates:
        parent = os.path.dirname(base) if os.path.basename(base).startswith(_PREFIX) else base
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            if not name.startswith(_PREFIX):
                continue
            try:
                pid = int(name[len(_PREFIX) :].split("-")[0])
            except ValueError:
                continue
            if pid != os.getpid() and not os.path.exists(f"/proc/{pid}"):
                _remove_tree(os.path.join(parent, name))


def _own_cgroups() -> dict[str, str]:
    """Controller (``""`` for v2) → our cgroup path, from ``/proc/self/cgroup``."""
    result: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) != 3:
                    continue
                for controller in parts[1].split(","):
                    result[controller] = parts[2]
    except OSError:
        pass
    return result


def _prepare_v2(
    root: str, own_path: str, name: str
) -> tuple[str, str, str, tuple[str, ...]] | None:
    own = os.path.join(root, own_path.lstrip("/"))
    try:
        with open(os.path.join(own, "cgroup.controllers")) as handle:
            available = handle.read().split()
    except OSError:
        return None
    wanted = [c for c in ("pids", "memory") if c in available]
    if "pids" not in wanted:
        return None
    # Our tree goes beside our own cgroup's members, i.e. as a child of our cgroup;
    # enabling controllers there needs our cgroup to have no processes of its own
    # (the v2 "no internal processes" rule) unless it is the root.
    parent = os.path.join(own, name)
    try:
        _write(
            os.path.join(own, "cgroup.subtree_control"), " ".join("+" + c for c in wanted).encode()
        )
        os.makedirs(parent, exist_ok=True)
        _write(
            os.path.join(parent, "cgroup.subtree_control"),
            " ".join("+" + c for c in wanted).encode(),
        )
    except OSError:
        with contextlib.suppress(OSError):
            os.rmdir(parent)
        return None
    return ("v2", parent, own, tuple(wanted))


def _prepare_v1(
    mount: str, own_path: str, controller: str, name: str
) -> tuple[str, str, str, tuple[str, ...]] | None:
    own = os.path.join(mount, own_path.lstrip("/"))
    parent = os.path.join(own, name)
    try:
        os.makedirs(parent, exist_ok=True)
        # Check we may move ourselves (and back) before relying on it.
        probe = os.path.join(parent, "probe")
        os.mkdir(probe)
        try:
            pid = str(os.getpid()).encode()
            _write(os.path.join(probe, "cgroup.procs"), pid)
            _write(os.path.join(own, "cgroup.procs"), pid)
        finally:
            os.rmdir(probe)
    except OSError:
        with contextlib.suppress(OSError):
            os.rmdir(parent)
        return None
    return ("v1", parent, own, (controller,))


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _kill_members(directory: str) -> None:
    kill_file = os.path.join(directory, "cgroup.kill")
    if os.path.exists(kill_file):
        with contextlib.suppress(OSError):
            _write(kill_file, b"1")
            return
    with contextlib.suppress(OSError), open(os.path.join(directory, "cgroup.procs")) as handle:
        for line in handle:
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(line), 9)


def _remove_tree(parent: str) -> None:
    try:
        children = [e.path for e in os.scandir(parent) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for child in children:
        _kill_members(child)
        with contextlib.suppress(OSError):
            os.rmdir(child)
    with contextlib.suppress(OSError):
        os.rmdir(parent)
