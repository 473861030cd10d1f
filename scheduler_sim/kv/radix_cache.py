"""SGLang's radix tree, in blocks (§8.6): the prefix cache whose eviction takes
whole leaf nodes, least recently looked up first.

Blocks registered together form a node (a run of tokens inserted at once;
a run is cut where the prompt ends, so that the outputs go first); a look-up
or a registration that ends inside a node splits it there. Every look-up
and registration stamps the nodes on its path, root first, a registration
that adds nothing too (SGLang's insert walks the path it already holds). Eviction takes a
node whose blocks are all free and that has no child node, the oldest stamp
first, and evicts all of its blocks at once (SGLang frees whole leaves);
candidates wait in a heap, checked when taken (a look-up pushes its path's
leaf again with its new stamp, so the heap is rebuilt from the leaves
whenever it holds more than twice as many entries as there are nodes: its
size stays bounded on a trace of any length, and the rebuilt heap holds
every entry that can still be taken). When no whole node can go
(part of every leaf is held) the least recently freed block goes alone.

Decoded tokens are keyed only when the request finishes (`register_decoded`
does nothing), so a retracted request's outputs are never cached. A request
that wrote a block the cache already holds (another request computed it in
the same step) takes the cached block: `register` names those table
positions and the allocator swaps them (SGLang's insert keeps one copy).

A node is the unit of work: it keeps its blocks and their keys side by side
(`nodes`), so that a run is keyed, freed and evicted with a few operations
over the run, in C. Per block there is only its key's place in the index (in
its hash entry's bucket: `radix_index`) and its node in `node_at` (a list by
block number, named at a new node's first and last blocks only: `node_names`);
whether a block is free is its node's (`free_queue.FreeQueue`: a count per node, per block only in the rare
node part of which is held). On the Mooncake trace under `sglang` nine
million blocks pass through the cache. `node_of` and `key_of` are views
built from these, for audits and tests.
"""
from __future__ import annotations

import heapq
from itertools import repeat

from .free_queue import FreeQueue, entries_at
from .radix_audit import audit_tree
from .radix_index import RadixIndex
from .radix_stamps import Stamps
from .radix_walk import walk
from .prefix_cache import PrefixCache

__all__ = ["RadixCache"]


class RadixCache(Stamps, PrefixCache):
    """Keyed blocks as nodes of a radix tree; eviction by whole free leaves."""

    def __init__(self, compact: bool = False) -> None:
        super().__init__(compact)
        self.index: RadixIndex = RadixIndex()
        self.clock = 0  # the last stamp given
        # block -> its node (None: not keyed), for every block number within reach;
        # an entry naming a node that no longer exists means None (an evicted
        # node's blocks are not cleared: `_node`).
        self.node_at: list[int | None] = []
        # node -> [blocks, parent, children, stamp, keys, free, batch, loose]:
        # `keys[i]` is the key of `blocks[i]` (`keys` a `range` when they are one run of
        # consecutive integer keys: `radix_walk`); the last three are the free queue's
        # (`free_queue`: how many blocks are free, since which batch, or each its own).
        self.nodes: dict[int, list] = {}
        # node -> its entry, for the nodes named at their ends only (`node_names`).
        self.ends_only: dict[int, list] = {}
        self.free_blocks = FreeQueue(self.nodes, self.node_at, self.ends_only)
        self.hit = self.free_blocks.remove
        self.hits = self.free_blocks.hits
        self.next_node = 0
        self.candidates: list[tuple[int, int]] = []  # (stamp, node) heap, checked when popped
        self.detached = 0  # blocks taken out of a node alone: voids kept answers (`find`)
        self.found_again = 0  # look-ups answered by a kept answer (`find`; for tests)

    def _node(self, block: int) -> int | None:
        """The node holding `block`, if any (`FreeQueue.holder`)."""
        return self.free_blocks.holder(block)

    @property
    def node_of(self) -> dict[int, int]:
        """Each keyed block's node (a view built from the nodes, for audits and tests)."""
        return {block: node for node, info in self.nodes.items() for block in info[0]}

    # --- the protocol -------------------------------------------------------------

    def register(self, rid, keys, full, table):
        """Key `table[keys.registered:full]`: the blocks new to the cache form one
        leaf (cut where the prompt ends); a block whose key the cache holds in
        another block is to be swapped for it (the answer); the path to the run's
        last block is split there and stamped."""
        start = keys.registered
        if full <= start:
            # Nothing new (e.g. a request ends without filling another block):
            # SGLang's insert still walks the path it holds and stamps it. (The
            # keys of registered blocks are computed already: a look-up's hits
            # were compared by key, a registration computed what it keyed;
            # test_register_keys.)
            last = self.index.get(keys.key_at(full - 1)) if full else None
            if last is not None:
                self.stamp_path(self.split_after(last))
            return None
        keys.ensure(full, False)  # (as runs: no list of the keys made, `span`)
        index = self.index
        if keys.hashes is not None and not index.buckets:
            # Buckets of integer keys as wide as a hash entry's blocks.
            index.set_width(-(-keys.hash_block_size // keys.block_size))
        writers = self.writers
        new_keys = keys.span(start, full)  # (a `range` when one run: a node's keys)
        new_blocks = table[start:full]
        node = self._node
        first = new_blocks[0]
        named = self.node_at[first] if first < len(self.node_at) else None
        if named not in self.nodes and index.get(new_keys[0]) != first:
            # (Its first block is keyed if named, or if the index names it for its key:
            # a middle block of a node in `ends_only`; a keyed block is at its key's place.)
            # Each key indexed to this request's block unless cached already, a few
            # slices per hash entry (`KeyIndex.add`), which names the keys cached
            # already with another block (was one `dict.setdefault` per key, in C).
            # Blocks keyed already can only lead the run (a look-up's hits, when the
            # caller did not count them registered): its first is not.
            cached = index.add(keys, start, full, table)
            if cached:
                cached = list(map(index.get, new_keys))
        else:
            cached = list(map(index.setdefault, new_keys, new_blocks))
        if cached:
            # Blocks asked about one by one below, and blocks a request may adopt
            # (then a node may be held by it in part): every node's blocks named.
            self.free_blocks.write_ends_only()
        swaps = None
        if not cached:
            # Every key was new (the common case; a request's keys are distinct).
            first_new = start
            if writers is not None:
                writers.update(zip(new_blocks, zip(repeat(rid), range(start, full))))
        else:
            # Some were cached: a position whose key names another block holds an
            # unkeyed copy of it, to be swapped for the cached block.
            first_new = None
            run, run_keys = [], []
            for i, key, block, found in zip(range(start, full), new_keys, new_blocks, cached):
                if found == block and node(block) is None:
                    run.append(block)
                    run_keys.append(key)
                    if first_new is None:
                        first_new = i
                    if writers is not None:
                        writers[block] = (rid, i)
                elif node(block) is None:
                    if swaps is None:
                        swaps = []
                    swaps.append((i, found))
            new_blocks, new_keys = run, run_keys
        if new_blocks:
            # One leaf for the run, cut where the prompt ends: SGLang splits a
            # request's insert there so that its outputs go first.
            parent = index.get(keys.key_at(first_new - 1)) if first_new else None
            cut = keys.prompt_tokens // keys.block_size - first_new
            if 0 < cut < len(new_blocks):
                self.add_run(new_blocks[:cut], new_keys[:cut], parent)
                parent = new_blocks[cut - 1]
                new_blocks, new_keys = new_blocks[cut:], new_keys[cut:]
            self.add_run(new_blocks, new_keys, parent)
        last = index.get(keys.key_at(full - 1))
        if last is not None:
            # (The run may end inside a cached node: split there.)
            self.stamp_path(self.split_after(last))
        keys.registered = full
        return swaps

    # Nothing for `register_decoded` to do: the engine skips its calls (289,049
    # on the Mooncake trace, 238,212 of them from folded stretches; about 1.9%
    # of a sampling profile's own time, and their calls).
    keys_decoded = False

    def register_decoded(self, rid, keys, full, table):
        """Nothing: decoded tokens are keyed when the request finishes."""
        return None

    def find(self, keys, max_blocks):
        """`_walk`'s blocks, given again without a walk while they hold.

        SGLang's waiting-prefix refresh looks the same waiting requests up again
        every 32nd pass (102,929 of the 126,505 look-ups of the Mooncake trace),
        and 112,986 of all look-ups found what the same request's previous one,
        as far, found. So the answer is kept in the request's keys
        (`BlockKeys.found`) with the nodes the walk went through and the key it
        stopped at, and is the answer again while every one of those nodes
        exists (a node's blocks leave it only when it is evicted whole, or split
        off into a new parent, which lives while it has a child) and that key is
        still not cached; a block taken out of a node alone (`_detach`) voids
        every answer kept. The keys were computed by the first walk already."""
        found = keys.found
        if (found is not None and found[0] is self and found[1] == max_blocks
                and found[5] == self.detached
                and all(map(self.nodes.__contains__, found[3]))
                and (found[4] is None or self.index.get(found[4]) is None)):
            self.found_again += 1
            return found[2][:]
        hits, path, missing = self._walk(keys, max_blocks)
        keys.found = (self, max_blocks, hits[:], path, missing, self.detached)
        return hits

    # A look-up's walk, reading the request's keys as runs (`radix_walk`).
    _walk = walk

    def touch(self, block):
        """A look-up's run ends at `block`: split its node there, stamp its path."""
        self.stamp_path(self.split_after(block))

    def take(self, rid, table, count):
        """Evict whole nodes until `count` blocks are free, into `table`: one
        eviction per node; what the last node had beyond `count` is spare."""
        evictions = 0
        if count <= 0:
            return evictions, []
        report = self.report
        # Each eviction's blocks go to the table at once, the last one's but what it
        # has beyond `count` (was: gathered in a list, then copied to the table).
        while True:
            gone = self.evict_one()
            evictions += 1
            if report is not None:  # the block handed out first stands for the node
                self._report_writers(rid, gone[:1])
            if len(gone) < count:
                table += gone
                count -= len(gone)
                continue
            if len(gone) == count:
                table += gone
                return evictions, []
            table += gone[:count]
            return evictions, gone[count:]

    def give_back(self, blocks, keyed=(), keys=()):
        """Blocks in a node join the free queue's tail in order (the rest are plain);
        the nodes of the blocks freed may now be evictable."""
        if not blocks:
            return ()
        given = self.free_blocks.give_nodes(blocks)  # (the common shape: whole nodes)
        if given is not None:
            plain, named = given
            self._offer_nodes(named)
            return plain
        # Else (a table freed in part of a node: every node named whole first) one
        # look-up per block, in C, gives its node; whether it is keyed is asked once
        # per node.
        self.free_blocks.write_ends_only()
        self.free_blocks.reach_all(max(blocks))  # (a block never keyed may lie beyond)
        held_by = entries_at(self.node_at, blocks)
        plain, named = self.free_blocks.give(blocks, held_by)
        self._offer_nodes(named)
        return plain

    def count_free(self, blocks):
        """How many of `blocks` are free cached blocks."""
        return self.free_blocks.count_in(blocks)

    def evict_one(self) -> list[int]:
        """Forget the keys of the blocks eviction takes next and return them: the
        evictable leaf node stamped longest ago, else the least recently freed
        block alone (taken out of its node)."""
        node = self.evict_node()
        if node:
            return node
        block = self.free_blocks.pop_oldest()
        self._detach(block)
        return [block]

    @property
    def key_of(self) -> dict[int, object]:
        """Each keyed block's key (a view built from the nodes, for audits and tests)."""
        return {block: key for blocks, _, _, _, keys, *_ in self.nodes.values()
                for block, key in zip(blocks, keys)}

    def audit(self, tables, carried, orphans):
        """The tree's full check (`radix_audit.audit_tree`)."""
        audit_tree(self, carried, tables, orphans)

    # --- the tree -----------------------------------------------------------------

    def _new_node(self, blocks: list[int], keys: list | range, parent: int | None, stamp: int,
                  ends: bool = True) -> int:
        """A node of `blocks` and their `keys` (a list it takes as its own, or a
        `range`: every caller passes slices made for it) under `parent`, named at
        its first and last blocks only if `ends` (`node_names`), else at every
        block."""
        node = self.next_node
        self.next_node += 1
        info = self.nodes[node] = [blocks, parent, 0, stamp, keys, 0, 0, False]
        if ends and len(blocks) > 2:
            self.free_blocks.name(node, blocks[0])
            self.free_blocks.name(node, blocks[-1])
            self.ends_only[node] = info
        else:
            self.free_blocks.name_blocks(node, blocks)
        if parent is not None:
            self.nodes[parent][2] += 1
        self._offer(node)
        return node

    def split_after(self, block: int) -> int | None:
        """Split the node of `block` so that `block` ends its node; return that node
        (None: `block` is in none). The part cut off below is stamped now:
        SGLang's split refreshes it, though the lookup or insert that split it
        stops above it."""
        # (`_node` inline, and the node returned for `stamp_path` and `add_run`,
        # which asked `_node` again: 202,960 calls on the Mooncake trace.)
        node_at = self.node_at
        node = node_at[block] if 0 <= block < len(node_at) else None
        info = self.nodes.get(node)
        if info is None:
            # (Not named: plain, or a middle block of a node in `ends_only`.)
            node = self._node(block)
            if node is None:
                return None
            info = self.nodes[node]
        blocks = info[0]
        if blocks[-1] == block:
            return node  # (most look-ups end where a node does: no scan of its blocks)
        i = blocks.index(block)
        parent = info[1]
        # (The head is named whole unless the node split was named at its ends only.)
        head = self._new_node(blocks[:i + 1], info[4][:i + 1], parent, info[3],
                              node in self.ends_only)
        self.free_blocks.split(info, self.nodes[head])
        if parent is not None:
            self.nodes[parent][2] -= 1
        info[0] = blocks[i + 1:]
        info[4] = info[4][i + 1:]
        info[1] = head
        self.free_blocks.name(node, blocks[i + 1])  # (its first block now)
        self.nodes[head][2] += 1
        self.clock += 1
        info[3] = self.clock
        self._offer(node)
        return head

    def add_run(self, blocks: list[int], keys: list | range, parent_block: int | None) -> None:
        """Blocks registered together, with their keys (the node takes both): a
        new leaf node under the node of `parent_block`, split after it (SGLang's
        insert of a run of new tokens)."""
        parent = self.split_after(parent_block) if parent_block is not None else None
        self._new_node(blocks, keys, parent, 0)

    def evict_node(self) -> list[int] | None:
        """Evict the evictable leaf node stamped longest ago; return its blocks."""
        nodes = self.nodes
        free = self.free_blocks
        heap = self.candidates
        while heap:
            stamp, node = heapq.heappop(heap)
            info = nodes.get(node)
            if info is None or info[3] != stamp or info[2]:
                continue
            blocks = info[0]
            if info[5] != len(blocks):
                continue  # (some are held)
            # Nothing is written per block but the keys' removal from the index: the
            # free queue's count is per node, and `node_at` keeps naming the node,
            # which is gone (a node evicted holds 230 blocks on average on the
            # Mooncake trace). (A plain loop: a map over the dict's bound
            # __delitem__, a slot wrapper, costs about a third more a key.)
            free.take_node(info)
            del nodes[node]
            self.ends_only.pop(node, None)
            if info[1] is not None:
                nodes[info[1]][2] -= 1
                self._offer(info[1])
            self.index.forget_node(info[4], blocks)
            return blocks
        return None

    def _detach(self, block: int) -> None:
        """Take `block` out of its node and forget its key (when no whole node could
        go: a node part of which is held; `pop_oldest` named every node whole)."""
        node = self.node_at[block]
        self.node_at[block] = None
        self.detached += 1
        info = self.nodes[node]
        i = info[0].index(block)
        del info[0][i]
        keys = info[4]
        if type(keys) is not range:
            key = keys.pop(i)
        elif i == 0 or i == len(keys) - 1:  # (a run's end leaves: still one run)
            key = keys[i]
            info[4] = keys[1:] if i == 0 else keys[:-1]
        else:  # (a run cut in two: a list now)
            info[4] = keys = list(keys)
            key = keys.pop(i)
        del self.index[key]
        if not info[0]:
            del self.nodes[node]
            parent = info[1]
            if info[2]:
                # Its children now hang from its parent (a scan of the nodes: this
                # happens only when a held leaf keeps an interior block's node).
                for other in self.nodes.values():
                    if other[1] == node:
                        other[1] = parent
                if parent is not None:
                    self.nodes[parent][2] += info[2]
            if parent is not None:
                self.nodes[parent][2] -= 1
                self._offer(parent)
