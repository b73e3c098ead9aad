"""Which tools are declared to the model: ``--tools``, ``--exclude-tools``,
``--no-builtin-tools``, ``--no-tools`` and the ``defaultTools`` setting (pi docs cli.md
"Tools", settings.md ``defaultTools``).

- By default the built-in tools ``read``, ``bash``, ``edit`` and ``write`` are on (the
  other built-ins — ``ls``, ``grep``, ``find`` — are off) and every extension tool is
  on; ``defaultTools`` in settings changes the built-in default.
- ``--tools a,b*`` with plain names or ``*`` patterns replaces the whole selection
  (built-in and extension tools alike); a list of only ``+name`` / ``-name`` entries
  changes the default selection instead; mixing the two forms is an error.
- ``--no-builtin-tools`` turns the default built-ins off and keeps extension tools;
  ``--no-tools`` turns everything off; ``--exclude-tools`` patterns are applied last.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from pi_sandbox.errors import UsageError

__all__ = [
    "DEFAULT_BUILTIN_TOOLS",
    "MCP_RESOURCE_TOOLS",
    "ToolSelection",
    "is_mcp_tool",
    "parse_tool_list",
]

DEFAULT_BUILTIN_TOOLS = ("read", "bash", "edit", "write")
"""pi 1.6.0's default built-in tools (settings.md ``defaultTools``)."""


MCP_RESOURCE_TOOLS = frozenset(
    {"list_mcp_resources", "list_mcp_resource_templates", "read_mcp_resource"}
)
"""pi's MCP resource tools, which count as MCP tools for ``--tools`` (cli.md)."""


def is_mcp_tool(name: str) -> bool:
    """Whether ``name`` is an MCP tool for ``--tools``/``--exclude-tools`` purposes."""
    return name.startswith("mcp__") or name in MCP_RESOURCE_TOOLS


def parse_tool_list(text: str, *, option: str) -> list[str]:
    """The comma-separated entries of ``text`` (blank entries dropped).

    Raises:
        UsageError: an entry is blank after a ``+``/``-`` sign.
    """
    entries = [e.strip() for e in text.split(",") if e.strip()]
    for entry in entries:
        if entry in ("+", "-"):
            raise UsageError(f"argument {option}: {entry!r} names no tool")
    return entries


@dataclass
class ToolSelection:
    """The resolved selection; ``name in selection`` asks whether a tool is declared.

    Attributes:
        allow: plain ``--tools`` entries (names or ``*`` patterns); None: no allowlist.
        add / remove: ``+name`` / ``-name`` changes to the default selection.
        exclude: ``--exclude-tools`` patterns, applied last.
        builtin_default: the default built-in tools (``defaultTools`` or pi's).
        no_builtin: ``--no-builtin-tools``; no_tools: ``--no-tools``.
        builtins: names of the built-in tools (the tool worker's), set once known.
    """

    allow: list[str] | None = None
    add: set[str] = field(default_factory=set)
    remove: set[str] = field(default_factory=set)
    exclude: list[str] = field(default_factory=list)
    builtin_default: tuple[str, ...] = DEFAULT_BUILTIN_TOOLS
    no_builtin: bool = False
    no_tools: bool = False
    builtins: frozenset[str] = frozenset()

    @classmethod
    def from_options(
        cls,
        *,
        tools: str | None = None,
        exclude_tools: str | None = None,
        no_builtin_tools: bool = False,
        no_tools: bool = False,
        default_tools: Sequence[str] | None = None,
    ) -> ToolSelection:
        """Resolve the command line and the ``defaultTools`` setting.

        Raises:
            UsageError: ``--tools`` mixes plain entries with ``+name``/``-name``
                entries, or a ``+``/``-`` entry uses a pattern.
        """
        selection = cls(no_builtin=no_builtin_tools, no_tools=no_tools)
        if default_tools is not None:
            plain = [t for t in default_tools if not t.startswith(("+", "-"))]
            signed = [t for t in default_tools if t.startswith(("+", "-"))]
            base = list(plain) if plain else list(DEFAULT_BUILTIN_TOOLS)
            base += [t[1:] for t in signed if t.startswith("+") and t[1:] not in base]
            base = [t for t in base if f"-{t}" not in signed]
            selection.builtin_default = tuple(base)
        if tools is not None:
            entries = parse_tool_list(tools, option="--tools")
            signed = [e for e in entries if e.startswith(("+", "-"))]
            if signed and len(signed) != len(entries):
                raise UsageError(
                    "argument --tools: plain names and +name/-name entries cannot be mixed "
                    f"(got {tools!r})"
                )
            if signed:
                for entry in signed:
                    if "*" in entry:
                        raise UsageError(
                            f"argument --tools: {entry!r}: +name/-name take exact tool names; "
                            "use --exclude-tools for patterns"
                        )
                    (selection.add if entry[0] == "+" else selection.remove).add(entry[1:])
            else:
                selection.allow = entries
        if exclude_tools is not None:
            selection.exclude = parse_tool_list(exclude_tools, option="--exclude-tools")
        return selection

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or self.no_tools:
            return False
        if any(fnmatchcase(name, pattern) for pattern in self.exclude):
            return False
        if self.allow is not None:
            return any(fnmatchcase(name, pattern) for pattern in self.allow)
        if name in self.remove:
            return False
        if name in self.add:
            return True
        if name in self.builtins:
            return not self.no_builtin and name in self.builtin_default
        return True

    def reaches(self, name: str) -> bool:
        """Whether tool ``name`` may be reached at all (declared, loaded by
        ``tool_search`` or called from codemode), issue 19 / pi docs cli.md "MCP
        tools": ``--exclude-tools`` patterns remove it; ``--tools`` removes MCP tools
        only once one of its entries starts with ``mcp__``, and then keeps the MCP
        tools it names or matches. Other tools are always reachable (whether they
        are *declared* is ``name in selection``)."""
        if any(fnmatchcase(name, pattern) for pattern in self.exclude):
            return False
        filters_mcp = self.allow is not None and any(e.startswith("mcp__") for e in self.allow)
        if filters_mcp and is_mcp_tool(name):
            return any(fnmatchcase(name, pattern) for pattern in self.allow or [])
        return True

    def enables(self, name: str) -> bool:
        """Whether the selection leaves an off-by-default tool free to turn on by
        itself (``tool_search`` with deferred tools, ``codemode`` with codemode
        tools, issue 19): not removed (``-name``), excluded, or left out of a plain
        ``--tools`` list, and not ``--no-tools``."""
        if self.no_tools or name in self.remove or not self.reaches(name):
            return False
        if self.allow is not None:
            return any(fnmatchcase(name, pattern) for pattern in self.allow)
        return True

    def unknown(self, registered: Iterable[str]) -> list[str]:
        """Names the selection mentions explicitly (``--tools`` names without a
        pattern, ``+name``) that no tool registered — for a notice."""
        known = set(registered)
        named = [n for n in (self.allow or []) if "*" not in n] + sorted(self.add)
        return sorted({n for n in named if n not in known})

    def __bool__(self) -> bool:  # a selection always filters (defaults included)
        return True
