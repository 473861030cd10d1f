"""The engine: the clock and the event order, every transition of a request, folding
of steady decode stretches, and the statistics of a run. Asks a policy
(`policies/`) what to run; does no input or output of its own."""
__all__: list[str] = []
