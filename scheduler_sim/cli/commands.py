"""The commands by name: each a small function from parsed arguments to an exit status.

`replay`, `validate` and `check` (`cli.replay`), `convert` (`cli.convert`),
`generate` (`cli.generate`), `cost` and `models` (`cli.cost`), `sweep` and
`sweep merge` (`sweep-merge`, `cli.sweep`), `calibrate` (`cli.calibrate`).
They raise `TraceError`, `UsageError` (an `OutputError` when an output cannot be
written), `PipeClosed` or `InvariantError`; `cli.main` turns those into
messages and exit codes. Files are written through `io.outputs`, and every
line that can carry text from a trace or a file name is printed through
`terminal_text.printable`. Each command hands its outputs and its inputs, as
(flag, path) pairs, to `output_paths.check_output_paths` before it reads anything;
what their flags say is `cli.flags`'.
"""
from __future__ import annotations

import argparse
import importlib
from typing import Callable, TextIO

__all__ = ["COMMANDS", "command"]

# Each command's function and the module of this package it lives in. The module is
# imported when the command runs, not when the command line loads, so that `replay`
# does not load what `convert`, `generate`, `cost` or `sweep` need (the modules are
# many and small; loading them all would cost every run a few milliseconds).
COMMANDS: dict[str, tuple[str, str]] = {
    "replay": ("replay", "cmd_replay"),
    "validate": ("replay", "cmd_validate"),
    "check": ("replay", "cmd_check"),
    "convert": ("convert", "cmd_convert"),
    "generate": ("generate", "cmd_generate"),
    "cost": ("cost", "cmd_cost"),
    "models": ("cost", "cmd_models"),
    "sweep": ("sweep", "cmd_sweep"),
    "sweep-merge": ("sweep", "cmd_sweep_merge"),
    "search": ("search", "cmd_search"),
    "calibrate": ("calibrate", "cmd_calibrate"),
}


def command(name: str) -> Callable[[argparse.Namespace, TextIO, TextIO], int]:
    """The function of command `name` (a key of COMMANDS), its module imported on first
    use."""
    module, function = COMMANDS[name]
    return getattr(importlib.import_module(f".{module}", __package__), function)
