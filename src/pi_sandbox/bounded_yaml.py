"""YAML read within bounds: one walker for every YAML file pi reads whole (policy
files, scripted-model scripts; issue 13 §4).

PyYAML's ``SafeLoader`` builds whatever a document describes: aliases can repeat
one node exponentially ("billion laughs"), an alias can contain itself, and
nesting can run past the stack. `index_yaml` walks the composed node graph
*before* anything is constructed, counting every node visit (an alias counts each
time it is used), and reports what is over a bound; it also records the line of
every key and list item and reports duplicate keys, which callers use to name
lines in their own errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

__all__ = ["MAX_DEPTH", "MAX_NODES", "KeyPath", "Problem", "YamlIndex", "index_yaml"]

MAX_NODES = 100_000
"""Most YAML nodes visited (aliases count each time they are used: no "billion laughs")."""

MAX_DEPTH = 64
"""Deepest YAML nesting accepted."""

KeyPath = tuple[str | int, ...]
Problem = tuple[int, KeyPath, str]
"""``(line, key path, message)``; lines are 1-based."""


@dataclass
class YamlIndex:
    """What `index_yaml` found.

    Attributes:
        lines: the line of every key path (``()`` is the root).
        problems: every problem, duplicate keys included, in document order.
        over_bounds: the subset of ``problems`` that make the document unsafe to
            construct (recursive alias, more than `MAX_NODES` nodes, nesting deeper
            than `MAX_DEPTH`): a caller must not construct it when this is non-empty.
    """

    lines: dict[KeyPath, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    over_bounds: list[Problem] = field(default_factory=list)


def index_yaml(
    root: yaml.Node, *, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH
) -> YamlIndex:
    """Walk ``root`` (from ``loader.get_single_node()``) within the bounds.

    Iterates at most ``max_nodes`` node visits and ``max_depth`` levels, so it is
    itself safe on any document.
    """
    index = YamlIndex(lines={(): root.start_mark.line + 1})
    budget = [max_nodes]
    _walk(root, (), index, ancestors=set(), budget=budget, max_nodes=max_nodes, max_depth=max_depth)
    return index


def _bound(index: YamlIndex, problem: Problem) -> None:
    index.problems.append(problem)
    index.over_bounds.append(problem)


def _walk(
    node: yaml.Node,
    key: KeyPath,
    index: YamlIndex,
    *,
    ancestors: set[int],
    budget: list[int],
    max_nodes: int,
    max_depth: int,
) -> None:
    if id(node) in ancestors:
        _bound(index, (node.start_mark.line + 1, key, "recursive YAML alias"))
        return
    budget[0] -= 1
    if budget[0] == -1:
        _bound(
            index,
            (node.start_mark.line + 1, key, f"more than {max_nodes} YAML nodes (alias expansion?)"),
        )
    if budget[0] < 0:
        return
    if len(ancestors) >= max_depth:
        _bound(index, (node.start_mark.line + 1, key, f"nested deeper than {max_depth} levels"))
        return
    ancestors = ancestors | {id(node)}
    bounds = {"budget": budget, "max_nodes": max_nodes, "max_depth": max_depth}
    if isinstance(node, yaml.MappingNode):
        first_seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            child = (*key, key_node.value)
            line = key_node.start_mark.line + 1
            if key_node.value in first_seen and key_node.value != "<<":
                first = first_seen[key_node.value]
                index.problems.append((line, child, f"duplicate key (first at line {first})"))
            else:
                first_seen[key_node.value] = line
                index.lines.setdefault(child, line)
            _walk(value_node, child, index, ancestors=ancestors, **bounds)  # type: ignore[arg-type]
    elif isinstance(node, yaml.SequenceNode):
        for position, item in enumerate(node.value):
            child = (*key, position)
            index.lines.setdefault(child, item.start_mark.line + 1)
            _walk(item, child, index, ancestors=ancestors, **bounds)  # type: ignore[arg-type]
