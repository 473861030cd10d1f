"""A roofline cost model: how long a dispatch takes on a GPU, and swap against recompute.

Model and GPU specs are data (`MODELS`, `GPUS`). For a dispatch, the cost
is the larger of its compute time and its memory time, plus a fixed
per-step overhead (SPEC §9):

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

`swap_vs_recompute` prices a preempted request of S tokens both ways:
recomputing its prefill, or copying its KV to host memory and back over
the host link; and the prefix-survival fraction above which a warm
recompute beats the round trip.
"""
from __future__ import annotations

import dataclasses
import math

__all__ = ["ModelSpec", "GpuSpec", "MODELS", "GPUS", "CostModel", "DispatchShape",
           "DEFAULT_MFU", "DEFAULT_BANDWIDTH_EFFICIENCY", "DEFAULT_STEP_OVERHEAD",
           "swap_vs_recompute", "parse_cost_model", "ticks_for"]


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A dense decoder's architecture numbers (public model cards)."""

    name: str
    parameters: float
    layers: int
    kv_heads: int
    head_dim: int
    d_model: int
    dtype_bytes: int = 2  # bf16

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V one token keeps in the cache, over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> float:
        """Bytes of weights read once per forward pass."""
        return self.parameters * self.dtype_bytes

    def prefill_flops(self, tokens: int, context: int = 0) -> float:
        """FLOPs to prefill `tokens` tokens that follow `context` cached tokens."""
        end = context + tokens
        return (2 * self.parameters * tokens
                + 2 * self.layers * self.d_model * (end * end - context * context))


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    """A GPU's peak numbers (datasheets): dense bf16 FLOP/s, HBM and host-link bytes/s."""

    name: str
    peak_flops: float
    hbm_bandwidth: float
    host_link: float  # one direction


MODELS: dict[str, ModelSpec] = {m.name: m for m in (
    ModelSpec("llama-3-8b", 8.0e9, 32, 8, 128, 4096),
    ModelSpec("llama-3-70b", 70.6e9, 80, 8, 128, 8192),
)}

GPUS: dict[str, GpuSpec] = {g.name: g for g in (
    GpuSpec("a100-80gb", 312e12, 2.039e12, 32e9),   # PCIe Gen4 x16
    GpuSpec("h100-sxm", 989e12, 3.35e12, 64e9),     # PCIe Gen5 x16
    GpuSpec("h200", 989e12, 4.8e12, 64e9),
)}

# 400 of the H100's 989 dense TFLOP/s: a conservative MFU for batched prefill.
DEFAULT_MFU = 400 / 989
DEFAULT_BANDWIDTH_EFFICIENCY = 0.8
DEFAULT_STEP_OVERHEAD = 0.0005  # seconds per dispatch: launch and scheduling


def parse_cost_model(text: str) -> tuple[ModelSpec, GpuSpec]:
    """`llama-3-8b/h100-sxm` -> (model, gpu); ValueError naming the known ones."""
    model_name, _, gpu_name = text.partition("/")
    if model_name not in MODELS or gpu_name not in GPUS:
        raise ValueError(
            f"cost_model must be MODEL/GPU with MODEL in {', '.join(MODELS)} and GPU in "
            f"{', '.join(GPUS)}, got {text!r}")
    return MODELS[model_name], GPUS[gpu_name]


@dataclasses.dataclass
class DispatchShape:
    """What a dispatch computes: prefill chunks (tokens, context before) and decode
    rows (context before each)."""

    chunks: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    decodes: list[int] = dataclasses.field(default_factory=list)


class CostModel:
    """Seconds per dispatch for one model on one GPU."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, mfu: float = DEFAULT_MFU,
                 bandwidth_efficiency: float = DEFAULT_BANDWIDTH_EFFICIENCY,
                 step_overhead: float = DEFAULT_STEP_OVERHEAD) -> None:
        self.model = model
        self.gpu = gpu
        self.flops_per_second = gpu.peak_flops * mfu
        self.bytes_per_second = gpu.hbm_bandwidth * bandwidth_efficiency
        self.step_overhead = step_overhead

    def _seconds(self, chunks: list[tuple[int, int]], rows: int, contexts: int) -> tuple[float, float]:
        """(compute, memory) seconds of chunks plus `rows` decodes whose contexts sum
        to `contexts` (decodes enter only through their count and that sum)."""
        m = self.model
        two_n = 2 * m.parameters
        att = 2 * m.layers * m.d_model
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
        memory = m.weight_bytes + m.kv_bytes_per_token * (read + tokens)
        return flops / self.flops_per_second, memory / self.bytes_per_second

    def compute_seconds(self, shape: DispatchShape) -> float:
        """Time at the achieved FLOP rate."""
        return self._seconds(shape.chunks, len(shape.decodes), sum(shape.decodes))[0]

    def memory_seconds(self, shape: DispatchShape) -> float:
        """Time to stream weights and the KV the dispatch reads and writes."""
        return self._seconds(shape.chunks, len(shape.decodes), sum(shape.decodes))[1]

    def seconds(self, shape: DispatchShape) -> float:
        """Roofline: the slower of compute and memory, plus the step overhead."""
        compute, memory = self._seconds(shape.chunks, len(shape.decodes), sum(shape.decodes))
        return max(compute, memory) + self.step_overhead

    def decode_seconds(self, rows: int, contexts: int) -> float:
        """`seconds` of a dispatch of `rows` decodes whose contexts sum to `contexts`."""
        compute, memory = self._seconds((), rows, contexts)
        return max(compute, memory) + self.step_overhead


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


def ticks_for(seconds: float, tick_seconds: float) -> int:
    """A dispatch lasts max(1, ceil(seconds / tick_seconds)) ticks (SPEC §9)."""
    return max(1, math.ceil(seconds / tick_seconds - 1e-9))
