"""The summary's fields about host memory (README "Host memory", spec §15 H6).

`host_summary` reads one replica's `HostMemory` (kv/host_memory.py), or a
fleet's, and writes the fields `HOST_RUN_FIELDS` names, in the run's unit; the
engine adds them to a run's summary only when host memory is modelled
(`Options.host`), so that every other summary stays as it was.
"""
from __future__ import annotations

import math

from ..kv.host_link import IN, OUT
from ..kv.host_memory import HostMemory
from ..records.clock import Clock

__all__ = ["HOST_RUN_FIELDS", "host_summary", "survival_counts"]

# The summary's fields about host memory (only when it is on: `Options.host`).
HOST_RUN_FIELDS = (
    "host_kv_blocks", "host_peak_blocks", "host_stores", "host_stored_blocks",
    "host_evicted_blocks", "host_loads", "host_loaded_tokens", "swap_outs", "swap_ins",
    "swapped_in_tokens", "swap_refused", "loads_aborted", "load_wait_mean", "load_wait_max",
    "link_out_bytes", "link_in_bytes", "link_out_busy", "link_in_busy",
    "link_out_utilisation", "link_in_utilisation", "recompute_avoided_tokens",
    "resumes", "rebuilt_from_gpu", "rebuilt_from_host", "rebuilt_by_recompute",
    "survival_p10", "survival_p50", "survival_p90",
)


def host_summary(hosts: list[HostMemory], clock: Clock, span: int) -> dict:
    """The summary's host-memory fields (`HOST_RUN_FIELDS`) of one replica's host
    memory, or of a fleet's (summed; utilisation is the replicas' mean), times in
    the run's unit; utilisation is a direction's busy time over the run's `span`
    of steps."""
    report = clock.report
    links = [h.link for h in hosts if h.link is not None]

    def total(name: str) -> int:
        return sum(getattr(h, name) for h in hosts)

    loads = total("loads_done") + total("swap_ins")
    waited = total("load_wait")
    survival = survival_counts(hosts)
    resumed = sum(count for _, count in survival)

    def share(p: int) -> float | None:
        # Nearest rank over (fraction, count) pairs: the value at rank ceil(p n / 100).
        if not resumed:
            return None
        rank, seen = max(1, math.ceil(p / 100 * resumed)), 0
        for value, count in survival:
            seen += count
            if seen >= rank:
                return value

    def busy(direction: int) -> float | None:
        return report(sum(link.busy[direction] for link in links)) if links else None

    def used(direction: int) -> float | None:
        if not links or span <= 0:
            return None
        return round(sum(link.busy[direction] for link in links) / (span * len(links)), 6)

    def moved(direction: int) -> int:
        return sum(h.link.blocks[direction] * h.block_bytes for h in hosts if h.link)

    out = {
        "host_kv_blocks": sum(h.tier.capacity for h in hosts),
        "host_peak_blocks": sum(h.tier.peak_used for h in hosts),
        "host_stores": total("stores"),
        "host_stored_blocks": total("stored_blocks"),
        "host_evicted_blocks": sum(h.tier.evicted for h in hosts),
        "host_loads": total("loads_done"),
        "host_loaded_tokens": total("loaded_tokens"),
        "swap_outs": total("swap_outs"),
        "swap_ins": total("swap_ins"),
        "swapped_in_tokens": total("swapped_in_tokens"),
        "swap_refused": total("swap_refused"),
        "loads_aborted": total("loads_aborted"),
        "load_wait_mean": report(waited / loads) if loads else None,
        "load_wait_max": report(max(h.load_wait_max for h in hosts)) if loads else None,
        "link_out_bytes": moved(OUT),
        "link_in_bytes": moved(IN),
        "link_out_busy": busy(OUT),
        "link_in_busy": busy(IN),
        "link_out_utilisation": used(OUT),
        "link_in_utilisation": used(IN),
        "recompute_avoided_tokens": total("loaded_tokens") + total("swapped_in_tokens"),
        "resumes": total("resumes"),
        "rebuilt_from_gpu": total("rebuild_gpu"),
        "rebuilt_from_host": total("rebuild_host"),
        "rebuilt_by_recompute": total("rebuild_computed"),
        "survival_p10": share(10),
        "survival_p50": share(50),
        "survival_p90": share(90),
    }
    assert tuple(out) == HOST_RUN_FIELDS, "host fields drifted from HOST_RUN_FIELDS"
    return out


def survival_counts(hosts: list[HostMemory]) -> list[tuple[float, int]]:
    """(surviving fraction, resumes) pairs of host memories, by fraction (H5): what
    the summary's percentiles and the report's chart read."""
    counts: dict[float, int] = {}
    for host in hosts:
        for value, count in host.survival.items():
            counts[value] = counts.get(value, 0) + count
    return sorted(counts.items())

