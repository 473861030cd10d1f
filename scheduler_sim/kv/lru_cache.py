"""The LRU prefix cache: one block per key, free keyed blocks in one LRU queue (§8).

A full block gets its key when written unless another block has that key
already (then it stays plain). `key_of` names each keyed block's key, held
or free. A freed keyed block keeps its key and joins the tail of
`free_blocks`, an ordered dict (block -> None), so that a hit takes a block
out of its middle in O(1); it loses the key only when handed out again, the
least recently freed first. The policies other than `vllm` and `sglang`
use this cache; the radix tree (`radix_cache`) keeps its free blocks in the
same order, in a queue of its own (`free_queue`).
"""
from __future__ import annotations

from collections import OrderedDict, deque
from itertools import compress, islice, repeat
from operator import not_
from typing import Hashable

from ..records.errors import InvariantError
from .prefix_cache import PrefixCache

__all__ = ["LruCache"]


class LruCache(PrefixCache):
    """One block per key; free keyed blocks evicted least recently freed first."""

    def __init__(self, compact: bool = False) -> None:
        super().__init__(compact)
        self.key_of: dict[int, Hashable] = {}
        self.free_blocks: OrderedDict[int, None] = OrderedDict()
        # A hit is the queue's own deletion, bound once (no frame of ours per hit).
        self.hit = self.free_blocks.__delitem__

    def register(self, rid, keys, full, table):
        """Key `table[keys.registered:full]`: a key not cached yet goes to this
        request's block; a key cached already keeps its block, and this one stays
        plain."""
        start = keys.registered
        if full <= start:
            return None
        key_list = keys.ensure(full)
        index = self.index
        key_of = self.key_of
        writers = self.writers
        if writers is None:
            # One look-up per key, in C: a key not cached yet is indexed to this
            # request's block (the common case, all of them); a key cached already
            # keeps its block, and this one is left unkeyed.
            new_keys = key_list[start:full]
            new_blocks = table[start:full]
            found = list(map(index.setdefault, new_keys, new_blocks))
            if found == new_blocks:
                key_of.update(zip(new_blocks, new_keys))
            else:
                for key, block, cached in zip(new_keys, new_blocks, found):
                    if cached == block:
                        key_of[block] = key
        else:
            for i in range(start, full):
                key = key_list[i]
                if key not in index:
                    block = table[i]
                    index[key] = block
                    key_of[block] = key
                    writers[block] = (rid, i)
        keys.registered = full
        return None

    register_decoded = register

    def take(self, rid, table, count):
        """Evict the `count` least recently freed blocks into `table`, forgetting
        their keys: one eviction each."""
        lru = self.free_blocks
        if count == len(lru):
            taken = list(lru)
            lru.clear()
        else:
            taken = list(islice(lru, count))
            deque(map(lru.__delitem__, taken), 0)
        # One block per key: each is its key's index entry.
        deque(map(self.index.__delitem__, map(self.key_of.pop, taken)), 0)
        table.extend(taken)
        if self.report is not None:
            self._report_writers(rid, taken)
        return count, ()

    def evict_one(self) -> list[int]:
        """Forget the key of the least recently freed block; return it, alone."""
        block, _ = self.free_blocks.popitem(last=False)
        del self.index[self.key_of.pop(block)]
        return [block]

    def give_back(self, blocks, keyed=(), keys=()):
        """Blocks with a key join the queue's tail in order; the rest are plain."""
        in_cache = list(map(self.key_of.__contains__, blocks))
        if all(in_cache):
            self.free_blocks.update(zip(blocks, repeat(None)))
            return ()
        self.free_blocks.update(zip(compress(blocks, in_cache), repeat(None)))
        return list(compress(blocks, map(not_, in_cache)))

    def audit(self, tables, carried, orphans):
        """Keys are named in `key_of` only; the index and `key_of` agree; every
        free cached block has a key."""
        if carried or any(v is not None for v in self.free_blocks.values()):
            raise InvariantError("block keys kept outside key_of out of vLLM's cache")
        if any(b not in self.key_of for b in self.free_blocks):
            raise InvariantError("a free cached block has no key")
        self._check_index(self.key_of)
