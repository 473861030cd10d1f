"""`python -m scheduler_sim`: the same as the `scheduler-sim` command.

Its first statements hold SIGINT and SIGTERM in a list until the simulator
has loaded (see cli/entry.py), using only the built-in `_signal`, so that a
Ctrl-C in the few milliseconds it takes to load cli/entry.py is held too.
"""
import _signal

_held: list = []
_interruptible = _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
_terminable = _signal.getsignal(_signal.SIGTERM) == _signal.SIG_DFL
if _interruptible:
    _signal.signal(_signal.SIGINT, lambda number, frame: _held.append(number))
if _terminable:
    _signal.signal(_signal.SIGTERM, lambda number, frame: _held.append(number))

from .cli.entry import main_entry  # noqa: E402  (after the signals are held)

raise SystemExit(main_entry((_held, _interruptible, _terminable), own_process=True))
