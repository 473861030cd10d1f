"""replay --perfetto (Chrome trace events), the progress line (--quiet), and -j N."""
from __future__ import annotations

import io
import json
import os
import time

import pytest

import scheduler_sim.cli.runs as runs
import scheduler_sim.io.progress as progress
from scheduler_sim.cli.main import main
from scheduler_sim.records import interrupts
from test_cli import run, write

# r1 runs, is preempted at 2 and cancelled at 3 while it waits again; r2 waits
# for blocks until 4 (release_delay 2 keeps r1's blocks draining), then runs.
TINY = [
    {"type": "config", "block_size": 4, "num_blocks": 3, "release_delay": 2,
     "policy": "continuous"},
    {"type": "request", "id": "r1", "arrival": 0, "prompt_tokens": 6, "output_tokens": 3},
    {"type": "request", "id": "r2", "arrival": 0, "prompt_tokens": 4, "output_tokens": 2},
    {"type": "preempt", "id": "r1", "at": 2},
    {"type": "cancel", "id": "r1", "at": 3},
]


def _perfetto(tmp_path, records, *flags) -> tuple[bytes, dict]:
    trace = write(tmp_path, records)
    target = tmp_path / "trace.perfetto.json"
    status, _, err = run(["replay", trace, "--perfetto", str(target), *flags])
    assert status == 0, err
    data = target.read_bytes()
    return data, json.loads(data)


def test_tiny_trace_slices_by_hand(tmp_path):
    """Every slice and instant of the tiny trace, exact: 1 tick = 1000 us; r1 is on
    line 2 (tid 2), r2 on line 3; the policy is process 1000."""
    _, doc = _perfetto(tmp_path, TINY)
    assert doc["otherData"]["microseconds_per_step"] == 1000
    assert "1 tick = 1000 us" in doc["otherData"]["timestamps"]
    got = [(e["tid"], e["name"], e["ph"], e["ts"], e.get("dur"))
           for e in doc["traceEvents"] if e["ph"] in "Xi"]
    assert sorted(got) == sorted([
        (2, "prefill", "X", 0, 1000),
        (2, "decode", "X", 1000, 1000),
        (2, "preempted", "i", 2000, None),
        (2, "waiting again", "X", 2000, 1000),
        (2, "cancelled", "i", 3000, None),
        (3, "waiting", "X", 0, 4000),
        (3, "prefill", "X", 4000, 1000),
        (3, "decode", "X", 5000, 1000),
        # The GPU's track: r1's prompt, its decode; idle; r2's prompt, its decode.
        (0, "prefill", "X", 0, 1000),
        (0, "decode", "X", 1000, 1000),
        (0, "prefill", "X", 4000, 1000),
        (0, "decode", "X", 5000, 1000),
    ])
    names = {(e["tid"], e["args"]["name"]) for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {(0, "GPU dispatches"), (2, "r1"), (3, "r2")}
    gpu = [e["args"] for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == 0]
    assert gpu[0] == {"dispatches": 1, "rows": 1, "tokens": 6, "prompt_tokens": 6}  # r1: 6
    assert {e["pid"] for e in doc["traceEvents"]} == {1000}
    kv = [e for e in doc["traceEvents"] if e["name"] == "kv blocks"]
    assert kv[0]["ts"] == 0 and kv[0]["args"] == {"allocated": 0, "reserved": 2,
                                                  "draining": 0, "free": 3}
    queues = {e["ts"]: e["args"] for e in doc["traceEvents"] if e["name"] == "queues"}
    assert queues[4000] == {"waiting": 0, "running": 1}


def test_the_file_follows_the_format_and_is_deterministic(tmp_path):
    """JSON object format: phases X, i, C, M only, each with its required fields;
    two runs give the same bytes. Under a cost model ts is microseconds."""
    flags = ["--policy", "vllm", "--policy", "sglang", "--cost-model", "llama-3-8b/h100-sxm"]
    first, doc = _perfetto(tmp_path, TINY, *flags)
    again, _ = _perfetto(tmp_path, TINY, *flags)
    assert first == again
    assert doc["otherData"]["time_unit"] == "s"
    assert doc["otherData"]["microseconds_per_step"] == 1
    events = doc["traceEvents"]
    assert {e["ph"] for e in events} == {"X", "i", "C", "M"}
    for e in events:
        assert isinstance(e["name"], str) and isinstance(e["pid"], int)
        assert isinstance(e["tid"], int)
        if e["ph"] in "XiC":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] >= 0
        if e["ph"] == "i":
            assert e["s"] == "t"
        if e["ph"] in "MC":
            assert isinstance(e["args"], dict)
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e["ph"] == "M" and e["name"] == "process_name"}
    assert processes == {1000: "vllm", 2000: "sglang"}


def test_a_fleet_has_a_process_per_replica(tmp_path):
    _, doc = _perfetto(tmp_path, TINY[:1] + [
        {"type": "request", "id": f"q{i}", "arrival": i, "prompt_tokens": 4,
         "output_tokens": 2} for i in range(4)], "--replicas", "2", "--num-blocks", "8")
    processes = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "process_name"}
    assert processes == {1000: "continuous replica 0", 1001: "continuous replica 1"}


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_only_and_never_on_stdout(tmp_path, monkeypatch):
    """On a terminal (after DELAY) a progress line goes to stderr and is wiped at
    the end; not on a non-terminal, not under --quiet; stdout is the same."""
    monkeypatch.setattr(progress, "DELAY", 0.0)
    monkeypatch.setattr(progress, "EVERY", 0.0)
    trace = write(tmp_path, TINY)
    outs = {}
    for name, err, flags in (("tty", FakeTTY(), []), ("quiet", FakeTTY(), ["--quiet"]),
                             ("pipe", io.StringIO(), [])):
        out = io.StringIO()
        assert main(["replay", trace, *flags], out=out, err=err) == 0
        outs[name] = (out.getvalue(), err.getvalue())
    tty = outs["tty"][1]
    assert "scheduler-sim: continuous: simulated time 6 ticks, 2/2 requests finished" in tty
    assert tty.endswith("\r\x1b[K")
    assert outs["quiet"][1] == "" and outs["pipe"][1] == ""
    assert outs["tty"][0] == outs["quiet"][0] == outs["pipe"][0]


def _all_outputs(tmp_path, trace, jobs, *flags):
    d = tmp_path / f"j{jobs}"
    d.mkdir(exist_ok=True)
    status, out, err = run(["replay", trace, "-j", str(jobs), "--events", str(d / "e.jsonl"),
                            "--requests-csv", str(d / "r.csv"), "--perfetto",
                            str(d / "p.json"), "--requests", *flags])
    files = {name: (d / name).read_bytes() for name in ("e.jsonl", "r.csv", "p.json")}
    return status, out, err, files


def test_jobs_2_is_byte_identical_to_jobs_1(tmp_path):
    """Tables, --json, --requests, --requests-csv, --events and --perfetto."""
    records = TINY + [{"type": "request", "id": f"g{i}", "arrival": i, "prompt_tokens": 5,
                       "output_tokens": 3 + i % 4} for i in range(30)]
    records[0] = dict(records[0], num_blocks=40)
    trace = write(tmp_path, records)
    policies = ["--policy", "vllm", "--policy", "continuous", "--policy", "sglang"]
    for extra in ([], ["--json"]):
        one = _all_outputs(tmp_path, trace, 1, *policies, *extra)
        two = _all_outputs(tmp_path, trace, 2, *policies, *extra)
        assert one[0] == 0 and one == two


def test_jobs_interrupted_prints_what_finished_and_leaves_no_file(tmp_path, monkeypatch):
    """Ctrl-C in the parent after the first policy: exit 130, the first policy's
    summary, no output file and no temporary file; the slow child is stopped."""
    real_run, real_join = runs.run_policy, runs._join

    def slow_second(plan, position, policy, sinks, on_end=None):
        if position == 1:
            time.sleep(60)  # in the child (forked with this patch): stopped by the parent
        return real_run(plan, position, policy, sinks, on_end)

    def interrupted_join(*args):
        real_join(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(runs, "run_policy", slow_second)
    monkeypatch.setattr(runs, "_join", interrupted_join)
    trace = write(tmp_path, TINY)
    started = time.monotonic()
    status, out, err = run(["replay", trace, "--policy", "vllm", "--policy", "sglang",
                            "-j", "2", "--events", str(tmp_path / "e.jsonl"),
                            "--perfetto", str(tmp_path / "p.json"), "--json"])
    assert time.monotonic() - started < 30
    assert status == 130 and err.strip().endswith("scheduler-sim: interrupted")
    assert [r["policy"] for r in json.loads(out)["runs"]] == ["vllm"]
    assert sorted(os.listdir(tmp_path)) == ["trace.jsonl"]


@pytest.mark.parametrize("interrupt, status, word", [
    (KeyboardInterrupt, 130, "interrupted"),  # Ctrl-C
    (interrupts.Terminated, 143, "terminated"),  # SIGTERM: what Slurm sends at a time limit
])
def test_jobs_1_interrupted_prints_what_finished(tmp_path, monkeypatch, interrupt, status,
                                                 word):
    real_run = runs.run_policy

    def interrupt_second(plan, position, policy, sinks, on_end=None):
        if position == 1:
            raise interrupt
        return real_run(plan, position, policy, sinks, on_end)

    monkeypatch.setattr(runs, "run_policy", interrupt_second)
    trace = write(tmp_path, TINY)
    code, out, err = run(["replay", trace, "--policy", "vllm", "--policy", "sglang",
                          "--requests-csv", str(tmp_path / "r.csv"), "--json"])
    assert (code, err) == (status, f"scheduler-sim: {word}\n")
    assert [r["policy"] for r in json.loads(out)["runs"]] == ["vllm"]
    assert sorted(os.listdir(tmp_path)) == ["trace.jsonl"]


def test_sigterm_with_jobs_prints_what_finished_and_leaves_no_file(tmp_path, monkeypatch):
    """SIGTERM's Terminated in the parent after the first policy, with -j 2: exit 143,
    the first policy's summary, no output file; the slow child is stopped."""
    real_run, real_join = runs.run_policy, runs._join

    def slow_second(plan, position, policy, sinks, on_end=None):
        if position == 1:
            time.sleep(60)  # in the child (forked with this patch): stopped by the parent
        return real_run(plan, position, policy, sinks, on_end)

    def terminated_join(*args):
        real_join(*args)
        raise interrupts.Terminated

    monkeypatch.setattr(runs, "run_policy", slow_second)
    monkeypatch.setattr(runs, "_join", terminated_join)
    trace = write(tmp_path, TINY)
    started = time.monotonic()
    status, out, err = run(["replay", trace, "--policy", "vllm", "--policy", "sglang",
                            "-j", "2", "--events", str(tmp_path / "e.jsonl"), "--json"])
    assert time.monotonic() - started < 30
    assert status == 143 and err.strip().endswith("scheduler-sim: terminated")
    assert [r["policy"] for r in json.loads(out)["runs"]] == ["vllm"]
    assert sorted(os.listdir(tmp_path)) == ["trace.jsonl"]


@pytest.mark.parametrize("jobs", ["0", "-1"])
def test_jobs_must_be_positive(tmp_path, jobs):
    status, _, err = run(["replay", write(tmp_path, TINY), "-j", jobs])
    assert status == 2 and f"-j must be an integer >= 1, got {jobs}" in err


def test_perfetto_to_stdout_moves_the_table_and_excludes_the_others(tmp_path):
    trace = write(tmp_path, TINY)
    status, out, err = run(["replay", trace, "--perfetto", "-"])
    assert status == 0 and json.loads(out)["traceEvents"] and "requests" in err
    status, _, err = run(["replay", trace, "--perfetto", "-", "--events", "-"])
    assert status == 2 and "--events - and --perfetto - cannot both" in err


def test_jobs_2_writes_the_same_html_report_as_jobs_1(tmp_path):
    """Each child returns the series its report needs; the parent draws the same page."""
    records = TINY + [{"type": "request", "id": f"g{i}", "arrival": i, "prompt_tokens": 5,
                       "output_tokens": 3 + i % 4} for i in range(20)]
    records[0] = dict(records[0], num_blocks=40)
    trace = write(tmp_path, records)
    pages = []
    for jobs in ("1", "2"):
        target = tmp_path / f"report-{jobs}.html"
        status, _, err = run(["replay", trace, "-j", jobs, "--policy", "vllm", "--policy",
                              "continuous", "--report", str(target)])
        assert status == 0, err
        pages.append(target.read_bytes())
    assert pages[0] == pages[1] and b"<svg" in pages[0]


# --- track numbers without a table of every request ------------------------------------

def test_track_numbers_are_read_as_requests_arrive(tmp_path):
    """The reader reads the trace's requests only as far as the one asked for: r0 reads
    one; r2 reads r1 too, which waits in `ahead` until asked for; a request handed to
    a decode replica keeps its number; an id the trace lacks is 0."""
    from scheduler_sim.io.perfetto import TrackNumbers
    from scheduler_sim.io.trace import read_trace
    trace = read_trace(write(tmp_path, TINY[:1] + [
        {"type": "request", "id": f"r{i}", "arrival": i, "prompt_tokens": 4,
         "output_tokens": 2} for i in range(4)]))
    reader = TrackNumbers(trace.workload).reader()
    assert reader.line("r0") == 2 and reader.ahead == {}
    assert reader.line("r2") == 4 and reader.ahead == {"r1": 3}
    assert reader.line("r1") == 3 and reader.ahead == {}
    reader.hand_off("r2", 4)
    assert reader.line("r2") == 4 and reader.handed == {}
    assert reader.line("r3") == 5 and reader.line("nobody") == 0


def test_a_fleet_replay_leaves_the_reader_empty(tmp_path):
    """After a replay of 40 requests on a fleet of 2 (arrivals two at a time, so the
    replicas see them in another order) every request has its line as its track and
    the reader holds nothing."""
    from scheduler_sim.fleet import make_fleet
    from scheduler_sim.io.outputs import Output
    from scheduler_sim.io.perfetto import TrackNumbers, fragment
    from scheduler_sim.io.trace import read_trace
    from scheduler_sim.io.trace_config import resolve_options
    from scheduler_sim.records.clock import Clock
    trace = read_trace(write(tmp_path, TINY[:1] + [
        {"type": "request", "id": f"q{i}", "arrival": i // 2, "prompt_tokens": 4,
         "output_tokens": 2} for i in range(40)]))
    options, _ = resolve_options(trace.config, {"replicas": 2, "num_blocks": 8})
    out = Output(str(tmp_path / "part.json"), io.StringIO())
    part = fragment(out, 0, "continuous", Clock.of(options), TrackNumbers(trace.workload))
    make_fleet(trace.workload, options, "continuous", on_event=part.listener).run()
    part.finish()
    out.commit()
    reader = part.track_number.__self__
    assert reader.ahead == {} and reader.handed == {}
    events = json.loads("[" + (tmp_path / "part.json").read_text() + "]")
    names = {(e["pid"], e["tid"], e["args"]["name"]) for e in events
             if e["name"] == "thread_name" and e["tid"]}  # (0: the GPU's track)
    assert {(tid, name) for _, tid, name in names} == {(i + 2, f"q{i}") for i in range(40)}
    assert {pid for pid, _, _ in names} == {1000, 1001}


def test_a_copy_aborted_by_a_cancel_leaves_no_second_track(tmp_path):
    """Disaggregated, a 0.001 Gb/s link: a's copy (6,291,456 us) is cancelled at 0.1 s on
    the decode replica (process 1001). Its track there is named once, on a's line (2),
    and ends with the cancel: the copy's late `transfer_done` (aborted) adds nothing. The
    copy starts when a's prefill of 6 tokens ends, under the uncalibrated physics
    (`calibration: none`): linear sqrt((13,958,643,712 B / (3.35e12 x 0.78))^2 + (2 x
    6,979,321,856 x 6 / (989e12 x 0.75))^2) = sqrt(5.34200^2 + 0.112911^2) = 5.34319 ms,
    LM head 1,050,673,152 B / 2.613e12 = 0.402097 ms, attention 21 pairs x 524,288 /
    494.5e12 = 0.0000223 ms, KV write 6 x 131,072 / 2.68e12 = 0.000293 ms, elementwise 6 x
    5,505,024 / 1.675e12 = 0.019719 ms, step 0.5 ms: 6.26532 ms, completed at the 1-us
    step ceil(6,265.32) = 6,266."""
    records = [{"type": "config", "block_size": 4, "prefill_replicas": 1,
                "decode_replicas": 1, "num_blocks": 2, "kv_link_gbps": 0.001,
                "cost_model": "llama-3-8b/h100-sxm", "calibration": "none",
                "tick_seconds": 0.001},
               {"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 6,
                "output_tokens": 3},
               {"type": "request", "id": "b", "arrival": 50, "prompt_tokens": 8,
                "output_tokens": 1},
               {"type": "preempt", "id": "a", "at": 90},
               {"type": "cancel", "id": "a", "at": 100}]
    _, doc = _perfetto(tmp_path, records)
    decode_a = [(e["name"], e["ph"], e.get("ts"), e.get("dur")) for e in doc["traceEvents"]
                if e["pid"] == 1001 and e["tid"] == 2]
    assert decode_a == [("thread_name", "M", None, None), ("thread_sort_index", "M", None, None),
                        ("kv transfer", "X", 6266, 6291456), ("cancelled", "i", 100000, None)]
    prefill_a = [e["name"] for e in doc["traceEvents"] if e["pid"] == 1000 and e["tid"] == 2]
    assert prefill_a == ["thread_name", "thread_sort_index", "prefill", "prefilled"]


@pytest.mark.slow  # replays 3,000 requests with a listener: 1.6 s of CPU
def test_a_waiting_request_is_one_int(tmp_path):
    """3,000 requests at 2 a tick overload `continuous` (more than 1,000 wait at once):
    at every snapshot the track holds a `_Request` only for the requests it saw
    admitted, no more than are running (no preemption here); the waiting are one int
    each, their arrival and track number, and the last request's track still shows its
    wait, ending where its prefill starts."""
    from scheduler_sim.engine.core import Engine
    from scheduler_sim.io.generator import WorkloadSpec, generate
    from scheduler_sim.io.outputs import Output
    from scheduler_sim.io.perfetto import TrackNumbers, fragment
    from scheduler_sim.io.trace import read_trace
    from scheduler_sim.io.trace_config import resolve_options
    from scheduler_sim.records.clock import Clock
    trace = read_trace(write(tmp_path, generate(WorkloadSpec(seed=1, requests=3000, rate=2))))
    options, _ = resolve_options(trace.config, {})
    out = Output(str(tmp_path / "part.json"), io.StringIO())
    part = fragment(out, 0, "continuous", Clock.of(options), TrackNumbers(trace.workload))
    track = part.listener()
    most = {"waiting": 0, "held": 0, "excess": 0}

    def listen(event):
        track(event)
        if event.kind == "snapshot":
            most["waiting"] = max(most["waiting"], len(track.waiting))
            most["excess"] = max(most["excess"], len(track.live) - event.running)

    result = Engine(trace.workload, options, "continuous", on_event=listen).run()
    part.finish()
    out.commit()
    assert result.summary["preemptions"] == 0
    assert most["waiting"] > 1000 and most["excess"] <= 0
    assert track.live == {} and track.waiting == {}
    events = json.loads("[" + (tmp_path / "part.json").read_text() + "]")
    last = [e for e in events if e.get("tid") == 3000]  # g2999, on line 3000, waited
    assert [e["name"] for e in last] == ["thread_name", "thread_sort_index", "waiting",
                                         "prefill", "decode"]
    assert last[2]["dur"] > 0 and last[2]["ts"] + last[2]["dur"] == last[3]["ts"]


@pytest.mark.parametrize("signum, status", [(15, 143), (2, 130)])
def test_a_signal_whose_exception_was_lost_still_leaves_no_output(tmp_path, monkeypatch,
                                                                   signum, status):
    """A SIGTERM (or SIGINT) whose handler ran but whose exception Python dropped (as
    it drops one raised inside a __del__): the replay still ends as interrupted, and
    none of its four outputs appears."""
    from scheduler_sim.records import interrupts
    real_run = runs.run_policy

    def signalled(plan, position, policy, sinks, on_end=None):
        finished = real_run(plan, position, policy, sinks, on_end)
        interrupts.mark(signum)  # the handler's note; its exception went nowhere
        return finished

    monkeypatch.setattr(runs, "run_policy", signalled)
    trace = write(tmp_path, TINY)
    status_, _, err = run(["replay", trace, "--events", str(tmp_path / "e.jsonl"),
                           "--requests-csv", str(tmp_path / "r.csv"), "--perfetto",
                           str(tmp_path / "p.json"), "--report", str(tmp_path / "r.html")])
    assert status_ == status
    assert err.endswith("scheduler-sim: terminated\n" if signum == 15
                        else "scheduler-sim: interrupted\n")
    assert sorted(os.listdir(tmp_path)) == ["trace.jsonl"]


def test_a_steady_decode_stretch_is_one_slice_of_the_gpu_track(tmp_path):
    """Two requests of 4-token prompts admitted together, 6 outputs each: one prefill
    dispatch of 2 rows (8 prompt tokens), then five decodes of 2 rows back to back:
    one slice of five dispatches."""
    _, doc = _perfetto(tmp_path, [
        {"type": "config", "block_size": 4, "num_blocks": 40},
        {"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 4, "output_tokens": 6},
        {"type": "request", "id": "b", "arrival": 0, "prompt_tokens": 4, "output_tokens": 6}])
    gpu = [(e["name"], e["ts"], e["dur"], e["args"]) for e in doc["traceEvents"]
           if e["ph"] == "X" and e["tid"] == 0]
    assert gpu == [
        ("prefill", 0, 1000, {"dispatches": 1, "rows": 2, "tokens": 8, "prompt_tokens": 8}),
        ("decode", 1000, 5000, {"dispatches": 5, "rows": 2, "tokens": 10,
                                "prompt_tokens": 0})]


def test_sampling_keeps_every_kth_track_and_says_so(tmp_path):
    """--perfetto-sample 2 over requests on lines 2 to 7: the tracks of lines 2, 4 and 6
    only; the counters' first change, then every second; the GPU track whole."""
    records = [{"type": "config", "block_size": 4, "num_blocks": 40}] + [
        {"type": "request", "id": f"q{i}", "arrival": 3 * i, "prompt_tokens": 4,
         "output_tokens": 2} for i in range(6)]
    _, whole = _perfetto(tmp_path, records)
    _, half = _perfetto(tmp_path, records, "--perfetto-sample", "2")
    tracks = {e["tid"] for e in half["traceEvents"] if e["ph"] in "Xi" and e["tid"]}
    assert tracks == {2, 4, 6}
    assert half["otherData"]["sampled"] == (
        "the tracks of one request in 2 (trace lines 2, 4, ...), the others left out; the kv "
        "blocks' and queues' counters' first change of values and one in 2 after it; the GPU "
        "dispatches and utilisation whole")
    assert "sampled" not in whole["otherData"]

    def gpu(doc):
        return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == 0]
    assert gpu(half) == gpu(whole)
    kv = [e["ts"] for e in whole["traceEvents"] if e["name"] == "kv blocks"]
    assert [e["ts"] for e in half["traceEvents"] if e["name"] == "kv blocks"] == kv[::2]


def test_sampling_keeps_the_gpu_utilisation_counter_whole(tmp_path):
    """Under a cost model the `GPU utilisation` counter (one point per time bucket, at
    most 2,048) is not sampled with the `kv blocks` and `queues` counters (README)."""
    records = [{"type": "config", "block_size": 16, "num_blocks": 400}] + [
        {"type": "request", "id": f"q{i}", "arrival": 3 * i, "prompt_tokens": 40,
         "output_tokens": 4} for i in range(6)]
    flags = ("--cost-model", "llama-3-8b/h100-sxm")
    _, whole = _perfetto(tmp_path, records, *flags)
    _, half = _perfetto(tmp_path, records, *flags, "--perfetto-sample", "2")

    def counter(doc, name):
        return [e for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == name]
    assert len(counter(whole, "GPU utilisation")) > 2
    assert counter(half, "GPU utilisation") == counter(whole, "GPU utilisation")
    assert len(counter(half, "queues")) < len(counter(whole, "queues"))


def test_sampling_needs_perfetto_and_a_positive_k(tmp_path):
    path = write(tmp_path, TINY)
    assert run(["replay", path, "--perfetto-sample", "2"])[2].endswith(
        "--perfetto-sample samples the tracks of --perfetto: give --perfetto\n")
    assert run(["replay", path, "--perfetto", str(tmp_path / "p.json"),
                "--perfetto-sample", "0"])[0] == 2
