"""`generate --time-unit s` and `--burstiness` (issue 27): a synthetic trace in seconds
at a request rate per second, with gamma gaps of the shape `vllm bench serve
--burstiness` draws."""
from __future__ import annotations

import io
import json

import pytest

from scheduler_sim.cli.main import main


def generate(*flags: str) -> tuple[int, list[dict], str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(["generate", "--seed", "7", "--requests", "200", *flags], out=out, err=err)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    return status, records, err.getvalue()


def test_seconds_are_the_same_draws_as_ticks_to_the_microsecond():
    """The same seed draws the same gaps: in ticks each arrival is rounded down, in
    seconds to the microsecond, after a config record naming the unit."""
    _, ticks, _ = generate("--rate", "0.5")
    status, seconds, _ = generate("--rate", "0.5", "--time-unit", "s")
    assert status == 0
    assert seconds[0] == {"type": "config", "time_unit": "s"}
    assert len(seconds) == len(ticks) + 1
    for tick, second in zip(ticks, seconds[1:]):
        assert {k: v for k, v in tick.items() if k != "arrival"} == \
            {k: v for k, v in second.items() if k != "arrival"}
        assert int(second["arrival"]) == tick["arrival"]
        assert second["arrival"] == round(second["arrival"], 6)
    assert any(s["arrival"] != t["arrival"] for t, s in zip(ticks, seconds[1:]))


def test_a_seconds_trace_replays_in_seconds(tmp_path):
    _, records, _ = generate("--rate", "4", "--time-unit", "s", "--requests", "20")
    path = tmp_path / "g.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = io.StringIO()
    assert main(["validate", str(path)], out=out, err=io.StringIO()) == 0


def test_burstiness_is_gamma_of_that_shape():
    """--burstiness 0.25 is gamma gaps of shape 0.25: --arrival gamma --cv 2 (1 / 2^2)."""
    assert generate("--burstiness", "0.25") == generate("--arrival", "gamma", "--cv", "2")
    assert generate("--burstiness", "0.25") != generate()


@pytest.mark.parametrize("flags, message", [
    (["--burstiness", "0.5", "--cv", "2"],
     "--burstiness draws gamma gaps of its own shape: give it without --cv"),
    (["--burstiness", "0.5", "--arrival", "poisson"],
     "--burstiness draws gamma gaps of its own shape: give it without --arrival poisson"),
    (["--burstiness", "0"],
     "--burstiness must be a finite number from 0.0001 to 10000 (the gamma gaps' shape), "
     "got 0.0"),
    (["--time-unit", "s", "--rate", "0"],
     "--rate must be a finite number >= 1e-6 (requests per second), got 0.0"),
])
def test_bad_combinations(flags, message):
    status, records, err = generate(*flags)
    assert (status, records) == (2, [])
    assert err == f"scheduler-sim: error: {message}\n"
