"""The roofline cost model (§9): reference figures, regimes, and timed replays.

Numbers used throughout (Llama-3-8B on an H100 SXM, the defaults):
- N = 8,030,261,248 parameters (the Llama-3.1-8B config's count, which replaced the
  rounded 8.0e9: tests/test_models.py derives it), L = 32 layers, d = 4096, 8 KV heads
  x 128 x 2 bytes; KV bytes per token = 2 x 32 x 8 x 128 x 2 = 131072; weights 2N =
  16,060,522,496 bytes.
- achieved compute F = 989e12 x 400/989 = 4e14 FLOP/s; achieved bandwidth
  B = 3.35e12 x 0.8 = 2.68e12 B/s; step overhead 0.0005 s; host link 64e9 B/s.
- swap against recompute prices the prefill with ModelSpec.prefill_flops: 2 x
  6,979,321,856 linear parameters x S + 4 x 32 heads x 128 x 32 layers = 524,288 FLOPs
  per (query, key) pair x S (S + 1) / 2 causal pairs; at S = 8192 that is
  1.143492e14 + 1.759433e13 = 1.319435e14 FLOP, 0.329859 s at F.
- swap: 131072 x 8192 = 2^30 bytes; one way 2^30 / 64e9 = 0.016777 s, round
  trip 0.033554 s; 0.329859 / 0.033554 = 9.83x; crossover 8192 / 0.033554 =
  244,141 tok/s; recompute wins above 1 - 0.033554 / 0.329859 = 89.83% survival.
"""
from __future__ import annotations

import io
import json
import math
import re

import pytest

from conftest import req, simulate
from scheduler_sim.cli.main import main
from scheduler_sim.gpu.costmodel import (GPUS, MODELS, CostModel, DispatchShape, parse_cost_model,
                                     swap_vs_recompute)
from scheduler_sim.records.errors import TraceError
from scheduler_sim.io.trace import parse_trace
from conftest import ROOT

DATA = ROOT / "scheduler_sim" / "gpu" / "data" / "models"

M8 = MODELS["llama-3-8b"]
H100 = GPUS["h100-sxm"]
F = 4e14        # achieved FLOP/s
B = 2.68e12     # achieved HBM bytes/s
KV = 131072     # KV bytes per token, Llama-3-8B
N = 8_030_261_248  # Llama-3-8B's parameters (every one active: a dense model)
W = 2 * N          # its weight bytes, bf16


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


# --- the roofline ----------------------------------------------------------------------------

def test_large_prefill_is_compute_bound():
    """One 8192-token prefill from an empty context: compute (2 N 8192 + 2 L d 8192^2) /
    4e14 = 1.4916e14 / 4e14 = 0.37290 s; memory (W weights + 131072 x (8192 read + 8192
    written)) / 2.68e12 = 0.006794 s; so compute-bound, and seconds = compute + 0.0005."""
    cost = CostModel(M8, H100)
    shape = DispatchShape(chunks=[(8192, 0)])
    compute, memory = cost.compute_seconds(shape), cost.memory_seconds(shape)
    assert math.isclose(compute, (2 * N * 8192 + 2 * 32 * 4096 * 8192 ** 2) / F,
                        rel_tol=1e-9)
    assert math.isclose(memory, (W + KV * (8192 + 8192)) / B, rel_tol=1e-9)
    assert compute > 10 * memory
    assert cost.seconds(shape) == compute + 0.0005


def test_prefill_time_grows_linearly_with_tokens():
    """Prefill chunks add up: four 1024-token prefills cost exactly four times one; one
    prefill of 2048 tokens costs about twice one of 1024 (the dense 2 N per token dominates:
    (2N 2048 + 2Ld 2048^2) / (2N 1024 + 2Ld 1024^2) = 2.033)."""
    cost = CostModel(M8, H100)
    one = cost.compute_seconds(DispatchShape(chunks=[(1024, 0)]))
    four = cost.compute_seconds(DispatchShape(chunks=[(1024, 0)] * 4))
    assert math.isclose(four, 4 * one, rel_tol=1e-12)
    double = cost.compute_seconds(DispatchShape(chunks=[(2048, 0)]))
    assert math.isclose(double / one, 2.033, rel_tol=1e-3)
    assert cost.seconds(DispatchShape(chunks=[(2048, 0)])) > \
        cost.seconds(DispatchShape(chunks=[(1024, 0)]))


def test_prefill_time_grows_quadratically_with_context():
    """The attention part of a whole prefill of S tokens, compute - 2 N S / F = 2 L d S^2 / F,
    quadruples when S doubles (8192 -> 16384 -> 32768); and a 512-token chunk after s tokens
    of context costs 2 L d ((s+512)^2 - s^2) / F more attention than at s = 0."""
    cost = CostModel(M8, H100)

    def attention(s: int) -> float:
        return cost.compute_seconds(DispatchShape(chunks=[(s, 0)])) - 2 * N * s / F
    assert math.isclose(attention(8192), 2 * 32 * 4096 * 8192 ** 2 / F, rel_tol=1e-9)
    assert math.isclose(attention(16384) / attention(8192), 4, rel_tol=1e-9)
    assert math.isclose(attention(32768) / attention(16384), 4, rel_tol=1e-9)
    late = cost.compute_seconds(DispatchShape(chunks=[(512, 30000)]))
    early = cost.compute_seconds(DispatchShape(chunks=[(512, 0)]))
    assert math.isclose(late - early,
                        2 * 32 * 4096 * ((30512 ** 2 - 30000 ** 2) - 512 ** 2) / F, rel_tol=1e-9)


def test_small_decode_batch_is_memory_bound():
    """Four decodes at context 1000: compute (2N x 4 + 2Ld (2 x 4000 + 4)) / F = 1.66e-4 s;
    memory (W + 131072 x (4000 read + 4 written)) / 2.68e12 = 0.0061886 s: memory-bound,
    seconds = memory + 0.0005."""
    cost = CostModel(M8, H100)
    shape = DispatchShape(decodes=[1000] * 4)
    compute, memory = cost.compute_seconds(shape), cost.memory_seconds(shape)
    assert math.isclose(compute, (2 * N * 4 + 2 * 32 * 4096 * (2 * 4000 + 4)) / F,
                        rel_tol=1e-9)
    assert math.isclose(memory, (W + KV * (4000 + 4)) / B, rel_tol=1e-9)
    assert memory > 10 * compute
    assert cost.seconds(shape) == memory + 0.0005


def test_decode_time_grows_with_the_context_it_reads():
    """Raising each of four decodes' context from 1000 to 8000 adds 131072 x 28000 bytes
    read: 1.3694e-3 s more memory time (and more seconds); the batch stays memory-bound."""
    cost = CostModel(M8, H100)
    short, long_ = DispatchShape(decodes=[1000] * 4), DispatchShape(decodes=[8000] * 4)
    extra = cost.memory_seconds(long_) - cost.memory_seconds(short)
    assert math.isclose(extra, KV * 28000 / B, rel_tol=1e-9)
    assert cost.seconds(long_) > cost.seconds(short)
    assert cost.memory_seconds(long_) > cost.compute_seconds(long_)


def test_seconds_is_the_roofline_plus_overhead():
    """For a prefill, a decode batch and a mixed shape, under the default and a 2-ms step
    overhead: seconds = max(compute, memory) + step_overhead."""
    shapes = [DispatchShape(chunks=[(4096, 0)]), DispatchShape(decodes=[300, 4000, 17]),
              DispatchShape(chunks=[(512, 1000)], decodes=[300, 4000]), DispatchShape()]
    for cost, overhead in ((CostModel(M8, H100), 0.0005),
                           (CostModel(M8, H100, step_overhead=0.002), 0.002),
                           (CostModel(MODELS["llama-3-70b"], GPUS["a100-80gb"]), 0.0005)):
        for shape in shapes:
            assert cost.seconds(shape) == \
                max(cost.compute_seconds(shape), cost.memory_seconds(shape)) + overhead


def test_mfu_and_bandwidth_efficiency_scale_the_rates():
    """Halving mfu doubles compute time; halving bandwidth_efficiency doubles memory time."""
    shape = DispatchShape(chunks=[(1024, 100)], decodes=[50, 60])
    base = CostModel(M8, H100)
    slow_f = CostModel(M8, H100, mfu=200 / 989)
    slow_b = CostModel(M8, H100, bandwidth_efficiency=0.4)
    assert math.isclose(slow_f.compute_seconds(shape), 2 * base.compute_seconds(shape),
                        rel_tol=1e-12)
    assert math.isclose(slow_b.memory_seconds(shape), 2 * base.memory_seconds(shape),
                        rel_tol=1e-12)


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
    """One request P=2048, N=3 on a 1-ms clock. Step 0 prefills 2048 tokens: compute
    (2N 2048 + 2Ld 2048^2) / F = 3.39915e13 / 4e14 = 0.0849787 s, memory (W + 131072 x
    4096) / B = 0.00619 s, + 0.0005 = 0.0854787 s: it ends at 85.48 ms and completes at
    step 86. The decode at 86 (context 2048) costs memory (W + 131072 x 2049) / B =
    0.0060929 s + 0.0005 = 6.5929 ms and starts from the exact 85.48 ms: it ends at 92.07
    and completes at 93; the decode at 93 (context 2049, 6.5930 ms) ends at 98.66: 99. So
    rounding never accumulates: ceil(85.48) = 86, ceil(92.07) = 93, ceil(98.66) = 99."""
    s = simulate([req("a", 0, 2048, 3)], cost_model=COST, clock_resolution=0.001)
    dispatches = s.of("dispatch")
    assert [(d["tick"], d["done"]) for d in dispatches] == [(0, 86), (86, 93), (93, 99)]
    assert [d["rows"][0]["phase"] for d in dispatches] == ["prefill", "decode", "decode"]
    assert s.req["a"].first_token_at == 86 and s.req["a"].finished_at == 99
    assert s.summary["makespan"] == 0.099 and s.summary["iterations"] == 3


def test_replay_cost_model_defaults_to_a_1us_clock():
    """Without clock_resolution a cost model steps in microseconds: the three dispatches
    end at 85,478.65, 92,071.60 and 98,664.59 us, so they complete at steps 85479, 92072
    and 98665 (makespan 0.098665 s). On a 10-ms clock the prefill ends at 8.55 steps (9);
    the first decode ends at 8.55 + 0.659 = 9.21 (10); the second would end at 9.87, before
    the step 10 it starts at, so it lasts one step (11): makespan 0.11 s."""
    s = simulate([req("a", 0, 2048, 3)], cost_model=COST)
    assert [(d["tick"], d["done"]) for d in s.of("dispatch")] == [
        (0, 85479), (85479, 92072), (92072, 98665)]
    assert s.summary["makespan"] == 0.098665
    s = simulate([req("a", 0, 2048, 3)], cost_model=COST, clock_resolution=0.01)
    assert [(d["tick"], d["done"]) for d in s.of("dispatch")] == [(0, 9), (9, 10), (10, 11)]
    assert s.summary["makespan"] == 0.11


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
    """The replay table of that request on a 1-ms clock gives times in seconds (`s`):
    makespan 99 steps = 0.0990 s, TTFT 86 steps = 0.0860 s, E2EL 0.0990 s."""
    path = write_trace(tmp_path, [{"type": "config", "cost_model": COST,
                                   "clock_resolution": 0.001}, req("a", 0, 2048, 3)])
    status, out, err = run(["replay", path])
    assert status == 0, err
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if line.startswith(("makespan", "TTFT", "E2EL")):
            rows[parts[0]] = parts[-2:]
    assert rows["makespan"] == ["s", "0.0990"]
    assert rows["TTFT"] == ["s", "0.0860"]
    assert rows["E2EL"] == ["s", "0.0990"]
    assert "time in seconds" in out and COST in out


def test_replay_json_is_in_seconds_under_a_cost_model(tmp_path):
    """`--json` under a cost model says `time_unit: s` and every time is in seconds:
    makespan 0.099, ttft_mean 0.086, tpot_mean (99 - 86) / 2 = 6.5 steps = 0.0065 s."""
    path = write_trace(tmp_path, [req("a", 0, 2048, 3)])
    status, out, err = run(["replay", path, "--cost-model", COST, "--clock-resolution",
                            "0.001", "--json"])
    assert status == 0, err
    doc = json.loads(out)
    run_ = doc["runs"][0]
    assert doc["results_time_unit"] == "s"
    assert (run_["makespan"], run_["ttft_mean"], run_["tpot_mean"]) == (0.099, 0.086, 0.0065)
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
