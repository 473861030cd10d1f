"""`scheduler-sim calibrate`: fitting coefficients back from measurements made with them.

Kernel profiles: Vidur-format CSVs written from the cost model's own predictions
under known coefficients are fitted back, every fitted coefficient within 1% (the
tile size exactly). Real runs: a small trace replayed under known serving
coefficients gives the "measured" latencies; the fit from the physics defaults
reproduces the run's statistics within 1%.
"""
from __future__ import annotations

import io
import json

import pytest

from conftest import ROOT

from scheduler_sim.cli.main import main
from scheduler_sim.gpu.calibration import parse_calibration
from scheduler_sim.gpu.catalogue import gpu_named, model_named
from scheduler_sim.gpu.coefficients import Coefficients
from scheduler_sim.gpu.costmodel import CostModel
from scheduler_sim.gpu.fit import minimize
from scheduler_sim.gpu.profiles import KernelPoint, predict, read_profile

MODEL = model_named("llama-3.1-8b")
GPU = gpu_named("a100-80gb")
KNOWN = Coefficients(gemm_efficiency=0.7, gemm_bandwidth_efficiency=0.8, gemm_sharpness=2.5,
                     gemm_half_tokens=0.0, gemm_tile_tokens=64.0, attention_efficiency=0.55,
                     attention_half_tokens=900.0, kv_read_efficiency=0.85,
                     elementwise_efficiency=0.5, layer_floor=30e-6,
                     decode_attention_floor=20e-6, prefill_attention_floor=5e-6)

MLP_HEADER = ("time_stats.attn_pre_proj.median,time_stats.attn_post_proj.median,"
              "time_stats.mlp_up_proj.median,time_stats.mlp_down_proj.median,"
              "time_stats.input_layernorm.median,time_stats.attn_rope.median,"
              "time_stats.post_attention_layernorm.median,time_stats.mlp_act.median,"
              "time_stats.add.median,n_head,n_kv_head,n_embd,num_tokens,"
              "num_tensor_parallel_workers")
ATTENTION_HEADER = ("n_embd,n_q_head,n_kv_head,num_tensor_parallel_workers,batch_size,"
                    "prefill_chunk_size,kv_cache_size,is_prefill,"
                    "time_stats.attn_prefill.median,time_stats.attn_decode.median")


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(argv, out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def _profiles(tmp_path) -> tuple[str, str]:
    """Vidur-format CSVs of the model's kernels under KNOWN (milliseconds per layer; the
    linear time in the first linear column, the rest of the layer in the first small one,
    every other kernel column a hair above zero)."""
    cost = CostModel(MODEL, GPU, KNOWN, 1)
    layers = MODEL.layers
    hair = 1e-9
    lines = [MLP_HEADER]
    for tokens in (1, 8, 32, 64, 100, 128, 200, 256, 384, 512, 700, 1024, 2048, 4096):
        linear = cost.linear_seconds(tokens) / layers * 1e3
        rest = (cost.elementwise_seconds(tokens) + cost.layer_floor_seconds()) / layers * 1e3
        lines.append(f"{linear - 3 * hair!r},{hair},{hair},{hair},{rest - 4 * hair!r},"
                     f"{hair},{hair},{hair},{hair},32,8,4096,{tokens},1")
    mlp = tmp_path / "mlp.csv"
    mlp.write_text("\n".join(lines) + "\n")
    lines = [ATTENTION_HEADER]
    for chunk in (128, 512, 1024, 2048, 4096, 8192):
        ms = predict(cost, KernelPoint("prefill", chunk, 0, 1, 0.0, "")) * 1e3
        lines.append(f"4096,32,8,1,1,{chunk},0,True,{ms!r},")
    for rows in (1, 8, 32, 128):
        for context in (512, 2048, 4096):
            ms = predict(cost, KernelPoint("decode", rows, context, 1, 0.0, "")) * 1e3
            lines.append(f"4096,32,8,1,{rows},0,{context},False,,{ms!r}")
    attention = tmp_path / "attention.csv"
    attention.write_text("\n".join(lines) + "\n")
    return str(mlp), str(attention)


@pytest.mark.slow  # the whole fit of ten coefficients: 8.9 s of CPU
def test_profiles_made_from_known_coefficients_are_fitted_back(tmp_path):
    mlp, attention = _profiles(tmp_path)
    out = tmp_path / "fit.json"
    status, stdout, stderr = run(["calibrate", "--gpu", "a100-80gb", "--model", "llama-3.1-8b",
                                  "--profile", mlp, "--profile", attention, "-o", str(out)])
    assert (status, stderr) == (0, "")
    fitted = parse_calibration(out.read_text(), str(out))
    assert fitted.gpu == "a100-80gb"
    assert fitted.coefficients.gemm_tile_tokens == 64.0
    for name in ("gemm_efficiency", "gemm_bandwidth_efficiency", "gemm_sharpness",
                 "attention_efficiency", "attention_half_tokens", "kv_read_efficiency",
                 "elementwise_efficiency", "layer_floor", "decode_attention_floor",
                 "prefill_attention_floor"):
        assert getattr(fitted.coefficients, name) == pytest.approx(getattr(KNOWN, name),
                                                                   rel=0.01), name
    assert fitted.residuals["linear"]["max"] < 0.001
    assert "kernel profiles of llama-3.1-8b on a100-80gb" in stdout
    assert len(fitted.points) == 14 + 6 + 12


def test_a_profile_of_another_model_is_refused_naming_the_line(tmp_path):
    mlp, _ = _profiles(tmp_path)
    status, stdout, stderr = run(["calibrate", "--gpu", "a100-80gb", "--model", "llama-2-7b",
                                  "--profile", mlp, "-o", str(tmp_path / "x.json")])
    assert status == 2
    assert stderr.splitlines()[0] == (f"{mlp}:2: n_kv_head is 8, but llama-2-7b has 32: a "
                                      "profile of another model")
    assert not (tmp_path / "x.json").exists()


def test_a_bad_profile_lists_every_bad_row(tmp_path):
    path = tmp_path / "mlp.csv"
    row = "1,1,1,1,1,1,1,1,1,32,8,4096,{},1"
    path.write_text("\n".join([MLP_HEADER, row.format(8), row.format("x"), row.format(-3),
                               row.format(16).replace("1,1,1,1,1", "0,1,1,1,1", 1),
                               row.format("inf"), row.format("9" * 400),
                               row.format(16).replace("1,1,1,1,1", "abc,1,1,1,1", 1)]) + "\n")
    with pytest.raises(Exception) as info:
        read_profile(str(path), path.read_text(), MODEL)
    # (Lines 3 and 8 were Python's "could not convert string to float"; line 6, inf, was
    # an OverflowError traceback out of `calibrate`.)
    assert info.value.problems == [
        f"{path}:3: column 'num_tokens' must be an integer, got 'x'",
        f"{path}:4: num_tokens must be from 1 to 10,000,000, got -3",
        f"{path}:5: time_stats.attn_pre_proj.median must be a number > 0, got 0.0",
        f"{path}:6: column 'num_tokens' must be an integer, got 'inf'",
        f"{path}:7: column 'num_tokens' must be an integer, got '{'9' * 37}...'",
        f"{path}:8: time_stats.attn_pre_proj.median must be a number > 0, got 'abc'",
    ]


def test_a_short_attention_row_is_a_bad_row(tmp_path):
    """An attention row cut before its is_prefill column (csv gives None) was an
    AttributeError traceback."""
    path = tmp_path / "attention.csv"
    path.write_text(ATTENTION_HEADER + "\n4096,32,8,1,1,128\n")
    with pytest.raises(Exception) as info:
        read_profile(str(path), path.read_text(), MODEL)
    assert info.value.problems == [f"{path}:2: is_prefill must be True or False, got None"]


def test_minimize_finds_a_known_point_in_its_box():
    """A bowl centred at (0.3, 7) in the box [0, 1] x [0, 10]; and a point outside the
    box is clipped onto it: the minimum of (x - 2)^2 over [0, 1] is at 1."""
    fit = minimize(lambda x: (x[0] - 0.3) ** 2 + (x[1] - 7) ** 2, [0.5, 5], [(0, 1), (0, 10)])
    assert fit.point == pytest.approx([0.3, 7], abs=1e-5)
    assert minimize(lambda x: (x[0] - 2) ** 2, [0.5], [(0, 1)]).point == pytest.approx([1])


def test_calibrate_needs_measurements_and_refuses_writing_over_one(tmp_path):
    status, _, stderr = run(["calibrate", "--gpu", "a100-80gb", "-o", str(tmp_path / "x")])
    assert status == 2 and "calibrate needs measurements" in stderr
    mlp, _ = _profiles(tmp_path)
    status, _, stderr = run(["calibrate", "--gpu", "a100-80gb", "--model", "llama-3.1-8b",
                             "--profile", mlp, "-o", mlp])
    assert status == 2 and "a profile" in stderr


def test_cost_prices_one_dispatch_term_by_term():
    """`cost --prefill 4 --decode 3@4` of the physics defaults adds its terms to the
    dispatch's seconds; the table names every term."""
    status, out, err = run(["cost", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                            "--prefill", "4", "--decode", "3@4", "--calibration", "none"])
    assert (status, err) == (0, "")
    cost = CostModel(MODEL, gpu_named("h100-sxm"), Coefficients(), 1)
    total = cost.dispatch_seconds([(4, 0)], 3, 12)
    lines = out.splitlines()
    assert lines[0] == "one dispatch: llama-3.1-8b on h100-sxm, calibration none"
    assert lines[1] == "  prefill 4 tokens after 0; decode 3 rows at context 4 (7 tokens)"
    assert lines[-1].split()[:2] == ["total", f"{total * 1e3:.4f}"]
    names = [line.split()[0] for line in lines[5:-2]]
    assert names == ["linear", "lm_head", "attention_prefill", "attention_decode", "kv_write",
                     "elementwise", "floors", "allreduce", "step"]


@pytest.mark.parametrize("argv, message", [
    (["--decode", "3"], "--decode must look like ROWS@CONTEXT, got '3'"),
    (["--prefill", "0"], "--prefill: tokens must be from 1 to 10,000,000"),
    (["--prefill", "4", "--seq", "8"], "cost needs --prefill/--decode (one dispatch) or --seq"),
    ([], "cost needs --prefill/--decode (one dispatch) or --seq"),
    (["--prefill", "4", "--tp", "9"], "--tp must be from 1 to 8, got 9"),
])
def test_cost_refuses_a_bad_shape(argv, message):
    status, out, err = run(["cost", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", *argv])
    assert status == 2 and message in err and out == ""


# --- real runs: the serving coefficients ------------------------------------------------

def _measured_run(tmp_path, coefficients: dict):
    """A 24-request trace on Llama-3-8B / H100 (arrivals 20 ms apart, prompts 64 to 600
    tokens, 12 to 40 outputs) replayed under the physics defaults with `coefficients`
    changed: the trace, and its requests' TTFT and E2E as a measured file."""
    import scheduler_sim as sim
    records = [{"type": "config", "time_unit": "s", "policy": "vllm", "model": "llama-3-8b",
                "gpu": "h100-sxm", "token_budget": 512, "max_rows": 8}]
    for i in range(24):
        records.append({"type": "request", "id": f"r{i}", "arrival": round(0.02 * i, 3),
                        "prompt_tokens": 64 + (i * 97) % 537, "output_tokens": 12 + (i * 7) % 29})
    trace = tmp_path / "run.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    truth = tmp_path / "truth.json"
    truth.write_text(json.dumps({"scheduler_sim_calibration": 1, "gpu": "h100-sxm",
                                 "coefficients": coefficients}))
    replay = sim.replay(sim.load(str(trace)), calibration=str(truth))
    measured = tmp_path / "run.measured.jsonl"
    measured.write_text("".join(json.dumps({"id": r["id"], "ttft": r["ttft"], "e2e": r["e2el"]})
                                + "\n" for r in replay.runs[0].requests))
    return str(trace), str(measured), replay


def test_retiming_under_the_replays_own_coefficients_gives_the_replay(tmp_path):
    """Recording.latencies under the coefficients the replay ran under is the replay's own
    TTFT and E2E for every request (to the 1 us clock's rounding)."""
    from scheduler_sim.cli.calibrate import _runs
    from scheduler_sim.io.run_fit import record
    k = {"step_overhead": 0.002, "layer_floor": 10e-6, "request_overhead": 0.03}
    trace, measured, replay = _measured_run(tmp_path, k)
    run = _runs([f"{trace}={measured}"])[0]
    latencies = record(run, Coefficients(**k)).latencies(Coefficients(**k))
    for r in replay.runs[0].requests:
        assert latencies[r["id"]] == pytest.approx((r["ttft"], r["e2el"]), abs=2e-6)


def test_a_run_made_with_known_serving_coefficients_is_fitted_to_its_statistics(tmp_path):
    """The run measured under step 2 ms, layer floor 10 us, request overhead 30 ms; the fit
    from the physics defaults (step 0.5 ms, no floor, no overhead) reproduces its mean
    TTFT, mean E2E, mean ITL and p99 E2E within 1%, and says the coefficients came from
    real runs."""
    trace, measured, _ = _measured_run(tmp_path, {"step_overhead": 0.002, "layer_floor": 10e-6,
                                                  "request_overhead": 0.03})
    out = tmp_path / "fit.json"
    status, stdout, stderr = run(["calibrate", "--run", f"{trace}={measured}", "-o", str(out)])
    assert status == 0, stderr
    fitted = parse_calibration(out.read_text(), str(out))
    assert fitted.gpu == "h100-sxm"
    errors = fitted.residuals["runs"][0]
    for key in ("ttft_error", "e2e_error", "itl_error", "e2e_p99_error"):
        assert abs(errors[key]) < 0.01, (key, errors)
    assert fitted.fitted["request_overhead"] == "real runs"
    assert "run.jsonl: ttft" in stdout


def test_a_round_that_replays_worse_is_not_kept(tmp_path, monkeypatch):
    """fit_runs judges every round's coefficients by their replay and keeps the best: a
    minimiser that always proposes the top of every box (step 50 ms, floors 200 us, a
    0.5 s request overhead) never beats the coefficients the run was made with, which
    the fit starts from, so those come back unchanged."""
    from scheduler_sim.cli.calibrate import _runs
    from scheduler_sim.gpu.fit import Fit
    from scheduler_sim.io import run_fit
    k = {"step_overhead": 0.002, "layer_floor": 10e-6, "request_overhead": 0.03}
    trace, measured, _ = _measured_run(tmp_path, k)
    runs = _runs([f"{trace}={measured}"])
    monkeypatch.setattr(run_fit, "minimize",
                        lambda loss, start, bounds, **_: Fit([b for _, b in bounds], 0.0, 1))
    fitted, rows = run_fit.fit_runs(runs, Coefficients(**k), rounds=2)
    assert fitted == Coefficients(**k)
    errors = [rows[0]["predicted"][key] / rows[0]["measured"][key] - 1
              for key in ("ttft", "e2e", "itl", "e2e_p99")]
    assert max(abs(e) for e in errors) < 1e-5


def test_calibrate_refuses_writing_over_a_file_a_runs_trace_names(tmp_path):
    """A run's trace whose config names a model config.json: `-o` onto that file is
    refused (exit 2) and the file is left as it was."""
    trace, measured, _ = _measured_run(tmp_path, {"step_overhead": 0.002})
    config = tmp_path / "config.json"
    config.write_text((ROOT / "scheduler_sim" / "gpu" / "data" / "models" / "llama-3.1-8b.json")
                      .read_text())
    text = open(trace).read().replace('"model": "llama-3-8b"', '"model": "config.json"')
    open(trace, "w").write(text)
    before = config.read_bytes()
    status, _, stderr = run(["calibrate", "--run", f"{trace}={measured}", "-o", str(config)])
    assert status == 2 and "--model" in stderr
    assert config.read_bytes() == before


def test_calibrate_never_runs_a_plugin_a_runs_trace_names(tmp_path):
    """A run's trace whose config names `evil.py:X` (a module that writes a file when
    imported): calibrate refuses it, naming the plugin and the flag, and nothing is
    imported."""
    trace, measured, _ = _measured_run(tmp_path, {"step_overhead": 0.002})
    (tmp_path / "evil.py").write_text("open(__file__ + '.ran', 'w').close()\n")
    text = open(trace).read().replace('"policy": "vllm"', '"policy": "evil.py:X"')
    open(trace, "w").write(text)
    status, _, stderr = run(["calibrate", "--run", f"{trace}={measured}",
                             "-o", str(tmp_path / "fit.json")])
    assert status == 2
    assert "'evil.py:X'" in stderr and "--allow-trace-plugins" in stderr
    assert not (tmp_path / "evil.py.ran").exists() and not (tmp_path / "fit.json").exists()
