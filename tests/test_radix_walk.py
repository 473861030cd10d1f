"""The radix tree's look-up walk reading a request's keys as runs (kv/radix_walk.py)
and `BlockKeys.span` (kv/block_keys.py), on tiny hand-computed cases: buckets of 4
integer keys, nodes keyed by a `range` (one run) or a list."""
from __future__ import annotations

from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.kv.radix_cache import RadixCache


def _runs(runs: list[tuple[int, int]], tail: list) -> BlockKeys:
    """A request's keys as a `BlockKeys` holds them, all known: runs (first key,
    count) of consecutive integer keys, then `tail`."""
    keys = BlockKeys(0, 4 * 64, 4, 8, hashes=[])
    pos = 0
    for first, count in runs:
        keys.run_pos.append(pos)
        keys.run_key.append(first)
        pos += count
    keys.ints = pos
    keys.tail = list(tail)
    keys.known = pos + len(tail)
    return keys


def test_span_is_a_range_for_one_run_else_a_list():
    """Runs 100..105 (blocks 0-5) and 300, 301 (6, 7), then b"x" (8)."""
    keys = _runs([(100, 6), (300, 2)], [b"x"])
    assert (keys.span(0, 6), keys.span(2, 5), keys.span(6, 8)) == (
        range(100, 106), range(102, 105), range(300, 302))
    assert (keys.span(4, 8), keys.span(6, 9), keys.span(8, 9), keys.span(3, 3)) == (
        [104, 105, 300, 301], [300, 301, b"x"], [b"x"], [])
    assert keys.key_list is None  # (no list of every key made)


def _tree() -> tuple[RadixCache, int, int]:
    """Node a = blocks [10..14], keys 100..104 (a `range`), over node b = [20, 21,
    22], keys 105, 300, 301 (a list: two runs)."""
    c = RadixCache()
    c.index.set_width(4)
    a = c._new_node([10, 11, 12, 13, 14], range(100, 105), None, 0)
    b = c._new_node([20, 21, 22], [105, 300, 301], a, 0)
    c.index.update({100 + i: 10 + i for i in range(5)})
    c.index.update({105: 20, 300: 21, 301: 22})
    return c, a, b


def test_a_walk_matches_a_run_against_a_range_node_by_lengths(monkeypatch):
    """Keys 100..105, 300, 301, b"x": node a matched as far as both runs go (5 blocks,
    the node's end), then 105 looked up: node b, compared as a list (3 blocks); b"x"
    is not cached. The index walk of `PrefixCache.find` finds the same blocks."""
    c, a, b = _tree()
    keys = _runs([(100, 6), (300, 2)], [b"x"])
    spans = []
    span = BlockKeys.span
    monkeypatch.setattr(BlockKeys, "span", lambda self, start, stop: (
        spans.append((start, stop)) or span(self, start, stop)))
    assert c._walk(keys, 9) == ([10, 11, 12, 13, 14, 20, 21, 22], [a, b], b"x")
    assert (keys.key_list, spans) == (None, [(5, 8)])  # (node a: no key of it made)
    assert c.find(_runs([(100, 6), (300, 2)], [b"x"]), 9) == super(RadixCache, c).find(
        _runs([(100, 6), (300, 2)], [b"x"]), 9)


def test_a_walk_leaves_a_range_node_where_the_requests_run_ends():
    """Keys 100..102 then 200: node a gives 3 blocks (the request's run ends
    there), and 200, not node a's next key 103, is looked up: not cached."""
    c, a, _ = _tree()
    assert c._walk(_runs([(100, 3), (200, 4)], []), 7) == ([10, 11, 12], [a], 200)


def test_a_walk_stops_inside_a_list_node_at_the_first_key_that_differs():
    """Keys 100..105, then 300, 777: node b's list agrees on 105 and 300 only, and
    777 is not cached; at most 7 blocks the walk ends there without a key missing."""
    c, a, b = _tree()
    assert c._walk(_runs([(100, 6), (300, 1), (777, 1)], []), 8) == (
        [10, 11, 12, 13, 14, 20, 21], [a, b], 777)
    assert c._walk(_runs([(100, 6), (300, 1), (777, 1)], []), 7) == (
        [10, 11, 12, 13, 14, 20, 21], [a, b], None)
