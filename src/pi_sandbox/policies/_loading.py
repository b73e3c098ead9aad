"""Load policy files: YAML to validated :class:`PolicyFile`, files to :class:`Policy`.

Every problem becomes one :class:`~pi_sandbox.errors.PolicyFileError` whose message
has one line per problem, ``FILE:LINE: KEY.PATH: what is wrong``, e.g.
``policies/x.yaml:7: tool_call.rules[0].decison: unknown key``. Lines come from
the YAML node marks, so they point at the offending key (or, for a missing key,
at the mapping that lacks it).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
import yaml
from pydantic_core import ErrorDetails

from pi_sandbox.bounded_yaml import MAX_DEPTH as BOUNDED_MAX_DEPTH
from pi_sandbox.bounded_yaml import MAX_NODES as BOUNDED_MAX_NODES
from pi_sandbox.bounded_yaml import index_yaml
from pi_sandbox.errors import PolicyFileError
from pi_sandbox.policies._effective import LoadedPolicyFile, Policy, build_policy
from pi_sandbox.policies._schema import PolicyFile
from pi_sandbox.policies._tool_gate import PolicyRule, Tier
from pi_sandbox.regular_files import FileRefusedError, read_regular_file

__all__ = [
    "MANAGED_POLICY_DIR",
    "PolicyLocations",
    "load_effective_policy",
    "load_policies",
    "load_policy_file",
]

_KeyPath = tuple[str | int, ...]
_Problem = tuple[int, _KeyPath, str]  # line, key path, message


def load_policy_file(path: Path) -> PolicyFile:
    """Read, validate and self-test one policy file.

    Self-test: every ``examples.match`` entry must make its rule match and every
    ``examples.not_match`` entry must not (DESIGN §7).

    Args:
        path: the YAML file; messages name it as given.

    Returns:
        The validated file; ``PolicyFile.source`` is ``path``.

    Raises:
        PolicyFileError: the file cannot be read, is not valid YAML, is not a
            mapping, has a missing or unsupported ``version``, an unknown key, a
            value of the wrong type, an invalid regex or decision, a duplicate key
            or rule id, or an example that fails. The message lists every problem
            found, one ``FILE:LINE: KEY: message`` line each.
    """
    try:
        text = read_regular_file(path, MAX_POLICY_BYTES).decode("utf-8")
    except FileRefusedError as exc:
        raise PolicyFileError(str(exc)) from exc
    except UnicodeDecodeError as exc:
        raise PolicyFileError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    except OSError as exc:
        raise PolicyFileError(f"{path}: cannot read policy file: {exc.strerror or exc}") from exc
    try:
        return _parse(text, Path(path))
    except RecursionError as exc:
        raise PolicyFileError(f"{path}: nested too deeply") from exc


EXAMPLES_REGEX_BUDGET_S = 2.0
"""Regex time all the ``examples`` of one file may take together when it loads (s)."""

MAX_POLICY_BYTES = 1024 * 1024
"""Largest policy file read, in bytes."""

MAX_NODES = BOUNDED_MAX_NODES
"""Most YAML nodes visited (`pi_sandbox.bounded_yaml`, shared with scripts)."""

MAX_DEPTH = BOUNDED_MAX_DEPTH
"""Deepest YAML nesting accepted (`pi_sandbox.bounded_yaml`)."""

MANAGED_POLICY_DIR = Path("/etc/pi/policy.d")
"""Where an organisation installs managed policy files (``*.yaml``, name order)."""


def load_policies(paths: Sequence[Path]) -> Policy:
    """Load ``--policy`` files (managed tier) into one effective policy.

    Rules accumulate in file order, then rule order; the strictest ``default`` and
    the strictest ``unparseable`` win (the first file wins a tie). A file given
    twice (same real path) is loaded once.

    Args:
        paths: the policy files (``--policy`` options, in order).

    Returns:
        The effective policy; with no paths, one without tiers (allows everything).

    Raises:
        PolicyFileError: as :func:`load_policy_file`, for the first bad file.
    """
    return build_policy(
        [LoadedPolicyFile("managed", path, load_policy_file(path)) for path in _unique(paths)]
    )


@dataclass(frozen=True)
class PolicyLocations:
    """Where a run's policy files come from, tier by tier (issue 4).

    Attributes:
        policy_files: ``--policy`` files (managed tier, after the managed dirs).
        managed_dirs: directories whose ``*.yaml`` files are managed policy, in
            name order; a missing directory contributes nothing. Their ``lock``
            binds every other file (see `LoadedPolicyFile.system`).
        extra_managed_dirs: further managed directories chosen by whoever starts
            ``pi`` (``$PI_MANAGED_POLICY_DIR``): like ``--policy`` files, after them.
        user_file: ``~/.pi/agent/policy.yaml`` (read if it exists).
        project_file: ``.pi/policy.yaml`` of the workspace, or None when the project
            is not trusted (then it is never read).
    """

    policy_files: tuple[Path, ...] = ()
    managed_dirs: tuple[Path, ...] = (MANAGED_POLICY_DIR,)
    user_file: Path | None = None
    project_file: Path | None = None
    extra_managed_dirs: tuple[Path, ...] = ()

    def files(self) -> list[tuple[Tier, Path, bool]]:
        """The files that exist, highest tier first.

        Raises:
            PolicyFileError: a managed directory exists but cannot be listed.
                (A path that is not a readable regular file fails later, in
                `load_policy_file`, naming the file.)
        """
        found: list[tuple[Tier, Path, bool]] = []
        for system, directories in ((True, self.managed_dirs), (False, self.extra_managed_dirs)):
            for directory in directories:
                try:
                    entries = sorted(directory.iterdir())
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise PolicyFileError(
                        f"{directory}: cannot list managed policy directory: {exc.strerror or exc}"
                    ) from exc
                found += [
                    ("managed", entry, system)
                    for entry in entries
                    # Hidden files are editor droppings (``.#x.yaml`` lock links).
                    if entry.name.endswith(".yaml") and not entry.name.startswith(".")
                ]
            if system:
                found += [("managed", path, False) for path in self.policy_files]
        for tier, path in (("user", self.user_file), ("project", self.project_file)):
            if path is not None and os.path.lexists(path):
                found.append((tier, path, False))  # type: ignore[arg-type]
        return found


def load_effective_policy(locations: PolicyLocations) -> Policy:
    """Load every tier's files and combine them (see `pi_sandbox.policies._effective`).

    Every file must be valid: a malformed file of any tier is fatal, never "no
    policy" (issue 4). A file reachable twice (same real path) is loaded once, in
    its highest tier.

    Raises:
        PolicyFileError: naming each bad file, line and key.
    """
    loaded: list[LoadedPolicyFile] = []
    seen: set[str] = set()
    for tier, path, system in locations.files():
        if tier == "project":
            _check_project_file(path)
        key = os.path.realpath(path)
        if key in seen:
            continue
        seen.add(key)
        loaded.append(LoadedPolicyFile(tier, path, load_policy_file(path), system))
    return build_policy(loaded)


def _check_project_file(path: Path) -> None:
    """A project policy must be a regular file inside the project: a repository must
    not make pi read (and quote in an error) a file elsewhere, such as a key."""
    project_root = path.parent.parent
    if path.is_symlink():
        raise PolicyFileError(f"{path}: a project policy must be a regular file, not a symlink")
    real = os.path.realpath(path)
    root = os.path.realpath(project_root)
    if not real.startswith(root.rstrip("/") + "/"):
        raise PolicyFileError(f"{path}: resolves outside the project ({real})")
    if not os.path.isfile(real):
        raise PolicyFileError(f"{path}: not a regular file")


def _unique(paths: Iterable[Path]) -> list[Path]:
    seen: set[str] = set()
    unique: list[Path] = []
    for path in paths:
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            unique.append(Path(path))
    return unique


def _parse(text: str, path: Path) -> PolicyFile:
    try:
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:  # a control character, a lone surrogate
        line = text.count("\n", 0, exc.position) + 1
        raise PolicyFileError(
            f"{path}:{line}: invalid YAML: unacceptable character #x{exc.character:04x} "
            "(control characters are not allowed)"
        ) from exc
    try:
        root = loader.get_single_node()
        if root is None:
            raise _error(
                path, [(1, (), "empty policy file; expected a mapping with a 'version' key")]
            )
        found = index_yaml(root, max_nodes=MAX_NODES, max_depth=MAX_DEPTH)
        lines, problems = found.lines, found.problems
        if any("recursive" not in p[2] for p in found.over_bounds):
            # Too many nodes or too deep: unsafe to construct. (A recursive alias
            # constructs fine and is reported with the schema's complaints.)
            raise _error(path, problems)
        data = loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        what = "; ".join(part for part in (exc.context, exc.problem) if part)
        raise PolicyFileError(f"{path}:{line}: invalid YAML: {what}") from exc
    except yaml.YAMLError as exc:
        raise PolicyFileError(f"{path}: invalid YAML: {exc}") from exc
    finally:
        loader.dispose()

    if not isinstance(data, dict):
        # Not a policy at all (maybe a key or a token behind a symlink): say what it
        # is, never what it says.
        what = f"a string of {len(data)} characters" if isinstance(data, str) else _a(data)
        problems.append((lines[()], (), f"expected a mapping with a 'version' key, got {what}"))
        raise _error(path, problems)
    try:
        policy_file = PolicyFile.model_validate(data)
    except pydantic.ValidationError as exc:
        errors = exc.errors()
        # Another version's file may have any shape: its version is the only news.
        version_errors = [error for error in errors if error["loc"][:1] == ("version",)]
        for error in version_errors or errors:
            key = _key_path(error["loc"])
            problems.append((_line_of(lines, key), key, _describe(error)))
        raise _error(path, problems) from exc
    problems.extend(_check_rules(policy_file, path, lines))
    problems.extend(_check_bound_files(policy_file, lines))
    if problems:
        raise _error(path, problems)
    policy_file._source = path
    return policy_file


def _check_rules(policy_file: PolicyFile, path: Path, lines: dict[_KeyPath, int]) -> list[_Problem]:
    """Checks that need the whole file: unique rule ids, then the rules' examples."""
    problems: list[_Problem] = []
    first_index: dict[str, int] = {}
    for index, rule in enumerate(policy_file.tool_call.rules):
        key: _KeyPath = ("tool_call", "rules", index, "id")
        if rule.id in first_index:
            first = _line_of(lines, ("tool_call", "rules", first_index[rule.id], "id"))
            message = f"duplicate rule id {rule.id!r} (first at line {first})"
            problems.append((_line_of(lines, key), key, message))
        else:
            first_index[rule.id] = index
    budget = [EXAMPLES_REGEX_BUDGET_S]
    for index, rule in enumerate(policy_file.tool_call.rules):
        compiled = PolicyRule.from_model(rule, source=path)
        for kind in ("match", "not_match"):
            for number, example in enumerate(getattr(rule.examples, kind)):
                failure = compiled.check_example(
                    example, expect_match=kind == "match", budget=budget
                )
                if failure is not None:
                    key = ("tool_call", "rules", index, "examples", kind, number)
                    message = f"rule {rule.id!r}: {kind} example {example!r} {failure}"
                    problems.append((_line_of(lines, key), key, message))
    return problems


def _check_bound_files(policy_file: PolicyFile, lines: dict[_KeyPath, int]) -> list[_Problem]:
    """Issue 13 §5: ``read_only``/``writable_roots`` entries that are Unix sockets,
    FIFOs or device nodes (also through a symlink), or directories holding sockets
    or FIFOs, and ``sockets`` entries that are not sockets. Only absolute and
    ``~/`` paths can be checked here (the workspace is not known yet); the sandbox
    profile checks every entry again when a worker starts."""
    from pi_sandbox.sandbox.special_files import check_bindable

    problems: list[_Problem] = []
    section = policy_file.sandbox
    if section is None:
        return problems
    for name in ("read_only", "writable_roots"):
        for index, entry in enumerate(getattr(section.filesystem, name)):
            if not entry.startswith(("/", "~/")):
                continue
            refusal = check_bindable(os.path.expanduser(entry), scan=name == "read_only")
            if refusal is not None:
                key: _KeyPath = ("sandbox", "filesystem", name, index)
                message = (
                    f"{refusal}; only regular files and directories can be bound "
                    "(exposing a socket, FIFO or device is a sandbox escape; a socket "
                    "you need goes in sandbox.sockets)"
                )
                problems.append((_line_of(lines, key), key, message))
    for index, entry in enumerate(section.sockets):
        try:
            mode = os.stat(os.path.expanduser(entry)).st_mode
        except OSError:
            continue  # not there now (the daemon is not running): skipped at start
        if not stat.S_ISSOCK(mode):
            key = ("sandbox", "sockets", index)
            problems.append((_line_of(lines, key), key, f"{entry} is not a Unix socket"))
    return problems


def _error(path: Path, problems: list[_Problem]) -> PolicyFileError:
    problems.sort(key=lambda problem: problem[0])
    return PolicyFileError(
        "\n".join(
            f"{path}:{line}: {_format_key(key)}: {message}" for line, key, message in problems
        )
    )


def _key_path(loc: tuple[str | int, ...]) -> _KeyPath:
    # pydantic adds "[key]" to the location of a bad mapping key; the key is enough.
    return tuple(part for part in loc if part != "[key]")


def _format_key(key: _KeyPath) -> str:
    text = ""
    for part in key:
        text += f"[{part}]" if isinstance(part, int) else f"{'.' if text else ''}{part}"
    return text or "(top level)"


def _line_of(lines: dict[_KeyPath, int], key: _KeyPath) -> int:
    while key not in lines:
        key = key[:-1]
    return lines[key]


_TYPE_MESSAGES = {
    "string_type": "a string",
    "tuple_type": "a list",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "int_type": "an integer",
}


def _describe(error: ErrorDetails) -> str:
    kind = error["type"]
    value = error.get("input")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "missing required key"
    if kind == "literal_error":
        return f"must be one of {error.get('ctx', {}).get('expected')}, got {value!r}"
    if kind in _TYPE_MESSAGES:
        hint = ""
        if kind == "string_type" and isinstance(value, bool):
            hint = " (YAML reads yes/no/on/off/true/false as booleans: quote the text)"
        return f"expected {_TYPE_MESSAGES[kind]}, got {_a(value)}{hint}"
    if kind in ("too_short", "string_too_short"):
        return "must not be empty"
    if kind == "string_pattern_mismatch" and error["loc"][-1:] == ("id",):
        return (
            "a rule id is letters, digits and '._:-', starting with a letter or digit; "
            f"got {value!r}"
        )
    return error["msg"]


def _a(value: Any) -> str:
    """Name a parsed YAML value's type the way a policy author would."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a number ({value})"
    if isinstance(value, str):
        # Short: a file that is not a policy at all (a key, a token) must not be
        # echoed into terminals and CI logs.
        shown = value if len(value) <= 40 else value[:24] + "…"
        return f"a string ({shown!r})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__
