"""Dispatches that last several clock steps (a cost model): E1 and E4 with real durations.

These tests use a 10 ms clock and 10 ms trace ticks (`clock_resolution` and
`tick_seconds` 0.01), so that a trace tick and a clock step are the same, and the
uncalibrated physics (`calibration: none`, `Coefficients()`), so that their durations
do not move when the shipped calibrations are refitted.

Llama-3-8B on an H100 SXM under `Coefficients()`: the linear layers' 6,979,321,856
parameters are 13,958,643,712 bytes read at 3.35e12 x 0.78 = 2.613e12 B/s = 5.34200 ms
and 2 x 6,979,321,856 = 13,958,643,712 FLOPs a token at 989e12 x 0.75 = 741.75e12 FLOP/s
= 0.0188185 ms a token, the two blended as sqrt(m^2 + c^2); the LM head reads 128,256 x
4,096 x 2 bytes = 1,050,673,152 / 2.613e12 = 0.402095 ms (and computes 1,050,673,152
FLOPs a sampled row / 741.75e12 = 1.4e-6 ms); attention costs 32 x 4 x 32 x 128 = 524,288
FLOPs a (query, key) pair at 989e12 x 0.5 = 494.5e12 FLOP/s; KV is 131,072 bytes a token
at 3.35e12 x 0.8 = 2.68e12 B/s; the elementwise kernels move 32 x 2 x (8 x 4,096 + 3 x
14,336 + 2 x (32 + 8) x 128) = 5,505,024 bytes a token at 3.35e12 x 0.5 = 1.675e12 B/s;
and each dispatch adds a 0.5 ms step.

A prefill of 2,048 tokens (from an empty context) thus lasts: linear sqrt(5.34200^2 +
(2,048 x 0.0188185 = 38.5403)^2) = 38.9088 ms; LM head 0.402097 ms; attention 2,048 x
2,049 / 2 = 2,098,176 pairs x 524,288 / 494.5e12 = 2.22457 ms; KV write 2,048 x 131,072 /
2.68e12 = 0.100162 ms; elementwise 2,048 x 5,505,024 / 1.675e12 = 6.73092 ms; step 0.5
ms: 48.8666 ms in all. A decode of one row at context 2,048 lasts: linear sqrt(5.34200^2
+ 0.0188185^2) = 5.34203 ms; LM head 0.402097 ms; it reads the KV of 2,049 tokens (its
context and itself) and writes one: 2,050 x 131,072 / 2.68e12 = 0.100260 ms; elementwise
0.003287 ms; step 0.5 ms: 6.34767 ms.
"""
from __future__ import annotations

from conftest import req, simulate

COST = dict(block_size=16, num_blocks=400, cost_model="llama-3-8b/h100-sxm", tick_seconds=0.01,
            clock_resolution=0.01, calibration="none")


def cancel(rid: str, at: int) -> dict:
    return {"type": "cancel", "id": rid, "at": at}


def test_a_prefill_chunk_lasts_its_modelled_time_in_ticks():
    """A 2,048-token prefill of Llama-3-8B on an H100 lasts 48.8666 ms (the module
    docstring), which is ceil(4.88666) = 5 ticks of 10 ms."""
    s = simulate([req("a", 0, 2048, 2)], **COST)
    assert s.of("dispatch")[0]["done"] == 5
    assert s.req["a"].first_token_at == 5


def test_a_cancel_inside_a_dispatch_waits_for_its_completion():
    """E4: a's first chunk (2,048 of its 4,000 tokens, the token budget) runs from 0 to
    5 (48.8666 ms, the module docstring); the cancel at 3 takes effect at 5, after the
    completion (E1), and a never dispatches again; b, arriving at 4 inside the dispatch,
    is registered at 4 and admitted at 5."""
    s = simulate([req("a", 0, 4000, 3), req("b", 4, 4, 2), cancel("a", 3)], **COST)
    assert s.of("dispatch")[0]["rows"][0]["tokens"] == 2048
    assert [(e["tick"], e["event"], e.get("id")) for e in s.events[:9]] == [
        (0, "arrival", "a"), (0, "admitted", "a"), (0, "snapshot", None),
        (0, "dispatch", None), (4, "arrival", "b"), (5, "cancelled", "a"),
        (5, "admitted", "b"), (5, "snapshot", None), (5, "dispatch", None)]
    assert s.of("cancelled")[0]["state"] == "running"
    assert [r["id"] for d in s.of("dispatch")[1:] for r in d["rows"]] == ["b", "b"]
    assert s.req["b"].admitted_at == 5


def test_under_a_cost_model_every_output_is_in_seconds():
    """With 10 ms steps a TTFT of 5 steps is 0.05 s: --json says time_unit "s" and gives
    ttft_mean 0.05, the makespan 0.06 s (the prefill ends at 48.8666 ms, step 5; the decode
    at context 2,048 starts from there and ends at 48.8666 + 6.34767 = 55.2142 ms, step 6;
    the module docstring), and the events carry `time` and `done` in seconds instead of
    ticks."""
    import json
    import io
    from pathlib import Path
    import tempfile
    from scheduler_sim.cli.main import main
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "t.jsonl"
        trace.write_text(json.dumps({"type": "request", "id": "a", "arrival": 0,
                                     "prompt_tokens": 2048, "output_tokens": 2}) + "\n")
        out = io.StringIO()
        argv = [str(trace), "--block-size", "16", "--num-blocks", "400",
                "--cost-model", "llama-3-8b/h100-sxm", "--clock-resolution", "0.01",
                "--calibration", "none"]
        assert main(["replay", *argv, "--json"], out=out, err=io.StringIO()) == 0
        doc = json.loads(out.getvalue())
        events = io.StringIO()
        assert main(["replay", *argv, "--events", "-"], out=events, err=io.StringIO()) == 0
    assert doc["results_time_unit"] == "s"
    run = doc["runs"][0]
    assert (run["ttft_mean"], run["makespan"]) == (0.05, 0.06)
    dispatches = [json.loads(line) for line in events.getvalue().splitlines()
                  if '"dispatch"' in line]
    assert [(d["time"], d["done"]) for d in dispatches] == [(0, 0.05), (0.05, 0.06)]
    assert all("tick" not in d for d in dispatches)
