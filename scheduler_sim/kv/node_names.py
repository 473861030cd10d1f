"""Which radix node holds a block (`radix_cache.RadixCache.node_at`), named at each
node's ends: the part of the tree's free queue (`free_queue.FreeQueue`, a base
of it) that answers "which node holds this block?" and finds a look-up's hits
a node at a time.

`node_at` (block -> node) is not cleared when a node is evicted: node numbers
are never reused, so an entry naming a node that no longer exists means "no
node". A new node is named at its first and last blocks only and kept in
`ends_only` (node -> its entry in `nodes`): an entry naming a live node is
right, and one naming none is a plain block's or a middle block's of a node
in `ends_only`, looked for in those nodes' lists (`holder`). The hot
questions need only the ends: a look-up's walk enters a node by its first
block (keys are chained, so a key that is not the next of the node the walk
is in is a child's first), a look-up's hits are whole nodes from their first
blocks (`runs`; `touch` split the last one at its end), and a freed table,
tail first, is its plain blocks and then whole nodes from their last blocks
(`give_nodes`). That last one trusts a block whose entry names no live node
to be plain, which holds while every node in `ends_only` is held alike in
all its blocks (by the same tables, all free or none): a block of a node is
freed when its last holder lets go of it, with the others, and the node's
last block comes first. Whatever could hold part of a node (a share or an
adoption of part of one, a table freed in part of one) and whatever reads
each block's entry (`give`, `pop_oldest` and `_detach`, `_compact`) names
every node in `ends_only` whole first (`write_ends_only`), and a node split
off one named whole is named whole.

Speed: the tree named every block of a new node, one list store each (about
9 million on the Mooncake trace under `sglang`; 4.3% of the instructions of
its first 2,000 requests, counted by running the loop twice). There, 2,204
blocks are named whole (small nodes and split heads), one registration that
found keys cached names 422 more, and 317 look-ups that end inside a node find
it in `ends_only`'s lists.
"""
from __future__ import annotations

from itertools import repeat

__all__ = ["NodeNames"]

_BLOCKS = 0  # a node's entry's blocks (`free_queue.BLOCKS`)


class NodeNames:
    """`node_at` named at each node's ends, for a class with `nodes`, `node_at`,
    `ends_only` and `reach` (the free queue; see the module docstring)."""

    __slots__ = ()

    def holder(self, block: object) -> int | None:
        """The number of the node holding `block`, or None: its entry in `node_at`
        if that names a live node, else the node in `ends_only` whose blocks hold
        it (a scan of their lists, in C: only questions off the hot paths get
        here while such nodes exist)."""
        if type(block) is not int or block < 0:
            return None
        node_at = self.node_at
        node = node_at[block] if block < len(node_at) else None
        if node is not None and node in self.nodes:
            return node
        for node, info in self.ends_only.items():
            if block in info[_BLOCKS]:
                return node
        return None

    def node(self, block: object) -> list | None:
        """The node holding `block` (its entry in `nodes`), or None."""
        node = self.holder(block)
        return None if node is None else self.nodes[node]

    def write_ends_only(self) -> None:
        """Name every block of the nodes in `ends_only`, and empty it."""
        for node, info in self.ends_only.items():
            self.name_blocks(node, info[_BLOCKS])
        self.ends_only.clear()

    def name_blocks(self, node: int, blocks: list[int]) -> None:
        """`node_at` names `node` for each of `blocks` (made to reach them)."""
        node_at = self.node_at
        top = max(blocks)
        if top >= len(node_at):
            self.reach_all(top)
        for block in blocks:
            node_at[block] = node

    def name(self, node: int, block: int) -> None:
        """`node_at` names `node` for `block` (made to reach it)."""
        try:
            self.node_at[block] = node
        except IndexError:
            self.reach_all(block)
            self.node_at[block] = node

    def reach_all(self, top: int) -> None:
        """Make room in `node_at` and the per-block lists for block numbers up to `top`."""
        node_at = self.node_at
        if top >= len(node_at):
            node_at.extend(repeat(None, top + 1 - len(node_at)))
            self.reach(top)

    def runs(self, blocks: list[int]) -> list[tuple[list, int]] | None:
        """`blocks` as runs of nodes, each from its node's first block, every run but
        the last its whole node and the last a leading part of one: [(the node's
        entry, the run's length)], or None when they are not of that shape (a
        look-up's hits are). Each run costs one `node_at` read, of its node's
        first block (always named), and one list comparison in C."""
        node_at, nodes = self.node_at, self.nodes
        reach = len(node_at)
        runs = []
        p, end = 0, len(blocks)
        while p < end:
            block = blocks[p]
            info = nodes.get(node_at[block]) if block < reach else None
            if info is None:
                return None
            own = info[_BLOCKS]
            if own[0] != block:
                return None
            n = len(own)
            if n > end - p:
                n = end - p
                if blocks[p:] != own[:n]:
                    return None
            elif blocks[p:p + n] != own:
                return None
            runs.append((info, n))
            p += n
        return runs
