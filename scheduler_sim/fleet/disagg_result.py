"""What a disaggregated run reports (`disagg_result`): each trace request counted
once, at its one end (never a prefill replica's prompt-only run), the dispatches
of every replica, and the KV copies (`transfers`, `transfers_aborted`,
`transfer_tokens`, `transfer_time_mean`, `transfer_time_max`); per replica, its
summary with its `role`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine.run_stats import RunStats
from .fleet import FleetResult, fleet_summary, replica_summaries

if TYPE_CHECKING:  # only named in annotations; disagg.py imports this module
    from .disagg import DisaggFleet

__all__ = ["disagg_result"]

# The request-level counters of RunStats: the fleet's come from each trace
# request's one end, never from a prefill replica's prompt-only run.
_REQUEST_LEVEL = ("status_counts", "samples", "useful_rows", "replay_rows", "preemptions",
                  "cached_tokens", "completed_input", "completed_output", "slo_met",
                  "deadlines", "deadline_misses")


def disagg_result(fleet: DisaggFleet, first: int, stalled: bool, keep: bool) -> FleetResult:
    """The result of a disaggregated run (see the module): `first` is its first arrival,
    `keep` whether its requests are kept (`keep_requests`)."""
    engines = fleet.engines
    roles = ["prefill" if i < fleet.prefills else "decode" for i in range(len(engines))]
    per_replica = replica_summaries(engines, first, roles)
    stats = RunStats.combined([e.stats for e in engines])
    final = fleet.final
    for name in _REQUEST_LEVEL:
        setattr(stats, name, getattr(final, name))
    stats.requests = sum(fleet.routed[:fleet.prefills])
    stats.output_tokens -= fleet.handed_off  # the prefill replicas' hidden tokens
    summary = fleet_summary(engines, stats, first)
    report = fleet.clock.report
    steps = fleet.transfer_steps
    summary.update({
        "transfers": fleet.transfers,
        "transfers_aborted": fleet.transfers_aborted,
        "transfer_tokens": fleet.transfer_tokens,
        "transfer_time_mean": report(sum(steps) / len(steps)) if steps else None,
        "transfer_time_max": report(max(steps)) if steps else None,
    })
    requests = sorted(fleet.finals, key=lambda r: r.index) if keep else []
    return FleetResult(fleet.policy_name, summary, requests, stalled, fleet.clock,
                       fleet.options, [], per_replica)
