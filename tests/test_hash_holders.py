"""prefix-affinity's index of which replicas were sent each hash id (fleet/hash_holders.py),
and the loads a fleet keeps for it (fleet/fleet.py): the same routes as asking every
replica, fewer questions."""
from __future__ import annotations

import random

import pytest

from conftest import random_engine_options, slow_beyond, trace_bytes
from scheduler_sim.engine.summary import request_record
from scheduler_sim.fleet import Fleet
from scheduler_sim.fleet.fleet import ReplicaView
from scheduler_sim.fleet.hash_holders import EVERY, HashHolders
from scheduler_sim.fleet import routers
from scheduler_sim.fleet.routers import PrefixAffinity, _bits_of, _lightest_of
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.records.options import Options


def test_holders_are_the_replicas_each_hash_id_was_sent_to():
    holders = HashHolders()
    holders.sent([7, 8], 0)
    holders.sent([7, "s"], 2)
    holders.sent([7, 8], 0)  # again: no change
    holders.sent(None, 1)    # no hash ids: nothing to note
    assert [holders.mask(h) for h in (7, 8, "s", 9)] == [0b101, 0b001, 0b100, 0]
    assert (holders.dense[7:9], holders.sparse) == ([0b101, 0b001], {"s": 0b100})
    # Blocks of 4, entries of 6 tokens: block 0 (tokens 0-3) ends in entry 0, block 1
    # (tokens 4-7) in entry 1, block 2 (8-11) in entry 1; hash ids 7, 8.
    keys = BlockKeys(0, 12, 4, 6, hashes=(7, 8))
    keys.ensure(3)
    assert [holders.may_hold(keys, b) for b in range(3)] == [0b101, 0b001, 0b001]
    # A hash id no replica was sent: nobody may hold its blocks.
    assert holders.may_hold(_ensured(BlockKeys(1, 8, 4, 4, hashes=(9, 7)), 2), 0) == 0
    # Keys of content the request owns (past its hash ids) or of token ids: anyone.
    own = BlockKeys(2, 12, 4, 4, hashes=(7,))
    own.ensure(3)
    assert (holders.may_hold(own, 0), holders.may_hold(own, 1)) == (0b101, EVERY)
    tokens = BlockKeys(3, 8, 4, 4, prompt_ids=list(range(8)))
    tokens.ensure(2)
    assert holders.may_hold(tokens, 0) == EVERY


def test_holders_keep_ids_from_0_in_a_list_and_the_others_in_a_dict():
    holders = HashHolders()
    holders.sent([5000, -1, 2**40, "x"], 1)  # 5,000 is too far past the list's end
    assert (holders.dense, holders.sparse) == ([], {5000: 2, -1: 2, 2**40: 2, "x": 2})
    holders.sent([3], 0)                     # the list grows to cover 3 ...
    assert (len(holders.dense), holders.dense[3]) == (4, 1)
    holders.sent([4100], 0)                  # ... then to 4,100 (4 + 4,096 away)
    assert len(holders.dense) == 4101 and 5000 in holders.sparse
    holders.sent([5100], 0)                  # a quarter more: 5,126, taking 5,000 over
    assert len(holders.dense) == 5126 and 5000 not in holders.sparse
    assert [holders.mask(h) for h in (3, 4100, 5000, -1, 2**40, "x", 7, "y")] == [
        1, 1, 2, 2, 2, 2, 0, 0]
    holders.sent([5000, 4100], 1)
    assert [holders.mask(h) for h in (4100, 5000)] == [3, 2]


def _ensured(keys: BlockKeys, count: int) -> BlockKeys:
    keys.ensure(count)
    return keys


class _Holder:
    """A replica as prefix-affinity reads it: the keys its cache holds, and the
    leading blocks a look-up finds (`found`); counts its questions."""

    def __init__(self, index, held, found):
        self.index, self.held, self.found = index, set(held), found
        self.asked = self.looked = 0

    def holds(self, key):
        self.asked += 1
        return key in self.held

    def cached_blocks(self, keys, max_blocks):
        self.looked += 1
        return min(self.found, max_blocks)


def test_longest_hit_asks_only_replicas_that_were_sent_the_hash_ids():
    # One entry of 6 blocks of 4 (hash id 7), keys first..first+5. Replicas 0, 2, 4 and
    # 6 were sent hash id 7; 1, 3 and 5 were not (their caches are never asked).
    # Replica 0 finds 2, replica 2 finds 4 (load 3), replica 4 finds 4 with load 1:
    # the best; replica 6 holds keys 3 and 4 but finds 1 (a gap).
    keys = BlockKeys(0, 24, 4, 24, hashes=[7])
    first = keys.ensure(6)[0]
    held = [[first, first + 1], [first], range(first, first + 4), [first, first + 1],
            range(first, first + 4), [first + 3], [first + 3, first + 4]]
    found = [2, 1, 4, 2, 4, 4, 1]
    loads = [0, 0, 3, 0, 1, 1, 0]
    replicas = [_Holder(i, held[i], found[i]) for i in range(7)]
    holders = HashHolders()
    for i in (0, 2, 4, 6):
        holders.sent([7], i)
    assert PrefixAffinity.longest_hit(keys, 5, replicas, loads, holders.may_hold) == (4, 4)
    # Replica 0: key 0 (yes), looked up: hit 2. Replica 2: key 1, key 2 (yes), looked
    # up: hit 4. Replica 4: key 3 (yes), lighter (it wins a tie: not asked key 4),
    # looked up, best. Replica 6: key 3 (yes), lighter: looked up, finds 1.
    assert [r.asked for r in replicas] == [1, 0, 2, 0, 1, 0, 1]
    assert [r.looked for r in replicas] == [1, 0, 1, 0, 1, 0, 1]
    # Without the index, the same answer, every replica asked.
    again = [_Holder(i, held[i], found[i]) for i in range(7)]
    assert PrefixAffinity.longest_hit(keys, 5, again, loads) == (4, 4)
    assert [r.asked for r in again] == [1, 1, 2, 1, 1, 2, 1]
    # Nobody was sent hash id 9: nobody is asked.
    other = BlockKeys(1, 24, 4, 24, hashes=[9])
    assert PrefixAffinity.longest_hit(other, 5, again, loads, holders.may_hold) == (0, 0)
    assert [r.asked for r in again] == [1, 1, 2, 1, 1, 2, 1]


def test_longest_hit_skips_replicas_no_lighter_that_were_not_sent_the_next_hash_id():
    # Entries of 8 tokens, blocks of 4: blocks 0-1 hash id 7, 2-3 id 8, 4-5 id 9.
    # Replica 0 (load 2) finds 4; replica 1 was not sent id 8 (not asked); replica 2
    # (load 3) holds 4 blocks too, but is no lighter and was not sent id 9: it could
    # only tie, and lose (not asked); replica 3 (load 1) is lighter: asked key 3,
    # looked up, the best.
    keys = BlockKeys(0, 24, 4, 8, hashes=[7, 8, 9])
    first = keys.ensure(6)[0]
    held = [range(first, first + 4), [first, first + 1], range(first, first + 4),
            range(first, first + 4)]
    found, loads = [4, 2, 4, 4], [2, 5, 3, 1]
    holders = HashHolders()
    for i, hashes in enumerate([[7, 8], [7], [7, 8], [7, 8]]):
        holders.sent(hashes, i)
    replicas = [_Holder(i, held[i], found[i]) for i in range(4)]
    assert PrefixAffinity.longest_hit(keys, 5, replicas, loads, holders.may_hold) == (4, 3)
    assert [r.asked for r in replicas] == [1, 0, 0, 1]
    assert [r.looked for r in replicas] == [1, 0, 0, 1]
    again = [_Holder(i, held[i], found[i]) for i in range(4)]
    assert PrefixAffinity.longest_hit(keys, 5, again, loads) == (4, 3)
    assert [r.asked for r in again] == [1, 1, 2, 1]
    assert [r.looked for r in again] == [1, 0, 0, 1]


# --- random fleets: the same routes as a router that asks every replica -------------------


class _AskEveryone(PrefixAffinity):
    """prefix-affinity as before its index and the fleet's loads: every replica's
    load read, every replica's cache asked."""

    reads_loads = False
    longest_hits = 0

    def choose(self, spec, replicas, loads=None):
        assert loads is None
        return super().choose(spec, replicas)

    def longest_hit(self, keys, most, replicas, loads, may_hold=None, first=0):
        _AskEveryone.longest_hits += 1
        return PrefixAffinity.longest_hit(keys, most, replicas, loads)


def _hashed_workload(rng: random.Random, hash_block_size: int) -> list[dict]:
    """Conversations: each request resends its conversation's earlier hash ids and
    adds some; some share an opening; cancellations and forced preemptions."""
    records = [{"type": "config", "block_size": 4, "hash_block_size": hash_block_size}]
    conversations: list[list[int]] = []
    t = 0
    for i in range(rng.randint(10, 40)):
        t += rng.choice([0, 0, 1, 3, 10, 40])
        if conversations and rng.random() < 0.6:
            past = rng.choice(conversations)
        else:
            past = [0] if rng.random() < 0.5 else []
            conversations.append(past)
        past += [rng.randint(1, 10**6) for _ in range(rng.randint(0, 3))]
        entries = len(past) + rng.randint(0, 1)
        prompt = max(1, entries * hash_block_size - rng.randint(0, hash_block_size - 1))
        hashes = past[:-(-prompt // hash_block_size)]
        records.append({"type": "request", "id": f"r{i}", "arrival": t,
                        "prompt_tokens": prompt, "output_tokens": rng.randint(1, 30),
                        "block_hashes": hashes})
        if rng.random() < 0.05:
            records.append({"type": "cancel", "id": f"r{i}", "at": t + rng.randint(0, 50)})
        if rng.random() < 0.05:
            records.append({"type": "preempt", "id": f"r{i}", "at": t + rng.randint(0, 20)})
    return records


def _replay(trace, opts, policy, everyone: bool):
    fleet = Fleet(trace.workload, opts, policy)
    if everyone:
        fleet.router = _AskEveryone(fleet.options)
        fleet.loads = None
    result = fleet.run()
    records = sorted((request_record(r) for r in result.requests), key=lambda r: r["id"])
    return result.summary, result.replicas, records, fleet


@pytest.mark.parametrize("seed", slow_beyond(range(12), 4))
def test_prefix_affinity_routes_as_if_it_asked_every_replica(seed, monkeypatch):
    rng = random.Random(2600 + seed)
    options = random_engine_options(rng, cost_model=seed % 3 == 0)
    options["num_blocks"] = rng.randint(24, 64)  # evictions, and room for a prompt
    hash_block_size = rng.choice([4, 6, 8])  # whole blocks, or entries across blocks
    records = _hashed_workload(rng, hash_block_size)
    trace = parse_trace(trace_bytes(records), "hashed.jsonl")
    opts = Options.resolve(trace.config, dict(
        options, prefix_caching=True, replicas=rng.randint(2, 5), router="prefix-affinity",
        affinity_threshold=rng.choice([0.0, 0.5]), affinity_slack=rng.choice([0, 2, 16]),
        router_signal_delay=rng.choice([0, 0, 3])))
    policy = ["vllm", "sglang"][seed % 2]
    questions = [0]
    holds = ReplicaView.holds

    def counted(view, key):
        questions[0] += 1
        return holds(view, key)

    monkeypatch.setattr(ReplicaView, "holds", counted)
    _AskEveryone.longest_hits = 0
    *expected, _ = _replay(trace, opts, policy, everyone=True)
    asked = questions[0]
    questions[0] = 0
    *got, fleet = _replay(trace, opts, policy, everyone=False)
    assert got == expected
    # Caches were compared, and the index spared some of the questions (on these
    # seeds 8 of 27 to 113 of 171), and every request routed noted its hash ids.
    assert _AskEveryone.longest_hits > 0
    assert 0 < questions[0] < asked
    holders = fleet.router.holders
    assert {h for h, mask in enumerate(holders.dense) if mask} | set(holders.sparse) == {
        h for r in records if r.get("type") == "request" for h in r["block_hashes"]}


def test_the_deepest_hash_id_sent_names_the_replicas_to_look_up_first():
    # Replica 0 was sent ids 7, 8; replica 2 ids 7, 8, 9; replica 3 id 7 and "s".
    # A request with 7, 8, 9, 10: 10 was sent nowhere, 9 to replica 2 alone.
    holders = HashHolders()
    holders.sent([7, 8], 0)
    holders.sent([7, 8, 9], 2)
    holders.sent([7, "s"], 3)
    assert [holders.deepest(h) for h in ([7, 8, 9, 10], [7, 8], [7, "s", 11], [7], [12],
                                         [], None)] == [0b100, 0b101, 0b1000, 0b1101, 0, 0, 0]


def test_longest_hit_looks_up_the_replicas_named_first_lightest_first_same_answer():
    # Entries of 8 tokens, blocks of 4: blocks 0-1 hash id 7, 2-3 id 8, 4-5 id 9.
    # Replicas 0, 1 and 4 were sent id 7 and hold the opening (2 blocks); replicas 2
    # and 3, both load 1, were sent ids 7 and 8 (the deepest sent) and hold 4 blocks.
    keys = BlockKeys(0, 24, 4, 8, hashes=[7, 8, 9])
    first = keys.ensure(6)[0]
    held = [range(first, first + 2)] * 2 + [range(first, first + 4)] * 2 + [
        range(first, first + 2)]
    found, loads = [2, 2, 4, 4, 2], [0, 0, 1, 1, 5]
    holders = HashHolders()
    for i, hashes in enumerate([[7], [7], [7, 8], [7, 8], [7]]):
        holders.sent(hashes, i)
    deepest = holders.deepest(keys.hashes)
    assert deepest == 0b01100
    # In index order: 0 (finds 2); 1 (as light, a higher index: it needs more
    # blocks, and was not sent id 8: skipped); 2 (finds 4); 3 (it would tie and lose,
    # and was not sent id 9: skipped); 4 (not sent id 8: finds fewer).
    plain = [_Holder(i, held[i], found[i]) for i in range(5)]
    assert PrefixAffinity.longest_hit(keys, 5, plain, loads, holders.may_hold) == (4, 2)
    assert [r.looked for r in plain] == [1, 0, 1, 0, 0]
    # Replicas 2 and 3 first (as light: 2 first), then 0, 1, 4: one look-up.
    ordered = [_Holder(i, held[i], found[i]) for i in range(5)]
    assert PrefixAffinity.longest_hit(keys, 5, ordered, loads, holders.may_hold,
                                      deepest) == (4, 2)
    assert [r.looked for r in ordered] == [0, 0, 1, 0, 0]
    # Replica 3 lighter than 2: 3 is looked up first and wins; 2 would only tie.
    light = [_Holder(i, held[i], found[i]) for i in range(5)]
    assert PrefixAffinity.longest_hit(keys, 5, light, [0, 0, 1, 0, 5], holders.may_hold,
                                      deepest) == (4, 3)
    assert [r.looked for r in light] == [0, 0, 0, 1, 0]
    # Replica 3 named first alone, as light as 2: 3 is looked up first, then 2 (a lower
    # index, it would win a tie) is looked up too, and wins.
    tie = [_Holder(i, held[i], found[i]) for i in range(5)]
    assert PrefixAffinity.longest_hit(keys, 5, tie, loads, holders.may_hold,
                                      0b01000) == (4, 2)
    assert [r.looked for r in tie] == [0, 0, 1, 1, 0]


def test_lightest_of_a_mask_is_the_least_loaded_then_the_lowest_index():
    loads = [3, 1, 2, 1, 0, 1]  # (replica 4 the lightest of all)
    assert [_lightest_of(mask, loads) for mask in (0b1, 0b110, 0b1110, 0b111111, 0b100100)] == [
        0, 1, 1, 4, 5]


def test_longest_hit_passes_the_rest_of_the_lead_unlisted_when_none_may_find_more(monkeypatch):
    # Entries of 8 tokens, blocks of 4: blocks 0-1 hash id 7, 2-3 id 8, 4-5 id 9.
    keys = BlockKeys(0, 24, 4, 8, hashes=[7, 8, 9])
    first = keys.ensure(6)[0]
    listed = []
    monkeypatch.setattr(routers, "_bits_of", lambda mask: listed.append(mask) or _bits_of(mask))
    # Replicas 0-3 were sent id 7 alone (the deepest sent) and hold the opening: the
    # lightest (1, as light as 2 with a lower index) is looked up first and wins; the
    # others could only tie and lose (none was sent id 8): neither listed nor asked.
    opening = [_Holder(i, range(first, first + 2), 2) for i in range(4)]
    holders = HashHolders()
    for i in range(4):
        holders.sent([7], i)
    assert PrefixAffinity.longest_hit(keys, 5, opening, [2, 1, 1, 3], holders.may_hold,
                                      holders.deepest(keys.hashes)) == (2, 1)
    assert ([r.asked for r in opening], [r.looked for r in opening], listed) == (
        [0, 1, 0, 0], [0, 1, 0, 0], [])
    # Replicas 1-3 were sent ids 7 and 8 (the deepest sent), replica 0 id 7; replica 3
    # (load 3) holds 4 blocks. The lightest of 1-3 (1) finds 2; 2 and 3 may find more:
    # listed (2 first), 2 is asked keys 1 and 2 (it lacks 2), 3 is looked up and wins.
    held = [range(first, first + 2)] * 3 + [range(first, first + 4)]
    deeper = [_Holder(i, held[i], 4 if i == 3 else 2) for i in range(4)]
    holders = HashHolders()
    for i, hashes in enumerate([[7], [7, 8], [7, 8], [7, 8]]):
        holders.sent(hashes, i)
    assert PrefixAffinity.longest_hit(keys, 5, deeper, [0, 1, 1, 3], holders.may_hold,
                                      holders.deepest(keys.hashes)) == (4, 3)
    assert ([r.asked for r in deeper], [r.looked for r in deeper], listed) == (
        [0, 1, 2, 2], [0, 1, 0, 1], [0b1100])


def test_a_list_of_new_hash_ids_grows_the_dense_list_once_a_bound_is_passed():
    """`sent` of ids 0..99 to a new table: the dense list grows when an id passes its
    end, to the larger of id + 1 and a quarter more (1, 2, 3, 4, 5, ..., 78, 97,
    121), its length read again after each growth: 121 long, not grown again for
    every id past the first growth (which ran away: 718,235 long for 60 ids)."""
    holders = HashHolders()
    holders.sent(list(range(100)), 0)
    assert (len(holders.dense), holders.dense[:100], set(holders.dense[100:])) == (
        121, [1] * 100, {0})


def test_longest_hit_asks_nobody_who_loses_once_a_hit_is_the_most():
    # Entries of 8 tokens, blocks of 4: blocks 0-1 hash id 7, 2-3 id 8, 4-5 id 9; at
    # most 4 blocks hit. Every replica holds all 6 and finds 4; loads 1, 2, 2, 0.
    # In index order: 0 finds 4 (the most); 1 and 2 could only tie and lose: never
    # asked; 3 is lighter (it wins a tie): asked key 3, looked up, the best.
    keys = BlockKeys(0, 24, 4, 8, hashes=[7, 8, 9])
    first = keys.ensure(6)[0]
    loads = [1, 2, 2, 0]
    plain = [_Holder(i, range(first, first + 6), 4) for i in range(4)]
    assert PrefixAffinity.longest_hit(keys, 4, plain, loads) == (4, 3)
    assert ([r.asked for r in plain], [r.looked for r in plain]) == (
        [1, 0, 0, 1], [1, 0, 0, 1])
    # All four sent every hash id, named first: 3, the lightest, found 4, and the
    # rest of the lead is passed at once (none may find more).
    holders = HashHolders()
    for i in range(4):
        holders.sent([7, 8, 9], i)
    lead = [_Holder(i, range(first, first + 6), 4) for i in range(4)]
    assert PrefixAffinity.longest_hit(keys, 4, lead, loads, holders.may_hold,
                                      holders.deepest(keys.hashes)) == (4, 3)
    assert ([r.asked for r in lead], [r.looked for r in lead]) == (
        [0, 0, 0, 1], [0, 0, 0, 1])
