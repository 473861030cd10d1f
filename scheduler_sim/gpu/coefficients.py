"""The free coefficients of the cost model, their defaults and their sources.

The cost model (costmodel.py) is physics: FLOPs and bytes counted from the
model's architecture, divided by the GPU's datasheet peaks. What physics
does not know is how close to those peaks each kind of kernel gets, and what
fixed costs surround it. Those are the coefficients here, one field each:

| coefficient | what it stands for |
|---|---|
| `gemm_efficiency` | fraction of peak FLOP/s the linear layers reach on many tokens |
| `gemm_bandwidth_efficiency` | fraction of HBM bandwidth they reach reading weights (few tokens) |
| `gemm_sharpness` | p of the p-norm that blends the two regimes: (m^p + c^p)^(1/p) |
| `gemm_half_tokens` | Th: T tokens take the compute time of T + Th (small GEMMs run below peak) |
| `gemm_tile_tokens` | GEMMs compute whole tiles: T + Th rounded up to a multiple of this many tokens |
| `attention_efficiency` | fraction of peak FLOP/s of prefill attention on long chunks |
| `attention_half_tokens` | Ch: a chunk of C tokens runs at C / (C + Ch) of that |
| `kv_read_efficiency` | fraction of HBM bandwidth decode attention reaches reading KV |
| `elementwise_efficiency` | fraction of HBM bandwidth of norms, activation, rotary, residual adds |
| `layer_floor` | seconds per layer of every dispatch: the small kernels at one token |
| `decode_attention_floor` | seconds per layer of decode attention at one row |
| `prefill_attention_floor` | seconds per layer of prefill attention at one short chunk |
| `allreduce_latency` | seconds per all-reduce call with tp > 1 (2 per layer) |
| `interconnect_efficiency` | fraction of the GPU link's bandwidth an all-reduce reaches |
| `step_overhead` | seconds of CPU per dispatch: scheduling, input preparation, sampling |
| `row_overhead` | seconds of CPU per row of a dispatch |
| `request_overhead` | seconds per request outside the GPU step (API server, tokenising, detokenising, streaming): added to TTFT and end-to-end latency, reported apart |

`DEFAULTS` are the uncalibrated physics (`--calibration none`): each value
with its source in `SOURCES`. A calibration file (calibration.py) replaces
any of them with fitted values.
"""
from __future__ import annotations

import dataclasses
import math

from ..records.frozen import Frozen, record

__all__ = ["Coefficients", "DEFAULTS", "SOURCES", "FIELDS", "LIMITS"]


@record  # a frozen dataclass, its methods written once (records/frozen.py)
class Coefficients(Frozen):
    """Every free coefficient of the cost model (see the module's table)."""

    gemm_efficiency: float = 0.75
    gemm_bandwidth_efficiency: float = 0.78
    gemm_sharpness: float = 2.0
    gemm_half_tokens: float = 0.0
    gemm_tile_tokens: float = 1.0
    attention_efficiency: float = 0.5
    attention_half_tokens: float = 0.0
    kv_read_efficiency: float = 0.8
    elementwise_efficiency: float = 0.5
    layer_floor: float = 0.0
    decode_attention_floor: float = 0.0
    prefill_attention_floor: float = 0.0
    allreduce_latency: float = 0.0
    interconnect_efficiency: float = 0.8
    step_overhead: float = 0.0005
    row_overhead: float = 0.0
    request_overhead: float = 0.0

    def replace(self, **changes: float) -> "Coefficients":
        """A copy with `changes` applied."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, float]:
        """Field name -> value, in the table's order."""
        return {name: getattr(self, name) for name in FIELDS}


FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Coefficients))

DEFAULTS = Coefficients()

# Where each default comes from (the uncalibrated physics). "Vidur" is
# microsoft/vidur@7d47513, data/profiling/compute (MIT): measured per-layer
# kernel medians, read by us at the token counts named.
SOURCES: dict[str, str] = {
    "gemm_efficiency": "Vidur's linear-layer profiles at 4k-16k tokens: 229 of 312 TFLOP/s "
                       "(A100, Llama-3-8B), 750-765 of 989 (H100, Llama-2-7B): about 0.75",
    "gemm_bandwidth_efficiency": "Vidur's linear-layer profiles at 1 token: the weights read "
                                 "at 1,580 of 2,039 GB/s (A100), 2,600 of 3,350 (H100): 0.78",
    "gemm_sharpness": "2: halfway between adding compute and memory time (1) and the "
                      "roofline's max (infinity); fitted by calibration",
    "gemm_half_tokens": "0: no small-GEMM penalty until calibrated",
    "gemm_tile_tokens": "1: no rounding until calibrated (cuBLAS tiles are 64 to 256 rows)",
    "attention_efficiency": "FlashAttention-2 reaches about half of an A100's peak on long "
                            "causal sequences (Dao, 2023, figure 4)",
    "attention_half_tokens": "0: no short-chunk penalty until calibrated",
    "kv_read_efficiency": "Vidur's decode-attention profile: 1.64 of 2.04 TB/s reading KV at "
                          "128-256 rows (A100, Llama-3-8B): 0.8",
    "elementwise_efficiency": "Vidur's norm, activation, rotary and add kernels at 16k tokens "
                              "move about half of the A100's HBM bandwidth",
    "layer_floor": "0 until calibrated (Vidur measures about 27 us per layer at 1 token on "
                   "an A100, without CUDA graphs)",
    "decode_attention_floor": "0 until calibrated (Vidur: about 24 us per layer at 1 row)",
    "prefill_attention_floor": "0 until calibrated",
    "allreduce_latency": "0 until calibrated",
    "interconnect_efficiency": "0.8 of the link's one-way bandwidth (a ring all-reduce's "
                               "bus bandwidth in NCCL's tests reaches 75-85%)",
    "step_overhead": "0.5 ms of launch and scheduling per dispatch (the simulator's earlier "
                     "default, kept for the uncalibrated physics)",
    "row_overhead": "0 until calibrated",
    "request_overhead": "0 until calibrated",
}

# (minimum, maximum, exclusive minimum) of each coefficient: fractions in (0, 1],
# the sharpness from 1 (sum) to 64 (nearly max), the rest non-negative and bounded.
LIMITS: dict[str, tuple[float, float, bool]] = {
    "gemm_efficiency": (0.0, 1.0, True),
    "gemm_bandwidth_efficiency": (0.0, 1.0, True),
    "gemm_sharpness": (1.0, 64.0, False),
    "gemm_half_tokens": (0.0, 1e6, False),
    "gemm_tile_tokens": (1.0, 1024.0, False),
    "attention_efficiency": (0.0, 1.0, True),
    "attention_half_tokens": (0.0, 1e6, False),
    "kv_read_efficiency": (0.0, 1.0, True),
    "elementwise_efficiency": (0.0, 1.0, True),
    "layer_floor": (0.0, 1.0, False),
    "decode_attention_floor": (0.0, 1.0, False),
    "prefill_attention_floor": (0.0, 1.0, False),
    "allreduce_latency": (0.0, 1.0, False),
    "interconnect_efficiency": (0.0, 1.0, True),
    "step_overhead": (0.0, 3600.0, False),
    "row_overhead": (0.0, 1.0, False),
    "request_overhead": (0.0, 3600.0, False),
}
assert set(SOURCES) == set(LIMITS) == set(FIELDS)


def problem(name: str, value: object) -> str | None:
    """What is wrong with `value` for coefficient `name`, or None."""
    low, high, exclusive = LIMITS[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    if value < low or value > high or (exclusive and value == low):
        return (f"must be in {'(' if exclusive else '['}{low:g}, {high:g}], got {value!r}")
    return None
