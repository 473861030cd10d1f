"""The "did you mean" hint for a misspelt name: a policy, a model, a GPU, an
option, a record type, a request id. Every layer that refuses a name words the
hint this way (io/problems re-exports it for the file readers)."""
from __future__ import annotations

from typing import Iterable

__all__ = ["closest", "did_you_mean"]


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice `word` is most likely a misspelling of, or None. A choice equal to
    `word` but for case wins (`vLLM` -> 'vllm', `H100-SXM` -> 'h100-sxm'), then the
    first choice that `word` begins (`h100` -> 'h100-sxm'), else the closest by
    difflib's ratio (at least 0.6), case ignored."""
    choices = list(choices)
    low = word.lower()
    for choice in choices:
        if choice.lower() == low:
            return choice
    for choice in choices:
        if len(low) >= 3 and choice.lower().startswith(low):
            return choice
    # Imported here, when a name was not found as given: difflib (and heapq behind
    # it) is about 1 ms of every process's start-up otherwise (-X importtime;
    # benchmarks/README.md, "thirteenth steps", helper st9).
    import difflib
    lowered = {choice.lower(): choice for choice in reversed(choices)}  # the first wins
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[close[0]] if close else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean 'x'?)` naming the choice `word` is closest to, or ''."""
    choice = closest(word, choices)
    return f" (did you mean {choice!r}?)" if choice is not None else ""
