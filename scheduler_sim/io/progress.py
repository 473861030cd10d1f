"""The progress lines `replay` and `sweep` show on standard error during a long run.

Shown only when standard error is a terminal and `--quiet` is not given,
and only once a replay has taken `DELAY` seconds; then redrawn at most every
`EVERY` seconds, in place (carriage return), and wiped when the run ends, so
that nothing of it stays on the screen. It never touches standard output or
an output file. It is driven by the engine's request-end callback (one clock
read per ended request) or, for `replay -j`, once per finished policy; when
it is off, `Progress.listener` gives None and the run carries no callback.

`sweep` (`SweepProgress`) draws its line at once and at every finished
configuration: how many are done, the wall time so far and an estimate of
the time left (the mean time a configuration has taken so far, times those
left, over the workers); above it, each finished configuration gets a line
of its own that stays (its values and the metric the sweep plots), in the
order they finish.
"""
from __future__ import annotations

import time
from typing import Any, Callable, TextIO

__all__ = ["Progress", "SweepProgress", "DELAY", "EVERY", "wanted"]

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


class _Line:
    """A progress line on `stream` (when `enabled`), drawn in place and wiped at the
    end; a stream that fails turns it off (progress is a courtesy: never the
    reason a run fails)."""

    stream: TextIO
    enabled: bool
    shown = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except Exception:
            self.enabled = False

    def _draw(self, text: str) -> None:
        self.shown = True
        self._write(f"{_WIPE}scheduler-sim: {text}")

    def close(self) -> None:
        """Wipe the line, if one was drawn."""
        if self.shown:
            self.shown = False
            try:
                self.stream.write(_WIPE)
                self.stream.flush()
            except Exception:
                pass


class Progress(_Line):
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


def _duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `2 h 07 min`: wall time as a person reads it."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds // 60 % 60:02d} min"


class SweepProgress(_Line):
    """A sweep's progress on `stream` (when `enabled`): a line per finished
    configuration, and the progress line below them."""

    def __init__(self, stream: TextIO, enabled: bool, total: int, workers: int,
                 clock_now: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.enabled = enabled and total > 0
        self.total = total
        self.workers = max(1, min(workers, total))
        self.now = clock_now
        self.start = clock_now()
        self.done = 0
        self.shown = False
        if self.enabled:
            self._draw(f"sweep: 0/{total:,} configurations done")

    def finished(self, text: str) -> None:
        """One more configuration finished: `text` says which and what it gave."""
        if not self.enabled:
            return
        self.done += 1
        elapsed = self.now() - self.start
        line = f"sweep: {self.done:,}/{self.total:,} configurations done, {_duration(elapsed)}"
        left = self.total - self.done
        if left:
            # Each configuration has taken elapsed * workers / done of a worker's time.
            line += f", about {_duration(elapsed / self.done * left / self.workers)} left"
        self._write(f"{_WIPE}  [{self.done}/{self.total}] {text}\n")
        self._draw(line)
