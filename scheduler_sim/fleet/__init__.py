"""Fleets: several engines serving one trace behind a router (`fleet.py`, `routers.py`)."""
from .fleet import Fleet, FleetResult
from .routers import ROUTERS, make_router

__all__ = ["Fleet", "FleetResult", "ROUTERS", "make_router"]
