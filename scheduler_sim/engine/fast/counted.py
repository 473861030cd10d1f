"""Counted dispatches: the decode cohort's side of starting and completing one.

While a `Cohort` (cohort.py) counts steady decoders, a dispatch that runs them
again writes no row for them: `_start_members` finds the members the plan
runs as plain decodes (one look-up per row, in C) and lets the cohort open
their blocks (by count: kv/counted_blocks.py); `_start_counted` starts a
dispatch of members only without a row loop; `_complete_members` has members
emit and finish by the counters and lets this dispatch's plain decoders join
(those that hold a credit). Each asks the ledger (ledger.py) for
the same statistics, duration and gaps a written dispatch gets, so a counted
run is byte for byte a written one (tests/test_cohort.py compares them on
random workloads of every policy that counts).

Why (measured in benchmarks/README.md, "A million generated requests"):
written, each decode row cost about 0.4 us (the row, its output, its block);
counted, a row costs one dictionary look-up in C.

`Counting` is the part of `Engine` that does this; `settle_members` and
`cohort` are what folding (folding.py) reads of it.
"""
from __future__ import annotations

import operator
from itertools import compress, repeat
from typing import Any

from ...policies import Plan
from ...policies.base import DecodesFirst
from ...records.errors import InvariantError
from ...records.event_lines import LineListener, counted_text, prompt_row_text
from ...records.events import Dispatch, Snapshot
from ...requests.request import DECODE, PREFILL, Request
from ..dispatching import InFlight
from .admission import AdmissionFlight, complete_admission
from .cohort import Cohort

__all__ = ["Counting"]

_first = operator.itemgetter(0)
_second = operator.itemgetter(1)
_rid = operator.attrgetter("rid")


class Counting:
    """The counted side of `Engine`'s dispatches (mixed into it)."""

    # The text of the rows the last `_start_counted` wrote to a line listener (None
    # if it wrote none), for a fold of the same requests right after it.
    started_rows: str | None = None

    @property
    def cohort(self) -> Cohort | None:
        """The steady decoders counted rather than written, if counted at all."""
        return self._cohort

    def settle_members(self, flight: InFlight) -> None:
        """Write every counted decoder's progress while `flight`, a dispatch of
        decodes only, runs: its rows are then all written ones, and its members'
        outputs are emitted as theirs when it completes (folding, when counted
        and written rows are mixed)."""
        if flight.rows is not None:
            raise InvariantError("the members of a dispatch with rows other than "
                                 "decodes are settled before it completes", self.now)
        self._cohort.settle_all()
        flight.decoders, flight.members = flight.requests, 0

    def _counts(self, plan: tuple | list = ()) -> tuple:
        """`_state(plan)`'s counts as a tuple in `Snapshot`'s field order (cached None
        without prefix caching), for a counted start's snapshot. Speed: built
        directly, not as a dictionary read back by name, where nothing of this
        step is pending and nothing is cached (54,306 snapshots on the Azure trace
        with `--events`; benchmarks/README.md, "fifteenth steps", helper ev11)."""
        a = self.allocator
        if a.cache is None and not (plan and a.step_growth):
            policy = self.policy
            return (policy.waiting_count, policy.running_count, a.reserved, a.held,
                    a.draining, a.free, None)
        state = self._state(plan)
        return (state["waiting"], state["running"], state["reserved"], state["allocated"],
                state["draining"], state["free"], state.get("cached"))

    def _start_counted(self, requests: list[Request], members: int, contexts: int,
                       counts: tuple | None = None) -> InFlight:
        """`_start` for a dispatch of counted decodes only (the cohort opened their
        blocks): the same statistics, duration and flight, without a row loop.
        `counts`: the snapshot's counts (`_counts`, taken before the cohort opened
        the blocks), written before the dispatch (a listener's)."""
        now = self.now
        if members > self.options.token_budget:
            raise InvariantError(f"dispatch tokens({members}) <= token_budget"
                                 f"({self.options.token_budget}) is false", now)
        self.livelock.idle = 0  # (LivelockWatch.reset, inline)
        done, exact = self.ledger.decodes(now, members, contexts)
        if self._emit is not None:
            self.started_rows = self._write_counted(requests, members, done, counts)
        return InFlight(None, now, done, exact, True, members, [], members, requests)

    def _write_counted(self, requests: list[Request], members: int, done: int,
                       counts: tuple | None, rows: str | None = None) -> str | None:
        """What a dispatch of counted decodes starting now writes to the listener:
        its snapshot (`counts`, if given: `_counts`) and its dispatch of a plain
        decode for each of `requests`, in order. A line listener gets both lines as
        one text, made from the ids (`rows`: their rows' text, if known), no record;
        the text of the rows is returned for the next dispatch of the same requests."""
        emit = self._emit
        now = self.now
        if isinstance(emit, LineListener):
            if rows is None:
                rows = emit.members_rows(requests)  # (the last text, edited if it can be)
            emit.write_text(counted_text(now, counts, rows, members, done, emit.policy,
                                         emit.clock))
            return rows
        if counts is not None:
            emit(Snapshot(now, *counts))
        emit(Dispatch(now, tuple([(req.rid, DECODE, 1, True, None) for req in requests]),
                      members, done))
        return None

    def _write_admission(self, counts: tuple, decodes: list[Request], chunks: list,
                         tokens: int, done: int) -> None:
        """What an admission's dispatch (fast/admission.py: the members' decodes, then
        each newcomer's whole fresh prompt, `chunks` of (request, tokens)) starting
        now writes to the listener, as the stepped start would: its snapshot
        (`counts`: `_counts`) and its dispatch, the rows in plan order. A line
        listener gets both lines as one text (`counted_text`), the members' rows
        made from their ids, each prompt's row from its parts (`prompt_row_text`).
        Speed: these 18,253 dispatches of the Azure trace with `--events` went
        to the stepped `_start` and `_complete` (a record a row, then the line):
        5.2% fewer instructions on its first 2,000 requests, 0.906x the CPU on
        the full trace (benchmarks/README.md, "ninth steps")."""
        emit = self._emit
        now = self.now
        if isinstance(emit, LineListener):
            rows = emit.members_rows(decodes)
            for req, n in chunks:
                row = prompt_row_text(req.rid, n, req.token_ids(0, n))
                rows = f"{rows},{row}" if rows else row
            emit.write_text(counted_text(now, counts, rows, tokens, done, emit.policy,
                                         emit.clock))
            return
        emit(Snapshot(now, *counts))
        emit(Dispatch(now, tuple([(req.rid, DECODE, 1, True, None) for req in decodes]
                                 + [(req.rid, PREFILL, n, True, req.token_ids(0, n))
                                    for req, n in chunks]), tokens, done))

    def decodes_opening(self, decodes: list[Request]) -> tuple[int, list[Request]]:
        """For a policy's `admit_arrivals` (vllm): the blocks the next decode of each
        of `decodes` (every running request) takes, and those of them, written
        rather than counted, whose decode opens a block, to be grown by the policy;
        the cohort's members open theirs by count when the dispatch starts."""
        allocator = self.allocator
        size = allocator.block_size
        cohort = self._cohort
        members = cohort.members if cohort is not None else ()
        if members:
            inside = sum(map(members.__contains__, decodes))
            if inside != len(members):
                cohort.settle_all()  # (a member not among them: never, as the engine asks)
                members = ()
            elif inside == len(decodes):
                # Every decode a member (nearly always: an arrival into a counted
                # stretch): none is written, their blocks are the cohort's. Speed: no
                # Python pass over the rows (about 61 a dispatch on the generated
                # traces; callgrind in benchmarks/README.md, "seventh steps").
                return cohort.opening(), []
        opening = [req for req in decodes if req not in members and not req.resident % size]
        to_grow = allocator.blocks_to_grow
        blocks = sum(to_grow(req.rid, req.resident + 1) for req in opening)
        return (blocks + cohort.opening() if members else blocks), opening

    def complete_now(self) -> list[Request] | None:
        """E1 of the dispatch in flight, completing now (`complete_due`'s): by the
        counters (`complete_counted`) when it ran cohort members only, from its
        shape when it admitted fresh prompts beside them (`complete_admission`),
        else row by row (`_complete`). Speed: the loop's own completions of
        members only (a step's plan of every member, `_start_counted`'s: the
        14,720 decode steps behind a blocked head of 100,000 generated requests)
        went to `_complete` (benchmarks/README.md, "nineteenth steps", arr20).
        Returns the requests that finished, in row order (None from
        `complete_admission`)."""
        flight = self.flight
        if flight.rows is None and flight.members and not flight.decoders:
            return self.complete_counted(flight)
        if type(flight) is AdmissionFlight:
            complete_admission(self, flight)  # (members and fresh prompts: admission.py)
            return None
        ended = self._complete(flight)
        self.flight = None
        return ended

    def complete_counted(self, flight: InFlight) -> list[Request]:
        """E1 for a dispatch of counted decodes only (`_start_counted`'s), completing
        now: `_complete` without its row work (no written row emits, none joins),
        for the boundaries a stretch carried on takes (fast/through.py). Every
        member emits (its previous output came when the dispatch started), those at
        their last output finish, in row order.

        Speed: about 43,000 such completions on the Azure conversation trace under
        `continuous`, each four calls shorter (see benchmarks/README.md, "Issue 26,
        fourth steps"). Returns the members that finished, in row order."""
        now = self.now
        ended = self._cohort.complete(now)
        if ended:
            if len(ended) > 1:
                ended.sort(key=flight.requests.index)
            self._finish_ended(ended, flight)
        self.ledger.completed_since(now, flight.exact, flight.outputs, flight.start,
                                    flight.members)
        self.flight = None
        return ended

    def _start_members(self, plan: Plan, cohort: Cohort
                       ) -> tuple[list[Request] | None, Any, int, int]:
        """The cohort's part of a dispatch start: members the plan runs as plain
        decodes stay (their blocks opened, their rows counted); members it does
        not run so are settled and leave. Returns every row's request, the rows
        left to write one by one, the members run, and their summed context."""
        if cohort.last_done != self.now:
            # An idle gap (no built-in policy leaves one while members decode): their
            # last output is not this start, so they are written and leave.
            cohort.settle_all()
            return None, plan, 0, 0
        # Whether each row's request is a member: one look-up per row, in C, and the
        # members counted by identity with True (`count(None)` over the members'
        # entries compared each tuple with None: 236,000 full comparisons on the first
        # 20,000 generated requests, 0.6% of their instructions; benchmarks/README.md,
        # "twelfth steps ... mil8").
        member = cohort.members.__contains__
        if type(plan) is DecodesFirst:
            # The policy's own list of decodes.
            decoders = plan.decoders
            inside = list(map(member, decoders))
            members = inside.count(True)
            if members != len(cohort.members):
                kept = set(compress(decoders, inside))
                for req in list(cohort.members):
                    if req not in kept:
                        cohort.settle(req)
            chunks = plan.rest
            requests = decoders if not chunks else decoders + list(map(_first, chunks))
            if members < len(decoders):
                others = [req for req, m in zip(decoders, inside) if not m]
                rest = list(zip(others, repeat(1)))
                rest += chunks
            else:
                rest = chunks
        else:
            requests = list(map(_first, plan))
            inside = list(map(member, requests))
            members = inside.count(True)
            mine = [row for row, m in zip(plan, inside) if m]
            if members != len(cohort.members) or sum(map(_second, mine)) != members:
                # Members left out of the plan, or given other than one row: settled.
                kept = {req for req, tokens in mine if tokens == 1}
                for req in list(cohort.members):
                    if req not in kept:
                        cohort.settle(req)
                members = len(kept)
            rest = [row for row in plan if row[0] not in cohort.members]
        if not members:
            return None, plan, 0, 0
        return requests, rest, members, cohort.start()

    def _complete_members(self, flight: InFlight, cohort: Cohort, ended: list[Request],
                          since: dict[int, int]) -> list[Request]:
        """The cohort's part of a completion: members emit (their previous output
        came when the dispatch started), those at their last output leave, and the
        plain decodes of this dispatch that go on join. Returns every request that
        finished, in row order."""
        if flight.members:
            since[flight.start] = since.get(flight.start, 0) + flight.members
            done = cohort.complete(self.now)
            if done:
                order = flight.requests.index
                ended = sorted(ended + done, key=order)
        else:
            cohort.completed += 1
            cohort.last_done = self.now
        if flight.rows is None:
            joining = flight.decoders
        else:  # the rows that were plain decodes: steady rows that emit
            joining = [req for req, emits in flight.rows if emits]
        if joining:
            finished = set(ended) if ended else ()
            # (Its blocks are granted by count from its credit, when the policy
            # reserves; vllm's are plain blocks.)
            credit = self.allocator.credit if self.allocator.counted_credited else None
            for req in joining:
                if (req not in finished and req.resident >= req.high_water
                        # Request.plain_decode, inlined:
                        and req.resident >= req.prompt_tokens and req.resident >= req.restore
                        and req.last_output_at == self.now
                        # (a counted row's record names no token ids)
                        and (req.output_token_ids is None or self._emit is None)
                        and (credit is None or credit(req.rid))):
                    cohort.join(req)
        return ended

