"""The cost model (§9): swap against recompute, the terms a dispatch costs, and timed replays.

Numbers used throughout (Llama-3-8B on an H100 SXM):
- N = 8,030,261,248 parameters (the Llama-3.1-8B config's count: tests/test_models.py
  derives it), of which 6,979,321,856 in the linear layers; L = 32 layers, d = 4096, 32
  heads and 8 KV heads of 128, MLP width 14,336, vocabulary 128,256; KV bytes per token
  = 2 x 32 x 8 x 128 x 2 = 131,072.
- swap against recompute prices the prefill at 400 of the H100's 989 TFLOP/s (F = 4e14)
  with ModelSpec.prefill_flops: 2 x 6,979,321,856 linear parameters x S + 4 x 32 heads x
  128 x 32 layers = 524,288 FLOPs per (query, key) pair x S (S + 1) / 2 causal pairs; at
  S = 8192 that is 1.143492e14 + 1.759433e13 = 1.319435e14 FLOP, 0.329859 s at F.
- swap: 131072 x 8192 = 2^30 bytes over a 64e9 B/s host link; one way 2^30 / 64e9 =
  0.016777 s, round trip 0.033554 s; 0.329859 / 0.033554 = 9.83x; crossover 8192 /
  0.033554 = 244,141 tok/s; recompute wins above 1 - 0.033554 / 0.329859 = 89.83%
  survival.
- the cost model under the uncalibrated physics (`Coefficients()`, which calibration
  refits do not move; the shipped calibrations' numbers are never asserted here):
  - linear layers: 13,958,643,712 weight bytes read at 3.35e12 x gemm_bandwidth_efficiency
    0.78 = 2.613e12 B/s: m = 5.34200 ms; 2 x 6,979,321,856 FLOPs a token at 989e12 x
    gemm_efficiency 0.75 = 741.75e12 FLOP/s: c = 0.0188185 ms a token; the term of T
    tokens is sqrt(m^2 + (c T)^2) (gemm_sharpness 2, no half tokens, no tiles);
  - LM head: 128,256 x 4,096 x 2 = 1,050,673,152 bytes, 0.402095 ms, and 1,050,673,152
    FLOPs a sampled row, 0.00141648 ms, blended alike;
  - prefill attention: 524,288 FLOPs a pair at 989e12 x attention_efficiency 0.5 =
    494.5e12 FLOP/s (1.06024 ns a pair);
  - KV read and written at 3.35e12 x kv_read_efficiency 0.8 = 2.68e12 B/s: 48.9075 ns a
    token;
  - elementwise: 32 x 2 x (8 x 4,096 + 3 x 14,336 + 2 x (32 + 8) x 128) = 5,505,024
    bytes a token at 3.35e12 x 0.5 = 1.675e12 B/s (3.28658 us a token);
  - no floors, no all-reduce (tp 1), step 0.5 ms.
"""
from __future__ import annotations

import io
import json
import math
import re

import pytest

from conftest import req, simulate
from scheduler_sim.cli.main import main
from scheduler_sim.gpu.coefficients import Coefficients
from scheduler_sim.gpu.catalogue import GPUS, MODELS, parse_cost_model
from scheduler_sim.gpu.costmodel import CostModel, DispatchShape
from scheduler_sim.gpu.run_cost import calibration_for, cost_model_for
from scheduler_sim.gpu.swap import swap_vs_recompute
from scheduler_sim.records.options import Options
from scheduler_sim.records.errors import TraceError
from scheduler_sim.io.trace import parse_trace
from conftest import ROOT

DATA = ROOT / "scheduler_sim" / "gpu" / "data" / "models"

M8 = MODELS["llama-3-8b"]
H100 = GPUS["h100-sxm"]
F = 4e14        # swap_vs_recompute's prefill FLOP/s
KV = 131072     # KV bytes per token, Llama-3-8B
# The cost model's figures (module docstring): FLOPs and bytes of Llama-3-8B, and the
# H100's rates under Coefficients().
LIN_FLOPS = 2 * 6_979_321_856          # linear-layer FLOPs a token
LIN_READ = 13_958_643_712 / (3.35e12 * 0.78)   # seconds to read the linear weights
HEAD_FLOPS = 2 * 128_256 * 4_096       # LM-head FLOPs a sampled row
HEAD_READ = 1_050_673_152 / (3.35e12 * 0.78)
PAIR_FLOPS = 524_288                   # attention FLOPs a (query, key) pair, all layers
ELEMENTWISE = 5_505_024                # elementwise bytes a token
GEMM_RATE, ATTENTION_RATE = 989e12 * 0.75, 989e12 * 0.5
KV_RATE, ELEMENTWISE_RATE = 3.35e12 * 0.8, 3.35e12 * 0.5


def run(argv: list[str]) -> tuple[int, str, str]:
    """Call the command line in-process; return (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    status = main(argv, out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def within(value: float, reference: float, rel: float = 0.01) -> bool:
    """|value - reference| <= rel x |reference|."""
    return abs(value - reference) <= rel * abs(reference)


# --- §9 reference figures ------------------------------------------------------------

def test_kv_bytes_per_token_llama_3_8b_exact():
    """2 (K, V) x 32 layers x 8 KV heads x 128 head dim x 2 bytes = 131072."""
    assert M8.kv_bytes_per_token == 131072
    assert swap_vs_recompute(M8, H100, 8192)["kv_bytes_per_token"] == 131072


def test_kv_bytes_per_token_llama_3_70b_exact():
    """Llama-3-70B: 2 x 80 layers x 8 KV heads x 128 x 2 bytes = 327680."""
    assert MODELS["llama-3-70b"].kv_bytes_per_token == 2 * 80 * 8 * 128 * 2 == 327680


def test_swap_vs_recompute_reference_figures():
    """At S = 8192: prefill 1.319e14 FLOP, cold recompute 0.330 s, round-trip swap 0.0336 s,
    swap 9.8x cheaper, crossover 244k tok/s, recompute wins above 89.8% survival (each
    within 1%); the KV of the request is 2^30 bytes exactly and one way is half the round
    trip."""
    r = swap_vs_recompute(M8, H100, 8192)
    assert within(r["prefill_flops"], 1.319e14)
    assert within(r["recompute_seconds"], 0.330)
    assert within(r["swap_round_trip_seconds"], 0.0336)
    assert within(r["swap_advantage"], 9.83)
    assert within(r["crossover_tokens_per_second"], 244e3)
    assert within(r["survival_threshold"], 0.898)
    assert r["kv_bytes"] == 2 ** 30
    assert math.isclose(r["swap_one_way_seconds"] * 2, r["swap_round_trip_seconds"])


def test_swap_vs_recompute_formulas():
    """The figures follow their definitions: prefill FLOPs = 2 x 6,979,321,856 x S +
    524,288 x S (S + 1) / 2 = 1.143492e14 + 1.759433e13 = 1.319435e14; cold = FLOPs / F;
    round trip = 2 x 2^30 / 64e9; advantage = cold / round trip; crossover = S / round
    trip; threshold = 1 - rt / cold."""
    r = swap_vs_recompute(M8, H100, 8192)
    flops = 2 * 6_979_321_856 * 8192 + 524_288 * 8192 * 8193 // 2
    assert flops == 131_943_542_816_768
    assert math.isclose(r["prefill_flops"], flops, rel_tol=1e-12)
    assert math.isclose(r["recompute_seconds"], flops / F, rel_tol=1e-9)
    rt = 2 * 2 ** 30 / 64e9
    assert math.isclose(r["swap_round_trip_seconds"], rt, rel_tol=1e-12)
    assert math.isclose(r["swap_advantage"], (flops / F) / rt, rel_tol=1e-9)
    assert math.isclose(r["crossover_tokens_per_second"], 8192 / rt, rel_tol=1e-12)
    assert math.isclose(r["survival_threshold"], 1 - rt / (flops / F), rel_tol=1e-9)


def cost_rows(text: str) -> dict[str, str]:
    """The value cell of each row of the `cost` table, by label."""
    rows = {}
    for line in text.splitlines()[2:]:
        match = re.match(r"(\S.*?)\s{2,}(\S.*?)\s{2,}", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def number(cell: str) -> float:
    """The leading number of a cell like '131,072 B', '0.3717 s', '244k tok/s' or '91.0%'."""
    match = re.match(r"([0-9][0-9,]*\.?[0-9]*(?:e[+-]?\d+)?)(k?)", cell)
    assert match, cell
    value = float(match.group(1).replace(",", ""))
    return value * 1000 if match.group(2) == "k" else value


def test_cost_command_prints_the_reference_figures():
    """`cost --model llama-3-8b --gpu h100-sxm --seq 8192` prints each reference figure
    within 1% (KV bytes per token exactly 131,072 B), and exits 0; the same figures for
    the model's config.json given as a path."""
    status, out, err = run(["cost", "--model", "llama-3-8b", "--gpu", "h100-sxm",
                            "--seq", "8192"])
    assert status == 0 and err == ""
    rows = cost_rows(out)
    assert rows["KV bytes per token"] == "131,072 B"
    assert within(number(rows["prefill FLOPs"]), 1.319e14)
    assert rows["cold recompute"].endswith(" s")
    assert within(number(rows["cold recompute"]), 0.330)
    assert rows["swap, round trip"].endswith(" s")
    assert within(number(rows["swap, round trip"]), 0.0336)
    assert within(number(rows["swap is cheaper by"]), 9.83)
    assert within(number(rows["crossover prefill rate"]), 244e3)
    assert rows["recompute wins above"].endswith("%")
    assert within(number(rows["recompute wins above"]) / 100, 0.898)
    config = str(DATA / "llama-3.1-8b.json")
    status, by_path, err = run(["cost", "--model", config, "--gpu", "h100-sxm",
                                "--seq", "8192"])
    assert status == 0 and err == ""
    assert by_path.splitlines()[2:] == out.splitlines()[2:]


def test_cost_command_unknown_model_or_gpu_exits_2():
    """An unknown model or GPU is a usage error that names the known ones."""
    status, out, err = run(["cost", "--model", "gpt-9", "--gpu", "h100-sxm", "--seq", "8"])
    assert status == 2 and out == ""
    assert "gpt-9" in err and "llama-3-8b" in err and "llama-3-70b" in err
    status, out, err = run(["cost", "--model", "llama-3-8b", "--gpu", "tpu", "--seq", "8"])
    assert status == 2
    assert "tpu" in err and all(g in err for g in ("a100-80gb", "h100-sxm", "h200"))


# --- the sum of terms (§9) ------------------------------------------------------------------

def test_a_large_prefill_is_bound_by_its_gemm_compute():
    """One 8192-token prefill from an empty context under `Coefficients()`: the linear
    layers compute 8192 x 0.0188185 = 154.161 ms, 28.9 times their 5.34200-ms weight read,
    so their term sqrt(5.34200^2 + 154.161^2) = 154.254 ms is 1.000600 times the compute
    alone, and closer still as the prefill grows (sqrt(1 + (5.34200 / 1,233.29)^2) =
    1.0000094 times at 65,536 tokens): it approaches 2 x active parameters x T / (peak x
    gemm_efficiency). The whole dispatch: linear 154.254 + LM head 0.402097 + attention
    8192 x 8193 / 2 = 33,558,528 pairs x 524,288 / 494.5e12 = 35.5800 + KV write 8192 x
    131,072 / 2.68e12 = 0.400650 + elementwise 8192 x 5,505,024 / 1.675e12 = 26.9237 +
    step 0.5 = 218.0604 ms."""
    cost = CostModel(M8, H100)
    assert cost.coefficients == Coefficients()
    compute = LIN_FLOPS * 8192 / GEMM_RATE
    assert math.isclose(compute, 0.154161388, rel_tol=1e-8)
    assert compute / LIN_READ == pytest.approx(28.858, abs=1e-3)
    linear = cost.linear_seconds(8192)
    assert math.isclose(linear, math.hypot(LIN_READ, compute), rel_tol=1e-12)
    assert linear / compute == pytest.approx(1.000600, abs=1e-6)
    assert cost.linear_seconds(65536) / (LIN_FLOPS * 65536 / GEMM_RATE) == pytest.approx(
        1.0000094, abs=1e-7)
    expected = (math.hypot(LIN_READ, compute) + math.hypot(HEAD_READ, HEAD_FLOPS / GEMM_RATE)
                + 33_558_528 * PAIR_FLOPS / ATTENTION_RATE + 8192 * KV / KV_RATE
                + 8192 * ELEMENTWISE / ELEMENTWISE_RATE + 0.0005)
    assert math.isclose(cost.seconds(DispatchShape(chunks=[(8192, 0)])), expected,
                        rel_tol=1e-12)
    assert math.isclose(expected, 0.2180604, rel_tol=1e-6)


def test_chunks_of_one_dispatch_share_its_linear_layers():
    """Four 1024-token chunks in one dispatch and one 4096-token chunk run the same 4096
    tokens through the linear layers, the KV write and the elementwise kernels (terms of
    the token count only), which grow in proportion to the tokens (twice the tokens, twice
    the KV write and elementwise time). They differ in attention, 4096 x 4097 / 2 -
    4 x 1024 x 1025 / 2 = 6,291,456 more pairs for the single chunk (x 524,288 / 494.5e12
    = 6.67044 ms), and in the LM head, 4 sampled rows against 1: sqrt(0.402095^2 +
    0.00566592^2) - sqrt(0.402095^2 + 0.00141648^2) = 3.74e-5 ms."""
    cost = CostModel(M8, H100)
    four = cost.breakdown([(1024, 0)] * 4, 0, 0)
    one = cost.breakdown([(4096, 0)], 0, 0)
    for term in ("linear", "kv_write", "elementwise", "floors", "allreduce"):
        assert four[term] == one[term], term
    half = cost.breakdown([(2048, 0)], 0, 0)
    for term in ("kv_write", "elementwise"):
        assert math.isclose(one[term], 2 * half[term], rel_tol=1e-12), term
    assert math.isclose(one["attention_prefill"] - four["attention_prefill"],
                        6_291_456 * PAIR_FLOPS / ATTENTION_RATE, rel_tol=1e-9)
    assert math.isclose(four["lm_head"] - one["lm_head"],
                        math.hypot(HEAD_READ, 4 * HEAD_FLOPS / GEMM_RATE)
                        - math.hypot(HEAD_READ, HEAD_FLOPS / GEMM_RATE), rel_tol=1e-6)
    assert four["step"] == one["step"] == 0.0005


def test_prefill_attention_grows_quadratically_with_context():
    """With no short-chunk penalty (attention_half_tokens 0) a whole prefill of S tokens
    attends over S (S + 1) / 2 pairs of 524,288 FLOPs at 989e12 x 0.5: 8192 tokens cost
    33,558,528 pairs = 35.5800 ms, and doubling S multiplies it by 2 (2S + 1) / (S + 1)
    (3.99976 from 8192 to 16384). A 512-token chunk after 30,000 tokens of context attends
    to them too: 512 x 30,000 = 15,360,000 more pairs than at context 0, 16.2853 ms, the
    whole difference between the two dispatches (every other term depends on the tokens
    only)."""
    cost = CostModel(M8, H100)

    def attention(s: int) -> float:
        return cost.breakdown([(s, 0)], 0, 0)["attention_prefill"]
    assert math.isclose(attention(8192), 33_558_528 * PAIR_FLOPS / ATTENTION_RATE,
                        rel_tol=1e-12)
    for s in (8192, 16384):
        assert math.isclose(attention(2 * s) / attention(s), 2 * (2 * s + 1) / (s + 1),
                            rel_tol=1e-12)
    late = cost.dispatch_seconds([(512, 30000)], 0, 0)
    early = cost.dispatch_seconds([(512, 0)], 0, 0)
    assert math.isclose(late - early, 15_360_000 * PAIR_FLOPS / ATTENTION_RATE, rel_tol=1e-9)
    assert math.isclose(late - early, 0.0162853, rel_tol=1e-5)


def test_a_small_decode_batch_is_bound_by_the_weight_read():
    """Four decodes at context 1000: the linear layers compute 4 x 0.0188185 = 0.0752741
    ms against their 5.34200-ms weight read, so their term sqrt(5.34200^2 + 0.0752741^2)
    = 5.34253 ms is sqrt(1 + (0.0752741 / 5.34200)^2) = 1.0000993 times the read alone.
    The whole dispatch: linear 5.34253 +
    LM head sqrt(0.402095^2 + 0.00566592^2) = 0.402135 + decode attention (4000 + 4) x
    131,072 / 2.68e12 = 0.195825 + KV write 4 x 131,072 / 2.68e12 = 0.000196 +
    elementwise 4 x 5,505,024 / 1.675e12 = 0.0131463 + step 0.5 = 6.45383 ms."""
    cost = CostModel(M8, H100)
    linear = cost.linear_seconds(4)
    assert math.isclose(linear, math.hypot(LIN_READ, 4 * LIN_FLOPS / GEMM_RATE), rel_tol=1e-12)
    assert linear / LIN_READ == pytest.approx(1.0000993, abs=1e-7)
    expected = (linear + math.hypot(HEAD_READ, 4 * HEAD_FLOPS / GEMM_RATE)
                + 4004 * KV / KV_RATE + 4 * KV / KV_RATE
                + 4 * ELEMENTWISE / ELEMENTWISE_RATE + 0.0005)
    assert math.isclose(cost.seconds(DispatchShape(decodes=[1000] * 4)), expected,
                        rel_tol=1e-12)
    assert math.isclose(expected, 0.00645383, rel_tol=1e-6)


def test_decode_time_grows_with_the_context_it_reads():
    """Decode attention reads every token of context at 3.35e12 x kv_read_efficiency 0.8 =
    2.68e12 B/s: 131,072 / 2.68e12 = 48.9075 ns a token. Raising each of four decodes'
    context from 1000 to 8000 adds 28,000 tokens read, 1.36941 ms, to that term and to the
    dispatch, and nothing else (the other terms count rows, not context)."""
    cost = CostModel(M8, H100)
    short = cost.breakdown([], 4, 4000)
    long_ = cost.breakdown([], 4, 32000)
    assert math.isclose(cost.breakdown([], 4, 4001)["attention_decode"]
                        - short["attention_decode"], KV / KV_RATE, rel_tol=1e-9)
    assert math.isclose(long_["attention_decode"] - short["attention_decode"],
                        28000 * KV / KV_RATE, rel_tol=1e-12)
    assert {k: v for k, v in long_.items() if k != "attention_decode"} == \
        {k: v for k, v in short.items() if k != "attention_decode"}
    extra = (cost.seconds(DispatchShape(decodes=[8000] * 4))
             - cost.seconds(DispatchShape(decodes=[1000] * 4)))
    assert math.isclose(extra, 28000 * KV / KV_RATE, rel_tol=1e-9)
    assert math.isclose(extra, 0.00136941, rel_tol=1e-5)


def test_the_step_overhead_is_added_to_every_dispatch():
    """For a prefill, a decode batch and a mixed dispatch, on Llama-3-8B/H100 and
    Llama-3-70B/A100: a 2-ms step overhead instead of the default 0.5 ms adds exactly 1.5
    ms, the `step` term; and `seconds` of a DispatchShape is `dispatch_seconds` of its
    chunks, its row count and the sum of its contexts."""
    shapes = [DispatchShape(chunks=[(4096, 0)]), DispatchShape(decodes=[300, 4000, 17]),
              DispatchShape(chunks=[(512, 1000)], decodes=[300, 4000])]
    for model, gpu in ((M8, H100), (MODELS["llama-3-70b"], GPUS["a100-80gb"])):
        base = CostModel(model, gpu)
        slow = CostModel(model, gpu, Coefficients(step_overhead=0.002))
        for shape in shapes:
            args = (shape.chunks, len(shape.decodes), sum(shape.decodes))
            assert base.seconds(shape) == base.dispatch_seconds(*args)
            assert math.isclose(slow.seconds(shape) - base.seconds(shape), 0.0015,
                                rel_tol=1e-9)
            assert (base.breakdown(*args)["step"], slow.breakdown(*args)["step"]) == \
                (0.0005, 0.002)


def options(**values) -> Options:
    return Options.resolve({"cost_model": COST, **values})


def test_mfu_bandwidth_efficiency_and_step_overhead_override_the_calibration():
    """`mfu` replaces gemm_efficiency, `bandwidth_efficiency` both gemm_bandwidth_efficiency
    and kv_read_efficiency, `step_overhead` the step; every other coefficient stays the
    calibration's (`none`: Coefficients(); the shipped one: its own). Halving mfu (0.375)
    doubles the GEMM compute and bandwidth_efficiency 0.39 (half of 0.78) the weight read:
    an 8192-token linear term becomes sqrt(10.6840^2 + 308.323^2) ms, a 4-row decode's
    sqrt(10.6840^2 + 0.150548^2) ms; KV is read at 3.35e12 x 0.39 B/s instead of 0.8 of
    it: 28,000 more tokens of context cost 28,000 x 131,072 / 1.3065e12 = 2.80905 ms
    instead of 1.36941."""
    assert cost_model_for(options(calibration="none")).coefficients == Coefficients()
    tuned = cost_model_for(options(calibration="none", mfu=0.375, bandwidth_efficiency=0.39,
                                   step_overhead=0.002))
    assert tuned.coefficients == Coefficients(
        gemm_efficiency=0.375, gemm_bandwidth_efficiency=0.39, kv_read_efficiency=0.39,
        step_overhead=0.002)
    assert math.isclose(tuned.linear_seconds(8192),
                        math.hypot(2 * LIN_READ, 2 * LIN_FLOPS * 8192 / GEMM_RATE),
                        rel_tol=1e-12)
    assert math.isclose(tuned.linear_seconds(4),
                        math.hypot(2 * LIN_READ, 2 * 4 * LIN_FLOPS / GEMM_RATE), rel_tol=1e-12)
    assert math.isclose(tuned.decode_seconds(4, 32000) - tuned.decode_seconds(4, 4000),
                        0.00280905, rel_tol=1e-5)
    assert math.isclose(tuned.decode_seconds(4, 32000) - tuned.decode_seconds(4, 4000),
                        28000 * KV / (3.35e12 * 0.39), rel_tol=1e-9)
    assert tuned.breakdown([], 4, 4000)["step"] == 0.002
    shipped = calibration_for(options()).coefficients
    over = cost_model_for(options(mfu=0.375, bandwidth_efficiency=0.39, step_overhead=0.002))
    assert over.coefficients == shipped.replace(
        gemm_efficiency=0.375, gemm_bandwidth_efficiency=0.39, kv_read_efficiency=0.39,
        step_overhead=0.002)
    assert cost_model_for(options()).coefficients == shipped


def test_decode_seconds_equals_seconds_of_the_same_decode_shape():
    """decode_seconds(n, sum of contexts) is exactly `seconds` of n decode rows with those
    contexts, for several batches."""
    cost = CostModel(M8, H100)
    for contexts in ([100, 2000, 37], [1], [8192] * 64, list(range(1, 200))):
        assert cost.decode_seconds(len(contexts), sum(contexts)) == \
            cost.seconds(DispatchShape(decodes=list(contexts)))


def test_parse_cost_model():
    """`llama-3-8b/h100-sxm` gives the two specs; a bad name raises ValueError naming every
    known model and GPU."""
    assert parse_cost_model("llama-3-8b/h100-sxm") == (M8, H100)
    for bad in ("llama-3-8b", "gpt/h100-sxm", "llama-3-8b/tpu", "", "llama-3-8b/h100-sxm/x"):
        with pytest.raises(ValueError) as info:
            parse_cost_model(bad)
        for name in list(MODELS) + list(GPUS):
            assert name in str(info.value), (bad, str(info.value))


# --- replays with a cost model -------------------------------------------------------------

COST = "llama-3-8b/h100-sxm"


def test_replay_dispatches_last_their_modelled_steps():
    """One request P=2048, N=3 on a 1-ms clock, under the uncalibrated physics (`calibration:
    none`). Step 0 prefills 2048 tokens: linear sqrt(5.34200^2 + (2048 x 0.0188185 =
    38.5403)^2) = 38.9088 ms, LM head 0.402097, attention 2,098,176 pairs x 524,288 /
    494.5e12 = 2.22457, KV write 2048 x 131,072 / 2.68e12 = 0.100162, elementwise 2048 x
    5,505,024 / 1.675e12 = 6.73092, step 0.5: 48.8666 ms; it completes at step 49. The
    decode at 49 (context 2048): linear sqrt(5.34200^2 + 0.0188185^2) = 5.34203 ms, LM head
    0.402097, KV read and written (2049 + 1) x 131,072 / 2.68e12 = 0.100260, elementwise
    0.003287, step 0.5: 6.34768 ms, from the exact 48.8666 ms: it ends at 55.2142 and
    completes at 56; the decode at 56 (context 2049, 48.9 ns more: 6.34773 ms) ends at
    61.5620: 62. So rounding never accumulates: ceil(48.87) = 49, ceil(55.21) = 56,
    ceil(61.56) = 62."""
    s = simulate([req("a", 0, 2048, 3)], cost_model=COST, calibration="none",
                 clock_resolution=0.001)
    dispatches = s.of("dispatch")
    assert [(d["tick"], d["done"]) for d in dispatches] == [(0, 49), (49, 56), (56, 62)]
    assert [d["rows"][0]["phase"] for d in dispatches] == ["prefill", "decode", "decode"]
    assert s.req["a"].first_token_at == 49 and s.req["a"].finished_at == 62
    assert s.summary["makespan"] == 0.062 and s.summary["iterations"] == 3


def test_replay_cost_model_defaults_to_a_1us_clock():
    """Without clock_resolution a cost model steps in microseconds: the three dispatches of
    the test above end at 48,866.55, 55,214.23 and 61,561.95 us, so they complete at steps
    48867, 55215 and 61562 (makespan 0.061562 s). On a 20-ms clock the prefill ends at
    2.443 steps (3); the first decode, from 2.443, would end at 2.443 + 0.3174 = 2.761,
    before the step 3 it starts at, so it lasts one step (4) and its exact end becomes 4;
    the second ends at 4 + 0.3174 = 4.317 (5): makespan 5 x 0.02 = 0.1 s."""
    s = simulate([req("a", 0, 2048, 3)], cost_model=COST, calibration="none")
    assert [(d["tick"], d["done"]) for d in s.of("dispatch")] == [
        (0, 48867), (48867, 55215), (55215, 61562)]
    assert s.summary["makespan"] == 0.061562
    s = simulate([req("a", 0, 2048, 3)], cost_model=COST, calibration="none",
                 clock_resolution=0.02)
    assert [(d["tick"], d["done"]) for d in s.of("dispatch")] == [(0, 3), (3, 4), (4, 5)]
    assert s.summary["makespan"] == 0.1


def test_replay_without_cost_model_dispatches_last_one_tick():
    """The same request without a cost model: every dispatch lasts 1 tick (E1)."""
    s = simulate([req("a", 0, 2048, 3)])
    assert [(d["tick"], d["done"]) for d in s.of("dispatch")] == [(0, 1), (1, 2), (2, 3)]


def write_trace(tmp_path, records: list[dict]) -> str:
    """Write records as a JSONL trace; return its path."""
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def test_replay_table_shows_seconds(tmp_path):
    """The replay table of that request on a 1-ms clock (test_replay_dispatches_last_their_
    modelled_steps) gives times in seconds (`s`): makespan 62 steps = 0.0620 s, TTFT 49
    steps = 0.0490 s, E2EL 0.0620 s."""
    path = write_trace(tmp_path, [{"type": "config", "cost_model": COST, "calibration": "none",
                                   "clock_resolution": 0.001}, req("a", 0, 2048, 3)])
    status, out, err = run(["replay", path])
    assert status == 0, err
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if line.startswith(("makespan", "TTFT", "E2EL")):
            rows[parts[0]] = parts[-2:]
    assert rows["makespan"] == ["s", "0.0620"]
    assert rows["TTFT"] == ["s", "0.0490"]
    assert rows["E2EL"] == ["s", "0.0620"]
    assert "time in seconds" in out and COST in out


def test_replay_json_is_in_seconds_under_a_cost_model(tmp_path):
    """`--json` under a cost model (`--calibration none`, the same request on a 1-ms clock)
    says `time_unit: s` and every time is in seconds: makespan 0.062, ttft_mean 0.049,
    tpot_mean (62 - 49) / 2 = 6.5 steps = 0.0065 s."""
    path = write_trace(tmp_path, [req("a", 0, 2048, 3)])
    status, out, err = run(["replay", path, "--cost-model", COST, "--calibration", "none",
                            "--clock-resolution", "0.001", "--json"])
    assert status == 0, err
    doc = json.loads(out)
    run_ = doc["runs"][0]
    assert doc["results_time_unit"] == "s"
    assert (run_["makespan"], run_["ttft_mean"], run_["tpot_mean"]) == (0.062, 0.049, 0.0065)
    assert "seconds" not in run_


def test_replay_json_without_cost_model_is_in_ticks(tmp_path):
    """Without a cost model the JSON says `time_unit: ticks` and times are tick counts."""
    path = write_trace(tmp_path, [req("a", 0, 4, 2)])
    status, out, _ = run(["replay", path, "--json"])
    assert status == 0
    doc = json.loads(out)
    assert doc["results_time_unit"] == "ticks" and doc["runs"][0]["makespan"] == 2


def test_unknown_cost_model_in_the_trace_is_a_trace_error():
    """A config naming an unknown model is a T1 error at line 1 naming the known models and
    GPUs."""
    data = (json.dumps({"type": "config", "cost_model": "gpt-9/h100-sxm"}) + "\n"
            + json.dumps(req("a", 0, 4, 2)) + "\n").encode()
    with pytest.raises(TraceError) as info:
        parse_trace(data, "t.jsonl")
    text = "\n".join(info.value.problems)
    assert "t.jsonl:1" in text and "gpt-9" in text
    assert all(name in text for name in list(MODELS) + list(GPUS))


def test_unknown_cost_model_flag_exits_2(tmp_path):
    """`--cost-model llama-3-8b/tpu` is a usage error (exit 2) naming the known models and
    GPUs; nothing is printed on stdout."""
    path = write_trace(tmp_path, [req("a", 0, 4, 2)])
    status, out, err = run(["replay", path, "--cost-model", "llama-3-8b/tpu"])
    assert status == 2 and out == ""
    assert "llama-3-8b/tpu" in err
    assert all(name in err for name in list(MODELS) + list(GPUS))


def test_fp8_weights_run_the_linear_layers_at_the_fp8_peak_and_not_the_lm_head():
    """A tiny fp8 model (2 layers, d 8, 2 heads and 1 KV head of 4, MLP width 16,
    vocabulary 10: 1,152 linear parameters, an 80-parameter LM head) on a GPU of 1e6
    16-bit and 2e6 FP8 FLOP/s and 1e4 B/s, every efficiency 0.5, sharpness 1 (the two
    regimes add up). The linear layers read 1,152 one-byte weights, 1,152 / 5e3 = 0.2304
    s, and compute 2 x 1,152 = 2,304 FLOPs a token at 2e6 x 0.5: 3 tokens 0.006912 s.
    The LM head stays in 16 bits (as ModelSpec.weight_bytes counts it): 160 bytes / 5e3 =
    0.032 s, and 160 FLOPs a sampled row at the 16-bit 1e6 x 0.5: 3 rows 0.00096 s."""
    from scheduler_sim.gpu.gpus import GpuSpec
    from scheduler_sim.gpu.models import ModelSpec
    tiny = ModelSpec(name="tiny-fp8", layers=2, d_model=8, heads=2, kv_heads=1, head_dim=4,
                     intermediate=16, vocab=10, weight_bytes_per_param=1.0, fp8=True)
    gpu = GpuSpec(name="toy", bf16_flops=1e6, fp8_flops=2e6, hbm_bandwidth=1e4,
                  memory_gib=1.0, host_link=1e3, interconnect=1e3, interconnect_kind="nvlink")
    half = Coefficients(gemm_efficiency=0.5, gemm_bandwidth_efficiency=0.5, gemm_sharpness=1.0)
    assert tiny.weight_bytes == 1152 * 1 + (80 + 80 + 2 * 8 * 2 + 8) * 2
    terms = CostModel(tiny, gpu, half).breakdown([], 3, 12)
    assert terms["linear"] == pytest.approx(0.2304 + 0.006912, rel=1e-12)
    assert terms["lm_head"] == pytest.approx(0.032 + 0.00096, rel=1e-12)


@pytest.mark.parametrize("sharpness, tile", [(2.0, 1.0), (1.5, 128.0), (3.0, 64.0)])
@pytest.mark.parametrize("model", ["llama-3-8b", "mixtral-8x7b"])
def test_the_count_terms_are_the_blended_gemms_float_for_float(model, sharpness, tile):
    """`_fixed` inlines `_linear` and `_head` for a dense model (a speed trick on the
    path of every dispatch with prompt rows): the very floats of the two GEMMs'
    p-norm blends plus the other count terms, in that order, for any sharpness
    and tile (a mixture of experts keeps the calls)."""
    k = Coefficients().replace(gemm_sharpness=sharpness, gemm_tile_tokens=tile)
    cm = CostModel(MODELS[model], H100, k)
    for tokens, sampled, rows in [(1, 1, 1), (127, 3, 3), (129, 5, 9), (8192, 256, 256),
                                  (375, 10, 10)]:
        expected = (cm._linear(tokens) + cm._head(sampled) + cm._kv * tokens
                    + cm._elementwise * tokens + cm._floor + cm._ar_fixed
                    + cm._ar_token * tokens + cm._step + cm._row * rows)
        assert cm._fixed(tokens, sampled, rows) == expected


def test_decode_seconds_from_the_cached_base_and_terms_agree():
    """`decode_seconds(rows, contexts)` is `_decode_base(rows) + kv x (contexts +
    rows)` whether the base is cached yet or not, and `decode_terms` gives the
    same two terms: the same float either way (a counted start and a fold read
    the cache inline)."""
    cost = CostModel(M8, H100)
    for rows, contexts in ((1, 0), (9, 12_345), (256, 1_000_000)):
        first = cost.decode_seconds(rows, contexts)  # (computes and caches the base)
        again = cost.decode_seconds(rows, contexts)
        base, kv = cost.decode_terms(rows)
        assert first == again == cost._decode_base(rows) + cost._kv * (contexts + rows)
        assert base + kv * (contexts + rows) == first and kv == cost._kv
