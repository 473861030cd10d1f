"""Data-parallel lockstep: the replicas of a fleet step together (`dp_lockstep`).

In vLLM's data parallelism for mixture-of-experts models every rank runs a
forward pass at every step, because the expert layers exchange tokens
between ranks: a rank with nothing to run executes a dummy batch, and a
step ends when its slowest rank's does. This module replays that:

- A step starts when no step is in flight and something happened since the
  last one (an arrival, a completion, a drain, a cancellation, a wakeup):
  every rank's policy plans at that same time, in rank order. If no rank
  plans anything, no step runs (vLLM's ranks would spin on dummy batches
  until work arrives; those steps take no modelled time here and are not
  counted).
- If any rank runs a dispatch, every dispatch of the step completes at the
  end of the longest one (under a cost model; without one every dispatch is
  one tick anyway). Each rank that ran nothing counts a dummy step.
- A rank's `lockstep_wait` adds up the time it spent waiting for the others:
  the step's length minus its own dispatch's, or the whole step for a dummy
  step. Its `busy_seconds` stay its own modelled GPU time.
- The ranks share one step counter (vLLM's `step_counter`): it counts the
  steps run since the fleet was last idle (no rank holding a live request),
  and returns to 0 then (a new wave). The `vllm` policy reads it for its
  prefill cadence: with `prefill_interval` above 1, prefill is held on steps
  whose counter is not a multiple of the interval while something decodes,
  unless the last step that let prefill run left requests waiting (vLLM's
  capacity escape).
- Between steps, arrivals are routed, and cancellations, timeouts, forced
  preemptions and drains happen at their own times as on lone engines (a
  rank with a dispatch in flight defers cancellations to its end, E4); only
  planning waits for the step boundary.

Folding is off (a rank cannot run ahead of the others), so a lockstep replay
costs one scheduling call per rank and step.
"""
from __future__ import annotations

from .fleet import INF, Fleet, FleetResult, stall_the_stuck

__all__ = ["LockstepFleet"]


class LockstepFleet(Fleet):
    """A fleet whose replicas are data-parallel ranks stepping together."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["fast_forward"] = False
        super().__init__(*args, **kwargs)
        n = len(self.engines)
        self.dummy_steps = [0] * n
        self.waited = [0.0] * n  # clock steps spent waiting for the other ranks
        self.steps = 0           # steps run, all waves
        self.loads = None        # (its loop reads the replicas' loads at routing)
        for engine in self.engines:
            engine.link.lockstep_step = 0

    def _run(self) -> FleetResult:
        engines = self.engines
        specs = self.workload.arrivals()
        spec = next(specs, None)
        t = first = spec.arrival if spec is not None else 0
        router, views, actions = self.router, self.views, self._actions
        step_end: int | None = None  # the step in flight completes then
        step_exact = 0.0
        counter = 0
        moved = [False] * len(engines)
        stalled = False
        while True:
            if step_end == t:                                 # 1. E1, every rank
                for engine in engines:
                    engine.now = t
                    engine.complete_due()
                    # Every rank starts the next step from the same exact time.
                    engine.ledger.ended(t, step_exact)
                step_end = None
            for engine in engines:
                engine.now = t
            while spec is not None and spec.arrival == t:     # 2. routing
                i = router.choose(spec, views)
                for action in actions.get(spec.id, ()):
                    engines[i].accept_action(action)
                engines[i].accept(spec)
                self.routed[i] += 1
                spec = next(specs, None)
            for engine in engines:                            # 3. E2, E3 up to planning
                engine.take_outside_events()
            if step_end is None:
                stalled |= self._plan_step(t, counter, moved)
                if any(e.flight is not None for e in engines):
                    step_end, step_exact = self._close_step(t)
                    counter += 1
                    self.steps += 1
                elif not any(e.live for e in engines):
                    counter = 0  # the fleet is idle: the next step starts a new wave
            nxt = spec.arrival if spec is not None else INF
            if step_end is not None and step_end < nxt:
                nxt = step_end
            for i, engine in enumerate(engines):
                when = engine.peek()
                if engine.flight is None and engine.live and moved[i]:
                    when = min(when, t + 1)  # an empty iteration: decide again next step
                if when < nxt:
                    nxt = when
            if nxt == INF:
                stalled |= stall_the_stuck(engines, t)
                break
            t = nxt
        result = self._result(first, stalled)
        clock = self.clock
        for i, summary in enumerate(result.replicas):
            summary["dummy_steps"] = self.dummy_steps[i]
            summary["lockstep_wait"] = clock.report(self.waited[i])
        result.summary["lockstep_steps"] = self.steps
        result.summary["dummy_steps"] = sum(self.dummy_steps)
        result.summary["lockstep_wait"] = clock.report(sum(self.waited))
        return result

    def _plan_step(self, t: int, counter: int, moved: list[bool]) -> bool:
        """Every rank's policy plans at `t`; returns whether a rank stalled."""
        stalled = False
        for i, engine in enumerate(self.engines):
            if engine.stall_if_livelocked():
                stalled = True
                moved[i] = False
                continue
            engine.link.lockstep_step = counter
            moved[i] = engine.step()
            if moved[i] and engine.flight is None and engine.live:
                # The policy admitted or preempted but ran nothing (E6b).
                engine.ledger.empty()
        return stalled

    def _close_step(self, t: int) -> tuple[int, float]:
        """Every dispatch of the step started at `t` ends with the longest one."""
        engines = self.engines
        flights = [e.flight for e in engines]
        exact = max(f.exact for f in flights if f is not None)
        done = max(f.done for f in flights if f is not None)
        start = engines[0].ledger.start_of(t)
        for i, engine in enumerate(engines):
            flight = flights[i]
            if flight is None:
                self.dummy_steps[i] += 1
                self.waited[i] += exact - start
            else:
                self.waited[i] += exact - flight.exact
                engine.end_dispatch_at(done, exact)
        return done, exact
