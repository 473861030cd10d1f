"""Where a folded stretch must stop: at the next outside event (the engine's
`_until`), or, behind a blocked head, past the arrivals before it (`past_arrivals`);
before the completion that finishes one of its decoders (`steady_rows`).
Shared by the folds of decodes (folding.py) and of chunk runs (chunk_run.py)."""
from __future__ import annotations

__all__ = ["MANY_LEFT", "fewest_left", "past_arrivals", "steady_rows"]

INF = float("inf")
MANY_LEFT = 1 << 62  # (above any request's outputs left: where a search for the fewest starts)


def fewest_left(reqs: list) -> int:
    """The fewest outputs any of `reqs` has left (`steady_rows`' first answer alone,
    for a caller that knows the rest)."""
    least = MANY_LEFT
    for req in reqs:
        left = req.output_tokens - req.outputs
        if left < least:
            least = left
    return least


def steady_rows(reqs: list) -> tuple[int, int] | None:
    """The fewest outputs any of `reqs` (written decoders) has left and the sum of their
    `resident` (the contexts of their next rows), or None if one's row is replayed
    (its `resident` below its `high_water`: not a steady decode).

    Speed: one pass in Python, where three scans in C were, each a chain of `map`s
    of attrgetters (which read a slot by the generic look-up; the loop's reads are
    specialised): 22 requests in 5.2 us against 16.6 us; 0.986x the instructions
    of the first 2,000 Mooncake requests under vllm with the folds' look, 0.996x
    more with the chunk runs' (benchmarks/README.md, "thirty-first steps", ft35)."""
    least = MANY_LEFT
    contexts = 0
    for req in reqs:
        left = req.output_tokens - req.outputs
        if left < least:
            least = left
        r = req.resident
        if r < req.high_water:
            return None
        contexts += r
    return least, contexts


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
