"""Run summaries: the fields, the latency metrics and the per-request record (§12).

This module names what a summary holds (`REQUEST_FIELDS`, `RUN_FIELDS` and
their fleet and time variants) and computes one request's latencies and
record; the per-run statistics are run_stats.py's `RunStats`. Everything is
counted in clock steps and reported in the run's unit (`clock.Clock`: ticks,
or seconds under a cost model).

The latency metrics carry vLLM's benchmark names. A request's latencies
count from when the server received it (`sent`: its trace arrival, or the
moment a client slot freed under `max_concurrency`):

- queue delay: admitted - sent, over requests that were admitted;
- client wait: sent - arrival, over requests that were sent;
- TTFT: first_token - sent, over requests that produced an output;
- TPOT: (finished - first_token) / (N - 1), over completed requests with N > 1;
- ITL: every gap between two consecutive outputs of a request;
- E2EL: finished - sent, over completed requests.

Each is given as mean, p50, p90, p99 and max; percentiles are nearest-rank:
the value at rank ceil(p/100 * n) of the sorted sample. Throughputs divide
by the duration, from the first arrival to the last completion.
"""
from __future__ import annotations

import math
from typing import Any

from ..records.clock import Clock
from ..records.states import RequestStatus
from ..requests.request import Request

__all__ = ["request_record", "latencies", "meets_slo", "nearest_rank", "REQUEST_FIELDS",
           "RUN_FIELDS", "METRICS", "PERCENTILES", "STATS", "TIME_REQUEST_FIELDS",
           "TIME_RUN_FIELDS", "FLEET_REQUEST_FIELDS", "FLEET_RUN_FIELDS", "COMPLETED",
           "STATUS_FIELDS"]

PERCENTILES = (50, 90, 99)
STATS = ("mean", "p50", "p90", "p99", "max")
METRICS = ("queue_delay", "client_wait", "ttft", "tpot", "itl", "e2el")

COMPLETED = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)

# Per-request fields (what `expect` with an `id` may compare, and --requests-csv's columns).
REQUEST_FIELDS = (
    "id", "arrival", "sent", "admitted", "first_token", "finished", "status",
    "client_wait", "queue_delay", "ttft", "tpot", "e2el",
    "preemptions", "replay_rows", "useful_rows", "outputs", "prompt_tokens", "output_tokens",
    "max_tokens", "cached_tokens", "priority", "deadline", "deadline_missed", "slo_met",
)
# Fields only a fleet's records have (fleet/): per request, and per run under
# data-parallel lockstep or disaggregation.
FLEET_REQUEST_FIELDS = ("replica", "transfer_time")
FLEET_RUN_FIELDS = ("lockstep_steps", "dummy_steps", "lockstep_wait", "transfers",
                    "transfers_aborted", "transfer_tokens", "transfer_time_mean",
                    "transfer_time_max")
# Per-request fields that are times, in the run's unit.
TIME_REQUEST_FIELDS = ("arrival", "sent", "admitted", "first_token", "finished", "client_wait",
                       "queue_delay", "ttft", "tpot", "e2el", "deadline")

STATUS_FIELDS = tuple(s.label for s in RequestStatus if s.is_finished)

# Per-run fields (what `expect` without `id` or `at` may compare).
RUN_FIELDS = (
    ("requests", "iterations", "empty_iterations", "makespan", "duration", "completed")
    + STATUS_FIELDS
    + ("request_throughput", "input_throughput", "output_throughput",
       "total_token_throughput")
    + tuple(f"{m}_{s}" for m in METRICS for s in STATS)
    + ("slo_met", "slo_attainment", "request_goodput", "deadlines", "deadline_misses",
       "prompt_tokens", "decode_tokens", "recompute_tokens", "padding_rows", "output_tokens",
       "useful_rows", "replay_rows", "cached_tokens", "preemptions", "peak_reserved",
       "peak_allocated", "mean_batch_rows", "mean_batch_tokens", "busy_seconds",
       "model_flops", "hbm_bytes", "model_flops_utilisation",
       "hbm_bandwidth_utilisation")
)
# Per-run fields that are times, in the run's unit.
TIME_RUN_FIELDS = ("makespan", "duration") + tuple(f"{m}_{s}" for m in METRICS for s in STATS)


def nearest_rank(sorted_values: list, p: float):
    """The p-th percentile by nearest rank of an ascending list (None if empty)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def latencies(req: Request, overhead: int = 0) -> dict[str, float | int | None]:
    """A request's latencies in clock steps (None where they do not apply); `overhead`
    steps of serving outside the engine are added to TTFT and end-to-end latency."""
    sent = req.sent
    completed = req.status in COMPLETED
    out = {"client_wait": None if sent is None else sent - req.arrival,
           "queue_delay": None, "ttft": None, "tpot": None, "e2el": None}
    if sent is None:
        return out
    if req.admitted_at is not None:
        out["queue_delay"] = req.admitted_at - sent
    if req.first_token_at is not None:
        out["ttft"] = req.first_token_at - sent + overhead
    if completed:
        out["e2el"] = req.finished_at - sent + overhead
        if req.output_tokens > 1:
            out["tpot"] = (req.finished_at - req.first_token_at) / (req.output_tokens - 1)
    return out


def meets_slo(latency: dict[str, Any], slo, clock: Clock) -> bool:
    """Whether a completed request's reported latencies are within every objective."""
    for metric, limit in slo:
        value = latency[metric]
        if value is not None and clock.report(value) > limit:
            return False
    return True


def request_record(req: Request, clock: Clock | None = None,
                   slo: tuple | None = None) -> dict[str, Any]:
    """The per-request summary of §12 as a JSON-ready dict, times in the run's unit."""
    clock = clock or Clock()
    report = clock.report
    lat = latencies(req, clock.request_overhead)
    completed = req.status in COMPLETED
    missed = None
    if req.deadline is not None:
        missed = not completed or req.finished_at > req.deadline
    met = None
    if slo is not None:
        met = completed and meets_slo(lat, slo, clock)
    record = {
        "id": req.rid,
        "arrival": report(req.arrival),
        "sent": report(req.sent),
        "admitted": report(req.admitted_at),
        "first_token": report(req.first_token_at),
        "finished": report(req.finished_at),
        "status": req.status.label,
        "client_wait": report(lat["client_wait"]),
        "queue_delay": report(lat["queue_delay"]),
        "ttft": report(lat["ttft"]),
        "tpot": report(lat["tpot"]),
        "e2el": report(lat["e2el"]),
        "preemptions": req.preemptions,
        "replay_rows": req.replay_rows,
        "useful_rows": req.useful_rows,
        "outputs": req.outputs,
        "prompt_tokens": req.prompt_tokens,
        "output_tokens": req.output_tokens,
        "max_tokens": req.max_tokens,
        "cached_tokens": req.cached_tokens,
        "priority": req.priority,
        "deadline": report(req.deadline),
        "deadline_missed": missed,
        "slo_met": met,
    }
    if req.replica is not None:  # served by a fleet
        record["replica"] = req.replica
    if req.transfer_time is not None:  # its KV was copied (fleet/disagg.py)
        record["transfer_time"] = report(req.transfer_time)
    return record
