"""Seeded fuzzing of trace input and of `replay`/`validate`/`check` flags: whatever
the input, a documented exit status (0 ok, 1 a stalled run or a failed
expectation, 2 bad input) and never a traceback. The first tenth of each seeded run
runs by default, the rest in the slow tier; the larger run is `benchmarks/fuzz_cli.py`."""
from __future__ import annotations

import io
import json
import random
import signal
from pathlib import Path

import pytest

from conftest import run_parts
from scheduler_sim.cli.main import main
from scheduler_sim.io import trace as trace_module

ROOT = Path(__file__).resolve().parent.parent
BASES = [ROOT / "traces" / "quickstart.jsonl",
         ROOT / "tests" / "data" / "conformance" / "cancel_returns_credit.jsonl",
         ROOT / "tests" / "data" / "oracles" / "sglang" / "002.jsonl"]

WILD = [None, True, False, 0, -1, -2, 1, 2 ** 61 - 1, 10 ** 30, -(10 ** 30), 1e308, -1e-308,
        0.5, "", "x", "\u0000", "\u202e", "\U0001f600", "\\ud800", [], [1, "a"], {}, {"a": [[[]]]},
        [[[[[[[[1]]]]]]]], 1e15 + 1, 123456789012345678901234567890]
SMALL = [0, 1, 2, 3, 7, 16, 100, -1, 0.5, 2.5, "3", None, True, [], [1, 2, 3], "tick", "s"]
FIELDS = ["type", "id", "arrival", "prompt_tokens", "output_tokens", "max_tokens", "priority",
          "deadline", "prompt_token_ids", "output_token_ids", "block_hashes", "at",
          "block_size", "num_blocks", "token_budget", "max_rows", "policy", "order",
          "prefix_caching", "time_unit", "release_delay", "hash_block_size", "status",
          "ttft", "field", "bogus"]


def mutate(rng: random.Random, lines: list[str], values: list) -> bytes:
    """One random edit of a trace: a field set, deleted or added; a line dropped,
    repeated, swapped or cut; bytes flipped; or garbage appended."""
    lines = list(lines)
    kind = rng.randrange(8)
    i = rng.randrange(len(lines))
    if kind <= 2:
        try:
            record = json.loads(lines[i])
        except ValueError:
            record = {}
        if isinstance(record, dict):
            field = rng.choice(FIELDS if kind < 2 else list(record) or FIELDS)
            if kind == 2:
                record.pop(field, None)
            else:
                record[field] = rng.choice(values)
            lines[i] = json.dumps(record, ensure_ascii=rng.random() < 0.5)
    elif kind == 3:
        del lines[i]
    elif kind == 4:
        lines.insert(i, lines[rng.randrange(len(lines))])
    elif kind == 5:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == 6:
        lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
    data = bytearray("\n".join(lines).encode("utf-8", "surrogatepass") + b"\n")
    if kind == 7:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    if rng.random() < 0.05:
        data += rng.choice([b"\xff\xfe", b"\r\n\r\n", b"{" * 3000, b"\xef\xbb\xbf{}"])
    return bytes(data)


class Hang(Exception):
    pass


def run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(argv, out=out, err=err)
    return status, err.getvalue()


@pytest.fixture
def deadline():
    """Fail, not hang, if one case runs longer than 5 s."""
    def alarm(*_):
        raise Hang()
    old = signal.signal(signal.SIGALRM, alarm)
    yield lambda: signal.alarm(5)
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("part", run_parts(300, 30))
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_validate_never_raises_on_a_mutated_trace(tmp_path, deadline, stream, part,
                                                  monkeypatch):
    """300 wild mutations of three traces, validated read whole and streamed: exit 0
    or 2, every error line `file:line: ...` or `file: ...`."""
    monkeypatch.setattr(trace_module, "STREAM_ABOVE", 0 if stream else 10 ** 12)
    rng = random.Random(1234 + stream)
    path = tmp_path / "t.jsonl"
    for case in range(part.stop):
        base = BASES[case % len(BASES)].read_text().splitlines()
        data = mutate(rng, base, WILD)
        if case not in part:
            continue
        path.write_bytes(data)
        deadline()
        status, err = run(["validate", str(path)])
        assert status in (0, 2), (case, err)
        if status == 2:
            assert all(line.startswith(str(path)) for line in err.splitlines()), (case, err)


@pytest.mark.parametrize("part", run_parts(120, 12))
def test_replay_and_check_never_raise_on_mild_mutations(tmp_path, deadline, part):
    """120 mutations with small values, replayed under a random policy and options
    (and `check`ed): exit 0, 1 or 2 and no traceback; 3 would be a bug."""
    rng = random.Random(99)
    path = tmp_path / "t.jsonl"
    policies = ["serial", "continuous", "vllm", "sglang", "static", "dynamic"]
    for case in range(part.stop):
        base = BASES[case % len(BASES)].read_text().splitlines()
        data = mutate(rng, base, SMALL)
        flags = ["--policy", rng.choice(policies)]
        for flag, choices in (("--block-size", ["1", "4", "0", "x"]),
                              ("--num-blocks", ["3", "64", "-2", "1e3"]),
                              ("--token-budget", ["1", "8", "256"]),
                              ("--order", ["fcfs", "priority", "lpm", "nope"]),
                              ("--release-delay", ["0", "2", "-1"])):
            if rng.random() < 0.3:
                flags += [flag, rng.choice(choices)]
        if rng.random() < 0.3:
            flags.append("--prefix-caching")
        if case not in part:
            continue
        path.write_bytes(data)
        deadline()
        status, err = run(["replay", str(path), "--json", *flags])
        assert status in (0, 1, 2), (case, flags, err)
        deadline()
        status, err = run(["check", str(path), *flags])
        assert status in (0, 1, 2), (case, flags, err)
