"""Shared and pinned blocks: the part of `BlockAllocator` that gives a block more
owners than one (A5) and pins it for an in-flight transfer (L5).

A block in a table has one owner, plus `_extra[block]` more when it is
shared; `_pins[block]` pins when pinned; `_orphans` are pinned blocks nobody
owns any more (held until unpinned). Blocks neither shared nor pinned cost
nothing here. Once blocks may be shared or pinned the plain free and
draining blocks are also kept as sets, to tell a held block from one nobody
holds. The methods below are `BlockAllocator`'s (a base class of it) and use
the attributes its `__init__` sets.

A shared block's extra owners are counted per run (`Owners`): the blocks
that gained and lost owners together name one counter, so a look-up's hits
shared, or a released table's shared lead dropped, move one count when they
are one run (`move_owners`), not a count per block.

The plain free blocks' set is kept lazily: it holds the first `_plain_mark`
blocks of the plain stack (`_free`), and blocks pushed above them join it
only when a question needs them (`_plain_synced`); a block popped below the
mark leaves it (`_plain_cut`). Under a radix tree an eviction frees a whole
node, and what it frees beyond the need goes on the stack, to be popped
again a block at a time by decodes: replaying the Mooncake trace under
`sglang` that was 4.3 million blocks put in the set and taken out again
(about 4% of a sampled profile), for 12,042 questions (`share`), each
asking about 33 blocks against a stack of about 212.
"""
from __future__ import annotations

from itertools import filterfalse

from ..records.errors import InvariantError
from .block_keys import BlockKeys

__all__ = ["Sharing", "Owners", "add_owner", "drop_one", "drop_owner", "move_owners",
           "owner_counts", "run_size_fault", "PROBE_MAX"]

# The most plain blocks above the set's mark that `_all_held` compares with the
# blocks asked about, one by one, rather than adding them to the set (which
# costs about as much again when they are popped): beyond it they join the set.
# (Mooncake's first 2,000 requests under `sglang`: 7.0129e9 instructions at 256,
# 6.9782e9 at 1,024; on the full trace no block joins the set at 1,024.)
PROBE_MAX = 1024


def drop_one(counts: dict[int, int], block: int) -> int:
    """One fewer of `block` in `counts` (extra owners, pins), forgotten at zero;
    return what is left."""
    left = counts[block] - 1
    if left:
        counts[block] = left
    else:
        del counts[block]
    return left


class Owners:
    """The extra owners (`count`) of each of `size` shared blocks, which name this
    counter in the allocator's `_extra` (block -> `Owners`): blocks that gained
    and lost owners together. Compared by identity (`list.count` below finds a
    run's blocks naming one counter in C).

    Speed: replaying the Mooncake trace under vllm, 408,056 held blocks gain an
    owner in 12,333 shares and lose it in 12,333 releases, 33 a call, all one
    run in 12,314 shares and 12,315 releases (under sglang 12,023 and 12,025 of
    about 12,040): each was a count read, changed and written a block at a time
    (a `map` chain in `share`, a Python step per block in `free_request`); now
    a look-up per block in C and one count moved: the first 2,000 requests
    0.9859x the instructions under vllm, 0.9914x under sglang
    (benchmarks/README.md, "thirtieth steps", helper fr33)."""

    __slots__ = ("count", "size")

    def __init__(self, count: int, size: int) -> None:
        self.count = count
        self.size = size

    def __repr__(self) -> str:
        return f"Owners({self.count}, {self.size})"


def owner_counts(extra: dict[int, Owners]) -> dict[int, int]:
    """Each shared block's extra owners, as a plain dict (the audit's, tests')."""
    return {block: owners.count for block, owners in extra.items()}


def run_size_fault(extra: dict[int, Owners]) -> str | None:
    """The first counter that names fewer or more blocks than its `size` says, or
    counts no owner, as the equation that fails, with its numbers (the audit's);
    None when every counter holds."""
    named: dict[int, tuple[Owners, list[int]]] = {}
    for block, owners in extra.items():
        named.setdefault(id(owners), (owners, []))[1].append(block)
    for owners, blocks in named.values():
        if owners.size != len(blocks):
            return (f"shared blocks {blocks[:4]}{'...' if len(blocks) > 4 else ''}: "
                    f"run size({owners.size}) == blocks naming it({len(blocks)}) is false")
        if owners.count < 1:
            return (f"shared blocks {blocks[:4]}{'...' if len(blocks) > 4 else ''}: "
                    f"extra owners({owners.count}) >= 1 is false")
    return None


def add_owner(extra: dict[int, Owners], block: int) -> None:
    """One more owner of `block` (a counter of its own if it shared one)."""
    owners = extra.get(block)
    if owners is None:
        extra[block] = Owners(1, 1)
    elif owners.size == 1:
        owners.count += 1
    else:
        owners.size -= 1
        extra[block] = Owners(owners.count + 1, 1)


def drop_owner(extra: dict[int, Owners], block: int) -> None:
    """One fewer owner of `block` (which has extra owners), forgotten at none."""
    owners = extra[block]
    left = owners.count - 1
    if owners.size == 1:
        if left:
            owners.count = left
        else:
            del extra[block]
    else:
        owners.size -= 1
        if left:
            extra[block] = Owners(left, 1)
        else:
            del extra[block]


def move_owners(extra: dict[int, Owners], blocks: list[int], delta: int) -> None:
    """One more (`delta` 1) or one fewer (-1, each has extra owners) owner of each
    of `blocks` (no block twice): one count moved when they are every block of
    one counter, or all new; else the blocks left with the same count name a
    new counter (the rest of a counter keeps it), those left with none are
    forgotten."""
    n = len(blocks)
    if not n:
        return
    named = list(map(extra.get, blocks))
    owners = named[0]
    if owners is None:
        if named.count(None) == n:  # none shared yet (delta 1): one new run
            extra.update(dict.fromkeys(blocks, Owners(1, n)))
            return
    elif owners.size == n and named.count(owners) == n:  # one whole run
        left = owners.count + delta
        if left:
            owners.count = left
        else:
            for block in blocks:
                del extra[block]
        return
    groups: dict[int, tuple[Owners | None, list[int]]] = {}
    for block, owners in zip(blocks, named):
        group = groups.get(id(owners))
        if group is None:
            groups[id(owners)] = (owners, [block])
        else:
            group[1].append(block)
    # The blocks left with the same count name one new counter (several runs
    # merged into one: a counter per block, as `add_owner` makes, is one run
    # again after one such move).
    merged: dict[int, list[int]] = {}
    for owners, members in groups.values():
        if owners is None:
            left = delta
        else:
            left = owners.count + delta
            owners.size -= len(members)  # (none left: nothing names it any more)
        if left:
            merged.setdefault(left, []).extend(members)
        else:
            for block in members:
                del extra[block]
    for left, members in merged.items():
        extra.update(dict.fromkeys(members, Owners(left, len(members))))


class Sharing:
    """`BlockAllocator`'s shares, pins and orphans (see the module docstring)."""

    def _become_shared(self) -> None:
        """From now on blocks may have several owners or pins: keep the plain free
        and draining blocks as sets too."""
        if not self._shared:
            self._shared = True
            self._plain_set = set(self._free)
            self._plain_mark = len(self._free)
            self._draining_set = {b for _, blocks, keyed, _ in self._drain
                                   for b in blocks + keyed}

    def _plain_cut(self, left: int, leaving: list[int]) -> None:
        """The plain stack keeps only its first `left` blocks, below the set's mark
        (the caller pops the rest): `leaving`, the blocks from `left` up to the
        mark, leave the set."""
        self._plain_set.difference_update(leaving)
        self._plain_mark = left

    def _plain_synced(self) -> set[int]:
        """The set of every plain free block (those above the mark join it now)."""
        free = self._free
        if self._plain_mark < len(free):
            self._plain_set.update(free[self._plain_mark:])
            self._plain_mark = len(free)
        return self._plain_set

    def _held(self, block: int) -> bool:
        """Whether somebody owns or pins `block` (shared mode)."""
        return (0 <= block < self._fresh and block not in self._plain_synced()
                and block not in self._draining_set and block not in self._cached_free)

    def reclaimable(self, rid: str) -> int:
        """How many of `rid`'s blocks would leave the held pool if it let go of them
        now: those nobody else owns and no transfer pins. (A block shared with
        another table, or pinned, stays held: freeing `rid` frees nothing of it.)"""
        table = self._tables.get(rid)
        if not table:
            return 0
        extra = self._extra
        pins = self._pins
        if not extra and not pins:
            return len(table)
        return sum(1 for block in table if block not in extra and block not in pins)

    def share(self, rid: str, blocks: list[int], keys: BlockKeys | None = None) -> None:
        """Append blocks found in the cache or held by others to `rid`'s table.

        Each gets one more owner; a cached free block leaves the cache's free
        blocks and is held again. A cache may need `keys` (what `lookup(keys,
        ...)` found them with) and an empty table (`PrefixCache.on_share`).
        """
        self._become_shared()
        if not blocks:
            self._tables.setdefault(rid, [])
            return
        self._cache.on_share(rid, blocks, keys, bool(self._tables.get(rid)))
        # Blocks are sorted in bulk (loops in C, not one Python branch per block:
        # 615,217 blocks shared in 12,333 admissions replaying the Mooncake trace
        # under vllm): free cached ones leave the cache (`hits`), the others gain
        # an owner, unless they are pinned orphans.
        found = self._hits(blocks) if keys is None else self._hits_found(blocks, keys)
        self.held += len(found)
        rest = (blocks if not found else () if len(found) == len(blocks)
                else list(filterfalse(found.__contains__, blocks)))
        if rest:
            orphans = self._orphans
            if (orphans and not orphans.isdisjoint(rest)) or not self._all_held(rest):
                self._share_one_by_one(rid, rest)
            else:
                # One more owner each (`rest` has no block twice): one count
                # moved when they are one run (`Owners`).
                move_owners(self._extra, rest, 1)
        if self.held > self.peak_held:
            self.peak_held = self.held
        self._tables.setdefault(rid, []).extend(blocks)

    def _all_held(self, blocks: list[int]) -> bool:
        """Whether somebody owns or pins every one of `blocks`, none of which is a
        free cached block (`_held` for all of them, in bulk)."""
        if not (0 <= min(blocks) and max(blocks) < self._fresh
                and self._plain_set.isdisjoint(blocks)
                and self._draining_set.isdisjoint(blocks)):
            return False
        free, mark = self._free, self._plain_mark
        above = len(free) - mark  # plain blocks not in the set
        if not above:
            return True
        if above > PROBE_MAX:
            return self._plain_synced().isdisjoint(blocks)
        return set(blocks).isdisjoint(free[mark:] if mark else free)

    def _share_one_by_one(self, rid: str, blocks: list[int]) -> None:
        """The rest of `share`, a block at a time: shared blocks that are not free
        cached ones and are pinned orphans, or not all held (then it raises)."""
        extra = self._extra
        orphans = self._orphans
        for block in blocks:
            if block in orphans:
                orphans.remove(block)  # pinned, and owned again
                self._cache.orphan_key(block)  # (its new owner names its key)
            elif self._held(block):
                add_owner(extra, block)
            elif 0 <= block < self._fresh:
                raise InvariantError(f"block {block} is shared by {rid!r} but "
                                     "nobody holds it and it is not cached")
            else:
                raise InvariantError(f"block {block} is shared by {rid!r} but was never "
                                     "allocated")

    def pin(self, blocks: list[int]) -> int:
        """Pin held blocks for an in-flight transfer; return the pin's handle.

        A pinned block stays held, even with no owner left, until `unpin`
        (the transfer's drain acknowledgement).
        """
        self._become_shared()
        pins = self._pins
        for block in blocks:
            if not self._held(block):
                raise InvariantError(f"block {block} is pinned but nobody holds it")
            pins[block] = pins.get(block, 0) + 1
        handle = self._next_pin
        self._next_pin += 1
        self._pin_sets[handle] = list(blocks)
        return handle

    def unpin(self, handle: int, now: int, delay: int) -> int:
        """Acknowledge a transfer's drain; blocks nobody holds any more start draining."""
        blocks = self._pin_sets.pop(handle)
        pins = self._pins
        orphan_key = self._cache.orphan_key
        orphans = []
        keyed = []
        keys = []
        for block in blocks:
            if not drop_one(pins, block):
                if block in self._orphans:
                    self._orphans.remove(block)
                    key = orphan_key(block)
                    if key is None:
                        orphans.append(block)
                    else:
                        keyed.append(block)
                        keys.append(key)
        self._drain_blocks(orphans, now, delay, keyed, keys)
        return len(orphans) + len(keyed)

    def _adopt(self, table: list[int], swaps: list[tuple[int, int]]) -> None:
        """SGLang's insert keeps one copy of a run: a request that wrote a block
        the cache already holds (another request computed it in the same step)
        takes the cached block, and its own copy is freed. `swaps`: (position in
        `table`, cached block), from the cache."""
        extra = self._extra
        for i, cached in swaps:
            if cached in self._cached_free:
                self._hit(cached)
                self.held += 1
            elif cached in self._draining_set or cached in self._orphans:
                continue  # not reusable: keep the request's own copy
            else:
                add_owner(extra, cached)
            own = table[i]
            table[i] = cached
            if own in extra:
                drop_owner(extra, own)
            elif own in self._pins:
                self._orphans.add(own)
            else:
                self.held -= 1
                self._free.append(own)  # (above the set's mark)
