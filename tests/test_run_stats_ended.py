"""`RunStats.request_ended`: every request's latencies counted straight into the
samples (issue 26), exactly as `summary.latencies` defines them: by hand on a few
requests, and against `latencies` itself on random ones in every terminal state."""
from __future__ import annotations

import dataclasses
import random

from scheduler_sim.engine.latency_sample import LatencySample
from scheduler_sim.engine.run_stats import RunStats
from scheduler_sim.engine.summary import COMPLETED, latencies
from scheduler_sim.records.clock import Clock
from scheduler_sim.records.states import RequestStatus
from scheduler_sim.requests.request import Request

S = RequestStatus


def ended(rid, status, arrival=0, sent=None, admitted=None, first=None, finished=None,
          outputs=3, deadline=None):
    req = Request(rid, 0, arrival, 10, outputs, outputs, deadline=deadline)
    req.status = status
    req.sent, req.admitted_at, req.first_token_at, req.finished_at = (
        sent, admitted, first, finished)
    req.useful_rows, req.replay_rows, req.preemptions, req.cached_tokens = 12, 1, 1, 4
    return req


def counts(stats: RunStats) -> dict:
    return {m: dict(s.counts) for m, s in stats.samples.items()}


def test_by_hand():
    """Overhead 2 steps. A: sent 1 after arriving at 0, admitted 3, first token 5,
    finished 9, 3 outputs: wait 1, queue 2, TTFT 5 - 1 + 2 = 6, E2EL 9 - 1 + 2 = 10,
    TPOT (9 - 5) / 2 = 2.0. B: aborted while waiting (sent 4 = arrival): wait 0 only.
    C: cancelled before it was sent: nothing. D: one output, capped: no TPOT."""
    stats = RunStats(Clock(request_overhead=2))
    stats.request_ended(ended("a", S.FINISHED_STOPPED, 0, 1, 3, 5, 9, deadline=8))
    stats.request_ended(ended("b", S.FINISHED_ABORTED, 4, 4, finished=6))
    stats.request_ended(ended("c", S.FINISHED_ABORTED, 4, finished=6))
    stats.request_ended(ended("d", S.FINISHED_LENGTH_CAPPED, 2, 2, 2, 3, 3, outputs=1))
    assert counts(stats) == {"queue_delay": {2: 1, 0: 1}, "client_wait": {1: 1, 0: 2},
                             "ttft": {6: 1, 3: 1}, "tpot": {2.0: 1}, "e2el": {10: 1, 3: 1}}
    assert stats.status_counts["finished_stopped"] == 1
    assert stats.status_counts["finished_aborted"] == 2
    assert stats.status_counts["finished_length_capped"] == 1
    assert (stats.completed_input, stats.completed_output) == (20, 4)
    assert (stats.useful_rows, stats.replay_rows, stats.preemptions, stats.cached_tokens) == (
        48, 4, 4, 16)
    assert (stats.deadlines, stats.deadline_misses) == (1, 1)  # finished 9 > deadline 8


def reference(stats: RunStats, req: Request) -> None:
    """The per-metric loop over `latencies` that request_ended spells out."""
    lat = latencies(req, stats.clock.request_overhead)
    for metric, sample in stats.samples.items():
        if lat[metric] is not None:
            sample.add(lat[metric])
    stats.status_counts[req.status.label] += 1
    if req.status in COMPLETED:
        stats.completed_input += req.prompt_tokens
        stats.completed_output += req.output_tokens


def test_random_requests_count_as_latencies_says(monkeypatch):
    """400 random ended requests (every terminal state, some never sent, admitted or
    given a token), 6 distinct values at most in the dicts so that the arrays fill
    too: the same counts, arrays and statistics as the loop over `latencies`."""
    from scheduler_sim.engine import latency_sample
    monkeypatch.setattr(latency_sample, "DISTINCT", 6)
    rng = random.Random(26)
    clock = Clock(request_overhead=3)
    fast, slow = RunStats(clock), RunStats(clock)
    finished = [s for s in RequestStatus if s.is_finished]
    for i in range(400):
        status = rng.choice(finished)
        arrival = rng.randrange(50)
        sent = None if status == S.FINISHED_ABORTED and rng.random() < 0.3 else (
            arrival + rng.randrange(20))
        done = status in COMPLETED
        admitted = first = None
        if sent is not None and (done or rng.random() < 0.5):
            admitted = sent + rng.randrange(30)
            if done or rng.random() < 0.5:
                first = admitted + rng.randrange(1, 9)
        end = (first or admitted or sent or arrival) + rng.randrange(40)
        req = ended(f"r{i}", status, arrival, sent, admitted, first, end,
                    outputs=rng.randrange(1, 5))
        fast.request_ended(req)
        reference(slow, req)
    for metric, sample in fast.samples.items():
        other = slow.samples[metric]
        assert sample.counts == other.counts and list(sample.rest) == list(other.rest)
        assert sample.rest  # past 6 distinct values
        assert sample.stats((50, 90, 99)) == other.stats((50, 90, 99))
    assert fast.status_counts == slow.status_counts
    assert (fast.completed_input, fast.completed_output) == (
        slow.completed_input, slow.completed_output)


def test_with_an_slo_the_latencies_are_made_once_and_checked():
    """With an SLO (TTFT within 5 steps of a 1-step clock), the request within it
    counts as met, the other not; the samples are the same as without."""
    clock = dataclasses.replace(Clock(), request_overhead=0)
    with_slo = RunStats(clock, slo=(("ttft", 5),))
    without = RunStats(clock)
    for stats in (with_slo, without):
        stats.request_ended(ended("a", S.FINISHED_STOPPED, 0, 0, 1, 4, 8))
        stats.request_ended(ended("b", S.FINISHED_STOPPED, 0, 0, 1, 9, 12))
    assert with_slo.slo_met == 1 and without.slo_met == 0
    assert counts(with_slo) == counts(without)
    assert isinstance(with_slo.samples["tpot"], LatencySample)


def test_values_pending_until_counted():
    """Without an SLO a request's values wait in lists until `PENDING_AT` requests
    have ended; reading `samples` counts those waiting first."""
    from scheduler_sim.engine import run_stats
    stats = RunStats(Clock(request_overhead=0))
    for i in range(run_stats.PENDING_AT - 1):
        stats.request_ended(ended(f"r{i}", S.FINISHED_STOPPED, 0, 1, 3, 5, 9))
    assert len(stats._pending[0]) == run_stats.PENDING_AT - 1
    assert not stats._samples["ttft"].counts  # nothing counted yet
    stats.request_ended(ended("last", S.FINISHED_STOPPED, 0, 1, 3, 5, 9))
    assert not any(stats._pending)  # the last one counted them all
    assert stats._samples["ttft"].counts == {4: run_stats.PENDING_AT}
    stats.request_ended(ended("more", S.FINISHED_STOPPED, 0, 2, 3, 5, 9))
    assert stats._samples["client_wait"].counts == {1: run_stats.PENDING_AT}
    assert stats.samples["client_wait"].counts == {1: run_stats.PENDING_AT, 2: 1}
    assert not any(stats._pending)


def test_samples_set_whole_drop_the_values_pending():
    """A disaggregated fleet sets one statistics' samples as another's: what was
    pending in the first is dropped with its counts, what was pending in the other
    is counted when read."""
    a, b = RunStats(Clock(request_overhead=0)), RunStats(Clock(request_overhead=0))
    a.request_ended(ended("a", S.FINISHED_STOPPED, 0, 1, 3, 5, 9))
    b.request_ended(ended("b", S.FINISHED_STOPPED, 0, 2, 3, 5, 9))
    a.samples = b.samples
    assert not any(a._pending)
    assert a.samples["client_wait"].counts == {2: 1}


def test_samples_count_the_waits_of_requests_never_admitted():
    """Only requests sent and aborted before admission ended (waits 1 and 3, nothing
    else): reading `samples` counts them (`_pending`'s client waits are the list
    every other one is no longer than)."""
    stats = RunStats(Clock(request_overhead=0))
    stats.request_ended(ended("a", S.FINISHED_ABORTED, 0, 1, finished=5))
    stats.request_ended(ended("b", S.FINISHED_ABORTED, 2, 5, finished=6))
    assert counts(stats) == {"client_wait": {1: 1, 3: 1}, "queue_delay": {}, "ttft": {},
                             "e2el": {}, "tpot": {}}


def test_the_summarys_itl_by_hand():
    """ITL from the gaps' counts (`_itl`): gaps of 3 steps twice, 5 once, 9 three
    times (3 3 5 9 9 9): mean 38 / 6, p50 rank 3 -> 5, p90 and p99 rank 6 -> 9, max 9;
    a length counted zero times (4) is no rank's and still no max; none counted: Nones."""
    stats = RunStats(Clock())
    stats.itl.update({9: 3, 3: 2, 4: 0, 5: 1})
    got = stats._itl()
    assert got == {"itl_mean": round(38 / 6, 4), "itl_p50": 5, "itl_p90": 9, "itl_p99": 9,
                   "itl_max": 9}
    stats.itl.update({12: 0})  # (the last length, counted zero times: still the max)
    assert stats._itl()["itl_max"] == 12
    for itl in ({}, {4: 0}):
        stats = RunStats(Clock())
        stats.itl.update(itl)
        assert stats._itl() == {"itl_mean": None, "itl_p50": None, "itl_p90": None,
                                "itl_p99": None, "itl_max": None}
