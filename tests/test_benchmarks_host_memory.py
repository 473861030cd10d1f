"""benchmarks/host_memory.py's pieces on a tiny made-up trace, in-process: its five modes
are flags replay accepts, and a run's line reads the summary's host-memory fields."""
from __future__ import annotations

import json
from pathlib import Path

from conftest import load_script, run_cli, write_trace

ROOT = Path(__file__).resolve().parent.parent
bench = load_script(ROOT / "benchmarks" / "host_memory.py", "bench_host_memory")


def test_every_mode_replays_and_fills_its_line(tmp_path):
    """Eight requests of 40 tokens (a shared head of 16) on 24 blocks of 16 tokens under
    vllm: each mode's flags run, the line has a cell per heading, and the swap mode's
    line counts swap-outs where the recompute one counts none."""
    records = [{"type": "config", "time_unit": "s"}]
    records += [{"type": "request", "id": f"r{i}", "arrival": i * 0.001,
                 "prompt_token_ids": list(range(16)) + [100 * i + j for j in range(24)],
                 "output_tokens": 60} for i in range(8)]
    trace = write_trace(tmp_path, records)
    lines = {}
    for mode, flags in bench.modes(1.0):
        code, out, err = run_cli(["replay", trace, "--policy", "vllm", *bench.ENGINE,
                                  "--num-blocks", "24", *flags, "--json"])
        assert code == 0, err
        run = json.loads(out)["runs"][0]
        lines[mode] = bench.row("t", "vllm", mode, 2.0, 1.0, run)
        assert len(lines[mode]) == len(bench.HEADS)
    assert [m for m, _ in bench.modes(1.0)] == ["recompute", "recompute, prefix cache",
                                                "swap", "tier", "tier + swap"]
    assert lines["recompute"][13] == "0 / 0" and lines["swap"][13] != "0 / 0"
    assert lines["recompute"][-1] == "2.00 (2.00x)"
