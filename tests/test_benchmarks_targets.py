"""benchmarks/targets.py's logic, in-process and fast: the targets scaled by the
calibration loop, each verdict, the groups `--only` selects, and one child run."""
from __future__ import annotations

import pytest
from conftest import ROOT, load_script

bench = load_script(ROOT / "benchmarks" / "targets.py", "bench_targets")


def test_cpu_targets_scale_with_the_calibration_loop():
    # 1.0 s where the loop took 0.6 s: a run 1.655x the loop beside it is 0.993 s.
    met = bench.cpu_target("azure", 1.55, 1.0, 1.655)
    assert met.met and met.figure == "1.55 s CPU, 1.655x the calibration loop = 0.99 s scaled"
    assert met.target == "under 1 s scaled"
    assert not bench.cpu_target("azure", 1.55, 1.0, 1.667).met  # (1.0002 s)
    assert bench.cpu_target("azure", 0.59, 1.0, 1.5).met
    assert met.line() == ("| azure | 1.55 s CPU, 1.655x the calibration loop = 0.99 s scaled"
                          " | under 1 s scaled | met |")


def test_a_scaled_run_is_paired_with_the_loops_beside_it(monkeypatch):
    """Loops of 1.0, 1.5 and 0.5 s around runs of 3.75 and 2.0 s: ratios 3.75 / 1.25
    = 3.0 and 2.0 / 1.0 = 2.0, their median 2.5; the run's figures are the medians
    (CPU 2.875 s)."""
    cpus = iter([1.0, 3.75, 1.5, 2.0, 0.5])
    argvs = []

    def child(argv):
        argvs.append(argv)
        return bench.Run(1.0, next(cpus), 10.0)
    monkeypatch.setattr(bench, "child", child)
    runs = bench.Bench(repeat=2)
    run, ratio = runs.measure_scaled("x", ["-m", "x"], 2)
    assert (ratio, run.cpu, run.rss) == (2.5, 2.875, 10.0)
    assert [a == ["-c", bench.CALIBRATION] for a in argvs] == [True, False, True, False, True]
    assert runs.measure_scaled("x", ["-m", "y"]) == (run, ratio)  # (once per label)


def test_ratio_memory_flat_and_growth_verdicts():
    assert bench.ratio_target("events", 1.8, 1.8).met
    assert not bench.ratio_target("events", 1.81, 1.8).met
    assert bench.rss_target("1M", 99.6, 100).met and not bench.rss_target("1M", 100, 100).met
    curve = {10_000: 20.0, 100_000: 30.0, 300_000: 31.0, 1_000_000: 33.0}
    flat = bench.flat_target("curve", curve)
    assert flat.met and flat.figure == "10k 20, 100k 30, 300k 31, 1M 33 MB (1.10x from 100k to 1M)"
    assert not bench.flat_target("curve", {**curve, 1_000_000: 33.1}).met
    growth = bench.growth_target("fleet", 10.0, 12.5, 1.3)
    assert growth.met and growth.figure == "12.50 / 10.00 s = 1.25x"
    assert not bench.growth_target("fleet", 10.0, 13.0, 1.3).met


def test_a_growth_is_judged_on_the_pairs_run_in_turn(monkeypatch):
    """One replica's runs of 2.0, 4.0 and 3.0 s, each followed by 64 replicas' of 2.4,
    4.4 and 3.6 s: ratios 1.2, 1.1 and 1.2, median 1.2; the medians 3.0 and 3.6 s. The
    verdict judges the paired ratio: 1.2 met under 1.3, where 2.0 / 1.5 would not be."""
    cpus = iter([2.0, 2.4, 4.0, 4.4, 3.0, 3.6])
    argvs = []

    def child(argv):
        argvs.append(argv[-1])
        cpu = next(cpus)
        return bench.Run(1.0, cpu, 10.0, cpu / 10)  # (a tenth of it the system's)
    monkeypatch.setattr(bench, "child", child)
    runs = bench.Bench(repeat=3)
    one, many, paired = runs.measure_pair("1", ["-m", "1"], "64", ["-m", "64"])
    assert argvs == ["1", "64", "1", "64", "1", "64"]
    assert (one.cpu, many.cpu, paired) == (3.0, 3.6, 1.2)
    # The rows: wall, CPU and its system share (medians 0.30 and 0.36 s), peak MB.
    assert runs.done["64"] is many and runs.rows[-2:] == ["| 1 | 1.0 | 3.00 | 0.30 | 10 |",
                                                          "| 64 | 1.0 | 3.60 | 0.36 | 10 |"]
    growth = bench.growth_target("fleet", 1.5, 2.0, 1.3, paired)
    assert growth.met and growth.figure == (
        "2.00 / 1.50 s (medians); 1.20x, the median of the pairs run in turn")
    assert not bench.growth_target("fleet", 1.5, 2.0, 1.3, 1.3).met
    # Their user CPU (nine tenths of each): the same ratios, median 1.2.
    assert runs.user_ratio["64"] == pytest.approx(1.2)


def test_a_pair_user_ratio_leaves_the_system_time_out(monkeypatch):
    """A runs of 1.0 s (0.1 of it system) and 2.0 s (0.0), B runs of 2.0 s (0.2) and
    3.0 s (1.0): CPU ratios 2.0 and 1.5 (median 1.75), user ratios 1.8 / 0.9 = 2.0
    and 2.0 / 2.0 = 1.0 (median 1.5); the note goes under the verdicts."""
    figures = iter([(1.0, 0.1), (2.0, 0.2), (2.0, 0.0), (3.0, 1.0)])

    def child(argv):
        cpu, system = next(figures)
        return bench.Run(1.0, cpu, 10.0, system)
    monkeypatch.setattr(bench, "child", child)
    runs = bench.Bench(repeat=2)
    _, _, ratio = runs.measure_pair("A", ["A"], "B", ["B"])
    assert ratio == pytest.approx(1.75) and runs.user_ratio["B"] == pytest.approx(1.5)
    runs.judge(bench.ratio_target("B against A", ratio, 1.8))
    runs.note("Not a target: 1.50x")
    assert runs.table().splitlines()[-3:] == ["| B against A | 1.75x | within 1.8x | met |",
                                              "", "Not a target: 1.50x"]


def test_a_pair_removes_the_file_its_second_command_writes(monkeypatch, tmp_path):
    """`written`: after each B run the file is gone, so the next B run writes a new
    one (the parent removes it, not the child)."""
    events = tmp_path / "events.jsonl"
    seen = []

    def child(argv):
        if argv[-1] == "B":
            seen.append(events.exists())  # (what the B run finds: no file left over)
            events.write_text("x")
        return bench.Run(1.0, 1.0, 10.0)
    monkeypatch.setattr(bench, "child", child)
    bench.Bench(repeat=3).measure_pair("A", ["A"], "B", ["B"], written=events)
    assert seen == [False, False, False] and not events.exists()


def test_only_selects_groups_in_order():
    assert bench.selected(None) == list(bench.GROUPS)
    assert bench.selected("fleets, azure") == ["azure", "fleets"]
    with pytest.raises(SystemExit, match="unknown group 'azur'"):
        bench.selected("azur")


def test_a_child_is_measured_once_per_label():
    runs = bench.Bench(repeat=1)
    first = runs.measure("noop", ["-c", "pass"])
    assert first.cpu >= 0 and first.rss > 1 and runs.measure("noop", ["-c", "1/0"]) is first
    runs.judge(bench.rss_target("noop", first.rss, 10 ** 6))
    assert runs.table().splitlines()[-1].endswith("| met |")
