"""What the caches' `register` may assume of a request's keys, and the radix
tree's keys of a node a block leaves alone (`RadixCache._detach`)."""
from __future__ import annotations

import random

from conftest import simulate
from scheduler_sim.kv.block_keys import OWN_KEY, BlockKeys
from scheduler_sim.kv.radix_cache import RadixCache


def _shared_prefix_workload(seed: int) -> list[dict]:
    """6-20 requests over three families of prompts (block hashes or token ids, so
    that look-ups hit), preempted now and then: hits, resumes from hits, and
    registrations of nothing new."""
    rng = random.Random(seed)
    records: list[dict] = [{"type": "config", "hash_block_size": 4}]
    for i in range(rng.randint(6, 20)):
        family = rng.randrange(3)
        prompt = rng.randint(4, 24)
        record = {"type": "request", "id": f"r{i}", "arrival": rng.randint(0, 30),
                  "prompt_tokens": prompt, "output_tokens": rng.randint(1, 12)}
        if rng.random() < 0.5:
            record["block_hashes"] = [100 * family + j for j in range(-(-prompt // 4))]
        else:
            record["prompt_token_ids"] = [100 * family + j for j in range(prompt)]
        records.append(record)
        if rng.random() < 0.3:
            records.append({"type": "preempt", "id": f"r{i}",
                            "at": record["arrival"] + rng.randint(0, 10)})
    return records


def test_registered_blocks_have_their_keys_computed(monkeypatch):
    """At every `RadixCache.register`, the blocks counted registered already have
    their keys computed (`keys.known >= keys.registered`: a look-up's hits were
    compared by key, and a registration computes what it keys), so the branch
    for nothing new reads `key_at(full - 1)` without computing a key. Twelve
    seeds, each reaching that branch (a request ending without filling another
    block) 3-10 times, with hits (cached tokens) in every one."""
    nothing_new = []
    register = RadixCache.register

    def checked(self, rid, keys, full, table):
        assert keys.known >= keys.registered
        if full <= keys.registered:
            nothing_new[-1] += 1
        return register(self, rid, keys, full, table)

    monkeypatch.setattr(RadixCache, "register", checked)
    cached = []
    for seed in range(12):
        nothing_new.append(0)
        s = simulate(_shared_prefix_workload(seed), policy="sglang", block_size=4,
                     num_blocks=random.Random(seed).randint(8, 14), prefix_caching=True)
        cached.append(s.summary["cached_tokens"])
    assert nothing_new == [6, 5, 4, 4, 3, 8, 7, 5, 7, 8, 5, 10]
    assert cached == [68, 12, 48, 8, 20, 40, 40, 16, 40, 16, 56, 56]


def test_a_requests_own_keys_are_one_format_made_as_runs_or_listed():
    """Request 7: 8 prompt tokens in blocks of 4, one hash id over its first 4
    (own keys from block 1): block 1's key is OWN_KEY of (7, 1), b"r7:1", kept
    in `tail` with no list made (`key_list` None); once the list is made, the
    keys computed after it go to both (block 2, b"r7:2")."""
    keys = BlockKeys(7, 8, 4, 4, hashes=[5])
    assert keys.ensure(2, False) is None
    assert (keys.own_from, keys.ints, keys.tail, keys.key_list) == (1, 1, [b"r7:1"], None)
    assert keys.key_at(1) == OWN_KEY % (7, 1) == b"r7:1"
    listed = keys.keys
    assert keys.ensure(3) is listed is keys.key_list
    assert (listed[1:], keys.tail) == ([b"r7:1", b"r7:2"], [b"r7:1", b"r7:2"])


def test_a_block_leaving_a_run_nodes_end_keeps_its_keys_a_range():
    """A node of blocks 1-5 keyed 10-14 (one run, a `range`): block 1 leaves
    alone (`_detach`), keys range(11, 15); block 5, range(11, 14); block 3 from
    the middle, [11, 13] (a list: two runs). Each key left is still indexed to
    its block, and each gone key is forgotten."""
    c = RadixCache()
    c.index.update(zip(range(10, 15), [1, 2, 3, 4, 5]))
    node = c._new_node([1, 2, 3, 4, 5], range(10, 15), None, 0, ends=False)
    c._detach(1)
    assert (c.nodes[node][0], c.nodes[node][4]) == ([2, 3, 4, 5], range(11, 15))
    c._detach(5)
    assert (c.nodes[node][0], c.nodes[node][4]) == ([2, 3, 4], range(11, 14))
    c._detach(3)
    assert (c.nodes[node][0], c.nodes[node][4], c.detached) == ([2, 4], [11, 13], 3)
    assert [c.index.get(k) for k in range(10, 15)] == [None, 2, None, 4, None]
