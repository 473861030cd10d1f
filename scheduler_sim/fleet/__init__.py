"""Fleets: several engines serving one trace behind a router (`fleet.py`, `routers.py`),
or prefill and decode replicas with KV copies between them (`disagg.py`)."""
from .disagg import DisaggFleet
from .fleet import Fleet, FleetResult
from .routers import ROUTERS, make_router

__all__ = ["DisaggFleet", "Fleet", "FleetResult", "ROUTERS", "make_router"]
