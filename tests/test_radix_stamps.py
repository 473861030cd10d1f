"""The radix tree's stamps along a path and its heap of eviction candidates
(kv/radix_stamps.py), on a tiny hand-computed tree: a -> b -> c."""
from __future__ import annotations

from scheduler_sim.kv.radix_cache import RadixCache


def test_a_path_is_stamped_from_the_root_and_only_its_leaf_is_a_candidate():
    """Nodes a = [1], b = [2] under a, c = [3] under b (each offered when made, stamp
    0). Stamping c's path gives a, b, c the stamps 1, 2, 3 and pushes (3, c), the
    leaf; stamping b's gives a 4 and b 5 and pushes nothing (b has a child)."""
    tree = RadixCache()
    a = tree._new_node([1], ["x"], None, 0)
    b = tree._new_node([2], ["y"], a, 0)
    c = tree._new_node([3], ["z"], b, 0)
    heap = sorted(tree.candidates)
    tree.stamp_path(c)
    assert ([tree.nodes[n][3] for n in (a, b, c)], tree.clock) == ([1, 2, 3], 3)
    assert sorted(tree.candidates) == sorted(heap + [(3, c)])
    tree.stamp_path(b)
    assert ([tree.nodes[n][3] for n in (a, b, c)], tree.clock) == ([4, 5, 3], 5)
    assert sorted(tree.candidates) == sorted(heap + [(3, c)])
    tree.stamp_path(None)
    assert tree.clock == 5
