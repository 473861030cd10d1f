"""vLLM's queue entries that hits left behind (kv/run_queue.py): counted off a
slice of a run at a time when evictions reach them (`RunQueue._take_stale`), or
never made, a hit's entries taken off the ends of the runs holding them
(`RunQueue._take_ends`)."""
from __future__ import annotations

import pytest

from scheduler_sim.kv.vllm_cache import VllmCache


@pytest.mark.parametrize("compact", [False, True])
def test_a_slice_partly_stale_gives_a_flag_per_entry_and_counts_its_blocks_off(compact):
    """One run [0, 1, 2, 3], block b keyed 100 + b. hits([1, 2]) leaves 1 and 2
    stale; 1 comes back as the run [1] and is hit again: stale {1: 2, 2: 1}. The
    slice [0, 1, 2, 3] of the first run: 0 and 3 live, 1 and 2 stale, one entry
    each counted off (1 keeps one, in the run [1])."""
    c = VllmCache(compact)
    c.give_back([], [0, 1, 2, 3], list(range(100, 104)))
    assert c.hits([1, 2]) == {1, 2}
    c.give_back([], [1], [101])
    assert c.hits([1]) == {1}
    assert (c.stale, c.stale_total) == ({1: 2, 2: 1}, 3)
    assert c._take_stale([0, 1, 2, 3]) == [True, False, False, True]
    assert (c.stale, c.stale_total) == ({1: 1}, 1)
    assert c._take_stale([1]) == ()
    assert (c.stale, c.stale_total) == ({}, 0)


def test_a_slice_with_nothing_stale_is_none_and_counts_nothing_off():
    """Stale {5: 1}: the slice [0, 1] holds no stale entry (None); [5, 6] is stale
    at 5 only."""
    c = VllmCache()
    c.stale, c.stale_total = {5: 1}, 1
    assert c._take_stale([0, 1]) is None
    assert (c.stale, c.stale_total) == ({5: 1}, 1)
    assert c._take_stale([5, 6]) == [False, True]
    assert (c.stale, c.stale_total) == ({}, 0)


@pytest.mark.parametrize("compact", [False, True])
def test_pop_oldest_skips_a_run_stale_throughout_and_a_block_stale_twice(compact):
    """Runs [0, 1, 2, 3], [1] (after hits on 1 and 2, then on 1 again, as above)
    and [5, 6]. pop_oldest(3): 0 and 3 from the first run, the run [1] stale
    throughout, 5 from the last: ([0, 3, 5], [100, 103, 105]); nothing stale is
    left and the queue is [6]."""
    c = VllmCache(compact)
    c.give_back([], [0, 1, 2, 3], list(range(100, 104)))
    c.hits([1, 2])
    c.give_back([], [1], [101])
    c.hits([1])
    c.give_back([], [5, 6], [105, 106])
    assert c.pop_oldest(3) == ([0, 3, 5], [100, 103, 105])
    assert (c.stale, c.stale_total, c.queue_items()) == ({}, 0, ([6], [106]))


@pytest.mark.parametrize("compact", [False, True])
def test_an_eviction_forgetting_keys_passes_a_run_a_hit_took_whole(compact):
    """Keys 100..105 index blocks 0..5. A table [0, 1, 2] freed tail first (the run
    [2, 1, 0], keys going down) and then [3, 4, 5] ([5, 4, 3]); a hit takes 0, 1 and
    2 back. Evicting two blocks passes the first run, stale throughout, and takes 5
    and 4, whose keys leave the index; 0..2 keep theirs (held), 3 is still queued."""
    c = VllmCache(compact)
    assert c.index.add(list(range(100, 106)), 0, 6, [0, 1, 2, 3, 4, 5]) == []
    c.give_back([], [2, 1, 0], range(102, 99, -1))
    c.give_back([], [5, 4, 3], range(105, 102, -1))
    assert c.hits([0, 1, 2]) == {0, 1, 2}
    table: list[int] = []
    assert c.take("X", table, 2) == (2, ())
    assert (table, c.stale, c.stale_total) == ([5, 4], {}, 0)
    assert c.index == {100: 0, 101: 1, 102: 2, 103: 3}
    assert c.queue_items() == ([3], [103])


@pytest.mark.parametrize("compact", [False, True])
def test_an_eviction_forgetting_keys_takes_the_live_entries_of_a_slice_partly_stale(compact):
    """Keys 100..103 index blocks 0..3, freed as the run [3, 2, 1, 0] (keys going
    down); a hit takes 2 back. Evicting three blocks takes 3, 1 and 0 (2's entry
    skipped): their keys leave the index, 2 keeps its key, and the queue is empty."""
    c = VllmCache(compact)
    assert c.index.add(list(range(100, 104)), 0, 4, [0, 1, 2, 3]) == []
    c.give_back([], [3, 2, 1, 0], range(103, 99, -1))
    c.give_back([], [7], [b"r0:0"])
    assert c.index.add([b"r0:0"], 0, 1, [7]) == []
    assert c.hits([2]) == {2}
    table: list[int] = []
    assert c.take("X", table, 3) == (3, ())
    assert (table, c.stale, c.stale_total) == ([3, 1, 0], {}, 0)
    assert c.index == {102: 2, b"r0:0": 7}
    assert c.queue_items() == ([7], [b"r0:0"])


def test_a_rebuild_keeps_a_run_with_nothing_stale_as_it_is():
    """Runs [0..69] (keys 100 + b) and [70, 71] (keys a range going down, 201 and
    200). Hits on 0..68 make 69 stale entries for a queue of 3 (69 > 3 + 64): the
    rebuild leaves [69] and [70, 71], whose keys stay a range."""
    c = VllmCache()
    c.give_back([], list(range(70)), list(range(100, 170)))
    c.give_back([], [70, 71], range(201, 199, -1))
    for b in range(68):
        c.hit(b)
    assert (len(c.runs), c.stale_total) == (2, 68)
    c.hit(68)
    assert ([(r[0], r[1], r[2]) for r in c.runs], c.stale, c.stale_total) == (
        [([69], [169], 0), ([70, 71], range(201, 199, -1), 0)], {}, 0)
    assert c.pop_oldest(3) == ([69, 70, 71], [169, 201, 200])


def runs_of(c: VllmCache) -> list:
    """The runs as [blocks, keys as a list, position]."""
    return [[list(r[0]), list(r[1]), r[2]] for r in c.runs]


@pytest.mark.parametrize("compact", [False, True])
def test_a_hit_takes_its_blocks_off_the_runs_ends_a_slice_per_run(compact):
    """Keys 100..105 index blocks 0..5, 109 block 9. Runs [5] and [9, 4, 3] (keys
    listed, as freed). A hit on [3, 4, 5]: 3 ends the second run, whose end read
    backwards is [3, 4, 9], so 3 and 4 are taken off it (the run [9], which 9 now
    ends); 5 ends the first, taken whole (an empty run). Nothing is left stale, the
    queue is [9]."""
    c = VllmCache(compact)
    assert c.index.add([100, 101, 102, 103, 104, 105], 0, 6, [0, 1, 2, 3, 4, 5]) == []
    assert c.index.add([109], 0, 1, [9]) == []
    c.give_back([], [5], [105])
    c.give_back([], [9, 4, 3], [109, 104, 103])
    assert c.ends == {5: c.runs[0], 3: c.runs[1]}
    assert c.hits_found([3, 4, 5], [103, 104, 105]) == {3, 4, 5}
    assert (runs_of(c), c.stale, c.stale_total) == ([[[], [], 0], [[9], [109], 0]], {}, 0)
    assert c.ends == {9: c.runs[1]}
    assert c.queue_items() == ([9], [109])


def test_a_hit_stops_at_a_block_with_a_stale_entry_and_leaves_the_rest_stale():
    """The run [2, 1, 0] (keys 102..100); a hit by block alone leaves 1 stale (the
    queue [2, 0]). A hit on [0, 1, 2] finds 0 and 2 free: 0 ends the run and is taken
    off, 1 stops it (its entry there is the stale one), and 2 is left stale: stale
    {1: 1, 2: 1}, the run [2, 1], which no entry of `ends` names, and an empty
    queue."""
    c = VllmCache()
    c.give_back([], [2, 1, 0], [102, 101, 100])
    assert c.hits([1]) == {1}
    assert c.hits_found([0, 1, 2], [100, 101, 102]) == {0, 2}
    assert (runs_of(c), c.stale, c.stale_total, c.ends) == (
        [[[2, 1], [102, 101], 0]], {1: 1, 2: 1}, 2, {})
    assert c.queue_items() == ([], [])


def test_a_hit_past_blocks_held_starts_at_the_first_free_one():
    """Keys 100..102 index blocks 0..2, freed as the run [2, 1, 0] (keys a range
    going down); a hit on [0] takes 0 off its end (the run [2, 1], keys range(102,
    100, -1)). A hit on [0, 1, 2] (0 held) finds 1 and 2 free and takes them off
    from 1 on: the run is empty, nothing stale, no end named."""
    c = VllmCache()
    assert c.index.add([100, 101, 102], 0, 3, [0, 1, 2]) == []
    c.give_back([], [2, 1, 0], range(102, 99, -1))
    assert c.hits_found([0], [100]) == {0}
    assert ([(r[0], r[1], r[2]) for r in c.runs], c.ends) == ([([2, 1], range(102, 100, -1), 0)],
                                                             {1: c.runs[0]})
    assert c.hits_found([0, 1, 2], [100, 101, 102]) == {1, 2}
    assert (runs_of(c), c.stale, c.ends, c.queue_items()) == ([[[], [], 0]], {}, {}, ([], []))


@pytest.mark.parametrize("compact", [False, True])
def test_runs_a_hit_emptied_are_passed_by_evictions(compact):
    """Keys 100..105 index blocks 0..5, freed as the runs [2, 1, 0] and [5, 4, 3]
    (keys going down); a hit on [0, 1, 2] empties the first. Evicting two blocks
    forgetting their keys passes it and takes 5 and 4; one more eviction takes 3,
    emptying the queue, the runs and their ends. Then, the same runs without an
    index: `pop_one` passes the empty run and takes 5, `pop_oldest(2)` after
    another empty run takes 4 and 3."""
    c = VllmCache(compact)
    assert c.index.add(list(range(100, 106)), 0, 6, [0, 1, 2, 3, 4, 5]) == []
    c.give_back([], [2, 1, 0], range(102, 99, -1))
    c.give_back([], [5, 4, 3], range(105, 102, -1))
    assert c.hits_found([0, 1, 2], [100, 101, 102]) == {0, 1, 2}
    table: list[int] = []
    assert c.take("X", table, 2) == (2, ())
    assert (table, c.stale, c.queue_items(), c.ends) == ([5, 4], {}, ([3], [103]), {3: c.runs[0]})
    assert c.index == {100: 0, 101: 1, 102: 2, 103: 3}
    assert c.pop_one() == (3, 103)
    assert (list(c.runs), c.ends, len(c.free_blocks)) == ([], {}, 0)
    c = VllmCache(compact)
    c.give_back([], [2, 1, 0], [102, 101, 100])
    c.give_back([], [5], [105])
    c.give_back([], [7, 6], [107, 106])
    c.give_back([], [4, 3], [104, 103])
    assert c.hits_found([0, 1, 2], [100, 101, 102]) == {0, 1, 2}
    assert c.pop_one() == (5, 105)
    assert c.hits_found([6, 7], [106, 107]) == {6, 7}
    assert c.pop_oldest(2) == ([4, 3], [104, 103])
    assert (list(c.runs), c.ends, c.stale) == ([], {}, {})


def test_a_rebuild_drops_the_runs_hits_emptied_and_names_the_ends_again():
    """Runs [1, 0] (keys 101, 100) and [2..71] (keys 102..171, listed). A hit on
    [0, 1] empties the first; hits by block alone on 2..69 make 68 stale entries for
    a queue of 2 (68 > 2 + 64): the rebuild leaves the one run [70, 71], which ends
    at 71."""
    c = VllmCache()
    c.give_back([], [1, 0], [101, 100])
    c.give_back([], list(range(2, 72)), list(range(102, 172)))
    assert c.hits_found([0, 1], [100, 101]) == {0, 1}
    assert c.hits(list(range(2, 70))) == set(range(2, 70))
    assert (runs_of(c), c.stale, c.stale_total) == ([[[70, 71], [170, 171], 0]], {}, 0)
    assert c.ends == {71: c.runs[0]}


def test_an_eviction_emptying_the_queue_drops_its_stale_entries_and_ends():
    """The run [1, 0]; a hit by block alone leaves 0 stale. `pop_one` takes 1: the
    queue is empty, and the runs, the stale entry and the run's end go with it."""
    c = VllmCache()
    c.give_back([], [1, 0], [101, 100])
    assert c.hits([0]) == {0}
    assert (c.stale, c.ends) == ({0: 1}, {0: c.runs[0]})
    assert c.pop_one() == (1, 101)
    assert (list(c.runs), c.stale, c.stale_total, c.ends) == ([], {}, 0, {})


def test_runs_hits_emptied_count_toward_a_rebuild():
    """67 runs of one block, [b] keyed 100 + b for b = 0..66, then the run [201, 200]:
    a queue of 69. Hits on [0], [1], ... each empty a run, left in the deque: after
    66 of them the deque holds all 68 runs (66 emptied, 66 > 3 + 64 is false); the
    67th makes 67 emptied > 2 + 64 and the rebuild leaves the one live run."""
    c = VllmCache()
    for b in range(67):
        c.give_back([], [b], [100 + b])
    c.give_back([], [201, 200], [301, 300])
    for b in range(66):
        assert c.hits_found([b], [100 + b]) == {b}
    assert (len(c.runs), c.emptied, len(c.free_blocks), c.stale) == (68, 66, 3, {})
    assert c.hits_found([66], [166]) == {66}
    assert (runs_of(c), c.emptied, c.ends) == ([[[201, 200], [301, 300], 0]], 0, {200: c.runs[0]})


@pytest.mark.parametrize("compact", [False, True])
def test_one_block_evictions_pass_a_stale_entry_in_a_run_s_middle(compact):
    """The run [0, 1, 2, 3] keyed 100..103; a hit by block alone on 1 (not a run's
    end) leaves its entry stale. `pop_one` takes 0, then passes 1's entry (counted
    off) and takes 2, then 3: the queue's order less the block hit."""
    c = VllmCache(compact)
    c.give_back([], [0, 1, 2, 3], list(range(100, 104)))
    assert c.hits([1]) == {1}
    assert (c.stale, c.stale_total, c.ends) == ({1: 1}, 1, {3: c.runs[0]})
    assert c.pop_one() == (0, 100)
    assert c.pop_one() == (2, 102)
    assert (c.stale, c.stale_total) == ({}, 0)
    assert c.pop_one() == (3, 103)
    assert (list(c.runs), c.ends, len(c.free_blocks)) == ([], {}, 0)
