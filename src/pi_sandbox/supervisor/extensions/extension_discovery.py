"""Where extensions come from, in load order (issue 5 "Extension authoring surface"; seed 004).

Sources, in this order:

1. ``-e`` paths (origin ``cli``; a path inside ``<cwd>/.pi/extensions`` is a project one);
2. the project's ``.pi/extensions`` (origin ``project``; only with trust ``yes`` or
   ``sandboxed``, DESIGN §8);
3. the user's ``<agent_dir>/extensions`` (origin ``user``);
4. the ``"extensions"`` paths of ``<agent_dir>/settings.json`` (origin ``user``), then
   those of the project's ``.pi/settings.json`` (origin ``project``; read only with
   trust, and only paths inside the project);
5. the ``pi_sandbox.extensions`` entry points of installed distributions (origin
   ``user``), resolved to files on disk without importing anything.

Every directory is searched one level deep: ``*.py`` files, package directories with
``__init__.py``, and directories whose ``pyproject.toml`` declares ``[tool.pi]
extensions = [...]``. Nothing here imports or executes extension code: the supervisor
only finds paths, and each extension runs in its own worker.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pi_sandbox.path_containment import resolves_inside, within
from pi_sandbox.policies._effective import ExtensionRules
from pi_sandbox.resources.settings_lists import (
    PI_EXTENSION_SUFFIXES,
    settings_paths,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "ExtensionSource",
    "Origin",
    "discover_extensions",
    "extension_name",
    "installed_entry_points",
    "path_leading_out",
    "resolve_module_path",
]

Origin = Literal["cli", "user", "project"]

ENTRY_POINT_GROUP = "pi_sandbox.extensions"

# ``module``, ``module:attr``, ``module:attr [extra, …]`` (the entry-point value syntax).
_ENTRY_POINT_VALUE = re.compile(r"^\s*(?P<module>[\w.]+)\s*(?::\s*[\w.]+\s*)?(?:\[[^\]]*\]\s*)?$")


@dataclass(frozen=True)
class ExtensionSource:
    """An extension found on disk: its canonical path and where it came from.

    Attributes:
        path: the canonical path (symlinks resolved); what is loaded.
        origin: ``"cli"``, ``"user"`` or ``"project"``.
        discovered: the path it was found at, before symlinks were resolved (a
            ``.pi/extensions/helper.py`` linking elsewhere); None when unknown.
            Policy patterns are matched against both paths.
    """

    path: Path
    origin: Origin
    discovered: Path | None = None


# -- directories ------------------------------------------------------------------------


def _extension_entries(directory: Path, notices: list[str] | None = None) -> list[Path]:
    """One level deep (seed 004): ``*.py`` files, package directories with
    ``__init__.py``, and directories whose ``pyproject.toml`` declares
    ``[tool.pi] extensions = ["entry.py", "pkg", …]`` (entries relative to that
    directory, which must stay inside it: a file or a package directory each).

    A ``pyproject.toml`` that cannot be read, or an entry that is missing, leaves
    the directory or that entry out with a line in ``notices`` naming the file.
    """
    if not directory.is_dir():
        return []
    found = []
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith((".", "_")):
            continue
        if (entry.is_file() and entry.suffix == ".py") or (
            entry.is_dir() and (entry / "__init__.py").is_file()
        ):
            found.append(entry)
        elif entry.is_dir() and (entry / "pyproject.toml").is_file():
            found += _declared_entries(entry, notices if notices is not None else [])
    return found


def _listing(directory: Path) -> list[Path]:
    """The visible ``*.py`` files and directories of ``directory`` (none when it is
    missing), by metadata alone: what may be extensions, without reading any."""
    try:
        return sorted(
            e
            for e in directory.iterdir()
            if not e.name.startswith((".", "_")) and (e.suffix == ".py" or e.is_dir())
        )
    except OSError:
        return []


def _declared_entries(package: Path, notices: list[str]) -> list[Path]:
    """The ``[tool.pi] extensions`` entries of ``package/pyproject.toml``."""
    import tomllib

    manifest = package / "pyproject.toml"
    try:
        with manifest.open("rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        notices.append(f"Skipped {package}: cannot read {manifest}: {exc}")
        return []
    declared = data.get("tool", {}).get("pi", {}).get("extensions")
    if declared is None:
        return []  # a Python project that is not an extension
    if not isinstance(declared, list) or not all(isinstance(e, str) for e in declared):
        notices.append(f"Skipped {package}: {manifest}: tool.pi.extensions must be a list of paths")
        return []
    root = os.path.realpath(package)
    entries = []
    for relative in declared:
        path = package / relative
        real = os.path.realpath(path)
        if not real.startswith(root + os.sep):
            notices.append(f"Skipped {relative!r} of {manifest}: outside {package}")
        elif (path.is_file() and path.suffix == ".py") or (
            path.is_dir() and (path / "__init__.py").is_file()
        ):
            entries.append(path)
        else:
            notices.append(
                f"Skipped {relative!r} of {manifest}: not a .py file or a package directory"
            )
    return entries


def _inside_project_extensions(path: Path, project_dir: Path) -> bool:
    """Whether ``path`` (absolute) is in ``project_dir``, as given or once symlinks
    of either are resolved."""
    pairs = (
        (path, project_dir),
        (Path(os.path.realpath(path)), Path(os.path.realpath(project_dir))),
        (path, Path(os.path.realpath(project_dir))),
        (Path(os.path.realpath(path)), project_dir),
    )
    return any(p == d or p.is_relative_to(d) for p, d in pairs)


MAX_PACKAGE_ENTRIES = 10_000
"""Entries of a project extension package checked for symlinks leading out
(the fingerprint's per-resource budget, ``trust_fingerprint.MAX_ENTRIES_PER_RESOURCE``);
a larger package is refused, never loaded unchecked."""


def path_leading_out(
    extension: Path, project: Path, *, max_entries: int = MAX_PACKAGE_ENTRIES
) -> tuple[str, str] | None:
    """The first path of a project extension that resolves outside ``project``.

    A project's files must be its own (issue 6; F4 of the 0.6 red-team): the trust
    fingerprint (`pi_sandbox.resources.trust_fingerprint`) hashes what lies inside
    the project and records a symlink leading out by its target only, so code
    reached through such a link could change without the decision noticing. The
    extension itself (a ``.py`` file or a package directory), and for a package every
    entry below it (symlinks inside the project followed, each real directory once),
    must resolve inside ``project``. Imports a package makes of modules outside its
    own directory are not covered here (its own code decides them).

    Args:
        extension: the extension's path as found (absolute).
        project: the project root (the workspace).
        max_entries: entries examined in a package before it counts as leading out
            (fail-closed: an unexamined entry is not vouched for).

    Returns:
        None when everything is inside; else ``(path, why)``: the offending path as
        found and what it resolves to (or why it could not be checked).
    """
    root = os.path.realpath(project)
    real = os.path.realpath(extension)
    if not within(real, root):
        return os.fspath(extension), f"resolves to {real}"
    if not os.path.isdir(real):
        return None
    seen: set[str] = {real}
    pending = [(os.fspath(extension), real)]
    examined = 0
    while pending:
        shown, directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError as exc:
            return shown, f"cannot be listed ({exc.strerror or exc})"
        for entry in listed:
            examined += 1
            if examined > max_entries:
                return os.fspath(extension), f"has more than {max_entries} entries to check"
            path = os.path.join(shown, entry.name)
            if entry.is_symlink():
                target = os.path.realpath(entry.path)
                if not within(target, root):
                    return path, f"resolves to {target}"
                if os.path.isdir(target) and target not in seen:
                    seen.add(target)
                    pending.append((path, target))
            elif entry.is_dir(follow_symlinks=False):
                pending.append((path, entry.path))
    return None


# -- settings ---------------------------------------------------------------------------


def _entries_at(path: Path, label: str, notices: list[str]) -> list[Path]:
    """What a settings path names: a ``.py`` file, a package directory, a directory
    with a ``[tool.pi]`` manifest, or else a directory searched one level deep. A
    pi 1.6.0 extension file (`PI_EXTENSION_SUFFIXES`) names nothing, quietly: the
    user's settings file is shared with pi (issue 17 §4)."""
    if path.is_file():
        if path.suffix == ".py":
            return [path]
        if path.suffix in PI_EXTENSION_SUFFIXES:
            return []
        notices.append(f"{label}: {path} is not a .py file, a package or a directory")
        return []
    if not path.is_dir():
        notices.append(f"{label}: {path} does not exist")
        return []
    if (path / "__init__.py").is_file():
        return [path]
    if (path / "pyproject.toml").is_file():
        declared_notices: list[str] = []
        declared = _declared_entries(path, declared_notices)
        notices += declared_notices
        if declared or declared_notices:
            return declared
    return _extension_entries(path, notices)


def _inside(path: Path, root: Path) -> bool:
    """Whether ``path`` is ``root`` or below it once symlinks are resolved."""
    return resolves_inside(path, root)


# -- entry points -----------------------------------------------------------------------


def installed_entry_points() -> list[Any]:
    """The ``pi_sandbox.extensions`` entry points of the installed distributions.

    Reads distribution metadata only (no code of any distribution runs).

    Returns:
        ``importlib.metadata.EntryPoint`` objects (``name``, ``value``, ``dist``), in
        the order ``importlib.metadata`` finds them.
    """
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def resolve_module_path(module: str, search_path: Sequence[str] | None = None) -> Path:
    """The file an importable module would be loaded from, found without importing it.

    Each dotted step is looked up with ``importlib.machinery.PathFinder.find_spec``:
    the top-level name on ``search_path``, each further name in its parent package's
    ``submodule_search_locations``. No module, parent package included, is imported
    or executed; finders installed in ``sys.meta_path`` (some editable installs) are
    not consulted.

    Args:
        module: a dotted module name, ``"pkg.sub.mod"``.
        search_path: directories to look for the top-level name in; default
            ``sys.path`` without its empty and relative entries (those would name
            files in the current directory, i.e. in the workspace).

    Returns:
        The package's directory (it contains ``__init__.py``) for a package, the
        ``.py`` file for a module.

    Raises:
        LookupError: the name is not a dotted identifier, a step is not found, a
            parent is not a package, or the target is not Python source (a compiled
            extension module, a namespace package, a ``.pyc`` only).
    """
    parts = module.split(".")
    if not all(part.isidentifier() for part in parts):
        raise LookupError(f"{module!r} is not a module name")
    locations: list[str] = (
        [p for p in sys.path if p and os.path.isabs(p)]
        if search_path is None
        else list(search_path)
    )
    spec = None
    for depth in range(len(parts)):
        name = ".".join(parts[: depth + 1])
        spec = importlib.machinery.PathFinder.find_spec(name, locations)
        if spec is None:
            raise LookupError(f"module {name!r} not found")
        if depth < len(parts) - 1:
            if spec.submodule_search_locations is None:
                raise LookupError(f"{name!r} is not a package, so {module!r} cannot be in it")
            locations = list(spec.submodule_search_locations)
    assert spec is not None
    origin = spec.origin if spec.has_location else None
    if origin is None:
        raise LookupError(f"{module!r} is a namespace package (no __init__.py)")
    if not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
        raise LookupError(f"{module!r} is not Python source ({origin})")
    path = Path(origin)
    if spec.submodule_search_locations is not None:
        if path.name != "__init__.py":
            raise LookupError(f"{module!r} is a package without __init__.py")
        return path.parent
    return path


def _entry_point_paths(entry_points: Iterable[Any], notices: list[str]) -> list[tuple[Path, str]]:
    """``[(path, description), …]`` for the entry points, sorted by distribution and
    name so the load order does not depend on ``sys.path`` order; one notice per
    entry point that does not resolve to a file."""

    def distribution(entry_point: Any) -> str:
        dist = getattr(entry_point, "dist", None)
        name = getattr(dist, "name", None) if dist is not None else None
        return str(name) if name else "an unknown distribution"

    resolved = []
    for entry_point in sorted(
        entry_points, key=lambda e: (distribution(e).lower(), str(getattr(e, "name", "")))
    ):
        value = str(getattr(entry_point, "value", ""))
        what = (
            f"entry point {getattr(entry_point, 'name', '?')!r} = {value!r} "
            f"of {distribution(entry_point)}"
        )
        match = _ENTRY_POINT_VALUE.match(value)
        try:
            if match is None:
                raise LookupError("expected 'module' or 'module:attr'")
            path = resolve_module_path(match["module"])
        except LookupError as exc:
            notices.append(f"Skipped {what} ({ENTRY_POINT_GROUP}): {exc}")
            continue
        resolved.append((path, what))
    return resolved


# -- discovery --------------------------------------------------------------------------


def discover_extensions(
    *,
    cwd: Path,
    agent_dir: Path,
    cli_paths: Sequence[Path],
    no_extensions: bool,
    project_trust: str | None,
    rules: ExtensionRules | None = None,
    refused: list[tuple[ExtensionSource, str]] | None = None,
    entry_points: Callable[[], Iterable[Any]] = installed_entry_points,
) -> tuple[list[ExtensionSource], list[str]]:
    """Find extensions in load order, without importing or running any of them.

    Order: ``-e`` paths; project ``<cwd>/.pi/extensions``; user
    ``<agent_dir>/extensions``; the ``"extensions"`` paths of
    ``<agent_dir>/settings.json`` and then of ``<cwd>/.pi/settings.json``; the
    ``pi_sandbox.extensions`` entry points of installed distributions.

    ``--no-extensions`` (``no_extensions``) disables every discovered source (both
    directories, both settings files, entry points) but not explicit ``-e`` paths.
    An ``-e`` path, or a user settings path, inside ``<cwd>/.pi/extensions`` (as
    given or once symlinks are resolved) is a project extension. Project extensions
    load only with trust ``yes`` or ``sandboxed`` (DESIGN §8); otherwise they are
    skipped and a notice says so, and no project file (``pyproject.toml``,
    ``.pi/settings.json``) is read. A project settings path that resolves outside
    ``cwd`` is refused with a notice: a project may not load code from elsewhere on
    the user's disk. The same holds for every project extension, wherever it was
    found (``.pi/extensions``, ``-e``, settings): one that resolves outside ``cwd``,
    or a package with an entry that does (`path_leading_out`), is refused with a
    notice naming the path and the rule, and appended to ``refused`` — the trust
    fingerprint covers only content inside the project (F4; issue 14 §4, issue 6).
    A project ``.pi/settings.json`` that itself resolves outside ``cwd`` names nothing.

    Settings paths are relative to the settings file's directory, ``~`` expanded;
    each names a ``.py`` file, a package directory, or a directory searched one
    level deep like the extension directories. A malformed settings file, a
    non-list ``extensions`` or a non-string entry is a notice naming the file and
    the field (``…/settings.json: extensions[2]: expected a path string``); a missing
    path is a notice naming the settings file. An entry point's value is a module
    name (``pkg.mod`` or ``pkg.mod:attr``; the attribute is ignored, the factory is
    always ``extension``), resolved with `resolve_module_path`; one that does not
    resolve is a notice naming it and its distribution.

    Duplicates (same canonical path) load once, at the first position, with the most
    trusted origin that found them (``cli``, ``user``, ``project``): a repository
    linking the user's own extension into ``.pi/extensions`` cannot make it a
    project extension. The policy's ``extensions`` section (``rules``) refuses
    extensions by name or path glob, matched against both the discovered and the
    canonical path, and project extensions as a whole (issue 4); each refusal is a
    notice naming the policy file, and is appended to ``refused``.

    Args:
        cwd: the workspace (absolute); the project root.
        agent_dir: ``~/.pi/agent`` or ``$PI_CODING_AGENT_DIR``.
        cli_paths: the ``-e`` paths, as given.
        no_extensions: ``--no-extensions``.
        project_trust: ``"yes"``, ``"sandboxed"``, ``"no"`` or None (undecided).
        rules: the policy's ``extensions`` section; None refuses nothing.
        refused: receives ``(source, reason)`` for each extension the policy refused.
        entry_points: returns the ``pi_sandbox.extensions`` entry points (objects with
            ``name``, ``value`` and ``dist``); default `installed_entry_points`.

    Returns:
        ``(sources, notices)``: the extensions to load, in order; human-readable lines
        for the user. Nothing is raised for bad files, paths or entry points.
    """
    project_dir = cwd / ".pi" / "extensions"
    trusted = project_trust in ("yes", "sandboxed")
    untrusted_hint = "Use --trust sandboxed (sandboxed) or --trust yes to load"
    candidates: list[ExtensionSource] = []
    notices: list[str] = []
    for given in cli_paths:
        found = Path(os.path.abspath(given))
        if not _inside_project_extensions(found, project_dir):
            candidates.append(ExtensionSource(found, "cli", found))
        elif trusted:
            candidates.append(ExtensionSource(found, "project", found))
        else:
            notices.append(
                f"Skipped -e {given}: it is a project extension (in {project_dir}) and the "
                f"project is not trusted. {untrusted_hint} it."
            )
    if not no_extensions:
        # Untrusted: only the directory listing, for the notice; no file of the
        # project (a pyproject.toml included) is read before trust (DESIGN §8).
        project = _extension_entries(project_dir, notices) if trusted else _listing(project_dir)
        if project and trusted:
            candidates += [ExtensionSource(p, "project", p) for p in project]
        elif project:
            names = ", ".join(p.name for p in project)
            notices.append(
                f"Skipped {len(project)} project extension(s) in {project_dir} ({names}): "
                f"the project is not trusted. {untrusted_hint} them."
            )
        candidates += [
            ExtensionSource(p, "user", p)
            for p in _extension_entries(agent_dir / "extensions", notices)
        ]
        candidates += _user_settings_sources(
            agent_dir / "settings.json", project_dir, trusted, untrusted_hint, notices
        )
        if trusted:
            candidates += _project_settings_sources(cwd, notices)
        try:
            installed = list(entry_points())
        except Exception as exc:  # broken metadata must not stop the session
            notices.append(f"Skipped the {ENTRY_POINT_GROUP} entry points: cannot list them: {exc}")
            installed = []
        candidates += [
            ExtensionSource(path, "user", path)
            for path, _ in _entry_point_paths(installed, notices)
        ]
    # One source per canonical path: the first position, the most trusted finder.
    rank = {"cli": 0, "user": 1, "project": 2}
    chosen: dict[Path, ExtensionSource] = {}
    for candidate in candidates:
        canonical = Path(os.path.realpath(candidate.path))
        source = ExtensionSource(canonical, candidate.origin, candidate.discovered)
        best = chosen.get(canonical)
        if best is None or rank[source.origin] < rank[best.origin]:
            chosen[canonical] = source
    sources = []
    for source in chosen.values():
        canonical = source.path
        if source.origin == "project":
            # Covered by the trust fingerprint only while it is the project's own
            # (F4: a link out let a trusted project load changed code).
            out = path_leading_out(source.discovered or canonical, cwd)
            if out is not None:
                offending, how = out
                why = (
                    f"{offending} {how}, outside the project {cwd}; a project's extensions "
                    "must be its own files (a trusted decision covers only their content "
                    "inside the project). To load it, install it in ~/.pi/agent/extensions "
                    "or give its real location with -e"
                )
                notices.append(f"Refused project extension {source.discovered or canonical}: {why}")
                if refused is not None:
                    refused.append((source, why))
                continue
        why = (
            rules.refusal(
                extension_name(canonical), canonical, source.origin, discovered=source.discovered
            )
            if rules
            else None
        )
        if why is not None:
            notices.append(f"Refused {source.origin} extension {canonical}: {why}")
            if refused is not None:
                refused.append((source, why))
            continue
        sources.append(source)
    return sources, notices


def _user_settings_sources(
    settings_file: Path,
    project_dir: Path,
    trusted: bool,
    untrusted_hint: str,
    notices: list[str],
) -> list[ExtensionSource]:
    """The extensions named by the user's settings file (origin ``user``, or
    ``project`` for a path inside the project's ``.pi/extensions``)."""
    found = []
    for label, path in settings_paths(settings_file, notices):
        if _inside_project_extensions(path, project_dir):
            if not trusted:  # checked before the path is read: it is a project file
                notices.append(
                    f"{label}: skipped {path}: it is a project extension (in {project_dir}) "
                    f"and the project is not trusted. {untrusted_hint} it."
                )
                continue
            found += [ExtensionSource(p, "project", p) for p in _entries_at(path, label, notices)]
        else:
            found += [ExtensionSource(p, "user", p) for p in _entries_at(path, label, notices)]
    return found


def _project_settings_sources(cwd: Path, notices: list[str]) -> list[ExtensionSource]:
    """The extensions named by ``<cwd>/.pi/settings.json`` (origin ``project``): only
    paths inside ``cwd``, once symlinks are resolved, the listed path and every
    extension found under it alike."""
    found = []
    for label, path in settings_paths(cwd / ".pi" / "settings.json", notices, confine=cwd):
        if not _inside(path, cwd):
            notices.append(
                f"Refused {label}: {path} is outside the project {cwd}; "
                "a project may only load extensions from inside it"
            )
            continue
        for entry in _entries_at(path, label, notices):
            if _inside(entry, cwd):
                found.append(ExtensionSource(entry, "project", entry))
            else:
                notices.append(
                    f"Refused {label}: {entry} resolves to {os.path.realpath(entry)}, outside "
                    f"the project {cwd}; a project may only load extensions from inside it"
                )
    return found


def extension_name(path: Path) -> str:
    """An extension's name for policy patterns: the file's stem, or the package
    directory's name (``foo.py`` → ``foo``, ``pkg/`` → ``pkg``).

    Args:
        path: an extension's path (a ``.py`` file or a package directory).

    Returns:
        The name; never raises.
    """
    return path.stem if path.suffix == ".py" else path.name
