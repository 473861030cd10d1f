"""`serial`: one request at a time, in queue order (§6).

The baseline that continuous batching is measured against: the next request
is admitted only when the current one has ended. Admission still reserves
credits and still waits for draining blocks; chunked prefill still applies.
A waiting head is reported as `admission_blocked` with reason `serial`.
"""
from __future__ import annotations

from .continuous import ContinuousPolicy

__all__ = ["SerialPolicy"]


class SerialPolicy(ContinuousPolicy):
    """Continuous scheduling with at most one running request."""

    name = "serial"
    running_limit = 1
    limit_reason = "serial"
