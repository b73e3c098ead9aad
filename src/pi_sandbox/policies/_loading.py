"""Load policy files: YAML to validated :class:`PolicyFile`, files to :class:`Policy`.

Every problem becomes one :class:`~pi_sandbox.errors.PolicyFileError` whose message
has one line per problem, ``FILE:LINE: KEY.PATH: what is wrong``, e.g.
``policies/x.yaml:7: tool_call.rules[0].decison: unknown key``. Lines come from
the YAML node marks, so they point at the offending key (or, for a missing key,
at the mapping that lacks it).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pydantic
import yaml
from pydantic_core import ErrorDetails

from pi_sandbox.errors import PolicyFileError
from pi_sandbox.policies._schema import PolicyFile, SandboxSection
from pi_sandbox.policies._tool_gate import _SEVERITY, Policy, PolicyRule
from pi_sandbox.sandbox.settings import SandboxLimits, SandboxSettings

__all__ = ["load_policies", "load_policy_file", "merge_sandbox_sections"]

_KeyPath = tuple[str | int, ...]
_Problem = tuple[int, _KeyPath, str]  # line, key path, message

# The tier of files given with --policy; user and project tiers are a later issue.
_MANAGED = "managed"


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
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyFileError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    except OSError as exc:
        raise PolicyFileError(f"{path}: cannot read policy file: {exc.strerror or exc}") from exc
    return _parse(text, Path(path))


def load_policies(paths: Sequence[Path]) -> Policy:
    """Load several policy files into one effective policy.

    Rules accumulate in file order, then rule order; the strictest ``default`` and
    the strictest ``unparseable`` win (the first file wins a tie). Rule ids must be
    unique within a file only: the decision names the rule's file. A file given
    twice (same real path) is loaded once. All files are ``managed`` tier.

    Args:
        paths: the policy files (``--policy`` options, in order).

    Returns:
        The effective policy; with no paths, an empty policy whose default is allow.

    Raises:
        PolicyFileError: as :func:`load_policy_file`, for the first bad file.
    """
    files = [load_policy_file(path) for path in _unique(paths)]
    rules = tuple(
        PolicyRule.from_model(rule, source=file.source, tier=_MANAGED)
        for file in files
        for rule in file.tool_call.rules
    )
    if not files:
        return Policy()
    default_file = _first_strictest(files, lambda f: f.tool_call.default)
    unparseable_file = _first_strictest(files, lambda f: f.tool_call.unparseable)
    return Policy(
        rules=rules,
        default=default_file.tool_call.default,
        unparseable=unparseable_file.tool_call.unparseable,
        default_source=default_file.source,
        sources=tuple(file.source for file in files if file.source is not None),
        sandbox=merge_sandbox_sections([f.sandbox for f in files if f.sandbox is not None]),
    )


def merge_sandbox_sections(sections: Sequence[SandboxSection]) -> SandboxSettings:
    """Combine ``sandbox`` sections so that no file can loosen another (DESIGN §7).

    Deny lists and read-only paths accumulate; ``workspace: read`` beats ``write``;
    writable roots, network allowlists and environment allowlists intersect across
    the files that set them (a file that does not mention one does not constrain
    it); network ``none`` beats ``allowlist``; each limit is the smallest given,
    else the `SandboxLimits` default.

    Args:
        sections: the files' sections, in load order.

    Returns:
        The effective settings; `SandboxSettings()` when ``sections`` is empty.
    """
    if not sections:
        return SandboxSettings()

    def union(values: Iterable[tuple[str, ...]]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(item for value in values for item in value))

    def intersect(field_sets: list[tuple[str, ...]]) -> tuple[str, ...]:
        if not field_sets:
            return ()
        common = set(field_sets[0]).intersection(*map(set, field_sets[1:]))
        return tuple(item for item in field_sets[0] if item in common)

    fs = [s.filesystem for s in sections]
    net = [s.network for s in sections]
    limits: dict[str, int] = {}
    for section in sections:
        for name in section.limits.model_fields_set:
            value = getattr(section.limits, name)
            limits[name] = min(value, limits.get(name, value))
    allowlists = [n for n in net if n.mode == "allowlist"]
    network = (
        "none"
        if any(n.mode == "none" and "mode" in n.model_fields_set for n in net)
        else ("allowlist" if allowlists else "none")
    )
    return SandboxSettings(
        workspace_writable=all(f.workspace == "write" for f in fs),
        writable_roots=intersect(
            [f.writable_roots for f in fs if "writable_roots" in f.model_fields_set]
        ),
        read_only=union(f.read_only for f in fs),
        deny_read=union(f.deny_read for f in fs),
        deny_write=union(f.deny_write for f in fs),
        network=network,
        network_allow=intersect([n.allow for n in allowlists]) if network == "allowlist" else (),
        network_deny=union(n.deny for n in net),
        environment_allow=intersect(
            [s.environment.allow for s in sections if "allow" in s.environment.model_fields_set]
        ),
        limits=SandboxLimits(**limits),
    )


def _unique(paths: Iterable[Path]) -> list[Path]:
    seen: set[str] = set()
    unique: list[Path] = []
    for path in paths:
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            unique.append(Path(path))
    return unique


def _first_strictest(files: Sequence[PolicyFile], decision_of: Any) -> PolicyFile:
    best = files[0]
    for file in files[1:]:
        if _SEVERITY[decision_of(file)] > _SEVERITY[decision_of(best)]:
            best = file
    return best


def _parse(text: str, path: Path) -> PolicyFile:
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise _error(
                path, [(1, (), "empty policy file; expected a mapping with a 'version' key")]
            )
        lines: dict[_KeyPath, int] = {(): root.start_mark.line + 1}
        problems: list[_Problem] = []
        _index(root, (), lines, problems, ancestors=set())
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
        problems.append((lines[()], (), f"expected a mapping with a 'version' key, got {_a(data)}"))
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
    if problems:
        raise _error(path, problems)
    policy_file._source = path
    return policy_file


def _index(
    node: yaml.Node,
    key: _KeyPath,
    lines: dict[_KeyPath, int],
    problems: list[_Problem],
    *,
    ancestors: set[int],
) -> None:
    """Record the line of every key and list item; report duplicate keys."""
    if id(node) in ancestors:
        problems.append((node.start_mark.line + 1, key, "recursive YAML alias"))
        return
    ancestors = ancestors | {id(node)}
    if isinstance(node, yaml.MappingNode):
        first_seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            child = (*key, key_node.value)
            line = key_node.start_mark.line + 1
            if key_node.value in first_seen and key_node.value != "<<":
                first = first_seen[key_node.value]
                problems.append((line, child, f"duplicate key (first at line {first})"))
            else:
                first_seen[key_node.value] = line
                lines.setdefault(child, line)
            _index(value_node, child, lines, problems, ancestors=ancestors)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*key, index)
            lines.setdefault(child, item.start_mark.line + 1)
            _index(item, child, lines, problems, ancestors=ancestors)


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
    for index, rule in enumerate(policy_file.tool_call.rules):
        compiled = PolicyRule.from_model(rule, source=path)
        for kind in ("match", "not_match"):
            for number, example in enumerate(getattr(rule.examples, kind)):
                failure = compiled.check_example(example, expect_match=kind == "match")
                if failure is not None:
                    key = ("tool_call", "rules", index, "examples", kind, number)
                    message = f"rule {rule.id!r}: {kind} example {example!r} {failure}"
                    problems.append((_line_of(lines, key), key, message))
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
        return f"a string ({value!r})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__
