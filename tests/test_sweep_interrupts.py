"""A sweep interrupted by SIGTERM (what Slurm sends at a time limit) or Ctrl-C keeps the
rows of the configurations that finished: its --jsonl/--csv/--report hold them, in
grid order, it prints their table and one line saying how far it got, and exits 143
(130); `sweep merge` names the configurations such a file lacks. With no row
finished nothing is written. Rows reach the outputs as they finish, in grid order.

The signals come from a plugin policy in the configuration where the test wants
them (no timer racing the run): `TermSelf` sends SIGTERM to its own process (the
sweep's, under -j 1), `TermParent` to the parent of its worker (the sweep's, under
-j 2) and then sleeps until it is stopped; `Sleeps` never finishes.
"""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, req, run_cli, write_trace
from scheduler_sim.io import sweep_runs
from scheduler_sim.io.outputs import Output
from scheduler_sim.io.sweep import build_grid, check_axis
from scheduler_sim.io.sweep_rows import RowStream, format_csv, format_jsonl
from scheduler_sim.io.trace import read_trace
from scheduler_sim.records import interrupts

PLUGIN = textwrap.dedent('''
    import os
    import signal
    import time

    from scheduler_sim import QueueAndListPolicy


    class Plain(QueueAndListPolicy):
        def schedule(self, now):
            self.misbehave()
            while self.waiting:
                head = self.waiting.pop()
                self.view.admit(head, self.blocks_to_finish(head))
                self.running.append(head)
            return [(r, r.phase_remaining) for r in self.running]

        def misbehave(self):
            pass


    class Other(Plain):
        pass


    class Last(Plain):
        pass


    class TermSelf(Plain):
        def misbehave(self):
            os.kill(os.getpid(), signal.SIGTERM)


    class IntSelf(Plain):
        def misbehave(self):
            os.kill(os.getpid(), signal.SIGINT)


    class Sleeps(Plain):
        def misbehave(self):
            time.sleep(60)


    class Marks(Plain):
        def misbehave(self):
            open(os.path.join(os.path.dirname(__file__), "started"), "w").close()
            time.sleep(60)


    class TermParent(Plain):
        def misbehave(self):
            os.kill(os.getppid(), signal.SIGTERM)
            time.sleep(60)
''')

TIMEOUT = 30  # seconds: far more than any of these sweeps takes

# One request of 4 prompt tokens and 2 output tokens: every policy here admits it at
# tick 0 (its first token at tick 1) and finishes it at tick 2.
TABLE_HEAD = ("#  policy      completed  ttft p50  ttft p99  tpot p50  e2el p99  throughput"
              "    output  preempted  makespan\n"
              "                             ticks     ticks     ticks     ticks    req/tick"
              "  tok/tick                ticks\n")


def _row_line(index: int, policy: str) -> str:
    return (f"{index}  {policy:<10}          1         1         1         1         2"
            "        0.50      1.00          0         2\n")


@pytest.fixture
def folder(tmp_path):
    """A folder with the plugin and a one-request trace (both relative to it)."""
    (tmp_path / "p.py").write_text(PLUGIN)
    write_trace(tmp_path, [{"type": "config", "block_size": 4, "num_blocks": 8},
                           req("a", 0, 4, 2)], "t.jsonl")
    return tmp_path


def _sweep(folder, classes: list[str], *extra: str) -> subprocess.CompletedProcess:
    """`sweep t.jsonl --policy p.py:C ...` in `folder` as its own process, SIGINT and
    SIGTERM as a shell leaves them."""
    policies = [arg for cls in classes for arg in ("--policy", f"p.py:{cls}")]

    def default_signals() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "scheduler_sim", "sweep", "t.jsonl",
                           *policies, "--quiet", *extra], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT,
                          preexec_fn=default_signals)


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _merge_says(path) -> tuple[int, str]:
    status, out, err = run_cli(["sweep", "merge", str(path)])
    assert out == ""
    return status, err


def test_sigterm_keeps_the_rows_of_the_finished_configurations(folder):
    """SIGTERM in configuration 2 of 4 (-j 1): exit 143; rows.jsonl and rows.csv hold
    rows 0 and 1 under the sweep's header; the table shows them; one line says so;
    `sweep merge` names configurations 2 and 3 as missing; no temporary file is left."""
    done = _sweep(folder, ["Plain", "Other", "TermSelf", "Last"], "--jsonl", "rows.jsonl",
                  "--csv", "rows.csv")
    assert done.returncode == 143
    assert done.stderr == ("scheduler-sim: terminated after 2 of 4 configurations; "
                           "rows.jsonl and rows.csv hold those 2\n")
    assert done.stdout == ("scheduler-sim sweep t.jsonl: 2 of 4 configurations\n" + TABLE_HEAD
                           + _row_line(0, "p.py:Plain") + _row_line(1, "p.py:Other"))
    header, *rows = _lines(folder / "rows.jsonl")
    assert (header["configurations"], header["shard"], header["grid"]) == (
        4, None, {"policy": ["p.py:Plain", "p.py:Other", "p.py:TermSelf", "p.py:Last"]})
    assert [(r["index"], r["policy"], r["completed"], r["makespan"]) for r in rows] == [
        (0, "p.py:Plain", 1, 2), (1, "p.py:Other", 1, 2)]
    csv = (folder / "rows.csv").read_text().splitlines()
    assert len(csv) == 3 and csv[0].startswith("index,policy,time_unit,stalled,requests,")
    assert [line.split(",")[:5] for line in csv[1:]] == [
        ["0", "p.py:Plain", "ticks", "false", "1"], ["1", "p.py:Other", "ticks", "false", "1"]]
    assert sorted(os.listdir(folder)) == ["p.py", "rows.csv", "rows.jsonl", "t.jsonl"]
    assert _merge_says(folder / "rows.jsonl") == (
        2, "scheduler-sim: error: sweep merge: 2 of 4 configurations are in no file (a shard "
           "is missing, or a sweep was interrupted?): 2, 3\n")


def test_sigterm_with_workers_keeps_every_finished_row_in_grid_order(folder):
    """-j 2: worker A runs 0, then 2 (both finish), then 3, which sends SIGTERM to the
    sweep; worker B sleeps in 1 throughout. Rows 0 and 2 are kept (the gap at 1 too):
    exit 143, the file and table hold 0 and 2, merge misses 1 and 3."""
    done = _sweep(folder, ["Plain", "Sleeps", "Other", "TermParent"], "-j", "2",
                  "--jsonl", "rows.jsonl")
    assert done.returncode == 143
    assert done.stderr == ("scheduler-sim: terminated after 2 of 4 configurations; "
                           "rows.jsonl holds those 2\n")
    assert done.stdout == ("scheduler-sim sweep t.jsonl: 2 of 4 configurations\n" + TABLE_HEAD
                           + _row_line(0, "p.py:Plain") + _row_line(2, "p.py:Other"))
    header, *rows = _lines(folder / "rows.jsonl")
    assert header["configurations"] == 4
    assert [(r["index"], r["policy"]) for r in rows] == [(0, "p.py:Plain"), (2, "p.py:Other")]
    assert sorted(os.listdir(folder)) == ["p.py", "rows.jsonl", "t.jsonl"]
    assert _merge_says(folder / "rows.jsonl")[1].endswith(
        "2 of 4 configurations are in no file (a shard is missing, or a sweep was "
        "interrupted?): 1, 3\n")


@pytest.mark.slow
def test_ctrl_c_keeps_the_rows_too_and_says_interrupted(folder):
    """SIGINT in configuration 1 of 3, one output: exit 130, one row, one line."""
    done = _sweep(folder, ["Plain", "IntSelf", "Last"], "--csv", "rows.csv")
    assert done.returncode == 130
    assert done.stderr == ("scheduler-sim: interrupted after 1 of 3 configurations; "
                           "rows.csv holds that one\n")
    assert [line.split(",")[:2] for line in
            (folder / "rows.csv").read_text().splitlines()[1:]] == [["0", "p.py:Plain"]]


@pytest.mark.slow
def test_sigterm_in_the_first_configuration_writes_nothing(folder):
    done = _sweep(folder, ["TermSelf", "Plain"], "--jsonl", "rows.jsonl", "--csv", "rows.csv")
    assert (done.returncode, done.stdout, done.stderr) == (143, "",
                                                           "scheduler-sim: terminated\n")
    assert sorted(os.listdir(folder)) == ["p.py", "t.jsonl"]


@pytest.mark.slow
def test_sigterm_in_a_shard_names_the_shard(folder):
    """Shard 0/2 of four runs 0 and 2; SIGTERM in 2 keeps 0 (`sweep merge` misses the
    rest of the grid: 1, 2, 3)."""
    done = _sweep(folder, ["Plain", "Other", "TermSelf", "Last"], "--shard", "0/2",
                  "--jsonl", "part-0.jsonl")
    assert done.returncode == 143
    assert done.stderr == ("scheduler-sim: terminated after 1 of 2 configurations "
                           "(shard 0/2); part-0.jsonl holds that one\n")
    header, *rows = _lines(folder / "part-0.jsonl")
    assert (header["shard"], [r["index"] for r in rows]) == ("0/2", [0])
    assert _merge_says(folder / "part-0.jsonl")[1].endswith("in no file (a shard is "
                                                            "missing, or a sweep was "
                                                            "interrupted?): 1, 2, 3\n")


@pytest.mark.slow
def test_after_sigkill_the_temporary_files_hold_the_rows_written(folder):
    """SIGKILL (no handler runs) once configuration 2 started: the outputs keep their
    temporary names, each with its header and rows 0 and 1, already written."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen([sys.executable, "-m", "scheduler_sim", "sweep", "t.jsonl",
                                *(arg for cls in ("Plain", "Other", "Marks") for arg in
                                  ("--policy", f"p.py:{cls}")),
                                "--jsonl", "rows.jsonl", "--csv", "rows.csv", "--quiet"],
                               cwd=folder, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    deadline = time.monotonic() + TIMEOUT
    while not (folder / "started").exists():
        assert process.poll() is None and time.monotonic() < deadline, "Marks never ran"
        time.sleep(0.02)
    process.kill()
    process.communicate(timeout=TIMEOUT)
    left = sorted(p for p in os.listdir(folder) if p.startswith(".sweep-"))
    assert len(left) == 2 and all(name.endswith(".tmp") for name in left)
    texts = sorted((folder / name).read_text() for name in left)  # the CSV's "index" first
    assert [line.split(",")[:2] for line in texts[0].splitlines()] == [
        ["index", "policy"], ["0", "p.py:Plain"], ["1", "p.py:Other"]]
    header, *rows = [json.loads(line) for line in texts[1].splitlines()]
    assert (header["configurations"], [r["index"] for r in rows]) == (3, [0, 1])


# --- in this process: the interrupt raised where a signal's handler would raise it ---

def _interrupt_in(monkeypatch, position: int, interrupt=interrupts.Terminated) -> None:
    """Make configuration number `position` (of a -j 1 sweep) raise `interrupt`."""
    real = sweep_runs.run_configuration
    calls = []

    def run_configuration(trace, options):
        calls.append(options)
        if len(calls) == position + 1:
            raise interrupt
        return real(trace, options)

    monkeypatch.setattr(sweep_runs, "run_configuration", run_configuration)


def test_an_interrupted_sweep_writes_its_report_and_rows_to_standard_output(folder,
                                                                            monkeypatch):
    """KeyboardInterrupt in configuration 1 of 3: the JSONL on standard output holds
    row 0, the table and the line go to standard error, the report has row 0."""
    _interrupt_in(monkeypatch, 1, KeyboardInterrupt)
    status, out, err = run_cli(["sweep", str(folder / "t.jsonl"), "--policy", "vllm",
                                "--policy", "sglang", "--policy", "continuous",
                                "--jsonl", "-", "--report", str(folder / "r.html")])
    assert status == 130
    header, *rows = [json.loads(line) for line in out.splitlines()]
    assert (header["configurations"], [(r["index"], r["policy"]) for r in rows]) == (
        3, [(0, "vllm")])
    assert err.endswith("\nscheduler-sim: interrupted after 1 of 3 configurations; "
                        "standard output and " + str(folder / "r.html") + " hold that one\n")
    assert err.startswith(f"scheduler-sim sweep {folder / 't.jsonl'}: 1 of 3 configurations\n")
    page = (folder / "r.html").read_text()
    assert "vllm" in page and "sglang" not in page


def test_interrupted_before_any_row_writes_nothing_even_to_standard_output(folder,
                                                                           monkeypatch):
    _interrupt_in(monkeypatch, 0)
    status, out, err = run_cli(["sweep", str(folder / "t.jsonl"), "--policy", "vllm",
                                "--policy", "sglang", "--jsonl", "-"])
    assert (status, out, err) == (143, "", "scheduler-sim: terminated\n")


def _grid(folder):
    trace = read_trace(str(folder / "t.jsonl"))
    axes = [check_axis("policy", ["vllm", "sglang", "continuous"], "--policy")]
    return build_grid(trace, axes, {}, "0" * 64, None)


def test_rows_reach_the_outputs_as_they_finish_in_grid_order(folder):
    """Rows taken in the order 1, 0, 2 (as workers may finish them): after 1 nothing is
    out (the header goes with the first row); 0 lets the header, 0 and 1 out; 2 the
    last; the text is the whole sweep's, byte for byte. A row given twice is written
    once."""
    grid = _grid(folder)
    rows = [{"index": i, "policy": p, "time_unit": "ticks", "stalled": False}
            for i, p in enumerate(["vllm", "sglang", "continuous"])]
    jsonl, csv = io.StringIO(), io.StringIO()
    stream = RowStream(grid, None, [0, 1, 2], Output("-", jsonl), Output("-", csv))
    whole = format_jsonl(grid, rows).splitlines(keepends=True)
    assert jsonl.getvalue() == ""
    stream.add(rows[1])
    assert (jsonl.getvalue(), csv.getvalue()) == ("", "")
    stream.add(rows[0])
    stream.add(rows[1])
    assert jsonl.getvalue() == "".join(whole[:3])
    stream.add(rows[2])
    stream.finish()
    assert jsonl.getvalue() == format_jsonl(grid, rows)
    assert csv.getvalue() == format_csv(grid, rows)
    assert stream.in_order() == rows


def test_finish_writes_the_rows_behind_a_gap(folder):
    """Rows 0 and 2 of 0, 1, 2 (1 never finished): 0 is out at once, 2 at `finish`."""
    grid = _grid(folder)
    rows = [{"index": i, "policy": p, "time_unit": "ticks", "stalled": False}
            for i, p in [(0, "vllm"), (2, "continuous")]]
    jsonl = io.StringIO()
    stream = RowStream(grid, None, [0, 1, 2], Output("-", jsonl), None)
    stream.add(rows[1])
    stream.add(rows[0])
    assert jsonl.getvalue() == format_jsonl(grid, rows[:1])
    stream.finish()
    assert jsonl.getvalue() == format_jsonl(grid, rows)


def test_finish_without_rows_writes_the_headers(folder):
    """A stream that took no row (a shard with nothing to run) still ends with its
    header lines."""
    grid = _grid(folder)
    jsonl, csv = io.StringIO(), io.StringIO()
    stream = RowStream(grid, None, [], Output("-", jsonl), Output("-", csv))
    assert jsonl.getvalue() == ""
    stream.finish()
    assert (jsonl.getvalue(), csv.getvalue()) == (format_jsonl(grid, []), format_csv(grid, []))
