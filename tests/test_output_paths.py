"""Which names a command may write (README "Outputs", spec §10): no output names an input
of its command or another of its outputs, and no output flag takes an empty name.

Names are compared as the files they lead to (symlinks, `..`, hard links, descriptor
names); devices such as /dev/null may be named by several outputs; `-` is not a path.
Every refusal is one line, exit 2, before anything is read or run, and the input is
left byte for byte as it was.
"""
from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT, req, run_cli, write_trace

ERROR = "scheduler-sim: error: "
NEVER = ": an output never replaces an input\n"
# a prefills its 8 tokens at 0 (its first output), decodes at 1, 2 and 3: finished at 4.
RECORDS = [
    {"type": "config", "block_size": 4, "num_blocks": 8},
    req("a", 0, 8, 4), req("b", 1, 8, 4),
    {"type": "expect", "id": "a", "finished": 4, "policy": "continuous"},
]
GRID = ["--grid", "num_blocks=8,16"]
# A plugin policy: the built-in `continuous` under a file of its own.
PLUGIN = """
from scheduler_sim.policies import policy_class


class Mine(policy_class("continuous")):
    pass
"""


def refused(argv: list, message: str, *kept: Path) -> None:
    """`argv` exits 2 with exactly `message` (after the prefix), prints nothing on
    standard output, and leaves every file of `kept` byte for byte as it was."""
    before = [path.read_bytes() for path in kept]
    status, out, err = run_cli([str(arg) for arg in argv])
    assert (status, out, err) == (2, "", ERROR + message)
    assert [path.read_bytes() for path in kept] == before


@pytest.fixture
def trace(tmp_path) -> Path:
    """The trace RECORDS, as a file."""
    return Path(write_trace(tmp_path, RECORDS, "q.jsonl"))


# --- an output that is an input --------------------------------------------------------

@pytest.mark.parametrize("command, flag", [
    ("replay", "--events"), ("replay", "--requests-csv"), ("replay", "--report"),
    ("replay", "--perfetto"), ("check", "--junit"),
])
def test_an_output_onto_the_trace_is_refused(trace, command, flag):
    """Each output flag of replay and check, given the trace's own name, is refused."""
    refused([command, trace, flag, trace], f"{flag} {trace} is the trace ({trace}){NEVER}",
            trace)


@pytest.mark.parametrize("flag", ["--csv", "--jsonl", "--report"])
def test_a_sweep_output_onto_the_trace_is_refused(trace, flag):
    """Each output flag of sweep, given the trace's own name, is refused."""
    refused(["sweep", trace, *GRID, flag, trace],
            f"{flag} {trace} is the trace ({trace}){NEVER}", trace)


def test_the_refusal_comes_before_the_trace_is_read(tmp_path):
    """A trace that is not even valid: the clash is named, not the trace's problems."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    refused(["replay", bad, "--events", bad], f"--events {bad} is the trace ({bad}){NEVER}",
            bad)


def test_a_symlink_to_the_trace_is_the_trace(trace, tmp_path):
    """An output named by a symlink to the trace is refused (the link is followed)."""
    link = tmp_path / "link.jsonl"
    link.symlink_to(trace.name)
    refused(["replay", trace, "--events", link], f"--events {link} is the trace ({trace}){NEVER}",
            trace)
    assert link.is_symlink()


def test_a_name_through_dot_dot_is_the_trace(trace, tmp_path):
    """`dir/../q.jsonl` names the trace: refused as the trace, whichever side spells it so."""
    (tmp_path / "dir").mkdir()
    roundabout = f"{tmp_path}/dir/../q.jsonl"
    refused(["replay", roundabout, "--perfetto", trace],
            f"--perfetto {trace} is the trace ({roundabout}){NEVER}", trace)
    refused(["replay", trace, "--perfetto", roundabout],
            f"--perfetto {roundabout} is the trace ({trace}){NEVER}", trace)


def test_a_hard_link_to_the_trace_is_the_trace(trace, tmp_path):
    """A hard link has a name of its own but the trace's inode: refused."""
    hard = tmp_path / "hard.jsonl"
    os.link(trace, hard)
    refused(["replay", trace, "--requests-csv", hard],
            f"--requests-csv {hard} is the trace ({trace}){NEVER}", trace)


@pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="no /dev/fd")
def test_a_descriptor_name_open_on_the_trace_is_the_trace(trace):
    """`/dev/fd/N` open on the trace (as `/dev/stdin < q.jsonl` is) leads to the trace."""
    with open(trace, "rb") as handle:
        name = f"/dev/fd/{handle.fileno()}"
        refused(["replay", trace, "--events", name],
                f"--events {name} is the trace ({trace}){NEVER}", trace)


def test_sweep_output_onto_the_grid_file_is_refused(trace, tmp_path):
    """The grid file is an input of sweep too."""
    grid = tmp_path / "grid.json"
    grid.write_text('{"num_blocks": [8, 16]}\n')
    refused(["sweep", trace, "--grid-file", grid, "--jsonl", grid],
            f"--jsonl {grid} is the grid file ({grid}){NEVER}", grid, trace)


def test_sweep_merge_over_a_shard_is_refused(trace, tmp_path):
    """`sweep merge` writing its table (JSONL or CSV) over one of its shards is refused."""
    shards = []
    for k in (0, 1):
        shard = tmp_path / f"{k}.jsonl"
        status, _, err = run_cli(["sweep", str(trace), *GRID, "--shard", f"{k}/2",
                                  "--jsonl", str(shard)])
        assert status == 0, err
        shards.append(shard)
    for flag in ("--jsonl", "--csv"):
        refused(["sweep", "merge", *shards, flag, shards[1]],
                f"{flag} {shards[1]} is a shard ({shards[1]}){NEVER}", *shards)


def test_convert_onto_its_own_input_is_refused(tmp_path):
    """`convert FILE -o FILE` is refused, and FILE is kept."""
    source = tmp_path / "azure.csv"
    source.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                      "2023-11-16 18:15:46.6805900,374,44\n")
    refused(["convert", "--from", "azure", source, "-o", source],
            f"-o {source} is the input ({source}){NEVER}", source)


@pytest.mark.parametrize("flag", ["--prompt-len", "--output-len"])
def test_generate_onto_its_empirical_trace_is_refused(trace, flag):
    """`generate --prompt-len empirical:T -o T` (or --output-len) is refused."""
    refused(["generate", "--seed", "1", "--requests", "3", flag, f"empirical:{trace}",
             "-o", trace], f"-o {trace} is the trace of {flag} ({trace}){NEVER}", trace)


def test_an_output_onto_a_plugin_policy_source_is_refused(trace, tmp_path):
    """A plugin's source file is an input, named by --policy FILE.py:CLASS (refused before
    it is loaded) or by a sweep's grid (refused once the grid is known)."""
    source = tmp_path / "mine.py"
    source.write_text(textwrap.dedent(PLUGIN))
    spec = f"{source}:Mine"
    refused(["replay", trace, "--policy", spec, "--events", source],
            f"--events {source} is the source of policy {spec} ({source}){NEVER}", source)
    refused(["sweep", trace, "--grid", f"policy={spec},continuous", "--csv", source],
            f"--csv {source} is the source of policy {spec} ({source}){NEVER}", source)


def test_an_output_onto_a_plugin_the_trace_names_is_refused(tmp_path):
    """A plugin named in the trace's config record (and allowed to run) is checked once
    the trace is read, before any output is opened; its relative name is taken from
    the trace's folder."""
    source = tmp_path / "mine.py"
    source.write_text(textwrap.dedent(PLUGIN))
    spec = "mine.py:Mine"
    path = Path(write_trace(tmp_path, [dict(RECORDS[0], policy=[spec]), *RECORDS[1:]]))
    refused(["replay", path, "--report", source, "--allow-trace-plugins"],
            f"--report {source} is the source of policy {spec} ({source}){NEVER}", source)
    refused(["check", path, "--junit", source, "--allow-trace-plugins"],
            f"--junit {source} is the source of policy {spec} ({source}){NEVER}", source)


# --- two outputs on one file ------------------------------------------------------------

def test_two_replay_outputs_on_one_file_are_refused(trace, tmp_path):
    """`--report o.html --perfetto o.html` is refused and writes nothing; so are two names
    of one existing file (a symlink to it), which is left as it was."""
    target = tmp_path / "o.html"
    refused(["replay", trace, "--report", target, "--perfetto", target],
            f"--report {target} and --perfetto {target} name the same file\n")
    assert not target.exists()
    target.write_text("kept\n")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    refused(["replay", trace, "--events", target, "--requests-csv", link],
            f"--events {target} and --requests-csv {link} name the same file\n", target)


def test_two_sweep_outputs_on_one_file_are_refused(trace, tmp_path):
    """`sweep --csv o.csv --jsonl o.csv` is refused; so is the same in `sweep merge`."""
    target = tmp_path / "o.csv"
    refused(["sweep", trace, *GRID, "--csv", target, "--jsonl", target],
            f"--csv {target} and --jsonl {target} name the same file\n")
    shard = tmp_path / "all.jsonl"
    assert run_cli(["sweep", str(trace), *GRID, "--jsonl", str(shard)])[0] == 0
    refused(["sweep", "merge", shard, "--csv", target, "--jsonl", target],
            f"--csv {target} and --jsonl {target} name the same file\n", shard)
    assert not target.exists()


# --- empty names ------------------------------------------------------------------------

@pytest.mark.parametrize("argv, flag", [
    (["replay", "TRACE"], "--events"),
    (["replay", "TRACE"], "--requests-csv"),
    (["replay", "TRACE"], "--report"),
    (["replay", "TRACE"], "--perfetto"),
    (["check", "TRACE"], "--junit"),
    (["convert", "--from", "azure", "TRACE"], "-o"),
    (["generate", "--seed", "1", "--requests", "3"], "-o"),
    (["sweep", "TRACE", *GRID], "--csv"),
    (["sweep", "TRACE", *GRID], "--jsonl"),
    (["sweep", "TRACE", *GRID], "--report"),
    (["sweep", "merge", "TRACE"], "--csv"),
    (["sweep", "merge", "TRACE"], "--jsonl"),
])
def test_an_empty_output_name_is_refused(trace, argv, flag):
    """Every output flag given "" is refused naming the flag (not taken as absent)."""
    argv = [trace if arg == "TRACE" else arg for arg in argv]
    refused([*argv, flag, ""],
            f"{flag} needs a file name, or - for standard output; got an empty one\n", trace)


# --- what stays allowed -----------------------------------------------------------------

def test_dev_null_may_take_every_output_at_once(trace):
    """/dev/null named by all four replay outputs (and both sweep outputs): exit 0."""
    status, out, err = run_cli(["replay", str(trace)] + [
        arg for flag in ("--events", "--requests-csv", "--report", "--perfetto")
        for arg in (flag, "/dev/null")])
    assert (status, err) == (0, "")
    assert "continuous" in out
    status, _, err = run_cli(["sweep", str(trace), *GRID, "--csv", "/dev/null",
                              "--jsonl", "/dev/null"])
    assert (status, err) == (0, "")


def test_dash_in_and_dash_out_are_no_paths(trace, tmp_path, monkeypatch):
    """`convert - -o -` (standard input to standard output) is no clash, nor is a file
    written beside the trace while another output takes `-`: exit 0, the trace kept."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
        b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")))
    status, out, err = run_cli(["convert", "--from", "azure", "-", "-o", "-"])
    assert (status, err) == (0, "<stdin>: converted 1 requests from azure\n")
    assert out.endswith('"prompt_tokens":374,"output_tokens":44}\n')
    before = trace.read_bytes()
    status, out, err = run_cli(["replay", str(trace), "--events", "-",
                                "--requests-csv", str(tmp_path / "r.csv")])
    assert status == 0, err
    assert out.startswith('{"tick":0,"event":"arrival","id":"a"}\n')
    assert trace.read_bytes() == before


def test_a_trace_redirected_from_a_file_is_that_file(trace, tmp_path):
    """`replay - --events q.jsonl < q.jsonl` (a real process and redirection): standard
    input redirected from a regular file counts as that file, so the output is refused
    and q.jsonl left as it was; the same trace through a pipe clashes with no file."""
    before = trace.read_bytes()
    with open(trace, "rb") as stdin:
        proc = subprocess.run([sys.executable, "-m", "scheduler_sim", "replay", "-",
                               "--events", str(trace)], cwd=ROOT, stdin=stdin,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
    assert (proc.returncode, proc.stderr.decode()) == (
        2, f"scheduler-sim: error: --events {trace} is the trace (standard input): an output "
        "never replaces an input\n")
    assert trace.read_bytes() == before
    piped = tmp_path / "piped.jsonl"
    piped.write_bytes(before)
    proc = subprocess.run([sys.executable, "-m", "scheduler_sim", "replay", "-",
                           "--events", str(piped)], cwd=ROOT, input=before,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert piped.read_text().startswith('{"tick":0,"event":"arrival","id":"a"}\n')
