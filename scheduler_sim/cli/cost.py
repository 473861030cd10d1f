"""`cost` and `models`: the cost model asked directly. `cost --prefill/--decode`
prices one dispatch term by term, `cost --seq` weighs swapping a preempted
request's KV against recomputing it, and `models` lists the model and GPU
catalogues.
"""
from __future__ import annotations

import argparse
from typing import TextIO

from ..gpu.calibration import is_file_spec, resolve_calibration
from ..gpu.costmodel import CostModel
from ..gpu.swap import MAX_SEQ, swap_vs_recompute
from ..io.catalogue_table import format_catalogue
from ..io.generator import limit
from ..io.specs import gpu_spec, model_spec
from ..records.errors import UsageError
from ..records.option_table import OPTIONS
from ..records.option_values import show

__all__ = ["cmd_cost", "cmd_models"]


_MAX_SHAPE = 10 ** 7  # tokens, rows or context of one part of a priced dispatch


def _shape_part(flag: str, text: str, context_needed: bool) -> tuple[int, int]:
    """`N@C` (or `N` when the context may be left out) as (N, C)."""
    head, sep, tail = text.partition("@")
    if context_needed and not sep:
        raise UsageError(f"{flag} must look like ROWS@CONTEXT, got {show(text)}")
    try:
        count, context = int(head), int(tail) if sep else 0
    except ValueError:
        shape = "ROWS@CONTEXT" if context_needed else "TOKENS[@CONTEXT]"
        raise UsageError(f"{flag} must look like {shape} with whole numbers, got "
                         f"{show(text)}") from None
    if not 1 <= count <= _MAX_SHAPE or not 0 <= context <= _MAX_SHAPE:
        raise UsageError(f"{flag}: {'rows' if context_needed else 'tokens'} must be from 1 to "
                         f"{_MAX_SHAPE:,} and the context from 0 to {_MAX_SHAPE:,}, got "
                         f"{show(text)}")
    return count, context


# How `cost --prefill/--decode` explains each term (see CostModel's docstring).
_TERM_NOTES = {
    "linear": "attention projections and MLP: weights read, blended with FLOPs",
    "lm_head": "vocabulary projection of the sampled rows",
    "attention_prefill": "causal attention FLOPs of the chunks",
    "attention_decode": "KV every decode row reads",
    "kv_write": "KV of the new tokens",
    "elementwise": "norms, activation, rotary, residual adds",
    "floors": "per-layer kernel floors",
    "allreduce": "tensor-parallel all-reduces, 2 per layer",
    "step": "CPU per dispatch and per sampled row",
}


def _cost_dispatch(args: argparse.Namespace, out: TextIO) -> int:
    """`cost --prefill ... --decode ...`: one dispatch's seconds, term by term."""
    from ..io.specs import read_calibration_file
    chunks = [_shape_part("--prefill", text, False) for text in args.prefill]
    decodes = [_shape_part("--decode", text, True) for text in args.decode]
    if not 1 <= args.tp <= 8:
        raise UsageError(f"--tp must be from 1 to 8, got {show(args.tp)}")
    model, gpu = model_spec(args.model), gpu_spec(args.gpu)
    calibration = (read_calibration_file(args.calibration) if is_file_spec(args.calibration)
                   else resolve_calibration(args.calibration, gpu.name))
    cost = CostModel(model, gpu, calibration.coefficients, args.tp)
    rows = sum(n for n, _ in decodes)
    contexts = sum(n * c for n, c in decodes)
    terms = cost.breakdown(chunks, rows, contexts)
    total = cost.dispatch_seconds(chunks, rows, contexts)
    tp = f", tp {args.tp}" if args.tp > 1 else ""
    out.write(f"one dispatch: {model.name} on {gpu.name}{tp}, calibration "
              f"{calibration.name}\n")
    parts = [f"prefill {n:,} tokens after {c:,}" for n, c in chunks]
    parts += [f"decode {n:,} rows at context {c:,}" for n, c in decodes]
    tokens = rows + sum(n for n, _ in chunks)
    out.write(f"  {'; '.join(parts)} ({tokens:,} tokens)\n\n")
    table = [("term", "ms", "share", "")]
    for name, seconds in terms.items():
        table.append((name, f"{seconds * 1e3:.4f}",
                      f"{seconds / total:.1%}" if total else "-", _TERM_NOTES[name]))
    table.append(("total", f"{total * 1e3:.4f}", "100.0%", ""))
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    for i, (a, b, c, d) in enumerate(table):
        line = f"{a.ljust(widths[0])}  {b.rjust(widths[1])}  {c.rjust(widths[2])}  {d}".rstrip()
        out.write(line + "\n")
        if i == 0 or i == len(table) - 2:
            out.write("-" * (sum(widths) + 4) + "\n")
    return 0


def cmd_cost(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Price one dispatch term by term (--prefill, --decode), or the swap-versus-recompute
    analysis of a preempted request (--seq)."""
    shape = bool(args.prefill or args.decode)
    if shape == (args.seq is not None):
        raise UsageError("cost needs --prefill/--decode (one dispatch) or --seq (swap against "
                         "recompute), not both")
    if shape:
        return _cost_dispatch(args, out)
    if not 1 <= args.seq <= MAX_SEQ:
        raise UsageError(f"--seq must be an integer from 1 to {MAX_SEQ:,}, got {show(args.seq)}")
    mfu = OPTIONS["mfu"]
    if not mfu.minimum <= args.mfu <= mfu.maximum:  # False for nan
        raise UsageError(f"--mfu must be a number from {limit(mfu.minimum)} to "
                         f"{limit(mfu.maximum)}, got {show(args.mfu)}")
    model, gpu = model_spec(args.model), gpu_spec(args.gpu)
    r = swap_vs_recompute(model, gpu, args.seq, args.mfu)
    width = (f"({model.mla.kv_lora_rank} + {model.mla.qk_rope_head_dim}) latent"
             if model.mla is not None and model.kv_width else
             f"{model.kv_token_width}" if model.kv_width else
             f"2 x {model.kv_heads} KV heads x {model.head_dim}")
    rows = [
        ("KV bytes per token", f"{r['kv_bytes_per_token']:,} B",
         f"{model.layers} layers x {width} x {model.kv_dtype_bytes:g} B"),
        ("KV of the request", f"{r['kv_bytes'] / 2**30:,.3f} GiB", f"{args.seq:,} tokens"),
        ("prefill FLOPs", f"{r['prefill_flops']:.4g}",
         f"2 N S + A S (S + 1) / 2, N = {model.active_linear_params:.3g}, "
         f"A = {model.attention_flops_per_pair_total:.3g}"),
        ("cold recompute", f"{r['recompute_seconds']:.4f} s",
         f"at {gpu.peak_flops * args.mfu / 1e12:,.0f} TFLOP/s"),
        ("swap, one way", f"{r['swap_one_way_seconds']:.4f} s",
         f"host link {gpu.host_link / 1e9:,.0f} GB/s"),
        ("swap, round trip", f"{r['swap_round_trip_seconds']:.4f} s", "out and back"),
        ("swap is cheaper by", f"{r['swap_advantage']:.1f}x", "cold recompute / round trip"),
        ("crossover prefill rate", f"{r['crossover_tokens_per_second'] / 1e3:,.0f}k tok/s",
         "recompute would tie with swap at this rate"),
        ("recompute wins above", f"{r['survival_threshold'] * 100:.1f}%",
         "of the prefix still in the prefix cache"),
    ]
    out.write(f"swap against recompute: {model.name} on {gpu.name}, S = {args.seq:,} tokens\n\n")
    w0 = max(len(a) for a, _, _ in rows)
    w1 = max(len(b) for _, b, _ in rows)
    for a, b, c in rows:
        out.write(f"{a.ljust(w0)}  {b.rjust(w1)}  {c}\n")
    return 0


def cmd_models(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """List the model and GPU catalogues."""
    out.write(format_catalogue())
    return 0
