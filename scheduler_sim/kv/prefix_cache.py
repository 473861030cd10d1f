"""Prefix caching: block keys, the index of cached blocks, and their LRU queue (§8).

A full block is identified by a chained key: the hash of (the parent
block's key, the block's content), an integer, as vLLM's builtin-hash mode
does. (Two different prefixes sharing a 64-bit hash would be taken for the
same; with ten million blocks the odds are about one in 200,000 runs.) The content is the block's token ids when the
trace gives them; for a trace that carries `block_hashes` (one id per
`hash_block_size` prompt tokens, themselves chained) it is the hash id
covering the block's last token and that token's offset; anything else (a
prompt without ids or hashes, outputs without ids) gets content unique to
the request, so another request never matches it but the request itself
does after a preemption.

A freed block that has a key keeps it, and waits at the tail of an LRU
queue; it loses the key only when the allocator hands it out again, the
least recently freed first. The queue is an ordered dict, so taking a block
out of its middle (a cache hit) is O(1). The allocator owns a `PrefixCache`
and decides when blocks enter and leave it.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Hashable

__all__ = ["BlockKeys", "PrefixCache"]


class BlockKeys:
    """The chain of keys of one request's full blocks, computed on demand."""

    __slots__ = ("index", "prompt_ids", "output_ids", "hashes", "prompt_tokens",
                 "block_size", "hash_block_size", "keys", "registered")

    def __init__(self, index: int, prompt_tokens: int, block_size: int, hash_block_size: int,
                 prompt_ids=None, output_ids=None, hashes=None) -> None:
        self.index = index
        self.prompt_tokens = prompt_tokens
        self.block_size = block_size
        self.hash_block_size = hash_block_size
        self.prompt_ids = prompt_ids
        self.output_ids = output_ids
        self.hashes = hashes
        self.keys: list[Hashable] = []
        self.registered = 0  # leading blocks whose keys the cache already knows

    def _content(self, i: int) -> Hashable:
        size = self.block_size
        start, end = i * size, (i + 1) * size
        p = self.prompt_tokens
        if end <= p and self.prompt_ids is not None:
            return tuple(self.prompt_ids[start:end])
        if end <= p and self.hashes is not None:
            last = end - 1
            j = last // self.hash_block_size
            if j < len(self.hashes):
                return ("h", self.hashes[j], last % self.hash_block_size)
        if start >= p and self.output_ids is not None and end - p <= len(self.output_ids):
            return tuple(self.output_ids[start - p:end - p])
        if (self.prompt_ids is not None and self.output_ids is not None
                and end - p <= len(self.output_ids)):
            return tuple(self.prompt_ids[start:]) + tuple(self.output_ids[:end - p])
        return ("r", self.index, i)

    def ensure(self, count: int) -> list:
        """Compute the keys of the first `count` full blocks; return the key list."""
        keys = self.keys
        i = len(keys)
        if i >= count:
            return keys
        parent = keys[-1] if keys else 0
        size = self.block_size
        hashes = self.hashes
        if self.prompt_ids is None and hashes is not None:
            # The common case for imported traces: keys from the hash ids alone.
            hbs = self.hash_block_size
            limit = min(self.prompt_tokens, len(hashes) * hbs)
            while i < count and (i + 1) * size <= limit:
                last = (i + 1) * size - 1
                parent = hash((parent, hashes[last // hbs], last % hbs))
                keys.append(parent)
                i += 1
        content = self._content
        while i < count:
            parent = hash((parent, content(i)))
            keys.append(parent)
            i += 1
        return keys


class PrefixCache:
    """Which block holds which key, and the LRU queue of free blocks that keep one."""

    def __init__(self) -> None:
        self.index: dict[Hashable, int] = {}
        self.key_of: dict[int, Hashable] = {}
        # With `duplicates` (vLLM's cache, several blocks per hash), a block filled
        # with content already cached keeps the key too: `index` names the first
        # such block still cached (the one a lookup finds), `others` the rest, in
        # the order they got the key. Without it the later block stays unkeyed.
        self.duplicates = False
        self.others: dict[Hashable, list[int]] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()  # least recently freed first
        self.hits = 0      # blocks reused, over the run
        self.queried = 0   # blocks looked up, over the run
        # (request id, block number) that wrote each keyed block, kept only when
        # somebody wants evictions reported.
        self.writers: dict[int, tuple[str, int]] | None = None

    def evict(self) -> int:
        """Take the least recently freed cached block and forget its key."""
        block, _ = self.lru.popitem(last=False)
        key = self.key_of.pop(block)
        others = self.others
        if self.index[key] == block:
            rest = others.get(key)
            if rest:
                self.index[key] = rest.pop(0)
                if not rest:
                    del others[key]
            else:
                del self.index[key]
        else:
            rest = others[key]
            rest.remove(block)
            if not rest:
                del others[key]
        return block

    def writer(self, block: int) -> tuple[str, int] | None:
        """Forget and return who wrote `block` (tracked only with `writers` on)."""
        return self.writers.pop(block, None) if self.writers is not None else None
