"""A streamed trace's blocks kept as validation read them (`ValidatedCopy`): each
replay reads them back, exactly, as often as asked, whatever the file becomes."""
from __future__ import annotations

import pytest

from scheduler_sim.io import trace as trace_module
from scheduler_sim.io.trace import read_trace
from scheduler_sim.io.trace_fast_path import Columns
from scheduler_sim.io.validated_copy import ValidatedCopy
from scheduler_sim.records.errors import TraceError
from scheduler_sim.records.workload import RequestSpec

W = b'{"type":"request","id":"%s","arrival":%s,"prompt_tokens":%s,"output_tokens":%s}\n'


def test_blocks_come_back_in_order_with_their_types():
    """A block of columns (an arrival 2 and one 2.5: an int and a float), then a
    block of bytes, then columns again: read back twice, the same values and types."""
    copy = ValidatedCopy()
    copy.add(1, b"(the block's text)", Columns(["a", "b"], [2, 2.5], [7, 1], [3, 9]))
    copy.add(3, b'{"type":"cancel","id":"a","at":4}\n', None)
    copy.add(4, b"(text)", Columns(["c"], [6], [2], [2]))
    for _ in range(2):
        kept = list(copy.blocks())
        assert kept == [(1, Columns(["a", "b"], [2, 2.5], [7, 1], [3, 9])),
                        (3, b'{"type":"cancel","id":"a","at":4}\n'),
                        (4, Columns(["c"], [6], [2], [2]))]
        assert [type(a) for a in kept[0][1].arrivals] == [int, float]
        assert type(kept[0][1]) is Columns
    copy.close()
    assert list(copy.blocks()) == [] and copy.file is None


def test_two_readers_at_once_read_the_same_blocks():
    """Two replays reading in turn, a block each, each get every block in order."""
    copy = ValidatedCopy()
    for first in (1, 2, 3):
        copy.add(first, b"", Columns([f"r{first}"], [first], [1], [1]))
    one, two = copy.blocks(), copy.blocks()
    got = [(next(one)[0], next(two)[0]) for _ in range(3)]
    assert got == [(1, 1), (2, 2), (3, 3)]
    assert next(one, None) is None and next(two, None) is None


def test_an_empty_copy_has_no_blocks():
    assert list(ValidatedCopy().blocks()) == []


@pytest.fixture
def streamed(monkeypatch):
    monkeypatch.setattr(trace_module, "STREAM_ABOVE", 0)
    monkeypatch.setattr(trace_module, "BLOCK", 100)  # a block of one or two lines


def test_a_replay_reads_what_was_validated(tmp_path, streamed):
    """Three written lines (blocks of about 100 bytes: columns) and a cancel (bytes):
    the requests are those validated, read again after the file was emptied."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(W % (b"r0", b"0", b"4", b"2") + W % (b"r1", b"1", b"5", b"3")
                     + b'{"type":"cancel","id":"r0","at":1}\n'
                     + W % (b"r2", b"2", b"6", b"1"))
    trace = read_trace(str(path))
    path.write_bytes(b"")
    expected = (RequestSpec("r0", 1, 0, 4, 2, 2), RequestSpec("r1", 2, 1, 5, 3, 3),
                RequestSpec("r2", 4, 2, 6, 1, 1))
    assert trace.workload.requests == expected
    assert trace.workload.requests == expected  # (read back again)
    assert [(a.id, a.at) for a in trace.workload.cancels] == [("r0", 1)]


def test_a_trace_that_fails_gives_its_copy_back(tmp_path, streamed, monkeypatch):
    """A duplicate id: the problem as before, and the temporary file closed."""
    closed = []
    monkeypatch.setattr(ValidatedCopy, "close", lambda self: closed.append(self.places))
    path = tmp_path / "t.jsonl"
    path.write_bytes(W % (b"r0", b"0", b"4", b"2") + W % (b"r0", b"1", b"5", b"3"))
    with pytest.raises(TraceError) as error:
        read_trace(str(path))
    assert error.value.problems == [
        f"{path}:2: request 'r0': duplicate request id 'r0' (first on line 1)"]
    assert len(closed) == 1 and len(closed[0]) == 2  # (both blocks had been kept)


def test_a_streamed_trace_sent_to_another_process_reads_its_file_again(tmp_path, streamed):
    """Pickled (as a sweep sends a trace to its worker), the copy keeps nothing and the
    file is read again there: the same requests, lines numbered as the file's, and a
    cancel's block read a line at a time."""
    import pickle
    path = tmp_path / "t.jsonl"
    path.write_bytes(W % (b"r0", b"0", b"4", b"2") + W % (b"r1", b"1", b"5", b"3")
                     + b'{"type":"cancel","id":"r0","at":1}\n'
                     + W % (b"r2", b"2", b"6", b"1"))
    trace = read_trace(str(path))
    travelled = pickle.loads(pickle.dumps(trace))
    assert travelled.workload._source.args[2].kept is False
    assert travelled.workload.requests == trace.workload.requests == (
        RequestSpec("r0", 1, 0, 4, 2, 2), RequestSpec("r1", 2, 1, 5, 3, 3),
        RequestSpec("r2", 4, 2, 6, 1, 1))


def _copy_of(count: int) -> ValidatedCopy:
    """A sealed copy of `count` one-request blocks: r1 on line 1, r2 on line 2, ..."""
    copy = ValidatedCopy()
    for first in range(1, count + 1):
        copy.add(first, b"", Columns([f"r{first}"], [first], [first % 7 + 1], [1]))
    copy.seal()
    return copy


def test_reading_leaves_the_files_position_alone():
    """Blocks are read by their offsets: the file's position (which a forked worker
    shares with its parent) is where the writes left it, 3 blocks' bytes, before
    and after reading every block; a sealed copy refuses another block."""
    import os
    copy = _copy_of(3)
    fd = copy.file.fileno()
    end = os.lseek(fd, 0, os.SEEK_CUR)
    assert end == copy.end == sum(length for _, length in copy.places)
    assert [first for first, _ in copy.blocks()] == [1, 2, 3]
    assert os.lseek(fd, 0, os.SEEK_CUR) == end
    with pytest.raises(ValueError, match="sealed"):
        copy.add(4, b"", None)
    copy.close()


def test_threads_read_the_same_copy_at_once():
    """Eight threads each read all 3,000 blocks of one copy at the same time: every
    one gets r1..r3000 in order (a review found blocks sought and read through the
    shared position mixed up between readers)."""
    from concurrent.futures import ThreadPoolExecutor
    copy = _copy_of(3000)
    expected = [f"r{n}" for n in range(1, 3001)]

    def ids(_: int) -> list[str]:
        return [id_ for _, columns in copy.blocks() for id_ in columns.ids]

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(ids, range(8))) == [expected] * 8
    copy.close()


def test_forked_workers_replay_a_long_trace_as_one_process(tmp_path, streamed):
    """`replay -j 2` (workers forked: they inherit the open copy) under continuous and
    vllm on a 400-request trace streamed a line a block: the same --json as -j 1."""
    import sys
    if sys.platform != "linux":
        pytest.skip("workers are forked on Linux only")
    from test_cli import run
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(W % (b"q%d" % n, b"%d" % (n // 4), b"%d" % (20 + n % 13),
                                   b"%d" % (3 + n % 5)) for n in range(400)))
    asked = ["replay", str(path), "--policy", "continuous", "--policy", "vllm", "--json"]
    one = run(asked)
    two = run([*asked, "-j", "2"])
    assert one[0] == two[0] == 0 and one[2] == two[2] == ""
    assert two[1] == one[1]


def test_validate_keeps_no_copy(tmp_path, streamed, monkeypatch):
    """`validate` replays nothing: no temporary file is made (one made would fail
    here), and it prints the trace's summary; `read_trace(keep=False)` still gives
    the requests, read from the file again."""
    import tempfile
    from test_cli import run

    def no_file(*args, **kwargs):
        raise OSError("no temporary file expected")

    path = tmp_path / "t.jsonl"
    path.write_bytes(W % (b"r0", b"0", b"4", b"2") + W % (b"r1", b"1", b"5", b"3"))
    monkeypatch.setattr(tempfile, "TemporaryFile", no_file)
    status, out, err = run(["validate", str(path)])
    assert (status, err) == (0, "")
    assert out == f"{path}: ok, 2 requests, arrivals 0..1 ticks, 0 cancels, 0 preempts, 0 expects\n"
    trace = read_trace(str(path), keep=False)
    assert trace.workload.requests == (RequestSpec("r0", 1, 0, 4, 2, 2),
                                       RequestSpec("r1", 2, 1, 5, 3, 3))


def test_a_full_disk_under_the_copy_is_named(tmp_path, streamed, monkeypatch, capsys):
    """The temporary file refuses a write (no space left): `replay` says where the
    copy was kept, in one line, exit status 2, no traceback."""
    import errno
    import tempfile

    from scheduler_sim.cli.main import main

    class Full:
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self):
            pass

    monkeypatch.setattr(tempfile, "TemporaryFile", Full)
    monkeypatch.setattr(tempfile, "gettempdir", lambda: "/scratch")
    path = tmp_path / "t.jsonl"
    path.write_bytes(W % (b"r0", b"0", b"4", b"2") + W % (b"r1", b"1", b"5", b"3"))
    assert main(["replay", str(path), "--policy", "continuous", "--quiet"]) == 2
    assert capsys.readouterr().err == (
        "scheduler-sim: error: /scratch: cannot keep the trace's validated copy in the "
        "temporary folder: No space left on device (TMPDIR chooses the folder)\n")
