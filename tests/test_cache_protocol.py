"""The prefix-cache protocol (kv/prefix_cache.py): the allocator reads nothing else of a
cache, and each method of each kind (no cache, LRU, vLLM's, the radix tree) on small
hand-computed cases, the caches driven directly."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from scheduler_sim.kv import allocator as allocator_module
from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.kv.caches import CACHE_KINDS, cache_kind, make_cache
from scheduler_sim.kv.lru_cache import LruCache
from scheduler_sim.kv.prefix_cache import NoCache, PrefixCache
from scheduler_sim.kv.radix_cache import RadixCache
from scheduler_sim.kv.vllm_cache import VllmCache
from scheduler_sim.records.errors import InvariantError

B = 4
KINDS = ["none", "lru", "vllm", "radix"]
IDS = [1, 2, 3, 4, 5, 6, 7, 8]


def new(kind: str) -> PrefixCache:
    """An empty cache of `kind` ("none": the null cache)."""
    return NoCache() if kind == "none" else make_cache(kind)


def keys_of(index: int, ids: list[int] = IDS) -> BlockKeys:
    """Keys of a request whose prompt is `ids` (block size 4)."""
    return BlockKeys(index, len(ids), B, B, prompt_ids=ids)


def k(i: int):
    """The key of block i of prompt IDS."""
    return keys_of(99).ensure(i + 1)[i]


def cached(kind: str) -> PrefixCache:
    """A cache in which request "w" registered blocks [10, 11] for IDS and freed them
    (block 11 first, as a table is freed tail first)."""
    c = new(kind)
    keys = keys_of(0)
    c.register("w", keys, 2, [10, 11])
    count, carried = c.release("w")
    keyed = [10, 11][:count][::-1]
    c.give_back([11, 10][:2 - count], keyed, carried.keys[count - 1::-1] if count else ())
    return c


# --- the boundary --------------------------------------------------------------------


def _allocator_tree() -> ast.Module:
    """The modules BlockAllocator's code lives in (allocator.py and its base classes'),
    parsed as one."""
    files = {Path(allocator_module.__file__)} | {
        Path(inspect.getfile(cls)) for cls in BlockAllocator.__mro__ if cls is not object}
    assert len(files) == 7  # allocator, prefix_lookups, sharing, freeing, allocator_audit,
    # counted_blocks, block_openings
    return ast.Module(body=[node for path in sorted(files) for node in ast.parse(
        path.read_text(encoding="utf-8")).body], type_ignores=[])


def test_the_allocator_reads_only_protocol_names_of_its_cache():
    """Every attribute the allocator's modules read on `cache`, `self.cache` or
    `self._cache` is a public name of PrefixCache, and they read no name only a cache
    kind defines."""
    tree = _allocator_tree()
    protocol = {n for n in dir(PrefixCache) if not n.startswith("_")} | {"free_blocks"}

    def is_cache(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "cache") or (
            isinstance(node, ast.Attribute) and node.attr in ("cache", "_cache")
            and isinstance(node.value, ast.Name) and node.value.id == "self")

    reads = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and is_cache(n.value)}
    assert reads and reads <= protocol, reads - protocol
    kind_names = set()
    for cls in CACHE_KINDS.values():
        for cache in (cls(), cls(compact=True)):
            kind_names |= {n for n in dir(cache) if not n.startswith("__")}
    own = set(dir(BlockAllocator)) | set(vars(BlockAllocator(4, B, cache=LruCache())))
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert used & (kind_names - protocol - own) == set()


def test_the_allocator_never_branches_on_the_kind_of_its_cache():
    """The allocator imports no cache kind and never asks a type
    (`isinstance`, `type`): the kind is bound once, with the cache."""
    tree = _allocator_tree()
    imported = {alias.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                for alias in n.names} | {n.module for n in ast.walk(tree)
                                         if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & {"lru_cache", "vllm_cache", "radix_cache", "caches",
                           "LruCache", "VllmCache", "RadixCache"}
    calls = {n.func.id for n in ast.walk(tree)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & {"isinstance", "type"}


def test_the_kind_a_policy_names():
    """The radix tree wins over vLLM's flag; neither flag is the LRU cache; each name
    makes its class, compact when asked."""
    assert [cache_kind(d, t) for d, t in ((False, False), (True, False), (False, True),
                                          (True, True))] == ["lru", "vllm", "radix", "radix"]
    assert [type(make_cache(n)) for n in ("lru", "vllm", "radix")] == [
        LruCache, VllmCache, RadixCache]
    assert make_cache("vllm", compact=True).compact is True


# --- each method, each kind ------------------------------------------------------------


@pytest.mark.parametrize("kind, index, keyed, others, swaps", [
    ("none", None, None, None, None),
    ("lru", [10, 11], {10, 11}, None, None),
    ("vllm", [10, 11], None, {0: [12], 1: [13]}, None),
    ("radix", [10, 11], {10, 11}, None, [(0, 10), (1, 11)]),
])
def test_register_a_second_copy_of_a_cached_run(kind, index, keyed, others, swaps):
    """w registers [10, 11] and r the same prompt in [12, 13]: the index keeps w's
    blocks; the LRU cache leaves r's plain, vLLM's keeps them as duplicates, the radix
    tree answers the swaps to w's blocks, no cache does nothing."""
    c = new(kind)
    c.register("w", keys_of(0), 2, [10, 11])
    kr = keys_of(1)
    answer = c.register("r", kr, 2, [12, 13])
    assert answer == swaps and kr.registered == (0 if kind == "none" else 2)
    if index is not None:
        assert c.index == {k(0): index[0], k(1): index[1]}
    if keyed is not None:
        assert set(c.key_of) == keyed
    if others is not None:
        assert c.others == {k(i): blocks for i, blocks in others.items()}


@pytest.mark.parametrize("kind, registered", [("none", 0), ("lru", 1), ("vllm", 1),
                                              ("radix", 0)])
def test_register_decoded_waits_for_the_end_only_in_the_radix_tree(kind, registered):
    """A block decoding filled is keyed at once by the LRU and vLLM caches, never by the
    radix tree (nor without a cache)."""
    c = new(kind)
    keys = keys_of(0)
    assert c.register_decoded("r", keys, 1, [7]) is None
    assert keys.registered == registered


@pytest.mark.parametrize("kind, found", [("none", [[], []]), ("lru", [[10, 11], [10]]),
                                         ("vllm", [[10, 11], [10]]),
                                         ("radix", [[10, 11], [10]])])
def test_find_the_longest_cached_run_up_to_max_blocks(kind, found):
    """w's [10, 11] are found by the same prompt's keys, one of them with max_blocks 1,
    none with another prompt; nothing without a cache."""
    c = cached(kind)
    assert [c.find(keys_of(5), 2), c.find(keys_of(5), 1)] == found
    assert c.find(keys_of(6, [9] * 8), 2) == []


def test_touch_splits_and_stamps_only_the_radix_tree():
    """The radix tree's one node [10, 11] splits after 10 when a look-up stops there,
    each part stamped on the path; the other kinds keep no recency of look-ups."""
    c = cached("radix")
    assert sorted(info[0] for info in c.nodes.values()) == [[10, 11]]
    c.touch(10)
    assert sorted((info[0], info[2]) for info in c.nodes.values()) == [([10], 1), ([11], 0)]
    assert [info[3] for _, info in sorted(c.nodes.items())] == [2, 3]  # [11], then [10]
    for kind in ("lru", "vllm", "none"):
        c = cached(kind)
        before = dict(vars(c))
        assert c.touch(10) is None and vars(c) == before


@pytest.mark.parametrize("kind, free, counted", [("none", [], 0), ("lru", [11, 10], 2),
                                                 ("vllm", [11, 10], 2),
                                                 ("radix", [11, 10], 2)])
def test_give_back_keeps_the_keyed_blocks_and_count_free_counts_them(kind, free, counted):
    """w's blocks given back tail first are the free cached blocks, in that order (none
    without a cache), and 99 is plain."""
    c = cached(kind)
    assert c.give_back([99]) == [99]
    order = c.queue_items()[0] if kind == "vllm" else list(c.free_blocks)
    assert (order, c.count_free([10, 99, 11])) == (free, counted)


@pytest.mark.parametrize("kind", ["lru", "vllm", "radix"])
def test_a_hit_takes_a_block_out_of_the_free_ones(kind):
    """A hit on 11 leaves 10 the only free cached block (vLLM's queue skips 11's entry)."""
    c = cached(kind)
    c.hit(11)
    assert (list(c.free_blocks), c.count_free([10, 11])) == ([10], 1)
    if kind == "vllm":
        assert (c.stale, c.queue_items()[0]) == ({11: 1}, [10])


@pytest.mark.parametrize("kind, answer, table, index", [
    ("lru", (1, ()), [11], [0]),
    ("vllm", (1, ()), [11], [0]),
    ("radix", (1, [11]), [10], []),
])
def test_take_evicts_into_the_table_and_reports_the_writer(kind, answer, table, index):
    """Taking one block hands out 11 (the least recently freed), or in the radix tree
    the whole leaf [10, 11]: 10 to the table, 11 spare; w wrote the block handed out."""
    c = cached(kind)
    c.track(lambda *e: reports.append(e))
    c.writers.update({10: ("w", 0), 11: ("w", 1)})
    reports: list = []
    got: list[int] = []
    assert c.take("r", got, 1) == answer
    assert (got, sorted(i for i in range(2) if k(i) in c.index)) == (table, index)
    assert reports == [("r", "w", table[0] - 10)]


@pytest.mark.parametrize("kind, groups", [("none", []), ("lru", [[11]]), ("vllm", [[11]]),
                                          ("radix", [[10, 11]])])
def test_evict_until_one_block_lost_its_key(kind, groups):
    """Evicting ahead of one block takes 11 alone, or the radix tree's whole leaf."""
    c = cached(kind)
    assert c.evict_until(1) == groups
    assert c.evict_until(0) == []


@pytest.mark.parametrize("kind", KINDS)
def test_release_names_the_carried_keys_only_in_vllm_cache(kind):
    """r registered 2 blocks: vLLM's cache says both leading blocks carry their keys
    (once); the other kinds name their keys themselves."""
    c = new(kind)
    keys = keys_of(0)
    c.register("r", keys, 2, [10, 11])
    count, carried = c.release("r")
    if kind == "vllm":  # (the request's BlockKeys, which knows the keys)
        assert (count, carried, carried.keys) == (2, keys, [k(0), k(1)])
    else:
        assert (count, carried) == (0, ())
    assert c.release("r") == (0, ())


def test_on_share_notes_vllm_sharers_and_refuses_one_without_keys():
    """vLLM's cache makes s's 2 shared blocks its registered leading blocks; without
    keys, or after blocks of its own, it refuses; other kinds need nothing."""
    c = cached("vllm")
    ks = keys_of(3)
    c.on_share("s", [10, 11], ks, False)
    assert (ks.registered, c.release("s")) == (2, (2, ks))
    for keys, has_blocks in ((None, False), (keys_of(4), True)):
        with pytest.raises(InvariantError, match="without their keys"):
            c.on_share("t", [10], keys, has_blocks)
    for kind in ("lru", "radix", "none"):
        ks = keys_of(3)
        assert new(kind).on_share("s", [10], ks, True) is None and ks.registered == 0


@pytest.mark.parametrize("kind", ["lru", "vllm"])
def test_owned_elsewhere_picks_the_released_blocks_others_hold(kind):
    """Released leading blocks [11, 10] (last first) with extra owners on 10 and 50:
    only 10 is owned elsewhere (vLLM's cache, with no duplicate key, searches for the
    run of leading blocks others own: the table's first one, 10)."""
    c = cached(kind)
    if kind == "vllm":
        c.on_share("s", [10, 11], keys_of(3), False)
    assert c.owned_elsewhere([11, 10], {10: 1}) == {10}
    assert c.owned_elsewhere([11, 10], {10: 1, 50: 2}) == {10}


def test_orphan_keys_are_kept_only_by_vllm_cache():
    """vLLM's cache keeps a pinned orphan's key until asked once; a cache that names its
    keys itself refuses carried keys and keeps none."""
    c = VllmCache()
    c.keep_orphan_keys(iter([(5, "k5"), (6, "k6")]))
    assert (c.orphan_key(5), c.orphan_key(5), c.orphan_keys) == ("k5", None, {6: "k6"})
    for c in (LruCache(), RadixCache()):
        assert c.orphan_key(5) is None
        with pytest.raises(InvariantError):
            c.keep_orphan_keys([(5, "k5")])


@pytest.mark.parametrize("kind", KINDS)
def test_track_keeps_writers_only_once_asked(kind):
    """A cache keeps no writer until `track`, then one per block it keys (none without a
    cache)."""
    c = new(kind)
    assert c.writers is None
    c.track(print)
    c.register("w", keys_of(0), 2, [10, 11])
    assert c.writers == (None if kind == "none" else {10: ("w", 0), 11: ("w", 1)})


@pytest.mark.parametrize("kind, breakage, message", [
    ("none", lambda c: None, "without a prefix cache"),
    ("lru", lambda c: c.free_blocks.__setitem__(12, None), "has no key"),
    ("vllm", lambda c: c.orphan_keys.__setitem__(12, "x"), "outlived"),
    ("radix", lambda c: c.nodes[0].__setitem__(2, 1), "children"),
])
def test_audit_passes_a_sound_cache_and_names_a_broken_one(kind, breakage, message):
    """w's freed blocks pass every kind's audit; then one broken invariant each (a free
    block without a key, an orphan's key kept for no orphan, a wrong child count, keys
    carried with no cache) is named."""
    c = cached(kind)
    c.audit({}, [], set())
    breakage(c)
    carried = [(12, "x")] if kind == "none" else []
    with pytest.raises(InvariantError, match=message):
        c.audit({}, carried, set())


def test_radix_block_taken_alone_from_a_node_with_children_keeps_the_tree_whole():
    """Node [10] over node [11] (a look-up split them); 11 is held, so no whole leaf can
    go and eviction takes the free 10 alone, emptying its node: [11] then hangs from
    the root, and once given back it is evicted as a leaf (before, its parent was
    gone and evicting it raised KeyError)."""
    c = cached("radix")
    c.touch(10)
    c.hit(11)
    assert c.evict_one() == [10]
    assert [(info[0], info[1], info[2]) for info in c.nodes.values()] == [([11], None, 0)]
    assert list(c.give_back([11])) == []
    assert c.evict_one() == [11] and c.nodes == {}
