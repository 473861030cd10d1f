"""A look-up's walk down the radix tree (`radix_cache.RadixCache.find`), reading a
request's keys as its runs: the blocks of the longest run of its leading keys
that the tree holds, a node at a time.

A request's integer keys are runs of consecutive integers (`block_keys.BlockKeys`:
run i starts at block `run_pos[i]` with key `run_key[i]`), and a node whose keys
are one such run keeps them as a `range` (`BlockKeys.span`). Where both are runs
and their first keys agree, they agree as far as both go: a node and a request's
run are matched by their lengths alone, no key made or compared one by one. A
node of several runs or of keys of other kinds is compared as a list.

Speed: the walk read the request's keys as one list (`BlockKeys.keys`, an int
object per block, made on demand beside the runs since keys as runs, which cost
the radix tree 1.017x the instructions of the Mooncake replay under `sglang`),
and compared each node's keys as a list slice: the first 2,000 Mooncake requests
under `sglang` with prefix caching took 0.9695x the instructions with this walk
(callgrind; benchmarks/README.md, "fourteenth steps ... rdx10").
"""
from __future__ import annotations

__all__ = ["walk"]

_BLOCKS, _KEYS = 0, 4  # a node's entry's blocks and keys (`radix_cache.RadixCache.nodes`)


def walk(tree, keys, max_blocks: int) -> tuple[list[int], list[int], object]:
    """`PrefixCache.find`'s walk on `tree` (the same blocks, keys computed in the
    same growing slices), a node at a time: every key of a node is indexed to
    the node's block at its position, so the request's keys that equal a node's
    from the block the index names on are found without a dictionary look-up
    each (a hit spans a few nodes of up to hundreds of blocks). A key that
    differs is looked up in the index afresh; a node that a slice's end cut
    through goes on in the next slice where its next key is the request's (the
    index would name that block: no look-up). Returns the blocks, the nodes
    entered and the key not cached that ended the walk (None: it ended at
    `max_blocks`)."""
    index = tree.index
    get, buckets, width = index.get, index.buckets, index.width
    node_at, nodes = tree.node_at, tree.nodes
    # (Lists that `ensure` lengthens in place: read again as they grow.)
    run_pos, run_key, tail = keys.run_pos, keys.run_key, keys.tail
    hits: list[int] = []
    path: list[int] = []  # the nodes entered, in order
    i = 0  # keys found so far
    r = 0  # the request's run that holds key i, while i is below `ints`
    start, step = 0, 16
    blocks, node_keys, at = (), (), 0  # the node the walk is in, its next place
    while start < max_blocks:
        end = start + step if start + step < max_blocks else max_blocks
        keys.ensure(end, False)
        ints = keys.ints
        last = len(run_pos) - 1
        while i < end:
            if i < ints:
                while r < last and run_pos[r + 1] <= i:
                    r += 1
                key = run_key[r] + i - run_pos[r]
            else:
                key = tail[i - ints]
            if at >= len(blocks) or key != node_keys[at]:
                if type(key) is int:  # (`RadixIndex.get` inline: once a node)
                    bucket = buckets.get(key // width)
                    block = None if bucket is None else bucket[key % width]
                else:
                    block = get(key)
                if block is None:
                    return hits, path, key
                # (A node's first block, always named, but after a `_detach`.)
                node = node_at[block] if block < len(node_at) else None
                if node not in nodes:
                    node = tree._node(block)
                path.append(node)
                info = nodes[node]
                blocks, node_keys = info[_BLOCKS], info[_KEYS]
                at = 0 if blocks[0] == block else blocks.index(block)
            # (The first key is the node's: the index named its block.)
            n = len(blocks) - at
            if n > end - i:
                n = end - i
            if type(node_keys) is range:
                # Two runs from the same key: equal as far as both go. (A range holds
                # integer keys only, and the request's key i equals the node's, so
                # key i is one of the request's integer keys: i < ints.)
                run_end = run_pos[r + 1] if r < last else ints
                if n > run_end - i:
                    n = run_end - i
            elif n > 1:
                mine = keys.span(i, i + n)
                theirs = node_keys[at:at + n]
                if type(mine) is not list:
                    mine = list(mine)  # (the node's are a list: a range is matched above)
                if mine != theirs:
                    n = 1
                    while mine[n] == theirs[n]:
                        n += 1
                    hits += blocks[at:at + n]
                    i += n
                    blocks = ()  # (the next key differs from the node's: look it up)
                    continue
            hits += blocks[at:at + n]
            i += n
            at += n
        start, step = end, step * 4
    return hits, path, None
