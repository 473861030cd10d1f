"""The fleet's agenda: each replica's next boundary, and the first of them.

A fleet's clock jumps, like one engine's, from one boundary to the next
(E7). Each replica says when its next boundary is (`Engine.next_boundary`,
after its step); the fleet adds what it holds itself (the next arrival to
route, a copy landing, a trace action). This is the replicas' part: `set`
records a replica's next boundary, `due(t)` gives the replicas whose
boundary is now, in replica order, and `peek` the earliest pending one.
Boundaries sit in a heap; a replica's boundary moved since it was pushed
leaves a stale entry, skipped when it reaches the top.
"""
from __future__ import annotations

import heapq

__all__ = ["ReplicaAgenda"]

INF = float("inf")


class ReplicaAgenda:
    """Next boundary per replica (`at[i]`, infinity: none) and one `peek` over them."""

    __slots__ = ("at", "_heap")

    def __init__(self, replicas: int) -> None:
        self.at = [INF] * replicas
        self._heap: list[tuple[float, int]] = []  # (boundary, replica), stale ones too

    def set(self, replica: int, when: float) -> None:
        """Replica `replica`'s next boundary is `when` (infinity: it has none)."""
        self.at[replica] = when
        if when != INF:
            heapq.heappush(self._heap, (when, replica))

    def due(self, t: float) -> list[int]:
        """The replicas whose next boundary is at or before `t`, each once, in order
        (taken off the agenda until `set` again)."""
        heap = self._heap
        at = self.at
        out = []
        while heap and heap[0][0] <= t:
            when, i = heapq.heappop(heap)
            if at[i] == when:
                out.append(i)
        # (most often one replica: a set and a sort only for more; a replica set
        # twice at one time has two entries)
        return sorted(set(out)) if len(out) > 1 else out

    def peek(self) -> float:
        """The earliest pending boundary of any replica (infinity: none)."""
        heap = self._heap
        at = self.at
        while heap and at[heap[0][1]] != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else INF
