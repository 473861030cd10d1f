"""The full check of a radix tree (`radix_cache.RadixCache.audit`): its index,
its nodes and their free blocks, for tests and an engine built with
`audit=True`."""
from __future__ import annotations

from ..records.errors import InvariantError

__all__ = ["audit_tree"]


def audit_tree(cache, carried, tables=None, orphans=()) -> None:
    """Every free cached block is keyed; the index and the nodes' keys agree;
    every node's blocks name it, as many keys as blocks, every node counts its
    children, and its free blocks (all or none unless it is loose); `node_at`
    names each node at its blocks (at its first and last only for a node in
    `ends_only`, whose other entries name no live node) and names no live node
    for a block elsewhere; a node in `ends_only` is held alike in all its
    blocks (each of `tables` and `orphans` holds all of them or none, and it is
    not loose); raises InvariantError."""
    key_of = cache.key_of
    if carried:
        raise InvariantError("block keys carried to a radix tree, which names its own")
    if any(b not in key_of for b in cache.free_blocks):
        raise InvariantError("a free cached block has no key")
    cache._check_index(key_of)
    if len(cache.index) != len(key_of):
        raise InvariantError(f"keys in the index({len(cache.index)}) == keys in nodes"
                             f"({len(key_of)}) is false")
    free = cache.free_blocks
    if len(list(free)) != len(free):
        raise InvariantError(f"free blocks in the queue({len(list(free))}) == its "
                             f"count({len(free)}) is false")
    node_of = cache.node_of
    children: dict[int, int] = {}
    named = 0
    for node, (blocks, parent, count, _, keys, *_) in cache.nodes.items():
        named += len(blocks)
        if (not blocks or len(keys) != len(blocks)
                or any(node_of.get(b) != node for b in blocks)):
            raise InvariantError(f"radix node {node}: blocks {blocks} disagree with "
                                 "their keys or nodes")
        if parent is not None:
            children[parent] = children.get(parent, 0) + 1
    if named != len(node_of):
        raise InvariantError(f"blocks in nodes({named}) == node_of({len(node_of)}) "
                             "is false")
    for node, info in cache.nodes.items():
        if info[2] != children.get(node, 0):
            raise InvariantError(f"radix node {node}: children({info[2]}) == "
                                 f"{children.get(node, 0)} is false")
        free_here = sum(1 for b in info[0] if b in free)
        if free_here != info[5] or not (info[7] or info[5] in (0, len(info[0]))):
            raise InvariantError(f"radix node {node}: free blocks({free_here}) == its "
                                 f"count({info[5]}), all or none unless loose, is false")
    _audit_names(cache, node_of, tables, orphans)


def _audit_names(cache, node_of: dict[int, int], tables, orphans) -> None:
    """`node_at` and `ends_only` against the nodes (see `audit_tree`)."""
    nodes, node_at, ends_only = cache.nodes, cache.node_at, cache.ends_only
    for node, info in ends_only.items():
        if nodes.get(node) is not info or info[7]:
            raise InvariantError(f"radix node {node}: in ends_only, but not a live node "
                                 "held alike in all its blocks")
    for node, (blocks, *_) in nodes.items():
        last = len(blocks) - 1
        for i, block in enumerate(blocks):
            entry = node_at[block] if block < len(node_at) else None
            if entry != node and (node not in ends_only or i in (0, last) or entry in nodes):
                raise InvariantError(f"radix node {node}: node_at names {entry} for its "
                                     f"block {block}")
    for block, entry in enumerate(node_at):
        if entry in nodes and node_of.get(block) != entry:
            raise InvariantError(f"node_at names live node {entry} for block {block}, "
                                 f"held by {node_of.get(block)}")
    holders = list(tables.values()) if tables else []
    if orphans:
        holders.append(list(orphans))
    for held in holders:
        counts: dict[int, int] = {}
        for block in held:
            node = node_of.get(block)
            if node in ends_only:
                counts[node] = counts.get(node, 0) + 1
        for node, count in counts.items():
            if count != len(nodes[node][0]):
                raise InvariantError(f"radix node {node}: in ends_only, but a table or "
                                     f"the orphans hold {count} of its "
                                     f"{len(nodes[node][0])} blocks")
