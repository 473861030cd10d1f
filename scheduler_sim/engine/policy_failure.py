"""What a failure during a replay becomes: the simulator's, or the policy's.

A policy from outside the package (a plugin) is code the user chose to run,
and the engine checks every decision it makes. When a replay under such a
policy fails, the failure is the policy's and is reported as a `PolicyError`
naming the policy, the time and what went wrong (exit status 3), whatever
the policy raised, and wherever the replay ran (one engine, a fleet of
replicas, lockstep ranks, prefill and decode replicas, a worker process):

- a rule the engine checks and the policy broke (an `InvariantError` raised
  by the package's own code): `broke a rule at tick 4: ...`;
- anything the policy's code raised itself, any BaseException at all
  (SystemExit, GeneratorExit, KeyboardInterrupt that no signal explains, one
  of the simulator's own error types, an exception whose `str()` fails):
  `raised ValueError at tick 4: ... (my_policy.py:12 in schedule)`, the last
  frame of the traceback outside the package.

What stays as it is: an interrupt a signal explains (`records.interrupts`),
and the simulator's own errors raised by the package's code (an output that
cannot be written, a reader that went away); under a built-in policy every
failure is the simulator's.

`check_plan` is the check every plan of a plugin passes first, `check_blocked` that of
every `report_blocked` call it makes.
"""
from __future__ import annotations

from ..policies.plugins import describe, raised_outside, where
from ..records.clock import Clock
from ..records.errors import InvariantError, PolicyError, SimError
from ..records.interrupts import from_signal
from ..requests.request import Request

__all__ = ["policy_failure", "moment", "shown", "check_plan", "check_blocked"]

# A value a policy handed over is shown up to this many characters.
SHOWN_LIMIT = 200


def shown(value: object) -> str:
    """`repr(value)` for a message, whatever the value: cut when long, and still a
    description when its repr raises (a policy's object can do anything)."""
    try:
        text = repr(value)
        if not isinstance(text, str):
            raise TypeError(text)
    except BaseException as exc:  # noqa: B036
        return f"a {type(value).__name__} whose repr() raised {type(exc).__name__}"
    return text if len(text) <= SHOWN_LIMIT else text[:SHOWN_LIMIT] + "..."


def moment(clock: Clock, step: int) -> str:
    """A time as the run's outputs give it: `tick 3`, or `0.012345 s` under a cost
    model."""
    return f"{clock.report(step)} s" if clock.in_seconds else f"tick {step}"


def policy_failure(exc: BaseException, policy: str, plugin: bool, clock: Clock,
                   now: int) -> BaseException | None:
    """The error to raise instead of `exc`, which ended at step `now` a replay under
    `policy` (a plugin when `plugin`); None to let `exc` go on as it is."""
    if isinstance(exc, PolicyError) or from_signal(exc):
        return None
    if not plugin:
        if isinstance(exc, InvariantError) and exc.tick is not None and clock.in_seconds:
            return InvariantError(exc.detail, exc.tick, moment(clock, exc.tick))
        return None
    outside = raised_outside(exc)
    if isinstance(exc, InvariantError) and not outside:
        tick = now if exc.tick is None else exc.tick
        return PolicyError(f"policy {policy!r} broke a rule at {moment(clock, tick)}: "
                           f"{exc.detail}{where(exc)}")
    if isinstance(exc, SimError) and not outside:
        return None  # the simulator's own: an output that cannot be written, say
    name, text = describe(exc)
    return PolicyError(f"policy {policy!r} raised {name} at {moment(clock, now)}"
                       f"{': ' + text if text else ''}{where(exc)}")


def check_plan(plan: object, requests: dict, now: int) -> None:
    """A plugin's plan must be a list of (request, tokens) pairs of requests of this
    run (`requests`, by id), each at most once; the rest (budgets, phases, blocks)
    the engine's `_start` checks for every policy."""
    if not isinstance(plan, list):
        raise InvariantError(f"schedule() returns a list of (request, tokens) pairs, "
                             f"got {type(plan).__name__}", now)
    seen: set[str] = set()
    for entry in plan:
        if (type(entry) is not tuple or len(entry) != 2
                or not isinstance(entry[0], Request)
                or requests.get(entry[0].rid) is not entry[0]
                or type(entry[1]) is not int):
            raise InvariantError(f"each plan entry is a (request of this run, int "
                                 f"tokens) pair, got {shown(entry)}", now)
        rid = entry[0].rid
        if rid in seen:
            raise InvariantError(f"request {rid!r} appears twice in one dispatch (a "
                                 "request runs at most once per dispatch)", now)
        seen.add(rid)


def check_blocked(req: object, reason: object, needed: object, requests: dict,
                  now: int) -> None:
    """A plugin's `report_blocked(req, reason, needed)` names a request of this run, a
    reason (a non-empty string) and the blocks it needs (an int >= 0): what the
    `admission_blocked` record carries (NaN, an object or a stray request went into
    the events file as they were)."""
    if (not isinstance(req, Request) or requests.get(req.rid) is not req
            or type(reason) is not str or not reason or type(needed) is not int
            or needed < 0):
        raise InvariantError(f"report_blocked(req, reason, needed) takes a request of this "
                             f"run, a non-empty string and an int >= 0, got ({shown(req)}, "
                             f"{shown(reason)}, {shown(needed)})", now)
