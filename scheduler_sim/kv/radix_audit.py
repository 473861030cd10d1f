"""The full check of a radix tree (`radix_cache.RadixCache.audit`): its index,
its nodes and their free blocks, for tests and `--audit`."""
from __future__ import annotations

from ..records.errors import InvariantError

__all__ = ["audit_tree"]


def audit_tree(cache, carried) -> None:
    """Every free cached block is keyed; the index and the nodes' keys agree;
    every node's blocks name it, as many keys as blocks, every node counts its
    children, and its free blocks (all or none unless it is loose); raises
    InvariantError."""
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
