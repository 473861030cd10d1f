"""The command line (§10), driven in-process through `cli.main(argv, out, err)`.

The tiny trace used throughout (TINY): block_size 4, num_blocks 8, policies
serial and continuous; requests a and b arrive at 0 with P=4, N=3. Each needs
a credit of ceil((4+3-1)/4) = 2 blocks.
- continuous: both admitted at 0 (4 <= 8); tick 0 prefills both (emits output
  1 at tick 1), ticks 1 and 2 decode both; both finish at 3: 3 iterations,
  makespan 3.
- serial: a runs at ticks 0, 1, 2 and finishes at 3; b is admitted at 3, runs
  at 3, 4, 5 and finishes at 6: 6 iterations, makespan 6.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import scheduler_sim.policies
from conftest import ROOT, req
from scheduler_sim.cli.main import main
from scheduler_sim.policies.continuous import ContinuousPolicy

CONFORMANCE = Path(__file__).resolve().parent / "data" / "conformance"

TINY = [
    {"type": "config", "block_size": 4, "num_blocks": 8, "policy": ["serial", "continuous"]},
    req("a", 0, 4, 3),
    req("b", 0, 4, 3),
]


def write(directory: Path, records: list, name: str = "trace.jsonl") -> str:
    """Write records (dicts, or raw str lines) as a JSONL file; return its path."""
    path = directory / name
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def run(argv: list[str]) -> tuple[int, str, str]:
    """Call main in-process; return (status, stdout text, stderr text)."""
    out, err = io.StringIO(), io.StringIO()
    status = main(argv, out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def table_row(text: str, label: str) -> list[str]:
    """The value cells of the first table line whose label starts with `label`."""
    for line in text.splitlines():
        if line.startswith(label):
            return line[len(label):].split()[-_columns(text):]
    raise AssertionError(f"no row {label!r} in:\n{text}")


def table_header(text: str) -> list[str]:
    """The policy names of the header line (the first line after the blank line)."""
    lines = text.splitlines()
    return lines[lines.index("") + 1].split()


def _columns(text: str) -> int:
    return len(table_header(text))


# --- replay -------------------------------------------------------------------------

def test_replay_table_has_policy_columns_and_exact_numbers(tmp_path):
    """TINY: serial then continuous columns; iterations 6 vs 3, makespan 6 vs 3 (module docstring)."""
    status, out, err = run(["replay", write(tmp_path, TINY)])
    assert (status, err) == (0, "")
    assert table_header(out) == ["serial", "continuous"]
    assert table_row(out, "iterations") == ["6", "3"]
    assert table_row(out, "makespan") == ["6", "3"]
    assert table_row(out, "requests") == ["2", "2"]
    assert table_row(out, "completed") == ["2", "2"]


def test_replay_table_queue_delay_and_peaks(tmp_path):
    """serial: queue delays 0 (a) and 3 (b): mean 1.50; continuous 0, shown as 0.00 beside
    it (one style per row); peak reserved 2 vs 4 (both credits at once)."""
    status, out, _ = run(["replay", write(tmp_path, TINY)])
    assert status == 0
    assert table_row(out, "queue delay  mean") == ["1.50", "0.00"]
    assert table_row(out, "peak reserved") == ["2", "4"]


def test_policy_flag_overrides_config(tmp_path):
    """`--policy continuous` replaces the config's two policies: one column, 3 iterations."""
    status, out, _ = run(["replay", write(tmp_path, TINY), "--policy", "continuous"])
    assert status == 0
    assert table_header(out) == ["continuous"]
    assert table_row(out, "iterations") == ["3"]


def test_repeated_policy_flags_set_the_column_order(tmp_path):
    """`--policy continuous --policy serial` gives continuous first: iterations 3, 6."""
    status, out, _ = run(["replay", write(tmp_path, TINY),
                          "--policy", "continuous", "--policy", "serial"])
    assert status == 0
    assert table_header(out) == ["continuous", "serial"]
    assert table_row(out, "iterations") == ["3", "6"]


def test_option_flag_overrides_config(tmp_path):
    """`--num-blocks 2`: continuous fits only one 2-block credit at a time, so b waits for a:
    a at ticks 0-2 (done 3), b admitted at 3, done 6: 6 iterations, makespan 6."""
    status, out, _ = run(["replay", write(tmp_path, TINY), "--policy", "continuous",
                          "--num-blocks", "2"])
    assert status == 0
    assert table_row(out, "iterations") == ["6"]
    assert table_row(out, "makespan") == ["6"]
    assert "num_blocks 2 " in out


def test_num_blocks_one_rejects_both_requests(tmp_path):
    """`--num-blocks 1`: each request needs 2 blocks, so both are rejected and nothing runs."""
    status, out, _ = run(["replay", write(tmp_path, TINY), "--policy", "continuous",
                          "--num-blocks", "1", "--json"])
    assert status == 0
    (run_,) = json.loads(out)["runs"]
    assert (run_["iterations"], run_["finished_ignored"], run_["completed"]) == (0, 2, 0)


@pytest.mark.parametrize("flag, value, option, shown", [
    ("--block-size", "0", "block_size", "got 0"),
    ("--block-size", "abc", "block_size", "'abc'"),
    ("--num-blocks", "2.5", "num_blocks", "2.5"),
    ("--prefill-chunk", "0", "prefill_chunk", "got 0"),
    ("--num-blocks", "-1", "num_blocks", "got -1"),
    ("--watermark", "1.5", "watermark", "got 1.5"),
    ("--release-delay", "-2", "release_delay", "got -2"),
    ("--policy", "contnuous", "policy", "'contnuous'"),
    ("--order", "lifo", "order", "'lifo'"),
])
def test_invalid_flag_values_exit_2_naming_option_and_value(tmp_path, flag, value, option, shown):
    """A bad flag value is a usage error (exit 2) whose message names the option and the value."""
    status, out, err = run(["replay", write(tmp_path, TINY), flag, value])
    assert status == 2
    assert out == ""
    assert option in err
    assert shown in err
    assert "Traceback" not in err


def test_duplicate_policy_flags_are_a_usage_error(tmp_path):
    """`--policy serial --policy serial` lists a name twice: exit 2."""
    status, _, err = run(["replay", write(tmp_path, TINY), "--policy", "serial",
                          "--policy", "serial"])
    assert status == 2
    assert "policy lists a name twice" in err


def test_unknown_flag_is_reported_on_the_given_err_stream(tmp_path, capsys):
    """An unrecognised flag exits 2 and the message goes to main's `err`, not to sys.stderr."""
    status, out, err = run(["replay", write(tmp_path, TINY), "--block-sise", "4"])
    assert status == 2
    assert "--block-sise" in err


def test_json_output(tmp_path):
    """`--json`: runs in policy order with exact iterations (serial 6, continuous 3) and the options."""
    status, out, err = run(["replay", write(tmp_path, TINY), "--json"])
    assert (status, err) == (0, "")
    doc = json.loads(out)
    assert [r["policy"] for r in doc["runs"]] == ["serial", "continuous"]
    assert [r["iterations"] for r in doc["runs"]] == [6, 3]
    assert [r["makespan"] for r in doc["runs"]] == [6, 3]
    assert doc["options"]["block_size"] == 4
    assert doc["options"]["num_blocks"] == 8
    assert doc["options"]["policy"] == ["serial", "continuous"]


def _events(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_events_file_with_two_policies(tmp_path):
    """`--events FILE`: JSONL, every record has tick, event and policy; serial's records come
    first; dispatch records per policy equal its iterations (6 and 3)."""
    events_path = tmp_path / "events.jsonl"
    status, out, _ = run(["replay", write(tmp_path, TINY), "--events", str(events_path)])
    assert status == 0
    assert table_row(out, "iterations") == ["6", "3"]
    records = _events(events_path.read_text(encoding="utf-8"))
    assert records
    assert all({"tick", "event", "policy"} <= set(r) for r in records)
    policies = [r["policy"] for r in records]
    assert policies == sorted(policies, key=["serial", "continuous"].index)
    dispatches = [r["policy"] for r in records if r["event"] == "dispatch"]
    assert (dispatches.count("serial"), dispatches.count("continuous")) == (6, 3)
    assert sorted(os.listdir(tmp_path)) == ["events.jsonl", "trace.jsonl"]


def test_events_file_with_one_policy(tmp_path):
    """One policy: the first records are a's and b's arrivals at tick 0, every record has tick/event."""
    events_path = tmp_path / "ev.jsonl"
    status, _, _ = run(["replay", write(tmp_path, TINY), "--policy", "continuous",
                        "--events", str(events_path)])
    assert status == 0
    records = _events(events_path.read_text(encoding="utf-8"))
    assert all("tick" in r and "event" in r for r in records)
    assert [(r["tick"], r["event"], r["id"]) for r in records[:2]] == [
        (0, "arrival", "a"), (0, "arrival", "b")]
    finished = [(r["tick"], r["id"]) for r in records if r["event"] == "finished"]
    assert finished == [(3, "a"), (3, "b")]


def test_events_to_stdout_put_the_table_on_stderr(tmp_path):
    """`--events -`: stdout is pure JSONL of events, the table goes to stderr."""
    status, out, err = run(["replay", write(tmp_path, TINY), "--events", "-"])
    assert status == 0
    records = _events(out)
    assert records and all({"tick", "event", "policy"} <= set(r) for r in records)
    assert table_header(err) == ["serial", "continuous"]
    assert table_row(err, "iterations") == ["6", "3"]


def test_events_into_a_missing_directory_is_a_usage_error(tmp_path):
    """An events path whose directory does not exist: exit 2 naming the path."""
    target = str(tmp_path / "nodir" / "ev.jsonl")
    status, _, err = run(["replay", write(tmp_path, TINY), "--events", target])
    assert status == 2
    assert target in err
    assert "Traceback" not in err


def test_events_path_that_is_a_directory_is_a_usage_error(tmp_path):
    """`--events DIR` cannot be written: exit 2 with a message, no temp file left, no exception."""
    (tmp_path / "adir").mkdir()
    trace = write(tmp_path, TINY)
    status, _, err = run(["replay", trace, "--events", str(tmp_path / "adir")])
    assert status == 2
    assert "adir" in err
    assert sorted(os.listdir(tmp_path)) == ["adir", "trace.jsonl"]


# --- internal invariants ----------------------------------------------------------------

class OverBudget(ContinuousPolicy):
    """Dispatches every prefill request's whole remaining prompt, ignoring token_budget."""

    name = "broken"

    def schedule(self, now):
        return [(r, r.phase_remaining) for r, _ in super().schedule(now)]


class OverAllocate(ContinuousPolicy):
    """Reserves a credit of 1 block whatever the request needs."""

    name = "broken"

    def blocks_to_finish(self, req):
        return 1


def test_invariant_failure_exits_3_with_the_equation(tmp_path, monkeypatch):
    """token_budget 2, P=4: the broken plan dispatches 4 tokens: 'dispatch tokens(4) <=
    token_budget(2) is false' at tick 0, exit 3, no traceback."""
    monkeypatch.setitem(scheduler_sim.policies.POLICIES, "broken", OverBudget)
    trace = write(tmp_path, [{"type": "config", "block_size": 4, "num_blocks": 8,
                              "token_budget": 2}, req("a", 0, 4, 3)])
    status, out, err = run(["replay", trace, "--policy", "broken"])
    assert status == 3
    assert out == ""
    assert "dispatch tokens(4) <= token_budget(2) is false" in err
    assert "tick 0" in err
    assert "Traceback" not in err


def test_over_allocation_exits_3_with_the_equation(tmp_path, monkeypatch):
    """P=8, N=1, B=4 needs 2 blocks for its prefill but got a credit of 1:
    'allocated(2) <= credit(1) is false', exit 3."""
    monkeypatch.setitem(scheduler_sim.policies.POLICIES, "broken", OverAllocate)
    trace = write(tmp_path, [{"type": "config", "block_size": 4, "num_blocks": 8},
                             req("a", 0, 8, 1)])
    status, _, err = run(["replay", trace, "--policy", "broken"])
    assert status == 3
    assert "allocated(2) <= credit(1) is false" in err
    assert "Traceback" not in err


def test_failed_run_leaves_no_events_file(tmp_path, monkeypatch):
    """An invariant failure after events were written: neither the events file nor a temp file remains."""
    monkeypatch.setitem(scheduler_sim.policies.POLICIES, "broken", OverBudget)
    trace = write(tmp_path, [{"type": "config", "block_size": 4, "num_blocks": 8,
                              "token_budget": 2}, req("a", 0, 4, 3)])
    status, _, _ = run(["replay", trace, "--policy", "broken", "--events",
                        str(tmp_path / "events.jsonl")])
    assert status == 3
    assert os.listdir(tmp_path) == ["trace.jsonl"]


def test_failed_second_policy_leaves_no_events_file(tmp_path, monkeypatch):
    """continuous runs fine, then the broken policy fails: the file still does not appear."""
    monkeypatch.setitem(scheduler_sim.policies.POLICIES, "broken", OverBudget)
    trace = write(tmp_path, [{"type": "config", "block_size": 4, "num_blocks": 8,
                              "token_budget": 2}, req("a", 0, 4, 3)])
    status, _, _ = run(["replay", trace, "--policy", "continuous", "--policy", "broken",
                        "--events", str(tmp_path / "events.jsonl")])
    assert status == 3
    assert os.listdir(tmp_path) == ["trace.jsonl"]


class Interrupted(ContinuousPolicy):
    """The user presses Ctrl-C during the first schedule (a real SIGINT, so that it is
    not taken for an interrupt the policy raised itself)."""

    name = "interrupted"

    def schedule(self, now):
        import signal
        import time
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(10)  # the handler raises KeyboardInterrupt here


def test_interrupt_exits_130_and_leaves_no_events_file(tmp_path, monkeypatch):
    """Ctrl-C during a replay: exit 130, a short message, and no partial events file."""
    monkeypatch.setitem(scheduler_sim.policies.POLICIES, "interrupted", Interrupted)
    trace = write(tmp_path, TINY)
    # As from a terminal: the suite may run with SIGINT ignored (a background job's lot),
    # where no Ctrl-C can come and the policy's own signal would be ignored too.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        status, _, err = run(["replay", trace, "--policy", "interrupted", "--events",
                              str(tmp_path / "events.jsonl")])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert status == 130
    assert "interrupted" in err
    assert "Traceback" not in err
    assert os.listdir(tmp_path) == ["trace.jsonl"]


# --- bad input ----------------------------------------------------------------------------

BAD = [
    req("r1", 0, 4, 1),
    "[1]",
    {"type": "request", "id": "r2", "arrival": 0, "prompt_token": 4, "output_tokens": 1},
    req("r1", 1, 4, 1),
]


@pytest.mark.parametrize("command", ["replay", "validate", "check"])
def test_bad_trace_lists_every_problem_and_exits_2(tmp_path, command):
    """Every problem goes to stderr as `file:line: ...` in order, nothing on stdout, no traceback."""
    path = write(tmp_path, BAD)
    status, out, err = run([command, path])
    assert status == 2
    assert out == ""
    assert err.splitlines() == [
        f"{path}:2: expected a JSON object, got array",
        f"{path}:3: request 'r2': unknown field 'prompt_token' (did you mean 'prompt_tokens'?)",
        f"{path}:3: request 'r2': missing field 'prompt_tokens'",
        f"{path}:4: request 'r1': duplicate request id 'r1' (first on line 1)",
    ]
    assert "Traceback" not in err


def test_deeply_nested_trace_exits_2_without_traceback(tmp_path):
    """100000 nested arrays: one clean message on line 1, exit 2."""
    path = tmp_path / "deep.jsonl"
    path.write_bytes(b"[" * 100000 + b"]" * 100000 + b"\n")
    status, _, err = run(["replay", str(path)])
    assert status == 2
    assert err.startswith(f"{path}:1: ")
    assert "Traceback" not in err


def test_missing_trace_file_exits_2(tmp_path):
    """A trace that does not exist: exit 2, the message names the path."""
    path = str(tmp_path / "nope.jsonl")
    status, out, err = run(["replay", path])
    assert status == 2
    assert out == ""
    assert path in err
    assert "Traceback" not in err


# --- validate -------------------------------------------------------------------------------

def test_validate_prints_one_line_summary(tmp_path):
    """TINY validates: one line naming the file, 2 requests and the config, exit 0."""
    path = write(tmp_path, TINY)
    status, out, err = run(["validate", path])
    assert (status, err) == (0, "")
    assert out.count("\n") == 1 and out.endswith("\n")
    assert out.startswith(f"{path}: ok, 2 requests")
    assert "block_size=4" in out


# --- stdin ------------------------------------------------------------------------------------

class _Stdin:
    """A stand-in for sys.stdin with a binary `.buffer`."""

    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


def _tiny_bytes() -> bytes:
    return "".join(json.dumps(r) + "\n" for r in TINY).encode()


def test_replay_reads_stdin_with_dash(monkeypatch):
    """`replay -` replays TINY from stdin: the same numbers, the trace named <stdin>."""
    monkeypatch.setattr(sys, "stdin", _Stdin(_tiny_bytes()))
    status, out, _ = run(["replay", "-"])
    assert status == 0
    assert "<stdin>" in out
    assert table_row(out, "iterations") == ["6", "3"]


def test_validate_stdin_errors_name_stdin(monkeypatch):
    """A bad line read from stdin is reported as `<stdin>:1: ...`."""
    monkeypatch.setattr(sys, "stdin", _Stdin(b"[]\n"))
    status, _, err = run(["validate", "-"])
    assert status == 2
    assert err == "<stdin>:1: expected a JSON object, got array\n"


@pytest.mark.parametrize("argv", [
    ["validate", "-"], ["replay", "-"], ["check", "-"], ["sweep", "-", "--grid", "num_blocks=8"],
    ["convert", "--from", "azure", "-"], ["convert", "--from", "mooncake", "-"],
    ["generate", "--seed", "1", "--requests", "2", "--prompt-len", "empirical:-"]])
def test_a_closed_stdin_is_a_usage_error(monkeypatch, argv):
    """Started with standard input closed (`<&-`), Python has no sys.stdin: reading `-`
    was an AttributeError traceback; now one line, exit 2."""
    monkeypatch.setattr(sys, "stdin", None)
    status, out, err = run(argv)
    assert (status, out) == (2, "")
    assert err == "scheduler-sim: error: <stdin>: cannot read: standard input is closed\n"


def test_a_pipe_or_device_is_read_no_further_than_a_bound(monkeypatch, tmp_path):
    """What is not a regular file was read whole, however long: `validate /dev/zero` or
    `yes | scheduler-sim validate -` took memory until none was left (MemoryError under
    a limit). Now past MAX_PIPED bytes (here 64) it is one line, exit 2; a regular file
    of any size is still read whole."""
    import os
    from scheduler_sim.io import inputs
    monkeypatch.setattr(inputs, "MAX_PIPED", 64)
    line = b'{"type":"request","id":"a","arrival":0,"prompt_tokens":4,"output_tokens":2}\n'
    read, write = os.pipe()
    os.write(write, line)
    os.close(write)
    try:
        status, out, err = run(["validate", f"/dev/fd/{read}"])
    finally:
        os.close(read)
    assert (status, out) == (2, "")
    assert err == (f"scheduler-sim: error: /dev/fd/{read}: more than 64 bytes from a pipe or "
                   "a device, which is read whole: save it to a file\n")
    monkeypatch.setattr(sys, "stdin", _Stdin(line))
    assert run(["validate", "-"])[2] == ("scheduler-sim: error: <stdin>: more than 64 bytes "
                                         "from a pipe or a device, which is read whole: "
                                         "save it to a file\n")
    path = tmp_path / "t.jsonl"
    path.write_bytes(line)
    assert run(["validate", str(path)])[0] == 0


# --- stall ----------------------------------------------------------------------------------

class Stub(ContinuousPolicy):
    """Never admits or runs anything: the run can only stall."""

    name = "stub"

    def schedule(self, now):
        return []


def test_stalled_run_exits_1(tmp_path, monkeypatch):
    """Under the stub both TINY requests are stuck at tick 0: each ends finished_error, exit 1."""
    monkeypatch.setitem(scheduler_sim.policies.POLICIES, "stub", Stub)
    events_path = tmp_path / "ev.jsonl"
    status, out, err = run(["replay", write(tmp_path, TINY), "--policy", "stub",
                            "--events", str(events_path)])
    assert status == 1
    assert "stall" in err
    assert table_row(out, "finished_error") == ["2"]
    assert table_row(out, "iterations") == ["0"]
    stalled = [(r["tick"], r["id"]) for r in _events(events_path.read_text())
               if r["event"] == "stalled"]
    assert stalled == [(0, "a"), (0, "b")]


# --- check ----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(CONFORMANCE.glob("*.jsonl")), ids=lambda p: p.name)
def test_check_passes_every_conformance_file(path):
    """Every conformance trace of tests/data/conformance holds: exit 0 and an ok line."""
    status, out, err = run(["check", str(path)])
    assert (status, err) == (0, "")
    assert f"{path}: ok: " in out


def test_conformance_directory_is_not_empty():
    """The parametrised check above must have something to check."""
    assert len(list(CONFORMANCE.glob("*.jsonl"))) >= 5


def test_check_reports_a_changed_expectation(tmp_path):
    """exact_block.jsonl with a's finished changed to 2 (it finishes at 1): exit 1, the message
    gives the line (4), the policy, the field, expected 2 and actual 1."""
    text = (CONFORMANCE / "exact_block.jsonl").read_text(encoding="utf-8")
    assert '"finished":1,' in text
    path = tmp_path / "exact_block.jsonl"
    path.write_text(text.replace('"finished":1,', '"finished":2,'), encoding="utf-8")
    status, out, _ = run(["check", str(path)])
    assert status == 1
    assert f"{path}:4: [continuous] request 'a' finished: expected 2, got 1" in out.splitlines()
    assert "FAILED" in out


AT_TRACE = [
    {"type": "config", "block_size": 4, "num_blocks": 4, "release_delay": 5},
    req("r1", 0, 4, 1),
]


def test_check_at_expectations_between_boundaries(tmp_path):
    """r1 (P=4, N=1, one block) runs at 0 and finishes at 1; its block drains until 1+5=6.
    Tick 0 (after admission, before allocation): reserved 1, allocated 0, free 4. Tick 3 lies
    between the boundaries 1 and 6: draining 1, free 3. Tick 8, after the release: free 4."""
    path = write(tmp_path, AT_TRACE + [
        {"type": "expect", "at": 0, "reserved": 1, "allocated": 0, "draining": 0, "free": 4},
        {"type": "expect", "at": 3, "reserved": 0, "allocated": 0, "draining": 1, "free": 3,
         "running": 0, "waiting": 0},
        {"type": "expect", "at": 8, "draining": 0, "free": 4},
    ])
    status, out, _ = run(["check", path])
    assert status == 0, out
    assert "3 expectation(s) hold" in out


def test_check_at_expectation_failure_shows_values(tmp_path):
    """Claiming free 4 at tick 3 (it is 3: one block still draining) fails on line 3."""
    path = write(tmp_path, AT_TRACE + [{"type": "expect", "at": 3, "free": 4}])
    status, out, _ = run(["check", path])
    assert status == 1
    assert f"{path}:3: [continuous] tick 3 free: expected 4, got 3" in out.splitlines()


def test_check_expect_for_policy_not_replayed_is_not_applied(tmp_path):
    """A (wrong) serial expectation is not checked when only continuous runs; it is reported as
    not replayed and the continuous one (3 iterations) holds: exit 0."""
    path = write(tmp_path, TINY + [
        {"type": "expect", "policy": "serial", "iterations": 999},
        {"type": "expect", "policy": "continuous", "iterations": 3},
    ])
    status, out, _ = run(["check", path, "--policy", "continuous"])
    assert status == 0, out
    assert "1 expectation(s) hold" in out
    assert "1 for policies not replayed" in out


def test_check_without_expects(tmp_path):
    """A trace without expect records checked nothing, which must not pass: exit 1 and
    says so."""
    path = write(tmp_path, TINY)
    status, out, _ = run(["check", path])
    assert status == 1
    assert out == f"{path}: FAILED: nothing was checked: it has no expect records\n"


def test_check_with_no_expectation_for_the_replayed_policies(tmp_path):
    """Expectations only for `serial`, replayed under `continuous`: nothing applies, exit 1
    naming the record count and the policies replayed."""
    path = write(tmp_path, TINY + [{"type": "expect", "policy": "serial", "iterations": 3}])
    status, out, _ = run(["check", path, "--policy", "continuous"])
    assert status == 1
    assert out == (f"{path}: FAILED: nothing was checked: none of its 1 expect record(s) "
                   "applies to the policies replayed (continuous)\n")


def test_check_applies_flags(tmp_path):
    """`--num-blocks 2` makes continuous take 6 iterations (see test_option_flag_overrides_config),
    so an expectation of 3 fails."""
    path = write(tmp_path, TINY + [{"type": "expect", "policy": "continuous", "iterations": 3}])
    status, out, _ = run(["check", path, "--num-blocks", "2"])
    assert status == 1
    assert f"{path}:4: [continuous] run iterations: expected 3, got 6" in out.splitlines()


# --- the module entry point and determinism -------------------------------------------------

def test_python_m_help_exits_0():
    """`python -m scheduler_sim --help` prints usage listing the commands and exits 0."""
    proc = subprocess.run([sys.executable, "-m", "scheduler_sim", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    assert "usage:" in proc.stdout
    for command in ("replay", "validate", "check"):
        assert command in proc.stdout


DETERMINISM = [
    {"type": "config", "block_size": 4, "num_blocks": 6, "token_budget": 6,
     "release_delay": 1, "policy": ["continuous", "serial"]},
    req("a", 0, 5, 4), req("b", 0, 3, 2), req("c", 1, 6, 3), req("d", 2, 2, 5),
    {"type": "cancel", "id": "c", "at": 4},
    {"type": "preempt", "id": "a", "at": 2},
]


def test_two_replays_are_byte_identical(tmp_path):
    """E8: the same trace twice gives the same table and byte-identical events files."""
    path = write(tmp_path, DETERMINISM)
    first = run(["replay", path, "--events", str(tmp_path / "e1.jsonl")])
    second = run(["replay", path, "--events", str(tmp_path / "e2.jsonl")])
    assert first[0] == 0
    assert first == second
    e1 = (tmp_path / "e1.jsonl").read_bytes()
    assert e1 and e1 == (tmp_path / "e2.jsonl").read_bytes()
    assert run(["replay", path, "--json"]) == run(["replay", path, "--json"])


def test_copy_of_conformance_file_checks_the_same(tmp_path):
    """check does not depend on where the trace lives: a copy passes too."""
    src = CONFORMANCE / "serial_against_continuous.jsonl"
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    status, out, _ = run(["check", str(dst)])
    assert status == 0
    assert "4 expectation(s) hold" in out


def test_extreme_cost_model_values_are_usage_errors(tmp_path):
    """A tick of 5e-324 s or an MFU of 5e-324 would overflow the tick count: exit 2 with
    a message naming the option, never a traceback."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"type":"request","id":"a","arrival":0,"prompt_tokens":4,'
                     '"output_tokens":2}\n')
    for flag, value in (("--tick-seconds", "5e-324"), ("--mfu", "5e-324"),
                        ("--step-overhead", "1e308")):
        out, err = io.StringIO(), io.StringIO()
        status = main(["replay", str(trace), "--cost-model", "llama-3-8b/h100-sxm",
                       flag, value], out=out, err=err)
        assert status == 2, flag
        assert flag[2:].replace("-", "_") in err.getvalue()
        assert "Traceback" not in err.getvalue()


def test_events_and_csv_cannot_both_go_to_stdout(tmp_path):
    """`--events - --requests-csv -` would interleave two formats on stdout: exit 2."""
    path = write(tmp_path, TINY)
    status, out, err = run(["replay", path, "--events", "-", "--requests-csv", "-"])
    assert (status, out) == (2, "")
    assert err == ("scheduler-sim: error: --events - and --requests-csv - cannot both write "
                   "to standard output; send one of them to a file\n")


def test_convert_of_the_wrong_format_stops_after_five_lines(tmp_path):
    """A 60-row Azure CSV read as mooncake: none of its first 5 lines is a JSON object,
    so the reading stops there (issue 12: not 60 problems, or thousands): exit 2, the 5
    problems, and one line saying where it stopped, which format the file looks like
    and that no file was written."""
    path = tmp_path / "a.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    + "".join(f"2023-11-16 18:17:0{i % 10}.0,4,2\n" for i in range(60)))
    status, out, err = run(["convert", "--from", "mooncake", str(path), "-o",
                            str(tmp_path / "out.jsonl")])
    assert (status, out) == (2, "")
    assert err.splitlines() == [
        f"{path}:1: invalid JSON: Expecting value at column 1, got 'TIMESTAMP,ContextTok'...",
        f"{path}:2: invalid JSON: Extra data at column 5, got '-11-16 18:17:00.0,4,'...",
        f"{path}:3: invalid JSON: Extra data at column 5, got '-11-16 18:17:01.0,4,'...",
        f"{path}:4: invalid JSON: Extra data at column 5, got '-11-16 18:17:02.0,4,'...",
        f"{path}:5: invalid JSON: Extra data at column 5, got '-11-16 18:17:03.0,4,'...",
        f"{path}: stopped at line 5: none of the first 5 lines is a mooncake row; it looks "
        "like an azure file (--from azure); no file written"]
    assert not (tmp_path / "out.jsonl").exists()
