"""The process around the command line: what runs first, and the last status.

`main_entry` is the console script and `python -m scheduler_sim`. This
module imports nothing of the simulator at its top, so that the process is
set up before the simulator loads (a few hundred milliseconds of imports):

- SIGINT and SIGTERM that arrive while it loads wait for the end of the
  import, and then end the process as they would later: one line
  (`scheduler-sim: interrupted`, `scheduler-sim: terminated`) and status
  130 or 143, never a traceback of the import. A signal that the parent
  ignored stays ignored;
- then SIGTERM (unless ignored) raises `Terminated` wherever the program
  is, so that the cleanup Ctrl-C runs (no temporary file left behind) runs
  for it too; SIGXFSZ is ignored, so that a write past `ulimit -f` fails
  with EFBIG and is reported instead of killing the process; characters
  standard output cannot encode are written as backslash escapes;
- once `main` has returned, SIGINT and SIGTERM take their default action
  again (there is nothing left to clean up), and the last flush of
  standard output and error cannot fail at exit;
- in a process that loads the simulator here (the command's own process, not
  a program that had imported it already), the cyclic garbage collector skips
  what lives until the exit: the objects the imports make, and at the end
  every object then alive (`_Collector`).

Before the first line of this package runs (the interpreter's own start-up,
a few milliseconds), a Ctrl-C is Python's to handle.
"""
from __future__ import annotations

import _signal as signal  # built in: `signal` would load enum first, a window for a Ctrl-C
import gc  # built in
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before the handlers
if TYPE_CHECKING:
    from types import FrameType
    from typing import TextIO

__all__ = ["main_entry", "hold_early", "PROG", "EXIT_INTERRUPTED", "EXIT_TERMINATED"]

PROG = "scheduler-sim"  # the program's name in every message (imported by the commands)
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM
# Container objects allocated (net) before the collector's young pass, in the
# command's own process (`_Collector.loaded`; Python's default is 700).
YOUNG_OBJECTS = 10_000


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    from ..records import interrupts  # loaded by then (`main_entry`)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it at once
    interrupts.mark(signal.SIGTERM)  # a real signal, not an interrupt a policy raised
    raise interrupts.Terminated


def _settle(stream: TextIO | None) -> None:
    """Flush `stream` now; if that fails, point its descriptor at /dev/null so that the
    interpreter's own flush at exit cannot fail (and print a traceback) again."""
    if stream is None:
        return
    try:
        stream.flush()
    except (OSError, ValueError):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass


def _say(word: str) -> None:
    """The one line a signal before `main` leaves on standard error."""
    try:
        sys.stderr.write(f"{PROG}: {word}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass  # no standard error: the status says it


class _Collector:
    """The cyclic garbage collector around the command, in a process that loads the
    simulator in `main_entry` (the command's own process): what lives until the
    exit is moved out of the collector's sight (`gc.freeze`), since its passes
    over it can free nothing. Speed (issue 26), each a fixed cost of every
    process (callgrind, PYTHONHASHSEED=0; benchmarks/README.md, "twelfth steps:
    the fixed cost of a process"):

    - `loading`/`loaded`: the collector paused while the simulator's modules load
      (its young passes there walk objects that nearly all live to the exit),
      and those objects frozen after: later full passes, the run's one among
      them, skip the modules' objects (about 20,000);
    - `loaded` also lets the young generation grow to `YOUNG_OBJECTS` container
      objects before a pass, not Python's 700: the simulator makes few reference
      cycles, and a fleet keeps many long-lived containers (its replicas' caches)
      that each older pass walks again. The whole Mooncake trace on 64
      round-robin replicas spent 0.255 s of 5.95 s in 115 passes, 0.044 s in 7
      (`gc.callbacks`); one engine 0.021 s; a million generated requests keep
      their flat 26 MB (benchmarks/README.md, "thirteenth steps", lead). At most
      that many objects' worth of cyclic garbage waits for a pass: memory stays
      bounded;
    - `exiting`: once the status is decided and every output written, every
      object then alive frozen: the interpreter's passes at exit (one over
      everything before the modules are cleared, three after) skip them; 60
      million instructions of the Azure replay's 9.03 billion, 25 million of a
      six-request replay's 0.58 billion. An object in a reference cycle is then
      left to the end of the process (Python does not promise to finalize
      objects alive at exit; every output is committed or removed before).

    Only the command's own process is touched: the console script (`command`) and
    `python -m scheduler_sim` say so (`own_process`), and then only if the
    simulator was not loaded before. A program that calls `main_entry` itself (a
    test, a script that goes on after it) keeps its collector as it was, its own
    objects included."""

    def __init__(self, own_process: bool = False) -> None:
        self.owned = own_process and "scheduler_sim.cli.main" not in sys.modules
        self.enabled = gc.isenabled()

    def loading(self) -> None:
        if self.owned:
            gc.disable()

    def loaded(self) -> None:
        if self.owned:
            gc.freeze()
            gc.set_threshold(YOUNG_OBJECTS, *gc.get_threshold()[1:])
            if self.enabled:
                gc.enable()

    def exiting(self) -> None:
        if self.owned:
            gc.freeze()


def hold_early() -> tuple[list[int], bool, bool]:
    """Hold SIGINT and SIGTERM (unless the parent ignored them) in a list, from now
    until `main_entry` has loaded the simulator: `(held, interruptible, terminable)`.
    `python -m scheduler_sim` does the same with its first statements, before this
    module is loaded."""
    held: list[int] = []
    interruptible = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    terminable = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # ignored: left so
    for signum, wanted in ((signal.SIGINT, interruptible), (signal.SIGTERM, terminable)):
        if wanted:
            signal.signal(signum, lambda number, frame: held.append(number))
    return held, interruptible, terminable


def command() -> int:
    """The console script `scheduler-sim`: `main_entry` in a process of its own."""
    return main_entry(own_process=True)


def main_entry(early: tuple[list[int], bool, bool] | None = None, *,
               own_process: bool = False) -> int:
    """The console script (`command`) and `python -m scheduler_sim`: set the process up,
    load and run `main`, and return its status (the script's wrapper exits with it).
    `early` is what `hold_early` returned when the caller held the signals already;
    `own_process`: the process is the command's, to end with it (`_Collector`)."""
    pending, interruptible, terminable = early if early is not None else hold_early()
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    collector = _Collector(own_process)
    collector.loading()
    try:
        from .main import main  # the whole simulator; a signal meanwhile only waits
    finally:
        collector.loaded()
    from ..records.interrupts import Terminated, has_ended
    try:
        if terminable:
            signal.signal(signal.SIGTERM, _on_sigterm)
        if interruptible:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if signal.SIGTERM in pending:
            raise Terminated
        if pending:
            raise KeyboardInterrupt
        if hasattr(sys.stdout, "reconfigure"):
            sys.stdout.reconfigure(errors="backslashreplace")
        status = main()
    except KeyboardInterrupt:
        # Before `main`; in `main` before its command could report it; or after
        # `main` had said its last word, before it returned (then nothing more).
        status = EXIT_INTERRUPTED
        if not has_ended():
            _say("interrupted")
    except Terminated:
        status = EXIT_TERMINATED
        if not has_ended():
            _say("terminated")
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    if terminable:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _settle(sys.stdout)
    _settle(sys.stderr)
    collector.exiting()
    # The status is decided: keep the interpreter from replacing it. CPython (seen
    # on 3.11) notes a KeyboardInterrupt that escaped code run from a
    # source string (`exec` of a string: dataclasses and namedtuple make their
    # methods so) and, once the process exits, ends it by SIGINT instead of its
    # status, even when the program caught the interrupt further up. Running a
    # string that ends normally clears the note. Seen: SIGINT about 100 ms into
    # `validate`, in about one run in ten (tests/test_startup.py pins it with an
    # interrupt raised in an `exec`).
    exec("pass")
    return status
