"""benchmarks/paired.py: two commands alternated, their figures and the per-pair ratio;
nothing here asserts on a time, only on what is counted and printed."""
from __future__ import annotations

import sys

import pytest
from conftest import ROOT, load_script

paired = load_script(ROOT / "benchmarks" / "paired.py", "bench_paired")


def test_spread_is_min_median_max():
    assert paired.spread([3.0, 1.0, 2.0, 10.0]) == "    1.000     2.500    10.000"


def test_two_commands_alternate_and_every_figure_is_printed(capsys, tmp_path):
    log = tmp_path / "order"
    a = [sys.executable, "-c", f"open({str(log)!r}, 'a').write('A')"]
    b = f"{sys.executable} -c \"open({str(log)!r}, 'a').write('B'); raise SystemExit(4)\""
    assert paired.main(["-n", "2", "--warmup", "1", "--vs", b, "--", *a]) == 0
    assert log.read_text() == "ABABAB"
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "2 pairs, A B alternated, after 1 uncounted of each"
    assert [line[:18].rstrip() for line in lines[3:]] == [
        "figure", "A CPU s", "A user s", "A system s", "A wall s", "A peak RSS MB",
        "B CPU s", "B user s", "B system s", "B wall s", "B peak RSS MB",
        "A/B CPU, per pair", "note: some runs ex"]
    assert lines[-1] == "note: some runs exited with status 4"


def test_a_missing_command_is_a_usage_error():
    with pytest.raises(SystemExit) as stop:
        paired.main(["--vs", "true"])
    assert stop.value.code == 2
