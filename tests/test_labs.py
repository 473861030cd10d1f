"""Every lab's committed transcript is reproduced byte for byte."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

LABS = Path(__file__).resolve().parent.parent / "labs"
_spec = importlib.util.spec_from_file_location("lab_transcript", LABS / "transcript.py")
transcript_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(transcript_module)

LAB_DIRS = sorted(p.parent for p in LABS.glob("*/commands"))
# The labs whose transcripts replay at scale (CPU seconds measured here: 07 11.5,
# 11 9.5, 10 2.8, 09 2.5; every other lab under 0.2) are regenerated in the slow tier.
SLOW_LABS = {"07-preemption-at-scale", "09-fleet", "10-calibration", "11-swap-or-recompute"}


def test_every_lab_has_a_handout_and_a_transcript():
    """Each lab folder has its commands, a README handout and expected output."""
    assert [p.name for p in LAB_DIRS][:2] == ["01-trace-replay", "02-recompute"]
    for lab in LAB_DIRS:
        assert (lab / "README.md").is_file()
        assert (lab / "expected.txt").is_file()


@pytest.mark.parametrize("lab", [pytest.param(lab, marks=pytest.mark.slow)
                                 if lab.name in SLOW_LABS else lab for lab in LAB_DIRS],
                         ids=lambda p: p.name)
def test_lab_output_matches_expected(lab):
    """Regenerating the lab's transcript gives exactly its expected.txt."""
    assert transcript_module.transcript(lab) == (lab / "expected.txt").read_text()


@pytest.mark.parametrize("lab", LAB_DIRS, ids=lambda p: p.name)
def test_lab_handout_lists_the_commands_it_runs(lab):
    """The handout shows every command the transcript runs, so students run the same."""
    handout = (lab / "README.md").read_text()
    for command in (lab / "commands").read_text().splitlines():
        if command.strip() and not command.startswith("#"):
            assert command.strip() in handout


def test_lab_08_reference_solution_passes_and_the_starting_point_fails(monkeypatch):
    """From lab 08's folder, `check check.jsonl` with the reference solution exits 0;
    with the starting point my_policy.py (first come, first served) it exits 1."""
    import io
    from scheduler_sim.cli.main import main
    monkeypatch.chdir(LABS / "08-your-own-scheduler")
    status = main(["check", "check.jsonl", "--policy", "solution/shortest_first.py:ShortestFirst"],
                  out=io.StringIO(), err=io.StringIO())
    assert status == 0
    assert main(["check", "check.jsonl", "--allow-trace-plugins"], out=io.StringIO(),
                err=io.StringIO()) == 1


@pytest.mark.slow  # two replays of the lab's chapter with --events: 3.6 s of CPU
def test_lab_07_quotes_the_retraction_records_its_replays_write(tmp_path, monkeypatch):
    """The `ratio` records of reason `retract` that lab 07's SGLang half quotes (the first
    four with schedule_conservativeness 0.3, then with 2.0) are, byte for byte, the first
    four such lines the replay writes with `--events`."""
    import io
    from scheduler_sim.cli.main import main
    lab = LABS / "07-preemption-at-scale"
    handout = (lab / "README.md").read_text()
    monkeypatch.chdir(lab)
    for setting in ("0.3", "2.0"):
        events = tmp_path / f"events-{setting}.jsonl"
        assert main(["replay", "chapter.jsonl", "--policy", "sglang",
                     "--schedule-conservativeness", setting, "--events", str(events)],
                    out=io.StringIO(), err=io.StringIO()) == 0
        lines = [line for line in events.read_text().splitlines()
                 if '"event":"ratio"' in line and '"reason":"retract"' in line][:4]
        assert len(lines) == 4
        quoted = "\n".join("    " + line for line in lines)
        assert quoted in handout


@pytest.mark.slow  # eight replays with --events: 0.9 s of CPU
def test_lab_11_quotes_only_records_its_replays_write(tmp_path, monkeypatch):
    """Every event record lab 11's handout quotes (an indented line starting with
    `{"time":`) is, byte for byte, a line of the events of one of the replays the
    handout names, and it quotes records of each kind it explains (a resumed
    request's admission among them)."""
    import io
    from scheduler_sim.cli.main import main
    lab = LABS / "11-swap-or-recompute"
    handout = (lab / "README.md").read_text()
    quoted = {line.strip() for line in handout.splitlines()
              if line.startswith('    {"time":')}
    storm = ["../03-preemption-storm/storm.jsonl", "--cost-model", "llama-3-8b/h100-sxm"]
    runs = [
        ["victim.jsonl", "--preemption-mode", "recompute"],
        ["victim.jsonl", "--preemption-mode", "recompute", "--prefix-caching"],
        ["victim.jsonl", "--preemption-mode", "swap", "--host-kv-gib", "4"],
        ["victim.jsonl", "--prefix-caching", "--host-kv-gib", "4"],
        storm + ["--preemption-mode", "recompute"],
        storm + ["--preemption-mode", "swap", "--host-kv-gib", "1"],
        storm + ["--preemption-mode", "swap", "--host-kv-gib", "1",
                 "--host-link-gb-per-s", "0.1"],
        ["../07-preemption-at-scale/chapter.jsonl", "--preemption-mode", "swap",
         "--host-kv-gib", "1"],
    ]
    monkeypatch.chdir(lab)
    written: set[str] = set()
    for number, args in enumerate(runs):
        events = tmp_path / f"events-{number}.jsonl"
        assert main(["replay", *args, "--events", str(events)],
                    out=io.StringIO(), err=io.StringIO()) == 0
        written |= {line for line in events.read_text().splitlines() if line in quoted}
    assert sorted(quoted - written) == []
    for kind in ("swapped_out", "kv_load_started", "kv_load_done", "kv_stored",
                 "swap_refused", "evicted", "preempted", "admitted"):
        assert any(f'"event":"{kind}"' in line for line in quoted), kind
