"""A request's keys cut into the pieces `KeyIndex` reads: runs of consecutive
integer keys, each within one bucket of `width` keys, then the keys of other
kinds (kv/key_index.py's module docstring says why the index keeps integer keys
in buckets). Shared by the index's registrations and look-ups and by the free
queue's members (queue_members.py).
"""
from __future__ import annotations

from bisect import bisect_right

__all__ = ["_pieces", "_run_up"]


def _pieces(keys, start: int, end: int, width: int) -> tuple[list, int, list]:
    """The keys of blocks `start` to `end` cut where a bucket of `width` keys
    ends: ([(p, node, off, n), ...], q, rest), each piece n consecutive integer
    keys of blocks p to p + n, the first at offset `off` of bucket `node`; then
    the keys from block q on (of other kinds), a list. `keys`: a list whose
    integer keys are a leading run, increasing, or a request's `BlockKeys`,
    whose integer keys are read as its runs (first key, count): no int object
    per key (`block_keys.BlockKeys.ensure`)."""
    pieces = []
    p = start
    if type(keys) is list:
        while p < end:
            key = keys[p]
            if type(key) is not int:
                break
            node, off = divmod(key, width)
            n = width - off
            if n > end - p:
                n = end - p
            # Increasing keys whose first and last are n - 1 apart are
            # consecutive: one bucket's slice.
            if n > 1 and keys[p + n - 1] != key + n - 1:
                n = _run_up(keys, p, n, key)
            pieces.append((p, node, off, n))
            p += n
        return pieces, p, keys[p:end] if p < end else []
    ints = keys.ints
    stop = end if end < ints else ints
    if p < stop:
        run_pos = keys.run_pos
        run_key = keys.run_key
        last = len(run_pos) - 1
        r = bisect_right(run_pos, p) - 1
        while p < stop:
            run_end = run_pos[r + 1] if r < last else ints
            if run_end > stop:
                run_end = stop
            key = run_key[r] + p - run_pos[r]
            while p < run_end:
                node, off = divmod(key, width)
                n = width - off
                if n > run_end - p:
                    n = run_end - p
                pieces.append((p, node, off, n))
                p += n
                key += n
            r += 1
    return pieces, p, keys.tail[p - ints:end - ints] if p < end else []


def _run_up(keys, p: int, n: int, key: int) -> int:
    """How many of `keys[p:p + n]` go on key, key + 1, ... without a gap (at least
    1: `keys[p]` is `key`), for keys that increase (a request's integer keys, then
    keys of other kinds): a binary search, exact since `keys[p + m] == key + m`
    holds for every m up to the answer and for none past it.

    Speed: a bucket spans several hash entries (`VllmCache.ENTRIES_PER_BUCKET`),
    and a run of keys often ends inside one (a request's last new entry, an old
    entry before new ones): this replaced a step per key up to the run's end."""
    lo, hi = 1, n - 1  # keys[p + lo - 1] continues the run; keys[p + n - 1] does not
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if keys[p + mid - 1] == key + mid - 1:
            lo = mid
        else:
            hi = mid - 1
    return lo
