"""Where a folded stretch must stop: at the next outside event (the engine's
`_until`), or, behind a blocked head, past the arrivals before it (`past_arrivals`).
Shared by the folds of decodes (folding.py) and of chunk runs (chunk_run.py)."""
from __future__ import annotations

__all__ = ["past_arrivals"]

INF = float("inf")


def past_arrivals(engine, until: float, reason: str) -> float:
    """Where a stretch of written rows behind a head blocked for `reason` must stop:
    `until` (the next outside event), or past the arrivals before it when the policy
    promises that they only join the queue behind the head (`Policy.arrivals_wait`).
    The engine's loop takes them at their own times, while the stretch's last
    dispatch is in flight, as it takes arrivals during any dispatch. Not with
    clients (their sends come with the arrivals), a waiting timeout (an arrival's
    could fall inside the stretch) or a plugin (never asked, as `repeats_blocked`
    is not); the caller checks that no listener writes the stretch's lines (an
    arrival's would come after them).

    Speed: replaying the Mooncake trace under vllm with prefix caching, the policy
    was asked 30,598 times, 30,249 once folds of decodes went past arrivals
    (benchmarks/README.md, "twenty-sixth steps": few folds meet one), and with
    chunk runs' folds too, see there."""
    if (until == INF or engine.clients is not None or engine.agenda.timeout is not None
            or engine._plugin or not engine.policy.arrivals_wait(reason)):
        return until
    later = engine.agenda.peek(engine.now, False, True, False)
    horizon = engine.link.horizon
    return later if later < horizon else horizon
