"""`router_signal_delay` (issue 27): the router reads the replicas as they were that long
before each arrival. Hand-worked routings under least-loaded, round-robin untouched
(it reads nothing), and what it is not modelled with."""
from __future__ import annotations

import io
import json

import pytest

from conftest import slow_beyond

from scheduler_sim.cli.main import main
from test_cli import write

# Two replicas; a runs long on the first, b, c and d are one-token requests.
TRACE = [{"type": "config", "block_size": 4, "num_blocks": 64, "replicas": 2},
         {"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 4, "output_tokens": 20},
         {"type": "request", "id": "b", "arrival": 1, "prompt_tokens": 4, "output_tokens": 1},
         {"type": "request", "id": "c", "arrival": 3, "prompt_tokens": 4, "output_tokens": 1},
         {"type": "request", "id": "d", "arrival": 4, "prompt_tokens": 4, "output_tokens": 1}]


def routes(path, *flags) -> list[tuple[str, int]]:
    out = io.StringIO()
    assert main(["replay", path, "--events", "-", "--quiet", *flags], out=out,
                err=io.StringIO()) == 0
    return [(r["id"], r["replica"]) for r in map(json.loads, out.getvalue().splitlines())
            if r["event"] == "arrival"]


@pytest.mark.parametrize("delay, replicas", [
    # Fresh: a on 0; b (scan from 1) on 1; c at 3 sees a on 0 and b gone: 1; d at 4: 1.
    ("0", [0, 1, 1, 1]),
    # 1 tick old: a and b routed at 0 on an empty fleet (0, then 1 by the rotation);
    # c at 2 sees a, and b finished at 2: 1; d at 3 sees a, not c yet: 1.
    ("1", [0, 1, 1, 1]),
    # 2 ticks old: c at 1 sees a, not b (it joins at 1, after the routing): 1; d at 2
    # sees a, b finished, c not there yet: 1.
    ("2", [0, 1, 1, 1]),
    # 10 ticks old: all four routed at 0 on an empty fleet: every score 0, and the
    # rotating start makes it round-robin: 0, 1, 0, 1.
    ("10", [0, 1, 0, 1]),
])
def test_least_loaded_by_hand(tmp_path, delay, replicas):
    got = routes(write(tmp_path, TRACE), "--router", "least-loaded",
                 "--router-signal-delay", delay)
    assert got == list(zip("abcd", replicas))


def test_round_robin_reads_nothing(tmp_path):
    """Any delay: the same replicas, the same summary."""
    path = write(tmp_path, TRACE)
    assert routes(path, "--router-signal-delay", "3") == routes(path) == \
        list(zip("abcd", [0, 1, 0, 1]))

    def summary(*flags):
        out = io.StringIO()
        assert main(["replay", path, "--json", "--quiet", *flags], out=out,
                    err=io.StringIO()) == 0
        return json.loads(out.getvalue())["runs"]
    assert summary("--router-signal-delay", "3") == summary()


def test_a_delay_is_in_the_options_only_when_set(tmp_path):
    path = write(tmp_path, TRACE)
    for flags, shown in (([], False), (["--router-signal-delay", "2"], True)):
        out = io.StringIO()
        assert main(["replay", path, "--json", "--quiet", *flags], out=out,
                    err=io.StringIO()) == 0
        assert ("router_signal_delay" in json.loads(out.getvalue())["options"]) is shown


@pytest.mark.parametrize("flags, message", [
    (["--dp-lockstep"], "router_signal_delay is not modelled with dp_lockstep"),
    (["--replicas", "1", "--prefill-replicas", "1", "--decode-replicas", "1"],
     "router_signal_delay is not modelled with disaggregated replicas"),
])
def test_not_modelled_with(tmp_path, flags, message):
    out, err = io.StringIO(), io.StringIO()
    assert main(["replay", write(tmp_path, TRACE), "--router-signal-delay", "2", *flags],
                out=out, err=err) == 2
    assert message in err.getvalue()


def test_lockstep_with_a_delay_and_no_full_prompt_gate_names_only_the_delay(tmp_path):
    """Lockstep ranks (not disaggregated) with a delay and `full_prompt_gate false`:
    the delay is refused alone, nothing said of disaggregation."""
    err = io.StringIO()
    assert main(["replay", write(tmp_path, TRACE), "--policy", "vllm", "--dp-lockstep",
                 "--router-signal-delay", "1", "--no-full-prompt-gate"],
                out=io.StringIO(), err=err) == 2
    assert "router_signal_delay is not modelled with dp_lockstep" in err.getvalue()
    assert "disaggregated" not in err.getvalue()


def test_one_replica_notes_it_changes_nothing(tmp_path):
    out = io.StringIO()
    assert main(["replay", write(tmp_path, TRACE), "--replicas", "1",
                 "--router-signal-delay", "2"], out=out, err=io.StringIO()) == 0
    assert "note: router_signal_delay has no effect with one replica" in out.getvalue()


@pytest.mark.parametrize("seed", slow_beyond(range(6), 2))
@pytest.mark.parametrize("router", ["least-loaded", "prefix-affinity", "power-of-two"])
def test_random_fleets_with_stale_signals(seed, router):
    """Random workloads and fleets under a delay of 1 to 40 (ticks, or trace ticks of
    a cost model): every request ends once, the audit holds at every boundary, and
    folded stretches give what stepping every dispatch gives."""
    import random

    from scheduler_sim.fleet.fleet import Fleet
    from scheduler_sim.policies import POLICIES
    from test_fleet import _options, _random_options, _trace, _workload
    rng = random.Random(4200 + seed)
    options = _random_options(rng, seed)
    options.update(router=router, replicas=rng.randint(2, 4), seed=seed,
                   router_signal_delay=rng.choice([1, 3, 10, 40]))
    policy = sorted(POLICIES)[seed % len(POLICIES)]
    records = _workload(seed, prefixes=True)
    trace = _trace(records)
    opts = _options(trace, **options)
    stepped = Fleet(trace.workload, opts, policy, audit=True, fast_forward=False).run()
    folded = Fleet(trace.workload, opts, policy).run()
    assert folded.summary == stepped.summary and folded.replicas == stepped.replicas
    ids = {r["id"] for r in records}
    assert {r.rid for r in stepped.requests} == ids == {r.rid for r in folded.requests}
    assert all(r.status.is_finished for r in folded.requests)
