"""vLLM's index gives a walk from the first key again (kv/key_index.py `KeyIndex.find`,
`_again`): for the same keys, while no bucket changed, its hits unshortened, and
the key that ended it an integer one; the copy it gives is what `walked_pieces`
then reads. Buckets of 4 throughout; blocks are 100 + key for integer keys."""
from __future__ import annotations

import pytest

from scheduler_sim.kv import key_index
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.kv.key_index import KeyIndex
from scheduler_sim.kv.queue_members import QueueMembers
from scheduler_sim.kv.radix_index import RadixIndex


@pytest.fixture
def walks(monkeypatch):
    """How many walks over the buckets the index made (each cuts the keys into
    pieces first: `_pieces` calls)."""
    count = [0]
    cut = key_index._pieces

    def counted(keys, start, end, width):
        count[0] += 1
        return cut(keys, start, end, width)

    monkeypatch.setattr(key_index, "_pieces", counted)
    return count


def indexed(*keys) -> KeyIndex:
    index = KeyIndex(4)
    for key in keys:
        index[key] = 100 + key if type(key) is int else 7
    return index


def test_a_walk_stopped_at_a_missing_key_is_given_again_for_any_end_past_it(walks):
    """Keys 0 to 5 cached, 6 not: the walk over [0..7] stops at 6 (six hits). Asked
    again to 7 or 8, the same six, no walk; a copy, which `walked_pieces` reads."""
    index = indexed(0, 1, 2, 3, 4, 5)
    keys = [0, 1, 2, 3, 4, 5, 6, 7]
    first, every = index.find(keys, 0, 7)
    assert (first, every, walks[0]) == ([100, 101, 102, 103, 104, 105], False, 1)
    again, every = index.find(keys, 0, 8)
    assert (again, every, walks[0]) == (first, False, 1)
    assert again is not first
    assert index.walked_pieces(keys, again) == ([(0, 0, 0, 4), (4, 1, 0, 2)], 6)
    assert index.walked_pieces(keys, first) is None  # (no longer the one read)
    # Up to 6 or fewer keys the walk would find them all: walked again.
    assert index.find(keys, 0, 6) == ([100, 101, 102, 103, 104, 105], True)
    assert walks[0] == 2


def test_a_change_a_shortened_answer_or_other_keys_walk_again(walks):
    """Indexing key 6 (a bucket written), shortening the hits in place, or another
    list of the same keys: each is a new walk."""
    index = indexed(0, 1, 2)
    keys = [0, 1, 2, 3]
    assert index.find(keys, 0, 4) == ([100, 101, 102], False)
    index[3] = 103
    assert index.find(keys, 0, 4) == ([100, 101, 102, 103], True)
    assert walks[0] == 2
    hits, _ = index.find(keys, 0, 4)
    assert walks[0] == 2  # (given again)
    del hits[2:]
    assert index.find(keys, 0, 4) == ([100, 101, 102, 103], True)
    assert walks[0] == 3
    assert index.find(list(keys), 0, 4) == ([100, 101, 102, 103], True)
    assert walks[0] == 4


def test_a_walk_that_found_every_key_is_given_again_only_if_the_next_is_missing(walks):
    """A request's keys (runs of `BlockKeys`, entries of 8 tokens, blocks of 4: two keys
    an entry): its first 2 blocks cached. Found to 2, then asked to 4: block 2's key
    is not indexed, so the same 2 hits, no walk. With block 2's key indexed (which
    writes a bucket) the walk is made again and finds 3."""
    keys = BlockKeys(1, 17, 4, 8, hashes=[9300001, 9300002, 9300003])
    keys.ensure(4, False)
    k = keys.key_at(0)
    index = KeyIndex(4)
    index.add(keys, 0, 2, [50, 51])
    walks[0] = 0  # (the registration cut them too)
    assert index.find(keys, 0, 2) == ([50, 51], True)
    assert index.find(keys, 0, 4) == ([50, 51], False)
    assert walks[0] == 1
    index[k + 2] = 52
    assert index.find(keys, 0, 4) == ([50, 51, 52], False)
    assert walks[0] == 2


def test_keys_of_another_kind_are_walked_again(walks):
    """Keys of another kind live in a dict no bucket counts: a walk that ended at one
    missing, or that found every key up to one, is not given again. b"x" after keys
    0 and 1: missing, then indexed (no bucket written), then found."""
    index = indexed(0, 1)
    keys = [0, 1, b"x"]
    assert index.find(keys, 0, 3) == ([100, 101], False)
    index[b"x"] = 7
    assert index.find(keys, 0, 3) == ([100, 101, 7], True)
    assert walks[0] == 2
    # Found to 2 (integers all), then asked to 3: b"x" is indexed, so walked.
    assert index.find(keys, 0, 2) == ([100, 101], True)
    assert index.find(keys, 0, 3) == ([100, 101, 7], True)
    assert walks[0] == 4


def _walked_to_9(kind=KeyIndex):
    """Keys 4 to 8 cached (buckets 1 and 2), key 9 missing: the walk over [4..9]
    finds five."""
    index = kind(4)
    index.add([4, 5, 6, 7, 8], 0, 5, [104, 105, 106, 107, 108])
    keys = [4, 5, 6, 7, 8, 9]
    assert index.find(keys, 0, 6) == ([104, 105, 106, 107, 108], False)
    return index, keys


def _members(index):
    """The queue's members with blocks 108, 107 free under keys 8, 7 (flags set)."""
    members = QueueMembers(index, lambda: ([108, 107], [8, 7]))
    members.add([108, 107], [8, 7])
    return members


ALL, TO_7, TO_6 = [104, 105, 106, 107, 108, 109], [104, 105, 106, 107], [104, 105, 106]
WRITERS = {  # each writes a bucket in the walked keys' range: the answer it leaves
    "set": (lambda index: index.__setitem__(9, 109), ALL, True),
    "setdefault": (lambda index: index.setdefault(9, 109), ALL, True),
    "add": (lambda index: index.add([9], 0, 1, [109]), ALL, True),
    "del": (lambda index: index.__delitem__(8), TO_7, False),
    "forget": (lambda index: index.forget([8, 7], 0, [108, 107]), TO_6, False),
    "evict_one": (lambda index: _members(index).evict_one(108, 8), TO_7, False),
    "evict_down": (lambda index: _members(index).evict_down(8, [108, 107]), TO_6, False),
    "evict": (lambda index: _members(index).evict([108, 107], [8, 7], 0), TO_6, False),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_of_a_bucket_has_the_look_up_walked_again(walks, writer):
    """Whatever writes a bucket in between (a key indexed, forgotten, evicted with the
    queue's flags), the next look-up is a walk that sees it, not the last answer."""
    index, keys = _walked_to_9()
    write, hits, every = WRITERS[writer]
    done = walks[0]
    assert index.find(keys, 0, 6) == ([104, 105, 106, 107, 108], False)
    assert walks[0] == done  # (given again)
    write(index)
    done = walks[0]  # (`add` cuts its keys too)
    assert index.find(keys, 0, 6) == (hits, every)
    assert walks[0] == done + 1


def test_the_radix_trees_index_forgetting_a_node_has_the_look_up_walked_again(walks):
    """`RadixIndex.forget_node` of keys 7 and 8 writes two buckets: walked again, three
    hits."""
    index, keys = _walked_to_9(RadixIndex)
    done = walks[0]
    index.forget_node([7, 8], [107, 108])
    assert index.find(keys, 0, 6) == (TO_6, False)
    assert walks[0] == done + 1


def test_a_key_of_another_kind_indexed_after_the_walk_is_found(walks):
    """No bucket counts keys of other kinds, so their writes leave `changes` as it was.
    A walk that stopped at a missing integer key is given again (its answer does not
    depend on them); the walk to 2 that found every key is not given again to 3 once
    block 2's key (the request's own content, made after the walk: the keys grew in
    place) is indexed. Entries of 8 tokens over a 106-token prompt, blocks of 4: the
    hash ids key blocks 0 and 1, block 2 is the request's own."""
    keys = BlockKeys(2, 106, 4, 8, hashes=[9400001])
    keys.ensure(2, False)
    index = KeyIndex(4)
    index.add(keys, 0, 2, [50, 51])
    walks[0] = 0
    assert index.find(keys, 0, 2) == ([50, 51], True)
    keys.ensure(3, False)
    own = keys.key_at(2)
    assert type(own) is bytes
    assert index.find(keys, 0, 3) == ([50, 51], False)  # (block 2's key not indexed)
    assert walks[0] == 1
    changes = index.changes
    index[own] = 52
    assert index.changes == changes
    assert index.find(keys, 0, 3) == ([50, 51, 52], True)
    assert walks[0] == 2


def test_token_id_keys_are_walked_every_time(walks):
    """Keys of token ids are bytes all: no walk is given again (none ends at an
    integer key). Two blocks of 4 ids; the first indexed, then the second."""
    keys = BlockKeys(3, 8, 4, 4, prompt_ids=list(range(8)))
    keys.ensure(2, False)
    index = KeyIndex(4)
    index[keys.key_at(0)] = 60
    assert index.find(keys, 0, 2) == ([60], False)
    assert index.find(keys, 0, 2) == ([60], False)
    index[keys.key_at(1)] = 61
    assert index.find(keys, 0, 2) == ([60, 61], True)
    assert walks[0] == 3
