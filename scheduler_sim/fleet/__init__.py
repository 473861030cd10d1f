"""Fleets: several engines serving one trace behind a router.

`fleet.py` runs independent replicas, `lockstep.py` data-parallel ranks that
step together, `disagg.py` prefill and decode replicas with KV copies between
them, `routers.py` picks a replica for each arrival.
"""
from __future__ import annotations

from ..records.options import Options
from .disagg import DisaggFleet
from .fleet import Fleet, FleetResult
from .lockstep import LockstepFleet
from .routers import ROUTERS, make_router

__all__ = ["DisaggFleet", "Fleet", "FleetResult", "LockstepFleet", "ROUTERS", "make_router",
           "make_fleet"]


def make_fleet(workload, options: Options, policy: str, **kwargs) -> Fleet:
    """The fleet the options describe: prefill and decode replicas, lockstep ranks, or
    independent replicas."""
    if options.disagg:
        return DisaggFleet(workload, options, policy, **kwargs)
    cls = LockstepFleet if options.dp_lockstep else Fleet
    return cls(workload, options, policy, **kwargs)
