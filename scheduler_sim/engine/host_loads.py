"""Loads from host memory into the GPU, as each engine makes a request wait for them
(issue 25; README "Host memory", spec §15 H3).

`HostLoads` is the part of `Engine` (core.py) that finds what host memory
holds for a request (`host_rows`, the SchedulerView's), takes GPU blocks for
it and issues the copy: for `vllm` the request waits outside the policy
(`load`), for `sglang` the rows come with the batch it joins and that
dispatch ends no earlier than the copy (`_host_admit`,
`_wait_for_batch_loads`), and for a policy that does not ask, the engine
parks the request once the step is planned (`fleet_link.park`,
`start_host_load`). Loads that wait land at a boundary (`land_loads`). It
adds no state of its own: the `HostMemory` hangs on the allocator.
"""
from __future__ import annotations

from ..kv.allocator import blocks_for
from ..kv.host_link import IN
from ..kv.host_memory import Load
from ..records.errors import InvariantError
from ..records.events import KvLoadDone, KvLoadStarted
from ..records.states import RequestStatus
from ..requests.request import LOADED, LOADING, PARKING, Request

__all__ = ["HostLoads"]


class HostLoads:
    """Copies from host memory into the GPU (mixed into `Engine`)."""

    def host_rows(self, req: Request, cached: list[int]) -> int:
        """The rows after the `cached` GPU hit that host memory could copy into the GPU
        for `req` now (0: none, or no host memory): its swapped rows, or the cached
        blocks findable there, as far as (P + k - 1) // B blocks. Read-only (the
        SchedulerView's: a policy that models its engine's loads asks first)."""
        host = self.allocator.host
        if host is None or req.remote:
            return 0
        found = self._host_find(req, len(cached) * self.options.block_size)
        return found[1] if found is not None else 0

    def _host_find(self, req: Request, hit: int) -> tuple[str, int, list] | None:
        """(source, rows to copy, keys found) of what host memory holds for `req` past
        its `hit` rows, or None."""
        host = self.allocator.host
        swapped = host.tier.swapped.get(req.rid)
        if swapped is not None:
            rows = swapped[2]
            return ("swap", rows - hit, []) if rows > hit else None
        if not host.write_through or req.block_keys is None:
            return None
        size = self.options.block_size
        limit = (req.prompt_tokens + req.outputs - 1) // size
        first = hit // size
        if limit <= first:
            return None
        keys = req.block_keys.ensure(limit)[first:limit]
        n = host.tier.match(keys, self.now)
        return ("cache", n * size, keys[:n]) if n else None

    def _take_load(self, req: Request, hit: int, rows: int = 0) -> tuple[str, int, int] | None:
        """Take GPU blocks for what host memory holds of `req` past its `hit` rows, and
        for at least `rows` rows (all or nothing); return (source, tokens, blocks) of
        the copy to make, or None (nothing found, or no blocks: a swapped request
        then gives its host copy up and recomputes)."""
        host = self.allocator.host
        found = self._host_find(req, hit)
        taken = None
        if found is not None:
            source, tokens, keys = found
            if self.allocator.try_grow(req.rid, max(hit + tokens, rows)):
                host.tier.touch(keys)
                taken = source, tokens, blocks_for(hit + tokens, self.options.block_size) - (
                    hit // self.options.block_size)
            elif source == "swap":
                self._give_up_swap(req.rid)
        elif req.rid in host.tier.swapped:
            self._give_up_swap(req.rid)  # the GPU hit covers its swapped rows
        return taken

    def _host_admit(self, req: Request, hit: int, resumed: bool, loaded: int) -> None:
        """`req` was just admitted with `hit` rows found in the GPU cache: count a
        resumed request's survival, and copy in what host memory holds of the rest
        as the policy meets it (`Policy.host_loads`): with the batch (`loaded`
        rows), or, for a policy that does not ask, once the step is planned while
        the request waits off the batch (`fleet_link.park`)."""
        host = self.allocator.host
        how = self.policy.host_loads
        taken = None
        if how is None or (how == "batch" and loaded):
            taken = self._take_load(req, hit)
        elif req.rid in host.tier.swapped:
            # Admitted without a load (its GPU hit covers its swapped rows, or what is
            # left is under SGLang's threshold): it recomputes, its host copy goes (H4).
            self._give_up_swap(req.rid)
        if resumed:  # the rows it had written before, found again or not
            host.resumed(min(req.restore, req.high_water), hit, taken[1] if taken else 0)
        if taken is None:
            return
        source, tokens, blocks = taken
        if how is None:
            host.parking[req.rid] = (source, blocks, tokens, hit + tokens)
            req.remote = PARKING
            self.link.parking.append(req)
            return
        # With the batch: resident now; the dispatch ends once the copy has landed.
        req.record_loaded(tokens)
        if req.block_keys is not None:
            self.allocator.register_full_blocks(req.rid, req.block_keys, hit + tokens)
        exact = self._start_copy_in(req, source, blocks, tokens, hit + tokens, False)
        if source == "swap":
            self._give_up_swap(req.rid)
        if host.batch_until is None or exact > host.batch_until:
            host.batch_until = exact

    def load(self, req: Request, cached: list[int], rows: int = 0) -> None:
        """vLLM's way with a hit in host memory (the SchedulerView's; `host_rows` said
        there is one, the policy checked the blocks and took `req` out of its queue):
        the waiting `req` takes its GPU hit and blocks for the rows to load and up
        to `rows` rows, and waits, outside the policy, in `waiting_for_remote_kv`
        while they are copied in; when they land it waits again (`land_loads`)."""
        resumed = req.status == RequestStatus.PREEMPTED
        req.wait_for_remote_kv()
        hit = 0
        if cached:
            self.allocator.share(req.rid, cached, req.block_keys)
            hit = len(cached) * self.options.block_size
            req.record_cached(hit)
        if req.block_keys is not None:
            req.block_keys.registered = len(cached)
        taken = self._take_load(req, hit, rows)
        if taken is None:
            raise InvariantError(f"request {req.rid!r}: a load from host memory found no "
                                 "blocks the policy had checked", self.now)
        if resumed:
            self.allocator.host.resumed(min(req.restore, req.high_water), hit, taken[1])
        source, tokens, blocks = taken
        req.remote = LOADING
        self.steadiness.moved = True
        self.steadiness.changed()
        self._start_copy_in(req, source, blocks, tokens, hit + tokens)

    def start_host_load(self, req: Request) -> None:
        """A request parked by `_host_admit` starts its copy into the GPU now."""
        source, blocks, tokens, rows = self.allocator.host.parking.pop(req.rid)
        self._start_copy_in(req, source, blocks, tokens, rows)

    def _start_copy_in(self, req: Request, source: str, blocks: int, tokens: int,
                       rows: int, lands: bool = True) -> float:
        """Issue the copy of `blocks` blocks (`tokens` rows) into the GPU for `req`, now
        (for its own swapped KV, not before its swap-out lands); with `lands` it
        lands later with `rows` rows resident (else it goes with the batch: counted
        when the batch starts). Returns its exact end."""
        host = self.allocator.host
        now = self.now
        start = now
        if source == "swap":
            start = max(now, host.tier.swapped[req.rid][1])
        exact = host.link.copy(IN, start, blocks)
        done = self.clock.end_step(exact, now)
        load = Load(req.rid, source, blocks, tokens, rows, now, done)
        if lands:
            host.start_load(load)
        else:
            host.in_batch.append(load)
        if self._emit is not None:
            self._emit(KvLoadStarted(now, req.rid, source, rows - tokens, tokens, blocks, done))
        return exact

    def _wait_for_batch_loads(self, done: int, exact: float) -> tuple[int, float]:
        """A dispatch computing until `exact` (step `done`) whose batch loads rows from
        host memory ends once they have landed (SGLang's layer-by-layer load: the
        forward pass waits for the copy); each such load counts as having waited
        the steps the dispatch was stretched."""
        host = self.allocator.host
        until, host.batch_until = host.batch_until, None
        if until > exact:
            exact = until
            stretched = self.clock.end_step(exact, self.now) - done
            done += stretched
        else:
            stretched = 0
        for load in host.in_batch:
            host.count_load(load, stretched)
        host.in_batch = []
        return done, exact

    def land_loads(self) -> None:
        """The loads landing now: each request waits again with its rows resident
        (or, if it ended meanwhile, the copy is dropped)."""
        host = self.allocator.host
        now = self.now
        for load in host.landed(now):
            req = self.roster.requests.get(load.rid)
            aborted = req is None or req.status.is_finished
            if aborted:
                host.loads_aborted += 1
            else:
                self.allocator.release_credit(req.rid)
                # A resumed request waits as one again (its next admission says so).
                req.load_remote_kv(load.rows, resumed=req.preemptions > 0)
                if load.source == "swap":
                    self._give_up_swap(req.rid)  # copied back: its host blocks are free
                if req.block_keys is not None:
                    self.allocator.register_full_blocks(req.rid, req.block_keys, load.rows)
                req.remote = LOADED
                self.start_waiting(req)
                self.policy.requeue_landed(req)
                host.count_load(load, now - load.start)
            self.steadiness.changed()
            if self._emit is not None:
                self._emit(KvLoadDone(now, load.rid, load.source, load.tokens,
                                      now - load.start, aborted))
