"""The decode cohort: steady decoders advanced by two counters, not row by row.

A request that a dispatch ran as a plain decode (one new row, one output) and
that did not finish joins the cohort when that dispatch completes. While it is
a member, a dispatch that runs it again does no work for it: the cohort counts
the dispatches started and completed, and a member's progress (rows written,
outputs, the time of its last output) is what those counts added since it
joined, written into the request only when somebody needs it (`settle`). Two
schedules replace the per-row work:

- members grouped by the residue of their next row modulo the block size: a
  dispatch opens one block for each member of the group whose next row starts
  a block (a member crosses a block boundary once every `block_size`
  dispatches);
- members listed by the completion count at which they emit their last
  output: a completion finishes exactly those.

So a dispatch costs its other rows, its block openings and its finishes, not
its steady decodes. The engine keeps a cohort only when nobody watches the
blocks (no state callback, no prefix caching, no fleet's event listener: a
lone engine's listener is handed the members' records all the same, each
counted dispatch's rows, a fold's lines and finishes in row order) and the
policy never reads a decoding request's progress between dispatches
(`Policy.lazy_decoders`), or reads it only in `schedule`
(`Policy.schedule_reads_decoders`, vllm: every member is settled before each
call). A member leaves, settled, when a dispatch does not
run it as a plain decode, when it finishes, and before anything else touches
it (a preemption, a cancellation, a stall, a fold over counted and written
rows together, vllm's `schedule`). A fold over members only advances the counters (`advance`,
with `blocks_within` for the blocks it needs).

Members' blocks are counted as well: a member's table covers exactly the
blocks of its rows when it joins (the plain decode's dispatch gave it those;
a policy with `lazy_decoders` leaves its decoders' blocks to the dispatch,
and, if it reserves, gives each a credit), so the blocks a dispatch or a fold opens follow
from the residue groups alone. They are taken from the allocator by count
(`BlockAllocator.take_counted`, one call) and written into a member's table
when it leaves, settled (`give_counted`): see kv/counted_blocks.py. (Where
blocks are counts, kv/block_counts.py, a member that ends is freed from its
rows instead, with no give: `complete`.)

The engine owns a `Cohort` and calls it; nothing else does.
"""
from __future__ import annotations

from heapq import heappop, heappush

from ...kv.allocator import BlockAllocator
from ...records.errors import InvariantError
from ...requests.request import Request, catch_up

__all__ = ["Cohort"]


class Cohort:
    """Members, the two counters and the schedules of block openings and finishes."""

    __slots__ = ("members", "started", "completed", "last_done", "_groups", "_finishing",
                 "_counts", "_context", "_size", "_allocator", "_gives")

    def __init__(self, allocator: BlockAllocator, credited: bool = True) -> None:
        block_size = allocator.block_size
        # Members' new blocks are granted from their credits where the policy
        # reserves them (credited); under vllm they are plain blocks, by count.
        allocator.counted_credited = credited
        # request -> (started at joining, completed at joining, group, finishing count)
        self.members: dict[Request, tuple[int, int, int, int]] = {}
        self.started = 0     # dispatches started that ran the members
        self.completed = 0   # and completed
        self.last_done = -1  # when the last of them completed: every member's last output
        self._size = block_size
        self._allocator = allocator  # the members' blocks: counted, given as they leave
        # (Not as they end, where blocks are counts: freed from the rows: `complete`.)
        self._gives = not allocator.counts_blocks
        self._groups: list[dict[Request, None]] = [{} for _ in range(block_size)]
        self._finishing: dict[int, list[Request]] = {}
        # The finishing counts, a heap: each pushed when it first gets a member, left
        # there when its members leave (taken off once on top or passed), so the
        # smallest that still has members is on top after the stale are popped.
        # Speed: `fewest_left` was `min` over every finishing count, once a fold
        # (about 60 comparisons a fold on generated traces: 390,000 on the first
        # 20,000 requests; benchmarks/README.md, "twelfth steps ... mil8").
        self._counts: list[int] = []
        self._context = 0  # sum over members of (rows written at joining - started then)

    def __len__(self) -> int:
        return len(self.members)

    def join(self, req: Request) -> None:
        """`req` ran as a plain decode in the dispatch that just completed and has
        outputs to go (and a credit): from the next dispatch on it is counted, not
        written."""
        started, completed = self.started, self.completed
        group = (req.resident - started) % self._size
        finish = completed + req.output_tokens - req.outputs
        self.members[req] = (started, completed, group, finish)
        self._groups[group][req] = None
        finishing = self._finishing.get(finish)
        if finishing is None:
            self._finishing[finish] = [req]
            heappush(self._counts, finish)
        else:
            finishing.append(req)
        self._context += req.resident - started

    def settle(self, req: Request) -> None:
        """Write a member's progress into the request, and let it go."""
        started, completed, group, finish = self.members.pop(req)
        del self._groups[group][req]
        finishing = self._finishing.get(finish)
        if finishing is not None:  # (not when its finishing count was just taken)
            finishing.remove(req)
            if not finishing:
                del self._finishing[finish]
        self._context -= req.resident - started
        catch_up(req, self.started - started, self.completed - completed, self.last_done)
        allocator = self._allocator
        allocator.give_counted(req.rid, req.resident)
        if not self.members and allocator.counted and self._gives:  # (else: `complete`)
            _counted_left(allocator)

    def survivors(self, requests: list[Request], ended: list[Request] | None = None
                  ) -> list[Request]:
        """The members among `requests` (rows, each a member when listed), in their
        order, when those of them that left are `ended`: `requests` less `ended`, by
        identity, a new list. Should a member have left otherwise (none does: the
        count tells), they are looked up. Speed: no look-up of every row in
        `members` at each arrival into a counted stretch, or at each hand-back of
        `carry_counted` (fast/finishes.py), which keeps its rows less those that
        finished (868,000 look-ups on the first 20,000 generated requests, 4.0% of
        their instructions; benchmarks/README.md, "eleventh steps ... mil7")."""
        survivors = list(requests)
        if ended:
            remove = survivors.remove
            for req in ended:
                remove(req)
        if len(survivors) != len(self.members):
            survivors = list(filter(self.members.__contains__, survivors))
        return survivors

    def settle_all(self) -> None:
        """Let every member go, settled."""
        for req in list(self.members):
            self.settle(req)

    def start(self) -> int:
        """A dispatch runs every member once more: open a block for those whose
        row starts one (counted); return the members' summed context before
        their rows."""
        started = self.started
        opening = len(self._groups[-started % self._size])
        if opening:  # (no call for none: 31,000 of 82,000 on the Azure trace)
            self._allocator.take_counted(opening)
        self.started = started + 1
        return self._context + len(self.members) * started

    def start_owing(self) -> tuple[int, int]:
        """`start`, the blocks it opens left to the caller (`advance`'s `owed`, or
        `take_counted`): returns (those blocks, the members' summed context)."""
        started = self.started
        self.started = started + 1
        return (len(self._groups[-started % self._size]),
                self._context + len(self.members) * started)

    def by_residue(self) -> list[int]:
        """How many members have written rows of each residue modulo the block size
        (a member's rows are its group plus the dispatches started): what a
        folded stretch's snapshot lines need of them (fast/fold_records.py)."""
        counts = list(map(len, self._groups))
        shift = self.started % self._size  # count i is that of group i - shift
        return counts[-shift:] + counts[:-shift] if shift else counts

    def opening(self) -> int:
        """Blocks the next dispatch of every member opens (`start`)."""
        return len(self._groups[-self.started % self._size])

    def complete(self, now: int) -> list[Request]:
        """That dispatch completed at `now`: every member emitted once more. Returns
        the members that emitted their last output, settled and gone."""
        completed = self.completed = self.completed + 1
        self.last_done = now
        counts = self._counts
        while counts and counts[0] <= completed:  # (passed: none is still to come)
            heappop(counts)
        done = self._finishing.pop(completed, None)
        if not done:
            return []
        # `settle` of each, inline: their finishing list is the one just taken, and
        # `catch_up` by the counters. Speed: two calls and a look-up fewer a request
        # that ends counted (benchmarks/README.md, "seventeenth steps ... az14").
        # Where blocks are counts (kv/block_counts.py), no give: each ends next, in
        # `Dispatching._finish_ended`, whose free takes its counted blocks from its
        # rows (the only way out of `complete`; a policy that keeps blocks after the
        # finish keeps no cohort). Speed: a call fewer a member that ends (19,366 on
        # the Azure trace; benchmarks/README.md, "nineteenth steps", dir20).
        members = self.members
        groups = self._groups
        started = self.started
        allocator = self._allocator
        give = allocator.give_counted if self._gives else None
        for req in done:
            joined, joined_done, group, _ = members.pop(req)
            del groups[group][req]
            resident = req.resident
            self._context -= resident - joined
            rows = started - joined
            if rows:
                resident += rows
                req.resident = req.high_water = resident
                req.useful_rows += rows
            outputs = completed - joined_done
            if outputs:
                req.outputs += outputs
                req.last_output_at = now
            if give is not None:
                give(req.rid, resident)
        if give is not None and not members and allocator.counted:
            _counted_left(allocator)
        return done

    def contexts(self) -> int:
        """The members' summed rows written."""
        return self._context + len(self.members) * self.started

    def blocks_within(self, rows: int) -> int:
        """New blocks the members need to write `rows` more rows each: a member
        whose next row is q past a block boundary needs
        ceil((q + rows) / B) - ceil(q / B) of them."""
        # With rows = a * B + r (0 <= r < B) that is a each, and one more for those
        # with q = 0 or q > B - r when r > 0: r residues in a row (cyclically), so
        # r groups in a row. Speed: their sizes summed in C (`map(len, ...)`) rather
        # than a Python loop over the B groups (one call per fold).
        # Speed: when r > B / 2 the other B - r groups are summed, their members taken
        # from all (a fold of about 13 dispatches on blocks of 16 on the Azure trace: 3
        # groups' sizes, not 13; benchmarks/README.md, "seventeenth steps", az13).
        size = self._size
        whole, r = divmod(rows, size)
        n = len(self.members)
        total = whole * n
        if r:
            groups = self._groups
            if r + r > size:  # the other groups: q = 1 .. B - r, cyclically
                first, count = (1 - self.started) % size, size - r
            else:  # the group of q = B - r + 1 and the r - 1 after it
                first, count = (size - r + 1 - self.started) % size, r
            last = first + count
            summed = sum(map(len, groups[first:last]))
            if last > size:
                summed += sum(map(len, groups[:last - size]))
            total += summed if count == r else n - summed
        return total

    def advance(self, dispatches: int, last_done: int, owed: int = 0) -> None:
        """`dispatches` more dispatches ran every member and completed, the last
        at `last_done` (folding): the blocks they open are taken, counted, with
        `owed` more (those of a start before them: `start_owing`) in the same take."""
        opening = owed + self.blocks_within(dispatches)
        if opening:
            self._allocator.take_counted(opening)
        self.started += dispatches
        self.completed += dispatches
        self.last_done = last_done

    def fewest_left(self) -> int | None:
        """The fewest outputs any member has to go (None without members)."""
        finishing = self._finishing
        if not finishing:
            return None
        counts = self._counts
        while counts[0] not in finishing:  # (its members left, settled)
            heappop(counts)
        return counts[0] - self.completed


def _counted_left(allocator: BlockAllocator) -> None:
    raise InvariantError(f"the last member left {allocator.counted} counted blocks: "
                         "counted(0) when the cohort is empty is false")
