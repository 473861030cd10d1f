"""The agenda (engine/agenda.py): the engine's pending outside sources and the one
`peek` over them (E7, E4), with hand-placed times."""
from __future__ import annotations

from types import SimpleNamespace

from scheduler_sim.engine.agenda import Agenda
from scheduler_sim.records.states import RequestStatus
from scheduler_sim.records.workload import Action, RequestSpec, Workload


class Pool:
    """An allocator as the agenda reads it: blocks draining until `expiry`."""

    def __init__(self, expiry=None, landing=None):
        self.expiry = expiry
        self.draining = 1 if expiry is not None else 0
        # Host memory with a load landing at `landing` (or none).
        self.host = None
        if landing is not None:
            self.host = SimpleNamespace(loads=[(landing, 0, None)], storing=(),
                                        next_landing=lambda: landing)

    def next_expiry(self):
        return self.expiry


class Wakes:
    """A policy that wants to be woken at `at`."""

    def __init__(self, at=None):
        self.at = at

    def next_wakeup(self, now):
        return self.at


def spec(rid, arrival):
    return RequestSpec(rid, 0, arrival, 4, 2, 2)


def workload():
    """Arrivals at 2 and 9; cancels at 4 and 4; a forced preemption at 6."""
    return Workload([spec("a", 2), spec("b", 9)],
                    [Action("cancel", "a", 4, 0), Action("cancel", "b", 4, 1)],
                    [Action("preempt", "a", 6, 2)])


def test_peek_is_the_first_pending_source_and_in_flight_only_arrivals_and_drains():
    """Arrival 2 first; once it is taken, the cancellations at 4 come before the
    drain at 5 and the wakeup at 7; in flight only the drain (5) and the next
    arrival (9) count, and taking the cancels at 4 leaves the preemption at 6."""
    agenda = Agenda(workload(), None, Pool(expiry=5), Wakes(at=7))
    assert agenda.begin() == 2
    assert agenda.peek(0) == 2
    agenda.next_arrival = next(agenda.arrivals)  # a is taken: b at 9 is next
    assert agenda.peek(2) == 4
    assert agenda.peek(2, in_flight=True) == 5
    assert agenda.due_cancels(4) == ["a", "b"]
    assert agenda.peek(4) == 5
    agenda.allocator = Pool()
    assert agenda.peek(4) == 6
    assert agenda.due_preempts(6) == ["a"]
    assert agenda.peek(6) == 7
    assert agenda.peek(6, live=False) == 9  # no live request: no wakeup asked


def test_a_timeout_fires_one_tick_after_the_limit_unless_the_wait_ended():
    """waiting_timeout 3: a request waiting since 1 times out at 1 + 3 + 1 = 5; once
    it is admitted (running) its timeout is dropped and nothing is pending."""
    agenda = Agenda(Workload(), 3, Pool(), Wakes())
    req = SimpleNamespace(wait_since=1, status=RequestStatus.WAITING)
    agenda.wait(req, 1)
    assert (agenda.next_timeout(), agenda.peek(1)) == (5, 5)
    req.status = RequestStatus.RUNNING
    assert (agenda.next_timeout(), agenda.peek(1), len(agenda.timeouts)) == (
        None, float("inf"), 0)


def test_without_a_timeout_waiting_adds_nothing_and_an_empty_trace_begins_at_0():
    """No waiting_timeout: `wait` queues nothing; an empty workload begins at 0 and
    has nothing pending."""
    agenda = Agenda(Workload(), None, Pool(), Wakes())
    agenda.wait(SimpleNamespace(wait_since=0, status=RequestStatus.WAITING), 0)
    assert (agenda.begin(), len(agenda.timeouts), agenda.peek(0)) == (0, 0, float("inf"))


def test_a_load_from_host_memory_landing_is_pending_even_in_flight():
    """A load landing at 7 is the first source before an arrival at 9, and it counts
    while a dispatch is in flight (it makes a request waiting, as an arrival does)."""
    agenda = Agenda(Workload(), None, Pool(landing=7), Wakes(None))
    agenda.next_arrival = type("Spec", (), {"arrival": 9})()
    assert agenda.peek(0) == 7 and agenda.peek(0, in_flight=True) == 7


def test_a_policy_without_wakeups_is_not_asked():
    """`continuous` keeps the base's next_wakeup (always None): the agenda does not ask
    it; `dynamic`, a duck-typed policy and a continuous one given a next_wakeup of its
    own are asked (once per peek with live requests)."""
    from scheduler_sim.policies.continuous import ContinuousPolicy
    from scheduler_sim.policies.dynamic import DynamicPolicy

    class Plain(ContinuousPolicy):
        def __init__(self):
            pass

    quiet = Agenda(workload(), None, Pool(), Plain())
    quiet.begin()
    assert quiet.wakes is False and quiet.peek(0) == 2
    assert Agenda(workload(), None, Pool(), Wakes(at=1)).wakes is True
    assert Agenda(workload(), None, Pool(), DynamicPolicy.__new__(DynamicPolicy)).wakes is True
    calls = []
    own = Plain()
    own.next_wakeup = lambda now: calls.append(now) or 1
    agenda = Agenda(workload(), None, Pool(), own)
    agenda.begin()
    assert agenda.wakes is True
    assert agenda.peek(0) == 1 and agenda.peek(0, live=False) == 2 and calls == [0]


def test_take_arrivals_hands_over_those_at_now_in_order_and_holds_the_next():
    """Arrivals a and b at 3, c at 5: taking those at 3 hands a then b to `arrive`
    and holds c; taking those at 5 hands c and leaves none (the trace done)."""
    w = Workload([spec("a", 3), spec("b", 3), spec("c", 5)], [], [])
    agenda = Agenda(w, None, Pool(), Wakes())
    assert agenda.begin() == 3
    got = []
    agenda.take_arrivals(3, lambda s: got.append(s.id))
    assert got == ["a", "b"]
    assert agenda.next_arrival.id == "c"
    agenda.take_arrivals(5, lambda s: got.append(s.id))
    assert got == ["a", "b", "c"]
    assert agenda.next_arrival is None
