"""The radix tree's recency (`radix_cache.RadixCache`, a base of it): the stamps
a look-up or a registration gives the nodes on its path, root first, and the
heap of eviction candidates, leaves by stamp, checked when taken.

A look-up pushes its path's leaf again with its new stamp, so the heap is
rebuilt from the leaves whenever it holds more than twice as many entries as
there are nodes (plus `SLACK`): its size stays bounded on a trace of any
length, and the rebuilt heap holds every entry that can still be taken.
The methods use the tree's `nodes`, `clock` and `candidates`.
"""
from __future__ import annotations

import heapq

__all__ = ["Stamps", "SLACK"]

# Stale entries the heap of candidates may hold beyond twice the nodes before it
# is rebuilt (`Stamps._compact`): a rebuild costs a pass over the nodes, so
# it comes at most once per that many pushes.
SLACK = 64


class Stamps:
    """The tree's stamps and its heap of eviction candidates (see the module
    docstring)."""

    def _offer(self, node: int) -> None:
        info = self.nodes.get(node)
        if info is not None and not info[2]:
            heapq.heappush(self.candidates, (info[3], node))
            if len(self.candidates) > 2 * len(self.nodes) + SLACK:
                self._compact()

    def _compact(self) -> None:
        """Rebuild the heap of candidates from the leaf nodes and their stamps now.

        An entry is taken only if its node still exists, is a leaf and still has
        that stamp (`evict_node`), and every change that can make a node such a
        candidate (a new or split node, a stamp, a last child gone, blocks freed)
        pushes it: so the entries that can still be taken are exactly one per
        leaf, and eviction takes the same nodes in the same order from the
        rebuilt heap. A leaf some of whose blocks are held is kept too (its
        entry is checked when taken, as before)."""
        heap = [(info[3], node) for node, info in self.nodes.items() if not info[2]]
        heapq.heapify(heap)
        self.candidates = heap

    def _offer_nodes(self, named: set) -> None:
        """Offer each of the nodes `named` (that exist): blocks of theirs became free."""
        # The heap's order does not depend on the order of pushes (its entries are
        # distinct or equal pairs).
        nodes = self.nodes
        heap = self.candidates
        for node in named:
            info = nodes[node]
            if not info[2]:
                heapq.heappush(heap, (info[3], node))
        if len(heap) > 2 * len(nodes) + SLACK:
            self._compact()

    def touch_path(self, block: int) -> None:
        """Stamp the nodes from the root down to the node of `block`."""
        self.stamp_path(self._node(block))

    def stamp_path(self, node: int | None) -> None:
        """Stamp the nodes from the root down to `node` (None: none)."""
        if node is None:
            return
        # (`_offer`, inline: a conversation's path is dozens of nodes, and this ran
        # for every look-up: 7% of a replay.) Every node above `node` has a child
        # (the one below it on the path: the children's counts are audited), so
        # only `node` itself may be a candidate. The stamps count up from the
        # root, given here from `node` up, counting down: each node's entry read
        # once. (Was two passes, the path's numbers then their entries, a
        # candidate's test at each node: 0.46 s of cProfile's 23.4 s on the
        # Mooncake replay under `sglang`, 165,014 calls.)
        nodes = self.nodes
        leaf = nodes[node]
        path = [leaf]
        up = leaf[1]
        while up is not None:
            info = nodes[up]
            path.append(info)
            up = info[1]
        clock = self.clock + len(path)
        self.clock = stamp = clock
        for info in path:
            info[3] = stamp
            stamp -= 1
        heap = self.candidates
        if not leaf[2]:
            heapq.heappush(heap, (clock, node))
        if len(heap) > 2 * len(nodes) + SLACK:
            self._compact()
