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
from typing import Callable, TextIO

from .calibrate import cmd_calibrate
from .convert import cmd_convert
from .cost import cmd_cost, cmd_models
from .generate import cmd_generate
from .replay import cmd_check, cmd_replay, cmd_validate
from .sweep import cmd_sweep, cmd_sweep_merge

__all__ = ["COMMANDS"]


COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO, TextIO], int]] = {
    "replay": cmd_replay,
    "validate": cmd_validate,
    "check": cmd_check,
    "convert": cmd_convert,
    "generate": cmd_generate,
    "cost": cmd_cost,
    "models": cmd_models,
    "sweep": cmd_sweep,
    "sweep-merge": cmd_sweep_merge,
    "calibrate": cmd_calibrate,
}
