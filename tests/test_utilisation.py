"""Utilisation (gpu/utilisation.py, engine/work_series.py): FLOPs and HBM bytes of
dispatches, MFU and MBU per run over its busy time and per time bucket."""
from __future__ import annotations

import json
import random

import pytest

from conftest import random_engine_options, random_workload, trace_bytes
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.work_series import BUCKETS, WorkSeries
from scheduler_sim.gpu.gpus import GpuSpec
from scheduler_sim.gpu.models import ModelSpec
from scheduler_sim.gpu.utilisation import DispatchWork, Utilisation, WorkCounts
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.records.clock import Clock
from scheduler_sim.records.options import Options

# A 1-layer toy: d 8, 2 heads of 4, 1 KV head, a gated MLP of 16, a vocabulary of 32.
TOY = ModelSpec("toy", layers=1, d_model=8, heads=2, kv_heads=1, head_dim=4,
                intermediate=16, vocab=32)
# 1,000 FLOP/s (bf16), 1,000 bytes/s of HBM.
TOY_GPU = GpuSpec("toy", 1000.0, None, 1000.0, 1.0, 1.0, 1.0, "nvlink")


def test_a_two_request_dispatch_by_hand():
    """A prefill chunk of 3 tokens after 2 cached ones and a decode with context 5.

    Linear parameters: attention 8*2*4 (Q) + 2*8*1*4 (K, V) + 2*4*8 (O) = 192, MLP
    3*8*16 = 384: 576, so 1,152 FLOPs a token. LM head 2*32*8 = 512 per sampling row.
    Attention 4*2*4 = 32 FLOPs per (query, key) pair. T = 3 + 1 = 4 tokens, S = 2
    sampling rows; pairs: the chunk 3*2 + 3*4/2 = 12, the decode 5 + 1 = 6: 18.
    FLOPs = 1152*4 + 512*2 + 32*18 = 4608 + 1024 + 576 = 6,208.
    Bytes: weights 576*2 + LM head 32*8*2 = 1,664; a token's KV 1 layer x 2 x 1 head
    x 4 x 2 bytes = 16; KV read 6 (decode) + 2 (the chunk's context), written 4:
    12 tokens, 192 bytes. 1,856 bytes in all."""
    work = DispatchWork(TOY, TOY_GPU)
    assert work.dispatch([(3, 2)], 1, 5) == (6208, 1856)
    counts = WorkCounts()
    counts.add([(3, 2)], 1, 5)
    assert counts.as_tuple() == (4, 2, 18, 8, ((4, 1),))
    # Over 10 busy seconds at 1,000 FLOP/s and 1,000 bytes/s.
    used = Utilisation.of(work, counts, 10.0)
    assert (used.mfu, used.mbu) == (0.6208, 0.1856)


def test_tensor_parallel_peaks_and_replicated_kv():
    """On 2 GPUs the peaks double and the one KV head is kept on both: 16 bytes a
    token on each, 32 in all; FLOPs and weight bytes do not change."""
    work = DispatchWork(TOY, TOY_GPU, tp=2)
    assert (work.peak_flops, work.bandwidth, work.kv_bytes_per_token) == (2000.0, 2000.0, 32)
    assert work.dispatch([(3, 2)], 1, 5) == (6208, 1664 + 12 * 32)


def test_a_folded_stretch_in_closed_form():
    """3 dispatches of 2 decodes whose contexts sum to 10, 12, 14: pairs and KV read
    12 + 14 + 16 = 42 = 3*10 + 2*(3*4/2)."""
    folded, stepped = WorkCounts(), WorkCounts()
    folded.add_decodes(3, 2, 10)
    for contexts in (10, 12, 14):
        stepped.add((), 2, contexts)
    assert folded.as_tuple() == stepped.as_tuple() == (6, 6, 42, 42, ((2, 3),))


def test_moe_weights_read_by_tokens():
    """An MoE layer reads the experts its tokens touch: 4 experts, 1 per token, of
    3*8*16 = 384 parameters (768 bytes) each: a 1-token dispatch reads 1 - (3/4)^1 =
    1/4 of them, a 2-token one 1 - 9/16 = 7/16."""
    moe = ModelSpec("toy-moe", layers=1, d_model=8, heads=2, kv_heads=1, head_dim=4,
                    intermediate=0, vocab=32, experts=4, experts_per_token=1,
                    expert_intermediate=16, moe_layers=1)
    work = DispatchWork(moe, TOY_GPU)
    experts = 4 * 768
    fixed = (192 + 4 * 384 + 8 * 4) * 2 - experts + 512  # attention, router, LM head
    assert work.weight_bytes(1) == fixed + experts / 4
    assert work.weight_bytes(2) == fixed + experts * 7 / 16


class _Recording:
    """A cost model that notes every dispatch's shape it prices (stepped only)."""

    def __init__(self, cost, shapes):
        self.cost, self.shapes = cost, shapes

    def __getattr__(self, name):
        return getattr(self.cost, name)

    def dispatch_seconds(self, chunks, rows, contexts):
        self.shapes.append((list(chunks), rows, contexts))
        return self.cost.dispatch_seconds(chunks, rows, contexts)

    def decode_seconds(self, rows, contexts):
        self.shapes.append(([], rows, contexts))
        return self.cost.decode_seconds(rows, contexts)


def _engine(records, options, fast):
    trace = parse_trace(trace_bytes(records), "u.jsonl")
    return Engine(trace.workload, Options.resolve(trace.config, options), "vllm",
                  fast_forward=fast)


@pytest.mark.parametrize("seed", [0, 3])
def test_folded_run_equals_the_sum_over_its_dispatches(seed):
    """A random run with a cost model, folded, has the FLOPs and bytes of the sum of
    its dispatches computed one by one in a stepped run (exactly: FLOPs are
    integers, and so are these bytes, far below 2**53, since Llama-3-8B's weights and
    KV are whole bytes), and folding happened."""
    options = random_engine_options(random.Random(1000 + seed), cost_model=True)
    records = random_workload(seed)
    folded = _engine(records, options, True)
    result = folded.run()
    assert folded.folded > 0
    shapes = []
    stepped = _engine(records, options, False)
    stepped.ledger.cost = _Recording(stepped.ledger.cost, shapes)
    plain = stepped.run()
    assert folded.stats.work.as_tuple() == stepped.stats.work.as_tuple()
    work = DispatchWork.of(folded.cost)
    flops = bytes_ = 0
    for shape in shapes:
        f, b = work.dispatch(*shape)
        flops += f
        bytes_ += b
    assert len(shapes) == result.summary["iterations"]
    summary = result.summary
    assert summary["model_flops"] == float(flops) and summary["hbm_bytes"] == bytes_
    busy = summary["busy_seconds"]
    assert summary["model_flops_utilisation"] == round(flops / (folded.stats.busy_seconds * 989e12), 6)
    assert summary["hbm_bandwidth_utilisation"] == round(bytes_ / (folded.stats.busy_seconds * 3.35e12), 6)
    assert 0 < summary["model_flops_utilisation"] < 1 and 0 < summary["hbm_bandwidth_utilisation"] < 1 and busy > 0
    assert plain.summary == summary


def test_no_cost_model_no_utilisation():
    """Ticks have no FLOPs: the fields are null."""
    result = _engine(random_workload(1), {}, True).run()
    assert [result.summary[k] for k in ("model_flops", "hbm_bytes", "model_flops_utilisation", "hbm_bandwidth_utilisation")] == [None] * 4


def test_series_buckets_add_up_to_the_run():
    """The work series of a folded run (folding kept on: it is fed stretch by stretch)
    spreads the run's busy time, FLOPs and bytes over its buckets: they add up to
    the totals within float rounding, and each bucket's busy share is at most 1."""
    records = [{"type": "request", "id": f"r{i}", "arrival": 3 * i, "prompt_tokens": 30,
                "output_tokens": 200} for i in range(4)]
    options = dict(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002)
    engine = _engine(records, options, True)
    series = engine.ledger.draw_work()
    result = engine.run()
    assert engine.folded > 0
    used = engine.stats.utilisation()
    assert sum(series.flops) == pytest.approx(used.flops, rel=1e-12)
    assert sum(series.bytes) == pytest.approx(used.bytes, rel=1e-12)
    assert sum(series.busy) == pytest.approx(engine.stats.busy_seconds, rel=1e-12)
    points = series.points(engine.stats.makespan)
    assert len(points) == len(series.busy) <= BUCKETS
    assert points[0][0] == 0.0 and points[-1][1] == pytest.approx(result.summary["makespan"])
    for start, end, busy, mfu, mbu in points:
        assert 0 <= busy <= 1 + 1e-9 and 0 <= mfu < busy + 1e-12 and 0 <= mbu <= 1


def test_series_by_hand():
    """Buckets of 1 step until a dispatch ends past 2,048 of them; then 2, merged in
    pairs. A dispatch from step 1 to step 5 puts a quarter of itself in each of 4
    buckets."""
    clock = Clock(step_seconds=0.5)
    series = WorkSeries(DispatchWork(TOY, TOY_GPU), clock)
    series.dispatch(1, 5, 2.0, [(3, 2)], 1, 5)
    assert series.width == 1 and series.busy == [0.0, 0.5, 0.5, 0.5, 0.5]
    assert series.flops[1:] == [6208 / 4] * 4
    # Bucket 1 is half a second: busy share 1; MFU 1552 / (0.5 x 1000) = 3.104.
    assert series.points()[1] == (0.5, 1.0, 1.0, 3.104, 464 / 500)
    series.dispatch(BUCKETS, BUCKETS + 1, 0.5, [], 1, 0)
    assert series.width == 2 and len(series.busy) == BUCKETS // 2 + 1
    assert series.busy[:3] == [0.5, 1.0, 0.5]
    pooled = WorkSeries.pooled([series, series])
    assert pooled.engines == 2 and pooled.busy[:3] == [1.0, 2.0, 1.0]
    # Two engines' peaks: the same shares as one.
    assert pooled.points()[1][2:] == series.points()[1][2:]


# --- the Perfetto counters and the report's series (cli/runs.py wires them) -------------

LONE = [{"type": "config", "cost_model": "llama-3-8b/h100-sxm", "time_unit": "s"},
        {"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 2000,
         "output_tokens": 300},
        {"type": "request", "id": "b", "arrival": 0.5, "prompt_tokens": 100,
         "output_tokens": 20}]


def _cli(tmp_path, records, *flags):
    from test_cli import run, write
    trace = write(tmp_path, records)
    status, out, err = run(["replay", trace, "--json", *flags])
    assert status == 0, err
    return json.loads(out)["runs"]


def test_perfetto_counts_utilisation_per_bucket(tmp_path):
    """With a cost model each process has a `GPU utilisation` counter per time bucket
    from 0, then zeros at the run's end; busy share x bucket length adds up to the
    busy time (to the 2 decimals of the percentages), and MFU x length x peak to the
    FLOPs. A fleet has the counters of each replica; a run without a cost model none."""
    target = tmp_path / "p.json"
    run = _cli(tmp_path, LONE, "--perfetto", str(target))[0]
    events = [e for e in json.loads(target.read_text())["traceEvents"]
              if e["name"] == "GPU utilisation"]
    assert {e["pid"] for e in events} == {1000} and 2 < len(events) <= BUCKETS + 1
    assert events[0]["ts"] == 0 and events[-1]["args"] == {"busy": 0, "MFU": 0, "MBU": 0}
    assert events[-1]["ts"] == pytest.approx(run["makespan"] * 1e6, abs=1)
    spans = [(b["ts"] - a["ts"]) / 1e6 for a, b in zip(events, events[1:])]
    busy = sum(e["args"]["busy"] / 100 * s for e, s in zip(events, spans))
    flops = sum(e["args"]["MFU"] / 100 * s * 989e12 for e, s in zip(events, spans))
    assert busy == pytest.approx(run["busy_seconds"], rel=1e-3)
    assert flops == pytest.approx(run["model_flops"], rel=2e-2)
    fleet = tmp_path / "f.json"
    _cli(tmp_path, LONE, "--perfetto", str(fleet), "--replicas", "2")
    pids = {e["pid"] for e in json.loads(fleet.read_text())["traceEvents"]
            if e["name"] == "GPU utilisation"}
    assert pids == {1000, 1001}
    # Ticks have no FLOPs: no counter.
    _cli(tmp_path, [{"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 4,
                     "output_tokens": 3}], "--perfetto", str(target))
    assert "GPU utilisation" not in target.read_text()


def test_the_report_series_holds_utilisation_over_time(tmp_path, monkeypatch):
    """`RunSeries.work` (what --report may draw): the run's FLOPs, bytes and busy time
    per bucket, a fleet's replicas pooled against all their GPUs."""
    import scheduler_sim.io.report_series as series  # (cli/runs.py loads it when asked)
    kept = []

    class Keeping(series.RunSeries):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            kept.append(self)

    monkeypatch.setattr(series, "RunSeries", Keeping)
    for flags, engines in (((), 1), (("--replicas", "2"), 2)):
        kept.clear()
        run = _cli(tmp_path, LONE, "--report", str(tmp_path / "r.html"), *flags)[0]
        work = kept[0].work
        assert work.engines == engines
        assert sum(work.flops) == pytest.approx(run["model_flops"], rel=1e-9)
        assert sum(work.bytes) == pytest.approx(run["hbm_bytes"], rel=1e-9)
        assert sum(work.busy) == pytest.approx(run["busy_seconds"], rel=1e-6)
    kept.clear()
    _cli(tmp_path, [{"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 4,
                     "output_tokens": 3}], "--report", str(tmp_path / "r.html"))
    assert kept[0].work is None


def test_a_sweep_over_the_mfu_option_has_the_utilisation_beside_it(tmp_path):
    """The option `mfu` (the calibration's gemm_efficiency, an input) and the results
    `model_flops_utilisation` and `hbm_bandwidth_utilisation` are distinct columns:
    linear layers at 0.3 of the peak, not 0.5, take longer for the same dispatches,
    so the utilisation over busy time falls."""
    import csv
    import io
    from test_cli import run
    from conftest import ROOT
    status, out, err = run(["sweep", str(ROOT / "traces" / "quickstart.jsonl"),
                            "--cost-model", "llama-3-8b/h100-sxm", "--grid", "mfu=0.3,0.5",
                            "--policy", "vllm", "--csv", "-"])
    assert status == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    head = rows[0]
    assert head.count("mfu") == head.count("model_flops_utilisation") == 1
    low, high = ({name: value for name, value in zip(head, row)} for row in rows[1:])
    assert (low["mfu"], high["mfu"]) == ("0.3", "0.5")
    assert low["model_flops"] == high["model_flops"]
    assert float(low["model_flops_utilisation"]) < float(high["model_flops_utilisation"])
