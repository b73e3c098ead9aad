"""The project trust decision and the resources it admits (issue 6, DESIGN §8).

Two steps, always in this order (seed 000 §2.4–§2.5):

1. `resolve_trust` decides whether the project in ``cwd`` is trusted: the
   ``--trust`` override; a project with no trust-requiring resources is trusted
   without asking; the answer of a user-level or ``-e`` extension's
   ``project_trust`` handler; the trust store (``~/.pi/agent/trust.json``, the cwd's
   or its nearest ancestor's decision); the default of the policy
   (``trust.default``) or of the user's settings (``defaultProjectTrust``); ``ask``
   with no way to ask leaves the project untrusted. The organisation policy
   (``trust.users_may_trust``) limits every one of these but the override, which it
   refuses instead (`TrustRules`). Nothing of the project is read here: only whether
   its resources exist.
2. `load_resources` reads the skills, prompt templates, context files and system
   prompt files that decision admits. Project sources are not touched unless trust
   is ``yes`` or ``sandboxed``; ``.pi/SYSTEM.md`` and ``.pi/APPEND_SYSTEM.md`` only
   with ``yes``; project context files (``AGENTS.md``/``CLAUDE.md``) are always
   included but marked untrusted unless trust is ``yes``.

Skill precedence (first wins a name collision): ``--skill`` paths, project settings
``skills``, project auto-discovery (``.pi/skills``, then ancestor ``.agents/skills``
from the cwd up to the git root), user settings ``skills``, user auto-discovery
(``<agent_dir>/skills``, ``~/.agents/skills``), packages (the ``skills/`` directory of
each loaded extension package, in load order), extension-contributed paths
(``resources_discover``). Prompt templates follow the same order with ``prompts``.
``--no-skills`` / ``--no-prompt-templates`` turn off every source but the explicit
command-line paths.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pi_sandbox.path_containment import resolves_inside
from pi_sandbox.regular_files import FileRefusedError, read_regular_file
from pi_sandbox.resources.context_files import (
    ContextFile,
    load_context_files,
    system_prompt_files,
)
from pi_sandbox.resources.project_trust import (
    TRUST_DECISIONS,
    SavedDecision,
    TrustStore,
    TrustStoreError,
    _git_root,
    trust_requiring_resources,
)
from pi_sandbox.resources.prompt_templates import PromptTemplate, load_prompt_templates
from pi_sandbox.resources.skills import Skill, SkillSource, load_skills
from pi_sandbox.resources.trust_fingerprint import (
    ResourceChanges,
    compare,
    decision_fingerprint,
    run_fingerprint,
)

__all__ = [
    "ExtensionResourcePaths",
    "ResourceSet",
    "TrustDecision",
    "compose_system_prompt",
    "load_resources",
    "notice_path",
    "project_resources",
    "read_prompt_text",
    "resolve_trust",
    "trust_store_path",
]

MAX_PROMPT_TEXT_BYTES = 256 * 1024
"""Largest ``--system-prompt`` / ``--append-system-prompt`` file read (bytes)."""

_SETTINGS_DEFAULTS = {
    "always": "yes",
    "never": "no",
    "ask": "ask",
    **{d: d for d in TRUST_DECISIONS},
}


_PROJECT_SKILL_SOURCES = frozenset({"project", "project-settings"})


def trust_store_path(agent_dir: Path) -> Path:
    """``<agent_dir>/trust.json`` (``~/.pi/agent/trust.json`` by default)."""
    return Path(agent_dir) / "trust.json"


@dataclass(frozen=True)
class TrustDecision:
    """A project's trust decision and its provenance.

    Attributes:
        decision: ``"yes"``, ``"no"``, ``"sandboxed"`` or None (undecided: treated
            as not trusted; seed 000 §2.4 "no UI and no decision → false").
        source: where it came from, for the user and the audit log: ``--trust``,
            ``no project resources``, ``extension project_trust``, ``trust store
            FILE (DIR)``, ``policy FILE``, ``settings FILE``, ``default``,
            ``/trust`` — with `` (limited by policy FILE)`` when the policy lowered it.
        resources: the trust-requiring resources found in the project.
        stored: the trust store's entry for the cwd, ``(decision, directory)``, if any
            (shown even when another input won).
        store_error: why the trust store could not be read (it is then ignored).
        changes: how the resources this run would load differ from those the stored
            decision approved (issue 14 §4), when they do: the stored ``yes`` or
            ``sandboxed`` then did not apply (unless a ``sandboxed`` decision
            follows changes).
        notes: what the user should know about the stored decision (it was bound
            to the current content at first use, or could not be).
        saved: the stored decision with its record (fingerprint, origin), if any.
    """

    decision: str | None
    source: str
    resources: tuple[Path, ...] = ()
    stored: tuple[str, Path] | None = None
    store_error: str | None = None
    changes: ResourceChanges | None = None
    notes: tuple[str, ...] = ()
    saved: SavedDecision | None = None

    @property
    def trusted(self) -> bool:
        """Whether project resources load (``yes`` or ``sandboxed``)."""
        return self.decision in ("yes", "sandboxed")

    def as_dict(self) -> dict[str, Any]:
        """The ``trust`` object of ``pi resources --json`` and the audit log."""
        return {
            "decision": self.decision or "undecided",
            "source": self.source,
            "project_resources": [str(p) for p in self.resources],
            "stored": (
                {"decision": self.stored[0], "path": str(self.stored[1])}
                if self.stored is not None
                else None
            ),
            "store_error": self.store_error,
            "changes": self.changes.as_dict() if self.changes else None,
        }

    def change_notices(self) -> list[str]:
        """The notices a run shows about the stored decision: what changed since it
        was saved, and how to approve the current content (issue 14 §4)."""
        lines = list(self.notes)
        if self.changes and self.saved is not None:
            import shlex

            where = shlex.quote(str(self.saved.path))
            what = self.changes.summary()
            if self.decision == "sandboxed" and self.saved.follow_changes:
                lines.append(
                    f"The project's resources changed since `{self.saved.decision}` was saved "
                    f"for {self.saved.path} ({what}); it follows changes, so they load "
                    "sandboxed"
                )
            else:
                again = f"pi trust {self.saved.decision} {where}"
                lines.append(
                    f"The saved `{self.saved.decision}` for {self.saved.path} does not apply: "
                    f"the project's trust-requiring resources changed since it was saved "
                    f"({what}). Review them, then trust the project again (`{again}`)"
                )
        return lines


def _limited(decision: str, source: str, rules: Any) -> tuple[str, str]:
    """``decision`` lowered to what ``rules`` (`TrustRules`) allow users to choose."""
    if rules is None or rules.refusal(decision) is None:
        return decision, source
    lowered = "sandboxed" if rules.users_may_trust == "sandboxed" else "no"
    return lowered, f"{source} (limited by policy {rules.users_may_trust_source})"


def _settings_default(agent_dir: Path) -> tuple[str | None, str]:
    """``defaultProjectTrust`` of the user's settings (pi's ``always``/``never``/``ask``
    or ``yes``/``no``/``sandboxed``); ``(None, "")`` when unset or unreadable."""
    path = Path(agent_dir) / "settings.json"
    try:
        data = json.loads(read_regular_file(path, 1024 * 1024))
    except (OSError, ValueError, RecursionError):
        return None, ""
    value = data.get("defaultProjectTrust") if isinstance(data, dict) else None
    if not isinstance(value, str) or value.strip().lower() not in _SETTINGS_DEFAULTS:
        return None, ""
    return _SETTINGS_DEFAULTS[value.strip().lower()], f"settings {path}"


def resolve_trust(
    cwd: Path,
    *,
    agent_dir: Path,
    home: Path,
    requested: str | None = None,
    rules: Any = None,
    extension_answer: str | None = None,
    has_ui: bool = False,
    bind_unbound: bool = False,
) -> TrustDecision:
    """Decide the project's trust (module docstring, seed 000 §2.4, issue 6).

    A stored ``yes`` or ``sandboxed`` applies only while the resources this run
    would load are those it approved (issue 14 §4): otherwise the project is
    undecided (the policy's and the settings' defaults apply as if nothing were
    stored) and ``changes`` says what changed — unless a ``sandboxed`` decision
    follows changes. A stored decision without a fingerprint (saved by pi 1.6.0 or
    our previous store format) applies, and with ``bind_unbound`` is bound to the
    current content now (trust on first use).

    Args:
        cwd: the session's working directory (absolute).
        agent_dir: where the trust store and the user's settings are.
        home: the user's home (``~/.agents/skills`` is not a project resource).
        requested: ``--trust`` (already checked against the policy by the caller
            with ``rules.decide``; checked again here).
        rules: the policy's `TrustRules`; None allows everything, default ``ask``.
        extension_answer: the first decisive ``project_trust`` answer of a user-level
            or ``-e`` extension (``yes``/``no``/``sandboxed``), if any.
        has_ui: whether the user can be asked now (``ask`` stays ``ask``).
        bind_unbound: record a fingerprint for an applying decision that has none
            (a run's start does; ``pi trust show`` and ``pi resources`` do not write).

    Returns:
        The `TrustDecision`. A decision the policy forbids (from an extension, the
        store or a default) is lowered to what it allows, and the source says so.

    Raises:
        ValueError: ``requested`` is forbidden by the policy (message names the file).
    """
    resources = tuple(project_resources(cwd, home=home))
    store_error: str | None = None
    saved: SavedDecision | None = None
    store = trust_store_path(agent_dir)
    try:
        saved = TrustStore.load(store).saved_for(cwd)
    except TrustStoreError as exc:
        store_error = str(exc)
    stored = (saved.decision, saved.path) if saved is not None else None
    changes: ResourceChanges | None = None
    notes: list[str] = []

    def made(decision: str | None, source: str) -> TrustDecision:
        return TrustDecision(
            decision, source, resources, stored, store_error, changes, tuple(notes), saved
        )

    if requested is not None:
        if rules is not None:
            refusal = rules.refusal(requested)
            if refusal is not None:
                raise ValueError(f"{requested!r} is not allowed: {refusal}")
        return made(requested, "--trust")
    if not resources:
        # Nothing to gate — unless the user saved a decision: a "no" for this tree
        # still marks its context files as untrusted (issue 6 review).
        if stored is not None:
            return made(*_limited(stored[0], f"trust store {store} ({stored[1]})", rules))
        return made(*_limited("yes", "no project resources", rules))
    if extension_answer in TRUST_DECISIONS:
        return made(*_limited(extension_answer, "extension project_trust", rules))
    if saved is not None:
        applies, changes = _content_check(saved, cwd, home, store, bind_unbound, notes)
        if applies:
            return made(*_limited(saved.decision, f"trust store {store} ({saved.path})", rules))
    if rules is not None and rules.default_source:
        decision, source = rules.decide(None, has_ui=has_ui)
        return made(decision, source)
    default, source = _settings_default(agent_dir)
    if default is not None and default != "ask":
        return made(*_limited(default, source, rules))
    if rules is not None:
        decision, source = rules.decide(None, has_ui=has_ui)
        return made(decision, source)
    return made("ask" if has_ui else None, "default")


def _content_check(
    saved: SavedDecision,
    cwd: Path,
    home: Path,
    store: Path,
    bind_unbound: bool,
    notes: list[str],
) -> tuple[bool, ResourceChanges | None]:
    """Whether ``saved`` applies to the resources a run in ``cwd`` would load now,
    and what changed since it was saved (issue 14 §4). ``no`` always applies."""
    if saved.decision == "no":
        return True, None
    if saved.fingerprint is None:
        who = "pi 1.6.0" if saved.origin == "pi" else "an older pi-sandbox"
        if not bind_unbound:
            notes.append(
                f"The saved `{saved.decision}` for {saved.path} (saved by {who}) records no "
                "content; the next run binds it to the resources it finds then"
            )
            return True, None
        fingerprint = decision_fingerprint(saved.path, home=home, also_for=(cwd,))
        try:
            bound = TrustStore.update(store, lambda s: s.bind(saved, fingerprint))
        except (TrustStoreError, OSError) as exc:
            notes.append(
                f"The saved `{saved.decision}` for {saved.path} (saved by {who}) records no "
                f"content and could not be bound to it now: {exc}"
            )
            return True, None
        if bound:
            notes.append(
                f"The saved `{saved.decision}` for {saved.path} (saved by {who}) is now bound "
                f"to the content of its {len(fingerprint.resources)} trust-requiring "
                "resource(s): a later change makes the project undecided until you trust "
                "it again"
            )
        return True, None
    current, candidates = run_fingerprint(cwd, home=home)
    changes = compare(saved.fingerprint, current, candidates)
    if not changes:
        return True, None
    return saved.decision == "sandboxed" and saved.follow_changes, changes


@dataclass(frozen=True)
class ExtensionResourcePaths:
    """Paths one extension contributed through ``resources_discover``.

    Attributes:
        extension: the extension's path (a ``.py`` file or a package directory).
        trusted: whether the extension is trusted (``cli``/``user`` origin, or a
            project extension with trust ``yes``); an untrusted one may only name
            paths inside its own directory.
        skill_paths / prompt_paths: as the extension returned them (absolute, or
            relative to the extension's directory).
    """

    extension: Path
    trusted: bool
    skill_paths: tuple[str, ...] = ()
    prompt_paths: tuple[str, ...] = ()


@dataclass
class ResourceSet:
    """Everything `load_resources` found; `diagnostics` are
    ``{"type": "warning"|"error"|"collision", "message", "path"}``."""

    trust: TrustDecision
    skills: list[Skill] = field(default_factory=list)
    prompts: list[PromptTemplate] = field(default_factory=list)
    context_files: list[ContextFile] = field(default_factory=list)
    system_prompt: str | None = None  # replaces the built-in prompt
    system_prompt_source: str | None = None
    append_system_prompt: list[tuple[str, str]] = field(default_factory=list)  # (source, text)
    diagnostics: list[dict[str, str]] = field(default_factory=list)

    def skill_sources(self) -> list[str]:
        """Each skill as ``name (source)``, for notices."""
        return [f"{s.name} ({s.source})" for s in self.skills]


def read_prompt_text(value: str, *, argument: str, project: Path | None = None) -> str:
    """``--system-prompt`` / ``--append-system-prompt``: the file's text when
    ``value`` looks like a path (it starts with ``/``, ``./``, ``../`` or ``~``, or
    ends in ``.md`` or ``.txt``) and names an existing file, else ``value`` itself.
    (pi reads any existing path; a repository could then plant a file called
    ``Be brief`` or ``English/French`` where you run and have its text added,
    issue 6 review.) A file inside ``project`` must resolve inside it: a repository's
    ``docs/style.md`` linked to ``~/.ssh/id_rsa`` is refused.

    Raises:
        ValueError: the file cannot be read, is not a regular file, is larger than
            `MAX_PROMPT_TEXT_BYTES` or not UTF-8 (message names ``argument``).
    """
    path = Path(os.path.expanduser(value))
    looks_like_path = value.startswith(("/", "./", "../", "~")) or value.endswith((".md", ".txt"))
    if (
        not value.strip()
        or not looks_like_path
        or "\n" in value
        or len(value) > 4096
        or not os.path.lexists(path)
    ):
        return value
    if (
        project is not None
        and _inside_unresolved(path, project)
        and not resolves_inside(path, project)
    ):
        raise ValueError(
            f"argument {argument}: {value} is in the project {project} but resolves to "
            f"{os.path.realpath(path)}, outside it; refused"
        )
    try:
        return read_regular_file(path, MAX_PROMPT_TEXT_BYTES).decode("utf-8-sig")
    except FileRefusedError as exc:
        raise ValueError(f"argument {argument}: {exc}") from exc
    except OSError as exc:
        raise ValueError(f"argument {argument}: {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"argument {argument}: {path}: not UTF-8") from exc


def project_resources(cwd: Path, *, home: Path) -> list[Path]:
    """The trust-requiring resources of the project in ``cwd``: the cwd's own
    (`trust_requiring_resources`) and, when the cwd is below the repository root
    (the nearest ``.git``, not the home directory), the root's — so that starting
    in a subdirectory of a repository does not skip its decision."""
    found = trust_requiring_resources(cwd, home=home)
    root = Path(os.path.abspath(_git_root(Path(os.path.abspath(cwd))) or cwd))
    if root != Path(os.path.abspath(cwd)) and root != Path(os.path.abspath(home)):
        found += [p for p in trust_requiring_resources(root, home=home) if p not in found]
    return found


def _ancestor_agents_skills(cwd: Path, home: Path) -> list[Path]:
    """``.agents/skills`` in the cwd and its ancestors up to the git root (or only
    the cwd outside a repository), nearest first; never ``~/.agents/skills``."""
    cwd = Path(os.path.abspath(cwd))
    root = _git_root(cwd)
    directories = [cwd]
    if root is not None:
        directories = [cwd, *[p for p in cwd.parents if p == root or root in p.parents]]
    user = Path(os.path.abspath(home)) / ".agents" / "skills"
    return [d / ".agents" / "skills" for d in directories if d / ".agents" / "skills" != user]


def _inside_unresolved(path: Path, root: Path) -> bool:
    """Whether ``path`` is below ``root`` as written (symlinks not followed)."""
    return Path(os.path.abspath(path)).is_relative_to(os.path.abspath(root))


def load_resources(
    cwd: Path,
    *,
    agent_dir: Path,
    home: Path,
    trust: TrustDecision,
    cli_skills: tuple[Path, ...] = (),
    no_skills: bool = False,
    cli_prompts: tuple[Path, ...] = (),
    no_prompts: bool = False,
    packages: tuple[Path, ...] = (),
    contributed: tuple[ExtensionResourcePaths, ...] = (),
    system_prompt: str | None = None,
    append_system_prompt: tuple[str, ...] = (),
    no_context_files: bool = False,
) -> ResourceSet:
    """Read the resources ``trust`` admits (module docstring for sources and order).

    Args:
        cwd, agent_dir, home: the session's directories (absolute).
        trust: from `resolve_trust`; project sources are read only when trusted.
        cli_skills / cli_prompts: ``--skill`` / ``--prompt-template`` paths (load
            even with ``no_skills`` / ``no_prompts``).
        packages: loaded extension package directories, in load order (their
            ``skills/`` and ``prompts/`` directories are package resources).
        contributed: ``resources_discover`` results per extension; a path outside
            the extension's directory from an untrusted extension is refused with
            an ``error`` diagnostic.
        system_prompt: ``--system-prompt`` text (wins over ``.pi/SYSTEM.md``).
        append_system_prompt: ``--append-system-prompt`` texts.
        no_context_files: ``--no-context-files`` (pi docs cli.md): no ``AGENTS.md`` /
            ``CLAUDE.md`` is read.

    Returns:
        The `ResourceSet`. Never raises for bad files or paths: each is a diagnostic.
    """
    from pi_sandbox.resources.settings_lists import settings_paths

    cwd = Path(os.path.abspath(cwd))
    result = ResourceSet(trust=trust)
    diagnostics = result.diagnostics
    notices: list[str] = []
    project_settings = cwd / ".pi" / "settings.json"
    user_settings = Path(agent_dir) / "settings.json"

    def from_settings(settings: Path, key: str) -> list[Path]:
        confine = cwd if settings == project_settings else None
        found = [path for _, path in settings_paths(settings, notices, key, confine=confine)]
        return found

    # Paths named on the command line inside the project still may not lead out of
    # it through the project's symlinks (a repository's prompts/review.md linked to
    # ~/.ssh/id_rsa, issue 6 review).
    skill_sources = [
        SkillSource(p, "cli", explicit=True, confine=cwd if _inside_unresolved(p, cwd) else None)
        for p in cli_skills
    ]
    prompt_sources: list[tuple[Path, str, Path | None]] = [
        (p, "cli", cwd if _inside_unresolved(p, cwd) else None) for p in cli_prompts
    ]
    for path in cli_prompts:
        if not os.path.lexists(path):
            diagnostics.append(
                _diag("warning", f"{path}: prompt template path does not exist", path)
            )
    # A project's own sources must resolve inside it (symlinks out refused); the
    # ancestor .agents/skills directories inside the repository containing it.
    repository = _git_root(cwd) or cwd
    if trust.trusted:
        if not no_skills:
            skill_sources += [
                SkillSource(p, "project-settings", explicit=True, confine=cwd)
                for p in from_settings(project_settings, "skills")
                if _project_path_ok(p, cwd, "skills", diagnostics)
            ]
            skill_sources.append(SkillSource(cwd / ".pi" / "skills", "project", confine=cwd))
            skill_sources += [
                SkillSource(p, "project", mode="agents", confine=repository)
                for p in _ancestor_agents_skills(cwd, home)
            ]
        if not no_prompts:
            prompt_sources += [
                (p, "project-settings", cwd)
                for p in from_settings(project_settings, "prompts")
                if _project_path_ok(p, cwd, "prompts", diagnostics)
            ]
            prompt_sources.append((cwd / ".pi" / "prompts", "project", cwd))
    if not no_skills:
        skill_sources += [
            SkillSource(p, "user-settings", explicit=True)
            for p in from_settings(user_settings, "skills")
        ]
        skill_sources.append(SkillSource(Path(agent_dir) / "skills", "user"))
        skill_sources.append(SkillSource(Path(home) / ".agents" / "skills", "user", mode="agents"))
        skill_sources += [
            SkillSource(p / "skills", "package", confine=cwd if resolves_inside(p, cwd) else None)
            for p in packages
        ]
    if not no_prompts:
        prompt_sources += [
            (p, "user-settings", None) for p in from_settings(user_settings, "prompts")
        ]
        prompt_sources.append((Path(agent_dir) / "prompts", "user", None))
        prompt_sources += [
            (p / "prompts", "package", cwd if resolves_inside(p, cwd) else None) for p in packages
        ]
    for contribution in contributed:
        base = (
            contribution.extension
            if contribution.extension.is_dir()
            else contribution.extension.parent
        )
        for kind, paths in (
            ("skill", contribution.skill_paths),
            ("prompt", contribution.prompt_paths),
        ):
            if no_skills if kind == "skill" else no_prompts:
                continue  # --no-skills / --no-prompt-templates: only the CLI's paths
            for raw in paths:
                path = Path(os.path.abspath(base / os.path.expanduser(raw)))
                if not contribution.trusted and not resolves_inside(path, base):
                    diagnostics.append(
                        _diag(
                            "error",
                            f"extension {contribution.extension}: {kind} path {raw} is outside "
                            f"its directory {base}; an untrusted (project) extension may only "
                            "contribute its own files",
                            path,
                        )
                    )
                    continue
                # An untrusted extension's files must stay inside its directory.
                confine = None if contribution.trusted else base
                if kind == "skill":
                    skill_sources.append(
                        SkillSource(path, "extension", explicit=True, confine=confine)
                    )
                else:
                    prompt_sources.append((path, "extension", confine))
    skills, skill_diagnostics = load_skills(skill_sources)
    result.skills = skills
    diagnostics += [_diag(d.type, d.message, d.path) for d in skill_diagnostics]
    prompts, prompt_diagnostics = load_prompt_templates(prompt_sources)
    result.prompts = prompts
    diagnostics += [_diag(d.type, d.message, d.path) for d in prompt_diagnostics]
    files, context_diagnostics = (
        ([], [])
        if no_context_files
        else load_context_files(
            cwd,
            Path(agent_dir),
            trust=trust.decision,
            home=Path(home),
            decided_at=trust.stored[1] if trust.stored is not None else None,
        )
    )
    result.context_files = files
    diagnostics += [_diag(d.type, d.message, d.path) for d in context_diagnostics]
    system, append, system_diagnostics = system_prompt_files(cwd, trust=trust.decision)
    diagnostics += [_diag(d.type, d.message, d.path) for d in system_diagnostics]
    if system_prompt is not None:
        result.system_prompt, result.system_prompt_source = system_prompt, "--system-prompt"
    elif system is not None:
        result.system_prompt = system
        result.system_prompt_source = str(cwd / ".pi" / "SYSTEM.md")
    if append is not None:
        result.append_system_prompt.append((str(cwd / ".pi" / "APPEND_SYSTEM.md"), append))
    result.append_system_prompt += [("--append-system-prompt", t) for t in append_system_prompt]
    diagnostics += [_diag("warning", line, notice_path(line)) for line in notices]
    return result


def _project_path_ok(path: Path, cwd: Path, key: str, diagnostics: list[dict[str, str]]) -> bool:
    """A project settings path must stay inside the project once symlinks resolve."""
    if resolves_inside(path, cwd):
        return True
    diagnostics.append(
        _diag(
            "error",
            f"{cwd / '.pi' / 'settings.json'}: {key}: {path} is outside the project {cwd}; "
            "a project may only name its own files",
            path,
        )
    )
    return False


def notice_path(notice: str) -> str:
    """The file a discovery notice is about (its leading absolute path), or ""."""
    head = notice.split(": ", 1)[0]
    for word in (head, *head.split()):
        if word.startswith("/"):
            return word
    return ""


def _diag(kind: str, message: str, path: Path | str) -> dict[str, str]:
    return {"type": kind, "message": message, "path": str(path)}


def compose_system_prompt(
    default: str, resources: ResourceSet, active_tools: list[str], *, cwd: Path
) -> str:
    """The system prompt: ``default`` (the built-in prompt for the active tools) or
    its replacement (``--system-prompt``, else ``.pi/SYSTEM.md`` with trust ``yes``),
    then the appended texts, the context files (untrusted project files marked as
    such), and the skills index when a ``read`` (or, failing that, ``bash``) tool is
    active (seed 000 §4). Rebuilt for every request, so tool, skill and trust changes
    show at once.

    Args:
        default: the built-in prompt. active_tools: names of the active tools.
        cwd: the working directory (restated after a replacement prompt).

    Returns:
        The prompt text.
    """
    from pi_sandbox.resources.context_files import format_context_files
    from pi_sandbox.resources.skills import format_skills_for_prompt

    parts = [default]
    if resources.system_prompt is not None:
        parts = [resources.system_prompt.strip(), f"Current working directory: {cwd}"]
    parts += [text.strip() for _, text in resources.append_system_prompt]
    parts.append(format_context_files(resources.context_files))
    read_tool = "read" if "read" in active_tools else "bash" if "bash" in active_tools else None
    if read_tool is not None:
        untrusted = frozenset() if resources.trust.decision == "yes" else _PROJECT_SKILL_SOURCES
        parts.append(
            format_skills_for_prompt(
                resources.skills, read_tool=read_tool, untrusted_sources=untrusted
            )
        )
    return "\n\n".join(part for part in parts if part)
