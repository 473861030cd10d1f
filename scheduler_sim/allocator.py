"""KV blocks and reservation credits: who holds what, and what is free (SPEC §5).

The allocator knows request ids and integers, never request objects. It keeps
three disjoint pools of physical blocks, `held + draining + free ==
num_blocks`, and, apart from them, reservation *credits*: blocks promised to
an admitted request for its whole future (A1, A2). A credit is not an
allocation: blocks leave the free list only when a dispatch writes rows into
them, so a later request can wait while free blocks exist (they are promised).

Freed blocks drain for `release_delay` ticks before they are reusable (A4).

A block may have several owners (a shared prefix) and may be pinned by an
in-flight transfer (A5, L5). It counts once, as held, while anybody
references or pins it; it drains only when the last owner has let go and
every pin has been acknowledged. So preempting a victim frees only what
nobody else holds, and admission always sees what can really be reused.

Check-then-act pairs: `can_reserve` / `reserve`, `can_allocate` / `grow`.
`try_grow` is all-or-nothing: a reconstruction that cannot get every block
it needs takes none (L4).
"""
from __future__ import annotations

from collections import deque

from .errors import InvariantError

__all__ = ["BlockAllocator", "blocks_for"]


def blocks_for(rows: int, block_size: int) -> int:
    """Blocks needed to hold `rows` token rows: ceil(rows / block_size)."""
    return -(-rows // block_size)


class BlockAllocator:
    """Physical blocks (held, draining, free) and reservation credits, by request id."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        # Stack of free block ids; popping gives the lowest id first.
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._refs = [0] * num_blocks
        self._pins = [0] * num_blocks
        self._pin_sets: dict[int, list[int]] = {}
        self._next_pin = 0
        self._tables: dict[str, list[int]] = {}
        self._credits: dict[str, int] = {}
        self._drain: deque[tuple[int, list[int]]] = deque()  # (expiry tick, blocks)
        self.held = 0
        self.draining = 0
        self.reserved = 0
        self.peak_reserved = 0
        self.peak_held = 0

    # --- views ----------------------------------------------------------------

    @property
    def free(self) -> int:
        """Blocks that can be handed out right now."""
        return len(self._free)

    def table(self, rid: str) -> list[int]:
        """The block ids a request holds, in row order (empty if none)."""
        return self._tables.get(rid, [])

    def credit(self, rid: str) -> int:
        """The credit (in blocks) a request holds, 0 if none."""
        return self._credits.get(rid, 0)

    def next_expiry(self) -> int | None:
        """The tick at which the oldest draining blocks become free, if any drain."""
        return self._drain[0][0] if self._drain else None

    # --- credits (A1, A2) -----------------------------------------------------

    def can_reserve(self, blocks: int) -> bool:
        """True if a credit of `blocks` keeps reserved + draining <= num_blocks (A3)."""
        return self.reserved + self.draining + blocks <= self.num_blocks

    def reserve(self, rid: str, blocks: int) -> None:
        """Give request `rid` a credit of `blocks` (call `can_reserve` first)."""
        if rid in self._credits:
            raise InvariantError(f"request {rid!r} already holds a credit of "
                                 f"{self._credits[rid]} blocks")
        self._credits[rid] = blocks
        self.reserved += blocks
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        if self.reserved + self.draining > self.num_blocks:
            raise InvariantError(self._credit_equation() + " is false")

    def release_credit(self, rid: str) -> int:
        """Drop whatever credit `rid` holds; return its size."""
        blocks = self._credits.pop(rid, 0)
        self.reserved -= blocks
        return blocks

    # --- physical blocks --------------------------------------------------------

    def can_allocate(self, blocks: int) -> bool:
        """True if `blocks` free blocks exist now."""
        return blocks <= len(self._free)

    def blocks_to_grow(self, rid: str, rows: int) -> int:
        """New blocks request `rid` needs so that its table covers `rows` rows."""
        have = len(self._tables.get(rid, ()))
        need = -(-rows // self.block_size)
        return need - have if need > have else 0

    def grow(self, rid: str, rows: int) -> int:
        """Allocate blocks so that `rid`'s table covers `rows` rows; return how many.

        Under reservation the table may never exceed the credit (A3); running out
        of free blocks here is a bug of the policy that asked.
        """
        table = self._tables.get(rid)
        if table is None:
            table = self._tables[rid] = []
        need = -(-rows // self.block_size) - len(table)
        if need <= 0:
            return 0
        if need > len(self._free):
            raise InvariantError(
                f"request {rid!r} needs {need} new blocks but free({len(self._free)}) "
                f"< {need}: held({self.held}) + draining({self.draining}) + "
                f"free({len(self._free)}) == num_blocks({self.num_blocks})")
        credit = self._credits.get(rid)
        if credit is not None and len(table) + need > credit:
            raise InvariantError(
                f"request {rid!r}: allocated({len(table) + need}) <= credit({credit}) is false")
        refs = self._refs
        free = self._free
        for _ in range(need):
            block = free.pop()
            refs[block] = 1
            table.append(block)
        self.held += need
        if self.held > self.peak_held:
            self.peak_held = self.held
        return need

    def try_grow(self, rid: str, rows: int) -> bool:
        """All-or-nothing `grow`: allocate every block needed for `rows`, or none (L4)."""
        if self.blocks_to_grow(rid, rows) > len(self._free):
            return False
        self.grow(rid, rows)
        return True

    def share(self, rid: str, blocks: list[int]) -> None:
        """Append blocks another owner holds to `rid`'s table (one more reference each)."""
        refs = self._refs
        for block in blocks:
            if refs[block] == 0 and self._pins[block] == 0:
                raise InvariantError(f"block {block} is shared by {rid!r} but nobody holds it")
            refs[block] += 1
        self._tables.setdefault(rid, []).extend(blocks)

    def pin(self, blocks: list[int]) -> int:
        """Pin held blocks for an in-flight transfer; return the pin's handle.

        A pinned block stays held, even with no owner left, until `unpin`
        (the transfer's drain acknowledgement).
        """
        pins = self._pins
        for block in blocks:
            if self._refs[block] == 0 and pins[block] == 0:
                raise InvariantError(f"block {block} is pinned but nobody holds it")
            pins[block] += 1
        handle = self._next_pin
        self._next_pin += 1
        self._pin_sets[handle] = list(blocks)
        return handle

    def unpin(self, handle: int, now: int, delay: int) -> int:
        """Acknowledge a transfer's drain; blocks nobody holds any more start draining."""
        blocks = self._pin_sets.pop(handle)
        orphans = []
        for block in blocks:
            self._pins[block] -= 1
            if self._pins[block] == 0 and self._refs[block] == 0:
                orphans.append(block)
        self._drain_blocks(orphans, now, delay)
        return len(orphans)

    def free_request(self, rid: str, now: int, delay: int) -> int:
        """Release `rid`'s credit and block references; return the blocks sent to drain.

        Blocks are dereferenced tail first; a block nobody references any more
        drains until `now + delay` (A4).
        """
        self.release_credit(rid)
        table = self._tables.pop(rid, None)
        if not table:
            return 0
        refs = self._refs
        pins = self._pins
        drained: list[int] = []
        for block in reversed(table):
            refs[block] -= 1
            if refs[block] == 0 and pins[block] == 0:
                drained.append(block)
        self._drain_blocks(drained, now, delay)
        return len(drained)

    def _drain_blocks(self, blocks: list[int], now: int, delay: int) -> None:
        """Move blocks nobody holds from held to draining, free at `now + delay`.

        With no delay they are free at once, so a policy that preempts in the
        middle of a step can reuse the victim's blocks in that same step.
        """
        if not blocks:
            return
        self.held -= len(blocks)
        if delay == 0:
            # The first block freed (the tail) is the first reused.
            self._free.extend(reversed(blocks))
            return
        self.draining += len(blocks)
        expiry = now + delay
        drain = self._drain
        if drain and drain[-1][0] == expiry:
            drain[-1][1].extend(blocks)
        elif drain and drain[-1][0] > expiry:
            raise InvariantError(f"drain expiry({expiry}) >= last expiry({drain[-1][0]}) is false")
        else:
            drain.append((expiry, blocks))

    def release_expired(self, now: int) -> int:
        """Move every draining block whose delay has passed to the free list."""
        released = 0
        drain = self._drain
        while drain and drain[0][0] <= now:
            _, blocks = drain.popleft()
            # Reverse so that the first freed block is the first reused.
            self._free.extend(reversed(blocks))
            released += len(blocks)
        self.draining -= released
        return released

    # --- invariants (A3) --------------------------------------------------------

    def _credit_equation(self) -> str:
        return (f"reserved({self.reserved}) + draining({self.draining}) "
                f"<= num_blocks({self.num_blocks})")

    def check(self) -> None:
        """The O(1) conservation check run at every boundary (A3)."""
        free = len(self._free)
        if self.held + self.draining + free != self.num_blocks:
            raise InvariantError(
                f"held({self.held}) + draining({self.draining}) + free({free}) "
                f"== num_blocks({self.num_blocks}) is false")
        if self.reserved + self.draining > self.num_blocks:
            raise InvariantError(self._credit_equation() + " is false")

    def audit(self) -> None:
        """The full O(blocks) check used by tests: counters agree with the tables."""
        self.check()
        credits = sum(self._credits.values())
        if credits != self.reserved:
            raise InvariantError(f"sum of credits({credits}) == reserved({self.reserved}) is false")
        referenced = {b for table in self._tables.values() for b in table}
        pinned = {b for blocks in self._pin_sets.values() for b in blocks}
        if len(referenced | pinned) != self.held:
            raise InvariantError(
                f"referenced or pinned blocks({len(referenced | pinned)}) == "
                f"held({self.held}) is false")
        for block in referenced:
            owners = sum(t.count(block) for t in self._tables.values())
            if owners != self._refs[block]:
                raise InvariantError(f"block {block}: owners({owners}) == "
                                     f"refs({self._refs[block]}) is false")
        for rid, table in self._tables.items():
            credit = self._credits.get(rid)
            if credit is not None and len(table) > credit:
                raise InvariantError(
                    f"request {rid!r}: allocated({len(table)}) <= credit({credit}) is false")
        draining = sum(len(b) for _, b in self._drain)
        if draining != self.draining:
            raise InvariantError(f"drain queue({draining}) == draining({self.draining}) is false")
        if set(self._free) & (referenced | pinned):
            raise InvariantError("a free block is still referenced or pinned")
