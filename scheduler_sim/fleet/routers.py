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

    def choose(self, spec: RequestSpec, replicas: list) -> int:
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

    def choose(self, spec: RequestSpec, replicas: list) -> int:
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

    def choose(self, spec: RequestSpec, replicas: list) -> int:
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

    def choose(self, spec: RequestSpec, replicas: list) -> int:
        o = self.options
        loads = [_load(r) for r in replicas]
        lightest = min(range(len(replicas)), key=loads.__getitem__)
        # The last prompt token is always computed, so at most this many blocks hit.
        most = (spec.prompt_tokens - 1) // o.block_size
        if not o.prefix_caching or most <= 0:
            return lightest
        keys = BlockKeys(spec.index, spec.prompt_tokens, o.block_size, o.hash_block_size,
                         spec.prompt_token_ids, spec.output_token_ids, spec.block_hashes)
        hit, best = self.longest_hit(keys, most, replicas, loads)
        if (not hit or hit < o.affinity_threshold * most
                or loads[best] - loads[lightest] > o.affinity_slack):
            return lightest
        return best

    @staticmethod
    def longest_hit(keys: BlockKeys, most: int, replicas: list,
                    loads: list[int]) -> tuple[int, int]:
        """(the most leading blocks of `keys` any replica's cache would hand out now, at
        most `most`; the least loaded replica of those holding that many, the lowest
        index on a tie); (0, 0) when none holds any.

        Speed: a replica's look-up walks its cache key by key, so a replica is looked
        up only if it may change the answer: if it has a block keyed like the one
        after the best hit so far (it may find more), or, when it has the key of
        that hit's last block (it may find as many), if it is less loaded than the
        best so far (it would win the tie). A look-up stops at the first key
        missing, so the others find fewer, or as many and lose the tie. On the
        Mooncake trace over 64 replicas an arrival looked up all 64 caches, of
        which about 25 hold its first blocks (an opening most conversations share)
        and about 19 tie on them."""
        hit, best = 0, 0
        ensure = keys.ensure
        for i, replica in enumerate(replicas):
            if hit:
                if not replica.holds(keys.keys[hit - 1]):
                    continue  # finds fewer
                if ((hit == most or not replica.holds(ensure(hit + 1)[hit]))
                        and loads[i] >= loads[best]):
                    continue  # finds at most as many, and loses the tie
            elif not replica.holds(ensure(1)[0]):
                continue  # finds none
            found = replica.cached_blocks(keys, most)
            if found > hit or (found == hit and found and loads[i] < loads[best]):
                hit, best = found, i
        return hit, best


class PowerOfTwo(Router):
    name = "power-of-two"

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.rng = random.Random(options.seed)

    def choose(self, spec: RequestSpec, replicas: list) -> int:
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
