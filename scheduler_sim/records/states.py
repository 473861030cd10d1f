"""The request lifecycle states (L1, docs/spec.md).

Every terminal state is numbered after PREEMPTED, so "is this request done?"
is one comparison: ``status > RequestStatus.PREEMPTED``. Inserting a new
non-terminal state means inserting it above PREEMPTED.
"""
from __future__ import annotations

import enum

__all__ = ["RequestStatus"]


class RequestStatus(enum.IntEnum):
    """Where a request is in its life; the lower-case name is what events print."""

    WAITING = 1
    RUNNING = 2
    PREEMPTED = 3
    # Everything below is terminal.
    FINISHED_STOPPED = 4
    FINISHED_LENGTH_CAPPED = 5
    FINISHED_ABORTED = 6
    FINISHED_IGNORED = 7
    FINISHED_TIMEOUT = 8
    FINISHED_ERROR = 9

    @property
    def label(self) -> str:
        """The name as it appears in events and summaries (`finished_stopped`)."""
        return self.name.lower()

    @property
    def is_finished(self) -> bool:
        """True for every terminal state."""
        return self > RequestStatus.PREEMPTED
