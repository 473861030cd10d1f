"""The track numbers of `replay --perfetto`: each request's track is its line in
the trace file, found without a table of every request (see `perfetto`)."""
from __future__ import annotations

from typing import Any

__all__ = ["TrackNumbers"]


class TrackNumbers:
    """Each request's track number, its line in the trace file, for the requests of
    `workload`; `reader` gives one policy's run its own lookup."""

    def __init__(self, workload: Any, sample: int = 1) -> None:
        self.workload = workload
        self.sample = sample  # every sample-th request (by trace line) has a track

    def reader(self) -> "_TrackReader":
        return _TrackReader(self.workload)


class _TrackReader:
    """Track numbers in the order requests arrive: the trace's requests are read
    again, in replay order, only as far as the request asked for. What is read
    past (arrivals that reach the replicas of a fleet in another order at one
    time) waits in `ahead`; a request a prefill replica hands to a decode
    replica waits in `handed` (it arrives a second time). So it holds a few
    entries, not one per request."""

    def __init__(self, workload: Any) -> None:
        self.workload = workload
        self.specs: Any = None
        self.ahead: dict[str, int] = {}
        self.handed: dict[str, int] = {}

    def line(self, rid: str) -> int:
        """The track number of `rid` (0 if the trace does not have it)."""
        found = self.handed.pop(rid, None)
        if found is None:
            found = self.ahead.pop(rid, None)
        if found is not None:
            return found
        if self.specs is None:
            self.specs = iter(self.workload.arrivals())
        ahead = self.ahead
        for spec in self.specs:
            if spec.id == rid:
                return spec.index
            ahead[spec.id] = spec.index
        return 0

    def hand_off(self, rid: str, tid: int) -> None:
        """`rid` left a prefill replica; it will arrive at a decode replica."""
        self.handed[rid] = tid
