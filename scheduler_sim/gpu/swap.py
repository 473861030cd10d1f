"""Swap against recompute for a preempted request of S tokens, priced as the
reference figures price it (a prefill at `mfu` x peak FLOP/s, 400 TFLOP/s on
an H100 by default; not the calibrated dispatch time): recomputing its prefill,
or copying its KV to host memory and back over the host link; and the
prefix-survival fraction above which a warm recompute beats the round trip
(`cost --seq`).
"""
from __future__ import annotations

from .gpus import GpuSpec
from .models import ModelSpec

__all__ = ["swap_vs_recompute", "DEFAULT_MFU", "MAX_SEQ"]

DEFAULT_MFU = 400 / 989  # swap_vs_recompute's prefill rate, the reference figures' 400 TFLOP/s
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
