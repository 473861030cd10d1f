"""Block keys (§8 rule 1): what identifies a full block's content, and the
interning table of a trace's hash ids.

A full block is identified by a key chained from its parent block's key
and its exact content: two blocks get the same key only if they and every
block before them have the same content. For token ids the key is
BLAKE2b-128 over both (vLLM offers SHA-256 for the same purpose), exact
unless BLAKE2b collides (about n^2 / 2^129 for n blocks, never observed).
For a trace that carries `block_hashes` (one id per `hash_block_size`
prompt tokens, themselves chained) the content is the hash ids up to the
one covering the block's last token, and that token's offset: each chain of
hash ids is interned as a small integer id (exact, no hash), shared by
everything whose keys can meet (see `_entries`). Anything else (a prompt
without ids or hashes, outputs without ids) gets content unique to the
request, so another request never matches it but the request itself does
after a preemption.

Keys are compared for equality only (a cache indexes blocks by them, see
`prefix_cache`); nothing here knows about blocks being free or held.
"""
from __future__ import annotations

import weakref
from array import array
from hashlib import blake2b

__all__ = ["BlockKeys", "interning_table"]

_ROOT = bytes(16)  # the parent key of a request's first block


def _chain(parent: bytes, content: bytes) -> bytes:
    """The key of a block: BLAKE2b-128 over its parent's key (length-prefixed, so
    the input splits one way only) and its content's tagged encoding."""
    return blake2b(bytes((len(parent),)) + parent + content, digest_size=16).digest()


def _tokens(ids) -> bytes:
    """Token ids, one encoding per sequence: 8 bytes each, or their text if one
    does not fit in 64 bits."""
    try:
        return b"t" + array("q", ids).tobytes()
    except OverflowError:
        return b"T" + ascii(tuple(ids)).encode()


def _hash_id(value) -> bytes:
    """A trace's hash id (an integer or a string), tagged by its kind."""
    return b"i%d" % value if type(value) is int else b"s" + ascii(value).encode()


# Hash entries, interned: the chain of hash ids up to an entry (its parent
# entry and its own id) -> a small sequential id. Every `BlockKeys` and every
# prefix cache alive at once share one table (the one `_entries()` returns), so
# keys that can meet in a cache, or in a router comparing one request's keys
# with several caches, come from the same table; it lives as long as any of
# them does (a cache keeps the keys of requests long gone), and grows by one
# entry per distinct chain of hash ids met (about 100 bytes each).
_LINK = 1 << 32  # an int hash id and a parent id below this make one int link


class _Entries(dict):
    """The interning table (a dict that can be referred to weakly)."""

    __slots__ = ("__weakref__",)


_current_entries = weakref.ref(_Entries())  # dead at once: the first user makes one


def _entries() -> _Entries:
    """The interning table shared by every key chain and cache alive now."""
    global _current_entries
    table = _current_entries()
    if table is None:
        table = _Entries()
        _current_entries = weakref.ref(table)
    return table


class BlockKeys:
    """The chain of keys of one request's full blocks, computed on demand.

    Token ids: bytes, `_chain(parent key, ids)`. A trace's hash ids: each hash
    entry is interned once, as a small id that stands for its whole chain of
    hash ids (the shared table maps (parent entry's id, the entry's hash id) to
    it, new ids counting up from 0, so two entries get the same id exactly
    when their chains are equal), and a block's key is the integer
    id * ceil(hash_block_size / block_size) + (offset of its last token in
    the entry) // block_size (one pair, one integer; never equal to a bytes
    key). The keys of an entry's blocks are consecutive, and keys in use are
    dense, so they spread evenly over a dict (keys id * hash_block_size +
    offset, all alike in their low bits, would crowd its slots). Content
    unique to the request: bytes `r`, its trace position and the block
    number, which no other request can produce; from `own_from` on every key
    is of that kind.
    """

    __slots__ = ("index", "prompt_ids", "output_ids", "hashes", "prompt_tokens",
                 "block_size", "hash_block_size", "keys", "registered", "entries", "own_from",
                 "written", "found")

    def __init__(self, index: int, prompt_tokens: int, block_size: int, hash_block_size: int,
                 prompt_ids=None, output_ids=None, hashes=None) -> None:
        self.index = index
        self.prompt_tokens = prompt_tokens
        self.block_size = block_size
        self.hash_block_size = hash_block_size
        self.prompt_ids = prompt_ids
        self.output_ids = output_ids
        self.hashes = hashes
        self.entries = _entries() if hashes is not None else None
        # The first block from which every key is of content unique to the
        # request (no token ids, and past the blocks the hash ids cover), if any.
        self.own_from = (-1 if prompt_ids is not None or output_ids is not None
                         else 0 if hashes is None
                         else min(prompt_tokens, len(hashes) * hash_block_size) // block_size)
        self.keys: list[bytes | int] = []
        self.registered = 0  # leading blocks whose keys the cache already knows
        self.written = 0     # leading blocks handed to host memory's write-through
        # The last answer of a radix tree's `find`, kept by that tree to give again
        # while it holds (`radix_cache.RadixCache.find`); None: none kept.
        self.found = None

    def unwritten(self, limit: int | None = None) -> list:
        """The keys of registered blocks (of the first `limit`, if given) not yet
        handed to host memory's write-through; from now on they count as handed."""
        after = self.registered if limit is None or limit > self.registered else limit
        if after <= self.written:
            return []
        fresh = self.ensure(after)[self.written:after]
        self.written = after
        return fresh

    def _key(self, i: int, parent: bytes) -> bytes:
        """The key of block `i` (not in hash-id form) after a block keyed `parent`."""
        size = self.block_size
        start, end = i * size, (i + 1) * size
        p = self.prompt_tokens
        prompt, outputs = self.prompt_ids, self.output_ids
        if end <= p and prompt is not None:
            return _chain(parent, _tokens(prompt[start:end]))
        if outputs is not None and end - p <= len(outputs):
            if start >= p:
                return _chain(parent, _tokens(outputs[start - p:end - p]))
            if prompt is not None:
                return _chain(parent, _tokens(tuple(prompt[start:]) + tuple(outputs[:end - p])))
        return b"r%d:%d" % (self.index, i)

    def ensure(self, count: int) -> list:
        """Compute the keys of the first `count` full blocks; return the key list."""
        keys = self.keys
        i = len(keys)
        if i >= count:
            return keys
        if 0 <= self.own_from <= i:  # keys of its own (a decode filled a block)
            if count == i + 1:
                # One key (a decode filled one block): appended without a list
                # made for it, as for 150,432 of the 192,543 calls that come here
                # replaying the Mooncake trace under vllm.
                keys.append(b"r%d:%d" % (self.index, i))
                return keys
            index = self.index
            keys += [b"r%d:%d" % (index, k) for k in range(i, count)]
            return keys
        size = self.block_size
        hashes = self.hashes
        if self.prompt_ids is None and hashes is not None:
            # The common case for imported traces: keys from the hash ids alone,
            # one interned id per hash entry.
            hbs = self.hash_block_size
            limit = min(self.prompt_tokens, len(hashes) * hbs)
            stop = min(count, limit // size)  # blocks whose tokens all have hash ids
            if i < stop:
                entries = self.entries
                slots = -(-hbs // size)  # keys per entry id at most
                entry, node = -1, -1  # the entry of block i - 1's last token, its id
                if i:  # resume after the keys computed before
                    entry = (i * size - 1) // hbs
                    node = keys[-1] // slots
                if hbs == slots * size:
                    # Entries of whole blocks (Mooncake's 512 tokens, blocks of 16):
                    # block b is offset b % slots of entry b // slots, so the keys
                    # are one range per entry, made in C from the entries' ids. Was
                    # the loop below, one pass per entry: ensure took 11% of the
                    # Mooncake replay under vllm (sampled), this path 7.6%.
                    first_entry = i // slots
                    last_entry = (stop - 1) // slots
                    nodes = [node] if first_entry == entry else []
                    get = entries.get
                    for value in hashes[entry + 1:last_entry + 1]:
                        link = ((value << 32) | (node + 1) if type(value) is int
                                and node + 1 < _LINK else (node, _hash_id(value)))
                        node = get(link)
                        if node is None:
                            node = entries[link] = len(entries)
                        nodes.append(node)
                    head = i - first_entry * slots  # keys of the first entry skipped
                    tail = (last_entry + 1) * slots - stop  # of the last entry not full
                    if nodes[-1] - nodes[0] == len(nodes) - 1:
                        # Consecutive ids (a child is interned after its parent, so
                        # a chain's ids increase: first to last apart by the count
                        # means one step each), as a request's new entries are:
                        # their keys are one range. Speed: 14 against 28 ns a key
                        # for the ranges chained (timeit, 24 entries of 32 keys).
                        keys += range(nodes[0] * slots + head,
                                      (nodes[-1] + 1) * slots - tail)
                    else:
                        # Runs of consecutive ids (a conversation's entries of its
                        # earlier turns, then its new ones), each run's keys one
                        # range. Was one range per entry, chained (`list.extend`
                        # of a chain: no length, each key through two iterators):
                        # that line was 3% of the samples replaying the Mooncake
                        # trace under sglang, the single range's 0.2%.
                        low = nodes[0] * slots + head
                        last = nodes[0]
                        for node in nodes[1:]:
                            if node != last + 1:
                                keys += range(low, (last + 1) * slots)
                                low = node * slots
                            last = node
                        keys += range(low, (last + 1) * slots - tail)
                    i = stop
                while i < stop:
                    # Blocks whose last token falls in entry j: one id, and as keys
                    # the integers id * slots + (offset of their last token in the
                    # entry) // size, consecutive (a range, made in C; and dense,
                    # so that they spread evenly over a dict's table).
                    j = ((i + 1) * size - 1) // hbs
                    while entry < j:
                        entry += 1
                        value = hashes[entry]
                        # (parent id, hash id) as one int when both are small
                        # ints, else as a pair with the hash id's tagged bytes.
                        link = ((value << 32) | (node + 1) if type(value) is int
                                and node + 1 < _LINK else (node, _hash_id(value)))
                        node = entries.get(link)
                        if node is None:
                            node = entries[link] = len(entries)
                    end = min(stop, (j + 1) * hbs // size)
                    first = node * slots + ((i + 1) * size - 1 - j * hbs) // size
                    keys.extend(range(first, first + end - i))
                    i = end
            if i >= count:
                return keys  # (all from the hash ids: no chained key, no parent made)
        parent = keys[-1] if keys else _ROOT
        if type(parent) is int:  # a hash-id key, chained from as bytes
            parent = b"h" + parent.to_bytes((parent.bit_length() + 7) // 8, "big")
        key = self._key
        while i < count:
            parent = key(i, parent)
            keys.append(parent)
            i += 1
        return keys


def interning_table() -> _Entries:
    """The interning table shared by every key chain and cache alive now: a cache
    keeps it (and so the meaning of the keys it holds) alive as long as it lives."""
    return _entries()
