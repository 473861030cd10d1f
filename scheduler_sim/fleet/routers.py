"""Routers: which replica of a fleet serves each arriving request.

A router is an object with one method, `choose(spec, replicas)`, called once
per arrival, in trace order, at the request's arrival time. It sees every
replica as it is at that moment (`Replica`: its waiting and running
requests, its KV usage, the cached prefix it holds for the request), after
the dispatches completing at that time have recorded their outputs and
after the requests routed before it at the same time have joined their
replicas' queues. Nothing is stale: a real router reads counters that lag;
this one reads the truth, so differences between routers come from their
rules alone.

- `round-robin`: the i-th arrival goes to replica i mod N.
- `least-loaded`: vLLM's data-parallel load balancer. Each replica scores
  `waiting + running`, plus `waiting * 6 * max(0, kv_usage - 0.5)` when
  requests wait (a queue on a full KV pool drains slowly); the lowest score
  wins, scanning from a start index that moves one replica further at each
  arrival, so that ties rotate.
- `prefix-affinity`: the replica holding the longest cached prefix of the
  request (in blocks, as its own prefix cache would find it), ties to the
  least loaded (waiting + running), then the lowest index. That prefix
  counts only if it covers at least `affinity_threshold` of the prompt's
  full blocks (SGLang's cache-aware router has the same kind of threshold):
  a short prefix that every warm replica holds, such as a system prompt
  all requests share, is no reason to prefer one. And the preferred
  replica is taken only while it holds at most `affinity_slack` more
  requests than the least loaded one, so that one hot prefix cannot bury
  one replica. Otherwise the least loaded serves (lowest index on a tie).
- `power-of-two`: two distinct replicas drawn at random (seeded by the
  `seed` option), the one with fewer requests (waiting + running) wins, the
  first drawn on a tie.
"""
from __future__ import annotations

import random
from typing import Protocol

from ..kv.block_keys import BlockKeys
from ..records.options import Options
from ..records.workload import RequestSpec
from .hash_holders import EVERY, HashHolders

__all__ = ["Replica", "Router", "ROUTERS", "make_router"]

INF = float("inf")


class Replica(Protocol):
    """What a router may read of one replica."""

    index: int

    @property
    def waiting(self) -> int: ...

    @property
    def running(self) -> int: ...

    @property
    def kv_usage(self) -> float: ...

    def cached_blocks(self, keys: BlockKeys, max_blocks: int) -> int: ...

    def holds(self, key) -> bool: ...


class Router:
    """Base of the routers: `choose` returns the index of the replica to serve `spec`."""

    name = ""

    def __init__(self, options: Options) -> None:
        self.options = options

    # Whether `choose` reads every replica's load (waiting + running) at each
    # arrival: then a fleet that keeps them up to date hands them over (`loads`).
    reads_loads = False
    # The prefix-cache keys (`BlockKeys`) the last `choose` computed for its
    # request, None if it computed none: a fleet hands them to the chosen replica
    # with the request (`FleetLink.take_keys`), which then need not compute them.
    keys = None

    def choose(self, spec: RequestSpec, replicas: list, loads: list[int] | None = None) -> int:
        """The replica to serve `spec`; `loads`, when given, is each replica's waiting +
        running, as the fleet keeps them (the same as reading the replicas)."""
        raise NotImplementedError

    def reaches(self, replica: int, upcoming, count: int) -> float:
        """The arrival time of the first of the `upcoming` requests (the next ones, in
        order; at least `count` of them unless the trace ends) that may be routed
        to `replica` of `count`; infinity if none may. Any, unless the router
        knows better."""
        return upcoming[0].arrival if upcoming else INF


def _load(replica) -> int:
    return replica.waiting + replica.running


class RoundRobin(Router):
    name = "round-robin"

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.turn = 0

    def choose(self, spec: RequestSpec, replicas: list, loads: list[int] | None = None) -> int:
        index = self.turn % len(replicas)
        self.turn += 1
        return index

    def reaches(self, replica: int, upcoming, count: int) -> float:
        k = (replica - self.turn) % count  # the next arrival whose turn is `replica`'s
        if k < len(upcoming):
            return upcoming[k].arrival
        return INF  # fewer than `count` arrivals left, none of them its turn


class LeastLoaded(Router):
    name = "least-loaded"

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.start = 0

    @staticmethod
    def score(replica) -> float:
        """vLLM's data-parallel load score of one replica."""
        waiting = replica.waiting
        score = float(waiting + replica.running)
        if waiting:
            score += waiting * 6.0 * max(0.0, replica.kv_usage - 0.5)
        return score

    def choose(self, spec: RequestSpec, replicas: list, loads: list[int] | None = None) -> int:
        n = len(replicas)
        best, best_score = 0, float("inf")
        for i in range(n):
            index = (self.start + i) % n
            score = self.score(replicas[index])
            if score < best_score:
                best, best_score = index, score
        self.start = (self.start + 1) % n
        return best


class PrefixAffinity(Router):
    name = "prefix-affinity"
    reads_loads = True

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        # The replicas each hash id was routed to (hash_holders.py): only their
        # caches are asked whether they hold a key made from it.
        self.holders = HashHolders()

    def choose(self, spec: RequestSpec, replicas: list, loads: list[int] | None = None) -> int:
        o = self.options
        self.keys = None
        if loads is None:
            loads = [_load(r) for r in replicas]
        lightest = loads.index(min(loads))  # (the first of the least loaded)
        # The last prompt token is always computed, so at most this many blocks hit.
        most = (spec.prompt_tokens - 1) // o.block_size
        if not o.prefix_caching:
            return lightest
        choice = lightest
        if most > 0:
            keys = BlockKeys(spec.index, spec.prompt_tokens, o.block_size, o.hash_block_size,
                             spec.prompt_token_ids, spec.output_token_ids, spec.block_hashes)
            holders = self.holders
            hit, best = self.longest_hit(keys, most, replicas, loads, holders.may_hold,
                                         holders.deepest(spec.block_hashes))
            self.keys = keys
            if (hit and hit >= o.affinity_threshold * most
                    and loads[best] - loads[lightest] <= o.affinity_slack):
                choice = best
        self.holders.sent(spec.block_hashes, choice)
        return choice

    @staticmethod
    def longest_hit(keys: BlockKeys, most: int, replicas: list, loads: list[int],
                    may_hold=None, first=0) -> tuple[int, int]:
        """(the most leading blocks of `keys` any replica's cache would hand out now, at
        most `most`; the least loaded replica of those holding that many, the lowest
        index on a tie); (0, 0) when none holds any. `may_hold(keys, block)`, if
        given, is the bit mask of the replicas that may hold the key of `block` (a
        superset: `HashHolders.may_hold`); the others are not asked.

        Speed: a replica's look-up walks its cache key by key, so a replica is looked
        up only if it may change the answer: if it has a block keyed like the one
        after the best hit so far (it may find more), or, when it has the key of
        that hit's last block (it may find as many), if it is less loaded than the
        best so far (it would win the tie). A look-up stops at the first key
        missing, so the others find fewer, or as many and lose the tie. On the
        Mooncake trace over 64 replicas an arrival looked up all 64 caches, of
        which about 25 hold its first blocks (an opening most conversations share)
        and about 19 tie on them. Then each replica was still asked whether it
        holds a key, about 84 times an arrival (each three Python calls through
        the replica, its allocator and the cache's index: with the 64 loads read
        the same way, 12.6% of that replay, sampled); with `may_hold` only the
        replicas sent the request's first hash id are visited, and of those only
        the ones sent the hash id of the best hit's last block are asked, and of
        those no lighter than the best only the ones sent the hash id of the
        block after it. The keys computed are those the best replica's look-up
        computes, in order (`ensure` interns hash chains: their numbering stays
        the same): no other look-up or question goes further.

        `first`, a bit mask, names the replicas to look up before the others (those
        sent the request's deepest hash id sent anywhere: `HashHolders.deepest`).
        Any order gives the same answer (a replica wins on more blocks, then on a
        lighter load, then on a lower index); the one most likely to hold the
        longest hit, looked up first, spares the others' look-ups, since they may
        then only find fewer or tie and lose. On the Mooncake trace over 64
        replicas, looked up in index order, the first look-up was the best one for
        869 of 12,031 arrivals, and 13,315 of the 25,336 look-ups were of
        replicas that lost (433,140 blocks found, one hash entry each on average:
        the conversations' shared opening). The replicas sent the deepest hash id
        first, lightest first: 14,864 look-ups, the first one the best for 10,214
        arrivals; the first 2,000 requests took 0.997x the instructions
        (8.4761e9 -> 8.4508e9, callgrind)."""
        hit, best = 0, 0
        ensure = keys.ensure
        # The keys as runs, read by `key_at`: a list made here was kept up to date by
        # the replica's vLLM cache from then on, an int object per key (the runs
        # are what that cache reads). Speed: 64 replicas on the first 1,999 Mooncake
        # requests, 7.5772e9 -> 7.2619e9 instructions (0.958x, callgrind; a final
        # read of the thirteenth steps).
        ensure(1, False)
        key_at = keys.key_at
        count = len(replicas)
        # The replicas that may hold the first key (a bit each; every one without
        # hints): those also in `first` ahead, lightest first (index order on a tie),
        # then the others (`rest`) in index order.
        openers = (1 << count) - 1
        if may_hold is not None:
            openers &= may_hold(keys, 0)
        # The lead's lightest is found by a walk of its bits that stops at a
        # replica as light as any (`_lightest_of`); the others are listed (in
        # that order) only at the second visit, when another may still count.
        rest = openers
        left = 0       # the replicas of the lead not visited yet
        if may_hold is not None and first and openers & first:
            left = openers & first
            rest = openers & ~first
        led = 0        # how many of the lead were visited
        lead: list[int] = []  # the lead after its lightest, listed at the second visit
        maybe = EVERY  # the replicas that may hold the best hit's last key
        # Those that may find more than the best hit: that may hold the key after
        # it, once that key is known (None: not known yet); none (0) once the hit
        # is `most`.
        ahead = None
        while True:
            if left:
                if hit:
                    # The best is one of `lead`, visited lightest first: every one
                    # left loses a tie with it, and counts only if it may find more
                    # (below). If none may, the rest of `lead` is passed at once.
                    # Speed: the replicas sent the deepest hash id are often those
                    # sent the conversations' shared opening, 16.6 an arrival on the
                    # first 2,000 Mooncake requests over 64 replicas; each was
                    # listed, sorted and visited to be passed over. 64 replicas on
                    # those requests took 0.9911x the instructions with the pass
                    # (7.2323e9 -> 7.1682e9, callgrind), 0.9890x with the listing
                    # only when needed (7.1525e9); the same look-ups and questions.
                    if ahead is None and keys.known > hit:
                        ahead = may_hold(keys, hit)
                    if ahead is not None and not left & maybe & ahead:
                        left = 0
                        continue
                if not led:
                    i = _lightest_of(left, loads)
                else:
                    if led == 1:
                        lead = _bits_of(left)
                        if len(lead) > 1:
                            lead.sort(key=loads.__getitem__)
                    i = lead[led - 1]
                led += 1
                left ^= 1 << i
                if hit and not (maybe >> i) & 1:
                    continue  # finds fewer
            else:
                # The next of `rest` in index order that may hold the best hit's last
                # key (the others find fewer); those passed are dropped.
                # Speed: the masks' bits were listed (`_bits_of`, about 25 replicas an
                # arrival on the Mooncake trace over 64) and each passed one by one;
                # after the first hit only a few remain in `maybe`. With the fleet
                # loop's step (`Fleet._step`), 64 prefix-affinity replicas on the
                # first 2,000 Mooncake requests took 0.996x the instructions
                # (8.2642e9 -> 8.2301e9, callgrind).
                pending = rest & maybe
                if not pending:
                    break
                low = pending & -pending
                i = low.bit_length() - 1
                rest &= ~((low << 1) - 1)
            replica = replicas[i]
            if hit:
                # (it loses a tie with the best so far: no lighter, and a higher
                # index if as light)
                loses = loads[i] > loads[best] or (loads[i] == loads[best] and i > best)
                if loses:  # it needs more blocks to win
                    if ahead is None and may_hold is not None and keys.known > hit:
                        ahead = may_hold(keys, hit)
                    if ahead is not None and not (ahead >> i) & 1:
                        # Finds at most as many, and loses the tie (the key after
                        # the hit is known: asked, its `ensure` would add nothing).
                        continue
                if not replica.holds(key_at(hit - 1)):
                    continue  # finds fewer
                if loses:
                    ensure(hit + 1, False)
                    if not replica.holds(key_at(hit)):
                        continue  # finds at most as many, and loses the tie
            elif not replica.holds(key_at(0)):
                continue  # finds none
            found = replica.cached_blocks(keys, most)
            # (a tie needs a hit: then `loses` was set for this replica above)
            if found > hit or (found and found == hit and not loses):
                if found != hit:
                    if may_hold is not None:
                        maybe = may_hold(keys, found - 1)
                    ahead = 0 if found == most else None
                hit, best = found, i
        return hit, best


def _lightest_of(mask: int, loads: list[int]) -> int:
    """The replica of `mask` (not 0) with the least load, the lowest index on a tie."""
    floor = min(loads)  # (none is lighter: the walk stops at one this light)
    best = light = -1
    while mask:
        low = mask & -mask
        i = low.bit_length() - 1
        load = loads[i]
        if best < 0 or load < light:
            best, light = i, load
            if load <= floor:
                break
        mask ^= low
    return best


def _bits_of(mask: int) -> list[int]:
    """The replicas whose bit is set in `mask` (a finite mask), in increasing order."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


class PowerOfTwo(Router):
    name = "power-of-two"

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.rng = random.Random(options.seed)

    def choose(self, spec: RequestSpec, replicas: list, loads: list[int] | None = None) -> int:
        n = len(replicas)
        if n == 1:
            return 0
        a, b = self.rng.sample(range(n), 2)
        return b if _load(replicas[b]) < _load(replicas[a]) else a


ROUTERS: dict[str, type[Router]] = {
    cls.name: cls for cls in (RoundRobin, LeastLoaded, PrefixAffinity, PowerOfTwo)
}


def make_router(options: Options) -> Router:
    """The router the options name."""
    return ROUTERS[options.router](options)
