"""The interning table of a trace's hash entries (kv/block_keys.py): a chain
interned in one go is held as a slice of the table's list (`_Entries.chained`),
read back run by run (`_intern_ints`); the ids, so the keys, are the ones a
look-up per entry gives."""
from __future__ import annotations

import pytest

from scheduler_sim.kv import block_keys
from scheduler_sim.kv.block_keys import BlockKeys

B = 4  # block size; hash_block_size 8: 2 keys per entry id


@pytest.fixture
def table(monkeypatch):
    """A new interning table for the test (ids from 0), and a count of the
    `_intern` calls (one per run of entries on the fast path, one per entry off it)."""
    fresh = block_keys._Entries()
    monkeypatch.setattr(block_keys, "_current_entries", block_keys.weakref.ref(fresh))
    calls = []
    intern = block_keys._intern
    monkeypatch.setattr(block_keys, "_intern", lambda t, value, node: (
        calls.append(value) or intern(t, value, node)))
    return fresh, calls


def test_a_conversation_s_second_turn_reuses_its_first_turn_s_run(table):
    """Turn 1 [5, 6, 7] interns ids 0, 1, 2, each the child of the one before it: all
    three held in `chained`, no link. [9] is id 3 (its parent is none, not id 2: a
    link). Turn 2 [5, 6, 8, 10]: 5 is id 0 and 6 id 1 (one run, found by one `_intern`
    and a slice compared), 5.6.8 is new (id 4, a link: its parent is 1, not 3) and
    5.6.8.10 id 5 (held in `chained`): keys 0-3 and 8-11. A third turn [5, 6, 8, 10,
    11]: runs 0-1 and 4-5, then 11 new (id 6, after 5: the run goes on), keys 0-3,
    8-13. Each call takes one `_intern` per run of ids, not per entry, and none for
    a run found at its place in `chained` (5, id 0: the child of none)."""
    entries, calls = table
    first = BlockKeys(0, 24, B, 8, hashes=[5, 6, 7])
    assert first.ensure(6) == [0, 1, 2, 3, 4, 5]
    assert (entries.chained, entries.links, calls) == ([5, 6, 7], {}, [5])
    assert BlockKeys(1, 8, B, 8, hashes=[9]).ensure(2) == [6, 7]
    assert entries.chained == [5, 6, 7, None] and entries.links == {9 << 32: 3}
    del calls[:]
    second = BlockKeys(2, 32, B, 8, hashes=[5, 6, 8, 10])
    assert second.ensure(8) == [0, 1, 2, 3, 8, 9, 10, 11]
    assert (second.run_pos, second.run_key) == ([0, 4], [0, 8])
    assert entries.chained == [5, 6, 7, None, None, 10]
    assert entries.links == {9 << 32: 3, (8 << 32) | 2: 4}
    assert calls == [8]
    del calls[:]
    third = BlockKeys(3, 40, B, 8, hashes=[5, 6, 8, 10, 11])
    assert third.ensure(10) == [0, 1, 2, 3, 8, 9, 10, 11, 12, 13]
    assert (third.run_pos, third.run_key) == ([0, 4], [0, 8])
    assert calls == [8, 11] and len(entries) == 7 and entries.chained[6] == 11


def test_a_run_resumed_inside_an_entry_and_a_tuple_of_hash_ids(table):
    """[1, 2, 3] as a tuple (the table's list compared with a list of it), keys to
    block 2 (entry 1's first key), then to 6: the resumed entry 1 leads the run
    (keys 3-5, one run with the keys before). [1, 2, 4]: ids 0, 1, then 1.2.4 new
    (id 3, a link); the keys of its first 5 blocks: 0-3, then 6 (entry 3's first)."""
    entries, _ = table
    keys = BlockKeys(0, 24, B, 8, hashes=(1, 2, 3))
    assert keys.ensure(3) == [0, 1, 2]
    assert keys.ensure(6) == [0, 1, 2, 3, 4, 5]
    assert (keys.run_pos, keys.run_key) == ([0], [0])
    assert BlockKeys(1, 20, B, 8, hashes=[1, 2, 4]).ensure(5) == [0, 1, 2, 3, 6]
    assert entries.chained == [1, 2, 3, None] and entries.links == {(4 << 32) | 2: 3}


def test_string_and_bool_hash_ids_take_an_entry_at_a_time(table):
    """["a", 6]: "a" is a link (a string: id 0), 6 the child of 0 (id 1, held in
    `chained`); [True, 1]: True is not the int 1 (id 2, a link), then 1 after it (id
    3, in `chained`); [1]: the int 1 at the root is new (id 4: chained[0] is None, and
    its link differs from True's). Off the fast path: one `_intern` per entry."""
    entries, calls = table
    assert BlockKeys(0, 16, B, 8, hashes=["a", 6]).ensure(4) == [0, 1, 2, 3]
    assert BlockKeys(1, 16, B, 8, hashes=[True, 1]).ensure(4) == [4, 5, 6, 7]
    assert BlockKeys(2, 8, B, 8, hashes=[1]).ensure(2) == [8, 9]
    assert calls == ["a", 6, True, 1, 1]
    assert entries.chained == [None, 6, None, 1, None]
    assert len(entries.links) == 3


def test_ids_past_the_int_link_take_pair_links_and_the_same_ids(table, monkeypatch):
    """With `_LINK` at 2 (parent ids from 1 on no longer fit an int link), [7, 8, 9]
    then [7, 8, 5, 6] then [4, 8]: the same ids as with int links (0-2; 0, 1, 3, 4; 5,
    6), the links of 7.8.5 and of 4.8 pairs, and of 4 (parent -1) an int."""
    entries, _ = table
    monkeypatch.setattr(block_keys, "_LINK", 2)
    assert BlockKeys(0, 24, B, 8, hashes=[7, 8, 9]).ensure(6) == [0, 1, 2, 3, 4, 5]
    assert BlockKeys(1, 32, B, 8, hashes=[7, 8, 5, 6]).ensure(8) == [0, 1, 2, 3, 6, 7, 8, 9]
    assert BlockKeys(2, 16, B, 8, hashes=[4, 8]).ensure(4) == [10, 11, 12, 13]
    assert entries.chained == [7, 8, 9, None, 6, None, 8]
    assert entries.links == {(1, b"i5"): 3, 4 << 32: 5}


def test_int_hash_ids_past_32_bits_and_negative_ones_chain_like_others(table):
    """2**40 and -3 are int hash ids (links (id << 32) | (parent + 1), exact for
    any int): [2**40, -3] ids 0, 1; [-3] at the root id 2 (a link), [2**40, 7] 0, 3."""
    entries, _ = table
    assert BlockKeys(0, 16, B, 8, hashes=[2 ** 40, -3]).ensure(4) == [0, 1, 2, 3]
    assert BlockKeys(1, 8, B, 8, hashes=[-3]).ensure(2) == [4, 5]
    assert BlockKeys(2, 16, B, 8, hashes=[2 ** 40, 7]).ensure(4) == [0, 1, 6, 7]
    assert entries.links == {-3 << 32: 2, (7 << 32) | 1: 3}


def test_ensure_new_names_the_first_block_of_the_entries_it_interned(table):
    """Ids from 0, blocks of 4, entries of 8 tokens (keys id * 2 + 0, 1). A [5, 6]:
    ids 0, 1, all new, from block 0. B [7]: id 2, from block 0. C [5, 6, 8]: 0, 1
    found, 8 new as id 3 (keys 6, 7), a run of its own from block 4. D [7, 10, 11]:
    7 found (id 2), 10 and 11 new (ids 4, 5, keys 8-11) from block 2. E [7, 10, 11,
    12]: 12 new as id 6, but its keys go on from id 5's: one run from block 2, which
    holds found keys, so no block is named (the count, 8). Keys not from hash ids:
    the count."""
    entries, _ = table
    found = [BlockKeys(0, 16, B, 8, hashes=[5, 6]).ensure_new(4),
             BlockKeys(1, 8, B, 8, hashes=[7]).ensure_new(2),
             BlockKeys(2, 24, B, 8, hashes=[5, 6, 8]).ensure_new(6),
             BlockKeys(3, 24, B, 8, hashes=[7, 10, 11]).ensure_new(6)]
    assert (found, len(entries)) == ([0, 0, 4, 2], 6)
    last = BlockKeys(4, 32, B, 8, hashes=[7, 10, 11, 12])
    assert (last.ensure_new(8), last.run_pos, last.run_key) == (8, [0, 2], [4, 8])
    assert BlockKeys(5, 8, B, 8).ensure_new(2) == 2
