"""The radix tree's free keyed blocks, in the order they were freed (§8.6),
kept per node: a whole node is freed, found and evicted in a few operations,
with nothing written per block.

The radix tree (`radix_cache`) frees a request's blocks in one batch, and
what it frees is whole nodes (a request's blocks are a run of its own nodes
after its hits, which cover whole nodes: a look-up splits the node it ends
in); it evicts whole nodes. So a node keeps how many of its blocks are free
(`FREE`) and, while that is all of them or none, which batch freed them
(`BATCH`): a block is free exactly when its node's are. A node some of whose
blocks are free and some held (a hit on one block, a block adopted by
another request, a table freed without all of a node) becomes *loose*
(`LOOSE`): from then on each of its blocks keeps its own batch in `since`
(0: held), as every block did before this layout. On the Mooncake trace
under `sglang` nine million blocks pass through the cache and a loose node
is rare; writing and reading a per-block state at every freeing and
eviction (a list item set through a bound method costs about 0.1-0.2 us)
was about a third of the cache's per-block work.

Which node holds a block is the tree's `node_at` (block -> node), named at
each node's ends (`node_names`, a base of the queue: `node`, `holder`, `runs`).

The order freed is kept as the batches given back, in order, each with its
blocks, how many of them are still free from it, and how far `pop_oldest`
scanned it: a batch's entry for a block is current while the block is free
from that batch (its node's `BATCH`, or its own `since` in a loose node),
stale once it left; a batch goes when none of its blocks is left. Only
`pop_oldest` (no whole node can go) and iteration read the entries.
"""
from __future__ import annotations

from collections import Counter
from itertools import compress, repeat
from operator import eq, itemgetter, not_
from typing import Iterator

from .node_names import NodeNames

__all__ = ["FreeQueue", "BLOCKS", "FREE", "BATCH", "LOOSE", "entries_at"]

# A node's entries (see `radix_cache.RadixCache.nodes`) that this module reads
# and writes: its blocks, how many of them are free, the batch that freed them
# all (not loose), whether each block keeps its own batch in `since` (loose).
BLOCKS, FREE, BATCH, LOOSE = 0, 5, 6, 7


def entries_at(values: list, positions: list[int]) -> list:
    """`[values[i] for i in positions]` (positions within reach, at least one), in
    C: an itemgetter reads about 30 ns an item, a map over the list's bound
    __getitem__ (a slot wrapper) about 95 and a comprehension about 75 (timed on
    230 positions, this machine)."""
    if len(positions) == 1:
        return [values[positions[0]]]
    return list(itemgetter(*positions)(values))


class FreeQueue(NodeNames):
    """The free keyed blocks of a radix tree whose `nodes` and `node_at` it shares
    (see the module docstring). `in`, `len` and iteration (least recently freed
    first) are a container's."""

    __slots__ = ("nodes", "node_at", "ends_only", "since", "size", "batches", "next_batch",
                 "entries")

    def __init__(self, nodes: dict[int, list], node_at: list,
                 ends_only: dict[int, list] | None = None) -> None:
        self.nodes = nodes
        self.node_at = node_at
        # node -> its entry in `nodes`, for the nodes whose middle blocks `node_at`
        # does not name (the tree's; see the module docstring).
        self.ends_only = {} if ends_only is None else ends_only
        # block -> the batch that freed it, 0 while held: read only for the
        # blocks of loose nodes.
        self.since: list[int] = []
        self.size = 0  # blocks free
        # number -> [its blocks, how many are still free from it, entries scanned
        # by `pop_oldest`], oldest first (a dict keeps the order batches came in).
        self.batches: dict[int, list] = {}
        self.next_batch = 1
        self.entries = 0  # entries in the batches kept, stale ones included

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __contains__(self, block: object) -> bool:
        info = self.node(block)
        if info is None:
            return False
        return self.since[block] != 0 if info[LOOSE] else info[FREE] != 0

    def _current(self, block: int, batch: int) -> bool:
        """Whether `batch`'s entry for `block` is current (it is free from it)."""
        info = self.node(block)
        if info is None:
            return False
        if info[LOOSE]:
            return self.since[block] == batch
        return info[FREE] != 0 and info[BATCH] == batch

    def __iter__(self) -> Iterator[int]:
        for batch, (blocks, _, _) in list(self.batches.items()):
            for block in blocks:
                if self._current(block, batch):
                    yield block

    def __repr__(self) -> str:
        return f"FreeQueue({list(self)})"

    def reach(self, top: int) -> None:
        """Make room for block numbers up to `top`."""
        if top >= len(self.since):
            self.since.extend(repeat(0, top + 1 - len(self.since)))

    # --- blocks in ------------------------------------------------------------

    def give(self, blocks: list[int], held_by: list) -> tuple[list[int], set[int]]:
        """Blocks nobody holds any more, in the order freed, and their entries in
        `node_at`: those in a node join the tail as one batch (`add`). Returns the
        plain ones, in order, and the nodes that got free blocks."""
        nodes = self.nodes
        named = set(held_by)
        gone = [node for node in named if node not in nodes]  # None, or evicted
        if not gone:
            self.add(list(blocks), held_by)
            return (), named
        unkeyed = sum(map(held_by.count, gone))
        if unkeyed == len(blocks):
            return list(blocks), set()
        if unkeyed <= 4:
            # Usually one, the request's last block (partly written): the plain
            # ones are picked out by position, not by a mask over every block.
            at = []
            for node in gone:
                i = -1
                for _ in range(held_by.count(node)):
                    i = held_by.index(node, i + 1)
                    at.append(i)
            at.sort()
            plain = [blocks[i] for i in at]
            keyed = list(blocks)
            for i in reversed(at):
                del keyed[i]
                del held_by[i]
        else:
            out = list(map(set(gone).__contains__, held_by))
            plain = list(compress(blocks, out))
            keep = list(map(not_, out))
            keyed = list(compress(blocks, keep))
            held_by = list(compress(held_by, keep))
        named.difference_update(gone)
        self.add(keyed, held_by)
        return plain, named

    def give_nodes(self, blocks: list[int]) -> tuple[list[int], set[int]] | None:
        """`give` for the common shape, found a node at a time: a freed table, tail
        first, is some plain blocks (its last, partly written block; a retracted
        request's outputs) and then whole nodes, each run being a held node's
        blocks in reverse order. Those join the tail as one batch, each node all
        free from it, as `give` would make them. Returns what `give` would, or
        None (nothing changed) when `blocks` is not of that shape.

        Speed: `give` reads each block's node (`entries_at`), hashes them into a
        set and counts them per node; here a run costs one `node_at` read and one
        list comparison in C (a freed Mooncake table is about 750 blocks in a few
        nodes; `give` and `add` were 8% of the samples of its replay)."""
        node_at, nodes = self.node_at, self.nodes
        end = len(blocks)
        reach = len(node_at)
        p = 0
        # The leading plain blocks: outside `node_at`, never keyed, or their node gone.
        while p < end:
            block = blocks[p]
            if block < reach and node_at[block] in nodes:
                break
            p += 1
        plain = blocks[:p] if p else ()
        runs = []
        while p < end:
            block = blocks[p]
            if block >= reach:
                return None
            node = node_at[block]
            info = nodes.get(node)
            if info is None or info[FREE] or info[LOOSE]:
                return None
            own = info[BLOCKS]
            size = len(own)
            # (A node's blocks as the run, last first: `own[::-1]`, compared in C.)
            if own[-1] != block or blocks[p:p + size] != own[::-1]:
                return None
            runs.append((node, info))
            p += size
        if not runs:
            return list(plain), set()
        batch = self.next_batch
        self.next_batch = batch + 1
        named = set()
        for node, info in runs:
            info[FREE] = len(info[BLOCKS])
            info[BATCH] = batch
            named.add(node)
        keyed = blocks[len(plain):] if plain else list(blocks)
        count = len(keyed)
        self.batches[batch] = [keyed, count, 0]
        self.size += count
        self.entries += count
        if self.entries > 8 * self.size + 65536:
            self._compact()  # (as `add`)
        return (list(plain) if plain else ()), named

    def add(self, blocks: list[int], held_by: list[int]) -> None:
        """`blocks`, keyed and held until now, join the tail in order as one batch
        (the list becomes the queue's); `held_by[i]` is the node of `blocks[i]`."""
        if not blocks:
            return
        batch = self.next_batch
        self.next_batch = batch + 1
        nodes = self.nodes
        first = held_by[0]
        if held_by.count(first) == len(held_by):  # (one node: a count, no grouping)
            self._freed(nodes[first], first, len(blocks), batch, blocks, held_by)
        else:
            for node in set(held_by):
                self._freed(nodes[node], node, held_by.count(node), batch, blocks, held_by)
        self.batches[batch] = [blocks, len(blocks), 0]
        self.size += len(blocks)
        self.entries += len(blocks)
        if self.entries > 8 * self.size + 65536:
            self._compact()  # (blocks left free long ago keep their batches)

    def _freed(self, info: list, node: int, count: int, batch: int,
               blocks: list[int], held_by: list[int]) -> None:
        """`count` held blocks of `node` (those `held_by` names) became free in `batch`."""
        if not info[LOOSE]:
            if not info[FREE] and count == len(info[BLOCKS]):
                info[FREE] = count  # the whole node, at once: the common case
                info[BATCH] = batch
                return
            self._loosen(info)
        mine = compress(blocks, map(eq, held_by, repeat(node)))
        since = self.since
        for block in mine:
            since[block] = batch
        info[FREE] += count

    def _loosen(self, info: list) -> None:
        """Give each block of a node that is not loose its own state in `since`."""
        value = info[BATCH] if info[FREE] else 0
        self.reach(max(info[BLOCKS]))  # (a middle block may lie beyond `node_at`'s reach)
        since = self.since
        for block in info[BLOCKS]:
            since[block] = value
        info[LOOSE] = True

    def split(self, tail: list, head: list) -> None:
        """A node split: `head` (new, its blocks the first of `tail`'s, which still
        holds them all) takes its part of the free state."""
        if tail[LOOSE]:  # each block says
            since = self.since
            free = sum(1 for block in head[BLOCKS] if since[block])
            head[LOOSE] = True
        else:  # all free or none
            free = len(head[BLOCKS]) if tail[FREE] else 0
        head[FREE], head[BATCH] = free, tail[BATCH]
        tail[FREE] -= free

    # --- blocks out -------------------------------------------------------------

    def remove(self, block: int) -> None:
        """Take free `block` out (a hit: a request holds it again)."""
        info = self.node(block)
        if info is None or not (self.since[block] if info[LOOSE] else info[FREE]):
            raise KeyError(block)
        self.size -= 1
        if not info[LOOSE]:
            if len(info[BLOCKS]) == 1:
                info[FREE] = 0
                self._left(info[BATCH], 1)
                return
            self._loosen(info)
        batch = self.since[block]
        self.since[block] = 0
        info[FREE] -= 1
        if not info[FREE]:
            info[LOOSE] = False  # every block held again: one state for the node
        self._left(batch, 1)

    def hits(self, blocks: list[int]) -> set[int]:
        """`remove` each of `blocks` that is free; return the set of those. Whole
        nodes found whole and free (a hit covers whole nodes) go in one step,
        found a node at a time (`runs`): their middle blocks need no entry."""
        runs = self.runs(blocks)
        if runs is None or (runs and runs[-1][1] != len(runs[-1][0][BLOCKS])):
            # Not whole nodes: a node part of which is shared is no longer held alike
            # in all its blocks, so every node's blocks are named from now on
            # (`ends_only` holds only nodes held alike), and each block is asked.
            self.write_ends_only()
            return self._hits_by_block(blocks)
        found: set[int] = set()
        for info, size in runs:
            if not info[FREE]:
                continue
            if not info[LOOSE] and size == info[FREE]:
                info[FREE] = 0  # free whole, and hit whole
                self._left(info[BATCH], size)
                self.size -= size
                found.update(info[BLOCKS])
                continue
            for block in info[BLOCKS]:
                if block in self:
                    self.remove(block)
                    found.add(block)
        return found

    def _hits_by_block(self, blocks: list[int]) -> set[int]:
        """`hits`, each block's node read from `node_at` (every entry named)."""
        node_at = self.node_at
        nodes = self.nodes
        if not blocks or max(blocks) >= len(node_at):
            found = [block for block in blocks if block in self]
            for block in found:
                self.remove(block)
            return set(found)
        held_by = entries_at(node_at, blocks)
        found: set[int] = set()
        for node in set(held_by):
            info = nodes.get(node) if node is not None else None
            if info is None or not info[FREE]:
                continue
            size = len(info[BLOCKS])
            if not info[LOOSE] and size == info[FREE] == held_by.count(node):
                info[FREE] = 0  # free whole, and hit whole
                self._left(info[BATCH], size)
                self.size -= size
                found.update(info[BLOCKS])
                continue
            for block in compress(blocks, map(eq, held_by, repeat(node))):
                if block in self:
                    self.remove(block)
                    found.add(block)
        return found

    def count_in(self, blocks: list[int]) -> int:
        """How many of `blocks` are free: a node at a time (`runs`; a node not loose
        is all free or none), else a block at a time."""
        runs = self.runs(blocks)
        if runs is not None:
            count = 0
            since = self.since
            for info, n in runs:
                if info[FREE]:
                    if info[LOOSE]:
                        count += sum(1 for block in info[BLOCKS][:n] if since[block])
                    else:
                        count += n
            return count
        self.write_ends_only()
        node_at = self.node_at
        if not blocks or max(blocks) >= len(node_at):
            return sum(1 for b in blocks if b in self)
        held_by = entries_at(node_at, blocks)
        nodes = self.nodes
        count = 0
        for node in set(held_by):
            info = nodes.get(node) if node is not None else None
            if info is None or not info[FREE]:
                continue
            if info[LOOSE]:
                count += sum(1 for block in compress(blocks, map(eq, held_by, repeat(node)))
                             if self.since[block])
            else:
                count += held_by.count(node)
        return count

    def take_node(self, info: list) -> None:
        """Take out the blocks of a node that are all free (it is evicted whole)."""
        blocks = info[BLOCKS]
        if info[LOOSE]:
            for batch, count in Counter(map(self.since.__getitem__, blocks)).items():
                self._left(batch, count)
        else:
            self._left(info[BATCH], len(blocks))
        info[FREE] = 0
        self.size -= len(blocks)

    def pop_oldest(self) -> int:
        """Take out and return the least recently freed block (its node keeps it:
        the tree takes it out, `radix_cache.RadixCache._detach`)."""
        self.write_ends_only()  # (each entry is read, here and by `_detach`)
        current = self._current
        for batch, entry in self.batches.items():
            blocks = entry[0]
            for i in range(entry[2], len(blocks)):
                block = blocks[i]
                if current(block, batch):
                    entry[2] = i + 1
                    info = self.node(block)
                    if info[LOOSE]:
                        self.since[block] = 0
                    info[FREE] -= 1  # (not loose: its node loses the block, below)
                    if not info[FREE]:
                        info[LOOSE] = False
                    self.size -= 1
                    self._left(batch, 1)
                    return block
        raise KeyError("pop from an empty FreeQueue")

    def _left(self, batch: int, count: int) -> None:
        """`count` blocks of `batch` are no longer free; a batch with none left goes."""
        entry = self.batches[batch]
        entry[1] -= count
        if not entry[1]:
            del self.batches[batch]
            self.entries -= len(entry[0])

    def _compact(self) -> None:
        """Drop the stale entries: the live blocks, in order, become one new batch
        (same order, so nothing observable changes)."""
        self.write_ends_only()  # (each live block's entry is read)
        live = list(self)
        batch = self.next_batch
        self.next_batch = batch + 1
        nodes, node_at, since = self.nodes, self.node_at, self.since
        for block in live:
            info = nodes[node_at[block]]
            if info[LOOSE]:
                since[block] = batch
            else:
                info[BATCH] = batch
        self.batches = {batch: [live, len(live), 0]} if live else {}
        self.entries = len(live)
