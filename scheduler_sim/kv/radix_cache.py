"""SGLang's radix tree, in blocks (§8.6): the LRU cache whose eviction takes whole
leaf nodes, least recently looked up first.

Blocks registered together form a node (a run of tokens inserted at once;
a run is cut where the prompt ends, so that the outputs go first); a look-up
or a registration that ends inside a node splits it there. Every look-up
and registration stamps the nodes on its path, root first. Eviction takes a
node whose blocks are all free and that has no child node, the oldest stamp
first, and evicts all of its blocks at once (SGLang frees whole leaves);
candidates wait in a heap, checked when taken. When no whole node can go
(part of every leaf is held) the least recently freed block goes alone.

Decoded tokens are keyed only when the request finishes (`register_decoded`
does nothing), so a retracted request's outputs are never cached. A request
that wrote a block the cache already holds (another request computed it in
the same step) takes the cached block: `register` names those table
positions and the allocator swaps them (SGLang's insert keeps one copy).
"""
from __future__ import annotations

import heapq
from collections import deque
from itertools import repeat

from ..records.errors import InvariantError
from .lru_cache import LruCache

__all__ = ["RadixCache"]


class RadixCache(LruCache):
    """Keyed blocks as nodes of a radix tree; eviction by whole free leaves."""

    def __init__(self, compact: bool = False) -> None:
        super().__init__(compact)
        self.clock = 0  # the last stamp given
        self.node_of: dict[int, int] = {}
        self.nodes: dict[int, list] = {}  # node -> [blocks, parent, children, stamp]
        self.next_node = 0
        self.candidates: list[tuple[int, int]] = []  # (stamp, node) heap, checked when popped

    # --- the protocol -------------------------------------------------------------

    def register(self, rid, keys, full, table):
        """Key `table[keys.registered:full]`: the blocks new to the cache form one
        leaf (cut where the prompt ends); a block whose key the cache holds in
        another block is to be swapped for it (the answer); the path to the run's
        last block is split there and stamped."""
        start = keys.registered
        if full <= start:
            self._registered(keys, start, start)
            return None
        key_list = keys.ensure(full)
        index = self.index
        key_of = self.key_of
        writers = self.writers
        new_keys = key_list[start:full]
        if index.keys().isdisjoint(new_keys):
            # Every key is new (the common case): the run is indexed in C, one
            # dict update each way, not one Python step per block (the loop
            # below cost a third of a Mooncake replay under sglang). A request's
            # keys are distinct (chained), so the updates do what the loop does.
            new_blocks = table[start:full]
            index.update(zip(new_keys, new_blocks))
            key_of.update(zip(new_blocks, new_keys))
            if writers is not None:
                writers.update(zip(new_blocks, zip(repeat(rid), range(start, full))))
            first_new = start
            swaps = None
        else:
            new_blocks = []
            first_new = None
            swaps = None
            for i in range(start, full):
                key = key_list[i]
                if key not in index:
                    block = table[i]
                    index[key] = block
                    key_of[block] = key
                    new_blocks.append(block)
                    if first_new is None:
                        first_new = i
                    if writers is not None:
                        writers[block] = (rid, i)
                elif table[i] not in key_of:
                    if swaps is None:
                        swaps = []
                    swaps.append((i, index[key]))
        if new_blocks:
            # One leaf for the run, cut where the prompt ends: SGLang splits a
            # request's insert there so that its outputs go first.
            parent = index.get(key_list[first_new - 1]) if first_new else None
            cut = keys.prompt_tokens // keys.block_size - first_new
            if 0 < cut < len(new_blocks):
                self.add_run(new_blocks[:cut], parent)
                parent, new_blocks = new_blocks[cut - 1], new_blocks[cut:]
            self.add_run(new_blocks, parent)
        last = index.get(key_list[full - 1])
        if last is not None:
            self.split_after(last)  # the run may end inside a cached node
            self.touch_path(last)
        self._registered(keys, start, full)
        return swaps

    def register_decoded(self, rid, keys, full, table):
        """Nothing: decoded tokens are keyed when the request finishes."""
        return None

    def touch(self, block):
        """A look-up's run ends at `block`: split its node there, stamp its path."""
        self.split_after(block)
        self.touch_path(block)

    def take(self, rid, table, count):
        """Evict whole nodes until `count` blocks are free, into `table`: one
        eviction per node; what the last node had beyond `count` is spare."""
        taken: list[int] = []
        evictions = 0
        report = self.report
        while len(taken) < count:
            gone = self.evict_one()
            evictions += 1
            if report is not None:  # the block handed out first stands for the node
                self._report_writers(rid, gone[:1])
            taken += gone
        spare = taken[count:]
        if spare:
            del taken[count:]
        table.extend(taken)
        return evictions, spare

    def give_back(self, blocks, keyed=(), keys=()):
        """As the LRU cache; the nodes of the blocks freed may now be evictable."""
        plain = super().give_back(blocks)
        self.offer_blocks(blocks)
        return plain

    def evict_one(self) -> list[int]:
        """Forget the keys of the blocks eviction takes next and return them: the
        evictable leaf node stamped longest ago, else the least recently freed
        block alone (taken out of its node)."""
        node = self.evict_node()
        if node:
            return node
        gone = super().evict_one()
        self._detach(gone[0])
        return gone

    def audit(self, tables, carried, orphans):
        """The LRU cache's checks; every node's blocks are keyed and name it, and
        every node counts its children."""
        super().audit(tables, carried, orphans)
        children: dict[int, int] = {}
        named = 0
        for node, (blocks, parent, count, _) in self.nodes.items():
            named += len(blocks)
            if not blocks or any(self.node_of.get(b) != node or b not in self.key_of
                                 for b in blocks):
                raise InvariantError(f"radix node {node}: blocks {blocks} disagree with "
                                     "their keys or nodes")
            if parent is not None:
                children[parent] = children.get(parent, 0) + 1
        if named != len(self.node_of):
            raise InvariantError(f"blocks in nodes({named}) == node_of({len(self.node_of)}) "
                                 "is false")
        for node, info in self.nodes.items():
            if info[2] != children.get(node, 0):
                raise InvariantError(f"radix node {node}: children({info[2]}) == "
                                     f"{children.get(node, 0)} is false")

    # --- the tree -----------------------------------------------------------------

    def _new_node(self, blocks: list[int], parent: int | None, stamp: int) -> int:
        node = self.next_node
        self.next_node += 1
        self.nodes[node] = [list(blocks), parent, 0, stamp]  # blocks, parent, children, stamp
        self.node_of.update(zip(blocks, repeat(node)))  # (in C: a node holds hundreds)
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
        # Each node once, its blocks' nodes looked up in C (a request frees hundreds
        # of blocks in a few nodes); the heap's order does not depend on the
        # order of pushes.
        nodes = self.nodes
        heap = self.candidates
        for node in dict.fromkeys(map(self.node_of.get, blocks)):
            info = nodes.get(node)
            if info is not None and not info[2]:
                heapq.heappush(heap, (info[3], node))

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
        lru = self.free_blocks
        heap = self.candidates
        while heap:
            stamp, node = heapq.heappop(heap)
            info = nodes.get(node)
            if info is None or info[3] != stamp or info[2]:
                continue
            blocks = info[0]
            # The node's blocks are checked and forgotten in C (map over bound
            # dict methods): a node evicted holds 230 blocks on average on the
            # Mooncake trace, and these loops in Python cost a fifth of its replay.
            if not all(map(lru.__contains__, blocks)):
                continue
            del nodes[node]
            if info[1] is not None:
                nodes[info[1]][2] -= 1
                self._offer(info[1])
            deque(map(lru.__delitem__, blocks), 0)
            deque(map(self.index.__delitem__, map(self.key_of.pop, blocks)), 0)
            deque(map(self.node_of.__delitem__, blocks), 0)
            return blocks
        return None

    def _detach(self, block: int) -> None:
        """Take `block` out of its node (when no whole node could go: a node part
        of which is held)."""
        node = self.node_of.pop(block, None)
        if node is None:
            return
        info = self.nodes[node]
        info[0].remove(block)
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
