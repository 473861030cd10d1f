"""`convert --from blis-run`: a real vLLM run (tests/data/blis_run, synthetic) as a trace and
a measured file; the inference-perf config reader; bad input refused whole."""
from __future__ import annotations

import gzip
import io
import json
import shutil

import pytest
from conftest import ROOT

from scheduler_sim.cli.main import main
from scheduler_sim.io.blis_measured import parse_measured
from scheduler_sim.io.inference_perf import ClientConfig, parse_yaml, read_client_config
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.records.errors import TraceError

DATA = ROOT / "tests" / "data" / "blis_run"


@pytest.fixture
def run(tmp_path):
    """The fixture's three files, copied where a test may change them."""
    for name in ("run.json", "run_ground_truth.json", "config.yaml"):
        shutil.copy(DATA / name, tmp_path / name)
    return tmp_path


def convert(folder, *extra, measured=True):
    """Run `convert --from blis-run` in-process: (status, trace records, measured, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["convert", "--from", "blis-run", str(folder / "run.json"), "--client-config",
            str(folder / "config.yaml"), "-o", str(folder / "trace.jsonl"), *extra]
    if measured:
        argv += ["--measured", str(folder / "measured.jsonl")]
    status = main(argv, out, err)
    trace = measured_lines = None
    if (folder / "trace.jsonl").exists():
        trace = [json.loads(x) for x in (folder / "trace.jsonl").read_text().splitlines()]
    if (folder / "measured.jsonl").exists():
        measured_lines = [json.loads(x) for x in
                          (folder / "measured.jsonl").read_text().splitlines()]
    return status, trace, measured_lines, err.getvalue()


def test_config_record_carries_the_run_settings(run):
    """The config: vllm with prefix caching, the run's blocks, budget, rows, tp, model, GPU."""
    status, trace, _, _ = convert(run)
    assert status == 0
    assert trace[0] == {"type": "config", "time_unit": "s", "policy": "vllm",
                        "prefix_caching": True, "block_size": 4, "hash_block_size": 4,
                        "num_blocks": 64, "token_budget": 32, "max_rows": 4, "tp": 1,
                        "model": "llama-2-7b", "gpu": "h100-sxm",
                        "activation_reserve": 58.62}


def test_activation_reserve_is_what_the_blocks_leave():
    """0.9 x 79.22 GiB - 12.551 GiB of Llama-2-7B weights - 64 blocks of 4 x 512 KiB
    (0.125 GiB) = 58.6217 GiB, rounded down to 0.01 GiB: the measured pool fits."""
    from scheduler_sim.io.blis_run import implied_reserve, read_run
    from scheduler_sim.io.specs import gpu_spec, model_spec
    run = read_run((DATA / "run.json").read_text(), "run.json")
    model, gpu = model_spec("llama-2-7b"), gpu_spec("h100-sxm")
    assert (model.weight_bytes, gpu.memory_gib) == (13_476_831_232, 79.22)
    assert implied_reserve(run, model, gpu) == 58.62
    run.blocks = 10 ** 6  # 1.9 TiB of KV: nothing is left, no reserve is written
    assert implied_reserve(run, model, gpu) is None


def test_requests_generate_the_profile_output_length(run):
    """Every request generates output_len (5) tokens, whatever the client counted (2 to 6)."""
    _, trace, _, _ = convert(run)
    requests = [r for r in trace if r["type"] == "request"]
    assert [r["id"] for r in requests] == [f"blis-run-{i}" for i in range(14)]
    assert {r["output_tokens"] for r in requests} == {5}
    assert all("max_tokens" not in r for r in requests)  # = output_tokens: length-capped
    assert [r["arrival"] for r in requests] == [
        0, 0.25, 0.5, 0.5003, 1, 1.500001, 1.999999, 2.5, 4, 4.333333, 4.666667, 5,
        5.333333, 5.666667]
    assert [r["prompt_tokens"] for r in requests] == [9, 10, 8, 13, 9, 10, 13, 8, 9, 10, 13, 8,
                                                     7, 10]


def test_block_hashes_equal_exactly_where_prompts_repeat(run):
    """Prompt n mod 4 of each stage; 2 and 3 arrived swapped; 12 matches no prompt."""
    _, trace, _, _ = convert(run)
    hashes = {int(r["id"].split("-")[-1]): r.get("block_hashes") for r in trace
              if r["type"] == "request"}
    prompt0, prompt1, prompt2, prompt3 = [0, 1], [1000, 1001], [2000, 2001, 2002], [3000, 3001]
    assert hashes == {0: prompt0, 1: prompt1, 2: prompt3, 3: prompt2, 4: prompt0, 5: prompt1,
                      6: prompt2, 7: prompt3, 8: prompt0, 9: prompt1, 10: prompt2, 11: prompt3,
                      12: None, 13: prompt1}


def test_errored_request_is_cancelled_at_the_client_timeout(run):
    """Request 9 (has_error, prompt not counted) sends prompt 1 (10 tokens) and is cancelled
    300 s after it arrived; it is left out of the measured file."""
    status, trace, measured, err = convert(run)
    assert status == 0
    assert [r for r in trace if r["type"] == "cancel"] == [
        {"type": "cancel", "id": "blis-run-9", "at": 304.333333}]
    assert "blis-run-9" not in {m["id"] for m in measured}
    assert err == ("run.json: converted 14 requests from blis-run (llama-2-7b on h100-sxm, tp 1, "
                   "split validate): 5 output tokens each (ignore_eos); 4 prompts round robin: "
                   "10 in place, 2 from a neighbouring position, 1 unmatched, 1 errored before "
                   "their prompt was counted; 1 errored request cancelled 300 s after arrival; "
                   f"measured 13 completed requests to {run / 'measured.jsonl'}\n"
                   ).replace("run.json:", f"{run / 'run.json'}:")


def test_measured_file(run):
    """One line per completed request, ids as in the trace, seconds as measured."""
    _, trace, measured, _ = convert(run)
    assert measured[:3] == [
        {"id": "blis-run-0", "ttft": 0.031, "e2e": 0.131, "client_output_tokens": 5},
        {"id": "blis-run-1", "ttft": 0.029, "e2e": 0.121, "client_output_tokens": 4},
        {"id": "blis-run-2", "ttft": 0.045, "e2e": 0.149, "client_output_tokens": 6}]
    assert [m["id"] for m in measured] == [f"blis-run-{i}" for i in range(14) if i != 9]
    trace_ids = {r["id"] for r in trace if r["type"] == "request"}
    assert {m["id"] for m in measured} <= trace_ids
    text = (run / "measured.jsonl").read_text()
    assert parse_measured(text, "m.jsonl") == measured


def test_ground_truth_found_beside_the_run(run):
    """Without --ground-truth, RUN_ground_truth.json beside RUN.json is read."""
    status, _, measured, _ = convert(run)
    assert status == 0 and len(measured) == 13


def test_gzip_input_gives_the_same_files(run, tmp_path):
    """A gzipped run and ground truth convert to the same bytes."""
    convert(run)
    plain = (run / "trace.jsonl").read_bytes(), (run / "measured.jsonl").read_bytes()
    zipped = tmp_path / "z"
    zipped.mkdir()
    for name in ("run.json", "run_ground_truth.json"):
        (zipped / (name + ".gz")).write_bytes(gzip.compress((run / name).read_bytes()))
    shutil.copy(run / "config.yaml", zipped / "config.yaml")
    out, err = io.StringIO(), io.StringIO()
    status = main(["convert", "--from", "blis-run", str(zipped / "run.json.gz"),
                   "--client-config", str(zipped / "config.yaml"), "-o",
                   str(zipped / "t.jsonl"), "--measured", str(zipped / "m.jsonl")], out, err)
    assert status == 0, err.getvalue()
    assert ((zipped / "t.jsonl").read_bytes(), (zipped / "m.jsonl").read_bytes()) == plain


def test_converted_trace_validates(run):
    """The trace is one `validate` accepts, with its cancel."""
    convert(run)
    trace = parse_trace((run / "trace.jsonl").read_bytes(), "trace.jsonl")
    assert len(trace.workload) == 14


def bad_run(folder, old, new, count=1):
    path = folder / "run.json"
    text = path.read_text()
    assert text.count(old) >= count
    path.write_text(text.replace(old, new, count))


def assert_refused(folder, expected, *extra, measured=True):
    """Exit 2, the expected lines on stderr, and neither output written."""
    status, trace, measured_lines, err = convert(folder, *extra, measured=measured)
    assert status == 2
    assert err.splitlines() == expected
    assert trace is None and measured_lines is None


def test_bad_request_fields_name_their_line(run):
    """Every bad request is reported at its line; nothing is written."""
    bad_run(run, '"input_tokens":13,"output_tokens":5', '"input_tokens":-3,"output_tokens":5')
    bad_run(run, '"arrival_time_us":4000000', '"arrival_time_us":6000000')
    bad_run(run, '"has_error":true', '"has_error":1')
    path = run / "run.json"
    assert_refused(run, [
        f"{path}:5: requests[3]: input_tokens must be an integer >= 0, got -3",
        f"{path}:11: requests[9]: arrival_time_us must not be before the previous request's "
        "(6000000): requests are listed in the order they were sent, got 4333333",
        f"{path}:11: requests[9]: has_error must be true or false, got 1",
    ])


def test_bad_json_and_missing_settings(run):
    """Invalid JSON names its line; a config without the block count is refused."""
    bad_run(run, '{"index":4,', '{"index":4,,')
    assert_refused(run, [f"{run / 'run.json'}:6: invalid JSON: Expecting property name "
                         "enclosed in double quotes at column 12"])
    shutil.copy(DATA / "run.json", run / "run.json")
    bad_run(run, '"kv_blocks_total_gpu":64,', '')
    assert_refused(run, [f"{run / 'run.json'}:1: config.kv_blocks_total_gpu must be an "
                         "integer >= 1, got nothing"])


def test_error_flag_must_agree_with_the_ground_truth(run):
    """A ground truth that disagrees with the run is refused, and no trace is written."""
    path = run / "run_ground_truth.json"
    path.write_text(path.read_text().replace('{"index":9,"has_error":true,',
                                             '{"index":9,"has_error":false,'))
    assert_refused(run, [f"{path}:11: [9]: has_error must be the run's true, got false"])


def test_unknown_model_needs_a_name(run):
    """A model id with no catalogue name is refused unless --model names it."""
    bad_run(run, "meta-llama/Llama-2-7b-hf", "someone/Tiny-1b")
    assert_refused(run, [f"{run / 'run.json'}:1: model_id 'someone/Tiny-1b' has no catalogue "
                         "name (known: meta-llama/Llama-2-7b-hf, meta-llama/Llama-2-70b-hf, "
                         "codellama/CodeLlama-34b-Instruct-hf, mistralai/Mixtral-8x7B-v0.1); "
                         "name one with --model"])
    status, trace, _, _ = convert(run, "--model", "llama-3-8b", "--gpu", "a100-80gb")
    assert status == 0 and (trace[0]["model"], trace[0]["gpu"]) == ("llama-3-8b", "a100-80gb")
    config = run / "tiny" / "config.json"
    config.parent.mkdir()
    shutil.copy(ROOT / "scheduler_sim" / "gpu" / "data" / "models" / "llama-2-7b.json", config)
    status, trace, _, _ = convert(run, "--model", str(config))
    assert status == 0 and trace[0]["model"] == "tiny/config.json"  # from the trace's folder
    assert trace[0]["activation_reserve"] == 58.62


def test_stages_must_account_for_every_request(run):
    """A client config whose stages send another number of requests is refused."""
    path = run / "config.yaml"
    path.write_text(path.read_text().replace("duration: 3", "duration: 4"))
    assert_refused(run, [f"{run / 'run.json'}: the client config's stages send 16 requests "
                         "(int(rate x duration) each: 8 + 8), the run lists 14: not this "
                         "run's config?"])


def test_requested_profile_is_not_the_resolved_config(run):
    """profile.yaml's num_unique_system_prompts did not take effect: it is refused."""
    profile = {"data": {"type": "shared_prefix", "shared_prefix": {
        "num_unique_system_prompts": 11, "num_users_per_system_prompt": 4, "output_len": 5,
        "question_len": 4, "system_prompt_len": 4, "enable_multi_turn_chat": True}}}
    (run / "config.yaml").write_text(json.dumps(profile))
    assert_refused(run, [f"{run / 'config.yaml'}: data.shared_prefix names "
                         "num_unique_system_prompts, not num_groups: a requested profile "
                         "(profile.yaml), not the resolved config; the inference-perf that "
                         "ran ignored those names (and enable_multi_turn_chat); give "
                         "results/config.yaml"])


def test_usage_errors(run):
    """blis-run needs its client config; its flags mean nothing to other formats."""
    out, err = io.StringIO(), io.StringIO()
    assert main(["convert", "--from", "blis-run", str(run / "run.json")], out, err) == 2
    assert err.getvalue() == ("scheduler-sim: error: --from blis-run needs --client-config "
                              "FILE: the run's resolved inference-perf config "
                              "(results/config.yaml of its folder)\n")
    err = io.StringIO()
    assert main(["convert", "--from", "azure", str(run / "run.json"), "--client-config",
                 str(run / "config.yaml")], out, err) == 2
    assert err.getvalue() == ("scheduler-sim: error: --client-config is read only with "
                              "--from blis-run\n")
    (run / "run_ground_truth.json").unlink()
    err = io.StringIO()
    status, _, _, err = convert(run)
    assert status == 2
    assert err == (f"scheduler-sim: error: --measured needs the run's ground truth: "
                   f"{run / 'run_ground_truth.json'} was not found; name it with "
                   "--ground-truth FILE\n")


def test_client_config_facts():
    """The fixture's resolved config: 4 prompts, 5 tokens, stages of 8 and 6, 300 s."""
    config = read_client_config((DATA / "config.yaml").read_text(), "config.yaml")
    assert config == ClientConfig(prompts=4, groups=2, system_prompt_len=4, question_len=4,
                                  output_len=5, stages=((2.0, 4), (2.0, 3)), timeout=300.0)
    assert config.stage_requests == [8, 6]


def test_yaml_subset():
    """Mappings, lists at the key's indent, lists of mappings, scalars; else file:line."""
    text = ("a:\n  b: 1\n  c: 2.5\n  d: null\n  e: [] \n  f:\n  - x: 1\n    y: 'it''s'\n"
            "  - x: 2\n  g: http://h:8000/p\n  h: true\n")
    assert parse_yaml(text, "c.yaml") == {"a": {"b": 1, "c": 2.5, "d": None, "e": [],
                                                "f": [{"x": 1, "y": "it's"}, {"x": 2}],
                                                "g": "http://h:8000/p", "h": True}}
    with pytest.raises(TraceError) as info:
        parse_yaml("a:\n  b: |\n    text\n", "c.yaml")
    assert info.value.problems == ["c.yaml:2: unsupported YAML value '|' (this reader takes "
                                   "the plain mappings, lists and scalars inference-perf "
                                   "writes)"]
    with pytest.raises(TraceError) as info:
        parse_yaml("a: 1\n  b: 2\n", "c.yaml")
    assert info.value.problems == ["c.yaml:2: unexpected indentation"]


def test_measured_file_errors():
    """A measured file's bad lines are named, every one."""
    text = ('{"id":"a","ttft":0.1,"e2e":1}\n{"id":"a","ttft":0.1,"e2e":1}\n'
            '{"id":"b","ttft":2,"e2e":1,"x":1}\nnope\n')
    with pytest.raises(TraceError) as info:
        parse_measured(text, "m.jsonl")
    assert info.value.problems == [
        "m.jsonl:2: id 'a' was already measured on line 1",
        "m.jsonl:3: unknown field 'x' (known: id, ttft, e2e, client_output_tokens)",
        "m.jsonl:4: invalid JSON: Expecting value at column 1",
    ]


def test_every_format_reads_gzip(tmp_path):
    """A gzipped Mooncake slice converts to the same trace as the plain one."""
    plain = ROOT / "tests" / "data" / "mooncake_conversation_head.jsonl"
    zipped = tmp_path / "head.jsonl.gz"
    zipped.write_bytes(gzip.compress(plain.read_bytes()))
    outs = []
    for path in (plain, zipped):
        out = io.StringIO()
        assert main(["convert", "--from", "mooncake", str(path)], out, io.StringIO()) == 0
        outs.append(out.getvalue())
    assert outs[0] == outs[1] and outs[0].count("\n") == 201
    (tmp_path / "bad.gz").write_bytes(b"\x1f\x8b" + b"not gzip")
    err = io.StringIO()
    assert main(["convert", "--from", "mooncake", str(tmp_path / "bad.gz")], io.StringIO(),
                err) == 2
    assert err.getvalue().startswith(f"scheduler-sim: error: {tmp_path / 'bad.gz'}: not a "
                                     "readable gzip file: ")
