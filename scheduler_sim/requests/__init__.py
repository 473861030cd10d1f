"""The request model: a request's progress and residency, waiting queues in their
orders, round-robin rotation and closed-loop client slots."""
__all__: list[str] = []
