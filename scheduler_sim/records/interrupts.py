"""Whether an interrupt came from a signal, or from code that raised it.

Ctrl-C (SIGINT) raises KeyboardInterrupt wherever the program happens to be,
and the command line turns SIGTERM into `Terminated` the same way. A policy
of your own can raise either itself, and that must be reported as the
policy's failure (exit 3), not as an interrupt (exit 130 or 143). The two
cannot be told apart by where they were raised: a real Ctrl-C lands in the
policy's code as often as anywhere else. So the handlers of this module
note that a signal arrived (`mark`), and `from_signal` answers for an
exception whether a signal can explain it:

- while `watching` (the command line, from its start; a worker process,
  which ignores SIGINT and is stopped by its parent; the Python API and the
  pytest plugin for the length of a call, through `watching()`), only an
  interrupt raised after a signal arrived is one;
- in any thread but the main one, none is (Python delivers signals to the
  main thread only);
- otherwise (a caller that installed handlers of its own) every interrupt is
  taken to be one, as it always was.
"""
from __future__ import annotations

import contextlib
# Built in, as cli/entry.py takes it: `signal` makes its enums first, 3.4 million
# instructions of every start (benchmarks/README.md, "twenty-sixth steps", az28).
import _signal as signal
import threading
from typing import Any, Iterator

__all__ = ["Terminated", "mark", "watch", "watching", "from_signal", "on_sigint",
           "is_interrupt", "held", "raise_if_signalled", "ended", "has_ended"]


class Terminated(BaseException):
    """SIGTERM arrived (raised by the command line's handler where the program was).

    A BaseException, like KeyboardInterrupt, so that only the cleanup clauses
    (`except BaseException: ...; raise`) see it on its way to `main`."""


_state: dict = {"watching": False, "seen": False, "signal": None, "ended": False}


def ended() -> None:
    """The command has written its last word (its output, or the line saying why it
    stopped): an interrupt from now on has nothing left to report."""
    _state["ended"] = True


def has_ended() -> bool:
    """Whether `ended` was called: an interrupt that reaches the process's entry
    without it came before the command could say anything (one line is due)."""
    return _state["ended"]


def mark(signum: int = signal.SIGINT) -> None:
    """Signal `signum` arrived: the interrupts raised from now on are real."""
    _state["seen"] = True
    _state["signal"] = signum


def raise_if_signalled() -> None:
    """Raise the interrupt a signal asked for (KeyboardInterrupt, or Terminated for
    SIGTERM) if one arrived: called before an output is made to appear, so that an
    interrupted command leaves none, even when the handler's own exception was lost
    (Python prints and drops an exception raised inside a `__del__` or a callback)."""
    if _state["seen"]:
        raise Terminated if _state["signal"] == signal.SIGTERM else KeyboardInterrupt


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back for the block; one that arrives meanwhile is
    delivered (its handler runs) when the block ends. A process forked inside the
    block starts with them held too."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def watch() -> None:
    """From now on in this process, an interrupt is real only after `mark` (for a
    process whose signal handlers call `mark`, or that receives none)."""
    _state.update(watching=True, seen=False, signal=None)


def on_sigint(signum: int, frame: Any) -> None:
    """A SIGINT handler that behaves as Python's own (KeyboardInterrupt), noting it."""
    mark(signal.SIGINT)
    raise KeyboardInterrupt


@contextlib.contextmanager
def watching() -> Iterator[None]:
    """Tell interrupts apart for the length of the block, in the main thread: when
    SIGINT still has Python's default handler, that handler is replaced by
    `on_sigint` (which does the same, noting it) and put back afterwards; when
    SIGINT is ignored (a job started in the background), no interrupt can come
    from it at all."""
    if _state["watching"] or threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(signal.SIGINT)
    if handler is signal.SIG_IGN:  # no Ctrl-C can interrupt (a background job's lot)
        install = False
    elif handler is signal.default_int_handler:
        install = True
    else:  # a handler of the caller's: its interrupts cannot be told apart
        yield
        return
    if install:
        signal.signal(signal.SIGINT, on_sigint)
    _state.update(watching=True, seen=False, signal=None)
    try:
        yield
    finally:
        _state["watching"] = False
        if install:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def is_interrupt(exc: BaseException) -> bool:
    """KeyboardInterrupt or Terminated."""
    return isinstance(exc, (KeyboardInterrupt, Terminated))


def from_signal(exc: BaseException) -> bool:
    """Whether `exc` is an interrupt that a signal can explain (see the module's rules)."""
    if not is_interrupt(exc):
        return False
    if threading.current_thread() is not threading.main_thread():
        return False
    return _state["seen"] or not _state["watching"]
