"""Records and configuration, the bottom layer: exception types, the option table,
request states, event records, the parsed workload and the clock. Imports
nothing else of the package."""
__all__: list[str] = []
