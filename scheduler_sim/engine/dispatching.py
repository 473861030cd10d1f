"""The stepped dispatch: a plan becomes rows, blocks, a record and a flight, and a
completion records its outputs.

`Dispatching` is the part of `Engine` (core.py) that starts a policy's plan
(`_start`: checks the budgets, derives each row's phase and emission,
allocates blocks, writes the rows, asks the ledger for the dispatch's
statistics and timing) and completes it (`_complete`: outputs, finished
requests, the ledger's gaps), and feeds the livelock watch. A dispatch in
progress is an `InFlight` (flight.py). The decode cohort's counted rows are
fast/counted.py's, folded stretches fast/folding.py's.
"""
from __future__ import annotations

from operator import attrgetter

from ..policies import PADDING, Plan
from ..policies.base import DecodesFirst
from ..records.errors import InvariantError
from ..records.event_lines import LineListener
from ..records.events import Dispatch, Finished
from ..records.states import RequestStatus
from ..requests.request import DECODE, PREFILL, PRODUCER, Request, emit_outputs, write_decodes
from .flight import InFlight

__all__ = ["Dispatching", "InFlight"]

RUNNING = RequestStatus.RUNNING
_resident = attrgetter("resident")


class Dispatching:
    """Starting and completing dispatches of an `Engine` (see the module)."""

    # --- dispatches -------------------------------------------------------------------

    def _state(self, plan: Plan | tuple = ()) -> dict[str, int]:
        """Block counts now; with `plan`, as they were before the plan's rows got
        their blocks (an on-demand policy allocates while it schedules)."""
        a = self.allocator
        pending = pending_cached = 0
        if plan and a.step_growth:
            # Blocks the policy allocated in this step are the plan's: before the
            # dispatch they were free (and, if evicted, cached).
            pending = sum(a.step_growth.values())
            pending_cached = sum(a.step_evictions.values())
        state = {"waiting": self.policy.waiting_count, "running": self.policy.running_count,
                 "reserved": a.reserved, "allocated": a.held - pending, "draining": a.draining,
                 "free": a.free + pending}
        if a.cache is not None:
            state["cached"] = a.cached_free + pending_cached
        return state

    def _start(self, plan: Plan) -> InFlight:
        """Check the plan, allocate its blocks, write its rows (dispatch start)."""
        now = self.now
        options = self.options
        size = (len(plan) if type(plan) is not DecodesFirst
                else len(plan.decoders) + len(plan.rest))
        if size > options.max_rows:
            raise InvariantError(f"dispatch rows({size}) <= max_rows({options.max_rows}) "
                                 "is false", now)
        allocator = self.allocator
        grow = allocator.grow
        open_block = allocator.open_block
        keys_decoded = allocator.keys_decoded  # (False: SGLang's tree keys them at the end)
        size = allocator.block_size  # from here on, the block size
        edge = size - 1
        # (request, emits) in plan order, built only once a row is not a plain
        # decode: a dispatch of decodes is its list of requests (`decoders`).
        rows: list[tuple[Request, bool]] | None = None
        add_row = None
        total = prompt = decode = recompute = 0
        records = [] if self._emit is not None else None
        add_record = records.append if records is not None else None
        chunks: list[tuple[int, int]] = []  # (tokens, context before), for the cost model
        contexts = 0  # summed context of the decode and padding rows
        padding = 0
        useful = 0
        emitting = 0  # rows of chunks that emit (every decode row does)
        decoders: list[Request] = []  # their rows are written together, below
        add_decoder = decoders.append
        members = 0
        requests = None
        rest = plan
        cohort = self._cohort
        if cohort is not None:
            if cohort.members:
                requests, rest, members, contexts = self._start_members(plan, cohort)
                if not rest and members:
                    return self._start_counted(requests, members, contexts)
        elif type(plan) is DecodesFirst and plan.opened and records is None and not self._audit:
            # Plain decodes whose blocks the policy opened and keyed (vllm's run):
            # their contexts summed, no row walked (planned only under prefix caching,
            # where no cohort counts decoders; an audited run walks and checks them).
            # Speed: 24.2 rows a step replaying the Mooncake trace; 0.975x the
            # instructions on its first 2,000 requests (benchmarks/README.md,
            # "nineteenth steps", hd20).
            decoders = plan.decoders
            add_decoder = decoders.append
            contexts = sum(map(_resident, decoders))
            rest = plan.rest
        for req, tokens in rest:
            if req.status is not RUNNING:
                if tokens == PADDING and req.status.is_finished \
                        and self.policy.keeps_blocks_after_finish:
                    padding += 1
                    total += 1
                    if add_record is not None:
                        add_record((req.rid, "padding", 1, False, None))
                    continue
                raise InvariantError(f"request {req.rid!r} dispatched while "
                                     f"{req.status.label} with {tokens} tokens", now)
            r = req.resident
            if tokens == 1 and r >= req.prompt_tokens and r >= req.restore:
                # The hot path (Request.plain_decode, inlined): a decode writes one
                # row and emits one output. (Keep it short: past 255 code units its
                # `if`'s jumps take an EXTENDED_ARG, and CPython 3.11 no longer
                # specialises the three comparisons above: `write_decodes` inlined
                # here cost the Mooncake replay under sglang 1.004x the instructions.)
                contexts += r
                if add_record is not None:
                    add_record((req.rid, DECODE, 1, True, None if req.output_token_ids is None
                                else req.token_ids(r, r + 1)))
                m = r % size  # (its offset in its block, read once: `edge` fills it)
                if not m:
                    open_block(req.rid, r + 1)
                if (keys_decoded and m == edge and req.block_keys is not None
                        and (r + 1) // size > req.block_keys.registered):
                    # (Not when the policy keyed the block as it scheduled it, as vllm
                    # does: the allocator's own first test, asked before the call.)
                    allocator.register_decoded(req.rid, req.block_keys, r + 1)
                if add_row is not None:
                    add_row((req, True))
                add_decoder(req)
                continue
            if rows is None:
                rows = [(r, True) for r in decoders]
                add_row = rows.append
            remaining = req.phase_remaining
            if not 1 <= tokens <= remaining:
                raise InvariantError(f"request {req.rid!r}: 1 <= tokens({tokens}) <= "
                                     f"phase remaining({remaining}) is false", now)
            phase = req.phase
            emits = req.chunk_emits(tokens)
            chunks.append((tokens, r))
            if add_record is not None:
                add_record((req.rid, phase, tokens, emits, req.token_ids(r, r + tokens)))
            grow(req.rid, r + tokens)
            useful += req.record_rows(tokens)
            if req.block_keys is not None:
                if phase is DECODE:
                    allocator.register_decoded(req.rid, req.block_keys, req.resident)
                else:
                    allocator.register_full_blocks(req.rid, req.block_keys, req.resident)
            add_row((req, emits))
            if emits:
                emitting += 1
            if phase is DECODE:
                decode += tokens  # added to the total below, with the fast path's
            else:
                total += tokens
                if phase is PREFILL:
                    prompt += tokens
                else:
                    recompute += tokens
        if decoders:
            useful += write_decodes(decoders)
            decode += len(decoders)
        if members:
            useful += members
            decode += members
        total += decode
        if total > options.token_budget:
            raise InvariantError(f"dispatch tokens({total}) <= token_budget"
                                 f"({options.token_budget}) is false", now)
        n_rows = (len(decoders) if rows is None else len(rows)) + members
        if (self._audit or self._plugin) and len(
                set(map(id, decoders)) if rows is None else {id(r) for r, _ in rows}
        ) != n_rows - members:
            raise InvariantError("each request appears at most once in a dispatch is false",
                                 now)
        if useful or not total:
            self.livelock.idle = 0  # (LivelockWatch.reset, inline)
        else:
            self.livelock.replayed(total, self.roster.requests.values())
        done, exact = self.ledger.dispatch(now, n_rows, total, prompt, decode, recompute,
                                           padding, chunks, contexts)
        host = allocator.host
        if host is not None:
            if host.batch_until is not None:
                done, exact = self._wait_for_batch_loads(done, exact)
            if host.pending:
                self._issue_stores(exact)  # write-through when this dispatch ends
        flight = InFlight(rows, now, done, exact,
                           decode == total and not padding and total > 0,
                           emitting + len(decoders) + members,
                           decoders if rows is None else None, members, requests)
        if records is not None:
            if members:  # the counted members' rows too, every row in plan order
                records = _in_plan_order(records, requests)
            if self.link.lockstep_step is None:
                self._emit(Dispatch(now, tuple(records), total, done))
            else:  # the step's end is known once every rank has planned
                flight.unsent = (tuple(records), total)
        return flight

    def end_dispatch_at(self, done: int, exact: float) -> None:
        """Data-parallel lockstep (fleet/lockstep.py): the dispatch just started
        completes with the step of every rank, at step `done` (exact: `exact`)."""
        flight = self.flight
        flight.done, flight.exact = done, exact
        if flight.unsent is not None:
            rows, tokens = flight.unsent
            flight.unsent = None
            self._emit(Dispatch(flight.start, rows, tokens, done))

    def _complete(self, flight: InFlight) -> list[Request]:
        """E1: record the outputs; finish requests that produced their last one
        (returned, in row order)."""
        now = self.now
        # Gaps since each request's previous output (ITL), counted by the time of
        # that output: most rows had theirs when this dispatch started.
        since: dict[int, int] = {}  # previous output time -> outputs since then
        decoders = flight.decoders
        if decoders is None:  # chunks among the rows: only those that emit
            decoders = [req for req, emits in flight.rows if emits]
        ended = emit_outputs(decoders, now, flight.start, since)
        cohort = self._cohort
        if cohort is not None:
            ended = self._complete_members(flight, cohort, ended, since)
        if ended:
            self._finish_ended(ended, flight)
        self.ledger.completed(now, flight.exact, flight.outputs, since)
        return ended

    def _finish_ended(self, ended: list[Request], flight: InFlight) -> None:
        """E1's end for the requests that produced their last output in `flight`,
        completing now, in row order: they finish, leave the policy and their
        blocks."""
        now = self.now
        keeps = self.policy.keeps_blocks_after_finish
        allocator = self.allocator
        host = allocator.host
        if (not keeps and host is None and self.link.hooks is None
                and self.clients is None and not self.release_delay and allocator.frees_plainly):
            # Nothing keyed, shared or pinned, nothing drains (a listener told): each
            # request's end as the loop below does it, with `_end`, `_record_end` and
            # `free_request` inline (kv/freeing.py's `free_plain`). Speed: three
            # calls fewer a request that ends (benchmarks/README.md, "seventeenth
            # steps ... mil13"; with a listener too, "twenty-second steps", ev23).
            remove = self.policy.remove
            free = allocator.free_plain
            roster = self.roster
            steady = self.steadiness
            request_ended = self.ledger.stats.request_ended
            emit = self._emit
            # (a line listener's lines without the records: `LineListener.finished`)
            finished = None if emit is None or not isinstance(emit, LineListener) else emit.finished
            for req in ended:
                rows = req.resident  # (for a cohort member's counted blocks; `finish` zeroes it)
                req.finish(now)
                remove(req)
                free(req.rid, rows)
                roster.live -= 1  # (`_end`)
                steady.changes += 1  # (`Steadiness.changed`)
                request_ended(req)  # (`_record_end`: no host memory)
                roster.ended(req)
                if emit is not None:
                    if finished is not None:
                        finished(now, req.rid, req.status.label)
                    else:
                        emit(Finished(now, req.rid, req.status.label))
            return
        for req in ended:  # their last output
            if req.block_keys is not None and not keeps:
                # What decoding left unkeyed (SGLang's tree keys it now).
                self.allocator.register_full_blocks(req.rid, req.block_keys, req.resident)
            if host is not None and host.write_through and req.block_keys is not None:
                self._store_decoded(req, flight.exact)  # its blocks to host memory
            rows = req.resident  # (as above)
            req.finish(now)
            self.policy.remove(req)
            handed = req.remote == PRODUCER and self.link.hooks is not None
            if handed:
                self.link.hooks.prefilled(self, req)  # pins its blocks for the copy
            if not keeps:  # (`_release_request`, inline: once a request)
                self.allocator.free_request(req.rid, now, self.release_delay, rows, ended=True)
            self._end(req)
            if self._emit is not None and not handed:
                self._emit(Finished(now, req.rid, req.status.label))


def _in_plan_order(records: list[tuple], requests: list[Request]) -> list[tuple]:
    """A dispatch's row records, `records` (of its written rows) with a plain
    decode's for each counted member, in the order of `requests` (every row's)."""
    written = {record[0]: record for record in records}
    return [written.get(req.rid) or (req.rid, DECODE, 1, True, None) for req in requests]
