"""The livelock watchdog: a policy that only ever recomputes is stopped as a stall (E6b)."""
from __future__ import annotations

import scheduler_sim.policies
from conftest import req, simulate
from scheduler_sim.policies.continuous import ContinuousPolicy


class Churn(ContinuousPolicy):
    """Preempts every running request that holds rows, then schedules as usual: after
    the first prefill every dispatch rewrites rows that were written before."""

    name = "churn"

    def schedule(self, now):
        for r in list(self.decoders) + list(self.prefillers):
            if r.resident:
                self.view.preempt(r, "test")
        return super().schedule(now)


def test_a_policy_going_in_circles_is_stopped(monkeypatch):
    """P=8, B=4, 4 blocks: the prefill at 0 writes 8 useful rows (output 1 at 1); from then
    on each dispatch only replays those 8 rows. The watchdog allows a full pool (16 rows)
    plus what live requests ever wrote (8 rows) of replay without one useful row: the
    replays at ticks 1, 2 and 3 make 24 rows (not yet more than 24), the one at 4 makes
    32, so the run stops at tick 5 with `a` ended finished_error and a livelock reason."""
    monkeypatch.setitem(scheduler_sim.policies.POLICIES, "churn", Churn)
    s = simulate([req("a", 0, 8, 3)], policy="churn", block_size=4, num_blocks=4)
    assert s.result.stalled is True
    assert [d[0] for d in s.dispatches()] == [0, 1, 2, 3, 4]
    assert [rows for _, rows in s.dispatches()[1:]] == [[("a", "recompute", 8, False)]] * 4
    (stall,) = s.of("stalled")
    assert stall["tick"] == 5 and "livelock" in stall["reason"]
    a = s.req["a"]
    assert (a.status.label, a.replay_rows, a.useful_rows) == ("finished_error", 32, 8)


def test_replays_forced_by_the_trace_are_not_a_livelock():
    """4 blocks, budget 4: a (P=12 N=2) is preempted by the trace at every tick from 2 to
    8, replaying 32 rows in all, more than the watchdog's 16 + 12 without a useful row;
    but each preemption is an outside event that resets the count, so the run ends
    normally: first token at 11, finished at 12, 7 preemptions."""
    records = [req("a", 0, 12, 2)] + [{"type": "preempt", "id": "a", "at": t}
                                      for t in range(2, 9)]
    s = simulate(records, block_size=4, num_blocks=4, token_budget=4)
    a = s.req["a"]
    assert s.result.stalled is False
    assert (a.status.label, a.first_token_at, a.finished_at, a.preemptions, a.replay_rows) == (
        "finished_length_capped", 11, 12, 7, 32)


def test_the_watch_sets_its_limit_when_the_count_first_passes_a_pool():
    """Pool of 16 rows, a live request that wrote 10 (and a finished one that wrote 50,
    not counted): replays of 8 rows make 8, 16, 24 (past the pool: limit 16 + 10 =
    26, not tripped), 32 (tripped). After a reset, the live request having written
    2, one replay of 20 passes the pool and the new limit 18 at once."""
    from types import SimpleNamespace

    from scheduler_sim.engine.livelock import LivelockWatch
    from scheduler_sim.records.states import RequestStatus

    live = SimpleNamespace(high_water=10, status=RequestStatus.RUNNING)
    done = SimpleNamespace(high_water=50, status=RequestStatus.FINISHED_STOPPED)
    watch = LivelockWatch(16)
    seen = []
    for _ in range(4):
        watch.replayed(8, [live, done])
        seen.append((watch.idle, watch.limit, watch.tripped))
    assert seen == [(8, 0, False), (16, 0, False), (24, 26, False), (32, 26, True)]
    watch.tripped = False
    watch.reset()
    live.high_water = 2
    watch.replayed(20, [live])
    assert (watch.idle, watch.limit, watch.tripped) == (20, 18, True)
