"""The allocator's full check: the part of `BlockAllocator` that verifies, in
O(blocks), that its counters agree with its tables, pins, drain queue and free
pools, and asks the prefix cache to check its own invariants (tests, and an
engine built with `audit=True`; the O(1) check of every boundary is
`BlockAllocator.check`).
"""
from __future__ import annotations

from ..records.errors import InvariantError
from .sharing import owner_counts, run_size_fault

__all__ = ["Audit"]


class Audit:
    """`BlockAllocator.audit` (see the module docstring)."""

    def audit(self) -> None:
        """The full O(blocks) check used by tests: counters agree with the tables."""
        self.check()
        credits = sum(self._credits.values())
        if credits != self.reserved:
            raise InvariantError(f"sum of credits({credits}) == reserved({self.reserved}) is false")
        # The decode cohort's counted blocks (counted_blocks.py) are held and
        # granted, in no table yet: a term of each equation while there are any.
        counted = self._counted
        grown = sum(self._grown.values())
        if grown + len(counted) != self.granted:
            term = f" + counted({len(counted)})" if counted else ""
            raise InvariantError(f"sum of grown({grown}){term} == granted({self.granted}) "
                                 "is false")
        referenced = {b for table in self._tables.values() for b in table}
        pinned = {b for blocks in self._pin_sets.values() for b in blocks}
        if len(referenced | pinned) + len(counted) != self.held or \
                len(set(counted)) != len(counted) or not (referenced | pinned).isdisjoint(counted):
            term = f" + distinct counted({len(set(counted))})" if counted else ""
            raise InvariantError(
                f"referenced or pinned blocks({len(referenced | pinned)}){term} == "
                f"held({self.held}) is false")
        extra = owner_counts(self._extra)  # (counted per run: `sharing.Owners`)
        for block in referenced:
            owners = sum(t.count(block) for t in self._tables.values())
            if owners != 1 + extra.get(block, 0):
                raise InvariantError(f"block {block}: owners({owners}) == "
                                     f"1 + extra({extra.get(block, 0)}) is false")
        fault = run_size_fault(self._extra)
        if fault is not None:
            raise InvariantError(fault)
        if any(b not in referenced for b in self._extra):
            raise InvariantError("a block with extra owners is in no table")
        pin_counts: dict[int, int] = {}
        for blocks in self._pin_sets.values():
            for b in blocks:
                pin_counts[b] = pin_counts.get(b, 0) + 1
        if pin_counts != self._pins:
            raise InvariantError(f"pins({self._pins}) == pins of the handles({pin_counts}) "
                                 "is false")
        if self._orphans != set(pinned) - referenced:
            raise InvariantError(f"orphans({sorted(self._orphans)}) == pinned blocks in no "
                                 f"table({sorted(set(pinned) - referenced)}) is false")
        if self._shared and (self._plain_mark > len(self._free)
                             or self._plain_set != set(self._free[:self._plain_mark])
                             or self._draining_set != {
                b for _, blocks, keyed, _ in self._drain for b in blocks + keyed}):
            raise InvariantError("the plain free and draining sets disagree with their queues")
        for rid, credit in self._credits.items():
            if self._grown[rid] > credit:
                raise InvariantError(
                    f"request {rid!r}: allocated({self._grown[rid]}) <= credit({credit}) is false")
        draining = sum(len(b) + len(k) for _, b, k, _ in self._drain)
        if draining != self.draining:
            raise InvariantError(f"drain queue({draining}) == draining({self.draining}) is false")
        carried: list = []
        for _, _, keyed, keys in self._drain:
            if len(keyed) != len(keys):
                raise InvariantError("draining keyed blocks and their keys differ in number")
            carried += zip(keyed, keys)
        free = set(self._free) | set(self._cached_free)
        if len(free) + self.num_blocks - self._fresh != self.free or \
                any(b >= self._fresh for b in free):
            raise InvariantError(f"distinct free blocks({len(free)}) + never used "
                                 f"({self.num_blocks - self._fresh}) == free({self.free}) is false")
        if free & (referenced | pinned):
            raise InvariantError("a free block is still referenced or pinned")
        if not free.isdisjoint(counted):
            raise InvariantError("a free block is still counted")
        self._cache.audit(self._tables, carried, self._orphans)
