"""vLLM's LRU queue of free cached blocks, kept in runs: the part of `VllmCache`
that moves blocks through the queue (see `vllm_cache` for the layout).

The queue is `runs`, one entry [blocks, their keys, position of the first not
yet consumed] per batch freed, oldest first; eviction consumes it from the
front by slices. In a compact cache (a fleet's replica) a run's integer keys
(a trace's hash entries) are packed in an `array('q')`, 8 bytes a key and no
int object: a batch's leading keys of other kinds (a request's own content,
its outputs, the tail of its table freed first) make a run of their own, a
list (`append_run`). A hit takes its blocks' entries off the ends of the runs
holding them where it can (`ends`: a run's last block -> the run;
`_take_ends`), and leaves any other entry behind, stale: `stale[block]`
counts such entries of a block, all of them ahead of its live entry, so
eviction skips exactly that many; a run a hit emptied stays in the deque
until evictions or a rebuild pass it. `free_blocks` holds the queued blocks
(membership and size). The methods below are `VllmCache`'s (a base class of
it) and use the attributes its `__init__` sets.
"""
from __future__ import annotations

import struct
from array import array
from collections import deque
from itertools import compress, repeat
from operator import eq

from .tail_first import NoKeys, TailFirstKeys

__all__ = ["RunQueue"]


def _same_kind(keys, kept):
    """The `kept` keys (an iterable, part of a run's `keys`, in order) as a run's
    keys of the same kind: packed, a freed table's own (`TailFirstKeys`: a
    subsequence is one too) or a plain list."""
    kind = type(keys)
    if kind is array:
        return array("q", kept)
    # (a run of keys going down, a `range`, keeps them going down)
    return TailFirstKeys(kept) if kind is TailFirstKeys or kind is range else list(kept)


class RunQueue:
    """`VllmCache`'s LRU queue in runs (see the module docstring)."""

    def append_run(self, blocks: list[int], keys) -> None:
        """Append `blocks`, freed together with `keys` (position for position), to
        the queue's tail as one run; in a compact cache (a fleet's replica),
        leading keys that are not integers as a run of their own and the rest as
        a run whose keys are packed in an `array('q')` (kept a list if anything
        there is not an integer of 64 bits).

        Memory: a key packed costs 8 bytes against 40 for an int object and its
        list slot; a fleet of 64 replicas replaying Mooncake under vllm held 1.35
        million such keys in its queues at the peak (41 MiB of int objects, 11
        MiB of lists, of 159 MiB traced). Speed: packed through `struct` (66 ns a
        key on this loaded machine, against 183 for `array('q', keys)` and 12
        for copying the list), and only in a compact cache, where memory is what
        grows with the replicas."""
        ends = self.ends
        if not self.compact or type(keys) is range or type(keys) is NoKeys:
            # (a `range`: a run of integer keys going down, 48 bytes whatever its
            # length, less than packed; `NoKeys`: blocks without keys, nothing to pack)
            self.runs.append(run := [blocks, keys, 0])
            ends[blocks[-1]] = run
            return
        runs = self.runs
        end = len(keys)
        n = 0
        while n < end and type(keys[n]) is not int:
            n += 1
        if n:
            if n == end:
                runs.append(run := [blocks, keys, 0])
                ends[blocks[-1]] = run
                return
            runs.append(run := [blocks[:n], keys[:n], 0])
            ends[blocks[n - 1]] = run
            blocks = blocks[n:]
            keys = keys[n:]
        packed = array("q")
        try:
            packed.frombytes(struct.pack(f"{len(keys)}q", *keys))
        except struct.error:
            packed = keys if type(keys) is list else list(keys)
        runs.append(run := [blocks, packed, 0])
        ends[blocks[-1]] = run

    def append_runs(self, keyed: list[int], pieces: list) -> list[list[int]]:
        """`append_run` of each piece of a freed table's keys (`TailFirstRuns.pieces`,
        in order) with its blocks, the next `len(piece)` of `keyed`, in one call;
        return those blocks, a list per piece. The last piece's blocks are `keyed`
        itself, the others cut off its front (no copy of the most blocks).
        (One call a table where it was one a piece: see `QueueMembers.add_runs`.)"""
        runs = self.runs
        ends = self.ends
        packs = self.compact
        parts = []
        last = len(pieces) - 1
        p = 0
        for i, piece in enumerate(pieces):
            n = len(piece)
            if i < last:
                part = keyed[p:p + n]
            else:
                if p:
                    del keyed[:p]
                part = keyed
            parts.append(part)
            p += n
            if packs and type(piece) is not range and type(piece) is not NoKeys:
                self.append_run(part, piece)
            else:  # (`append_run`'s first case: nothing to pack)
                runs.append(run := [part, piece, 0])
                ends[part[-1]] = run
        return parts

    def _rebuild_if_stale(self) -> None:
        """Once stale entries and the runs hits emptied since the last rebuild
        (`emptied`, some maybe consumed since) outnumber the queue, rebuild `runs`
        without them (run by run, each keeping its kind of keys), so that it never
        holds more than about twice the queue's entries and runs."""
        if self.stale_total + self.emptied > len(self.free_blocks) + 64:
            runs: deque[list] = deque()
            for blocks, keys, pos in self.runs:
                part = blocks[pos:]
                if not part:  # (a run whose blocks hits took off its end)
                    continue
                live = self._take_stale(part) if self.stale else None
                if live is None:  # (the run as it is, its keys of the same kind)
                    runs.append([part, keys[pos:] if type(keys) is not TailFirstKeys
                                 else TailFirstKeys(keys[pos:]), 0])
                elif live:
                    runs.append([list(compress(part, live)),
                                 _same_kind(keys, compress(keys[pos:], live)), 0])
            self.runs = runs
            self.stale.clear()
            self.stale_total = self.emptied = 0
            # (every entry live now: each run's last block ends it)
            self.ends = {run[0][-1]: run for run in runs}

    def _take_stale(self, part: list[int]) -> list[bool] | tuple | None:
        """Count off the entries of `part` (entries of one run, from the queue's
        front) that hits left behind: None if there are none, `()` if every one
        is, else a flag per entry, true if it is live. A run holds a freed
        batch's blocks, each once, and a block's stale entries are all ahead of
        its live one, so an entry of `part` is stale exactly if its block has a
        stale entry left: one fewer is counted for each.

        Speed: was a call per entry (`_skip_stale`) wherever a slice held a
        stale entry; 64 small replicas hit free cached blocks far more often
        than one large engine, whose shared openings stay held (the first 2,000
        Mooncake requests under vllm: 339,521 hits of free blocks leaving
        257,777 stale entries that evictions reached, against 54,075 and
        13,177, and nearly every slice that held one was stale throughout: a
        run a hit took whole). Now passes in C over the slice: a test that
        stops at the first stale entry, a test of all, the counts popped.
        Those 64 replicas took 0.9767x the instructions (7.1211e9 -> 6.9552e9,
        callgrind), one engine 0.9949x (benchmarks/README.md, "fifteenth
        steps", helper flt11)."""
        stale = self.stale
        if stale.keys().isdisjoint(part):
            return None
        if all(map(stale.__contains__, part)):
            left = list(map(stale.pop, part))
            live: list[bool] | tuple = ()
            self.stale_total -= len(left)
        else:
            left = list(map(stale.pop, part, repeat(0)))
            live = [not count for count in left]
            self.stale_total -= len(left) - left.count(0)
        if max(left) > 1:  # (blocks hit more than once since queued: fewer left)
            more = [count > 1 for count in left]
            stale.update(zip(compress(part, more), [count - 1 for count in compress(left, more)]))
        return live

    def _run_consumed(self, run: list) -> None:
        """`run`, consumed by evictions, left `runs`: it ends no run any more (and
        is not kept alive by `ends`)."""
        blocks = run[0]
        if blocks and self.ends.get(blocks[-1]) is run:
            del self.ends[blocks[-1]]

    def _take_ends(self, blocks: list[int], found: set[int]) -> set[int]:
        """Take the entries of a hit's blocks off the ends of the runs holding them
        where they can be, a slice per run; return the rest of `found` (the
        free blocks among `blocks`, taken out of the queue by the hit), whose
        entries stay behind, stale.

        `blocks` are a look-up's hits in table order, so a conversation's next
        turn finds its last turn's freed table first block first, and a freed
        table joined the queue tail first: its first blocks *end* the last run
        it made (`ends`: a run's last block -> the run), its next ones the run
        before. From the first of `found` on, each block that ends a run takes
        with it the longest slice of that run's end matching the blocks that
        follow, reversed; it stops at the first that ends no run. A block with
        a stale count is not taken off (its entry there may be a stale one);
        one without is in the runs once, live, so an entry of it in a run's
        unconsumed part is its own.

        Speed: 64 prefix-affinity replicas hit free cached blocks far more
        often than one engine (see `_take_stale`), and each stale entry was
        made, counted, tested against every slice evicted and skipped. On the
        first 2,000 Mooncake requests under vllm every hit's free blocks were
        taken off (stale entries made: 339,521 -> 0 on 64 replicas, 54,075 ->
        0 on one engine), at 0.8745x and 0.9877x the instructions (callgrind;
        benchmarks/README.md, "sixteenth steps", helper flt12)."""
        ends = self.ends
        stale = self.stale
        n = len(blocks)
        i = n - len(found)  # (blocks held by others are mostly a leading few)
        if i < 0 or blocks[i] not in found:
            i = 0
        start = i
        while i < n:
            block = blocks[i]
            run = ends.get(block)
            if run is None or block in stale:
                break
            part, keys, pos = run
            cut = len(part) - (n - i)
            if cut < pos:
                cut = pos
            if cut >= len(part) or part[-1] != block:
                break
            tail = part[cut:]
            tail.reverse()
            want = blocks[i:i + len(tail)]
            if tail != want:  # (the longest matching: as far as the first unequal)
                tail = tail[:list(map(eq, tail, want)).index(False)]
            if stale and not stale.keys().isdisjoint(tail):
                tail = tail[:list(map(stale.__contains__, tail)).index(True)]
            cut = len(part) - len(tail)
            del ends[block]
            del part[cut:]
            kind = type(keys)
            if kind is array or kind is TailFirstKeys:
                del keys[cut:]
            else:  # (a `range`, or a list maybe not the queue's own)
                run[1] = keys[:cut]
            if cut == pos:  # (emptied, left in the deque: counted toward a rebuild)
                self.emptied += 1
            elif part[-1] not in stale:
                ends[part[-1]] = run
            i += len(tail)
        if i == start:
            return found
        self._rebuild_if_stale()  # (a review: emptied runs grew the deque with the requests)
        if len(found) == i - start:
            return set()
        return found.difference(blocks[start:i])

    def _skip_stale(self, block: int) -> bool:
        """Whether the queue entry of `block` just reached is one a hit left behind:
        then it is consumed (one fewer stale entry of that block) and skipped."""
        stale = self.stale
        left = stale.get(block)
        if not left:
            return False
        if left > 1:
            stale[block] = left - 1
        else:
            del stale[block]
        self.stale_total -= 1
        return True

    def pop_one(self, forgetting: bool = False) -> tuple[int, object]:
        """`pop_oldest(1)`, for one block and its key (the queue must not be empty);
        `forgetting`: the index forgets its key too (no duplicate cached:
        `QueueMembers.evict_one`)."""
        runs = self.runs
        stale = self.stale
        while True:
            run = runs[0]
            blocks, keys, pos = run
            try:
                block = blocks[pos]
            except IndexError:  # (a run whose blocks hits took off its end)
                runs.popleft()
                continue
            if pos + 1 < len(blocks):
                run[2] = pos + 1
            else:
                runs.popleft()
                self._run_consumed(run)
            if stale and self._skip_stale(block):
                continue
            if forgetting:
                self.free_blocks.evict_one(block, keys[pos])
            else:
                self._dequeue_one(block, keys[pos])
            if not self.free_blocks.size:  # stale entries may be left behind it: drop them too
                runs.clear()
                self.ends.clear()
                stale.clear()
                self.stale_total = self.emptied = 0
            return block, keys[pos]

    def pop_oldest(self, count: int) -> tuple[list[int], list]:
        """Take the `count` least recently freed blocks out of the queue (there
        must be that many); return them and their keys, in that order. The
        index is left to the caller."""
        lru = self.free_blocks
        if count == len(lru):
            taken, keys = self.queue_items()
            lru.clear()  # (`QueueMembers.clear`)
            self.runs.clear()
            self.ends.clear()
            self.stale.clear()
            self.stale_total = self.emptied = 0
            return taken, keys
        runs = self.runs
        stale = self.stale
        taken: list[int] = []
        taken_keys: list = []
        need = count
        while need:
            run = runs[0]
            blocks, keys, pos = run
            end = pos + need
            part = blocks[pos:end]
            part_keys = keys[pos:end]
            if type(part_keys) is not list:  # (packed keys or a range: a list)
                part_keys = list(part_keys)
            if end >= len(blocks):
                runs.popleft()
                self._run_consumed(run)
            else:
                run[2] = end
            if stale:
                live = self._take_stale(part)
                if live is not None:
                    part = list(compress(part, live))
                    part_keys = list(compress(part_keys, live))
            if taken:
                taken += part
                taken_keys += part_keys
            else:  # (the first part: no copy)
                taken = part
                taken_keys = part_keys
            need -= len(part)
        self._dequeue(taken, taken_keys)
        return taken, taken_keys

    def _pop_oldest_forgetting(self, count: int, table: list[int]) -> None:
        """`pop_oldest(count)` for fewer blocks than the queue holds, forgetting
        their keys in the index as it goes (each block its key's only index
        entry): the keys are read in place in the runs, not copied. The blocks
        are appended to `table`, run by run (no list of them all made).

        Speed: a run of keys going down (a `range`, nearly every block evicted)
        is forgotten by its first key and its length (`QueueMembers.evict_down`,
        one call where it was `evict` and `KeyIndex.forget`), a run consumed is
        dropped from `ends` here, and a run consumed from its first block goes
        into `table` as it is (no slice of it made: it leaves the queue). On the first
        2,000 Mooncake requests under vllm, 5,471 such takes evict 1.67 million
        blocks from 10,108 runs (8,050 ranges, 2,013 `NoKeys`); with
        `QueueMembers.evict_one` for a take of one block, 0.9829x the
        instructions; the blocks into `table` run by run (no list of them all)
        0.9968x more (benchmarks/README.md, "thirty-first steps", helper ev35)."""
        runs = self.runs
        stale = self.stale
        ends = self.ends
        members = self.free_blocks
        down = members.evict_down
        leave = members.evict
        need = count
        while need:
            run = runs[0]
            blocks, keys, pos = run
            end = pos + need
            if end >= len(blocks):
                runs.popleft()
                if not blocks:  # (a run whose blocks hits took off its end)
                    continue
                if ends.get(blocks[-1]) is run:  # (`_run_consumed`)
                    del ends[blocks[-1]]
                part = blocks[pos:] if pos else blocks
            else:
                run[2] = end
                part = blocks[pos:end]
            live = self._take_stale(part) if stale else None
            if live is None:
                if type(keys) is range:
                    if part:
                        down(keys[pos], part)
                else:
                    leave(part, keys, pos)
            elif not live:  # (every entry stale, the most common case)
                part = []
            else:
                part = list(compress(part, live))
                # (a subsequence of a freed table's own keys is in runs found
                # exactly too: `TailFirstKeys`)
                kept = compress(keys[pos:end], live)
                leave(part, TailFirstKeys(kept) if type(keys) is TailFirstKeys
                      or type(keys) is range else list(kept), 0)
            table += part
            need -= len(part)

    def queue_items(self) -> tuple[list[int], list]:
        """The live entries of `runs` in order, and their keys: the LRU queue,
        least recently freed first."""
        stale = dict(self.stale)
        order = []
        order_keys = []
        for blocks, keys, pos in self.runs:
            if not stale:
                order += blocks[pos:]
                order_keys += keys[pos:]
                continue
            for block, key in zip(blocks[pos:], keys[pos:]):
                if stale.get(block):
                    stale[block] -= 1
                else:
                    order.append(block)
                    order_keys.append(key)
        if any(stale.values()) or sum(self.stale.values()) != self.stale_total:
            raise ValueError("stale entries counted but not in the runs")
        return order, order_keys
