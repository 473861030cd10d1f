"""Long traces in bounded memory: a trace file above `STREAM_ABOVE` bytes is
validated as it is read and read again at each replay; the engine keeps only
live requests unless asked; a request too big to track is refused up front.

Each streamed case is compared with the same file read whole (`parse_trace`):
same requests, same messages, same replay."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from conftest import req, slow_beyond, write_trace
from scheduler_sim.cli.main import main
from scheduler_sim.engine.core import Engine
from scheduler_sim.io import id_digests
from scheduler_sim.io import trace as trace_module
from scheduler_sim.io.trace import parse_trace, read_trace
from scheduler_sim.records.errors import TraceError
from scheduler_sim.records.options import Options

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def streamed(monkeypatch):
    """Every trace file is streamed, however small."""
    monkeypatch.setattr(trace_module, "STREAM_ABOVE", 0)


def both(path: str):
    """(the trace read whole, the trace streamed) of one file."""
    whole = parse_trace(Path(path).read_bytes(), path)
    old = trace_module.STREAM_ABOVE
    trace_module.STREAM_ABOVE = 0
    try:
        streamed = read_trace(path)
    finally:
        trace_module.STREAM_ABOVE = old
    return whole, streamed


def errors(path: str, stream: bool) -> list[str]:
    old = trace_module.STREAM_ABOVE
    trace_module.STREAM_ABOVE = 0 if stream else 10 ** 12
    try:
        read_trace(path)
    except TraceError as exc:
        return exc.problems
    finally:
        trace_module.STREAM_ABOVE = old
    return []


CASES = sorted(p for p in list((DATA / "conformance").glob("*.jsonl"))
               + list((DATA / "oracles" / "vllm").glob("00[0-9].jsonl"))
               + list((DATA / "oracles" / "sglang").glob("00[0-9].jsonl")))


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_streamed_trace_is_the_trace_read_whole(path):
    """Same config, requests, actions and expectations, and the same summary under
    every policy the file asks for (or continuous). (The oracle traces are not in
    arrival order: they take the sorting path.)"""
    whole, streamed = both(str(path))
    arrivals = [json.loads(line).get("arrival") for line in path.read_text().splitlines()
                if '"request"' in line]
    in_order = arrivals == sorted(arrivals)
    # Streamed if the file is in arrival order, else read whole and sorted.
    assert (streamed.workload._source is not None) == in_order
    assert (streamed.config, streamed.expects) == (whole.config, whole.expects)
    assert streamed.workload == whole.workload
    assert len(streamed.workload) == len(whole.workload)
    assert streamed.describe() == whole.describe()
    options = Options.resolve(whole.config)
    for policy in options.policy:
        a = Engine(whole.workload, options, policy).run()
        b = Engine(streamed.workload, options, policy, keep_requests=False).run()
        assert a.summary == b.summary
        assert b.requests == []


def test_a_streamed_workload_is_read_again_for_each_replay(tmp_path, streamed):
    """Two policies over one streamed trace: each replay reads the file anew and gets
    every request (the second does not find the iterator spent)."""
    path = write_trace(tmp_path, [req("a", 0, 4, 2), req("b", 1, 4, 2), req("c", 1, 4, 2)])
    trace = read_trace(path)
    options = Options.resolve({}, {"block_size": 4, "num_blocks": 8})
    first = Engine(trace.workload, options, "continuous").run()
    second = Engine(trace.workload, options, "serial").run()
    assert [r.rid for r in first.requests] == [r.rid for r in second.requests] == ["a", "b", "c"]


def test_duplicate_ids_streamed_are_named_with_their_first_line(tmp_path):
    """Streamed, duplicates are found from 64-bit digests of the ids and the file is
    read again to name them: the messages are those of the whole-file reader."""
    path = write_trace(tmp_path, [req("a", 0, 4, 2), req("b", 1, 4, 2), req("a", 2, 4, 2),
                                  req("b", 3, 0, 2), req("a", 4, 4, 2)])
    expected = [f"{path}:3: request 'a': duplicate request id 'a' (first on line 1)",
                f"{path}:4: request 'b': duplicate request id 'b' (first on line 2)",
                f"{path}:4: request 'b': prompt_tokens must be an integer >= 1, got 0",
                f"{path}:5: request 'a': duplicate request id 'a' (first on line 1)"]
    assert errors(path, stream=False) == expected
    assert errors(path, stream=True) == expected


def test_duplicate_ids_past_the_digests_in_memory_are_found_in_the_file(tmp_path,
                                                                      monkeypatch):
    """With 2 digests held in memory at most, the 5 ids of the case above go to the
    temporary file in two chunks of 2 (a, b; a, b), 1 stays in memory (a): the
    same messages."""
    monkeypatch.setattr(id_digests, "IN_MEMORY", 2)
    path = write_trace(tmp_path, [req("a", 0, 4, 2), req("b", 1, 4, 2), req("a", 2, 4, 2),
                                  req("b", 3, 0, 2), req("a", 4, 4, 2)])
    assert errors(path, stream=True) == [
        f"{path}:3: request 'a': duplicate request id 'a' (first on line 1)",
        f"{path}:4: request 'b': duplicate request id 'b' (first on line 2)",
        f"{path}:4: request 'b': prompt_tokens must be an integer >= 1, got 0",
        f"{path}:5: request 'a': duplicate request id 'a' (first on line 1)"]


def test_ids_sharing_a_digest_are_told_apart_by_reading_the_file(tmp_path, monkeypatch):
    """Every id given the same digest (as two different ids may be, the digest being
    the string's hash): the file is read again and only the true duplicate is
    named; a trace without one is valid, streamed as whole."""
    from scheduler_sim.io import trace_validator
    monkeypatch.setattr(trace_validator, "_digest", lambda rid: 42)
    path = write_trace(tmp_path, [req("a", 0, 4, 2), req("b", 1, 4, 2), req("a", 2, 4, 2)])
    assert errors(path, stream=True) == [
        f"{path}:3: request 'a': duplicate request id 'a' (first on line 1)"]
    fine = write_trace(tmp_path, [req("a", 0, 4, 2), req("b", 1, 4, 2), req("c", 2, 4, 2)],
                       "fine.jsonl")
    whole, streamed = both(fine)
    assert [r.id for r in streamed.workload.requests] == ["a", "b", "c"]
    assert streamed.workload.requests == whole.workload.requests


def test_id_digests_write_out_past_their_limit_and_find_repeats_exactly():
    """Limit 3: digests 7, -3, 7 fill memory and go out as chunks of their buckets
    (by digest % BUCKETS, 256: 7 -> bucket 7 twice, -3 -> bucket 253), then 7 again and 5
    stay in memory. Repeated: 7 only (three times, once in memory); the file is
    closed after."""
    digests = id_digests.IdDigests(limit=3)
    for d in (7, -3, 7, 7, 5):
        digests.add(d)
    assert id_digests.BUCKETS == 256
    assert (digests.held, digests.chunks[7], digests.chunks[253]) == (2, [(0, 2)], [(16, 1)])
    assert list(digests.buckets[7]) == [7] and list(digests.buckets[5]) == [5]
    assert digests.repeated() == {7}
    assert digests.file is None
    nothing = id_digests.IdDigests(limit=3)
    nothing.add(1)
    assert nothing.repeated() == set() and nothing.chunks[1] == []


def test_id_digests_added_a_block_at_a_time_pass_their_limit_by_a_block():
    """Limit 3: a block of 7, -3 stays in memory; a block of 7, 7, 5 passes the limit
    (5 held) and all go out, bucket by bucket in order: bucket 5 (one digest, at
    byte 0), 7 (three, at 8), 253 (one, at 32). Repeated: 7."""
    digests = id_digests.IdDigests(limit=3)
    digests.add_all([7, -3])
    assert (digests.held, digests.file) == (2, None)
    digests.add_all([7, 7, 5])
    assert (digests.held, digests.chunks[5], digests.chunks[7], digests.chunks[253]) == (
        0, [(0, 1)], [(8, 3)], [(32, 1)])
    assert digests.repeated() == {7}


def test_references_streamed_give_the_whole_file_messages(tmp_path):
    """A cancel of an unknown id (with a hint), a preempt before its request's arrival
    and an expect about an unknown id: the same messages streamed or not."""
    path = write_trace(tmp_path, [
        req("alpha", 5, 4, 2),
        {"type": "cancel", "id": "alpah", "at": 6},
        {"type": "preempt", "id": "alpha", "at": 3},
        {"type": "expect", "id": "beta", "status": "finished_stopped"}])
    expected = [
        f"{path}:2: cancel 'alpah': cancel of unknown request 'alpah' (did you mean 'alpha'?)",
        f"{path}:3: preempt 'alpha': at must be >= the request's arrival (5), got 3",
        f"{path}:4: expect: unknown request 'beta'"]
    assert errors(path, stream=False) == expected
    assert errors(path, stream=True) == expected


def test_only_the_first_50_problems_are_kept_and_the_rest_counted(tmp_path, streamed):
    """120 bad lines: the first 50 in line order, then `... and 70 more errors`."""
    path = write_trace(tmp_path, ["{"] * 120)
    messages = errors(path, stream=True)
    assert len(messages) == 51
    assert messages[0] == (f"{path}:1: invalid JSON: Expecting property name enclosed in "
                           "double quotes at column 2, got the end of the line")
    assert messages[49].startswith(f"{path}:50: ")
    assert messages[50] == f"{path}: ... and 70 more errors"


def test_a_file_out_of_arrival_order_is_sorted_in_memory(tmp_path, streamed):
    """Requests at 5, 0, 3 in file order: the workload is read whole and sorted
    (replay order 0, 3, 5), not streamed."""
    path = write_trace(tmp_path, [req("a", 5, 4, 2), req("b", 0, 4, 2), req("c", 3, 4, 2)])
    trace = read_trace(path)
    assert trace.workload._source is None
    assert [s.id for s in trace.workload.requests] == ["b", "c", "a"]


def test_without_keeping_requests_only_live_and_named_ones_stay(tmp_path):
    """keep_requests=False: the result carries no request records, and the engine's
    table ends with only the requests a cancel or preempt names."""
    path = write_trace(tmp_path, [req("a", 0, 4, 2), req("b", 0, 4, 2), req("c", 1, 4, 2),
                                  {"type": "cancel", "id": "a", "at": 9}])
    trace = read_trace(path)
    options = Options.resolve({}, {"block_size": 4, "num_blocks": 8})
    engine = Engine(trace.workload, options, "continuous", keep_requests=False)
    result = engine.run()
    assert result.requests == [] and list(engine.requests) == ["a"]
    assert result.summary == Engine(trace.workload, options, "continuous").run().summary


def test_a_request_too_big_to_track_is_refused_with_the_arithmetic(tmp_path):
    """P = 10**9, block_size 16 and a pool of 10**12 blocks: it fits, but 62,500,001
    blocks exceed the 4,194,304 tracked per request (about 47 bytes each): exit 2
    before the replay, naming the block size that would do, ceil(1,000,000,002 /
    4,194,304) = 239. With 100 blocks it is simply
    rejected (it cannot fit)."""
    path = write_trace(tmp_path, [req("a", 0, 10 ** 9, 2)])
    out, err = io.StringIO(), io.StringIO()
    assert main(["replay", path, "--num-blocks", str(10 ** 12)], out=out, err=err) == 2
    assert err.getvalue() == (
        "scheduler-sim: error: request 'a' may need 62,500,001 blocks of 16 tokens (prompt "
        "1,000,000,000 + max_tokens 2), more than the 4,194,304 the simulator tracks per "
        "request (about 47 bytes each, 188 MiB): use a block_size of at least 239\n")
    out = io.StringIO()
    assert main(["replay", path, "--num-blocks", "100", "--json"], out=out,
                err=io.StringIO()) == 0
    assert json.loads(out.getvalue())["runs"][0]["finished_ignored"] == 1


def test_a_request_no_block_size_can_track_is_refused_without_advice(tmp_path):
    """P = 10**12 in a pool of 10**15 blocks needs a block_size of 238,419, past the
    largest (65,536, which tracks 4,194,304 x 65,536 tokens): that block size was
    offered, and refused when given."""
    path = write_trace(tmp_path, [req("a", 0, 10 ** 12, 2)])
    out, err = io.StringIO(), io.StringIO()
    assert main(["replay", path, "--num-blocks", str(10 ** 15)], out=out, err=err) == 2
    assert err.getvalue() == (
        "scheduler-sim: error: request 'a' may need 62,500,000,001 blocks of 16 tokens "
        "(prompt 1,000,000,000,000 + max_tokens 2), more than the 4,194,304 the simulator "
        "tracks per request (about 47 bytes each, 188 MiB): no block_size does (the "
        "largest, 65,536, tracks 274,877,906,944 tokens)\n")


def test_the_cli_streams_a_large_file(tmp_path, streamed):
    """`replay` and `validate` of a streamed file print what they print for the file
    read whole."""
    path = write_trace(tmp_path, [req(f"r{i}", i // 3, 8, 3) for i in range(30)])
    outputs = []
    for limit in (0, 10 ** 12):
        trace_module.STREAM_ABOVE = limit
        out = io.StringIO()
        assert main(["replay", path, "--policy", "vllm", "--policy", "sglang", "--block-size", "4"],
                    out=out, err=io.StringIO()) == 0
        check = io.StringIO()
        assert main(["validate", path], out=check, err=io.StringIO()) == 0
        outputs.append((out.getvalue(), check.getvalue()))
    assert outputs[0] == outputs[1]


def test_requests_csv_rows_are_written_as_requests_end_in_arrival_order(tmp_path, streamed):
    """`--requests-csv` under serial: a (P=4, N=6) arrives first and ends last of the
    two admitted at 0; b (N=1) at 1 ends before c; the rows come in arrival order a, b,
    c under both policies, each row written once every earlier request has ended (the
    engine keeps no request records for it)."""
    path = write_trace(tmp_path, [req("a", 0, 4, 6), req("b", 1, 4, 1), req("c", 1, 4, 2)])
    csv_path = tmp_path / "r.csv"
    assert main(["replay", path, "--policy", "continuous", "--policy", "serial",
                 "--requests-csv", str(csv_path)], out=io.StringIO(), err=io.StringIO()) == 0
    rows = [line.split(",")[:2] for line in csv_path.read_text().splitlines()]
    assert rows == [["policy", "id"], ["continuous", "a"], ["continuous", "b"],
                    ["continuous", "c"], ["serial", "a"], ["serial", "b"], ["serial", "c"]]


def random_records(rng, n: int) -> list[dict]:
    """An overloaded workload: n requests arriving every 0-2 ticks, prompts of 1-40
    tokens (some sharing a prefix), outputs of 1-30."""
    records, t = [], 0
    for i in range(n):
        t += rng.randint(0, 2)
        prompt = rng.randint(1, 40)
        ids = [1 + (k if rng.random() < 0.5 else 100 + i * 50 + k) for k in range(prompt)]
        records.append(req(f"r{i:03d}", t, prompt, rng.randint(1, 30), prompt_token_ids=ids))
    return records


@pytest.mark.parametrize("seed", slow_beyond(range(12), 1))
def test_spilling_the_queue_tail_changes_nothing_a_replay_shows(tmp_path, monkeypatch, seed):
    """Spilled after 4 held waiting requests (SPILL_AFTER 1, max_rows 2): every policy
    with an FCFS queue gives the same event stream and summary as holding every
    request, with or without prefix caching and chunking; the queue really spilled."""
    import random

    from scheduler_sim.engine import core
    rng = random.Random(seed)
    path = write_trace(tmp_path, random_records(rng, 60))
    trace = read_trace(path)
    flags = {"block_size": 4, "num_blocks": rng.choice([12, 24, 48]), "max_rows": 2,
             "token_budget": rng.choice([8, 16, 64]),
             "prefix_caching": rng.random() < 0.5}
    if rng.random() < 0.5:
        flags["prefill_chunk"] = 4
    options = Options.resolve({}, flags)
    spilled = []
    made = core.Engine._unspill

    def counting(engine):
        spilled.append(1)
        return made(engine)

    for policy in ("continuous", "serial", "vllm", "sglang", "static", "dynamic"):
        monkeypatch.setattr(core, "SPILL_AFTER", 1)
        monkeypatch.setattr(core.Engine, "_unspill", counting)
        held, spill = [], []
        a = Engine(trace.workload, options, policy, on_event=lambda e: held.append(e.to_json()),
                   keep_requests=True).run()
        b = Engine(trace.workload, options, policy, on_event=lambda e: spill.append(e.to_json()),
                   keep_requests=False).run()
        assert (policy, spill) == (policy, held)
        assert a.summary == b.summary
    assert spilled  # the tail was spilled and built again


def test_references_streamed_read_the_named_requests_again(tmp_path):
    """Streamed, the requests that actions name are read again from the file: an
    arrival in seconds quoted as written, and an invalid request known but with no
    arrival to compare with (only its own problem is reported)."""
    path = write_trace(tmp_path, [
        {"type": "config", "time_unit": "s"},
        req("a", 2.5, 4, 2), req("b", 1, 0, 2),
        {"type": "preempt", "id": "a", "at": 1.25},
        {"type": "cancel", "id": "b", "at": 0}])
    expected = [
        f"{path}:3: request 'b': prompt_tokens must be an integer >= 1, got 0",
        f"{path}:4: preempt 'a': at must be >= the request's arrival (2.5), got 1.25"]
    assert errors(path, stream=False) == expected
    assert errors(path, stream=True) == expected
