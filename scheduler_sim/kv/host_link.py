"""The link between a replica's GPU and its host memory, and the copies on it (issue 25).

Copies go one way or the other: OUT (GPU to host: write-through stores of
full blocks, swap-outs) and IN (host to GPU: loads of cached blocks, swap-ins).
Each direction runs one copy at a time, in the order they were issued (a
PCIe or C2C link is full duplex; vLLM's offloading handler and SGLang's
cache controller each copy on their own stream per direction); a copy
issued while its direction is busy starts when the one before it ends. A
copy of b blocks lasts `latency + b x per_block`, both in clock steps
(the engine converts them from the cost model: per_block is a block's bytes
on one GPU over the link's bytes per second; with tensor parallelism every
GPU copies its own shard over its own link at the same time).

`HostLink` knows steps and block counts only; `copy` returns the exact
(fractional) step a copy ends at, which the engine rounds up as it rounds a
dispatch's end. It also counts what each direction moved and how long it
was busy (the utilisation in the summary).
"""
from __future__ import annotations

__all__ = ["HostLink", "OUT", "IN"]

OUT = 0  # GPU -> host
IN = 1   # host -> GPU


class HostLink:
    """One replica's GPU-host link: a queue of copies per direction."""

    __slots__ = ("per_block", "latency", "free_at", "blocks", "copies", "busy")

    def __init__(self, per_block: float, latency: float) -> None:
        self.per_block = per_block  # steps one block's copy occupies the link
        self.latency = latency      # steps every copy adds (its setup)
        self.free_at = [0.0, 0.0]   # per direction: when its last copy ends
        self.blocks = [0, 0]
        self.copies = [0, 0]
        self.busy = [0.0, 0.0]      # steps each direction spent copying

    def copy(self, direction: int, now: float, blocks: int) -> float:
        """Issue a copy of `blocks` blocks at `now`: it starts when its direction is
        free and returns the exact step it ends."""
        start = self.free_at[direction]
        if start < now:
            start = now
        duration = self.latency + blocks * self.per_block
        end = start + duration
        self.free_at[direction] = end
        self.blocks[direction] += blocks
        self.copies[direction] += 1
        self.busy[direction] += duration
        return end
