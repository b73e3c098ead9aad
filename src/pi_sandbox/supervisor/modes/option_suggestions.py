"""Did-you-mean for mistyped command-line options (issue 17 §5:
``unknown option --modle (did you mean --model?)``)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["closest_option"]


def _edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and
    swaps of two adjacent characters each cost 1 (``--modle`` → ``--model`` is 1)."""
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(rows[i - 1][j] + 1, row[j - 1] + 1, rows[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[i - 2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


def closest_option(name: str, known: Iterable[str]) -> str | None:
    """The long option of ``known`` that ``name`` most likely misspells, or None.

    A candidate qualifies within 1 edit for names up to 6 characters after the
    dashes, 2 edits for longer ones; ties go to the candidate of the same length
    (a swap rather than a dropped letter), then the alphabetically first.
    """
    bare = name.lstrip("-")
    limit = 1 if len(bare) <= 6 else 2
    scored = []
    for option in known:
        if not option.startswith("--") or option == name:
            continue
        distance = _edit_distance(bare, option[2:])
        if distance <= limit:
            scored.append((distance, len(option) != len(name), option))
    return min(scored)[2] if scored else None
