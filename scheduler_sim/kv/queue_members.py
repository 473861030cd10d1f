"""The members of vLLM's LRU queue of free cached blocks, kept by key: which
blocks the queue holds (`in`, `len`), set and cleared a run of keys at a time.

A free cached block keeps its key, and nearly every key of a trace's hash ids
is an integer indexed in a bucket of `KeyIndex` (one block per key). So
membership is a flag per key rather than per block: `flags[node]` is a
bytearray beside the index's bucket `node` (the same width), whose byte at a
key's offset is 1 while the block indexed to that key is in the queue. A
request's keys run on consecutive integers, and its table is freed and
evicted tail first, so its blocks join and leave the queue as a few runs of
keys going down: each run is a compare of the bucket's slice with the blocks
(are they the indexed blocks?) and one slice of flags written; not even the
compare when the keys go down by one (a `range` of a freed table's run of
keys, or `TailFirstKeys`: runs found exactly) and no duplicate is cached
(every block is indexed). Every other
free block (a key of another kind: a request's own content, its decodes'; a
duplicate, a block whose key indexes another block; or no key, None: an ended
request's own content, `tail_first.NoKeys`) is a member of the set `loose`.

Why: the queue's members were a `set` of blocks, each block inserted when its
table was freed and deleted when evicted: about 9.1 million inserts and 9.05
million deletes replaying the Mooncake trace under vllm, 12.8% of a sampled
profile (helper pc5's recording: 29 ns a block, nothing done to the set paid),
while those blocks come in about 12,000 freed tables and 87,000 runs of keys
evicted.

Questions by block need a key: a look-up's hits and a count of how many of
them are free (`hit_found`, `count_found`) come with the keys they were found
with (checked against the index run by run: a run whose bucket names other
blocks is answered block by block). A question by block alone (`in`, a pin's
check, the audit) reads the queue itself: the set of its blocks is made once
and kept until the queue changes (`_members`).
"""
from __future__ import annotations

from itertools import compress
from typing import Callable, Iterator

from .key_index import KeyIndex
from .key_pieces import _pieces
from .tail_first import NoKeys, TailFirstKeys, _run_down

__all__ = ["QueueMembers"]


class QueueMembers:
    """The blocks in vLLM's LRU queue, by key (see the module docstring): `len`,
    `in`, iteration (least recently freed first) and `bool` are a container's.
    `queue` returns the queue's blocks and their keys, in order (`RunQueue.queue_items`)."""

    __slots__ = ("index", "flags", "loose", "size", "queue", "_snapshot", "_width",
                 "_ones", "_zeros")

    def __init__(self, index: KeyIndex, queue: Callable[[], tuple[list[int], list]]) -> None:
        self.index = index
        self.flags: dict[int, bytearray] = {}
        self.loose: set[int] = set()
        self.size = 0
        self.queue = queue
        self._snapshot: set[int] | None = None  # the queue's blocks, while it is unchanged
        self._width = 0
        self._ones = self._zeros = b""

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __contains__(self, block: object) -> bool:
        return block in self.loose or block in self._members()

    def __iter__(self) -> Iterator[int]:
        return iter(self.queue()[0])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (QueueMembers, set, frozenset)):
            return len(self) == len(other) and set(self) == set(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"QueueMembers({self.queue()[0]})"

    def changed(self) -> None:
        """The queue changed (a hit took its blocks out): the set made from it
        is out of date. (A hit takes its blocks out here before the cache marks
        their entries stale, so a set made in between still names them.)"""
        self._snapshot = None

    def _members(self) -> set[int]:
        """The queue's blocks as a set, made from the queue when first asked after
        a change (questions by block alone: a pin's check, a share one by one)."""
        members = self._snapshot
        if members is None:
            members = self._snapshot = set(self.queue()[0])
        return members

    # --- blocks in ----------------------------------------------------------------

    def add(self, blocks: list[int], keys: list, indexed: bool = False) -> None:
        """`blocks`, carrying `keys` (position for position), join the queue: a
        freed table's keyed blocks, tail first, so its integer keys go down.
        `indexed`: each of `blocks` is the block the index names for its key (no
        duplicate is cached); with keys that go down by one (a freed table's run,
        a `range`, or `TailFirstKeys`: found in runs exactly) a run's flags are
        then set without comparing its blocks with the bucket's slice."""
        count = len(blocks)
        if not count:
            return
        self.size += count
        self._snapshot = None
        if type(keys) is NoKeys:  # (blocks without a key: `VllmCache.release`, ended)
            self.loose.update(blocks)
            return
        index = self.index
        width = index.width
        if width != self._width:  # (the index's width is set before any integer key)
            self._width = width
            self._ones, self._zeros = b"\x01" * width, bytes(width)
        ones = self._ones
        # (a run of keys going down as a `range` is found exactly too)
        exact = indexed and (type(keys) is TailFirstKeys or type(keys) is range)
        buckets = index.buckets
        flags = self.flags
        loose = self.loose
        p = 0
        while p < count:
            key = keys[p]
            if type(key) is not int:
                q = p + 1
                while q < count and type(keys[q]) is not int:
                    q += 1
                loose.update(blocks[p:q])
                p = q
                continue
            node, off = divmod(key, width)
            n = off + 1 if off + 1 < count - p else count - p
            if n > 1 and keys[p + n - 1] != key - n + 1:
                n = _run_down(keys, p, n, key)
            bucket = buckets.get(node)
            fb = flags.get(node)
            if fb is None:
                fb = flags[node] = bytearray(width)
            if n > 1:
                lo = off - n + 1
                if exact:
                    fb[lo:off + 1] = ones[:n]
                    p += n
                    continue
                window = blocks[p:p + n]
                window.reverse()
                if bucket is not None and bucket[lo:off + 1] == window:
                    fb[lo:off + 1] = ones[:n]
                    p += n
                    continue
            block = blocks[p]
            if bucket is not None and bucket[off] == block:
                fb[off] = 1
            else:
                loose.add(block)  # a duplicate: its key indexes another block
            p += 1

    def add_runs(self, parts: list[list[int]], pieces: list, indexed: bool = False) -> None:
        """`add` of each of `parts` with its keys, the piece of a freed table's
        `TailFirstRuns` at the same place, in one call: with `indexed`, a piece
        that is a run of keys going down (a `range`) sets its flags bucket by
        bucket from its ends alone (its blocks are the indexed ones: see `add`),
        and every other piece is `add`ed.

        Speed: a table freed under vllm with prefix caching on the Mooncake trace
        joins the queue as 2.7 pieces (33,608 in 12,334 releases), each an `add`
        and its setup; now one call a table (benchmarks/README.md, "twenty-ninth
        steps", helper rel31)."""
        if not indexed:
            for part, piece in zip(parts, pieces):
                self.add(part, piece)
            return
        index = self.index
        width = index.width
        if width != self._width:  # (as in `add`)
            self._width = width
            self._ones, self._zeros = b"\x01" * width, bytes(width)
        ones = self._ones
        flags = self.flags
        added = 0
        for part, piece in zip(parts, pieces):
            if type(piece) is not range:
                self.add(part, piece, True)
                continue
            count = len(piece)
            if not count:
                continue
            added += count
            # The keys from `top` down to `low` by one, a bucket's slice at a time
            # from the top (the order `add` walks them in).
            top = piece[0]
            low = top - count + 1
            while top >= low:
                node, off = divmod(top, width)
                n = off + 1 if off + 1 < top - low + 1 else top - low + 1
                fb = flags.get(node)
                if fb is None:
                    fb = flags[node] = bytearray(width)
                fb[off - n + 1:off + 1] = ones[:n]
                top -= n
        if added:
            self.size += added
            self._snapshot = None

    # --- blocks out ----------------------------------------------------------------

    def remove_pair(self, block: int, key) -> None:
        """`block`, carrying `key`, leaves the queue (before the index forgets it)."""
        self.size -= 1
        self._snapshot = None
        if type(key) is int:
            node, off = divmod(key, self.index.width)
            fb = self.flags.get(node)
            if fb is not None and fb[off]:
                bucket = self.index.buckets.get(node)
                if bucket is not None and bucket[off] == block:
                    fb[off] = 0
                    if fb == self._zeros:
                        del self.flags[node]
                    return
        self.loose.remove(block)

    def remove_pairs(self, blocks: list[int], keys: list, start: int = 0) -> None:
        """Each of `blocks` leaves the queue, carrying `keys[start + i]` (blocks
        taken with a duplicate cached, or the whole queue: rare; before the index
        forgets them): pair by pair."""
        for block, key in zip(blocks, keys[start:start + len(blocks)]):
            self.remove_pair(block, key)

    def evict(self, blocks: list[int], keys: list, start: int) -> None:
        """`blocks` (each its key's only block in the index: no duplicate cached)
        leave the queue and the index forgets their keys, `keys[start + i]` for
        `blocks[i]`, both in one walk over the runs (`KeyIndex.forget`)."""
        self.size -= len(blocks)
        self._snapshot = None
        if type(keys) is NoKeys:  # (blocks without a key, all loose: nothing to forget)
            self.loose.difference_update(blocks)
            return
        self.index.forget(keys, start, blocks, self)

    def evict_down(self, top: int, blocks: list[int]) -> None:
        """`evict` of `blocks` carrying the keys `top`, `top - 1`, ... (a run of a
        freed table's keys going down, a `range`, with no duplicate cached: each
        block flagged under its key, the one the index names): per bucket, its
        count lowered and a slice of its slots and of its flags cleared, or all
        three dropped with its last blocks; no key read, no block compared but a
        piece of one (as `forget` checks). Speed: was `evict` and `KeyIndex.forget`
        a run (see `RunQueue._pop_oldest_forgetting`)."""
        index = self.index
        filled = index.filled
        if filled is None:  # (an index that keeps no counts: the general way)
            self.evict(blocks, range(top, top - len(blocks), -1), 0)
            return
        end = len(blocks)
        self.size -= end
        self._snapshot = None
        index.changes += 1
        buckets = index.buckets
        flags = self.flags
        width = index.width
        zeros = self._zeros
        p = 0
        while p < end:
            node, off = divmod(top - p, width)
            n = off + 1 if off < end - p else end - p
            if n == 1 and buckets[node][off] != blocks[p]:  # (as `forget` checks)
                raise KeyError(top - p)
            left = filled[node] - n
            if left:
                filled[node] = left
                buckets[node][off - n + 1:off + 1] = [None] * n
                flags[node][off - n + 1:off + 1] = zeros[:n]
            else:  # (its last blocks: the bucket, its count and its flags go)
                del buckets[node], filled[node], flags[node]
            p += n

    def evict_one(self, block: int, key) -> None:
        """`remove_pair(block, key)`, then the index forgets `key` (no duplicate
        cached), the bucket found once for both (a take of one block). Speed: was
        those two calls (3,955 takes on the first 2,000 Mooncake requests under
        vllm, 27,934 on the whole trace; see `RunQueue._pop_oldest_forgetting`)."""
        index = self.index
        if type(key) is not int or index.filled is None:
            self.remove_pair(block, key)
            if key is not None:  # (None: a block without a key, nothing to forget)
                del index[key]
            return
        node, off = divmod(key, index.width)
        bucket = index.buckets.get(node)
        if bucket is None or bucket[off] is None:
            raise KeyError(key)
        self.size -= 1
        self._snapshot = None
        fb = self.flags.get(node)
        if fb is not None and fb[off] and bucket[off] == block:
            fb[off] = 0
            if fb == self._zeros:
                del self.flags[node]
        else:
            self.loose.remove(block)
        index.changes += 1
        filled = index.filled
        if filled[node] > 1:
            filled[node] -= 1
            bucket[off] = None
        else:
            del index.buckets[node], filled[node]

    def clear(self) -> None:
        """Every block leaves the queue."""
        self.flags.clear()
        self.loose.clear()
        self.size = 0
        self._snapshot = None

    # --- a look-up's hits ----------------------------------------------------------

    def _runs_found(self, blocks: list[int], keys) -> Iterator[tuple]:
        """For `blocks` that a look-up found for the leading `keys` (a list, integer
        keys first, increasing; or a request's `BlockKeys`, read as runs):
        (node, offset, p, n) for each run of integer keys of blocks p to p + n
        within a bucket that names exactly `blocks[p:p + n]`, and (None, 0, p, n)
        for blocks to ask about by block alone (the rest)."""
        end = len(blocks)
        index = self.index
        walked = index.walked_pieces(keys, blocks)
        if walked is not None:  # (the look-up's own walk: each run named so)
            pieces, p = walked
            for q, node, off, n in pieces:
                yield node, off, q, n
            if p < end:
                yield None, 0, p, end - p
            return
        pieces, p, _ = _pieces(keys, 0, end, index.width)
        buckets = index.buckets
        for q, node, off, n in pieces:
            bucket = buckets.get(node)
            if bucket is not None and bucket[off:off + n] == blocks[q:q + n]:
                yield node, off, q, n
            else:
                yield None, 0, q, n
        if p < end:
            yield None, 0, p, end - p

    def count_found(self, blocks: list[int], keys: list) -> int:
        """How many of `blocks` are in the queue, `blocks` being what a look-up
        found for the leading `keys`: a count of a slice of flags per run of
        keys whose bucket names these blocks."""
        flags = self.flags
        count = 0
        for node, off, p, n in self._runs_found(blocks, keys):
            if node is None:
                count += sum(1 for block in blocks[p:p + n] if block in self)
            else:
                fb = flags.get(node)
                if fb is not None:
                    count += fb.count(1, off, off + n)
        return count

    def hit_found(self, blocks: list[int], keys: list) -> set[int]:
        """Take out of the queue every one of `blocks` in it (found for the leading
        `keys`, as for `count_found`); return the set of those."""
        flags = self.flags
        zeros = self._zeros
        found: set[int] = set()
        for node, off, p, n in self._runs_found(blocks, keys):
            if node is None:
                found.update(self.take_blocks(blocks[p:p + n]))
                continue
            fb = flags.get(node)
            if fb is None:
                continue
            free = fb[off:off + n]
            taken = free.count(1)
            if taken:
                found.update(compress(blocks[p:p + n], free))
                fb[off:off + n] = zeros[:n]
                if fb == zeros:
                    del flags[node]
                self.size -= taken
                self._snapshot = None
        return found

    def take_blocks(self, blocks: list[int]) -> list[int]:
        """Take out of the queue those of `blocks` in it, each by its key read from
        the queue (a question by block alone); return them."""
        members = [block for block in blocks if block in self]
        if members:
            key_of = dict(zip(*self.queue()))
            for block in members:
                self.remove_pair(block, key_of[block])
        return members

    def held(self, block: int, key) -> bool:
        """Whether `block` is the one the index names for `key` and not in the queue
        (with no block draining or pinned orphaned, a block so indexed is held)."""
        index = self.index
        if index.get(key) != block:
            return False
        if type(key) is not int:
            return block not in self.loose
        node, off = divmod(key, index.width)
        flags = self.flags.get(node)
        return flags is None or not flags[off]

    def remove(self, block: int) -> None:
        """Take `block` out of the queue, by block alone (a single hit)."""
        if block not in self:
            raise KeyError(block)
        self.take_blocks([block])

    def promote(self, key, block: int) -> None:
        """`block`, a duplicate of `key`, became the block the index names for it:
        if it is in the queue it moves from `loose` to the key's flag."""
        if block in self.loose and type(key) is int:
            self.loose.remove(block)
            node, off = divmod(key, self.index.width)
            fb = self.flags.get(node)
            if fb is None:
                fb = self.flags[node] = bytearray(self.index.width)
            fb[off] = 1

    # --- the audit -----------------------------------------------------------------

    def check(self, blocks: list[int], keys: list) -> None:
        """Raise ValueError unless the members are exactly `blocks` (the queue's),
        carrying `keys`: each flagged under its key if the index names it there,
        else in `loose`."""
        if len(blocks) != self.size or len(set(blocks)) != len(blocks):
            raise ValueError("the LRU queue's runs disagree with its blocks")
        index = self.index
        width = index.width
        flagged = set()
        loose = set()
        for block, key in zip(blocks, keys):
            if type(key) is int and index.get(key) == block:
                flagged.add(divmod(key, width))
            else:
                loose.add(block)
        held = {(node, off) for node, fb in self.flags.items()
                for off in range(len(fb)) if fb[off]}
        if held != flagged or loose != self.loose:
            raise ValueError("the LRU queue's runs disagree with its blocks")
