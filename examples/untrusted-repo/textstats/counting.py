"""Counting functions. Pure, standard library only."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

_WORD = re.compile(r"[A-Za-z0-9']+")


@dataclass(frozen=True)
class Stats:
    """Counts for one text, like ``wc`` plus the number of distinct words."""

    lines: int
    words: int
    chars: int
    unique_words: int


def words_of(text: str) -> list[str]:
    """The words of ``text``, lower-cased; punctuation separates words."""
    return [w.lower() for w in _WORD.findall(text)]


def count_text(text: str) -> Stats:
    """Count lines (a final line without a newline still counts), words and characters."""
    words = words_of(text)
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    return Stats(lines=lines, words=len(words), chars=len(text), unique_words=len(set(words)))


def top_words(text: str, n: int = 5) -> list[tuple[str, int]]:
    """The ``n`` most frequent words, ties broken alphabetically."""
    if n < 0:
        raise ValueError("n must be non-negative")
    counts = Counter(words_of(text))
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
