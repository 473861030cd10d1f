"""The command line: argv, the commands and their exit codes, and the pytest plugin
(loaded only by pytest)."""
__all__: list[str] = []
