"""Host memory in the engine: write-through stores, loads back into the GPU, swap
preemption, and the survival of resumed requests (issue 25; README "Host memory").

`HostMoves` is the part of `Engine` (core.py) that moves KV between a replica's
GPU pool and its host memory (`kv/host_memory.py`); it adds no state of its
own (the `HostMemory` hangs on the allocator, which notes the keys it gives).
The model, for every policy (vLLM's offloading connector; see the README for
how SGLang's HiCache differs):

1. **Stores.** With `host_write through` and prefix caching, the full blocks
   that got keys while a dispatch was planned and started are copied to host
   memory in one copy issued when that dispatch ends; they can be found there
   once it lands. A store never delays a dispatch or a release.
2. **Loads.** When a policy admits a request (`admit`) and its leading blocks
   after the GPU prefix hit are found in host memory, the request takes GPU
   blocks for them and, once the step is planned, leaves the batch
   (`fleet_link.park`) to wait in state `waiting_for_remote_kv` while they are
   copied in; when the copy lands (`land_loads`, before arrivals at that
   boundary) it waits again with those rows resident and the policy admits it
   a second time, as vLLM re-schedules a request whose KV load finished.
3. **Swap.** With `preemption_mode swap` a victim's resident rows are copied
   to host memory (its GPU blocks are free at once, as in vLLM v0, which
   copies them out before the step's forward pass writes) if host memory
   has room for its blocks besides other swapped victims (cached blocks are
   evicted for it); otherwise it is recomputed (`swap_refused`). At its next
   admission its rows not found in the GPU cache are copied back as a load.
4. **Survival.** At each re-admission of a preempted request the rows it must
   rebuild are split: found in the GPU cache, copied from host memory,
   recomputed (`HostMemory.resumed`).
"""
from __future__ import annotations

from ..gpu.costmodel import CostModel
from ..kv.allocator import blocks_for
from ..kv.host_link import IN, OUT, HostLink
from ..kv.host_memory import HostMemory, Load
from ..kv.host_tier import HostTier
from ..records.clock import Clock
from ..records.events import KvLoadDone, KvLoadStarted, KvStored, SwappedOut, SwapRefused
from ..records.options import Options
from ..requests.request import LOADED, PARKING, RemoteKv, Request
from .summary import nearest_rank

__all__ = ["HostMoves", "host_memory_for", "host_summary", "HOST_RUN_FIELDS"]

GIB = 2 ** 30

# The summary's fields about host memory (only when it is on: `Options.host`).
HOST_RUN_FIELDS = (
    "host_kv_blocks", "host_peak_blocks", "host_stores", "host_stored_blocks",
    "host_evicted_blocks", "host_loads", "host_loaded_tokens", "swap_outs", "swap_ins",
    "swapped_in_tokens", "swap_refused", "loads_aborted", "load_wait_mean", "load_wait_max",
    "link_out_bytes", "link_in_bytes", "link_out_busy", "link_in_busy",
    "link_out_utilisation", "link_in_utilisation", "recompute_avoided_tokens",
    "resumes", "rebuilt_from_gpu", "rebuilt_from_host", "rebuilt_by_recompute",
    "survival_p10", "survival_p50", "survival_p90",
)


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
        steady stretches may still be folded (not with write-through: each block a
        decode fills is stored when its own dispatch ends, which a folded stretch
        would have to time block by block)."""
        host = self.allocator.host = host_memory_for(self.options, cost, self.clock)
        return fast_forward and not host.write_through

    def host_fields(self, first: int) -> dict:
        """The summary's host-memory fields for a run whose first arrival was `first`."""
        return host_summary([self.allocator.host], self.clock, self.stats.makespan - first)

    # --- stores -------------------------------------------------------------------

    def _issue_stores(self, end: float) -> None:
        """Write through the blocks the dispatch ending at exact step `end` keyed."""
        blocks, done = self.allocator.host.issue_stores(end, self.clock.end_step)
        if blocks and self._emit is not None:
            self._emit(KvStored(self.now, blocks, done))

    # --- admission: loads from host memory -------------------------------------------

    def _host_admit(self, req: Request, hit: int, resumed: bool) -> None:
        """`req` was just admitted with `hit` rows found in the GPU cache: copy in what
        host memory holds of the rest (its swapped KV, or cached blocks), and count
        a resumed request's survival."""
        host = self.allocator.host
        size = self.options.block_size
        rows = tokens = 0
        source = None
        swapped = host.swapped_rows.get(req.rid)
        if swapped is not None:
            source = "swap"
            rows = swapped
            tokens = rows - hit
            if tokens <= 0 or not self.allocator.try_grow(req.rid, rows):
                self._give_up_swap(req.rid)  # nothing to copy, or no blocks: recompute
                source, tokens = None, 0
        elif host.write_through and req.block_keys is not None:
            limit = (req.prompt_tokens + req.outputs - 1) // size
            first = hit // size
            if limit > first:
                keys = req.block_keys.ensure(limit)[first:limit]
                n = host.tier.match(keys, self.now)
                if n and self.allocator.try_grow(req.rid, (first + n) * size):
                    host.tier.touch(keys[:n])
                    source, rows, tokens = "cache", (first + n) * size, n * size
        if resumed:  # the rows it had written before, found again or not
            host.resumed(min(req.restore, req.high_water), hit, tokens)
        if source is None:
            return
        blocks = blocks_for(rows, size) - hit // size
        host.parking[req.rid] = (source, blocks, tokens, rows)
        req.remote = PARKING
        self.link.parking.append(req)

    def _give_up_swap(self, rid: str) -> None:
        """`rid`'s swapped KV will not be copied back: host memory lets it go."""
        host = self.allocator.host
        del host.swapped_rows[rid]
        host.tier.release_swap(rid)

    def start_host_load(self, req: Request) -> None:
        """A request parked by `_host_admit` starts its copy into the GPU now (after
        its swap-out landed, for its own swapped KV)."""
        host = self.allocator.host
        source, blocks, tokens, rows = host.parking.pop(req.rid)
        now = self.now
        start = now
        if source == "swap":
            start = max(now, host.tier.swapped[req.rid][1])
        done = self.clock.end_step(host.link.copy(IN, start, blocks), now)
        host.start_load(Load(req.rid, source, blocks, tokens, rows, now, done))
        if self._emit is not None:
            self._emit(KvLoadStarted(now, req.rid, source, tokens, blocks, done))

    def _host_preempt(self, req: Request) -> tuple[int, SwappedOut | None]:
        """`req` is being preempted: a load it was parked for in this step is called
        off; otherwise, under swap, its rows are swapped out (`_swap_out`). Returns
        how long its blocks drain and the swap's record, if any."""
        host = self.allocator.host
        if req.remote == PARKING and self.link.hooks is None:
            self.link.parking.remove(req)
            host.parking.pop(req.rid)
            req.remote = RemoteKv.NONE
        elif host.swap:
            return self._swap_out(req)
        return self.release_delay, None

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
                req.load_remote_kv(load.rows)
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
        tier.reserve_swap(req.rid, blocks, done)
        host.swapped_rows[req.rid] = rows
        host.swap_outs += 1
        host.swap_out_blocks += blocks
        # Its GPU blocks are free at once: vLLM v0 copies a step's swap-outs before
        # its forward pass writes any block, so that step may already reuse them.
        return delay, SwappedOut(now, req.rid, rows, blocks, done)

    def _host_ended(self, req: Request) -> None:
        """`req` ended: swapped KV it still had in host memory is let go."""
        if req.rid in self.allocator.host.swapped_rows:
            self._give_up_swap(req.rid)


def host_summary(hosts: list[HostMemory], clock: Clock, span: int) -> dict:
    """The summary's host-memory fields (`HOST_RUN_FIELDS`) of one replica's host
    memory, or of a fleet's (summed; utilisation is the replicas' mean), times in
    the run's unit; utilisation is a direction's busy time over the run's `span`
    of steps."""
    report = clock.report
    links = [h.link for h in hosts if h.link is not None]

    def total(name: str) -> int:
        return sum(getattr(h, name) for h in hosts)

    loads = total("loads_done") + total("swap_ins")
    waited = total("load_wait")
    survival = sorted(f for h in hosts for f in h.survival)

    def share(p: int) -> float | None:
        value = nearest_rank(survival, p)
        return None if value is None else round(value, 4)

    def busy(direction: int) -> float | None:
        return report(sum(link.busy[direction] for link in links)) if links else None

    def used(direction: int) -> float | None:
        if not links or span <= 0:
            return None
        return round(sum(link.busy[direction] for link in links) / (span * len(links)), 4)

    def moved(direction: int) -> int:
        return sum(h.link.blocks[direction] * h.block_bytes for h in hosts if h.link)

    out = {
        "host_kv_blocks": sum(h.tier.capacity for h in hosts),
        "host_peak_blocks": sum(h.tier.peak_used for h in hosts),
        "host_stores": total("stores"),
        "host_stored_blocks": total("stored_blocks"),
        "host_evicted_blocks": sum(h.tier.evicted for h in hosts),
        "host_loads": total("loads_done"),
        "host_loaded_tokens": total("loaded_tokens"),
        "swap_outs": total("swap_outs"),
        "swap_ins": total("swap_ins"),
        "swapped_in_tokens": total("swapped_in_tokens"),
        "swap_refused": total("swap_refused"),
        "loads_aborted": total("loads_aborted"),
        "load_wait_mean": report(waited / loads) if loads else None,
        "load_wait_max": report(max(h.load_wait_max for h in hosts)) if loads else None,
        "link_out_bytes": moved(OUT),
        "link_in_bytes": moved(IN),
        "link_out_busy": busy(OUT),
        "link_in_busy": busy(IN),
        "link_out_utilisation": used(OUT),
        "link_in_utilisation": used(IN),
        "recompute_avoided_tokens": total("loaded_tokens") + total("swapped_in_tokens"),
        "resumes": total("resumes"),
        "rebuilt_from_gpu": total("rebuild_gpu"),
        "rebuilt_from_host": total("rebuild_host"),
        "rebuilt_by_recompute": total("rebuild_computed"),
        "survival_p10": share(10),
        "survival_p50": share(50),
        "survival_p90": share(90),
    }
    assert tuple(out) == HOST_RUN_FIELDS, "host fields drifted from HOST_RUN_FIELDS"
    return out
