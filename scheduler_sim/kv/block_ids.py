"""The int objects of block numbers, shared by every allocator alive at once.

Block numbers above 256 are objects of 28 bytes each; the replicas of a fleet
each end up holding every number of their pools in their tables, free lists
and prefix caches, so they take their never-used numbers from one list
(`block_ids`) and share one object per number rather than one per replica.
"""
from __future__ import annotations

import threading
import weakref

__all__ = ["block_ids", "grow_ids"]


class _BlockIds(list):
    """The block numbers handed out so far, as int objects (a list that can be
    referred to weakly)."""

    __slots__ = ("__weakref__",)


_current_ids = weakref.ref(_BlockIds())  # dead at once: the first allocator makes one
# Held while the shared list grows: allocators may run in threads (a sweep on a
# thread pool), and two growing it at once would number blocks twice.
_ids_growing = threading.Lock()


def block_ids() -> _BlockIds:
    """The int objects of block numbers, shared by every allocator alive now.

    Block numbers above 256 are objects of 28 bytes each; every allocator
    takes its never-used ones from this one list, so that the replicas of a
    fleet, each of which ends up holding every number of its pool in its
    tables, free lists and prefix cache, share one object per number rather
    than one per replica. It grows to the most blocks any allocator has used
    and lives as long as any allocator does."""
    global _current_ids
    ids = _current_ids()
    if ids is None:
        ids = _BlockIds()
        _current_ids = weakref.ref(ids)
    return ids


def grow_ids(ids: _BlockIds, end: int) -> None:
    """Extend the shared list `ids` to hold the numbers below `end`."""
    with _ids_growing:
        if end > len(ids):
            ids.extend(range(len(ids), end))
