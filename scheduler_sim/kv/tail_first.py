"""A freed table's keys, tail first, as runs: what vLLM's cache hands to its LRU
queue when a request lets go of its keyed blocks.

A request's keys (`block_keys.BlockKeys`) are runs of consecutive integers
(a trace's hash entries) and then keys of other kinds (`tail`). Its table is
freed tail first, so the keys go the other way: the tail's keys reversed,
then each run going down, last run first. `TailFirstRuns` keeps them so, a
`range` per run (no int object per key) and a list for the tail's keys, and
the queue takes each piece as a run of its own (`VllmCache.give_back`).
`TailFirstKeys` is a list of such keys, found in runs exactly (`_run_down`).

A request that ended lets go of the blocks of its own content (`block_keys.OWN_KEY`)
for good: nobody can look them up any more, so their keys are never made and the
queue holds them under `NoKeys`, a None per block, as blocks cached (in LRU order,
evicted and counted as any other) that no key names (`VllmCache.release`, ended).
"""
from __future__ import annotations

from bisect import bisect_right
from itertools import chain, repeat
from typing import Iterator

__all__ = ["NoKeys", "TailFirstKeys", "TailFirstRuns", "tail_first"]


class TailFirstKeys(list):
    """The keys of one request's freed table, tail first (a list like any other):
    its integer keys strictly decrease, since a request's integer keys strictly
    increase (`block_keys`: a chain's entry ids increase, and an entry's keys
    with the offset). So the keys of a run within a bucket are exactly as many
    as `_run_down` finds, and a run whose blocks are known to be the ones
    indexed (no duplicate cached) need not be compared with the bucket to be
    set or cleared (`KeyIndex.forget`, `QueueMembers.add`). Any slice or copy
    of it is a plain list, and proves nothing. Since a freed table's keys go to
    the queue as runs (`tail_first.TailFirstRuns`: a `range` going down per run
    of integer keys, which proves the same), this type is made only as part of
    such a run kept when others are cut off it (`run_queue._same_kind`).

    Speed: spares the comparisons of a run's blocks with the bucket's slice (a
    copy of the blocks, reversed, and a compare, both when a freed table joins
    vLLM's queue and when it is evicted): replaying the first 2,000 Mooncake
    requests under vllm, 82.6 million instructions of slices and compares
    saved and 0.979x the instructions in all, when the freed table's own list
    was of this type (before its keys went as runs, benchmarks/README.md,
    "thirteenth steps", helper keys9)."""

    __slots__ = ()


class NoKeys:
    """The keys of `length` blocks that have none: None each, as a sequence (a
    slice of it is one too), without a list made of them."""

    __slots__ = ("length",)

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, where):
        if type(where) is slice:
            return NoKeys(len(range(self.length)[where]))
        range(self.length)[where]  # (IndexError past the end, as a list's)
        return None

    def __iter__(self) -> Iterator:
        return repeat(None, self.length)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NoKeys):
            return other.length == self.length
        if isinstance(other, list):
            return len(other) == self.length and other.count(None) == self.length
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"NoKeys({self.length})"


class TailFirstRuns:
    """The keys of a freed table's first `len` blocks, tail first, as `pieces`:
    ranges going down (runs of consecutive integer keys) and lists (keys of
    other kinds), in that order. Iterated, the keys one by one."""

    __slots__ = ("pieces", "length")

    def __init__(self, pieces: list, length: int) -> None:
        self.pieces = pieces
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator:
        return chain.from_iterable(self.pieces)

    def __repr__(self) -> str:
        return f"TailFirstRuns({self.pieces!r})"

    @property
    def keys(self) -> list:
        """The keys in row order, as a `BlockKeys`'s `keys` (an ended request's
        keys, `VllmCache.release` of an ended request, for a release that drains)."""
        keys = list(self)
        keys.reverse()
        return keys

    def __delitem__(self, where: slice) -> None:
        """`del keys[n:]`, as of a list, and only that: keep the first `n` keys
        (the table's leading blocks, last in this order, are owned elsewhere
        and stay held)."""
        n = where.start if type(where) is slice else None
        if (type(n) is not int or n < 0 or where.stop is not None
                or where.step is not None):
            raise TypeError("TailFirstRuns deletes its keys from a place on only")
        # The keys cut are the last ones, the table's first blocks (a few dozen,
        # mostly within the last piece): the pieces are cut from the end.
        cut = self.length - n
        if cut <= 0:
            return
        pieces = self.pieces
        while cut:
            size = len(pieces[-1])
            if size > cut:
                pieces[-1] = pieces[-1][:size - cut]
                break
            pieces.pop()
            cut -= size
        self.length = n


def tail_first(keys, count: int, keyless: int = 0) -> TailFirstRuns:
    """The keys of the first `count` blocks of `keys` (a `BlockKeys` that knows
    them), tail first, as runs: `keys.keys[count - 1::-1]` without an int object
    made per key; the last `keyless` of them (keys of the request's own content
    that nobody can look up, past every integer key) as `NoKeys`, not made.

    Speed: a request's integer keys had an int object each, made by `ensure`,
    copied reversed here and again into the freed table's own list, freed at
    eviction; the range iterator and `PyLong_FromLong` alone were 5.6% of the
    instructions replaying the first 2,000 Mooncake requests under vllm (helper
    pc8's callgrind). `keys` tail first already (a `TailFirstRuns`: an ended
    request's, `VllmCache.release` of an ended request) are the answer."""
    if type(keys) is TailFirstRuns:
        return keys
    ints = keys.ints
    pieces: list = []
    if keyless:
        pieces.append(NoKeys(keyless))
        count -= keyless
    top = count
    if count > ints:
        pieces.append(keys.tail[count - ints - 1::-1])
        top = ints
    run_pos = keys.run_pos
    run_key = keys.run_key
    r = bisect_right(run_pos, top - 1) - 1 if top else -1
    while r >= 0:
        pos = run_pos[r]
        first = run_key[r]
        pieces.append(range(first + top - 1 - pos, first - 1, -1))
        top = pos
        r -= 1
    return TailFirstRuns(pieces, count + keyless)


def _run_down(keys, p: int, n: int, key: int) -> int:
    """`key_pieces._run_up` for keys going down: how many of `keys[p:p + n]` are key, key - 1,
    ... as far as a binary search finds (a freed table's keys, tail first, go
    down; any other order is caught by comparing the blocks, so this only has
    to be a good guess there)."""
    lo, hi = 1, n - 1
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if keys[p + mid - 1] == key - mid + 1:
            lo = mid
        else:
            hi = mid - 1
    return lo
