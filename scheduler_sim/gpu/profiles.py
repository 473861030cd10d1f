"""Measured GPU kernel times (Vidur's profile CSVs), and the cost model's kernels against them.

Vidur (microsoft/vidur) profiles one transformer layer's kernels on a GPU
and writes each kernel's median time in milliseconds, one row per shape:

- `mlp.csv`: by `num_tokens` and `num_tensor_parallel_workers`, the linear
  layers (`attn_pre_proj`, `attn_post_proj`, `mlp_up_proj`,
  `mlp_down_proj`) and the small ones (`input_layernorm`, `attn_rope`,
  `post_attention_layernorm`, `mlp_act`, `add`); the architecture in
  `n_embd`, `n_head`, `n_kv_head`, `n_expanded_embd`.
- `attention.csv`: by `is_prefill`, `batch_size`, `prefill_chunk_size` and
  `kv_cache_size` (context before), `attn_prefill` or `attn_decode`.

`read_profile(path, text, model)` turns either into `KernelPoint`s (the
kind is told by the header), checking every row against the model (a
profile of another architecture is refused, naming the line). Only the
columns named here are read; the `time_stats.NAME.median` columns are the
measurements.

`predict(cost, point)` is the cost model's time for the same kernels, per
layer: a `linear` point is the linear term plus the elementwise term and
the layer floor; a `prefill` point is prefill attention plus its floor; a
`decode` point is decode attention plus its floor (the KV write is left
out on both sides: Vidur's `attn_kv_cache_save` for prefill implies about
7 GB/s, an artefact of its profiler).
"""
from __future__ import annotations

import csv
import dataclasses
import io
import math

from ..records.errors import TraceError
from ..records.option_values import show

__all__ = ["KernelPoint", "read_profile", "predict", "LINEAR_KERNELS", "SMALL_KERNELS",
           "MAX_PROFILE_BYTES"]

LINEAR_KERNELS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
SMALL_KERNELS = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
MAX_PROFILE_BYTES = 64 * 2 ** 20
MAX_ROWS = 200_000


@dataclasses.dataclass(frozen=True)
class KernelPoint:
    """One measured shape: `kind` is linear, prefill or decode; `tokens` the dispatch's
    tokens (linear), the chunk (prefill) or the rows (decode); `context` the context
    before each (attention); `seconds` the measured time per layer; `where` its line."""

    kind: str
    tokens: int
    context: int
    tp: int
    seconds: float
    where: str


def _median(row: dict, name: str) -> float | None:
    text = row.get(f"time_stats.{name}.median")
    if text is None or text.strip() == "":
        return None
    try:
        return float(text)
    except ValueError:  # (Python's own words before: "could not convert string to float")
        raise ValueError(f"time_stats.{name}.median must be a number > 0, got {show(text)}"
                         ) from None


def _int(row: dict, name: str) -> int:
    text = row.get(name)
    if text is None:
        raise ValueError(f"column {name!r} is missing")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    # (Finite first: int(inf) is an OverflowError, which escaped as a traceback.)
    if not math.isfinite(value) or value != int(value):
        raise ValueError(f"column {name!r} must be an integer, got {show(text)}")
    return int(value)


def read_profile(path: str, text: str, model) -> list[KernelPoint]:
    """The kernel points of one Vidur profile CSV (`text`, read from `path`) for
    `model`; TraceError listing every bad row (at most 50) otherwise."""
    if len(text) > MAX_PROFILE_BYTES:
        raise TraceError([f"{path}: a profile is at most {MAX_PROFILE_BYTES // 2**20} MiB, "
                          f"got {len(text):,} characters"])
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    if "num_tokens" in header:
        kind = "linear"
        needed = ("num_tokens", "num_tensor_parallel_workers", "n_embd", "n_head", "n_kv_head",
                  *(f"time_stats.{k}.median" for k in LINEAR_KERNELS + SMALL_KERNELS))
    elif "is_prefill" in header:
        kind = "attention"
        needed = ("is_prefill", "batch_size", "prefill_chunk_size", "kv_cache_size",
                  "num_tensor_parallel_workers", "n_embd", "n_q_head", "n_kv_head")
    else:
        raise TraceError([f"{path}:1: not a Vidur profile: the header has neither "
                          f"'num_tokens' (mlp.csv) nor 'is_prefill' (attention.csv), got "
                          f"{', '.join(header[:6]) or 'nothing'}"])
    missing = [name for name in needed if name not in header]
    if missing:
        raise TraceError([f"{path}:1: column {name!r} is missing" for name in missing])
    points: list[KernelPoint] = []
    problems: list[str] = []
    for number, row in enumerate(reader, start=2):
        if number > MAX_ROWS:
            problems.append(f"{path}:{number}: a profile has at most {MAX_ROWS:,} rows")
            break
        where = f"{path}:{number}"
        try:
            points.extend(_row_points(kind, row, model, where))
        except (ValueError, TypeError) as exc:
            problems.append(f"{where}: {exc}")
        if len(problems) >= 50:
            problems.append(f"{path}: stopped after 50 problems")
            break
    if problems:
        raise TraceError(problems)
    if not points:
        raise TraceError([f"{path}: no measurement for {model.name} in this profile"])
    return points


def _check_shape(row: dict, model, heads_column: str) -> None:
    for column, want in (("n_embd", model.d_model), (heads_column, model.heads),
                         ("n_kv_head", model.kv_heads)):
        got = _int(row, column)
        if got != want:
            raise ValueError(f"{column} is {got}, but {model.name} has {want}: a profile "
                             f"of another model")


def _positive(value: float | None, name: str) -> float:
    if value is None or not math.isfinite(value) or value <= 0:
        raise ValueError(f"time_stats.{name}.median must be a number > 0, got {value!r}")
    return value


def _row_points(kind: str, row: dict, model, where: str) -> list[KernelPoint]:
    tp = _int(row, "num_tensor_parallel_workers")
    if not 1 <= tp <= 64:
        raise ValueError(f"num_tensor_parallel_workers must be from 1 to 64, got {tp}")
    if kind == "linear":
        _check_shape(row, model, "n_head")
        tokens = _int(row, "num_tokens")
        if not 1 <= tokens <= 10 ** 7:
            raise ValueError(f"num_tokens must be from 1 to 10,000,000, got {tokens}")
        ms = sum(_positive(_median(row, k), k) for k in LINEAR_KERNELS + SMALL_KERNELS)
        return [KernelPoint("linear", tokens, 0, tp, ms / 1e3, where)]
    _check_shape(row, model, "n_q_head")
    prefill = (row["is_prefill"] or "").strip().lower()  # (None: the row is short)
    if prefill not in ("true", "false"):
        raise ValueError(f"is_prefill must be True or False, got {row['is_prefill']!r}")
    context = _int(row, "kv_cache_size")
    if not 0 <= context <= 10 ** 7:
        raise ValueError(f"kv_cache_size must be from 0 to 10,000,000, got {context}")
    if prefill == "true":
        if _int(row, "batch_size") != 1:
            return []  # batched prefill rows: not a shape the model prices alone
        chunk = _int(row, "prefill_chunk_size")
        if not 1 <= chunk <= 10 ** 7:
            raise ValueError(f"prefill_chunk_size must be from 1 to 10,000,000, got {chunk}")
        ms = _positive(_median(row, "attn_prefill"), "attn_prefill")
        return [KernelPoint("prefill", chunk, context, tp, ms / 1e3, where)]
    rows = _int(row, "batch_size")
    if not 1 <= rows <= 10 ** 6:
        raise ValueError(f"batch_size must be from 1 to 1,000,000, got {rows}")
    ms = _positive(_median(row, "attn_decode"), "attn_decode")
    return [KernelPoint("decode", rows, context, tp, ms / 1e3, where)]


def predict(cost, point: KernelPoint) -> float:
    """The cost model's seconds per layer for the kernels `point` measured (`cost` is a
    CostModel for the point's tp)."""
    layers = cost.model.layers
    if point.kind == "linear":
        return (cost.linear_seconds(point.tokens) + cost.elementwise_seconds(point.tokens)
                + cost.layer_floor_seconds()) / layers
    if point.kind == "prefill":
        return cost.prefill_attention_seconds(point.tokens, point.context) / layers
    return cost.decode_attention_seconds(point.tokens, point.tokens * point.context) / layers
