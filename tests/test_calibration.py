"""The `calibration` option (§9): which coefficients a cost model runs on, and the files
that give them (gpu/calibration.py, io/specs.py).

The shipped calibrations (scheduler_sim/gpu/data/calibrations/) are refitted from time
to time: no test asserts their numbers, only that they are the ones used. Timed runs
here use a calibration file of our own over the physics defaults (`Coefficients()`),
whose durations are derived by hand.
"""
from __future__ import annotations

import json
import os

import pytest

import scheduler_sim as sim
from conftest import ROOT, req, run_cli, write_trace
from scheduler_sim.gpu.calibration import NONE, SHIPPED, parse_calibration, shipped_for
from scheduler_sim.gpu.coefficients import FIELDS, Coefficients
from scheduler_sim.gpu.run_cost import calibration_for, cost_model_for
from scheduler_sim.io.specs import calibration_path, load_specs
from scheduler_sim.io.trace import read_trace
from scheduler_sim.io.trace_config import resolve_options
from scheduler_sim.records.errors import ConfigError, UsageError
from scheduler_sim.records.options import Options

COST = "llama-3-8b/h100-sxm"
CALIBRATIONS = ROOT / "scheduler_sim" / "gpu" / "data" / "calibrations"
ERROR = "scheduler-sim: error: "
# A calibration of our own: the physics defaults with a 1-s step.
SLOW_STEP = {"scheduler_sim_calibration": 1, "name": "slow-step", "gpu": "h100-sxm",
             "coefficients": {"step_overhead": 1.0}}


def options(**values) -> Options:
    return Options.resolve({"cost_model": COST, **values})


def test_the_default_calibration_of_an_h100_is_the_shipped_one():
    """With no `calibration` an H100 runs on its shipped calibration: the file
    data/calibrations/h100-sxm.json, its coefficients as the file gives them (a field it
    leaves out keeps its default), and the cost model runs on them; naming it
    (`calibration: h100-sxm`) is the same. `calibration: none` is the physics defaults,
    `Coefficients()`, and so is the default of a GPU without a shipped calibration (an
    H200). A shipped GPU's name picks its calibration whatever the run's GPU."""
    default = calibration_for(options())
    assert default == shipped_for("h100-sxm") and default.path == "shipped:h100-sxm.json"
    on_file = json.loads((CALIBRATIONS / SHIPPED["h100-sxm"]).read_text(encoding="utf-8"))
    assert on_file["gpu"] == default.gpu == "h100-sxm"
    assert default.coefficients == Coefficients(**on_file["coefficients"])
    assert cost_model_for(options()).coefficients == default.coefficients
    assert calibration_for(options(calibration="h100-sxm")) == default
    assert calibration_for(options(calibration="none")) is NONE
    assert NONE.coefficients == Coefficients()
    assert cost_model_for(options(calibration="none")).coefficients == Coefficients()
    assert calibration_for(options(cost_model="llama-3-8b/h200")) is NONE
    a100 = calibration_for(options(calibration="a100-80gb"))
    assert a100 == shipped_for("a100-80gb") and a100.gpu == "a100-80gb"


def test_calibration_none_on_the_command_line_is_the_physics_defaults(tmp_path):
    """`--calibration none` (any case) is the value `none`, not null: the options say
    `none` and the run is that of `calibration: none` in the trace; `--calibration null`
    is the default (the shipped calibration). A sweep's grid spells them alike."""
    path = write_trace(tmp_path, [req("a", 0, 4, 2)])
    docs = {}
    for value in ("none", "None", "null"):
        status, out, err = run_cli(["replay", path, "--cost-model", COST, "--calibration",
                                    value, "--json"])
        assert status == 0, err
        docs[value] = json.loads(out)
    assert docs["none"]["options"]["calibration"] == "none"
    assert docs["None"]["options"]["calibration"] == "none"
    assert docs["null"]["options"]["calibration"] is None
    in_trace = write_trace(tmp_path, [{"type": "config", "calibration": "none"},
                                      req("a", 0, 4, 2)], "none.jsonl")
    status, out, err = run_cli(["replay", in_trace, "--cost-model", COST, "--json"])
    assert status == 0, err
    assert json.loads(out)["runs"] == docs["none"]["runs"]
    status, out, err = run_cli(["sweep", path, "--cost-model", COST, "--grid",
                                "calibration=none,null", "--policy", "vllm", "--jsonl", "-"])
    assert status == 0, err
    rows = [json.loads(line) for line in out.splitlines()][1:]  # after the header
    assert [row["calibration"] for row in rows] == ["none", None]
    assert [row["makespan"] for row in rows] == [docs[v]["runs"][0]["makespan"]
                                                 for v in ("none", "null")]


def test_a_calibration_file_in_a_trace_is_read_from_the_trace_folder(tmp_path, monkeypatch):
    """The trace's config names `cal/slow.json`: it is read from the trace's folder
    whatever the working directory (calibration_path joins it to the folder; load_specs
    reads it into `calibration_file`), and the run uses it. A request of 4 tokens and 1
    output on a 1-s clock: its prefill under the file's coefficients (Coefficients(),
    step 1 s) lasts linear sqrt((13,958,643,712 / 2.613e12)^2 + (2 x 6,979,321,856 x 4 /
    741.75e12)^2) = sqrt(5.34200^2 + 0.0752741^2) = 5.34253 ms + LM head 1,050,673,152 /
    2.613e12 = 0.402097 ms + attention 10 pairs x 524,288 / 494.5e12 = 0.0000106 ms + KV
    write 4 x 131,072 / 2.68e12 = 0.000196 ms + elementwise 4 x 5,505,024 / 1.675e12 =
    0.0131463 ms + step 1,000 ms = 1,005.758 ms: it completes at step 2, makespan 2 s.
    Under `none` (a 0.5-ms step: 6.258 ms) it completes at step 1. The same relative path
    given as a flag is taken from the working directory."""
    folder = tmp_path / "runs"
    (folder / "cal").mkdir(parents=True)
    (folder / "cal" / "slow.json").write_text(json.dumps(SLOW_STEP), encoding="utf-8")
    trace = write_trace(folder, [{"type": "config", "cost_model": COST, "calibration":
                                  "cal/slow.json", "clock_resolution": 1.0},
                                 req("a", 0, 4, 1)])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = read_trace(trace)
    opts, _ = resolve_options(loaded.config, {}, str(folder), specs=False)
    assert calibration_path(opts) == os.path.join(str(folder), "cal/slow.json")
    read = load_specs(opts).calibration_file
    assert read.name == "slow-step" and read.coefficients == Coefficients(step_overhead=1.0)
    status, out, err = run_cli(["replay", trace, "--json"])
    assert status == 0, err
    run = json.loads(out)["runs"][0]
    assert (run["makespan"], run["ttft_mean"]) == (2, 2)
    assert sim.replay(sim.load(trace)).runs[0].summary["makespan"] == 2
    status, out, err = run_cli(["replay", trace, "--calibration", "none", "--json"])
    assert status == 0, err
    assert json.loads(out)["runs"][0]["makespan"] == 1
    status, out, err = run_cli(["replay", trace, "--calibration", "cal/slow.json"])
    assert (status, out) == (2, "")
    assert err == f"{ERROR}cal/slow.json: cannot read: No such file or directory\n"
    monkeypatch.chdir(folder)
    status, out, err = run_cli(["replay", trace, "--calibration", "cal/slow.json", "--json"])
    assert status == 0, err
    assert json.loads(out)["runs"][0]["makespan"] == 2


def test_a_bad_calibration_file_is_refused_listing_every_problem(tmp_path):
    """A calibration without `gpu`, with a coefficient out of range, an unknown one and a
    negative step: exit 2, nothing on standard output, one line per problem, each naming
    the file and the field. A file that is not JSON is refused naming it."""
    path = write_trace(tmp_path, [req("a", 0, 4, 2)])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"scheduler_sim_calibration": 1, "coefficients": {
        "gemm_efficiency": 1.5, "warp_speed": 2, "step_overhead": -1}}), encoding="utf-8")
    status, out, err = run_cli(["replay", path, "--cost-model", COST, "--calibration",
                                str(bad)])
    assert (status, out) == (2, "")
    assert err.splitlines() == [
        f"{bad}: field 'gpu': must be a GPU name, got null",
        f"{bad}: field 'coefficients.gemm_efficiency': must be in (0, 1], got 1.5",
        f"{bad}: field 'coefficients.warp_speed': unknown coefficient (known: "
        + ", ".join(FIELDS) + ")",
        f"{bad}: field 'coefficients.step_overhead': must be in [0, 3600], got -1"]
    bad.write_text('{"scheduler_sim_calibration": 1, "gpu": ', encoding="utf-8")
    status, out, err = run_cli(["replay", path, "--cost-model", COST, "--calibration",
                                str(bad)])
    assert (status, out) == (2, "")
    assert err.startswith(f"{ERROR}{bad}: not JSON: ")


def test_parse_calibration_names_every_field():
    """parse_calibration on its own: the format key, the name, the coefficients object and
    the lists, every problem at once (ConfigError); a field left out keeps its default;
    a JSON value that is no object is a UsageError."""
    with pytest.raises(ConfigError) as info:
        parse_calibration(json.dumps({"scheduler_sim_calibration": 2, "gpu": "", "name": 7,
                                      "coefficients": [], "data": {}, "fitted": []}), "c.json")
    assert info.value.problems == [
        "c.json: field 'scheduler_sim_calibration': must be 1, got 2",
        "c.json: field 'gpu': must be a GPU name, got \"\"",
        "c.json: field 'name': must be a non-empty string, got 7",
        "c.json: field 'coefficients': must be an object, got []",
        "c.json: field 'fitted': must be an object, got []",
        "c.json: field 'data': must be a list, got {}"]
    with pytest.raises(ConfigError) as info:
        parse_calibration(json.dumps({"scheduler_sim_calibration": True, "gpu": "h100-sxm",
                                      "coefficients": {"gemm_sharpness": 0.5,
                                                       "layer_floor": "1e-5"}}), "c.json")
    assert info.value.problems == [
        "c.json: field 'scheduler_sim_calibration': must be 1, got true",
        "c.json: field 'coefficients.gemm_sharpness': must be in [1, 64], got 0.5",
        "c.json: field 'coefficients.layer_floor': must be a finite number, got '1e-5'"]
    good = parse_calibration(json.dumps(SLOW_STEP), "slow.json")
    assert (good.name, good.gpu, good.coefficients) == (
        "slow-step", "h100-sxm", Coefficients(step_overhead=1.0))
    with pytest.raises(UsageError, match="a calibration is a JSON object, got list"):
        parse_calibration("[]", "c.json")


def test_an_output_onto_the_calibration_file_is_refused(tmp_path):
    """The calibration file is an input (io/specs.py spec_inputs): an output naming it is
    refused before anything is written, whether a flag names it or the trace's config
    does (relative to the trace's folder), and the file is left as it was."""
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(SLOW_STEP), encoding="utf-8")
    before = cal.read_bytes()
    path = write_trace(tmp_path, [req("a", 0, 4, 2)])
    status, out, err = run_cli(["replay", path, "--cost-model", COST, "--calibration",
                                str(cal), "--events", str(cal)])
    assert (status, out) == (2, "")
    assert err == (f"{ERROR}--events {cal} is --calibration ({cal}): an output never "
                   "replaces an input\n")
    in_trace = write_trace(tmp_path, [{"type": "config", "cost_model": COST,
                                       "calibration": "cal.json"}, req("a", 0, 4, 2)],
                           "named.jsonl")
    status, out, err = run_cli(["replay", in_trace, "--requests-csv", str(cal)])
    assert (status, out) == (2, "")
    assert err == (f"{ERROR}--requests-csv {cal} is --calibration "
                   f"({os.path.join(str(tmp_path), 'cal.json')}): an output never replaces "
                   "an input\n")
    assert cal.read_bytes() == before


def test_the_serving_overhead_enters_ttft_and_e2el_and_nothing_else(tmp_path):
    """A calibration whose request_overhead is 0.25 s (the rest the physics defaults)
    against `none`: every request's TTFT and end-to-end latency are exactly 0.25 s
    longer (250,000 steps of 1 us), its admission, TPOT and the makespan are the same,
    and the header says so."""
    (tmp_path / "slow.json").write_text(json.dumps(
        {"scheduler_sim_calibration": 1, "name": "api", "gpu": "h100-sxm",
         "coefficients": {"request_overhead": 0.25}}), encoding="utf-8")
    trace = write_trace(tmp_path, [{"type": "config", "cost_model": COST},
                                   req("a", 0, 40, 5), req("b", 1, 8, 3)])
    runs = {}
    for calibration in ("none", str(tmp_path / "slow.json")):
        replay = sim.replay(sim.load(trace), calibration=calibration)
        runs[calibration] = ({r["id"]: r for r in replay.runs[0].requests},
                             replay.runs[0].summary)
    (plain, plain_summary), (slow, slow_summary) = runs.values()
    for rid in ("a", "b"):
        assert slow[rid]["ttft"] == pytest.approx(plain[rid]["ttft"] + 0.25, abs=1e-9)
        assert slow[rid]["e2el"] == pytest.approx(plain[rid]["e2el"] + 0.25, abs=1e-9)
        for field in ("admitted", "first_token", "finished", "tpot"):
            assert slow[rid][field] == plain[rid][field]
    assert slow_summary["makespan"] == plain_summary["makespan"]
    assert slow_summary["ttft_mean"] == pytest.approx(plain_summary["ttft_mean"] + 0.25)
    status, out, err = run_cli(["replay", trace, "--calibration", str(tmp_path / "slow.json")])
    assert status == 0, err
    assert (f"cost model llama-3-8b/h100-sxm · calibration api (from {tmp_path / 'slow.json'})"
            " · serving overhead 250.0 ms per request, in TTFT and E2EL") in out.splitlines()
