"""How a reader of files reports what is wrong: every problem of a file as
`file:line: what is wrong, got what`, in line order, the first `MAX_PROBLEMS`
shown and the rest counted; and the "did you mean" hint for a misspelt name.

Traces (`trace_validator`), sweep shards read back (`sweep_merge`) and the
commands that read other files word their problems this way.
"""
from __future__ import annotations

import heapq

from ..records.errors import TraceError
from ..records.spelling import did_you_mean

__all__ = ["MAX_PROBLEMS", "Problems", "did_you_mean", "capped"]

MAX_PROBLEMS = 50


class Problems:
    """Collects messages from anywhere in the file; reports them in line order."""

    def __init__(self, name: str) -> None:
        self.name = name
        # (line, order found, text): the first MAX_PROBLEMS in line order are kept
        # (a max-heap by negated keys), the others only counted.
        self.found: list[tuple[int, int, str]] = []
        self.count = 0
        self.hints: list[str] = []  # lines said after the problems (what to do about them)

    def add(self, line: int, text: str, order: int | None = None) -> None:
        """Note a problem on `line` (`order` ranks problems of one line; default: as found)."""
        self.count += 1
        entry = (-line, -(self.count if order is None else order), text)
        if len(self.found) < MAX_PROBLEMS:
            heapq.heappush(self.found, entry)
        elif entry > self.found[0]:
            heapq.heapreplace(self.found, entry)

    def raise_if_any(self) -> None:
        """Raise TraceError with the problems in line order, the first MAX_PROBLEMS."""
        if self.count:
            ordered = sorted((-line, -order, text) for line, order, text in self.found)
            messages = [f"{self.name}:{line}: {text}" for line, _, text in ordered]
            if self.count > MAX_PROBLEMS:
                messages.append(f"{self.name}: ... and {self.count - MAX_PROBLEMS} more errors")
            raise TraceError(messages + self.hints)


def capped(problems: list[str], name: str) -> list[str]:
    """`problems` as a file's messages: the first MAX_PROBLEMS, then a count of the rest."""
    if len(problems) <= MAX_PROBLEMS:
        return problems
    return problems[:MAX_PROBLEMS] + [f"{name}: ... and {len(problems) - MAX_PROBLEMS:,} "
                                      "more errors"]
