"""A roofline cost model: how long a dispatch takes on a GPU, and swap against recompute.

Model and GPU specs are data (`MODELS`, `GPUS`). For a dispatch, the cost
is the larger of its compute time and its memory time, plus a fixed
per-step overhead (§9):

- FLOPs: each token costs 2 x parameters for the dense layers; attention
  costs 2 x layers x d_model per (query, key) pair, so a prefill chunk of c
  tokens after s tokens of context adds 2 L d ((s + c)^2 - s^2), and a
  decode row at context n adds 2 L d (2n + 1). A whole prefill of S tokens
  thus costs 2 N S + 2 L S^2 d, the reference formula.
- Bytes: the weights once per dispatch, the KV cache each row attends to
  (context x KV bytes per token), and the KV it writes.
- KV bytes per token = 2 (K and V) x layers x KV heads x head dim x dtype bytes.

Compute runs at `mfu` x peak FLOP/s, memory at `bandwidth_efficiency` x
HBM bandwidth. The defaults make an H100 SXM deliver 400 TFLOP/s, the
figure the reference numbers assume.

With tensor parallelism over `tp` GPUs, each GPU holds 1/tp of the
weights and of every token's KV and does 1/tp of the FLOPs, and every
layer adds two all-reduces of the batch's activations (tokens x d_model x
dtype bytes, after attention and after the MLP), each costing a ring's
2 (tp - 1) / tp times its bytes over the GPU interconnect.

`size_pool` derives the KV pool from the GPU as vLLM does: of each GPU's
memory, `gpu_memory_utilization` is for the engine; the weights and an
activation reserve come off it and the rest holds KV blocks.

`swap_vs_recompute` prices a preempted request of S tokens both ways:
recomputing its prefill, or copying its KV to host memory and back over
the host link; and the prefix-survival fraction above which a warm
recompute beats the round trip.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

from ..records.errors import UsageError
from ..records.options import OPTIONS
# The specs moved to their own modules (models.py, gpus.py, catalogue.py); their names
# stay importable from here.
from .catalogue import GPUS, MODELS, cost_specs, parse_cost_model
from .gpus import GpuSpec
from .models import ACTIVATION_BYTES, ModelSpec

__all__ = ["ModelSpec", "GpuSpec", "MODELS", "GPUS", "CostModel", "DispatchShape",
           "DEFAULT_MFU", "DEFAULT_BANDWIDTH_EFFICIENCY", "DEFAULT_STEP_OVERHEAD",
           "swap_vs_recompute", "parse_cost_model", "PoolSizing", "size_pool", "fit_pool", "GIB",
           "DEFAULT_ACTIVATION_RESERVE", "MAX_SEQ"]

GIB = 2 ** 30


# The defaults live in the option table (options.OPTIONS), where their sources
# are given: 400 of an H100's 989 dense TFLOP/s (a conservative MFU for batched
# prefill), 80% of HBM bandwidth, 0.5 ms of launch and scheduling per dispatch,
# and 3.05 GiB per GPU outside weights and KV, vLLM's memory profile for
# Llama-3-8B on an H100 (vllm-project/vllm#10511: a 1.26 GiB activation peak
# plus 1.79 GiB allocated outside PyTorch).
DEFAULT_ACTIVATION_RESERVE = OPTIONS["activation_reserve"].default
DEFAULT_MFU = OPTIONS["mfu"].default
DEFAULT_BANDWIDTH_EFFICIENCY = OPTIONS["bandwidth_efficiency"].default
DEFAULT_STEP_OVERHEAD = OPTIONS["step_overhead"].default


@dataclasses.dataclass
class DispatchShape:
    """What a dispatch computes: prefill chunks (tokens, context before) and decode
    rows (context before each)."""

    chunks: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    decodes: list[int] = dataclasses.field(default_factory=list)


class CostModel:
    """Seconds per dispatch for one model on `tp` GPUs of one kind."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, mfu: float = DEFAULT_MFU,
                 bandwidth_efficiency: float = DEFAULT_BANDWIDTH_EFFICIENCY,
                 step_overhead: float = DEFAULT_STEP_OVERHEAD, tp: int = 1) -> None:
        self.model = model
        self.gpu = gpu
        self.tp = tp
        # FLOPs split evenly across the GPUs; each GPU reads its share of the
        # weights and the KV of its heads (all of them when heads are replicated).
        self.flops_per_second = gpu.peak_flops * mfu * tp
        self.bytes_per_second = gpu.hbm_bandwidth * bandwidth_efficiency
        self.weight_bytes = model.weight_bytes / tp
        self.kv_bytes = model.kv_bytes_per_token_per_gpu(tp)
        self.step_overhead = step_overhead
        # FLOPs per token: 2 x the parameters a token meets (an MoE layer's active
        # experts only; every parameter of a dense model).
        self._two_n = 2 * model.active_parameters
        self._att = 2 * model.layers * model.d_model  # FLOPs per (query, key) pair
        # Seconds of all-reduce per token of the batch: 2 per layer, a ring's
        # 2 (tp - 1) / tp of d_model x dtype bytes each, over the interconnect.
        self.allreduce_per_token = (
            2 * model.layers * 2 * (tp - 1) / tp * model.d_model * ACTIVATION_BYTES
            / gpu.interconnect)

    def _seconds(self, chunks: list[tuple[int, int]], rows: int, contexts: int) -> tuple[float, float]:
        """(compute, memory) seconds of chunks plus `rows` decodes whose contexts sum
        to `contexts` (decodes enter only through their count and that sum)."""
        two_n = self._two_n
        att = self._att
        flops = 0.0
        tokens = rows
        read = contexts
        for chunk, context in chunks:
            end = context + chunk
            flops += two_n * chunk + att * (end * end - context * context)
            tokens += chunk
            read += end
        if rows:
            flops += two_n * rows + att * (2 * contexts + rows)
        memory = self.weight_bytes + self.kv_bytes * (read + tokens)
        return flops / self.flops_per_second, memory / self.bytes_per_second

    def _total(self, compute: float, memory: float, tokens: int) -> float:
        return (max(compute, memory) + self.allreduce_per_token * tokens
                + self.step_overhead)

    def compute_seconds(self, shape: DispatchShape) -> float:
        """Time at the achieved FLOP rate."""
        return self._seconds(shape.chunks, len(shape.decodes), sum(shape.decodes))[0]

    def memory_seconds(self, shape: DispatchShape) -> float:
        """Time to stream weights and the KV the dispatch reads and writes."""
        return self._seconds(shape.chunks, len(shape.decodes), sum(shape.decodes))[1]

    def seconds(self, shape: DispatchShape) -> float:
        """Roofline: the slower of compute and memory, plus the all-reduces (tp > 1)
        and the step overhead."""
        return self.dispatch_seconds(shape.chunks, len(shape.decodes), sum(shape.decodes))

    def dispatch_seconds(self, chunks: list[tuple[int, int]], rows: int,
                         contexts: int) -> float:
        """`seconds` of prefill `chunks` (tokens, context before) and `rows` decodes
        whose contexts sum to `contexts`: what the engine asks per dispatch."""
        if not chunks:
            return self.decode_seconds(rows, contexts)
        compute, memory = self._seconds(chunks, rows, contexts)
        if self.tp == 1:
            return max(compute, memory) + self.step_overhead
        return self._total(compute, memory, rows + sum(chunk for chunk, _ in chunks))

    def decode_seconds(self, rows: int, contexts: int) -> float:
        """`seconds` of a dispatch of `rows` decodes whose contexts sum to `contexts`
        (the same arithmetic as `_seconds`, spelled out: folding calls it per step)."""
        compute = (0.0 + (self._two_n * rows + self._att * (2 * contexts + rows)) if rows
                   else 0.0) / self.flops_per_second
        memory = (self.weight_bytes + self.kv_bytes * (contexts + rows)) / self.bytes_per_second
        if self.tp == 1:
            return (compute if compute > memory else memory) + self.step_overhead
        return self._total(compute, memory, rows)

    def decode_series(self, rows: int, contexts: int) -> Iterator[float]:
        """`decode_seconds(rows, contexts + k * rows)` for k = 0, 1, 2, ...: the
        dispatches of a steady stretch, in which each of `rows` decodes adds one
        row to its context per dispatch (folding draws one value per dispatch;
        the same arithmetic, without a call each)."""
        if not rows or self.tp != 1:
            while True:
                yield self.decode_seconds(rows, contexts)
                contexts += rows
        dense = self._two_n * rows
        att = self._att
        flops = self.flops_per_second
        weights = self.weight_bytes
        kv = self.kv_bytes
        bandwidth = self.bytes_per_second
        overhead = self.step_overhead
        while True:
            compute = (0.0 + (dense + att * (2 * contexts + rows))) / flops
            memory = (weights + kv * (contexts + rows)) / bandwidth
            yield (compute if compute > memory else memory) + overhead
            contexts += rows


# The longest request `swap_vs_recompute` prices: far beyond any context window, and
# small enough that every figure (2 L S^2 d FLOPs, say) stays a finite float.
MAX_SEQ = 10 ** 9


def swap_vs_recompute(model: ModelSpec, gpu: GpuSpec, seq: int,
                      mfu: float = DEFAULT_MFU) -> dict[str, float]:
    """Price a preempted request of `seq` tokens: recompute its prefill, or swap its KV.

    Returns the KV bytes per token and in all, the prefill FLOPs, the cold
    recompute time, the one-way and round-trip swap times, how many times
    cheaper the swap is, the prefill rate at which both cost the same, and
    the fraction of the prefix that must survive in the prefix cache for a
    warm recompute ((1 - f) x cold time) to beat the round trip.
    """
    kv = model.kv_bytes_per_token
    total = kv * seq
    flops = model.prefill_flops(seq)
    cold = flops / (gpu.peak_flops * mfu)
    one_way = total / gpu.host_link
    round_trip = 2 * one_way
    return {
        "kv_bytes_per_token": kv,
        "kv_bytes": total,
        "prefill_flops": flops,
        "recompute_seconds": cold,
        "swap_one_way_seconds": one_way,
        "swap_round_trip_seconds": round_trip,
        "swap_advantage": cold / round_trip,
        "crossover_tokens_per_second": seq / round_trip,
        "survival_threshold": max(0.0, 1 - round_trip / cold),
    }


@dataclasses.dataclass(frozen=True)
class PoolSizing:
    """How the KV pool follows from the GPU, every term in bytes per GPU."""

    model: ModelSpec
    gpu: GpuSpec
    tp: int
    utilization: float
    usable: float        # utilization x memory
    weights: float       # weight bytes (ModelSpec.weight_bytes) / tp
    reserve: float       # activations and memory outside PyTorch
    kv: float            # what is left for KV blocks
    block_bytes: int     # block_size x KV bytes per token per GPU
    blocks: int          # floor(kv / block_bytes)

    def describe(self, given: int | None = None) -> str:
        """`KV pool 27,313 blocks of 2 MiB: 0.9 x 79.22 GiB - weights 14.90 GiB - ...`;
        with a `given` pool, how it compares with what the GPU holds."""
        per = "" if self.tp == 1 else f" per GPU (tp {self.tp})"
        arithmetic = (f"{self.utilization:g} x {self.gpu.memory_gib:g} GiB - weights "
                      f"{self.weights / GIB:.2f} GiB - activation reserve "
                      f"{self.reserve / GIB:g} GiB = {self.kv / GIB:.2f} GiB of KV")
        if given is not None:
            return (f"KV pool {given:,} blocks of {self.block_bytes / 2**20:g} MiB{per} as "
                    f"given; the GPU holds up to {self.blocks:,}: {arithmetic}")
        return f"KV pool {self.blocks:,} blocks of {self.block_bytes / 2**20:g} MiB{per}: {arithmetic}"


def size_pool(model: ModelSpec, gpu: GpuSpec, block_size: int, utilization: float,
              tp: int = 1, reserve_gib: float = DEFAULT_ACTIVATION_RESERVE) -> PoolSizing:
    """The KV pool `utilization` of each GPU's memory leaves after weights and the reserve.

    Raises ValueError with the arithmetic when the weights and the reserve do
    not fit, or when not one block is left.
    """
    usable = utilization * gpu.memory_gib * GIB
    weights = model.weight_bytes / tp
    reserve = reserve_gib * GIB
    kv = usable - weights - reserve
    block_bytes = block_size * model.kv_bytes_per_token_per_gpu(tp)
    blocks = math.floor(kv / block_bytes) if kv > 0 else 0
    if blocks < 1:
        where = "one GPU" if tp == 1 else f"each of {tp} GPUs"
        raise ValueError(
            f"{model.name} does not fit on {gpu.name} at gpu_memory_utilization "
            f"{utilization:g}: weights {weights / GIB:.2f} GiB + activation reserve "
            f"{reserve_gib:g} GiB + one KV block {block_bytes / GIB:.4f} GiB > "
            f"{utilization:g} x {gpu.memory_gib:g} GiB = {usable / GIB:.2f} GiB on {where}"
            + (" (spread it over more GPUs with --tp)" if weights + reserve >= gpu.memory_gib * GIB
               else " (raise --gpu-memory-utilization or spread it with --tp)"))
    return PoolSizing(model, gpu, tp, utilization, usable, weights, reserve, kv, block_bytes,
                      blocks)


def fit_pool(options) -> tuple:
    """With a cost model, make the KV pool follow from the GPU: `(options, sizing)`.

    When `num_blocks` was not given (it is not in `options.origin`), it
    becomes the pool `size_pool` derives, marked `derived`; when it was
    given, it must fit in that pool. Without a cost model nothing changes
    and the sizing is None. Raises UsageError with the arithmetic when the
    model or the pool does not fit.
    """
    specs = cost_specs(options)
    if specs is None:
        return options, None
    model, gpu = specs
    if options.cost_specs is None:  # resolved once: the engines of a run reuse them
        options = dataclasses.replace(options, cost_specs=specs)
    if options.tp > 8:
        raise UsageError(f"tp must be at most 8, the GPUs of one NVLink node (the model has "
                         f"no network between nodes), got {options.tp}")
    if model.kv_heads % options.tp and options.tp % model.kv_heads:
        raise UsageError(f"tp must divide {model.name}'s {model.kv_heads} KV heads or be a "
                         f"multiple of them, got {options.tp}")
    if model.heads % options.tp:
        raise UsageError(f"tp must divide {model.name}'s {model.heads} attention heads, got "
                         f"{options.tp}")
    try:
        sizing = size_pool(model, gpu, options.block_size, options.gpu_memory_utilization,
                           options.tp, options.activation_reserve)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if "num_blocks" not in options.origin:
        origin = dict(options.origin, num_blocks="derived")
        return dataclasses.replace(options, num_blocks=sizing.blocks, origin=origin), sizing
    if options.num_blocks > sizing.blocks:
        raise UsageError(
            f"num_blocks {options.num_blocks:,} does not fit: {model.name} on {gpu.name} "
            f"leaves room for {sizing.blocks:,} blocks of "
            f"{sizing.block_bytes / 2**20:g} MiB per GPU: "
            f"{options.gpu_memory_utilization:g} x {gpu.memory_gib:g} GiB - weights "
            f"{sizing.weights / GIB:.2f} GiB - activation reserve "
            f"{options.activation_reserve:g} GiB = {sizing.kv / GIB:.2f} GiB of KV")
    return options, sizing
