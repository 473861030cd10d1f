"""A set of block numbers as one byte per number: the free cached blocks of
vLLM's cache in a compact cache (a fleet's replica), where a `set` would take
about 70 bytes a block."""
from __future__ import annotations

import itertools
from operator import itemgetter
from typing import Iterator

__all__ = ["BlockSet"]


class BlockSet:
    """A set of block numbers (non-negative integers) as one byte per number up to
    the highest one added, and a count: the members of vLLM's LRU queue in a
    compact cache (a `set` takes about 70 bytes a member). `in`, `len`, `remove`
    and `clear` are a set's; iteration is in ascending order. Blocks join and
    leave in bulk only as the queue moves them, each once (`add_new`,
    `remove_members`), which lets those loops skip the checks a set makes.
    `count_in` and `intersection` read the bytes of a list of blocks in one
    C call (`operator.itemgetter`), not one Python call per block."""

    __slots__ = ("flags", "size")

    def __init__(self) -> None:
        self.flags = bytearray()
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __contains__(self, block: object) -> bool:
        flags = self.flags
        return type(block) is int and 0 <= block < len(flags) and flags[block] == 1

    def __iter__(self) -> Iterator[int]:
        return itertools.compress(itertools.count(), self.flags)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (BlockSet, set, frozenset)):
            return len(self) == len(other) and set(self) == set(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"BlockSet({list(self)})"

    def add_new(self, blocks: list[int]) -> None:
        """Add `blocks`, none of which is in, each once (blocks freed together)."""
        if not blocks:
            return
        flags = self.flags
        top = max(blocks)
        if top >= len(flags):
            flags.extend(bytes(top + 1 - len(flags)))
        for block in blocks:
            flags[block] = 1
        self.size += len(blocks)

    def remove_members(self, blocks: list[int]) -> None:
        """Take out `blocks`, every one of which is in, each once (blocks evicted)."""
        flags = self.flags
        for block in blocks:
            flags[block] = 0
        self.size -= len(blocks)

    def remove(self, block: int) -> None:
        """Take `block` out; KeyError if it is not in."""
        flags = self.flags
        if not (0 <= block < len(flags) and flags[block]):
            raise KeyError(block)
        flags[block] = 0
        self.size -= 1

    def clear(self) -> None:
        """Take every block out (as many bytes are kept for the next ones)."""
        if self.size:
            self.flags = bytearray(len(self.flags))
            self.size = 0

    def _flags_of(self, blocks: list[int]) -> tuple[int, ...] | None:
        """The byte of each of `blocks`, in order, read in C (`itemgetter` over the
        bytes); None if one lies past the last byte (not a member)."""
        flags = self.flags
        if len(blocks) < 2:
            return tuple(flags[b] if b < len(flags) else 0 for b in blocks)
        if max(blocks) >= len(flags):
            return None
        return itemgetter(*blocks)(flags)

    def count_in(self, blocks: list[int]) -> int:
        """How many of `blocks` are members.

        Speed: the bytes read by one `itemgetter` call, not a generator's step per
        block: 150 against 560 ns a block (timeit, 1,000 blocks, on this loaded
        2-core machine); a fleet of 64 replicas replaying Mooncake calls this
        12,031 times."""
        found = self._flags_of(blocks)
        if found is None:
            flags = self.flags
            end = len(flags)
            return sum(1 for b in blocks if b < end and flags[b])
        return found.count(1)

    def intersection(self, blocks: list[int]) -> set[int]:
        """The members among `blocks`, as a set (as `set.intersection`).

        Speed: the bytes read by one `itemgetter` call and picked with `compress`,
        both in C: 210 against 1,500 ns a block for `filter(blocks.__contains__,
        ...)` (timeit, 1,000 blocks, this loaded machine); vLLM's cache in a fleet
        looks up 491,567 blocks this way replaying Mooncake over 64 replicas."""
        found = self._flags_of(blocks)
        if found is None:
            flags = self.flags
            end = len(flags)
            return {b for b in blocks if b < end and flags[b]}
        return set(itertools.compress(blocks, found))
