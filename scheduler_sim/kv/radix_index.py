"""The radix tree's index of keys (`radix_cache.RadixCache.index`): each cached key
to its block, the integer keys of a trace's hash entries per entry, as vLLM's
cache keeps them (`key_index`), with what the tree needs on top: a node's keys
forgotten in their order, and a dict's `update` and `keys`."""
from __future__ import annotations

from .key_index import KeyIndex

__all__ = ["RadixIndex"]


class RadixIndex(KeyIndex):
    """The tree's index of keys: vLLM's index per hash entry (`key_index`), the
    integer keys of a trace's hash entries kept in buckets of one entry's
    blocks, so that a node's keys (consecutive within each entry, increasing
    down the tree) are registered and forgotten a bucket slice at a time.

    Speed: the tree registered every key by a `dict.setdefault` and forgot it by
    a `del` at eviction, about 8.9 million of each on the Mooncake trace under
    `sglang` (6.8% and 6.0% of the samples of a sampling profile there); a
    node of about 230 blocks spans about 8 entries."""

    __slots__ = ()
    # Buckets of one entry's keys, compared with an empty one when cleared
    # rather than counted (`KeyIndex.filled`: a count costs more here).
    COUNTED = False

    def update(self, pairs) -> None:
        """Index each (key, block) of `pairs` (a dict's or an iterable's), as a dict's."""
        for key, block in (pairs.items() if isinstance(pairs, dict) else pairs):
            self[key] = block

    def keys(self):
        """Every key indexed (so that `dict(index)` copies it, as a dict's)."""
        return iter(self)

    def forget_node(self, keys: list, blocks: list[int]) -> None:
        """Forget `keys`, each indexed to the block at the same place in `blocks`
        (a node's, in its order: integer keys increasing within an entry). Raises
        KeyError if a key is not indexed to its block."""
        self.changes += 1  # (every write to a bucket counts: `KeyIndex.walked_pieces`)
        buckets = self.buckets
        width = self.width
        nones = self._nones
        end = len(keys)
        p = 0
        while p < end:
            key = keys[p]
            if type(key) is not int:
                del self.plain[key]  # (a request's own content: its outputs' blocks)
                p += 1
                continue
            node, off = divmod(key, width)
            n = width - off
            if n > end - p:
                n = end - p
            # The next n keys are key, key + 1, ... exactly when the bucket holds
            # their blocks there (a block is indexed under its own key only).
            bucket = buckets[node]
            if n == width:
                # A whole entry (most of a node's): its bucket goes, not cleared.
                if bucket == blocks[p:p + n]:
                    del buckets[node]
                    p += n
                    continue
                n = 1
            elif n > 1 and bucket[off:off + n] != blocks[p:p + n]:
                n = 1
            if n == 1 and bucket[off] != blocks[p]:
                raise KeyError(key)
            bucket[off:off + n] = nones[:n]
            if bucket == nones:
                del buckets[node]
            p += n
