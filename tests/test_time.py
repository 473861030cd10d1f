"""Dispatches that last several clock steps (a cost model): E1 and E4 with real durations.

These tests use a 10 ms clock and 10 ms trace ticks (`clock_resolution` and
`tick_seconds` 0.01), so that a trace tick and a clock step are the same.
"""
from __future__ import annotations

from conftest import req, simulate

COST = dict(block_size=16, num_blocks=400, cost_model="llama-3-8b/h100-sxm", tick_seconds=0.01,
            clock_resolution=0.01)


def cancel(rid: str, at: int) -> dict:
    return {"type": "cancel", "id": rid, "at": at}


def test_a_prefill_chunk_lasts_its_roofline_time_in_ticks():
    """A 2,048-token prefill of Llama-3-8B on an H100: compute 2 x 8e9 x 2048 + 2 x 32 x
    4096 x 2048^2 = 3.3868e13 FLOP at 4e14 FLOP/s = 0.08467 s, above its memory time
    (16e9 B of weights + 131072 x 4096 B of KV at 2.68e12 B/s = 0.00617 s); plus 0.0005 s
    overhead: 0.08517 s, which is ceil(8.517) = 9 ticks of 10 ms."""
    s = simulate([req("a", 0, 2048, 2)], **COST)
    assert s.of("dispatch")[0]["done"] == 9
    assert s.req["a"].first_token_at == 9


def test_a_cancel_inside_a_dispatch_waits_for_its_completion():
    """E4: a's first chunk runs from 0 to 9; the cancel at 3 takes effect at 9, after the
    completion (E1), and a never dispatches again; b, arriving at 5 inside the dispatch,
    is registered at 5 and admitted at 9."""
    s = simulate([req("a", 0, 4000, 3), req("b", 5, 4, 2), cancel("a", 3)], **COST)
    assert [(e["tick"], e["event"], e.get("id")) for e in s.events[:9]] == [
        (0, "arrival", "a"), (0, "admitted", "a"), (0, "snapshot", None),
        (0, "dispatch", None), (5, "arrival", "b"), (9, "cancelled", "a"),
        (9, "admitted", "b"), (9, "snapshot", None), (9, "dispatch", None)]
    assert s.of("cancelled")[0]["state"] == "running"
    assert [r["id"] for d in s.of("dispatch")[1:] for r in d["rows"]] == ["b", "b"]
    assert s.req["b"].admitted_at == 9


def test_under_a_cost_model_every_output_is_in_seconds():
    """With 10 ms steps a TTFT of 9 steps is 0.09 s: --json says time_unit "s" and gives
    ttft_mean 0.09, the makespan (two dispatches: 9 steps, then a decode of 1) 0.1 s, and
    the events carry `time` and `done` in seconds instead of ticks."""
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
                "--cost-model", "llama-3-8b/h100-sxm", "--clock-resolution", "0.01"]
        assert main(["replay", *argv, "--json"], out=out, err=io.StringIO()) == 0
        doc = json.loads(out.getvalue())
        events = io.StringIO()
        assert main(["replay", *argv, "--events", "-"], out=events, err=io.StringIO()) == 0
    assert doc["results_time_unit"] == "s"
    run = doc["runs"][0]
    assert (run["ttft_mean"], run["makespan"]) == (0.09, 0.1)
    dispatches = [json.loads(line) for line in events.getvalue().splitlines()
                  if '"dispatch"' in line]
    assert [(d["time"], d["done"]) for d in dispatches] == [(0, 0.09), (0.09, 0.1)]
    assert all("tick" not in d for d in dispatches)
