"""Fleets: several engines serving one trace behind a router.

`fleet.py` runs independent replicas, `lockstep.py` data-parallel ranks that
step together, `routers.py` picks a replica for each arrival.
"""
from __future__ import annotations

from ..records.options import Options
from .fleet import Fleet, FleetResult
from .lockstep import LockstepFleet
from .routers import ROUTERS, make_router

__all__ = ["Fleet", "FleetResult", "LockstepFleet", "ROUTERS", "make_router", "make_fleet"]


def make_fleet(workload, options: Options, policy: str, **kwargs) -> Fleet:
    """The fleet the options describe (lockstep ranks or independent replicas)."""
    cls = LockstepFleet if options.dp_lockstep else Fleet
    return cls(workload, options, policy, **kwargs)
