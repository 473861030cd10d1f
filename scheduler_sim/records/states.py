"""The request lifecycle states (L1, docs/spec.md).

Every terminal state is numbered after the live ones, so "is this request
done?" is one comparison: ``status > RequestStatus.WAITING_FOR_REMOTE_KV``.
Inserting a new non-terminal state means inserting it above the first
terminal one.
"""
from __future__ import annotations

import enum

__all__ = ["RequestStatus"]


class RequestStatus(enum.IntEnum):
    """Where a request is in its life; the lower-case name is what events print."""

    WAITING = 1
    RUNNING = 2
    PREEMPTED = 3
    # Admitted on a decode replica, holding blocks while its prompt's KV is copied
    # from the prefill replica (fleet/disagg.py); not scheduled until it lands.
    WAITING_FOR_REMOTE_KV = 4
    # Everything below is terminal.
    FINISHED_STOPPED = 5
    FINISHED_LENGTH_CAPPED = 6
    FINISHED_ABORTED = 7
    FINISHED_IGNORED = 8
    FINISHED_TIMEOUT = 9
    FINISHED_ERROR = 10

    @property
    def label(self) -> str:
        """The name as it appears in events and summaries (`finished_stopped`)."""
        return self.name.lower()

    @property
    def is_finished(self) -> bool:
        """True for every terminal state."""
        return self > RequestStatus.WAITING_FOR_REMOTE_KV
