"""Seeded synthetic workloads (the `generate` command, §10).

Everything random is drawn from one `random.Random(seed)` owned by the
call, in a fixed order, so the same arguments give the same trace on every
machine. Arrival times are in ticks:

- `poisson`: exponential gaps with mean 1 / rate;
- `gamma`: gamma gaps with the same mean and coefficient of variation `cv`
  (cv 1 is Poisson; larger is burstier).

Lengths are given as `fixed:N`, `uniform:LOW:HIGH`, `lognormal:MEDIAN:SIGMA`
(clipped to [1, 1_000_000]) or drawn from a list of observed values
(`empirical`, which the command line fills from a trace file). With
`prefix_groups`, each request joins one of G groups whose members share a
system prompt of `prefix_tokens` ids at the start of `prompt_token_ids`
(what prefix caching can reuse). `priorities` is a weight per priority
level; `cancel_rate` is the fraction of requests cancelled by the client
after an exponential patience with mean `cancel_after` ticks.
"""
from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

__all__ = ["LengthSpec", "parse_length", "WorkloadSpec", "generate"]

_MAX_LENGTH = 1_000_000


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
            return max(1, min(_MAX_LENGTH, int(round(value))))
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


def parse_length(text: str, empirical: tuple[int, ...] = ()) -> LengthSpec:
    """Parse `fixed:N`, `uniform:LOW:HIGH`, `lognormal:MEDIAN:SIGMA` or `empirical:...`.

    Raises ValueError with a message naming the bad part.
    """
    kind, _, rest = text.partition(":")
    parts = rest.split(":") if rest else []
    try:
        if kind == "fixed" and len(parts) == 1 and int(parts[0]) >= 1:
            return LengthSpec("fixed", int(parts[0]))
        if kind == "uniform" and len(parts) == 2 and 1 <= int(parts[0]) <= int(parts[1]):
            return LengthSpec("uniform", int(parts[0]), int(parts[1]))
        if kind == "lognormal" and len(parts) == 2 and math.isfinite(float(parts[0])) \
                and math.isfinite(float(parts[1])) and float(parts[0]) > 0 \
                and float(parts[1]) >= 0:
            return LengthSpec("lognormal", float(parts[0]), float(parts[1]))
    except ValueError:
        pass
    if kind == "empirical" and empirical:
        return LengthSpec("empirical", values=tuple(empirical))
    raise ValueError(f"a length must be fixed:N, uniform:LOW:HIGH (1 <= LOW <= HIGH), "
                     f"lognormal:MEDIAN:SIGMA or empirical:TRACE, got {text!r}")


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


def _gap(spec: WorkloadSpec, rng: random.Random) -> float:
    if spec.arrival == "poisson":
        return rng.expovariate(spec.rate)
    shape = 1.0 / (spec.cv * spec.cv)
    return rng.gammavariate(shape, 1.0 / (spec.rate * shape))


def generate(spec: WorkloadSpec) -> list[dict[str, Any]]:
    """The trace v1 records of a synthetic workload (requests, then cancels)."""
    rng = random.Random(spec.seed)
    records: list[dict[str, Any]] = []
    cancels: list[dict[str, Any]] = []
    group_prompts = [[1_000_000 * (g + 1) + i for i in range(spec.prefix_tokens)]
                     for g in range(spec.prefix_groups)]
    levels = [p for p, _ in spec.priorities]
    weights = [w for _, w in spec.priorities]
    width = len(str(spec.requests))
    clock = 0.0
    for n in range(spec.requests):
        if n:
            clock += _gap(spec, rng)
        arrival = int(clock)
        rid = f"g{n:0{width}d}"
        prompt = spec.prompt.draw(rng)
        output = spec.output.draw(rng)
        rec: dict[str, Any] = {"type": "request", "id": rid, "arrival": arrival}
        if group_prompts:
            group = rng.randrange(len(group_prompts))
            suffix = max(1, prompt - spec.prefix_tokens)
            ids = group_prompts[group] + [2_000_000_000 + n * 100_000 + i for i in range(suffix)]
            rec["prompt_token_ids"] = ids
        else:
            rec["prompt_tokens"] = prompt
        rec["output_tokens"] = output
        if levels:
            rec["priority"] = rng.choices(levels, weights)[0]
        if spec.cancel_rate and rng.random() < spec.cancel_rate:
            at = arrival + int(rng.expovariate(1.0 / spec.cancel_after))
            cancels.append({"type": "cancel", "id": rid, "at": at})
        records.append(rec)
    return records + cancels
