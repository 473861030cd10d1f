"""A sweep's progress (issue 27): on a terminal, a line per configuration as it
finishes (its values and the --metric), and a progress line with the time left;
nothing on a non-terminal or under --quiet, and the same standard output."""
from __future__ import annotations

import io
import re

import pytest

from scheduler_sim.cli.main import main
from scheduler_sim.io.progress import SweepProgress, _duration
from test_cli import write

WIPE = "\r\x1b[K"


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("seconds, text", [(0.4, "0 s"), (42, "42 s"), (185, "3 min 05 s"),
                                           (7620, "2 h 07 min")])
def test_durations_read_as_a_person_reads_them(seconds, text):
    assert _duration(seconds) == text


def test_the_lines_and_the_estimate_of_time_left():
    """Three configurations on two workers, finished at 10, 25 and 30 s: the time left is
    elapsed / done * left / workers: 10 / 1 * 2 / 2 = 10 s, then 25 / 2 * 1 / 2 = 6.25."""
    times = iter([0.0, 10.0, 25.0, 30.0])
    stream = io.StringIO()
    progress = SweepProgress(stream, True, 3, 2, clock_now=lambda: next(times))
    for text in ("a", "b", "c"):
        progress.finished(text)
    progress.close()
    assert stream.getvalue() == (
        f"{WIPE}scheduler-sim: sweep: 0/3 configurations done"
        f"{WIPE}  [1/3] a\n{WIPE}scheduler-sim: sweep: 1/3 configurations done, 10 s, "
        "about 10 s left"
        f"{WIPE}  [2/3] b\n{WIPE}scheduler-sim: sweep: 2/3 configurations done, 25 s, "
        "about 6 s left"
        f"{WIPE}  [3/3] c\n{WIPE}scheduler-sim: sweep: 3/3 configurations done, 30 s"
        f"{WIPE}")


def test_off_it_writes_nothing():
    stream = io.StringIO()
    progress = SweepProgress(stream, False, 3, 1)
    progress.finished("a")
    progress.close()
    assert stream.getvalue() == ""


TRACE = [{"type": "config", "num_blocks": 40, "block_size": 4}] + [
    {"type": "request", "id": f"r{i}", "arrival": i, "prompt_tokens": 5,
     "output_tokens": 3 + i % 4} for i in range(6)]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_sweep_on_a_terminal_shows_each_configuration_once(tmp_path, jobs):
    trace = write(tmp_path, TRACE)
    outs = {}
    for name, err, flags in (("tty", FakeTTY(), []), ("quiet", FakeTTY(), ["--quiet"]),
                             ("pipe", io.StringIO(), [])):
        out = io.StringIO()
        assert main(["sweep", trace, "--grid", "max_rows=1,4", "--policy", "vllm", "-j",
                     jobs, "--metric", "makespan", *flags], out=out, err=err) == 0
        outs[name] = (out.getvalue(), err.getvalue())
    lines = [line.split(WIPE)[-1] for line in outs["tty"][1].split("\n")]
    done = sorted(line for line in lines if line.startswith("  ["))
    assert len(done) == 2
    # One row at a time, each request takes a dispatch per output and none waits idle:
    # 3 + 4 + 5 + 6 + 3 + 4 = 25 ticks. Four rows: every request runs from its arrival
    # (at most four at once), the last two (r3 from 3 with 6 outputs, r5 from 5 with 4)
    # end at 9.
    assert {line.split("] ", 1)[1] for line in done} == {
        "configuration 0 (max_rows=1, policy=vllm): makespan 25 ticks",
        "configuration 1 (max_rows=4, policy=vllm): makespan 9 ticks"}
    # The last line's elapsed time is the wall clock's (its text is pinned above, from
    # given seconds): under load a sweep may take a second or more.
    head, elapsed = outs["tty"][1].rsplit(", ", 1)
    assert head.endswith("scheduler-sim: sweep: 2/2 configurations done")
    assert re.fullmatch(r"(\d+ min )?\d+ s", elapsed.removesuffix(WIPE))
    assert outs["quiet"][1] == outs["pipe"][1] == ""
    assert outs["tty"][0] == outs["quiet"][0] == outs["pipe"][0]
