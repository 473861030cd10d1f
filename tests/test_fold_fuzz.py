"""benchmarks/fold_fuzz.py: folded against stepped over drawn cases. A handful of its
seeds agree and reach the folding paths they were picked for; a fold broken on purpose
is reported, with its reproduction; its one-line account of a difference."""
from __future__ import annotations

import importlib
import json

import pytest
from conftest import ROOT, load_script

fuzz = load_script(ROOT / "benchmarks" / "fold_fuzz.py", "bench_fold_fuzz")

# Seeds (fleet share 0.2) and the folding paths each reaches, as the fuzzer counts them.
SEEDS = {
    292: ("vllm", {"folded", "chunks_folded", "finishes_behind"}),
    103: ("continuous", {"folded", "through_counted", "arrivals_counted", "blocked_counted",
                         "blocked_admitted"}),
    213: ("sglang", {"folded"}),          # a cost model and host memory
    11: ("static", {"folded"}),           # prefill and decode replicas
    22: ("dynamic", {"folded"}),          # host memory, prefix caching
    4: ("serial", {"folded"}),            # a fleet with a router signal delay
    25: ("continuous", {"folded"}),       # with a listener as well
    65: ("vllm", {"folded"}),             # for a summary alone as well
}


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_seeds_agree_and_reach_their_folding_paths(seed):
    case = fuzz.run_case(seed, 0.2)
    policy, paths = SEEDS[seed]
    assert (case["policy"], case["status"], case["detail"]) == (policy, "same", "")
    assert {name for name, n in case["counts"].items() if n} == paths


def test_a_case_is_the_same_for_the_same_seed_and_share():
    assert fuzz.draw_case(25, 0.2) == fuzz.draw_case(25, 0.2)
    assert fuzz.draw_case(25, 0.2) != fuzz.draw_case(26, 0.2)
    records, options, extra = fuzz.draw_case(25, 0.2)
    assert (options["policy"], extra, records[0]["type"]) == ("continuous", "listened",
                                                             "config")


def _fold_past_until(monkeypatch):
    """Every fold allowed 3 steps past the next outside event (a bug put in on purpose)."""
    real = importlib.import_module("scheduler_sim.engine.fast.folding").fold

    def broken(engine, flight, until, *args):
        return real(engine, flight, until + 3, *args)

    for name in ("finishes", "behind", "through", "counted_fold", "arrivals", "blocked"):
        module = importlib.import_module(f"scheduler_sim.engine.fast.{name}")
        monkeypatch.setattr(module, "fold", broken)


def test_a_fold_broken_on_purpose_is_reported_with_its_reproduction(monkeypatch, capsys):
    """Seed 42 (continuous, 11 requests) agrees as the engine folds; with its folds let
    past the next outside event it does not, and the run says where and how to rerun it."""
    assert fuzz.main(["--seeds", "42-42"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "differences: 0"
    _fold_past_until(monkeypatch)
    case = fuzz.run_case(42, 0.2)
    assert case["status"] == "differs"
    assert case["detail"].startswith("without a listener: summary iterations: stepped 178, "
                                     "folded ")
    assert fuzz.main(["--seeds", "41-43"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-3:] == ["differences: 1", f"  seed 42 (continuous): {case['detail']}",
                        "    reproduce: python3 benchmarks/fold_fuzz.py --seeds 42-42 "
                        "--fleet-share 0.2"]
    assert out[1].split()[:5] == ["continuous", "1", "1", "0", "1"]  # (41 and 43: vllm)


def test_a_difference_is_told_in_one_line():
    """The first field that differs, in the summary, then the request records, then the
    events; an error as the replay raised it."""
    def text(summary, records):
        return json.dumps([summary, None, False, records])

    a = text({"iterations": 5, "ttft_p50": 2}, [{"id": "r0", "finished": 9}])
    assert fuzz._first_difference(a, text({"iterations": 6, "ttft_p50": 3},
                                          [{"id": "r0", "finished": 9}]), [], [], False,
                                  True) == ("without a listener: summary iterations: stepped "
                                            "5, folded 6 (2 fields differ)")
    assert fuzz._first_difference(a, text({"iterations": 5, "ttft_p50": 2},
                                          [{"id": "r0", "finished": 10}]), [], [], True,
                                  True) == ("with a listener: request r0 finished: stepped 9, "
                                            "folded 10")
    assert fuzz._first_difference(a, a, [{"tick": 1}], [{"tick": 2}], True, True) == (
        "with a listener: event 0: stepped {'tick': 1} / folded {'tick': 2}")
    assert fuzz._first_difference(a, a, [], [{"tick": 2}], False, False) == (
        "without a listener, summary alone: events 0 stepped against 1 folded")
    assert fuzz._first_difference(a, "error: InvariantError: x", [], [], False, True) == (
        f"without a listener: stepped {a[:150]!r} / folded 'error: InvariantError: x'")


def test_cases_come_out_the_same_in_worker_processes():
    seeds = range(14, 19)  # (sglang, continuous, sglang, continuous, vllm)
    assert fuzz.run(seeds, 0.2, jobs=2) == fuzz.run(seeds, 0.2)
    assert [c["policy"] for c in fuzz.run(seeds, 0.2, policies={"vllm"})] == ["vllm"]
