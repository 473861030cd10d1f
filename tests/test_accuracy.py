"""benchmarks/accuracy.py's statistics, kernel sums and tables on hand-computed numbers
(in-process; no public data)."""
from __future__ import annotations

import json

import pytest
from conftest import ROOT, load_script

acc = load_script(ROOT / "benchmarks" / "accuracy.py", "bench_accuracy")


def test_percentiles_are_nearest_rank():
    """p90 and p99 are the values at rank ceil(p/100 n) of the sorted sample."""
    assert acc.percentile([5, 1, 4, 2, 3], 90) == 5           # rank ceil(4.5) = 5
    assert acc.percentile(list(range(1, 11)), 90) == 9        # rank 9
    assert acc.percentile(list(range(1, 11)), 99) == 10       # rank ceil(9.9) = 10
    assert acc.percentile(list(range(200, 0, -1)), 99) == 198  # rank 198
    assert acc.percentile([7], 99) == 7
    assert acc.summary([1, 2, 3, 4]) == {"mean": 2.5, "p90": 4, "p99": 4}


def test_errors_and_mape():
    """Relative error (pred - actual) / actual; MAPE the mean of |errors| in percent."""
    assert acc.relative_error(110, 100) == pytest.approx(0.1)
    assert acc.relative_error(90, 100) == pytest.approx(-0.1)
    assert acc.mape([0.1, -0.2, 0.3]) == pytest.approx(20.0)
    assert acc.worst([0.1, -0.25, 0.2]) == 25.0
    assert acc.median([3, 1, 2]) == 2 and acc.median([4, 1, 3, 2]) == 2.5


def test_itl_uses_the_generated_tokens():
    """(E2E - TTFT) / (N - 1): 2.5 s over 10 gaps."""
    assert acc.itl(0.1, 2.6, 11) == pytest.approx(0.25)


def test_compare_per_metric_and_statistic():
    """Each statistic of each metric: predicted, actual, error."""
    actual = {"ttft": [float(x) for x in range(1, 11)], "itl": [1.0] * 10, "e2e": [2.0] * 10}
    predicted = {"ttft": [float(x) for x in range(2, 12)], "itl": [0.5] * 10,
                 "e2e": [3.0] * 10}
    result = acc.compare(actual, predicted)
    assert result["ttft"]["mean"] == {"predicted": 6.5, "actual": 5.5,
                                      "error": pytest.approx(1 / 5.5)}
    assert result["ttft"]["p90"] == {"predicted": 10.0, "actual": 9.0,
                                     "error": pytest.approx(1 / 9)}
    assert result["ttft"]["p99"]["error"] == pytest.approx(0.1)
    assert result["itl"]["p99"]["error"] == -0.5
    assert result["e2e"]["mean"]["error"] == 0.5


def fake_run(name, split, error):
    cell = {s: {"predicted": 1.0, "actual": 1.0, "error": error} for s in acc.STATS}
    return {"run": name, "split": split, "compared": 10,
            "metrics": {m: cell for m in acc.METRICS}}


def test_overall_groups_runs_by_split():
    """MAPE over runs of the per-run error, and the largest, per split and for validate +
    test ("not fitted") and all."""
    runs = [fake_run("a", "train", 0.1), fake_run("b", "train", -0.3),
            fake_run("c", "validate", 0.2), fake_run("d", "test", -0.4)]
    groups = acc.overall(runs)
    assert list(groups) == ["train", "validate", "test", "not fitted", "all"]
    assert groups["train"]["runs"] == 2
    assert groups["train"]["ttft"]["mean"]["mape"] == pytest.approx(20.0)
    assert groups["train"]["ttft"]["mean"]["max"] == pytest.approx(30.0)
    assert groups["not fitted"]["e2e"]["p99"]["mape"] == pytest.approx(30.0)
    assert groups["not fitted"]["e2e"]["p99"]["max"] == pytest.approx(40.0)
    assert groups["all"]["itl"]["p90"]["mape"] == pytest.approx(25.0)


def test_mlp_profile_and_interpolation(tmp_path):
    """Linear kernels and small ops summed per token count (tp 1 only, a repeated count
    averaged); counts between profiled ones interpolated linearly."""
    stats = acc.LINEAR + acc.SMALL_OPS
    header = [f"time_stats.{k}.median" for k in stats] + ["num_tokens",
                                                          "num_tensor_parallel_workers"]
    rows = [[0.1] * 4 + [0.01] * 5 + [8, 1], [0.3] * 4 + [0.03] * 5 + [16, 1],
            [0.5] * 4 + [0.05] * 5 + [16, 1], [9.0] * 4 + [9.0] * 5 + [8, 2]]
    path = tmp_path / "mlp.csv"
    path.write_text(",".join(header) + "\n"
                    + "".join(",".join(str(v) for v in r) + "\n" for r in rows))
    mlp = acc.read_mlp(str(path))
    assert list(mlp) == [8, 16]
    assert mlp[8] == {"linear": pytest.approx(0.4), "small": pytest.approx(0.05)}
    assert mlp[16] == {"linear": pytest.approx(1.6), "small": pytest.approx(0.2)}
    assert acc.at_tokens(mlp, 12, "linear") == pytest.approx(1.0)
    assert acc.at_tokens(mlp, 10, "small") == pytest.approx(0.0875)


ATTENTION = {"prefill_kv0": {"8": [5.0, 0.2]},
             "decode": {"512": {"8": 0.05}},
             "decode_kv_cache_save": {"8": 0.002}}


def test_vidur_shape_in_seconds_over_the_layers():
    """Per-layer ms times the layers, in seconds; a mixed shape's linear time at the sum
    of its tokens; the prefill KV save is never used."""
    mlp = {8: {"linear": 0.4, "small": 0.05}, 16: {"linear": 1.6, "small": 0.2}}
    prefill = acc.vidur_shape(mlp, ATTENTION, 2, 8, 0, 0)
    assert prefill == {"linear": pytest.approx(0.0008), "small": pytest.approx(0.0001),
                       "attention_prefill": pytest.approx(0.0004), "attention_decode": 0.0,
                       "kv_write": None}
    decode = acc.vidur_shape(mlp, ATTENTION, 2, 0, 8, 512)
    assert decode["attention_decode"] == pytest.approx(0.0001)
    assert decode["kv_write"] == pytest.approx(0.000004)
    mixed = acc.vidur_shape(mlp, ATTENTION, 2, 8, 8, 512)
    assert mixed["linear"] == pytest.approx(0.0032)  # 1.6 ms at 16 tokens, 2 layers
    assert mixed["kv_write"] is None


def test_shape_names_and_numbers():
    """Shapes and figures as the tables print them."""
    assert acc.shape_name({"class": "prefill", "chunk": 128, "rows": 0, "context": 0}) \
        == "prefill 128"
    assert acc.shape_name({"class": "mixed", "chunk": 512, "rows": 8, "context": 1024}) \
        == "mixed 512 + 8 x 1024"
    assert [acc.number(v) for v in (0.027981, 27.981, 106644.7, 0.0)] == \
        ["0.02798", "27.98", "106,645", "0.000"]
    assert acc.short("20260217-155451-llama-2-7b-tp1-codegen") == "llama-2-7b-tp1-codegen"


def test_tables():
    """The MAPE table, aligned and in Markdown."""
    groups = acc.overall([fake_run("20260101-000000-x-tp1-a", "train", 0.125)])
    rows = acc.overall_table(groups)
    assert rows[0][:3] == ["runs", "n", "TTFT mean"]
    assert rows[1][:3] == ["train", "1", "12.5% (12%)"]
    assert acc.markdown([["a", "b", "c"], ["x", "1", "y"]]) == \
        "| a | b | c |\n|---|---:|---|\n| x | 1 | y |\n"
    assert acc.aligned([["a", "bb"], ["xyz", "1"]]) == "a    bb\nxyz   1\n"


def test_run_files(tmp_path):
    """Runs are found beside their ground truth and client config, filtered by name."""
    runs = tmp_path / "real-vllm" / "runs"
    runs.mkdir(parents=True)
    for name in ("1-2-a-tp1-x", "1-2-b-tp2-y"):
        (runs / f"{name}.json.gz").write_bytes(b"")
        (runs / f"{name}_ground_truth.json.gz").write_bytes(b"")
    found = acc.run_files(str(tmp_path), "*-b-*")
    assert [(f[0], f[2].endswith("1-2-b-tp2-y_ground_truth.json.gz"),
             f[3].endswith("server_and_client_configs/1-2-b-tp2-y/results/config.yaml"))
            for f in found] == [("1-2-b-tp2-y", True, True)]


def test_replay_run_on_the_fixture(tmp_path, monkeypatch):
    """The fixture run converts, replays and is compared on its 13 completed requests."""
    import gzip
    import shutil
    data = ROOT / "tests" / "data" / "blis_run"
    run = tmp_path / "run.json.gz"
    run.write_bytes(gzip.compress((data / "run.json").read_bytes()))
    truth = tmp_path / "run_ground_truth.json.gz"
    truth.write_bytes(gzip.compress((data / "run_ground_truth.json").read_bytes()))
    shutil.copy(data / "config.yaml", tmp_path / "config.yaml")
    result, _ = acc.replay_run(("tiny", str(run), str(truth), str(tmp_path / "config.yaml"),
                                {}))
    assert (result["split"], result["requests"], result["errored"], result["compared"]) == \
        ("validate", 14, 1, 13)
    assert json.loads(json.dumps(result)) == result


class FakeModel:
    """A cost model that prices each term at Vidur's figure times a factor."""

    class model:
        layers = 2

    def __init__(self, mlp, factor):
        self.mlp, self.factor = mlp, factor

    def breakdown(self, chunks, rows, contexts):
        chunk = chunks[0][0] if chunks else 0
        context = contexts // rows if rows else 0
        terms = acc.vidur_shape(self.mlp, ATTENTION, 2, chunk, rows, context)
        out = {k: (v or 0.0) * self.factor for k, v in terms.items()}
        out["lm_head"] = out["step"] = 1.0  # not profiled: never compared
        return out


def test_compare_kernels_totals_and_terms(monkeypatch):
    """Totals of linear, floors and both attentions; a model 10% slow is 10% off
    everywhere; the largest error names its shape."""
    mlp = {1: {"linear": 0.1, "small": 0.01}, 8: {"linear": 0.4, "small": 0.05},
           16: {"linear": 1.6, "small": 0.2}}
    monkeypatch.setattr(acc, "PREFILL", (8,))
    monkeypatch.setattr(acc, "DECODE_ROWS", (8,))
    monkeypatch.setattr(acc, "DECODE_CONTEXTS", (512,))
    monkeypatch.setattr(acc, "MIXED", [(8, 8, 512)])
    result = acc.compare_kernels(mlp, ATTENTION, FakeModel(mlp, 1.1))
    assert [s["class"] for s in result["shapes"]] == ["prefill", "decode", "mixed"]
    prefill = result["shapes"][0]
    assert prefill["total_measured"] == pytest.approx(0.0008 + 0.0001 + 0.0004)
    assert prefill["error"] == pytest.approx(0.1)
    assert result["classes"]["all"]["median"] == pytest.approx(10.0)
    assert result["classes"]["mixed"]["worst"] == "mixed 8 + 8 x 512"
    assert result["terms"]["kv_write"] == {"shapes": 1, "median": pytest.approx(10.0),
                                           "max": pytest.approx(10.0)}
