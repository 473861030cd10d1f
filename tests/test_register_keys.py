"""What the caches' `register` may assume of a request's keys, and the radix
tree's keys of a node a block leaves alone (`RadixCache._detach`)."""
from __future__ import annotations

import random

from conftest import simulate
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
