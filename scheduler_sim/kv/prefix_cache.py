"""Prefix caching: block keys, the index of cached blocks, and their LRU queue (§8).

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

A freed block that has a key keeps it, and waits at the tail of an LRU
queue; it loses the key only when the allocator hands it out again, the
least recently freed first. Two policy-chosen variants: vLLM's cache keeps
several blocks per key (`duplicates`), and SGLang's radix tree evicts whole
leaf nodes of blocks registered together, least recently looked up first
(`tree`). Outside vLLM's cache the queue is an ordered dict, so taking a
block out of its middle (a cache hit) is O(1). The allocator owns a `PrefixCache`
and decides when blocks enter and leave it. `key_of` names each keyed
block's key, except in vLLM's cache: there the allocator knows the keys of
the blocks in use from the requests' `BlockKeys`, and a free block's key
sits beside it in the LRU queue's runs.

In vLLM's cache blocks join the queue a request at a time and leave it, but
for hits, from its front, many at once. There the queue is kept as `runs`,
one pair of lists (blocks, their keys) per batch freed, which eviction
consumes from the front by slices, and beside them `lru` is only the set of
the queued blocks (membership and size, updated a batch at a time). A
compact cache (a replica of a fleet, which holds one cache per replica)
keeps that set as one byte per block (`BlockSet`, where a set takes about
70 bytes a block), and its index in a table of the size it needs at the
cost of some time (`fit_index`). A hit
leaves its block's entry in its run behind, stale: `stale[block]` counts
such entries of a block, all of them ahead of its live entry (if it is free
again), so eviction skips exactly that many before it takes the block.
"""
from __future__ import annotations

import heapq
import itertools
import sys
import weakref
from array import array
from collections import OrderedDict, deque
from hashlib import blake2b
from typing import Hashable, Iterator

__all__ = ["BlockKeys", "BlockSet", "PrefixCache"]


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
# `PrefixCache` alive at once share one table (the one `_entries()` returns), so
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
                 "block_size", "hash_block_size", "keys", "registered", "entries", "own_from")

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
        parent = keys[-1] if keys else _ROOT
        if type(parent) is int:  # a hash-id key, chained from as bytes
            parent = b"h" + parent.to_bytes((parent.bit_length() + 7) // 8, "big")
        key = self._key
        while i < count:
            parent = key(i, parent)
            keys.append(parent)
            i += 1
        return keys


class BlockSet:
    """A set of block numbers (non-negative integers) as one byte per number up to
    the highest one added, and a count: the members of vLLM's LRU queue in a
    compact cache (a `set` takes about 70 bytes a member). `in`, `len`, `remove`
    and `clear` are a set's; iteration is in ascending order. Blocks join and
    leave in bulk only as the queue moves them, each once (`add_new`,
    `remove_members`), which lets those loops skip the checks a set makes."""

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


class PrefixCache:
    """Which block holds which key, and the LRU queue of free blocks that keep one."""

    def __init__(self, compact: bool = False) -> None:
        # The interning table of hash entries, kept alive as long as the cache
        # holds keys made from it (see `_entries`).
        self.entries = _entries()
        self.index: dict[Hashable, int] = {}
        # With `compact` (a fleet's replicas), `index` is kept in a table of the
        # size it needs (`fit_index`): its size when last fitted, and the keys
        # added since.
        self.compact = compact
        self._index_bytes = sys.getsizeof(self.index)
        self.added = 0
        # The key of each keyed block, but in vLLM's cache (`duplicates`, no
        # `tree`), where it stays empty (see `lru`).
        self.key_of: dict[int, Hashable] = {}
        # With `duplicates` (vLLM's cache, several blocks per hash), a block filled
        # with content already cached keeps the key too: `index` names the first
        # such block still cached (the one a lookup finds), `others` the rest, in
        # the order they got the key. Without it the later block stays unkeyed.
        self._duplicates = False
        self.others: dict[Hashable, list[int]] = {}
        # With `tree` (SGLang's radix tree; see the tree-mode methods below), keyed
        # blocks also belong to nodes, and eviction takes whole leaf nodes.
        self._tree = False
        self.clock = 0  # the last stamp given
        self.node_of: dict[int, int] = {}
        self.nodes: dict[int, list] = {}  # node -> [blocks, parent, children, stamp]
        self.next_node = 0
        self.candidates: list[tuple[int, int]] = []  # (stamp, node) heap, checked when popped
        # Free blocks that keep a key, least recently freed first (block ->
        # None: `key_of` names the key). In vLLM's cache only their set (a
        # `BlockSet` when compact; `_enqueue` and `_dequeue` add and take
        # blocks freed or evicted together), and
        # `runs` (that mode only, else None) gives the eviction order and the
        # keys: [blocks, their keys, position of the first not yet consumed]
        # per batch freed, oldest first; `stale` counts per block its entries
        # in `runs` left by hits, `stale_total` all of them.
        self.lru: OrderedDict[int, None] | set[int] | BlockSet = OrderedDict()
        self._enqueue = self._dequeue = None
        self.runs: deque[list] | None = None
        self.stale: dict[int, int] = {}
        self.stale_total = 0
        # (request id, block number) that wrote each keyed block, kept only when
        # somebody wants evictions reported.
        self.writers: dict[int, tuple[str, int]] | None = None

    # --- modes -----------------------------------------------------------------

    @property
    def duplicates(self) -> bool:
        """vLLM's cache: several blocks per key (see `others`)."""
        return self._duplicates

    @duplicates.setter
    def duplicates(self, on: bool) -> None:
        self._duplicates = bool(on)
        self._set_queue()

    @property
    def tree(self) -> bool:
        """SGLang's radix tree (see the tree-mode methods)."""
        return self._tree

    @tree.setter
    def tree(self, on: bool) -> None:
        self._tree = bool(on)
        self._set_queue()

    def _set_queue(self) -> None:
        """The LRU queue's form for the mode (chosen while it is empty): runs
        beside a set in vLLM's cache (a `BlockSet` in a compact cache), else an
        ordered dict."""
        in_runs = self._duplicates and not self._tree
        if in_runs == (self.runs is not None):
            return
        if self.lru:
            raise ValueError("the prefix cache's mode changes only while its LRU queue is empty")
        if not in_runs:
            self.lru = OrderedDict()
        elif self.compact:
            self.lru = BlockSet()
            self._enqueue, self._dequeue = self.lru.add_new, self.lru.remove_members
        else:
            self.lru = set()
            self._enqueue, self._dequeue = self.lru.update, self.lru.difference_update
        self.runs = deque() if in_runs else None
        self.stale = {}
        self.stale_total = 0

    def fit_index(self) -> None:
        """Keep `index` in a table of the size it needs, once keys were added.

        A dict never shrinks, and every key added takes a new slot of its
        table, whether keys were deleted or not; when the slots run out it
        grows to three times the keys it holds. A full cache, whose keys come
        and go all the time, so keeps a table twice the size its keys need
        most of the time (about 48 bytes a key more). Looked at after every
        eighth of the index's size in keys added, the index is copied into a
        table of its size when its own has grown and the copy is smaller.
        This costs time (a copy of every key each time the table would
        grow: about 5% of a replay of the Mooncake trace), so only a fleet's
        replicas, whose caches multiply the memory, do it."""
        if self.added < (len(self.index) >> 3) + 64:
            return
        self.added = 0
        size = sys.getsizeof(self.index)
        if size > self._index_bytes:
            fitted = dict(self.index)
            fitted_size = sys.getsizeof(fitted)
            if fitted_size < size:
                self.index, size = fitted, fitted_size
            self._index_bytes = size

    # --- vLLM's cache: the LRU queue in runs ------------------------------------------

    def push_run(self, blocks: list[int], keys: list) -> None:
        """Blocks freed together, in that order, join the queue's tail with their
        keys (`keys` is kept as it is: nobody may change it later)."""
        self._enqueue(blocks)
        self.runs.append([blocks, keys, 0])

    def hit(self, block: int) -> None:
        """Take free cached `block` out of the queue (a hit): its entry in `runs`
        becomes stale. Once stale entries outnumber the queue, `runs` is rebuilt
        from the queue's order, so it never holds more than twice the queue."""
        self.lru.remove(block)
        stale = self.stale
        stale[block] = stale.get(block, 0) + 1
        self.stale_total += 1
        if self.stale_total > len(self.lru) + 64:
            blocks, keys = self.queue_items()
            self.runs = deque([[blocks, keys, 0]]) if blocks else deque()
            stale.clear()
            self.stale_total = 0

    def pop_one(self) -> tuple[int, object]:
        """`pop_oldest(1)`, for one block and its key (the queue must not be empty)."""
        runs = self.runs
        stale = self.stale
        while True:
            run = runs[0]
            blocks, keys, pos = run
            block = blocks[pos]
            if pos + 1 < len(blocks):
                run[2] = pos + 1
            else:
                runs.popleft()
            if stale:
                left = stale.get(block)
                if left:  # an entry a hit left behind
                    if left > 1:
                        stale[block] = left - 1
                    else:
                        del stale[block]
                    self.stale_total -= 1
                    continue
            lru = self.lru
            lru.remove(block)
            if not lru:  # stale entries may be left behind it: drop them too
                runs.clear()
                stale.clear()
                self.stale_total = 0
            return block, keys[pos]

    def pop_oldest(self, count: int) -> tuple[list[int], list]:
        """Take the `count` least recently freed blocks out of the queue (there
        must be that many); return them and their keys, in that order. The
        index is left to the caller."""
        lru = self.lru
        if count == len(lru):
            taken, keys = self.queue_items()
            lru.clear()
            self.runs.clear()
            self.stale.clear()
            self.stale_total = 0
            return taken, keys
        runs = self.runs
        stale = self.stale
        taken: list[int] = []
        taken_keys: list = []
        need = count
        while need:
            run = runs[0]
            blocks, keys, pos = run
            end = pos + need
            part = blocks[pos:end]
            part_keys = keys[pos:end]
            if end >= len(blocks):
                runs.popleft()
            else:
                run[2] = end
            if stale and not stale.keys().isdisjoint(part):
                live = []
                live_keys = []
                for block, key in zip(part, part_keys):
                    left = stale.get(block)
                    if left:  # an entry a hit left behind
                        if left > 1:
                            stale[block] = left - 1
                        else:
                            del stale[block]
                        self.stale_total -= 1
                    else:
                        live.append(block)
                        live_keys.append(key)
                part = live
                part_keys = live_keys
            if taken:
                taken += part
                taken_keys += part_keys
            else:  # (the first part: no copy)
                taken = part
                taken_keys = part_keys
            need -= len(part)
        self._dequeue(taken)
        return taken, taken_keys

    def queue_items(self) -> tuple[list[int], list]:
        """The live entries of `runs` in order, and their keys: the LRU queue,
        least recently freed first."""
        stale = dict(self.stale)
        order = []
        order_keys = []
        for blocks, keys, pos in self.runs:
            if not stale:
                order += blocks[pos:]
                order_keys += keys[pos:]
                continue
            for block, key in zip(blocks[pos:], keys[pos:]):
                if stale.get(block):
                    stale[block] -= 1
                else:
                    order.append(block)
                    order_keys.append(key)
        if any(stale.values()) or sum(self.stale.values()) != self.stale_total:
            raise ValueError("stale entries counted but not in the runs")
        return order, order_keys

    def runs_order(self) -> list[int]:
        """The live entries of `runs` in order (for audits: the queue's order,
        each a member of `lru`)."""
        return self.queue_items()[0]

    # --- tree mode: SGLang's radix tree, in blocks --------------------------------
    # Blocks registered together form a node (a run of tokens inserted at once);
    # a lookup or a registration that ends inside a node splits it there. Every
    # lookup and registration stamps the nodes on its path, root first. Eviction
    # takes a node whose blocks are all free and that has no child node, the
    # oldest stamp first, and evicts all of its blocks at once (SGLang frees
    # whole leaves). Candidates wait in a heap, checked when taken.

    def _new_node(self, blocks: list[int], parent: int | None, stamp: int) -> int:
        node = self.next_node
        self.next_node += 1
        self.nodes[node] = [list(blocks), parent, 0, stamp]  # blocks, parent, children, stamp
        for block in blocks:
            self.node_of[block] = node
        if parent is not None:
            self.nodes[parent][2] += 1
        self._offer(node)
        return node

    def _offer(self, node: int) -> None:
        info = self.nodes.get(node)
        if info is not None and not info[2]:
            heapq.heappush(self.candidates, (info[3], node))

    def offer_blocks(self, blocks: list[int]) -> None:
        """`blocks` became free: their nodes may now be evictable."""
        node_of = self.node_of
        offered = set()
        for block in blocks:
            node = node_of.get(block)
            if node is not None and node not in offered:
                offered.add(node)
                self._offer(node)

    def split_after(self, block: int) -> None:
        """Split the node of `block` so that `block` ends its node. The part cut
        off below is stamped now: SGLang's split refreshes it, though the lookup
        or insert that split it stops above it."""
        node = self.node_of.get(block)
        if node is None:
            return
        info = self.nodes[node]
        blocks = info[0]
        i = blocks.index(block)
        if i == len(blocks) - 1:
            return
        parent = info[1]
        head = self._new_node(blocks[:i + 1], parent, info[3])
        if parent is not None:
            self.nodes[parent][2] -= 1
        info[0] = blocks[i + 1:]
        info[1] = head
        self.nodes[head][2] += 1
        self.clock += 1
        info[3] = self.clock
        self._offer(node)

    def add_run(self, blocks: list[int], parent_block: int | None) -> None:
        """Blocks registered together: a new leaf node under the node of
        `parent_block`, split after it (SGLang's insert of a run of new tokens)."""
        parent = None
        if parent_block is not None and parent_block in self.node_of:
            self.split_after(parent_block)
            parent = self.node_of[parent_block]
        self._new_node(blocks, parent, 0)

    def touch_path(self, block: int) -> None:
        """Stamp the nodes from the root down to the node of `block`."""
        path = []
        node = self.node_of.get(block)
        nodes = self.nodes
        while node is not None:
            path.append(node)
            node = nodes[node][1]
        for node in reversed(path):
            self.clock += 1
            nodes[node][3] = self.clock
            self._offer(node)

    def evict_node(self) -> list[int] | None:
        """Evict the evictable leaf node stamped longest ago; return its blocks."""
        nodes = self.nodes
        lru = self.lru
        heap = self.candidates
        while heap:
            stamp, node = heapq.heappop(heap)
            info = nodes.get(node)
            if (info is None or info[3] != stamp or info[2]
                    or any(b not in lru for b in info[0])):
                continue
            del nodes[node]
            if info[1] is not None:
                nodes[info[1]][2] -= 1
                self._offer(info[1])
            for block in info[0]:
                del lru[block]
                self._forget(block)
                del self.node_of[block]
            return info[0]
        return None

    def evict(self) -> list[int]:
        """Forget the keys of the cached blocks eviction takes and return them: the
        least recently freed block, or in tree mode a whole leaf node (the
        allocator hands out the first and keeps the others as plain blocks)."""
        if self.tree:
            node = self.evict_node()
            if node:
                return node
        if self.runs is not None:
            (block,), (key,) = self.pop_oldest(1)
        else:
            block, key = self.lru.popitem(last=False)
        if key is None:
            self._forget(block)
        else:
            self.forget_key(block, key)
        if self.tree:
            self._detach(block)
        return [block]

    def _forget(self, block: int) -> None:
        """Drop `block`'s key; a duplicate of it takes its place in the index."""
        self.forget_key(block, self.key_of.pop(block))

    def forget_key(self, block: int, key) -> None:
        """The index side of `_forget`, once `key_of` no longer names `block` (or
        never did: vLLM's cache)."""
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

    def _detach(self, block: int) -> None:
        """Take `block` out of its node (tree mode, when no whole node could go: a
        node part of which is held)."""
        node = self.node_of.pop(block, None)
        if node is None:
            return
        info = self.nodes[node]
        info[0].remove(block)
        if not info[0]:
            del self.nodes[node]
            if info[1] is not None:
                self.nodes[info[1]][2] -= 1
                self._offer(info[1])

    def writer(self, block: int) -> tuple[str, int] | None:
        """Forget and return who wrote `block` (tracked only with `writers` on)."""
        return self.writers.pop(block, None) if self.writers is not None else None
