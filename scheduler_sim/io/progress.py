"""The progress line `replay` shows on standard error during a long run.

Shown only when standard error is a terminal and `--quiet` is not given,
and only once a replay has taken `DELAY` seconds; then redrawn at most every
`EVERY` seconds, in place (carriage return), and wiped when the run ends, so
that nothing of it stays on the screen. It never touches standard output or
an output file. It is driven by the engine's request-end callback (one clock
read per ended request) or, for `replay -j`, once per finished policy; when
it is off, `Progress.listener` gives None and the run carries no callback.
"""
from __future__ import annotations

import time
from typing import Any, Callable, TextIO

__all__ = ["Progress", "DELAY", "EVERY", "wanted"]

DELAY = 1.0   # seconds of wall time before the first line
EVERY = 0.5   # seconds between redraws

_WIPE = "\r\x1b[K"


def wanted(stream: TextIO, quiet: bool) -> bool:
    """Whether to show progress on `stream`: a terminal, and not `--quiet`."""
    if quiet:
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # closed, or no stream at all
        return False


class Progress:
    """One replay's progress line on `stream` (when `enabled`)."""

    def __init__(self, stream: TextIO, enabled: bool, clock: Any, total: int,
                 policies: int, clock_now: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.enabled = enabled
        self.clock = clock
        self.total = total
        self.policies = policies
        self.now = clock_now
        self.start = clock_now()
        self.shown = False
        self.policy = ""
        self.ended = 0
        self.reached = 0
        self.began = self.start
        self.next = self.start + DELAY

    def listener(self, policy: str) -> Callable[[Any], None] | None:
        """The request-end callback for `policy`'s run, or None when progress is off."""
        if not self.enabled:
            return None
        self.policy, self.ended, self.reached = policy, 0, 0
        self.began = self.now()
        return self._ended

    def _ended(self, req: Any) -> None:
        self.ended += 1
        if req.finished_at is not None and req.finished_at > self.reached:
            self.reached = req.finished_at
        now = self.now()
        if now >= self.next:
            self.next = now + EVERY
            rate = self.ended / max(now - self.began, 1e-9)
            when = self.clock.report(self.reached)
            unit = self.clock.label
            # Seconds to a tenth, so that the line does not jitter; ticks whole.
            when = f"{when:,.1f}" if self.clock.in_seconds else f"{when:,}"
            self._draw(f"{self.policy}: simulated time {when} {unit}, "
                       f"{self.ended:,}/{self.total:,} requests finished, "
                       f"{rate:,.0f} requests/s")

    def policy_done(self, done: int) -> None:
        """`replay -j`: `done` policies of all have finished."""
        if not self.enabled:
            return
        now = self.now()
        if now >= self.next:
            self.next = now + EVERY
            self._draw(f"{done}/{self.policies} policies finished, "
                       f"{now - self.start:,.1f} s")

    def _draw(self, text: str) -> None:
        self.shown = True
        try:
            self.stream.write(f"{_WIPE}scheduler-sim: {text}")
            self.stream.flush()
        except Exception:  # progress is a courtesy: never the reason a run fails
            self.enabled = False

    def close(self) -> None:
        """Wipe the line, if one was drawn."""
        if self.shown:
            self.shown = False
            try:
                self.stream.write(_WIPE)
                self.stream.flush()
            except Exception:
                pass
