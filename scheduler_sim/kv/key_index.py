"""The index of vLLM's prefix cache: each cached key to the block a look-up finds,
kept per hash entry for the keys of a trace's hash ids.

A trace with `block_hashes` gives the blocks of one hash entry consecutive
integer keys (`block_keys`: entry id * slots + offset), and the blocks of a
request's entries are registered, looked up and evicted together. So an
integer key is not an item of a dict here: keys are grouped in *buckets* of
`width` consecutive integers (`key // width`, the entry id when `width` is
the entries' slots), and `buckets[key // width]` is a list of `width` items,
the block of each key in the bucket or None. Registering, finding or
forgetting the keys of one entry is then a few list slices, not one dict
operation per block: replaying the Mooncake trace (hash entries of 512
tokens, blocks of 16) that is 32 keys a bucket, and about 8.4 million keys
registered and as many forgotten. Any other key (bytes: token ids, a
request's own content) is an item of the dict `plain`.

`width` only groups keys: any positive width gives the same answers (a
bucket may then straddle entries, or hold part of one); the cache sets it
from the first keys it indexes. vLLM's cache makes a bucket span several
entries (`VllmCache.ENTRIES_PER_BUCKET`): a request's new entries are
interned one after the other, so their keys run on across entries, and each
run of consecutive keys within a bucket is one slice (its end found by a
binary search, key_pieces.py's `_run_up`, `_run_down`, when it stops inside the
bucket).
`KeyIndex` answers as a dict would (`in`, `get`, `[]`, `len`, `items`, `==`
with a dict) for the per-key paths and the audit.

A request's keys come as a list (the radix tree's) or as the request's
`BlockKeys` itself, whose integer keys are kept as runs (first key, count):
vLLM's cache hands those, and a run is cut at the buckets without an int
object made per key (key_pieces.py's `_pieces`).
"""
from __future__ import annotations

from bisect import bisect_left
from collections import deque
from typing import Hashable, Iterator

from .key_pieces import _pieces
from .tail_first import NoKeys, TailFirstKeys, _run_down

__all__ = ["KeyIndex", "TailFirstKeys"]  # (`TailFirstKeys`: `tail_first`'s)


class KeyIndex:
    """Cached key -> block (one block per key), integer keys in buckets."""

    COUNTED = True  # (keep `filled`: see `__init__`)

    __slots__ = ("plain", "buckets", "filled", "width", "_nones", "_zeros", "changes",
                 "walked")

    def __init__(self, width: int = 32) -> None:
        self.plain: dict[Hashable, int] = {}
        self.buckets: dict[int, list] = {}
        # How many slots of each bucket name a block (a bucket goes with its last
        # block), kept by every write; None unless `COUNTED`: an emptied bucket is
        # then told by comparing it with an empty one. Speed: that compare scans to
        # the bucket's first block: the Mooncake trace under vllm (buckets of 1,024
        # keys), 17,249 of `forget`'s 59,840 pieces emptied theirs (1,024 slots
        # compared) and 42,591 compared 162 slots on average; the radix tree's buckets
        # of 32 compare for less ("thirtieth steps", helper ki33).
        self.filled: dict[int, int] | None = {} if self.COUNTED else None
        self.width = width
        self._nones = [None] * width  # an empty bucket (copied, sliced)
        self._zeros = bytes(width)  # (flags cleared: `forget` with members)
        # Changes to the buckets so far (any write to one counts), and the last
        # `find` from the first key: (keys, its hits, its pieces, where its integer
        # keys ended, `changes` then, its `end`, how many hits it found, whether
        # every key was), read by `walked_pieces` and `find` (`_again`).
        self.changes = 0
        self.walked: tuple | None = None

    def set_width(self, width: int) -> None:
        """Group integer keys by `width` (only while no integer key is indexed)."""
        if width != self.width and not self.buckets and width > 0:
            self.width = width
            self._nones = [None] * width
            self._zeros = bytes(width)

    # --- as a dict ------------------------------------------------------------------

    def get(self, key, default=None):
        if type(key) is int:
            bucket = self.buckets.get(key // self.width)
            if bucket is None:
                return default
            block = bucket[key % self.width]
            return default if block is None else block
        return self.plain.get(key, default)

    def __getitem__(self, key) -> int:
        block = self.get(key)
        if block is None:
            raise KeyError(key)
        return block

    def __contains__(self, key) -> bool:
        return self.get(key) is not None

    def __setitem__(self, key, block: int) -> None:
        if type(key) is int:
            node, off = divmod(key, self.width)
            bucket = self.buckets.get(node)
            filled = self.filled
            if bucket is None:
                bucket = self.buckets[node] = self._nones[:]
                if filled is not None:
                    filled[node] = 1
            elif filled is not None and bucket[off] is None:
                filled[node] += 1
            bucket[off] = block
            self.changes += 1
        else:
            self.plain[key] = block

    def __delitem__(self, key) -> None:
        if type(key) is int:
            node, off = divmod(key, self.width)
            bucket = self.buckets.get(node)
            if bucket is None or bucket[off] is None:
                raise KeyError(key)
            bucket[off] = None
            self.changes += 1
            filled = self.filled
            if filled is None:
                if bucket == self._nones:
                    del self.buckets[node]
            elif filled[node] > 1:
                filled[node] -= 1
            else:
                del self.buckets[node], filled[node]
        else:
            del self.plain[key]

    def setdefault(self, key, block: int) -> int:
        """The block indexed to `key`, indexing `block` to it if none is."""
        if type(key) is int:
            node, off = divmod(key, self.width)
            bucket = self.buckets.get(node)
            filled = self.filled
            if bucket is None:
                bucket = self.buckets[node] = self._nones[:]
                if filled is not None:
                    filled[node] = 0
            found = bucket[off]
            if found is None:
                bucket[off] = found = block
                if filled is not None:
                    filled[node] += 1
                self.changes += 1
            return found
        return self.plain.setdefault(key, block)

    def items(self) -> Iterator[tuple[Hashable, int]]:
        """(key, block) for every key: integer keys by bucket, then the others."""
        width = self.width
        for node, bucket in self.buckets.items():
            base = node * width
            for off, block in enumerate(bucket):
                if block is not None:
                    yield base + off, block
        yield from self.plain.items()

    def __iter__(self) -> Iterator[Hashable]:
        return (key for key, _ in self.items())

    def __len__(self) -> int:
        if self.filled is not None:
            return sum(self.filled.values()) + len(self.plain)
        return (sum(self.width - bucket.count(None) for bucket in self.buckets.values())
                + len(self.plain))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (dict, KeyIndex)):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"KeyIndex({dict(self.items())!r})"

    def check(self) -> None:
        """Raise ValueError naming a bucket empty or miscounted in `filled` (audits)."""
        counts = {node: self.width - b.count(None) for node, b in self.buckets.items()}
        kept = self.filled if self.filled is not None else counts
        for node in sorted(counts.keys() | kept.keys()):
            if not counts.get(node) or counts.get(node) != kept.get(node):
                raise ValueError(f"bucket {node}: filled slots({counts.get(node, 0)}) == "
                                 f"counted({kept.get(node, 0)}) > 0 is false")

    # --- in runs --------------------------------------------------------------------

    def add(self, keys, start: int, end: int,
            blocks: list[int]) -> list[tuple[Hashable, int]]:
        """Index each of `blocks[start:end]` to its key, the key of the same place
        in `keys` (a request's table and its keys, neither copied), unless the
        key has a block already; return those (key, block) pairs, the
        duplicates. `keys`: a list whose integer keys are a leading run,
        increasing (a request's keys: its hash entries' come first), or a
        request's `BlockKeys`, read as its runs of keys (`_pieces`)."""
        dupes: list[tuple[Hashable, int]] = []
        width = self.width
        pieces, p, rest_keys = _pieces(keys, start, end, width)
        if pieces:
            self.changes += 1
            buckets = self.buckets
            filled = self.filled
            nones = self._nones
            for q, node, off, n in pieces:
                bucket = buckets.get(node)
                if bucket is None:
                    if filled is not None:
                        filled[node] = n
                    if n == width:  # (a whole entry: its blocks are the bucket)
                        buckets[node] = blocks[q:q + n]
                    else:
                        bucket = buckets[node] = nones[:]
                        bucket[off:off + n] = blocks[q:q + n]
                elif bucket[off:off + n].count(None) == n:  # (1 slice, not 2: "thirtieth steps")
                    bucket[off:off + n] = blocks[q:q + n]
                    if filled is not None:
                        filled[node] += n
                else:
                    key = node * width + off
                    set_here = 0
                    for k in range(n):
                        block = blocks[q + k]
                        found = bucket[off + k]
                        if found is None:
                            bucket[off + k] = block
                            set_here += 1
                        elif found != block:
                            dupes.append((key + k, block))
                    if filled is not None:
                        filled[node] += set_here
        if rest_keys:
            rest_blocks = blocks[p:end]
            found = list(map(self.plain.setdefault, rest_keys, rest_blocks))
            if found != rest_blocks:
                dupes += [(key, block) for key, block, cached
                          in zip(rest_keys, rest_blocks, found) if cached != block]
        return dupes

    def forget(self, keys: list, start: int, blocks: list[int], members=None) -> None:
        """Forget the key of each of `blocks`, `keys[start + i]` for `blocks[i]`,
        each indexed to that block (evicted blocks and their keys, in any order;
        a run of one bucket's keys, decreasing as a freed table's tail-first
        order has them, is cleared as one slice). Keys given as a freed table's
        own `TailFirstKeys` are found in runs exactly, so a run's blocks are not
        compared with the bucket's slice (they are indexed there, as said).

        `members`, if given, are the members of vLLM's queue (`QueueMembers`),
        which `blocks` leave: every integer key here flagged (its block free),
        every other block in `members.loose`. Their flags are cleared by the
        same slices as the buckets (one walk over the runs; `members.size` is
        the caller's)."""
        if type(keys) is NoKeys:  # (blocks without a key: `VllmCache.release`, ended)
            if members is not None:
                members.loose.difference_update(blocks)
            return
        self.changes += 1
        flags = members.flags if members is not None else None
        # (runs of keys found exactly, no compare: a freed table's own keys, or a
        # run of them going down as a `range`, `RunQueue.append_run`)
        exact = type(keys) is TailFirstKeys or type(keys) is range
        buckets = self.buckets
        filled = self.filled
        width = self.width
        nones = self._nones
        zeros = self._zeros
        plain = self.plain
        end = len(blocks)
        shift = start
        p = 0
        while p < end:
            key = keys[p + shift]
            if type(key) is not int:
                # A run of other keys (a request's own, its decodes'): per key.
                q = p + 1
                while q < end and type(keys[q + shift]) is not int:
                    q += 1
                # (None, a block without a key, `NoKeys` cut up: nothing to forget)
                deque(map(plain.__delitem__, filter(None, keys[p + shift:q + shift])), 0)
                if members is not None:
                    members.loose.difference_update(blocks[p:q])
                p = q
                continue
            node, off = divmod(key, width)
            bucket = buckets[node]
            n = off + 1
            if n > end - p:
                n = end - p
            # The next n keys are key, key - 1, ... exactly when the bucket holds
            # their blocks there (a block is indexed under its own key only).
            if n > 1 and keys[p + shift + n - 1] != key - n + 1:
                # Not one decreasing run down to the bucket's start: as far as the
                # keys go down one by one (the blocks decide below).
                n = _run_down(keys, p + shift, n, key)
            lo = off - n + 1
            if n > 1 and not exact:
                window = blocks[p:p + n]
                window.reverse()
                if bucket[lo:off + 1] != window:
                    n, lo = 1, off
            if n == 1 and bucket[off] != blocks[p]:
                raise KeyError(key)
            if filled is None:
                bucket[lo:off + 1] = nones[:n]
                left = bucket != nones
            else:
                left = filled[node] - n
                if left:
                    filled[node] = left
                    bucket[lo:off + 1] = nones[:n]
            if left:
                if flags is not None:
                    flags[node][lo:off + 1] = zeros[:n]
            else:  # (its last blocks: the bucket goes, not cleared if counted)
                del buckets[node]
                if filled is not None:
                    del filled[node]
                if flags is not None:
                    del flags[node]
            p += n

    def find(self, keys, start: int, end: int) -> tuple[list[int], bool]:
        """The blocks of `keys[start:end]` up to the first key not indexed, and
        whether every key was (`keys` as for `add`).

        From the first key, the answer of the last such walk for the same `keys`
        is given again (a copy, then the one `walked_pieces` reads) while no
        bucket changed since and the key that ended it was an integer one
        (`_again`). A caller may shorten the list it is given, in place
        (`PrefixLookups._reusable`), but never change it otherwise: only its length
        is checked. Speed: prefix-affinity looks up the caches of the replicas
        that may win with the request's keys (fleet/routers.py), and the chosen
        one looked them up again to admit it, most often with nothing changed
        between: on the whole Mooncake trace over 64 replicas, 9,291 of the
        12,031 admissions."""
        if not start:
            walked = self.walked
            if walked is not None and walked[0] is keys and walked[4] == self.changes:
                again = self._again(walked, end)
                if again is not None:
                    return again
        hits: list[int] = []
        pieces, p, rest_keys = _pieces(keys, start, end, self.width)
        every = True
        if pieces:
            buckets = self.buckets
            for _, node, off, n in pieces:
                bucket = buckets.get(node)
                if bucket is None or bucket[off] is None:
                    every = False
                    break
                part = bucket[off:off + n]
                try:  # Speed: `sum` raises at a slot not indexed (None) for half the
                    # instructions a slot of `None in part`: the first 2,000 Mooncake
                    # requests under vllm 0.994x ("thirty-first steps", helper lk35).
                    sum(part)
                except TypeError:
                    hits += part[:part.index(None)]
                    every = False
                    break
                hits += part
        if every and rest_keys:
            found = list(map(self.plain.get, rest_keys))
            if None in found:
                del found[found.index(None):]
                every = False
            hits += found
        if not start:
            self.walked = (keys, hits, pieces, p, self.changes, end, len(hits), every)
        return hits, every

    def _again(self, walked: tuple, end: int) -> tuple[list[int], bool] | None:
        """`find`'s answer from the first key to `end` read from the last walk for the
        same keys (`walked`, no bucket changed since), or None if it does not tell.
        It tells if its hits are as it found them (not shortened since) and it
        ended at an integer key (a bucket's: another kind of key may have come or
        gone since): one missing (then the hits are the answer for any `end` past
        it), or its own `end`, the keys all found (then the answer for that `end`,
        or for a later one if the key after it is not indexed now)."""
        keys, hits, pieces, p, changes, until, count, every = walked
        if len(hits) != count:
            return None
        if not every:
            if count >= p or end <= count:
                return None
        elif p < until or end < until:
            return None
        elif end > until:
            key = (keys[until] if type(keys) is list else keys.key_at(until)
                   if keys.known > until else None)
            if key is None or self.get(key) is not None:
                return None
            every = False
        hits = hits[:]
        self.walked = (keys, hits, pieces, p, changes, until, count, walked[7])
        return hits, every

    def walked_pieces(self, keys, blocks: list[int]):
        """The pieces of `_pieces(keys, 0, len(blocks))` and where the integer keys
        end, when `blocks` is (what is left of: shortened in place) the list the
        last `find` from the first key gave for `keys`, and no bucket changed
        since (each piece's bucket names its blocks, as found). Else None.
        Speed: the hits are counted (`evictable`) and taken (`share`) by the
        look-up's own runs of keys, not cut and compared again: on the Mooncake
        trace under vllm, 25,480 walks after 13,147 look-ups ("twenty-eighth
        steps", helper kvf30)."""
        walked = self.walked
        if (walked is None or walked[1] is not blocks or walked[0] is not keys
                or walked[4] != self.changes):
            return None
        end = len(blocks)
        pieces = walked[2]
        if pieces and pieces[-1][0] + pieces[-1][3] > end:
            # Cut at the hits' end, as `_pieces` would (the look-up stopped at a key
            # not cached, or the hits were shortened since): the pieces that start
            # before it (found by their first block, `(end,)` sorting before any
            # piece at `end`), the last one shortened.
            pieces = pieces[:bisect_left(pieces, (end,))]
            if pieces:
                q, node, off, n = pieces[-1]
                if q + n > end:
                    pieces[-1] = (q, node, off, end - q)
        p = walked[3]
        return pieces, p if p < end else end
