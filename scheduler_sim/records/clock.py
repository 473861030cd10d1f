"""The simulation clock: how trace times become clock steps, and how steps are reported.

The engine counts time in whole clock steps. What a step is depends on two
things the run declares, and nothing else:

- the trace's time unit (`time_unit`): `tick` for teaching traces, whose
  times are counts of dispatches; `s` or `ms` for real traces (`convert`
  writes seconds);
- whether a cost model gives dispatches real durations.

| trace unit | cost model | one clock step | a dispatch lasts | results in |
|---|---|---|---|---|
| tick | none | one trace tick | 1 step | ticks |
| s, ms | none | `tick_seconds` of trace time (1 ms) | 1 step | ticks |
| tick | yes | `clock_resolution` (1 us); a trace tick is `tick_seconds` (1 ms) | its modelled time (below) | seconds |
| s, ms | yes | `clock_resolution` (1 us) | its modelled time (below) | seconds |

So a trace's times keep their meaning whatever the resolution: changing
`clock_resolution` moves an arrival by less than one step, never more.

Under a cost model a dispatch completes at the first step at or after its
exact completion time, and a dispatch that starts when the previous one
completes starts from that exact time, not from the rounded step. Rounding
therefore never accumulates: on a GPU that is busy for an hour, every
completion is still within one step of where exact arithmetic puts it. A
dispatch lasts at least one step: one whose exact end is not after the step
it starts at completes one step later, and its exact end becomes that step.

Trace times become steps in one of two directions. Things that happen at a
time (an arrival, a cancellation, a forced preemption) and waits that must
have passed (`release_delay`, `batch_window`) are rounded up: the engine
sees them at the first step at or after the time. Limits that a later time
must exceed (a `deadline`, `waiting_timeout`) and `at` expectations are
rounded down, which keeps "finished after its deadline" and "waited longer
than the timeout" exact in whole steps.

Conversions are floating point with a tolerance of a few units in the last
place, so that 0.003 s at 1 ms steps is step 3 on every machine.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from bisect import bisect_left
from itertools import repeat
from operator import floordiv, mod, mul, sub
from typing import Any, Callable

__all__ = ["Clock", "TIME_UNITS", "DEFAULT_RESOLUTION", "DEFAULT_TICK_SECONDS", "CEIL_SLACK"]

# Seconds per trace unit; `tick` has no fixed length.
TIME_UNITS: dict[str, float | None] = {"tick": None, "s": 1.0, "ms": 0.001}

DEFAULT_RESOLUTION = 1e-6     # seconds per clock step under a cost model
DEFAULT_TICK_SECONDS = 0.001  # a trace tick under a cost model; a dispatch of a real trace without one


# Floating-point noise allowed around a whole number of steps: absolute, plus
# about four units in the last place of the value (q >= 0 throughout).
_ABS = 1e-9
_REL = 1e-15


# (_ABS, _REL), for a loop that inlines `Clock.end_step` (engine/ledger.py).
CEIL_SLACK = (_ABS, _REL)


def _ceil(q: float) -> int:
    """ceil(q), taking a value a hair above a whole number for that number."""
    return math.ceil(q - _ABS - q * _REL)


def _floor(q: float) -> int:
    """floor(q), taking a value a hair below a whole number for that number."""
    return math.floor(q + _ABS + q * _REL)


@dataclasses.dataclass(frozen=True)
class Clock:
    """The clock of one run: trace units to steps, steps to reported values.

    `unit_seconds` is the length of one trace unit and `step_seconds` the
    length of one step, both None for a tick trace without a cost model
    (then a step is a trace tick). `in_seconds` says whether results are
    reported in seconds (a cost model) or in ticks.
    """

    unit: str = "tick"
    unit_seconds: float | None = None
    step_seconds: float | None = None
    in_seconds: bool = False
    # Steps of serving overhead outside the engine (the cost model's
    # request_overhead), added to every request's TTFT and end-to-end latency.
    request_overhead: int = 0
    # Arrivals are at their trace time divided by this (`rate_scale`: 2 replays
    # the trace at twice its request rate); what is timed from an arrival (a
    # deadline, a cancellation, a forced preemption) keeps its distance from it
    # (`Workload.on_clock`), and durations the options give are unchanged.
    rate_scale: float = 1.0

    @classmethod
    def of(cls, options: Any) -> "Clock":
        """The clock `options` (an `Options`) describe; see the module's table."""
        unit = options.time_unit
        tick = options.tick_seconds
        scale = getattr(options, "rate_scale", 1.0)
        if options.has_cost_model:
            step = options.clock_resolution or DEFAULT_RESOLUTION
            length = TIME_UNITS[unit] if unit != "tick" else (tick or DEFAULT_TICK_SECONDS)
            return cls(unit, length, step, True, rate_scale=scale)
        if unit == "tick":
            return cls(rate_scale=scale)
        return cls(unit, TIME_UNITS[unit], tick or DEFAULT_TICK_SECONDS, False, rate_scale=scale)

    # --- trace times to steps ---------------------------------------------------

    @property
    def identity(self) -> bool:
        """True when a trace time is already a step (a tick trace, no cost model)."""
        return self.unit_seconds is None

    @functools.cached_property
    def _ratio(self) -> float:
        ratio = self.unit_seconds / self.step_seconds
        n = round(ratio)
        return n if n >= 1 and abs(ratio - n) <= n * 1e-12 else ratio

    def after(self, value: float | int) -> int:
        """The first step at or after trace time `value` (arrivals, waits that must pass)."""
        if self.unit_seconds is None:
            return int(value)
        return _ceil(value * self._ratio)

    def before(self, value: float | int) -> int:
        """The last step at or before trace time `value` (deadlines, limits, `at`)."""
        if self.unit_seconds is None:
            return int(value)
        return _floor(value * self._ratio)

    @property
    def moves_workload(self) -> bool:
        """Whether the workload's times change on this clock (`Workload.on_clock`)."""
        return self.unit_seconds is not None or self.rate_scale != 1

    def arrival_step(self, value: float | int) -> int:
        """The step of an arrival at trace time `value`: compressed by `rate_scale`
        (value / rate_scale), then the first step at or after it."""
        scale = self.rate_scale
        if scale == 1:
            return self.after(value)
        if self.unit_seconds is None:
            return _ceil(value / scale)
        return _ceil(value / scale * self._ratio)

    def arrival_steps(self, values: list) -> list[int]:
        """`arrival_step` of each of `values`, in order: the same floats, converted as
        a column (`end_steps`' C passes) when nothing is compressed (a plain workload's
        arrivals, `Workload.plain`)."""
        if self.rate_scale != 1:
            return list(map(self.arrival_step, values))
        if self.unit_seconds is None:
            return list(map(int, values))
        return self.end_steps(list(map(mul, values, repeat(self._ratio))))

    def steps(self, seconds: float) -> float:
        """`seconds` of modelled time in (fractional) clock steps."""
        return seconds / self.step_seconds

    def end_step(self, exact: float, start: int) -> int:
        """The step at which a dispatch started at step `start` and ending at exact
        (fractional) step `exact` completes: the first at or after it, at least
        one step after the start. When it is forced to that one step, its
        exact end is that step (the caller checks `exact <= start`)."""
        n = math.ceil(exact - _ABS - exact * _REL)
        return n if n > start else start + 1

    def end_steps(self, exacts: list[float]) -> list[int]:
        """`end_step`'s rounding of many exact ends at once, in C (a folded stretch's
        dispatches, engine/ledger.py), without its one-step minimum: the caller
        checks that each one ends after it starts."""
        return list(map(math.ceil, map(sub, map(sub, exacts, repeat(_ABS)),
                                       map(mul, exacts, repeat(_REL)))))

    # --- steps to what people read ---------------------------------------------

    @property
    def label(self) -> str:
        """The unit results are reported in: `s` or `ticks`."""
        return "s" if self.in_seconds else "ticks"

    @functools.cached_property
    def digits(self) -> int:
        """Decimals that a time in seconds carries: those of one clock step."""
        return max(0, math.ceil(-math.log10(self.step_seconds) - 1e-9))

    def report(self, steps: float | int | None) -> float | int | None:
        """A time or duration of `steps` steps in the reported unit (None stays None).

        In ticks: unchanged, fractions of a tick (means, TPOT) rounded to 4
        decimals. In seconds: rounded to the step's decimals, so a 1 us clock
        prints 0.012345, and fractions of a step to 4 decimals more.
        """
        if steps is None:
            return None
        if not self.in_seconds:
            if isinstance(steps, float):
                steps = round(steps, 4)
                return int(steps) if steps.is_integer() else steps
            return steps
        digits = self.digits if isinstance(steps, int) else self.digits + 4
        value = round(steps * self.step_seconds, digits)
        return int(value) if value.is_integer() else value

    def rate(self, count: float, steps: int) -> float | None:
        """`count` per reported unit of time over `steps` steps (None for no time), to 4
        decimals, or 4 significant figures below 0.01 (so that it never reads 0)."""
        if steps <= 0:
            return None
        per = steps * self.step_seconds if self.in_seconds else steps
        rate = count / per
        return round(rate, 4) if rate >= 0.01 else float(f"{rate:.4g}")

    def text(self, steps: int) -> str:
        """An event's time as JSON number text in the reported unit (`report`'s value)."""
        memo = self._texts  # a dispatch's end is the next one's start: asked twice
        text = memo.get(steps)
        if text is not None:
            return text
        if not self.in_seconds:
            return str(steps)
        if len(memo) >= 64:
            memo.clear()
        decimals, scale = self._point
        if scale and scale // 10_000 <= steps < 10 ** 15:
            # A step of 10^-d s: the float nearest steps / 10^d, formatted with d
            # decimals (exact below 10^15 steps), its trailing zeros and point
            # dropped: what repr gives for 1e-4 <= value with at most 15
            # significant digits. Speed: one `%` format of a float, the zeros
            # stripped only when there are some (one time in ten): 540 -> 450 ns
            # a time made, in one process (benchmarks/README.md, "thirteenth
            # steps"), on the lines the engine writes one at a time (about
            # 167,000 times on the Azure trace with `--events`, 74,000 of them
            # made, the others remembered). (`texts` makes its digits from integers: the
            # two are tested against each other.) Was `str` of the integer and
            # slices, before that a format of a divmod with its width given.
            if scale == 1:
                text = str(steps)  # (a step of 1 s)
            else:
                text = decimals % (steps / scale)
                if text[-1] == "0":
                    text = text.rstrip("0").rstrip(".")
        else:
            value = round(steps * self.step_seconds, self.digits)
            text = repr(int(value) if value.is_integer() else value)
        memo[steps] = text
        return text

    def texts(self, steps: list[int], rising: bool = False) -> list[str]:
        """`text` of each of `steps`, in order (`rising`: the caller knows them in
        non-decreasing order, as a folded stretch's times are). Speed: with a step of exactly
        10^-d s (the usual 1 us clock) and every time in `text`'s range of
        plain digits, the texts are made together in C: a folded stretch's
        event lines are one time each, about 417,000 of them on the Azure
        trace with `--events`, where a call of `text` each was 9% of the
        profile.

        All of them are one `%` format of integers: each time's whole second
        S written into the format (`S.%0dd` and a newline), its steps past S
        formatted with d digits, zeros in front; the trailing zeros and the
        point of every time are then dropped at once by `replace` (a run of
        zeros ends in a newline only after the point), and the text split at
        the newlines. Times within one whole second (nine stretches in ten on
        the Azure trace) are written differently: in second 0 by one format,
        repeated; in a second S > 0 each whole by `%d` (`_IN_ONE_SECOND`), the
        point put in after S by one `replace`. Rising times over several seconds
        from S > 0 are written a second's run at a time (`_by_second`); other
        times over several seconds take each its own format from a table by
        second (`_fast`). Speed: was one
        `%.6f` format of the times as floats (`steps / 10^d`), whose
        float-to-decimal conversion cost more than the integers' digits: about
        360 -> 290 ns a time over 5,000 stretches of the Azure trace in one
        process (benchmarks/README.md, "thirteenth steps", helper ev9); before
        that, four passes of `map` (`divmod`, a `%d.%06d` format, two `rstrip`)."""
        fast = self._fast
        if fast is None or not steps:
            if not self.in_seconds or (self._scale == 1 and max(steps, default=0) < 10 ** 15):
                return list(map(str, steps))  # (ticks, or a step of 1 s: no decimals)
            return list(map(self.text, steps))
        scale, least, formats, heads = fast
        low, high = (steps[0], steps[-1]) if rising else (min(steps), max(steps))
        if low < least or high >= 10 ** 15:
            return list(map(self.text, steps))
        second = low // scale
        lead = False  # whether the text starts with a newline (then an empty text first)
        if high // scale == second:
            if second:
                # Every time's digits are those of its whole second S, then six
                # more: each written whole (`%d`, no new integers, no widths), the
                # point put in after S by one `replace` of the newline and S in
                # front of each. Speed: see `_IN_ONE_SECOND`.
                head = heads[second]
                text = _IN_ONE_SECOND[len(steps)] % tuple(steps)
                text = text.replace(head[0], head[1])
                lead = True
            else:
                text = formats[0] * len(steps) % tuple(steps)
        elif second and rising:
            text = _by_second(steps, second, high // scale, scale, heads)
            lead = True
        else:
            text = ("".join(map(formats.__getitem__, map(floordiv, steps, repeat(scale))))
                    % tuple(map(mod, steps, repeat(scale))))
        if "0\n" in text:
            text = text.replace("0\n", "\n")
            while "0\n" in text:
                text = text.replace("0\n", "\n")
            if ".\n" in text:
                text = text.replace(".\n", "\n")
        texts = text.split("\n")
        texts.pop()  # (the empty text after the last newline)
        if lead:
            del texts[0]  # (the one before the first newline, in one whole second S > 0)
        # The last time is remembered for `text`: a folded stretch's last dispatch
        # ends where the next records are (its finishes, the admissions after it).
        # Speed: 27,000 of the 47,000 times `text` made for the request lines on
        # the Azure trace were such ends.
        memo = self._texts
        if len(memo) >= 64:
            memo.clear()
        memo[steps[-1]] = texts[-1]
        return texts

    @functools.cached_property
    def _fast(self) -> tuple[int, int, "_Made", "_Made"] | None:
        """For `texts`, on a clock in seconds whose step is exactly 10^-d s, d > 0:
        10^d, the least time it formats itself (`text`'s range of plain digits),
        its formats by second and its heads by second; None on any other clock (its attributes read
        once a stretch, not each time)."""
        if not self.in_seconds or self._scale <= 1:
            return None
        fraction = f".%0{self.digits}d\n"
        # By whole second S: `S.%0dd` and a newline (d the clock's digits); and a
        # newline and S's digits, without and with the point. A stretch asks one
        # or two of each, a run one per second of simulated time or fewer.
        return (self._scale, self._scale // 10_000,
                _Made(lambda second: f"{second}{fraction}", 4096),
                _Made(lambda second: (f"\n{second}", f"\n{second}."), 4096))

    @functools.cached_property
    def _texts(self) -> dict[int, str]:
        return {}

    @functools.cached_property
    def _point(self) -> tuple[str, int]:
        """(the `%` format of a time in seconds with `digits` decimals, `_scale`), for `text`."""
        return f"%.{self.digits}f", self._scale

    @functools.cached_property
    def _scale(self) -> int:
        """10^d when a step is exactly 10^-d seconds, else 0."""
        scale = 10 ** self.digits
        return scale if self.in_seconds and 1 / scale == self.step_seconds else 0

    def describe(self) -> str:
        """One line for the replay header: what a step is and what results are in."""
        if not self.in_seconds:
            if self.identity:
                return ("time in ticks: no cost model, every dispatch lasts one tick")
            return (f"time in ticks: no cost model, every dispatch lasts one tick; "
                    f"trace times in {self.unit} mapped at 1 tick = "
                    f"{_seconds_text(self.step_seconds)}")
        trace = (f"a trace tick is {_seconds_text(self.unit_seconds)}"
                 if self.unit == "tick" else f"trace times in {self.unit}")
        return (f"time in seconds: each dispatch lasts its cost-model time and completes at "
                f"the first clock step at or after its end (resolution "
                f"{_seconds_text(self.step_seconds)}); "
                f"{trace}")


class _Made(dict):
    """A table for `Clock.texts` whose entries `make` makes from their keys when first
    asked; at most `bound` kept (past it the table is cleared, a bound on memory:
    each entry is made again when asked). One class for the three tables, made
    once at start-up by every process."""

    def __init__(self, make: Callable[[int], Any], bound: int) -> None:
        super().__init__()
        self.make = make
        self.bound = bound

    def __missing__(self, key: int) -> Any:
        if len(self) >= self.bound:
            self.clear()
        value = self[key] = self.make(key)
        return value


# `Clock.texts`' format of n times within one whole second, by n: `\n%d` n times,
# then a newline. Speed: a folded stretch's times (nine in ten within one second
# on the Azure trace) written by `%d` of the times themselves, the point put in
# by one `replace`, where each time's steps past S were new integers, each
# written `%06d`: see benchmarks/README.md, "fourteenth steps", helper ev10.
_IN_ONE_SECOND = _Made(lambda n: "\n%d" * n + "\n", 256)


# The same without the last newline: one whole second's run of a stretch over several.
_RUN = _Made(lambda n: "\n%d" * n, 256)


def _by_second(steps: list[int], second: int, last: int, scale: int, heads: _Made) -> str:
    """`Clock.texts`' text of rising `steps` from whole second `second` > 0 to `last`:
    each second's run of times written as one stretch within it is (`%d` of each,
    the point put in after S by one `replace`), the runs joined, a newline after
    the last. Speed: each time took its second's own `S.%06d` format, new
    integers for its second and fraction: about 2,700 instructions a time against
    2,000 within one second (on the first 2,000 Azure requests under `continuous`
    346 of 3,024 stretches, 10,731 of 54,545 times, cross a second). All their
    texts, 118.1e6 -> 108.3e6 instructions in one process; the `--events` run
    1.4728e9 -> 1.4616e9 (callgrind; benchmarks/README.md, "thirty-first steps",
    helper sl35)."""
    runs = []
    start = 0
    while second < last:
        end = bisect_left(steps, (second + 1) * scale, start)
        head = heads[second]
        runs.append((_RUN[end - start] % tuple(steps[start:end])).replace(head[0], head[1]))
        start = end
        second = steps[end] // scale  # (the next run's: a dispatch may last past a second)
    head = heads[last]
    runs.append((_IN_ONE_SECOND[len(steps) - start] % tuple(steps[start:])).replace(head[0],
                                                                                  head[1]))
    return "".join(runs)


def _seconds_text(seconds: float) -> str:
    """0.001 -> '1 ms', 1e-06 -> '1 us', 2.5 -> '2.5 s'."""
    for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"), (1e-12, "ps")):
        if seconds >= scale * 0.999999:
            return f"{seconds / scale:g} {name}"
    return f"{seconds:g} s"
