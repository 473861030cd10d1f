"""The KV pool a GPU's memory holds, sized as vLLM sizes it: of each GPU's
memory, `gpu_memory_utilization` is for the engine; the weights and an
activation reserve come off it and the rest holds KV blocks (`size_pool`,
with its arithmetic in `PoolSizing`). `fit_pool` makes a run's `num_blocks`
follow from the GPU when a cost model runs, or checks that a given one fits.
"""
from __future__ import annotations

import dataclasses
import math

from ..records.errors import UsageError
from ..records.frozen import Frozen, record
from ..records.option_table import OPTIONS
from .catalogue import cost_specs
from .gpus import GpuSpec
from .models import ModelSpec

__all__ = ["PoolSizing", "size_pool", "fit_pool", "GIB", "DEFAULT_ACTIVATION_RESERVE"]

GIB = 2 ** 30


# The activation reserve's default lives in the option table (option_table.OPTIONS):
# 3.05 GiB per GPU outside weights and KV, vLLM's memory profile for Llama-3-8B
# on an H100 (vllm-project/vllm#10511: a 1.26 GiB activation peak plus 1.79 GiB
# allocated outside PyTorch). The dispatch coefficients' defaults and sources are
# in coefficients.py.
DEFAULT_ACTIVATION_RESERVE = OPTIONS["activation_reserve"].default


@record  # a frozen dataclass, its methods written once (records/frozen.py)
class PoolSizing(Frozen):
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
        """`KV pool 27,284 blocks of 2 MiB: 0.9 x 79.22 GiB - weights 14.96 GiB - ...`;
        with a `given` pool, how it compares with what the GPU holds."""
        per = "" if self.tp == 1 else f" per GPU (tp {self.tp})"
        arithmetic = (f"{self.utilization:g} x {self.gpu.memory_gib:g} GiB - weights "
                      f"{self.weights / GIB:.2f} GiB - activation reserve "
                      f"{self.reserve / GIB:g} GiB = {self.kv / GIB:.2f} GiB of KV")
        if given is not None:
            return (f"KV pool {given:,} blocks of {self.block_bytes / 2**20:g} MiB{per} as "
                    f"given; the GPU holds up to {self.blocks:,}: {arithmetic}")
        return (f"KV pool {self.blocks:,} blocks of {self.block_bytes / 2**20:g} MiB{per}: "
                f"{arithmetic}")


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
