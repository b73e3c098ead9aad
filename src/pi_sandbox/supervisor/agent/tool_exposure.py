"""How each tool reaches the model: exposure, ``tool_search`` activations and ranking
(issue 19; pi docs mcp.md "Control tool exposure", extensions.md "Tool Exposure").

Exposures:

- ``direct``: declared to the model while selected (``--tools``, ``defaultTools``,
  ``set_active_tools``); callable from codemode scripts while declared.
- ``deferred``: not declared until ``tool_search`` activates it; callable from codemode
  scripts whenever registered.
- ``codemode``: callable from codemode scripts whenever registered; ``tool_search`` can
  still activate it (pi: "either indirect mechanism").
- ``hidden``: registered but unreachable.

Activations are names, not definitions: a tool whose source registers it later (an MCP
server still connecting, an extension restarted by ``/reload``) is declared as soon as
it is registered again. pi 1.6.0 restored the loaded tools before its MCP servers had
reconnected and dropped the ones it could not find yet (CHANGELOG 1.5.x, #11996 in 1.6.0);
here an activation is dropped only by the session branch that recorded it.

Ranking (`ToolExposure.search`) is BM25 (``rank_bm25``, imported on the first search)
over each tool's name (weighted ×3), description and parameter names (also behind
local ``$ref``), with pi's order of precedence (CHANGELOG 1.5.0 #11331): a tool
matching more distinct query words ranks first, then one with more of them in its
name, then BM25; a tool whose whole name is in the query goes to the top.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pi_sandbox.supervisor.providers.base import ToolDefinition

__all__ = [
    "EXPOSURES",
    "ExposedTool",
    "Exposure",
    "ToolExposure",
    "activations_on_branch",
    "replay_activations",
    "script_identifier",
    "tokenize",
]

Exposure = Literal["direct", "deferred", "codemode", "hidden"]
EXPOSURES: tuple[str, ...] = ("direct", "deferred", "codemode", "hidden")

_NAME_WEIGHT = 3
_WORDS_WEIGHT = 1_000_000.0
_NAME_WORDS_WEIGHT = 1_000.0
_WORD = re.compile(r"\w+", re.UNICODE)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def tokenize(text: str) -> list[str]:
    """Lower-case words of ``text`` in any script (NFKC-normalised, so ``café`` and
    ``cafe\\u0301`` match); ``snake_case``, ``kebab-case`` and ``camelCase`` split
    into their words, and the joined word kept too (``read_file`` → ``read``,
    ``file``, ``read_file``)."""
    text = unicodedata.normalize("NFKC", text)
    words: list[str] = []
    for match in _WORD.finditer(text):
        word = match.group(0)
        pieces = [p for p in _CAMEL.sub("_", word).split("_") if p]
        words.extend(p.lower() for p in pieces)
        if len(pieces) > 1:
            words.append(word.lower())
    return words


def script_identifier(name: str) -> str:
    """``name`` as a Python identifier: every character other than letters, digits and
    ``_`` becomes ``_`` (``mcp__dev-radius__search`` → ``mcp__dev_radius__search``)."""
    return re.sub(r"\W", "_", name, flags=re.ASCII)


def _parameter_words(
    schema: Any, defs: dict[str, Any] | None = None, seen: set[str] | None = None
) -> list[str]:
    """Property names and descriptions of a JSON Schema, following local ``$ref``s
    once each (recursive schemas do not loop; pi CHANGELOG 1.5.1 #11803)."""
    if not isinstance(schema, dict):
        return []
    if defs is None:
        defs = {**(schema.get("definitions") or {}), **(schema.get("$defs") or {})}
    seen = set() if seen is None else seen
    words: list[str] = []
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/") and ref not in seen:
        seen.add(ref)
        words += _parameter_words(defs.get(ref.rsplit("/", 1)[-1]), defs, seen)
    for name, sub in (schema.get("properties") or {}).items():
        words.append(str(name))
        if isinstance(sub, dict) and isinstance(sub.get("description"), str):
            words.append(sub["description"])
        words += _parameter_words(sub, defs, seen)
    for key in ("items", "additionalProperties"):
        words += _parameter_words(schema.get(key), defs, seen)
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or []:
            words += _parameter_words(sub, defs, seen)
    return words


@dataclass(frozen=True)
class ExposedTool:
    """One registered tool: its declaration, exposure and where it comes from
    (``"builtin"``, ``"host"``, an extension's path, ``"mcp:<server>"``)."""

    definition: ToolDefinition
    exposure: Exposure
    source: str


class ToolExposure:
    """The registry of every tool's exposure and the session's ``tool_search``
    activations (issue 19).

    Args:
        selected: whether a ``direct`` tool is selected to be declared (``--tools``,
            ``defaultTools``, ``set_active_tools``); None: every one is.
        reachable: whether the command line lets the tool be reached at all
            (``--exclude-tools``, ``mcp__`` entries of ``--tools``); None: all are.
        chosen: whether an extension named a ``deferred``/``codemode`` tool in
            ``set_active_tools`` (pi: ``setActiveTools`` declares it); None: none.
    """

    def __init__(
        self,
        *,
        selected: Callable[[str], bool] | None = None,
        reachable: Callable[[str], bool] | None = None,
        chosen: Callable[[str], bool] | None = None,
    ) -> None:
        self.selected = selected
        self.reachable = reachable
        self.chosen = chosen
        self._tools: dict[str, ExposedTool] = {}
        self._activated: dict[str, None] = {}
        self._version = 0
        self._index: _Index | None = None
        self._words: dict[str, tuple[ExposedTool, set[str], list[str]]] = {}

    # --- registration ------------------------------------------------------------------

    def register(self, definition: ToolDefinition, exposure: str, source: str) -> None:
        """Add or replace tool ``definition.name``.

        Raises:
            ValueError: ``exposure`` is not one of `EXPOSURES` (names the tool).
        """
        if exposure not in EXPOSURES:
            raise ValueError(
                f"tool {definition.name!r}: exposure {exposure!r} must be one of "
                f"{', '.join(EXPOSURES)}"
            )
        current = self._tools.get(definition.name)
        entry = ExposedTool(definition, exposure, source)  # type: ignore[arg-type]
        if current != entry:
            self._tools[definition.name] = entry
            self._version += 1

    def unregister(self, name: str) -> None:
        """Forget tool ``name`` (its activation, a name, is kept)."""
        self._words.pop(name, None)
        if self._tools.pop(name, None) is not None:
            self._version += 1

    def replace_source(self, source: str, tools: Iterable[tuple[ToolDefinition, str]]) -> None:
        """Make ``tools`` (definition, exposure) the whole set registered by ``source``:
        the others it registered before are unregistered."""
        keep: set[str] = set()
        for definition, exposure in tools:
            self.register(definition, exposure, source)
            keep.add(definition.name)
        for name in [n for n, t in self._tools.items() if t.source == source and n not in keep]:
            self.unregister(name)

    def get(self, name: str) -> ExposedTool | None:
        """The registered tool ``name``, or None."""
        return self._tools.get(name)

    def all(self) -> list[ExposedTool]:
        """Every registered tool, in registration order."""
        return list(self._tools.values())

    def has_exposure(self, exposure: str) -> bool:
        """Whether a reachable tool with ``exposure`` is registered."""
        return any(
            t.exposure == exposure and self._reaches(t.definition.name)
            for t in self._tools.values()
        )

    # --- activation --------------------------------------------------------------------

    @property
    def activated(self) -> list[str]:
        """Names ``tool_search`` activated, in order (registered or not)."""
        return list(self._activated)

    def activate(self, names: Iterable[str]) -> list[str]:
        """Activate the registered, reachable, non-hidden tools among ``names``;
        returns those newly activated (already declared ones are left out)."""
        added: list[str] = []
        declared = {d.name for d in self.declared()}
        for name in names:
            tool = self._tools.get(name)
            if tool is None or tool.exposure == "hidden" or not self._reaches(name):
                continue
            if name in declared or name in self._activated:
                continue
            self._activated[name] = None
            added.append(name)
        return added

    def restore(self, names: Iterable[str]) -> None:
        """Make ``names`` the activations (replayed from the session branch); names of
        tools not registered yet are kept (see the module docstring)."""
        self._activated = dict.fromkeys(names)

    # --- what the model and scripts see ------------------------------------------------

    def _reaches(self, name: str) -> bool:
        return self.reachable is None or self.reachable(name)

    def is_declared(self, name: str) -> bool:
        """Whether tool ``name`` is declared to the model (see `declared`)."""
        tool = self._tools.get(name)
        if tool is None or tool.exposure == "hidden" or not self._reaches(name):
            return False
        if tool.exposure != "direct":
            # A recorded activation only loads tools that need one; a replayed pi
            # loadout naming ``read`` does not override the command line's selection.
            return name in self._activated or (self.chosen is not None and self.chosen(name))
        return tool.exposure == "direct" and (self.selected is None or self.selected(name))

    def declared(self) -> list[ToolDefinition]:
        """The declarations of the next request: selected ``direct`` tools and the
        activated ones, in registration order."""
        return [t.definition for name, t in self._tools.items() if self.is_declared(name)]

    def callable_from_codemode(self, name: str) -> bool:
        """Whether a codemode script may call ``name``: ``deferred`` and ``codemode``
        tools whenever registered and reachable, ``direct`` ones while declared
        (pi docs extensions.md "Tool Exposure"). Never ``hidden`` tools."""
        tool = self._tools.get(name)
        if tool is None or tool.exposure == "hidden" or not self._reaches(name):
            return False
        if tool.exposure in ("deferred", "codemode"):
            return True
        return self.is_declared(name)

    def describe(self, name: str) -> dict[str, Any] | None:
        """``{"name", "description", "parameters"}`` of a reachable tool, or None."""
        tool = self._tools.get(name)
        if tool is None or tool.exposure == "hidden" or not self._reaches(name):
            return None
        d = tool.definition
        return {"name": d.name, "description": d.description, "parameters": d.parameters}

    # --- search ------------------------------------------------------------------------

    def _documents(self) -> _Index:
        if self._index is not None and self._index.version == self._version:
            return self._index
        import numpy as np
        from rank_bm25 import BM25Okapi  # numpy: ~100 ms, paid on the first search only

        names: list[str] = []
        corpus: list[list[str]] = []
        in_names: dict[str, list[int]] = {}
        for name, tool in self._tools.items():
            if tool.exposure == "hidden":
                continue
            d = tool.definition
            cached = self._words.get(name)
            if cached is None or cached[0] is not tool:
                # Tokenising is most of a rebuild: kept per tool, so a server that
                # connects re-tokenises only its own tools.
                name_words = tokenize(name)
                words = name_words * _NAME_WEIGHT
                words += tokenize(d.description)
                words += tokenize(" ".join(_parameter_words(d.parameters)))
                cached = self._words[name] = (tool, set(name_words), words)
            _, name_words_set, words = cached
            for word in name_words_set:
                in_names.setdefault(word, []).append(len(names))
            names.append(name)
            corpus.append(words)
        index = _Index(self._version, names)
        if corpus:
            # rank_bm25 computes the corpus statistics (idf, lengths); scoring adds
            # each query word's postings into dense arrays, so a query costs a few
            # numpy operations whatever the registry's size.
            bm25 = BM25Okapi(corpus)
            postings: dict[str, tuple[list[int], list[float]]] = {}
            for i in range(len(corpus)):
                norm = bm25.k1 * (1 - bm25.b + bm25.b * bm25.doc_len[i] / bm25.avgdl)
                for term, tf in bm25.doc_freqs[i].items():
                    weight = bm25.idf.get(term, 0.0) * tf * (bm25.k1 + 1) / (tf + norm)
                    docs, weights = postings.setdefault(term, ([], []))
                    docs.append(i)
                    weights.append(weight)
            index.postings = {
                term: (np.array(docs, dtype=np.intp), np.array(weights))
                for term, (docs, weights) in postings.items()
            }
            index.in_names = {
                term: np.array(docs, dtype=np.intp) for term, docs in in_names.items()
            }
        self._index = index
        return index

    def _default_mask(self, index: _Index) -> Any:
        """Which indexed tools ``tool_search`` may load now (cached until a
        registration or an activation changes)."""
        import numpy as np

        key = (index.version, tuple(self._activated))
        if index.mask_key != key:
            index.mask = np.array(
                [
                    self._tools[name].exposure in ("deferred", "codemode")
                    and name not in self._activated
                    and self._reaches(name)
                    for name in index.names
                ],
                dtype=bool,
            )
            index.mask_key = key
        return index.mask

    def search(
        self, query: str, limit: int = 5, *, candidates: Callable[[str], bool] | None = None
    ) -> list[ExposedTool]:
        """The best ``limit`` matches for ``query`` among reachable tools that pass
        ``candidates`` (default: ``deferred``/``codemode`` tools not activated yet,
        what ``tool_search`` may load). Tools matching no query word are left out.

        Cost: a few numpy operations per query word, under 5 ms p99 for 1,000 tools
        (bench/bench_tool_search.py); the index is rebuilt after a registration."""
        import numpy as np

        terms = list(dict.fromkeys(tokenize(query)))
        if not terms or limit <= 0:
            return []
        index = self._documents()
        count = len(index.names)
        if count == 0:
            return []
        if candidates is None:
            mask = self._default_mask(index)
        else:
            mask = np.array([self._reaches(n) and candidates(n) for n in index.names], dtype=bool)
        matched = np.zeros(count)
        named = np.zeros(count)
        scores = np.zeros(count)
        lowered = query.lower()
        for term in terms:
            found = index.postings.get(term)
            if found is not None:
                matched[found[0]] += 1
                scores[found[0]] += found[1]
            in_name = index.in_names.get(term)
            if in_name is not None:
                named[in_name] += 1
        # pi's precedence: more distinct query words first, then more of them in the
        # name (a word in the name beats any number of mentions), then BM25.
        key = matched * _WORDS_WEIGHT + named * _NAME_WORDS_WEIGHT + scores
        key[~mask | (matched == 0)] = -np.inf
        top = np.argsort(-key, kind="stable")[: limit + 8]
        chosen = [int(i) for i in top if key[i] != -np.inf]
        # A tool whose whole name is in the query goes first.
        chosen.sort(key=lambda i: index.names[i].lower() not in lowered)
        return [self._tools[index.names[i]] for i in chosen[:limit]]


@dataclass
class _Index:
    version: int
    names: list[str]
    # term -> (document numbers, BM25 weight of the term in each)
    postings: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    # term -> documents whose name has it
    in_names: dict[str, Any] = field(default_factory=dict)
    mask_key: Any = None
    mask: Any = None


def activations_on_branch(entries: Iterable[dict[str, Any]]) -> list[str]:
    """Tool names loaded on a session branch: the ``toolsAdded``/``toolsRemoved`` of
    its ``system`` messages replayed in order (pi docs session-format.md "message")."""
    active: dict[str, None] = {}
    replay_activations(active, entries)
    return list(active)


def replay_activations(active: dict[str, None], entries: Iterable[dict[str, Any]]) -> None:
    """`activations_on_branch`, continued: apply the ``system`` messages of
    ``entries`` to ``active`` (tool name → None, in activation order), for a branch
    folded as it grows (issue 20 target 3)."""
    for entry in entries:
        if entry.get("type") != "message":
            continue
        message = entry.get("message")
        if not isinstance(message, dict) or message.get("role") != "system":
            continue
        for tool in message.get("toolsAdded") or []:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                active[tool["name"]] = None
        for tool in message.get("toolsRemoved") or []:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                active.pop(tool["name"], None)
