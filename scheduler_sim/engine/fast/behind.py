"""Behind a head blocked for blocks: written decodes carried on through finishes and prompt ends.

Under `vllm` with prefix caching the queue's head mostly waits for blocks
while the running requests decode. Their stretch is folded (folding.py) up to
the completion that finishes one of them, and a dispatch whose prompts end
in it is followed by everybody's decodes; then the engine's loop took the
boundary: the completion (E1: a finished request's blocks released), the
policy's `schedule`, which walks every running request's decode (opening a
block at a decode's first row, keying the block its last row fills), looks
the head up again and finds it still short of blocks, then the dispatch
started, seen to repeat, and folded again. No decode cohort counts these
decoders (prefix caching has none), so blocked.py's counted boundaries do
not apply.

`carry_behind` takes such boundaries as the loop would: the completion
(`complete_now`; with arrivals due by it, each at its own time first, as
arrivals.py's `take_boundaries` takes them), then in place of the call the
policy's own restatement of it (`decodes_behind`, `vllm`'s own question,
policies/vllm_fast.py: the decodes' blocks opened and keyed in running
order, the head looked up and reported as the call reports it, the plan's
decodes returned), the dispatch of those decodes started (`_start`'s steps
for that plan), and the step's look for folding (`Steadiness.repeats`, known
at once when the look before kept the dispatch that just completed,
`repeated_behind`; then `fold`). The policy declines where the call may do
more (the head now fits, say): the boundary's step is then the policy's, and
the caller steps again at the engine's `now`. Not where something other
than arrivals is due by the completion, not with a listener (a boundary's
records would be the step's) or a decode cohort; the caller (through.py's
`carry_on`) has checked the rest (`Steadiness.through`: a lone engine or a
plain fleet's replica, a built-in policy, no state callback, client slots,
timeouts, release delay or host memory; `Steadiness.behind`: the policy has
the question).
tests/test_fold_behind.py compares the results with stepped replays.

Speed: replaying the Mooncake conversation trace under `vllm` with prefix
caching, of the 23,036 `schedule` calls 5,990 planned decodes after a finish
and about 4,000 the first decodes after a prompt's end, behind a head blocked
for blocks; 10,337 of those boundaries are now taken here (12,699 calls),
0.989x the instructions of the first 2,000 requests (benchmarks/README.md,
"twenty-eighth steps", fin30).
"""
from __future__ import annotations

from operator import attrgetter, itemgetter

from ...records.states import RequestStatus
from ...requests.request import write_decodes
from ..flight import InFlight
from .arrivals import only_arrivals, take_boundaries
from .folding import fold

__all__ = ["carry_behind"]

RUNNING = RequestStatus.RUNNING
_first = itemgetter(0)
_resident = attrgetter("resident")


def carry_behind(engine, until: float) -> bool:
    """The flight just started (and perhaps folded) runs the written decodes of
    every running request, and the call that planned it reported the queue's
    head blocked: take its completion and those after it while the policy
    makes the call due at each (`decodes_behind`; see the module).
    Returns True when it took a boundary whose step is still to be planned
    by the policy (the caller steps again at the engine's `now`), False when
    the engine's loop takes the next one."""
    if engine._emit is not None or engine._cohort is not None:
        return False
    policy = engine.policy
    steady = engine.steadiness
    allocator = engine.allocator
    livelock = engine.livelock
    growth = allocator.step_growth
    ledger = engine.ledger
    # (`vllm`'s own question, not in policies/base.py: the caller asks only a policy
    # that has it, `Steadiness.behind`.)
    decodes_behind = policy.decodes_behind
    while True:
        flight = engine.flight
        decoders = flight.decoders
        report = steady.blocked
        t = flight.done
        if report is None or flight.members or livelock.tripped:
            return False
        outside = t >= until
        if outside and not only_arrivals(engine, until, t):
            return False  # (something other than arrivals due by `t`: the loop's)
        if decoders is None:
            # Decodes and prompt chunks: every row emits (each chunk ended its prompt
            # or recompute), so every running request decodes after it.
            rows = flight.rows
            if flight.outputs != len(rows):
                return False
            decoders = list(map(_first, rows))
        survivors = None
        if outside:
            # Arrivals by `t`, taken at their own times as the loop takes them (E2),
            # then E1 at `t` (arrivals.py; the call below sees them queued).
            take_boundaries(engine, t)
            until = engine._until()
        else:
            engine.now = t
            ended = engine.complete_now()  # E1, as the loop does it
            if not ended:
                # Nobody ended: the survivors are the decoders. (Speed: a pass over
                # the rows fewer at 4,810 of the 14,948 completions taken here on
                # the Mooncake trace; benchmarks/README.md, "thirtieth steps", db33.)
                survivors = decoders
            else:
                # The decoders less those that ended (nothing else leaves them at a
                # completion), taken out by identity in C rather than every row's
                # status read in Python. (Speed: benchmarks/README.md, "thirty-first
                # steps", ft35.)
                survivors = decoders[:]
                for req in ended:
                    survivors.remove(req)
        if survivors is None:
            survivors = [req for req in decoders if req.status is RUNNING]
        if not survivors or len(survivors) != policy.running_count:
            return True  # the step is the policy's, at this boundary
        # What the step clears before its call, then the call's work (the blocks
        # the decodes open and fill, the head's report) done by the policy.
        steady.moved = False
        steady.blocked = None
        allocator.step_evictions.clear()
        growth.clear()
        plan = decodes_behind(report[0], report[1], report[2])
        if plan is None:
            return True
        steady.finishes_behind += 1
        # `_start` of the plan the call returns (`DecodesFirst` of the running list,
        # its blocks opened), the steps it takes for it inline (its checks hold: the
        # policy's walk kept to the row limit and the budget). Speed: on the first
        # 2,000 Mooncake requests 0.9948x the instructions with `_start`, 0.9896x
        # so (benchmarks/README.md, "twenty-eighth steps", fin30).
        policy_blocks = sum(growth.values())
        n = len(plan)
        contexts = sum(map(_resident, plan))
        useful = write_decodes(plan)
        if useful:
            livelock.idle = 0  # (LivelockWatch.reset, inline)
        else:
            livelock.replayed(n, engine.roster.requests.values())
        done, exact = ledger.decodes(t, n, contexts)  # (`dispatch` of decodes only)
        flight = engine.flight = InFlight(None, t, done, exact, True, n, plan)
        # The step's look for folding, the policy's attributes as they were (the
        # promise leaves them): known at once when it kept the dispatch before.
        if ((plan == survivors and steady.repeated_behind(plan, decoders))
                or steady.repeats(flight, (steady.changes, policy.__dict__, ()))):
            # Every row written useful (`write_decodes` counted all: each `resident`
            # is its `high_water`): the fold is told their contexts, and looks for no
            # replayed row. (Speed: 0.995x the instructions of the first 2,000
            # Mooncake requests; benchmarks/README.md, "thirty-first steps", ft35.)
            fold(engine, flight, until, policy_blocks, None,
                 contexts + n if useful == n else None)
        allocator.check()
