"""One request: what the trace asked for, how far it has got, and what it holds.

Three groups of fields are kept apart on purpose (L2):
- the spec (prompt P, outputs N, max_tokens M, priority, ...), never changed;
- logical progress: `outputs`, the number of output tokens the client has seen;
- physical residency: `resident`, the rows whose KV is held now, and `credit`,
  the blocks reserved for it. Preemption wipes residency and keeps progress.

After k outputs the committed rows are P + k - 1: output k is the pending
token, written by the next dispatch. A request's next work is therefore one
of three phases: `recompute` (rebuilding rows lost to a preemption),
`prefill` (prompt rows never written) or `decode` (one row, one output).

State changes go only through the named transitions below; each asserts the
state it starts from.
"""
from __future__ import annotations

from enum import IntEnum

from ..records.errors import InvariantError
from ..records.states import RequestStatus

__all__ = ["Request", "SealedRequest", "seal", "set_outputs", "PREFILL", "DECODE", "RECOMPUTE", "write_decodes", "emit_outputs",
           "catch_up", "RemoteKv", "PRODUCER", "HANDED_OFF", "REMOTE", "PARKING",
           "LOADING", "LOADED"]

PREFILL = "prefill"
DECODE = "decode"
RECOMPUTE = "recompute"

class RemoteKv(IntEnum):
    """`Request.remote`: a request's part in prefill/decode disaggregation
    (fleet/disagg.py). On a prefill replica: PRODUCER, its one (hidden) output
    ends its run there, and HANDED_OFF once it has. On a decode replica: REMOTE
    until an admission takes blocks for its prompt, PARKING until the end of that
    step, LOADING while the prompt's KV is copied, LOADED waiting with the rows
    resident; NONE again once admitted with them. NONE (0, false) everywhere
    else."""

    NONE = 0
    PRODUCER = 1
    HANDED_OFF = 2
    REMOTE = 3
    PARKING = 4
    LOADING = 5
    LOADED = 6


PRODUCER = RemoteKv.PRODUCER
HANDED_OFF = RemoteKv.HANDED_OFF
REMOTE = RemoteKv.REMOTE
PARKING = RemoteKv.PARKING
LOADING = RemoteKv.LOADING
LOADED = RemoteKv.LOADED

W = RequestStatus
# The states as module constants: an enum member read off its class costs about
# 0.2 us against 0.04 for a global (timeit, CPython 3.11), and the transitions every
# request makes (made, admitted, finished) read three to five of them.
WAITING = W.WAITING
RUNNING = W.RUNNING
PREEMPTED = W.PREEMPTED
STOPPED = W.FINISHED_STOPPED
CAPPED = W.FINISHED_LENGTH_CAPPED
NO_REMOTE = RemoteKv.NONE


class Request:
    """A request of the trace and its simulated life."""

    __slots__ = (
        "rid", "index", "arrival", "prompt_tokens", "output_tokens", "max_tokens",
        "priority", "deadline", "prompt_token_ids", "output_token_ids", "block_hashes",
        "status", "outputs", "resident", "restore", "high_water", "emit_on_restore",
        "credit", "useful_rows", "replay_rows", "preemptions", "admitted_at",
        "first_token_at", "finished_at", "admit_seq", "cached_tokens", "block_keys", "wait_since",
        "sent", "last_output_at", "replica", "remote", "transfer_time",
    )

    def __init__(self, rid: str, index: int, arrival: int, prompt_tokens: int,
                 output_tokens: int, max_tokens: int | None = None, priority: int = 0,
                 deadline: int | None = None, prompt_token_ids: list[int] | None = None,
                 output_token_ids: list[int] | None = None,
                 block_hashes: list | None = None) -> None:
        self.replica: int | None = None  # the fleet replica serving it (fleet/)
        self.rid = rid
        self.index = index  # position in the trace: the final tie-breaker everywhere
        self.arrival = arrival
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.max_tokens = output_tokens if max_tokens is None else max_tokens
        self.priority = priority
        self.deadline = deadline
        self.prompt_token_ids = prompt_token_ids
        self.output_token_ids = output_token_ids
        self.block_hashes = block_hashes
        self.status = WAITING
        # logical progress
        self.outputs = 0
        # physical residency
        self.resident = 0
        self.restore = 0          # rows recompute must rebuild before new work
        self.high_water = 0       # most rows ever written: rewriting below it is replay
        self.emit_on_restore = False  # folded recompute (vllm): the last restored row emits
        self.credit = 0
        # accounting
        self.useful_rows = 0
        self.replay_rows = 0
        self.preemptions = 0
        self.admitted_at: int | None = None
        self.first_token_at: int | None = None
        self.finished_at: int | None = None
        self.admit_seq = -1       # admission order, for round-robin rotation
        self.cached_tokens = 0    # prompt/sequence tokens found in the prefix cache, summed
        self.block_keys = None    # prefix-cache keys of its blocks (with prefix caching)
        self.wait_since = arrival  # when it last entered the waiting queue
        self.sent: int | None = None  # when the server received it (after a client slot)
        self.last_output_at = 0       # completion time of its latest output (for ITL)
        self.remote = NO_REMOTE       # its part in disaggregation
        self.transfer_time: int | None = None  # how long its prompt's KV took to copy

    def __repr__(self) -> str:
        return (f"Request({self.rid!r}, {self.status.label}, outputs={self.outputs}/"
                f"{self.output_tokens}, resident={self.resident})")

    # --- derived views -------------------------------------------------------

    @property
    def committed_rows(self) -> int:
        """Rows that belong in KV given the outputs so far: P + k - 1 after k outputs."""
        if self.outputs == 0:
            return min(self.high_water, self.prompt_tokens)
        return self.prompt_tokens + self.outputs - 1

    @property
    def phase(self) -> str:
        """What the next dispatch row of this request does: `recompute` while it
        rewrites rows it had written before, `prefill` for prompt rows never
        written, `decode` after the prompt."""
        r = self.resident
        if r < self.restore and r < self.high_water:
            return RECOMPUTE
        if r < self.prompt_tokens:
            return PREFILL
        return DECODE

    @property
    def plain_decode(self) -> bool:
        """Whether the next row is a plain decode: the prompt and every row to
        restore are resident, so the row writes one token and emits one output.
        Stricter than `phase == DECODE`, which also holds for the last row a
        recompute restores (the row of the last sampled token, never written),
        when a dispatch may still write several rows. The engine's and the
        policies' hot loops spell this test out (a property call costs about
        40 ns more per row, measured with timeit: about 2% of an Azure replay's
        stepped rows) and say so where they do."""
        r = self.resident
        return r >= self.prompt_tokens and r >= self.restore

    @property
    def phase_remaining(self) -> int:
        """Tokens left in the current phase (a decode is always one token)."""
        if self.resident < self.restore:
            return self.restore - self.resident
        if self.resident < self.prompt_tokens:
            return self.prompt_tokens - self.resident
        return 1

    def token_ids(self, start: int, end: int) -> list[int] | None:
        """The token ids of rows [start, end), when the trace gave them (else None).

        Row P + j holds output j + 1, so the rows of a request are its prompt
        followed by all its outputs but the last.
        """
        p = self.prompt_tokens
        prompt = self.prompt_token_ids
        outputs = self.output_token_ids
        if (start < p and prompt is None) or (end > p and outputs is None):
            return None
        ids = list(prompt[start:min(end, p)]) if start < p else []
        if end > p:
            ids.extend(outputs[max(start, p) - p:end - p])
        return ids

    def chunk_emits(self, tokens: int) -> bool:
        """Whether a chunk of `tokens` rows starting at `resident` produces an output."""
        end = self.resident + tokens
        if self.resident < self.restore:
            return self.emit_on_restore and end == self.restore
        if self.resident < self.prompt_tokens:
            return end == self.prompt_tokens
        return True

    # --- named transitions ---------------------------------------------------

    def _expect(self, action: str, *allowed: RequestStatus) -> None:
        if self.status not in allowed:
            names = " or ".join(s.label for s in allowed)
            raise InvariantError(
                f"request {self.rid!r}: cannot {action} from {self.status.label} "
                f"(allowed from {names})")

    def admit(self, now: int, seq: int, credit: int) -> None:
        """WAITING or PREEMPTED -> RUNNING, holding `credit` reserved blocks."""
        status = self.status
        if status is not WAITING and status is not PREEMPTED:  # (`_expect` words it)
            self._expect("admit", WAITING, PREEMPTED)
        _become(self, RUNNING)
        self.credit = credit
        self.admit_seq = seq
        if self.admitted_at is None:
            self.admitted_at = now

    def record_rows(self, tokens: int) -> int:
        """Account `tokens` rows written at `resident`: below the high-water mark
        they are replayed work, above it useful work. Returns the useful rows."""
        start = self.resident
        end = start + tokens
        useful = tokens
        if start < self.high_water:
            replay = min(end, self.high_water) - start
            self.replay_rows += replay
            useful = tokens - replay
        self.useful_rows += useful
        if end > self.high_water:
            self.high_water = end
        self.resident = end
        return useful

    def record_cached(self, tokens: int) -> None:
        """Account `tokens` leading rows found in the prefix cache at admission.

        They are not written, so they are neither computed nor replayed; rows
        above the high-water mark still count as useful (the request holds
        them for the first time), which keeps useful rows at P + N - 1.
        """
        self._hold(self.resident + tokens)
        self.cached_tokens += tokens

    def record_loaded(self, tokens: int) -> None:
        """Account `tokens` rows after `resident` copied in from host memory with the
        batch it joins: resident, not computed, never replayed (as `load_remote_kv`)."""
        self._hold(self.resident + tokens)

    def _hold(self, end: int) -> None:
        """Rows up to `end` are resident without being written: those above the
        high-water mark count as useful (held for the first time)."""
        if end > self.high_water:
            self.useful_rows += end - self.high_water
            self.high_water = end
        self.resident = end

    def emit(self, now: int) -> bool:
        """Record one output at completion time `now`; True when it was the last one.
        (`emit_outputs` does the same for a whole dispatch.)"""
        return bool(emit_outputs([self], now, now, {}))

    def finish(self, now: int) -> None:
        """RUNNING -> FINISHED_STOPPED (N < M) or FINISHED_LENGTH_CAPPED (N == M)."""
        if self.status is not RUNNING:
            self._expect("finish", RUNNING)
        if self.outputs != self.output_tokens:
            raise InvariantError(
                f"request {self.rid!r}: finish with outputs({self.outputs}) != "
                f"output_tokens({self.output_tokens})")
        _become(self, CAPPED if self.output_tokens == self.max_tokens else STOPPED)
        self.finished_at, self.block_keys = now, None  # (`_end`, inline: a call fewer a
        self.credit = self.resident = 0  # request; benchmarks/README.md, "... az14")

    def preempt(self, include_pending: bool = False) -> None:
        """RUNNING -> PREEMPTED: drop residency, keep the prompt, outputs and index.

        With `include_pending` (vllm, sglang) the pass after resuming covers the
        prompt and every output so far, the pending one included (P + k rows),
        and its last row emits the next output, as a fresh prefill would; its
        chunks may run from rewritten rows into never-written ones (a prefill
        cut short), and each chunk is labelled by where it starts (`phase`).
        Otherwise recompute restores exactly the committed rows (P + k - 1, or
        the prompt rows written so far) and emits nothing.
        """
        self._expect("preempt", W.RUNNING)
        committed = self.committed_rows
        if include_pending:
            self.restore = self.prompt_tokens + self.outputs
            self.emit_on_restore = True
        else:
            self.restore = committed
            self.emit_on_restore = False
        self.resident = 0
        self.credit = 0
        self.preemptions += 1
        _become(self, W.PREEMPTED)

    def wait_for_remote_kv(self) -> None:
        """RUNNING, WAITING or PREEMPTED -> WAITING_FOR_REMOTE_KV: admitted on a decode
        replica, or given blocks for KV loaded from host memory, it holds the blocks
        the KV is being copied into and is not scheduled."""
        self._expect("wait for remote KV", W.RUNNING, W.WAITING, W.PREEMPTED)
        _become(self, W.WAITING_FOR_REMOTE_KV)

    def load_remote_kv(self, rows: int, resumed: bool = False) -> None:
        """WAITING_FOR_REMOTE_KV -> WAITING (PREEMPTED when `resumed`: a preempted
        request's KV came back from host memory): the copy landed; `rows` rows are
        resident (loaded, not computed: useful rows the first time, never replayed)."""
        self._expect("load remote KV", W.WAITING_FOR_REMOTE_KV)
        _become(self, W.PREEMPTED if resumed else W.WAITING)
        self._hold(rows)
        self.credit = 0

    def cancel(self, now: int) -> RequestStatus:
        """Any live state -> FINISHED_ABORTED; returns the state it was in."""
        self._expect("cancel", W.WAITING, W.RUNNING, W.PREEMPTED, W.WAITING_FOR_REMOTE_KV)
        was = self.status
        _become(self, W.FINISHED_ABORTED)
        self._end(now)
        return was

    def reject(self, now: int) -> None:
        """WAITING -> FINISHED_IGNORED: it could never be served (E6)."""
        self._expect("reject", W.WAITING)
        _become(self, W.FINISHED_IGNORED)
        self._end(now)

    def time_out(self, now: int) -> None:
        """WAITING or PREEMPTED -> FINISHED_TIMEOUT."""
        self._expect("time out", W.WAITING, W.PREEMPTED)
        _become(self, W.FINISHED_TIMEOUT)
        self._end(now)

    def fail(self, now: int) -> None:
        """Any live state -> FINISHED_ERROR (the run stalled, E6b)."""
        self._expect("fail", W.WAITING, W.RUNNING, W.PREEMPTED, W.WAITING_FOR_REMOTE_KV)
        _become(self, W.FINISHED_ERROR)
        self._end(now)

    def _end(self, now: int) -> None:
        self.finished_at = now
        self.credit = 0
        self.resident = 0
        self.block_keys = None


# The transitions write a request's status through the slot itself, so that a
# SealedRequest, which refuses `req.status = ...`, still moves through them.
_become = Request.status.__set__
_SPEC_SLOTS = {name: Request.__dict__[name] for name in (
    "rid", "index", "arrival", "prompt_tokens", "output_tokens", "max_tokens", "priority",
    "deadline", "prompt_token_ids", "output_token_ids", "block_hashes")}
_write = object.__setattr__


class SealedRequest(Request):
    """A request as a policy from outside the package (a plugin) holds it.

    Everything can be read; what the trace asked for (id, arrival, prompt,
    outputs, max_tokens, priority, deadline, token ids, block hashes) and the
    status cannot be written: the status changes only through the transitions
    the engine makes (`view.admit`, `view.preempt`, ...), and a write is refused
    with an InvariantError naming the field, so that a policy cannot falsify
    the results. This guards against mistakes, not malice: Python offers ways
    around any such rule. The engine seals a plugin's requests
    (`seal`); built-in policies get plain requests, at no cost.
    """

    __slots__ = ()

    def __setattr__(self, name: str, value) -> None:
        if name == "status" or name in _SPEC_SLOTS:
            raise InvariantError(
                f"request {self.rid!r}: a policy may not set {name} (to "
                f"{getattr(value, 'label', repr(value))}); "
                + ("it changes only through the view's transitions (admit, preempt)"
                   if name == "status" else "it is what the trace asked for"))
        _write(self, name, value)


def seal(req: Request) -> None:
    """Make `req` a SealedRequest (the same object and fields)."""
    req.__class__ = SealedRequest


def set_outputs(req: Request, output_tokens: int, max_tokens: int) -> None:
    """Give `req` the outputs its trace asked for, sealed or not (disaggregation: a
    prompt-only run on a prefill replica that ended there ends as the request)."""
    _SPEC_SLOTS["output_tokens"].__set__(req, output_tokens)
    _SPEC_SLOTS["max_tokens"].__set__(req, max_tokens)


# --- progress, a dispatch at a time --------------------------------------------
# The engine writes a request's progress only through these functions and
# the methods above (record_rows, record_cached): one loop per dispatch here is
# cheaper than a method call per row.

def write_decodes(reqs: list[Request]) -> int:
    """Account the one row each request's decode writes at its `resident`; return how
    many were never written before (useful); the others are replayed."""
    useful = 0
    for req in reqs:
        r = req.resident + 1
        req.resident = r
        if r > req.high_water:
            req.high_water = r
            req.useful_rows += 1
            useful += 1
        else:
            req.replay_rows += 1
    return useful


def emit_outputs(reqs: list[Request], now: int, start: int,
                 since: dict[int, int]) -> list[Request]:
    """Record one output for each of `reqs` (the emitting rows of a dispatch, in
    order) at completion time `now` of a dispatch that started at `start`;
    count in `since` the times of the outputs before them (for the gaps
    between outputs, ITL); return the requests that have now produced their
    last output (they finish, E1)."""
    done = []
    steady = 0  # outputs whose previous one came when this dispatch started
    for req in reqs:
        k = req.outputs + 1
        req.outputs = k
        if k == 1:
            req.first_token_at = now
        else:
            last = req.last_output_at
            if last == start:
                steady += 1
            else:
                since[last] = since.get(last, 0) + 1
        req.last_output_at = now
        if k == req.output_tokens:
            done.append(req)
    if steady:
        since[start] = since.get(start, 0) + steady
    return done


def catch_up(req: Request, rows: int, outputs: int, last_output_at: int) -> None:
    """Account at once what a steady decoder did while it was counted rather than
    written (engine/fast/cohort.py): `rows` new rows, all useful, and `outputs`
    outputs, the last at `last_output_at`."""
    if rows:
        r = req.resident + rows
        req.resident = r
        req.high_water = r
        req.useful_rows += rows
    if outputs:
        req.outputs += outputs
        req.last_output_at = last_output_at
