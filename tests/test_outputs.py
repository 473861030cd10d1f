"""Outputs (README "Commands and exit statuses"): where files go, write errors, signals,
closed pipes. (Text from a trace in tables: test_untrusted_text.py.)

- A regular file or a missing name is replaced atomically (rename); a symlink is
  followed and its target replaced, the link kept; anything else (/dev/null, a FIFO,
  /dev/stdout) is written in place.
- A write error is one line and exit 2; a closed pipe is quiet, exit 141; SIGTERM
  cleans up as SIGINT does and exits 143.
- A str no encoding carries (a lone surrogate) is written as a backslash escape.

Tests that name a path under /dev run with `no_dev_replaced`, so that a regression
to rename-over-the-target fails the test instead of replacing a device node (root
could). Subprocess tests run `python -m scheduler_sim`, the real entry point, with
PYTHONUNBUFFERED both unset and set where it changes how standard output writes.
"""
from __future__ import annotations

import errno
import io
import json
import os
import resource
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT
import scheduler_sim.policies
from scheduler_sim.cli.main import main
from scheduler_sim.io.outputs import GuardedStream, OutputError, write_whole
from scheduler_sim.io.request_rows import format_csv
from scheduler_sim.policies.serial import SerialPolicy



class SerialCopy(SerialPolicy):
    """`serial` as a policy of one's own: the engine turns its exceptions into exit 3.
    60 generated requests give it 24,191 event records, so events are written from
    inside the run (every 4,096 records), not only when it ends."""

    name = "serial_copy"

TINY = [
    {"type": "config", "block_size": 4, "num_blocks": 8, "policy": ["serial", "continuous"]},
    {"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 4, "output_tokens": 3},
    {"type": "request", "id": "b", "arrival": 0, "prompt_tokens": 4, "output_tokens": 3},
    {"type": "expect", "id": "a", "finished": 3, "policy": "continuous"},
]
GENERATE = ["generate", "--seed", "1", "--requests", "3"]


def write(directory: Path, records: list, name: str = "trace.jsonl") -> str:
    path = directory / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def run(argv: list[str]) -> tuple[int, str, str]:
    """main in-process: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    status = main(argv, out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def generated(requests: int = 3) -> str:
    """What `generate --seed 1 --requests N` writes."""
    status, out, _ = run(["generate", "--seed", "1", "--requests", str(requests)])
    assert status == 0
    return out


def env_for(unbuffered: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


def cli(args: list[str], unbuffered: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """`python -m scheduler_sim ARGS` in a child process."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    return subprocess.run([sys.executable, "-m", "scheduler_sim", *args], cwd=ROOT,
                          env=env_for(unbuffered), stderr=subprocess.PIPE, timeout=60,
                          **kwargs)


@pytest.fixture
def no_dev_replaced(monkeypatch):
    """Fail, instead of replacing a device node, if outputs ever rename into /dev or put
    a temporary file there."""
    real_replace, real_mkstemp = os.replace, tempfile.mkstemp

    def replace(src, dst, *args, **kwargs):
        assert not os.path.abspath(dst).startswith("/dev/"), f"would replace {dst}"
        return real_replace(src, dst, *args, **kwargs)

    def mkstemp(*args, **kwargs):
        assert not str(kwargs.get("dir", "")).startswith(("/dev", "/proc")), kwargs
        return real_mkstemp(*args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


# Run in a child so that the guard covers the real entry point too.
GUARDED_ENTRY = (
    "import os, sys, tempfile\n"
    "real = os.replace\n"
    "def replace(a, b, *x, **k):\n"
    "    assert not os.path.abspath(b).startswith('/dev/'), b\n"
    "    return real(a, b, *x, **k)\n"
    "os.replace = replace\n"
    "from scheduler_sim.cli.main import main_entry\n"
    "raise SystemExit(main_entry())\n")


# --- where an output goes ------------------------------------------------------------------

def test_fifo_target_is_written_in_place(tmp_path):
    """`--events FIFO` and `-o FIFO` write into the FIFO (a reader thread gets every byte,
    the same bytes a regular file gets); the FIFO stays a FIFO and no temporary file
    appears beside it."""
    trace = write(tmp_path, TINY)
    assert run(["replay", trace, "--events", str(tmp_path / "ref.jsonl")])[0] == 0
    expected_events = (tmp_path / "ref.jsonl").read_bytes()
    fifo = tmp_path / "fifo"
    for argv, expected in ((["replay", trace, "--events", str(fifo)], expected_events),
                           (GENERATE + ["-o", str(fifo)], generated().encode())):
        os.mkfifo(fifo)
        got: list[bytes] = []

        def read() -> None:
            with open(fifo, "rb") as handle:
                got.append(handle.read())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        status, _, err = run(argv)
        reader.join(10)
        assert (status, err) == (0, "")
        assert got == [expected]
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
        assert sorted(os.listdir(tmp_path)) == ["fifo", "ref.jsonl", "trace.jsonl"]
        fifo.unlink()


@pytest.mark.parametrize("flag", ["--events", "-o"])
def test_symlink_to_a_regular_file_keeps_the_link_and_replaces_the_target(tmp_path, flag):
    """A link in one directory to a file in another: the link is still the same link, the
    target holds the new text in a new inode (renamed into place, not rewritten), and
    neither directory keeps a temporary file."""
    (tmp_path / "data").mkdir()
    (tmp_path / "links").mkdir()
    real = tmp_path / "data" / "real.jsonl"
    real.write_text("old\n")
    before = os.stat(real).st_ino
    link = tmp_path / "links" / "link.jsonl"
    os.symlink("../data/real.jsonl", link)
    if flag == "--events":
        trace = write(tmp_path, TINY)
        assert run(["replay", trace, "--events", str(tmp_path / "ref.jsonl")])[0] == 0
        expected = (tmp_path / "ref.jsonl").read_text()
        argv = ["replay", trace, "--events", str(link)]
    else:
        expected = generated()
        argv = GENERATE + ["-o", str(link)]
    status, _, err = run(argv)
    assert (status, err) == (0, "")
    assert os.path.islink(link) and os.readlink(link) == "../data/real.jsonl"
    assert real.read_text() == expected
    assert os.stat(real).st_ino != before
    assert os.listdir(tmp_path / "data") == ["real.jsonl"]
    assert os.listdir(tmp_path / "links") == ["link.jsonl"]


def test_symlink_to_a_missing_file_creates_the_target(tmp_path):
    """A dangling link: its target is created (atomically, in the target's directory) and
    the link stays a link to it."""
    (tmp_path / "out").mkdir()
    link = tmp_path / "link.jsonl"
    os.symlink("out/new.jsonl", link)
    status, _, err = run(GENERATE + ["-o", str(link)])
    assert (status, err) == (0, "")
    assert os.readlink(link) == "out/new.jsonl"
    assert (tmp_path / "out" / "new.jsonl").read_text() == generated()
    assert stat.S_ISREG(os.lstat(tmp_path / "out" / "new.jsonl").st_mode)
    assert sorted(os.listdir(tmp_path)) == ["link.jsonl", "out"]
    assert os.listdir(tmp_path / "out") == ["new.jsonl"]


def test_dev_null_stays_a_character_device(tmp_path, no_dev_replaced):
    """Every kind of output sent to /dev/null: exit 0, and /dev/null is still the same
    character device (never renamed over, no temporary file in /dev)."""
    before = os.stat("/dev/null")
    trace = write(tmp_path, TINY)
    for argv in (GENERATE + ["-o", "/dev/null"],
                 ["replay", trace, "--events", "/dev/null"],
                 ["replay", trace, "--requests-csv", "/dev/null"],
                 ["check", trace, "--junit", "/dev/null"]):
        status, out, err = run(argv)
        assert (status, err) == (0, ""), argv
        after = os.stat("/dev/null")
        assert stat.S_ISCHR(after.st_mode), argv
        assert (after.st_rdev, after.st_ino) == (before.st_rdev, before.st_ino), argv
    assert out.endswith("ok: 1 expectation(s) hold (serial, continuous)\n")


def test_dev_stdout_into_a_regular_file_is_standard_output(tmp_path):
    """`-o /dev/fd/1 > FILE` writes through standard output (not a rename over FILE, or
    over /dev/fd/1); with `--events /dev/stdout` the events come first, then the
    table, in one stream."""
    def guarded(args: list[str]) -> None:
        with open(tmp_path / "out.txt", "w") as handle:
            proc = subprocess.run([sys.executable, "-c", GUARDED_ENTRY, *args], cwd=ROOT,
                                  stdout=handle, stderr=subprocess.PIPE, timeout=60)
        assert (proc.returncode, proc.stderr) == (0, b"")

    trace = write(tmp_path, TINY)
    guarded(GENERATE + ["-o", "/dev/fd/1"])
    assert (tmp_path / "out.txt").read_text() == generated()
    status, table, _ = run(["replay", trace, "--events", str(tmp_path / "ref.jsonl")])
    assert status == 0
    guarded(["replay", trace, "--events", "/dev/stdout"])
    assert (tmp_path / "out.txt").read_text() == (tmp_path / "ref.jsonl").read_text() + table
    assert sorted(os.listdir(tmp_path)) == ["out.txt", "ref.jsonl", "trace.jsonl"]


# --- write errors -------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, what", [
    (GENERATE + ["-o", "/dev/full"], "cannot write"),
    (["replay", "TRACE", "--events", "/dev/full"], "cannot write events"),
    (["replay", "TRACE", "--requests-csv", "/dev/full"], "cannot write requests"),
    (["check", "TRACE", "--junit", "/dev/full"], "cannot write"),
])
def test_dev_full_is_one_line_and_exit_2(tmp_path, no_dev_replaced, argv, what):
    """A full device: exactly one line naming it, exit 2, nothing on stdout."""
    trace = write(tmp_path, TINY)
    argv = [trace if a == "TRACE" else a for a in argv]
    assert run(argv) == (2, "", f"scheduler-sim: error: /dev/full: {what}: "
                                "No space left on device\n")


def test_dev_full_under_a_plugin_policy_is_not_blamed_on_the_policy(tmp_path, no_dev_replaced,
                                                                    monkeypatch):
    """Events that fill /dev/full while a policy of one's own runs (the write happens
    inside the engine, which turns a plugin's exceptions into exit 3): still exit 2 and
    the one line about the output."""
    trace = str(tmp_path / "big.jsonl")
    assert run(["generate", "--seed", "1", "--requests", "60", "-o", trace])[0] == 0
    monkeypatch.setitem(scheduler_sim.policies.POLICIES, "serial_copy", SerialCopy)
    assert run(["replay", trace, "--policy", "serial_copy", "--events", "/dev/full"]) == (
        2, "", "scheduler-sim: error: /dev/full: cannot write events: No space left on device\n")


@pytest.mark.parametrize("unbuffered", [  # a process each; buffered in the slow tier
    pytest.param(False, marks=pytest.mark.slow), True])
def test_stdout_to_dev_full_is_one_line_and_exit_2(unbuffered):
    """`> /dev/full`: one line, exit 2, no traceback (PYTHONUNBUFFERED or not)."""
    with open("/dev/full", "w") as full:
        proc = cli(GENERATE, unbuffered, stdout=full)
    assert (proc.returncode, proc.stderr) == (
        2, b"scheduler-sim: error: standard output: cannot write: No space left on device\n")


def _small_fsize_limit() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def test_file_too_large_is_one_line_and_exit_2_and_leaves_nothing(tmp_path):
    """Under `ulimit -f` (RLIMIT_FSIZE 4096 bytes) an output that grows past it: EFBIG is
    reported in one line, exit 2, and neither the file nor a temporary file remains."""
    trace = str(tmp_path / "trace.jsonl")
    assert run(["generate", "--seed", "1", "--requests", "40", "-o", trace])[0] == 0
    out = tmp_path / "out.jsonl"
    proc = cli(["generate", "--seed", "1", "--requests", "300", "-o", str(out)],
               preexec_fn=_small_fsize_limit)
    assert (proc.returncode, proc.stderr.decode()) == (
        2, f"scheduler-sim: error: {out}: cannot write: File too large\n")
    events = tmp_path / "ev.jsonl"
    proc = cli(["replay", trace, "--policy", "serial", "--events", str(events)],
               preexec_fn=_small_fsize_limit)
    assert (proc.returncode, proc.stdout, proc.stderr.decode()) == (
        2, b"", f"scheduler-sim: error: {events}: cannot write events: File too large\n")
    assert os.listdir(tmp_path) == ["trace.jsonl"]


@pytest.mark.parametrize("unbuffered", [  # a process each; buffered in the slow tier
    pytest.param(False, marks=pytest.mark.slow), True])
def test_stdout_file_too_large_is_reported(tmp_path, unbuffered):
    """`> FILE` past `ulimit -f`: exit 2 and one line, also when standard output is
    unbuffered (where a short write used to cut the file at the limit, exit 0)."""
    with open(tmp_path / "out.jsonl", "w") as handle:
        proc = cli(["generate", "--seed", "1", "--requests", "300"], unbuffered,
                   stdout=handle, preexec_fn=_small_fsize_limit)
    assert (proc.returncode, proc.stderr) == (
        2, b"scheduler-sim: error: standard output: cannot write: File too large\n")
    assert (tmp_path / "out.jsonl").stat().st_size == 4096


def test_permission_denied_is_one_line_and_exit_2(tmp_path, monkeypatch):
    """EACCES where the temporary file would go, or opening a device: one line, exit 2.
    (Simulated: the tests may run as root, whom permissions do not stop.)"""
    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    target = tmp_path / "out.jsonl"
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    assert run(GENERATE + ["-o", str(target)]) == (
        2, "", f"scheduler-sim: error: {target}: cannot write: Permission denied\n")
    monkeypatch.setattr(os, "open", refuse)
    assert run(GENERATE + ["-o", "/dev/null"]) == (
        2, "", "scheduler-sim: error: /dev/null: cannot write: Permission denied\n")
    assert os.listdir(tmp_path) == []


def test_a_directory_or_a_link_to_one_is_refused(tmp_path):
    """A directory (or a symlink to one) as any output: one line, exit 2, untouched."""
    trace = write(tmp_path, TINY)
    (tmp_path / "dir").mkdir()
    os.symlink("dir", tmp_path / "dirlink")
    for name in ("dir", "dirlink"):
        target = str(tmp_path / name)
        for argv, what in ((GENERATE + ["-o", target], "cannot write"),
                           (["replay", trace, "--requests-csv", target], "cannot write requests"),
                           (["replay", trace, "--events", target], "cannot write events")):
            assert run(argv) == (2, "", f"scheduler-sim: error: {target}: {what}: "
                                        "it is a directory\n")
    assert sorted(os.listdir(tmp_path)) == ["dir", "dirlink", "trace.jsonl"]
    assert os.listdir(tmp_path / "dir") == []


class Trickle(io.RawIOBase):
    """A raw file that takes at most 3 bytes per write, then fails once `limit` is hit."""

    def __init__(self, limit: int = 10**9) -> None:
        self.data = bytearray()
        self.limit = limit

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        if len(self.data) >= self.limit:
            raise OSError(errno.ENOSPC, "No space left on device")
        chunk = bytes(b[:3])
        self.data += chunk
        return len(chunk)


def test_guarded_stream_finishes_short_writes_and_reports_errors():
    """Over an unbuffered stream every byte arrives despite short writes, and a failing
    write becomes one OutputError naming the stream; a str no encoding can carry (a lone
    surrogate, CJK on ASCII) is written as backslash escapes."""
    raw = Trickle()
    stream = GuardedStream(io.TextIOWrapper(raw, encoding="utf-8", write_through=True),
                           "standard output")
    stream.write("0123456789\n" * 5 + "\ud800")
    assert bytes(raw.data) == b"0123456789\n" * 5 + b"\\ud800"
    full = GuardedStream(io.TextIOWrapper(Trickle(limit=6), encoding="utf-8",
                                          write_through=True), "standard output")
    with pytest.raises(OutputError) as caught:
        full.write("0123456789")
    assert str(caught.value) == "standard output: cannot write: No space left on device"
    ascii_out = io.BytesIO()
    text = io.TextIOWrapper(ascii_out, encoding="ascii")
    GuardedStream(text, "standard output").write("wide\u65e5\u672c\ud800\n")
    text.flush()
    assert ascii_out.getvalue() == b"wide\\u65e5\\u672c\\ud800\n"


# --- closed pipes and signals -------------------------------------------------------------------

@pytest.mark.parametrize("unbuffered", [  # a process each; buffered in the slow tier
    pytest.param(False, marks=pytest.mark.slow), True])
def test_closed_pipe_on_stdout_is_quiet_with_status_141(unbuffered):
    """`generate ... | head -1` (260 KB, far more than a pipe holds): the reader takes a
    line and goes away; the command ends with 141 and prints nothing."""
    proc = subprocess.Popen([sys.executable, "-m", "scheduler_sim", "generate", "--seed", "1",
                             "--requests", "3000"], cwd=ROOT, env=env_for(unbuffered),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=60) == 141
    assert proc.stderr.read() == b""
    proc.stderr.close()
    assert first.startswith(b'{"type":"request","id":"g0000","arrival":0,')


def test_closed_pipe_under_events_dash_is_quiet_even_inside_a_plugin_run(tmp_path,
                                                                         monkeypatch):
    """`--events -` into a pipe whose reader is gone, written from inside the engine under a
    policy of one's own (whose exceptions would otherwise be exit 3): 141, silent."""
    monkeypatch.setitem(scheduler_sim.policies.POLICIES, "serial_copy", SerialCopy)
    trace = str(tmp_path / "big.jsonl")
    assert run(["generate", "--seed", "1", "--requests", "60", "-o", trace])[0] == 0
    read_end, write_end = os.pipe()
    os.close(read_end)
    out = io.TextIOWrapper(io.FileIO(write_end, "w"), encoding="utf-8", write_through=True)
    err = io.StringIO()
    try:
        status = main(["replay", trace, "--policy", "serial_copy", "--events", "-"], out=out,
                      err=err)
    finally:
        out.close()
    assert (status, err.getvalue()) == (141, "")


def _default_signals() -> None:
    """In the child: SIGINT and SIGTERM as a shell leaves them (a CI runner may ignore
    SIGINT for background jobs, and Python then leaves it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.parametrize("signum, status, word", [
    (signal.SIGTERM, 143, "terminated"),
    pytest.param(signal.SIGINT, 130, "interrupted", marks=pytest.mark.slow),  # a process
])
def test_signal_during_a_long_events_replay_leaves_no_temporary_file(tmp_path, signum,
                                                                      status, word):
    """A replay writing a 150 MB events file (several seconds) gets the signal once its
    temporary file has content: it exits 143 (130 for SIGINT) with one line, and the
    directory holds only the trace: no `.events-*.tmp`, no events file."""
    trace = str(tmp_path / "trace.jsonl")
    assert run(["generate", "--seed", "1", "--requests", "3000", "-o", trace])[0] == 0
    proc = subprocess.Popen([sys.executable, "-m", "scheduler_sim", "replay", trace,
                             "--policy", "serial", "--events", str(tmp_path / "ev.jsonl")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_default_signals)
    deadline = time.monotonic() + 30
    started = False
    while not started and proc.poll() is None and time.monotonic() < deadline:
        started = any(name.startswith(".events-") and (tmp_path / name).stat().st_size > 0
                      for name in os.listdir(tmp_path))
        time.sleep(0.01)
    assert started, "the replay never started writing its events"
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (status, b"", f"scheduler-sim: {word}\n".encode())
    assert os.listdir(tmp_path) == ["trace.jsonl"]


def test_lone_surrogates_in_a_csv_file_are_escaped(tmp_path):
    """A CSV of ids with lone surrogates (which UTF-8 cannot carry): written, with the
    surrogates as `\\ud800`, instead of a UnicodeEncodeError."""
    trace = write(tmp_path, TINY)
    status, out, _ = run(["replay", trace, "--policy", "continuous", "--json", "--requests"])
    assert status == 0
    records = json.loads(out)["runs"][0]["per_request"]
    records[0]["id"], records[1]["id"] = "\ud800x", "y\udfff"
    target = tmp_path / "req.csv"
    write_whole(str(target), format_csv([("continuous", records)]), io.StringIO())
    lines = target.read_bytes().split(b"\n")
    assert lines[1].startswith(b"continuous,\\ud800x,0,0,0,1,3,")
    assert lines[2].startswith(b"continuous,y\\udfff,0,0,0,1,3,")
    assert sorted(os.listdir(tmp_path)) == ["req.csv", "trace.jsonl"]


def test_abort_unfinished_removes_a_temporary_file_no_code_aborted(tmp_path):
    """An output whose creator was interrupted before it could abort it (the fuzzer's
    SIGTERM to `replay -j 2 --events` once left `.events-*.tmp`) is removed as the
    command ends: its temporary file goes, the target never appears."""
    from scheduler_sim.io.outputs import Output, abort_unfinished
    target = tmp_path / "ev.jsonl"
    output = Output(str(target), io.StringIO(), "cannot write events", ".events-")
    output.write("partial\n")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    abort_unfinished()
    assert list(tmp_path.iterdir()) == []
    abort_unfinished()  # nothing left to do
