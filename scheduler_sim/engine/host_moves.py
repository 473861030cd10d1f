"""Host memory in the engine: its setup, write-through stores, swap preemption and
the end of a swapped request (issue 25; README "Host memory", spec §15).

`HostMoves` is the part of `Engine` (core.py) that moves KV from a replica's GPU
pool to its host memory (`kv/host_memory.py`); the loads back are
`host_loads.py`'s, the summary's fields `host_summary.py`'s. It adds no state
of its own: the `HostMemory` hangs on the allocator, which notes the keys it
gives (write-through).

1. **Stores** (H2). With `host_write through` and prefix caching, the full
   prompt blocks that got keys while a dispatch was planned and started are
   copied to host memory in one copy issued when that dispatch ends, and a
   request's full blocks that hold outputs when it finishes or is preempted
   (`_store_decoded`); they can be found there once it lands (a boundary,
   `Agenda.peek`). A store never delays a dispatch or a release.
2. **Swap** (H4). With `preemption_mode swap` a victim's resident rows are
   copied to host memory (its GPU blocks are free at once, as in vLLM v0, which
   copies them out before the step's forward pass writes) if host memory has
   room for its blocks besides other swapped victims (cached blocks are evicted
   for it); otherwise it is recomputed (`swap_refused`). At its next admission
   its rows past its GPU hit are copied back as a load (host_loads.py).
3. **Survival** (H5) is counted where loads are decided, at each admission of
   a preempted request (`HostMemory.resumed`).
"""
from __future__ import annotations

from ..gpu.costmodel import CostModel
from ..kv.allocator import blocks_for
from ..kv.host_link import OUT, HostLink
from ..kv.host_memory import HostMemory
from ..kv.host_tier import HostTier
from ..records.clock import Clock
from ..records.events import KvStored, SwappedOut, SwapRefused
from ..records.options import Options
from ..requests.request import PARKING, RemoteKv, Request
from .host_summary import host_summary, survival_counts

__all__ = ["HostMoves", "host_memory_for"]

GIB = 2 ** 30


def host_memory_for(options: Options, cost: CostModel | None, clock: Clock) -> HostMemory:
    """The host memory `options` ask for: `host_kv_gib` of blocks of the model's KV
    (all GPUs of the replica), and a link of `host_link_gb_per_s` (default: the
    GPU's) each way, one GPU's shard of a block per GPU, plus the copy latency."""
    size = options.block_size
    if cost is None:  # (only `preemption_mode` asked for: nothing is ever copied)
        return HostMemory(HostTier(0), None, False, False, 0)
    block_bytes = int(cost.model.kv_bytes_per_token * size)
    capacity = int(options.host_kv_gib * GIB // block_bytes)
    per_gpu = cost.model.kv_bytes_per_token_per_gpu(cost.tp) * size
    speed = (options.host_link_gb_per_s * 1e9 if options.host_link_gb_per_s is not None
             else cost.gpu.host_link)
    link = HostLink(clock.steps(per_gpu / speed),
                    clock.steps(options.host_copy_latency_us * 1e-6))
    return HostMemory(HostTier(capacity), link,
                      capacity > 0 and options.prefix_caching
                      and options.host_write == "through",
                      options.preemption_mode == "swap", block_bytes)


class HostMoves:
    """Copies between the GPU pool and host memory (mixed into `Engine`)."""

    def attach_host(self, cost: CostModel | None, fast_forward: bool) -> bool:
        """Give the allocator the host memory the options ask for; return whether
        steady stretches may be folded (as without it: a folded stretch of decodes
        copies nothing, and stops where a store lands, `Agenda.peek`)."""
        self.allocator.host = host_memory_for(self.options, cost, self.clock)
        return fast_forward

    def survival(self) -> list[tuple[float, int]]:
        """(surviving fraction, resumes) pairs of this run (H5; none without host
        memory), for the report's chart."""
        host = self.allocator.host
        return survival_counts([host]) if host is not None else []

    def host_fields(self, first: int) -> dict:
        """The summary's host-memory fields for a run whose first arrival was `first`."""
        return host_summary([self.allocator.host], self.clock, self.stats.makespan - first)

    # --- stores -------------------------------------------------------------------

    def _issue_stores(self, end: float, keys: list | None = None) -> None:
        """Write through the blocks the dispatch ending at exact step `end` keyed (or
        the blocks of `keys`)."""
        blocks, done = self.allocator.host.issue_stores(end, self.clock.end_step, keys)
        if blocks and self._emit is not None:
            self._emit(KvStored(self.now, blocks, done))

    def _store_decoded(self, req: Request, end: float) -> None:
        """`req` ends or is preempted: its keyed full blocks not yet written through
        (those holding outputs) are copied now (from exact step `end`). (vLLM writes
        each as it fills; here they wait for this moment, so that a folded stretch
        of decodes copies nothing: README "Host memory".)"""
        fresh = req.block_keys.unwritten()
        if fresh:
            self._issue_stores(end, fresh)

    def _give_up_swap(self, rid: str) -> None:
        """`rid`'s swapped KV will not be copied back: host memory lets it go."""
        self.allocator.host.tier.release_swap(rid)

    def _host_preempt(self, req: Request) -> tuple[int, SwappedOut | None]:
        """`req` is being preempted: a load it was parked for in this step is called
        off; otherwise, under swap, its rows are swapped out (`_swap_out`). Returns
        how long its blocks drain and the swap's record, if any."""
        host = self.allocator.host
        if host.write_through and req.block_keys is not None:
            self._store_decoded(req, self.now)
        if req.remote == PARKING and self.link.hooks is None:
            self.link.parking.remove(req)
            host.parking.pop(req.rid)
            req.remote = RemoteKv.NONE
        elif host.swap:
            return self._swap_out(req)
        return self.release_delay, None

    # --- swap preemption --------------------------------------------------------------

    def _swap_out(self, req: Request) -> tuple[int, SwappedOut | None]:
        """Copy preempted `req`'s resident rows to host memory if there is room; return
        how long its GPU blocks must drain (at least `release_delay`) and the record
        of the copy (None: refused, or nothing to copy)."""
        host = self.allocator.host
        rows = req.resident
        delay = self.release_delay
        if not rows:
            return delay, None
        blocks = blocks_for(rows, self.options.block_size)
        tier = host.tier
        now = self.now
        if blocks > tier.capacity - tier.swap_blocks:
            host.swap_refused += 1
            if self._emit is not None:
                self._emit(SwapRefused(now, req.rid, blocks, tier.capacity - tier.swap_blocks))
            return delay, None
        done = self.clock.end_step(host.link.copy(OUT, now, blocks), now)
        tier.reserve_swap(req.rid, blocks, done, rows)
        host.swap_outs += 1
        # Its GPU blocks are free at once: vLLM v0 copies a step's swap-outs before
        # its forward pass writes any block, so that step may already reuse them.
        return delay, SwappedOut(now, req.rid, rows, blocks, done)

    def _host_ended(self, req: Request) -> None:
        """`req` ended: swapped KV it still had in host memory is let go."""
        if req.rid in self.allocator.host.tier.swapped:
            self._give_up_swap(req.rid)
