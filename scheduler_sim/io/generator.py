"""Seeded synthetic workloads (the `generate` command, §10).

Everything random is drawn from one `random.Random(seed)` owned by the
call, in a fixed order, so the same arguments give the same trace on every
machine. Times are in ticks (arrivals rounded down to a whole tick) or, with
`time_unit` `s`, in seconds (to the microsecond, after a config record that
says so), and `rate` is per that unit:

- `poisson`: exponential gaps with mean 1 / rate;
- `gamma`: gamma gaps with the same mean and coefficient of variation `cv`
  (cv 1 is Poisson; larger is burstier), or of shape `burstiness` as `vllm
  bench serve --burstiness` draws them (shape B, scale 1 / (rate x B): cv is
  1 / sqrt(B); 1 is Poisson, smaller is burstier).

Lengths are given as `fixed:N`, `uniform:LOW:HIGH`, `lognormal:MEDIAN:SIGMA`
(clipped to [1, 1_000_000]) or drawn from a list of observed values
(`empirical`, which the command line fills from a trace file). With
`prefix_groups`, each request joins one of G groups whose members share a
system prompt of `prefix_tokens` ids at the start of `prompt_token_ids`
(what prefix caching can reuse). `priorities` is a weight per priority
level; `cancel_rate` is the fraction of requests cancelled by the client
after an exponential patience with mean `cancel_after` ticks.

Every parameter is bounded (`spec_problems` names the flag, the range and
the value given) so that every accepted workload is written in bounded time
as a trace the parser accepts: at most 1,000,000 requests (`MAX_REQUESTS`)
and lengths of at most 1,000,000 tokens (`MAX_LENGTH`), a rate of at least
1e-6 per tick and a patience of at most 1e12 ticks (so no time passes the
1e15 a trace may hold), a gamma cv from 0.01 to 100, a lognormal sigma of
at most 10, weights of at most 1e6 (their sum stays finite), and with
prefix groups at most 10,000,000 prompt token ids in the whole trace
(`MAX_TOKEN_IDS`, checked as they are drawn).

`workload_records` gives the records one at a time, so that `generate -o`
writes a million requests in memory that does not grow with them: nothing
is kept from one request to the next (a group's shared prompt is a run of
ids made again each time), and the cancels, written after every request, are
drawn again from the seed instead of being held.
"""
from __future__ import annotations

import dataclasses
import math
import random
import re
from typing import Any, Iterator

from ..records.option_values import show

__all__ = ["LengthSpec", "parse_length", "WorkloadSpec", "generate", "workload_records",
           "check_workload", "spec_problems", "weights_problem", "limit", "MAX_REQUESTS",
           "MAX_LENGTH", "MAX_TOKEN_IDS"]

MAX_REQUESTS = 1_000_000
MAX_LENGTH = 1_000_000      # tokens of a prompt or an output, and of a shared prefix
MAX_SIGMA = 10.0            # lognormal: a draw below e^(ln 1e6 + 10 x 12.2) is a finite float
MIN_RATE = 1e-6             # requests per tick: 1e6 requests span 1e12 ticks on average
CV_RANGE = (0.01, 100.0)    # gamma gaps: shape 1 / cv^2 from 1e-4 to 1e4
MAX_CANCEL_AFTER = 1e12     # ticks of mean patience
MAX_PREFIX_GROUPS = 1_000_000
MAX_WEIGHT = 1e6
MAX_TOKEN_IDS = 10_000_000  # prompt token ids written with prefix groups, in all
MAX_TIME = 10 ** 15         # the largest time a trace may hold (io.trace_records.MAX_TIME)


@dataclasses.dataclass(frozen=True)
class LengthSpec:
    """How to draw one length: a kind and its parameters."""

    kind: str
    a: float = 0
    b: float = 0
    values: tuple[int, ...] = ()

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        if self.kind == "lognormal":
            value = rng.lognormvariate(math.log(self.a), self.b)
            return max(1, min(MAX_LENGTH, int(round(value))))
        return self.values[rng.randrange(len(self.values))]

    @property
    def mean(self) -> float:
        """The expected value (before clipping, for lognormal)."""
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        if self.kind == "lognormal":
            return self.a * math.exp(self.b ** 2 / 2)
        return sum(self.values) / len(self.values)


def _number(text: str, kind: type) -> Any:
    try:
        value = kind(text)
    except (ValueError, OverflowError):
        return None
    return value if kind is int or math.isfinite(value) else None


def parse_length(text: str, empirical: tuple[int, ...] = ()) -> LengthSpec:
    """Parse `fixed:N`, `uniform:LOW:HIGH`, `lognormal:MEDIAN:SIGMA` or `empirical:...`.

    Raises ValueError with a message naming the bad part and the allowed range.
    """
    kind, _, rest = text.partition(":")
    parts = rest.split(":") if rest else []
    if kind == "fixed":
        n = _number(parts[0], int) if len(parts) == 1 else None
        if n is not None and 1 <= n <= MAX_LENGTH:
            return LengthSpec("fixed", n)
        raise ValueError(f"fixed:N needs an integer N from 1 to {MAX_LENGTH:,}, "
                         f"got {show(text)}")
    if kind == "uniform":
        low, high = ([_number(p, int) for p in parts] if len(parts) == 2 else (None, None))
        if low is not None and high is not None and 1 <= low <= high <= MAX_LENGTH:
            return LengthSpec("uniform", low, high)
        raise ValueError(f"uniform:LOW:HIGH needs integers 1 <= LOW <= HIGH <= {MAX_LENGTH:,}, "
                         f"got {show(text)}")
    if kind == "lognormal":
        median, sigma = ([_number(p, float) for p in parts] if len(parts) == 2
                         else (None, None))
        if (median is not None and sigma is not None and 0 < median <= MAX_LENGTH
                and 0 <= sigma <= MAX_SIGMA):
            return LengthSpec("lognormal", median, sigma)
        raise ValueError(f"lognormal:MEDIAN:SIGMA needs 0 < MEDIAN <= {MAX_LENGTH:,} and "
                         f"0 <= SIGMA <= {limit(MAX_SIGMA)}, got {show(text)}")
    if kind == "empirical" and empirical:
        return LengthSpec("empirical", values=tuple(empirical))
    raise ValueError(f"a length must be fixed:N, uniform:LOW:HIGH, lognormal:MEDIAN:SIGMA "
                     f"or empirical:TRACE, got {show(text)}")


@dataclasses.dataclass(frozen=True)
class WorkloadSpec:
    """Everything `generate` needs; see the module docstring."""

    seed: int
    requests: int
    rate: float = 1.0
    arrival: str = "poisson"
    cv: float = 1.0
    prompt: LengthSpec = LengthSpec("uniform", 16, 512)
    output: LengthSpec = LengthSpec("uniform", 16, 256)
    prefix_groups: int = 0
    prefix_tokens: int = 0
    priorities: tuple[tuple[int, float], ...] = ()
    cancel_rate: float = 0.0
    cancel_after: float = 50.0
    # `vllm bench serve --burstiness`: the gamma gaps' shape (1 draws gamma gaps of
    # shape 1, exponential; smaller is burstier); None: the shape 1 / cv^2.
    burstiness: float | None = None
    # The unit of every time written (`rate` per it, `cancel_after` in it): `tick`
    # (whole ticks, arrivals rounded down) or `s` (seconds, to the microsecond).
    time_unit: str = "tick"


def limit(value: float) -> str:
    """A limit as the messages and the README write it: 1e-6, 0.01, 100, 1e12."""
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + m[1].replace("+", "") + m[2], f"{value:g}")


def weights_problem(priorities: tuple[tuple[int, float], ...], given: str) -> str | None:
    """Why priority weights cannot be drawn from (`given` is how the user wrote them)."""
    weights = [w for _, w in priorities]
    if weights and (not all(math.isfinite(w) and 0 <= w <= MAX_WEIGHT for w in weights)
                    or not sum(weights) > 0):
        return (f"--priorities weights must be finite numbers from 0 to {limit(MAX_WEIGHT)}, "
                f"not all 0, got {show(given)}")
    return None


def spec_problems(spec: WorkloadSpec) -> list[str]:
    """What is wrong with a workload, one message per flag: the flag, the range it
    allows and the value given. Lengths are checked when parsed (`parse_length`)."""
    problems = []

    def number(flag: str, value: float, low: float, high: float | None, unit: str) -> None:
        if not (math.isfinite(value) and low <= value and (high is None or value <= high)):
            allowed = (f"from {limit(low)} to {limit(high)}" if high is not None
                       else f">= {limit(low)}")
            problems.append(f"{flag} must be a finite number {allowed}{unit}, got {show(value)}")

    if not 1 <= spec.requests <= MAX_REQUESTS:
        problems.append(f"--requests must be an integer from 1 to {MAX_REQUESTS:,}, "
                        f"got {show(spec.requests)}")
    unit = "tick" if spec.time_unit == "tick" else "second"
    if spec.time_unit not in ("tick", "s"):
        problems.append(f"--time-unit must be tick or s, got {show(spec.time_unit)}")
    number("--rate", spec.rate, MIN_RATE, None, f" (requests per {unit})")
    number("--cv", spec.cv, *CV_RANGE, "")
    if spec.burstiness is not None:
        number("--burstiness", spec.burstiness, 1 / CV_RANGE[1] ** 2, 1 / CV_RANGE[0] ** 2,
               " (the gamma gaps' shape)")
    if not 0 <= spec.cancel_rate <= 1:
        problems.append(f"--cancel-rate must be in [0, 1], got {show(spec.cancel_rate)}")
    if not (math.isfinite(spec.cancel_after) and 0 < spec.cancel_after <= MAX_CANCEL_AFTER):
        problems.append(f"--cancel-after must be a finite number > 0 and <= "
                        f"{limit(MAX_CANCEL_AFTER)} ({unit}s), got {show(spec.cancel_after)}")
    for flag, value, high in (("--prefix-groups", spec.prefix_groups, MAX_PREFIX_GROUPS),
                              ("--prefix-tokens", spec.prefix_tokens, MAX_LENGTH)):
        if not 0 <= value <= high:
            problems.append(f"{flag} must be an integer from 0 to {high:,}, got {show(value)}")
    if spec.prefix_groups > 0 and not spec.prefix_tokens:
        problems.append(f"--prefix-groups {spec.prefix_groups} shares nothing without "
                        "--prefix-tokens L > 0 (the length of each group's shared prompt)")
    weights = weights_problem(spec.priorities,
                              ",".join(f"{p}:{w!r}" for p, w in spec.priorities))
    if weights:
        problems.append(weights)
    return problems


def _gap(spec: WorkloadSpec, rng: random.Random) -> float:
    if spec.arrival == "poisson":
        return rng.expovariate(spec.rate)
    shape = spec.burstiness if spec.burstiness is not None else 1.0 / (spec.cv * spec.cv)
    return rng.gammavariate(shape, 1.0 / (spec.rate * shape))


def _draws(spec: WorkloadSpec) -> Iterator[tuple[int, str, int, int, int, int | None,
                                                 int | None, int | None]]:
    """Each request as drawn, in order: (number, id, arrival, prompt length, output
    length, prefix group or None, priority or None, cancel time or None). The
    draws are made in one fixed order; the limits are checked as they are drawn
    (ValueError naming the request that passes one)."""
    rng = random.Random(spec.seed)
    ids_written = 0
    levels = [p for p, _ in spec.priorities]
    weights = [w for _, w in spec.priorities]
    width = len(str(spec.requests))
    clock = 0.0
    ticks = spec.time_unit == "tick"
    for n in range(spec.requests):
        rid = f"g{n:0{width}d}"
        if n:
            clock += _gap(spec, rng)
            if not clock <= MAX_TIME:
                raise ValueError(f"request {rid} would arrive at tick {clock:.4g}, past the "
                                 f"{limit(MAX_TIME)} a trace may hold: raise --rate or lower "
                                 f"--requests")
        arrival = int(clock) if ticks else round(clock, 6)
        prompt = spec.prompt.draw(rng)
        output = spec.output.draw(rng)
        group = None
        if spec.prefix_groups:
            group = rng.randrange(spec.prefix_groups)
            ids_written += spec.prefix_tokens + max(1, prompt - spec.prefix_tokens)
            if ids_written > MAX_TOKEN_IDS:
                raise ValueError(
                    f"--prefix-groups writes every prompt's token ids, and request {rid} "
                    f"takes them past {MAX_TOKEN_IDS:,}: lower --requests, --prompt-len or "
                    f"--prefix-tokens")
        priority = rng.choices(levels, weights)[0] if levels else None
        cancel = None
        if spec.cancel_rate and rng.random() < spec.cancel_rate:
            patience = rng.expovariate(1.0 / spec.cancel_after)
            cancel = arrival + int(patience) if ticks else round(arrival + patience, 6)
            if cancel > MAX_TIME:
                raise ValueError(f"request {rid} would be cancelled at tick {cancel:.4g}, past "
                                 f"the {limit(MAX_TIME)} a trace may hold: lower "
                                 f"--cancel-after")
        yield n, rid, arrival, prompt, output, group, priority, cancel


def check_workload(spec: WorkloadSpec) -> None:
    """Draw the whole workload without writing it: raise ValueError as `workload_records`
    would, before any record of it is out."""
    problems = spec_problems(spec)
    if problems:
        raise ValueError("; ".join(problems))
    for _ in _draws(spec):
        pass


def workload_records(spec: WorkloadSpec) -> Iterator[dict[str, Any]]:
    """The trace v1 records of a synthetic workload, one at a time (requests, then
    cancels), in memory that does not grow with the number of requests: the
    cancels are drawn again, from the same seed, after the last request.

    Raises ValueError when the spec has a problem (`spec_problems`), when prefix
    groups would write more than MAX_TOKEN_IDS token ids, or when a time would
    pass MAX_TIME: the last two while records are being produced (`check_workload`
    finds them first).
    """
    problems = spec_problems(spec)
    if problems:
        raise ValueError("; ".join(problems))
    prefix = spec.prefix_tokens
    if spec.time_unit != "tick":
        yield {"type": "config", "time_unit": spec.time_unit}
    for n, rid, arrival, prompt, output, group, priority, _ in _draws(spec):
        rec: dict[str, Any] = {"type": "request", "id": rid, "arrival": arrival}
        if group is not None:
            shared = 1_000_000 * (group + 1)
            own = 2_000_000_000 + n * 100_000
            rec["prompt_token_ids"] = (list(range(shared, shared + prefix))
                                       + list(range(own, own + max(1, prompt - prefix))))
        else:
            rec["prompt_tokens"] = prompt
        rec["output_tokens"] = output
        if priority is not None:
            rec["priority"] = priority
        yield rec
    if spec.cancel_rate:
        for _, rid, _, _, _, _, _, cancel in _draws(spec):
            if cancel is not None:
                yield {"type": "cancel", "id": rid, "at": cancel}


def generate(spec: WorkloadSpec) -> list[dict[str, Any]]:
    """The trace v1 records of a synthetic workload (requests, then cancels), as a
    list (`workload_records` gives them one at a time).

    Raises ValueError when the spec has a problem (`spec_problems`), when prefix
    groups would write more than MAX_TOKEN_IDS token ids, or when a time would
    pass MAX_TIME.
    """
    return list(workload_records(spec))
