"""Run summaries: per-request records and per-run statistics (SPEC §12).

`RunStats` is fed by the engine as requests end and dispatches run; it keeps
only the numbers percentiles need. Percentiles are nearest-rank: the value
at rank ceil(p/100 * n) of the sorted sample.
"""
from __future__ import annotations

import math
from typing import Any

from .request import Request
from .states import RequestStatus

__all__ = ["RunStats", "request_record", "nearest_rank", "REQUEST_FIELDS", "RUN_FIELDS",
           "METRICS", "PERCENTILES"]

PERCENTILES = (50, 90, 99)
METRICS = ("queue_delay", "ttft", "tpot", "e2e")

# Per-request fields (what `expect` with an `id` may compare).
REQUEST_FIELDS = (
    "id", "arrival", "admitted", "first_token", "finished", "status", "preemptions",
    "replay_rows", "useful_rows", "outputs", "prompt_tokens", "output_tokens",
    "max_tokens", "cached_tokens",
)

_STATUS_FIELDS = tuple(s.label for s in RequestStatus if s.is_finished)

# Per-run fields (what `expect` without `id` or `at` may compare).
RUN_FIELDS = (
    ("requests", "iterations", "empty_iterations", "makespan", "completed")
    + _STATUS_FIELDS
    + tuple(f"{m}_{s}" for m in METRICS for s in ("mean", "p50", "p90", "p99", "max"))
    + ("prompt_tokens", "decode_tokens", "recompute_tokens", "padding_rows", "output_tokens",
       "useful_rows", "replay_rows", "cached_tokens", "preemptions", "peak_reserved",
       "peak_allocated",
       "mean_batch_rows", "mean_batch_tokens", "busy_seconds")
)


def nearest_rank(sorted_values: list, p: float):
    """The p-th percentile by nearest rank of an ascending list (None if empty)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def _round(value: float | None) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, float):
        value = round(value, 4)
        if value.is_integer():
            return int(value)
    return value


def request_record(req: Request) -> dict[str, Any]:
    """The per-request summary of §12 as a JSON-ready dict."""
    return {
        "id": req.rid,
        "arrival": req.arrival,
        "admitted": req.admitted_at,
        "first_token": req.first_token_at,
        "finished": req.finished_at,
        "status": req.status.label,
        "preemptions": req.preemptions,
        "replay_rows": req.replay_rows,
        "useful_rows": req.useful_rows,
        "outputs": req.outputs,
        "prompt_tokens": req.prompt_tokens,
        "output_tokens": req.output_tokens,
        "max_tokens": req.max_tokens,
        "cached_tokens": req.cached_tokens,
    }


class RunStats:
    """Accumulates what the per-run summary needs, request by request."""

    def __init__(self) -> None:
        self.samples: dict[str, list] = {m: [] for m in METRICS}
        self.status_counts = {label: 0 for label in _STATUS_FIELDS}
        self.requests = 0
        self.iterations = 0
        self.empty_iterations = 0
        self.makespan = 0
        self.rows = 0
        self.tokens = 0
        self.prompt_tokens = 0
        self.decode_tokens = 0
        self.recompute_tokens = 0
        self.padding_rows = 0
        self.output_tokens = 0
        self.useful_rows = 0
        self.replay_rows = 0
        self.preemptions = 0
        self.cached_tokens = 0
        self.busy_seconds = 0.0  # modelled GPU time, with a cost model

    def request_ended(self, req: Request) -> None:
        """Fold one request's numbers in, once, when it reaches a terminal state."""
        self.status_counts[req.status.label] += 1
        self.useful_rows += req.useful_rows
        self.replay_rows += req.replay_rows
        self.preemptions += req.preemptions
        self.cached_tokens += req.cached_tokens
        samples = self.samples
        if req.admitted_at is not None:
            samples["queue_delay"].append(req.admitted_at - req.arrival)
        if req.first_token_at is not None:
            samples["ttft"].append(req.first_token_at - req.arrival)
        if req.status in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED):
            samples["e2e"].append(req.finished_at - req.arrival)
            if req.output_tokens > 1:
                samples["tpot"].append(
                    (req.finished_at - req.first_token_at) / (req.output_tokens - 1))

    def summary(self, peak_reserved: int, peak_allocated: int) -> dict[str, Any]:
        """The per-run summary of §12, fields in `RUN_FIELDS` order."""
        out: dict[str, Any] = {
            "requests": self.requests,
            "iterations": self.iterations,
            "empty_iterations": self.empty_iterations,
            "makespan": self.makespan,
            "completed": (self.status_counts["finished_stopped"]
                          + self.status_counts["finished_length_capped"]),
        }
        out.update(self.status_counts)
        for metric in METRICS:
            values = sorted(self.samples[metric])
            out[f"{metric}_mean"] = _round(sum(values) / len(values)) if values else None
            for p in PERCENTILES:
                out[f"{metric}_p{p}"] = _round(nearest_rank(values, p))
            out[f"{metric}_max"] = _round(values[-1]) if values else None
        iters = self.iterations
        out.update({
            "prompt_tokens": self.prompt_tokens,
            "decode_tokens": self.decode_tokens,
            "recompute_tokens": self.recompute_tokens,
            "padding_rows": self.padding_rows,
            "output_tokens": self.output_tokens,
            "useful_rows": self.useful_rows,
            "replay_rows": self.replay_rows,
            "cached_tokens": self.cached_tokens,
            "preemptions": self.preemptions,
            "peak_reserved": peak_reserved,
            "peak_allocated": peak_allocated,
            "mean_batch_rows": _round(self.rows / iters) if iters else None,
            "mean_batch_tokens": _round(self.tokens / iters) if iters else None,
            "busy_seconds": round(self.busy_seconds, 6) if self.busy_seconds else None,
        })
        assert tuple(out) == RUN_FIELDS, "summary fields drifted from RUN_FIELDS"
        return out
