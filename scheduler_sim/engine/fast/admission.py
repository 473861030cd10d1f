"""An admission's dispatch: the decode cohort's members beside the newcomers' whole prompts.

When requests arrive into a stretch of counted decodes and the policy admits
them whole (arrivals.py's `_admit`, `Policy.admit_arrivals`), the dispatch
that follows is always of one shape: every running request's decode, each a
counted member of the cohort, then each newcomer's whole prompt as one chunk
(a fresh request: nothing written, nothing to restore). The generic stepped
pipeline (`Engine._start`, dispatching.py) found that out again row by row:
the members looked up one by one (`_start_members`), then for each prompt the
row loop's tests of status, phase, emission and replay; and its completion
(`_complete`) listed the emitting rows, ran `emit_outputs` over them and the
cohort's part (`_complete_members`) with its checks of who may join.

Here that dispatch is started and completed from what the shape already
tells: the members' part is the cohort's aggregates (`Cohort.start`: the
blocks their rows open, their summed context), each prompt adds its tokens,
its blocks (`grow`) and its chunk for the cost model; at the completion
every member emits by the counters (`Cohort.complete`), each newcomer emits
its first output and joins the cohort (it holds its credit: the policy just
gave it), and the newcomers that end with that output finish. The same
statistics, the same calls to the allocator and the ledger in the same
order, so the same floats: the results are the stepped pipeline's, field for
field (tests/test_admission_dispatch.py compares them on random workloads,
and counts how often these paths are taken).

Only where nothing else could differ: no audit and no plug-in policy (their
duplicate check), no host memory, a cohort whose members are exactly the
decodes and whose last completion is now; with an event listener, no newcomer
whose outputs are token ids (the stepped completion does not let it join) and
no data-parallel lockstep, and the snapshot and dispatch the stepped path
writes are written from the shape too (`Counting._write_admission`).
Anything else goes to `Engine._start`.
"""
from __future__ import annotations

from ...records.states import RequestStatus
from ..dispatching import InFlight

__all__ = ["AdmissionFlight", "complete_admission", "start_admission"]

RUNNING = RequestStatus.RUNNING


class AdmissionFlight(InFlight):
    """An `InFlight` started by `start_admission`: the cohort's members (every
    request of `requests` but the last `len(rows)`), then each newcomer's whole
    prompt, a row `(request, True)` each (a whole prompt emits its first output).
    Any completion of an `InFlight` completes it (`Engine._complete`);
    `complete_admission` is the short one."""

    __slots__ = ()


def start_admission(engine, decodes: list, chunks: list, cohort,
                    known: bool = False) -> InFlight | None:
    """Start the dispatch of `decodes` (the running requests, in the order the
    policy repeats them) and of `chunks` ((request, tokens): the requests it just
    admitted) if it has the shape of the module (each member decodes, each
    newcomer's prompt is whole and fresh); None, having changed nothing, if not
    (the caller starts it by `Engine._start`). `known`: the caller knows every
    one of `decodes` is a member (the survivors of a counted dispatch)."""
    if engine._audit or engine._plugin or cohort is None:
        return None
    listening = engine._emit is not None
    if listening and engine.link.lockstep_step is not None:
        return None
    members = cohort.members
    n = len(decodes)
    now = engine.now
    # (Distinct requests, as many as the members, each a member: the members.)
    if (not n or n != len(members) or cohort.last_done != now
            or not known and sum(map(members.__contains__, decodes)) != n):
        return None
    allocator = engine.allocator
    if allocator.host is not None:
        return None
    options = engine.options
    if n + len(chunks) > options.max_rows:
        return None  # (`_start` raises it)
    prompt = 0
    for req, tokens in chunks:
        # A fresh request's whole prompt (Request.phase is PREFILL, the chunk
        # emits, and `record_rows` finds nothing replayed).
        if (req.status is not RUNNING or req.high_water or tokens != req.prompt_tokens
                or tokens < 1 or req.block_keys is not None
                or listening and req.output_token_ids is not None):
            return None
        prompt += tokens
    total = prompt + n
    if total > options.token_budget:
        return None  # (`_start` raises it)
    # Speed: what `_start` did for this dispatch row by row (the members looked up,
    # each prompt's phase, emission and replay derived), from the shape instead
    # (18,253 of these on the Azure conversation trace under `continuous`; with
    # `complete_admission`, 2.5% fewer instructions on its first 2,000 requests,
    # about 10% on 20,000 generated ones with the steps after it:
    # benchmarks/README.md, "seventh steps").
    # (a listener's snapshot: the counts before the dispatch's blocks, as the step's)
    counts = engine._counts(decodes) if listening else None
    contexts = cohort.start()  # the members' blocks opened, by count (as `_start`)
    grow = allocator.grow
    costed = []  # (tokens, context before): each prompt's, for the cost model
    rows = []
    requests = decodes.copy()  # (the newcomers appended here: no comprehension's frame)
    for req, tokens in chunks:
        costed.append((tokens, 0))
        grow(req.rid, tokens)
        # Request.record_rows of a fresh request's whole prompt: all useful.
        req.useful_rows += tokens
        req.resident = req.high_water = tokens
        rows.append((req, True))
        requests.append(req)
    engine.livelock.idle = 0  # (useful rows: LivelockWatch.reset, inline)
    done, exact = engine.ledger.dispatch(now, n + len(rows), total, prompt, n, 0, 0,
                                         costed, contexts)
    if listening:
        engine._write_admission(counts, decodes, chunks, total, done)
    return AdmissionFlight(rows, now, done, exact, False, len(rows) + n, None, n, requests)


def complete_admission(engine, flight: AdmissionFlight) -> None:
    """E1 of an `AdmissionFlight` completing now: what `Engine._complete` does for
    it (see the module), without listing its rows again. (Speed: measured with
    `start_admission`'s.)"""
    now = engine.now
    cohort = engine._cohort
    n = flight.members
    newcomers = flight.rows
    # Each newcomer's first output (`emit_outputs`: no gap before a first output).
    ended = []
    for req, _ in newcomers:
        req.outputs = 1
        req.first_token_at = now
        req.last_output_at = now
        if req.output_tokens == 1:
            ended.append(req)
    done = cohort.complete(now)
    credited = engine.allocator.counted_credited
    for req, _ in newcomers:
        # (`_complete_members`' test, of which a fresh prompt just written meets the
        # rest: its rows are its high water, it decodes next, it emitted now. Its
        # credit is read off the request, not asked of the allocator: `Lifecycle.admit`
        # gave both the same and every transition that releases one zeroes
        # `Request.credit`. Speed: a call fewer a newcomer; with four others, 0.990x the
        # instructions of the Azure trace under `continuous`: benchmarks/README.md,
        # "twenty-second steps", az22.)
        if req.output_tokens != 1 and (not credited or req.credit):
            cohort.join(req)
    if done:
        ended = done + ended
        if len(ended) > 1:
            ended.sort(key=flight.requests.index)
    if ended:
        engine._finish_ended(ended, flight)
    # (Every member's previous output came at the start; the newcomers' were first.)
    engine.ledger.completed_since(now, flight.exact, flight.outputs, flight.start, n)
    engine.flight = None
