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

    # Each member's lower-case name, as events and summaries print it
    # (`finished_stopped`), and whether it is terminal: plain attributes of the
    # member, set below (issue 26: as properties each read cost about 0.9 us, the
    # enum's `name` being a descriptor itself; a request's status is read so at its
    # end, in every event record and every per-request row).
    label: str
    is_finished: bool


for _status in RequestStatus:
    _status.label = _status.name.lower()
    _status.is_finished = _status > RequestStatus.WAITING_FOR_REMOTE_KV
del _status
