"""Input and output: reading and validating traces, importing public trace formats,
generating synthetic ones, checking expectations (and their JUnit XML), tables,
JSON and CSV, and writing files whole."""
__all__: list[str] = []
