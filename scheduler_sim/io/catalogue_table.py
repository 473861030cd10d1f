"""`scheduler-sim models`: the model and GPU catalogues as aligned tables."""
from __future__ import annotations

from ..gpu.catalogue import ALIASES, CATALOGUE, GPUS, MODELS
from ..gpu.gpus import GpuSpec
from ..gpu.models import ModelSpec

__all__ = ["format_catalogue", "model_row", "gpu_row", "MODEL_COLUMNS", "GPU_COLUMNS"]

MODEL_COLUMNS = ("model", "parameters", "active", "layers", "d", "heads/kv", "experts",
                 "dtype", "KV B/token")
GPU_COLUMNS = ("gpu", "bf16 TFLOP/s", "fp8 TFLOP/s", "HBM TB/s", "memory GiB",
               "interconnect")


def _billions(count: int) -> str:
    return f"{count / 1e9:.2f}B"


def model_row(model: ModelSpec) -> tuple[str, ...]:
    """One model's cells: name, parameters (total, active), layers, d_model, heads and
    KV heads (MLA's latent width instead), experts (routed, per token, shared),
    weight dtype, KV bytes per token."""
    if model.experts:
        experts = f"{model.experts}, top {model.experts_per_token}"
        if model.shared_experts:
            experts += f", +{model.shared_experts} shared"
        if model.moe_layers < model.layers:
            experts += f", {model.moe_layers}/{model.layers} layers"
    else:
        experts = "-"
    heads = (f"{model.heads}/MLA {model.kv_width}" if model.mla is not None
             else f"{model.heads}/{model.kv_heads}")
    weights = "fp8" if model.fp8 else "bf16"
    if model.kv_dtype_bytes != 2:
        weights += f", KV {model.kv_dtype_bytes:g} B"
    return (model.name, _billions(model.parameters),
            _billions(model.active_parameters) if model.experts else "-",
            str(model.layers), f"{model.d_model:,}", heads, experts, weights,
            f"{model.kv_bytes_per_token:,}")


def gpu_row(gpu: GpuSpec) -> tuple[str, ...]:
    """One GPU's cells: name, dense bf16 and fp8 TFLOP/s, HBM TB/s, memory as the CUDA
    runtime reports it, and the GPU-to-GPU link (GB/s one way)."""
    fp8 = "-" if gpu.fp8_flops is None else f"{gpu.fp8_flops / 1e12:,.0f}"
    return (gpu.name, f"{gpu.bf16_flops / 1e12:,.0f}", fp8, f"{gpu.hbm_bandwidth / 1e12:g}",
            f"{gpu.memory_gib:g}", f"{gpu.interconnect_kind} {gpu.interconnect / 1e9:g} GB/s")


def _table(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in (columns, *rows)) for i in range(len(columns))]
    lines = []
    for row in (columns, *rows):
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
    return lines


def format_catalogue() -> str:
    """Both tables, models first, with the aliases and what the columns mean."""
    models = _table(MODEL_COLUMNS, [model_row(MODELS[name]) for name in CATALOGUE])
    gpus = _table(GPU_COLUMNS, [gpu_row(gpu) for gpu in GPUS.values()])
    aliases = ", ".join(f"{alias} = {name}" for alias, name in ALIASES.items())
    lines = ["models (--model NAME, or the path of a config.json)", "", *models, "",
             f"aliases: {aliases}",
             "parameters: all of them, embedding and LM head included; active: those one "
             "token runs through", "",
             "GPUs (--gpu NAME, or the path of a GPU spec .json)", "", *gpus, "",
             "FLOP/s dense; bandwidths one way; memory as the CUDA runtime reports it"]
    return "\n".join(lines) + "\n"
