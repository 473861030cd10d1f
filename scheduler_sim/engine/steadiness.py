"""Steadiness: whether the step a policy just planned repeats the one before it.

Folding (fast/folding.py) applies a run of identical decode steps at once. It may
do so only after a `schedule` call that will repeat itself, one token
further, until something outside happens. This module owns that judgement
and the two records it rests on:

- the change log: every transition that changes what a policy sees besides
  decoding progress (a request received, admitted, preempted, ended or
  parked; blocks released by a drain or by the policy; a copy landed) is
  written here through `changed()`, by the engine's lifecycle steps and by
  fleet drivers (`Engine.note_change`). A call that overlaps one is not a
  repeat. tests/test_change_log.py checks that every engine or fleet
  function that moves a request writes it, so a new transition cannot miss
  it silently; the folded-against-stepped tests check the rest.
- the policy's own state: its attributes (its `__dict__`, and its slots if a
  subclass declares any) are copied before each call and compared after it.
  An attribute given a different value means the policy's next decision may
  differ, so the call is not a repeat. The policy writes nothing for this
  and knows nothing of folding; a list or dict it changes in place is not
  seen (docs/policies.md says so, and `may_fold` is the policy's way out).

A call repeats the previous one when, in addition, its dispatch is all
decodes, it reported the same blocked head (id, reason, blocks needed), and
its rows are those of the previous dispatch still running, in the same
order (or, after a dispatch with prefill rows, every running request).
"""
from __future__ import annotations

import operator
from functools import partial
from itertools import compress
from typing import Any

from ..records.states import RequestStatus

__all__ = ["Steadiness"]

_first = operator.itemgetter(0)
_status = operator.attrgetter("status")
_is_running = partial(operator.is_, RequestStatus.RUNNING)
_MISSING = object()  # an unset slot


def _slot_names(cls: type) -> tuple[str, ...]:
    """The slots a policy class (or one of its bases) declares, if any."""
    names: list[str] = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else [
            s for s in slots if s not in ("__dict__", "__weakref__")]
    return tuple(names)


class Steadiness:
    """The change log, the policy's state before each call, and the last plan seen."""

    __slots__ = ("enabled", "through", "behind", "changes", "moved", "blocked", "folded",
                 "through_counted", "arrivals_counted", "blocked_counted", "blocked_admitted",
                 "chunks_folded", "finishes_behind",
                 "_policy", "_slots", "_last")

    def __init__(self, policy: Any, enabled: bool = True) -> None:
        # Whether folding is on at all: it changes nothing a summary or the event
        # stream shows, but a per-boundary state callback or the audit wants every
        # boundary for real, so with them it is off.
        self.enabled = enabled
        # Whether a steady stretch may be carried on through the requests that
        # finish in it (the engine decides: fast/through.py).
        self.through = False
        # Whether the policy may make the call due behind a blocked head itself
        # (`vllm`'s own `decodes_behind`, fast/behind.py), read once here: asked
        # at each step, the others' steps (SGLang's on the first 2,000 Mooncake
        # requests) cost 1.005x the instructions.
        self.behind = hasattr(policy, "decodes_behind")
        self.changes = 0  # transitions written to the change log so far
        # Whether the policy admitted or preempted during this step's call (then an
        # empty plan is still an iteration, E6b).
        self.moved = False
        # This step's blocked head: (id, reason, needed, free, taken).
        self.blocked: tuple[str, str, int, int, int] | None = None
        self.folded = 0  # dispatches applied by folding, for tests and benchmarks
        # Completions taken inside a counted stretch (fast/finishes.py), for the same.
        self.through_counted = 0
        # Decodes started counted after an admission carried on (fast/arrivals.py).
        self.arrivals_counted = 0
        # Decodes started behind a blocked head in place of a call (fast/blocked.py).
        self.blocked_counted = 0
        # Admissions at a finish behind a blocked head started without a call (the same).
        self.blocked_admitted = 0
        # Steps of chunk runs applied at once (fast/chunk_run.py), for the same.
        self.chunks_folded = 0
        # Finishes behind a head blocked for blocks whose call the policy made
        # itself, its plan started (fast/behind.py), for the same.
        self.finishes_behind = 0
        self._policy = policy
        self._slots = _slot_names(type(policy))
        # The requests of the last dispatch planned (None unless all decodes), the
        # head it reported blocked, and the change count after its call.
        self._last: tuple[list | None, tuple | None, int] | None = None

    def changed(self) -> None:
        """Write a transition to the change log (the next call is not a repeat)."""
        self.changes += 1

    def forget(self) -> None:
        """The next call is compared with nothing (a stretch not worth folding, or
        an empty plan)."""
        self._last = None

    def repeated(self, requests: list, changes: int | None = None) -> None:
        """The engine started the decodes of `requests` in place of a call the
        policy let it skip (`Policy.repeats_decodes`, fast/through.py): the next
        call is compared with them. `changes`: the change log's count when they
        started, if it is told later (fast/finishes.py)."""
        self._last = (requests, None, self.changes if changes is None else changes)

    def repeated_behind(self, requests: list, previous: list) -> bool | None:
        """`repeats` of the dispatch of `requests`, the running requests of the
        dispatch of `previous` less those that ended since, started by the engine
        in place of a call the policy made itself (fast/behind.py), which left its
        attributes as they were: True if the previous look kept `previous` and
        the head the call just reported, as `repeats` answers then (its
        requests, less those ended, are `requests`); None: unknown (`repeats`
        answers)."""
        last = self._last
        block = self.blocked
        if last is None or last[0] is not previous or block is None \
                or last[1] != block[:3]:
            return None
        self._last = (requests, last[1], self.changes)
        return True

    def before_call(self) -> tuple[int, dict, tuple]:
        """What `repeats` compares the call with: the change count and a copy of
        the policy's attributes, taken just before `schedule`. With no previous
        plan to compare with, `repeats` answers no whatever the policy did, so
        nothing is copied (about 40% of the calls on the Azure trace under
        `continuous`, where a copy is the most of this call's cost)."""
        if self._last is None:
            return (self.changes, None, ())
        return (self.changes, *self.policy_state())

    def policy_state(self) -> tuple[dict, tuple]:
        """A copy of the policy's attributes: its `__dict__`, and its slots' values."""
        policy = self._policy
        slots = self._slots
        return (policy.__dict__.copy(),
                tuple(getattr(policy, s, _MISSING) for s in slots) if slots else ())

    def policy_changed(self, before: tuple[int, dict, tuple]) -> bool:
        """Whether an attribute of the policy was set, given a different value or
        removed since `before` (`before_call()`); values that cannot be compared
        count as different."""
        policy = self._policy
        try:
            return not (before[1] == policy.__dict__ and (
                not self._slots
                or before[2] == tuple(getattr(policy, s, _MISSING) for s in self._slots)))
        except Exception:
            return True

    def repeats(self, flight: Any, before: tuple[int, dict, tuple]) -> bool:
        """Whether the call that planned `flight` will repeat itself (see the module
        docstring); `before` is `before_call()` of that call. The policy is never
        asked whether it is steady."""
        block = self.blocked
        block = block[:3] if block is not None else None
        mine = None
        if flight.all_decode:
            mine = flight.requests if flight.members else flight.decoders
            if mine is None:
                mine = list(map(_first, flight.rows))
        changes = before[0]
        # Only the requests are kept: the rows go with their dispatch.
        last, self._last = self._last, (mine, block, self.changes)
        if (mine is None or self.changes != changes or last is None
                or last[1] != block or self.policy_changed(before)):
            return False
        previous = last[0]
        if previous is None:  # the previous dispatch had other rows than decodes
            return len(mine) == self._policy.running_count
        if last[2] == changes:
            return mine == previous  # nothing ended since: the same requests
        # (The loops run in C: this is on the path of every steady stretch.)
        return list(compress(previous, map(_is_running, map(_status, previous)))) == mine
