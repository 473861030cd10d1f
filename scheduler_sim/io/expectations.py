"""Verifying `expect` records against a replay (the `check` command, §10).

An expectation compares fields of one request's summary (`id`), of the run
summary, or of the block counts at a time (`at`, in the trace's unit). Each
field is compared for equality or held to a bound (`min`, `max`) or a
tolerance (`approx` with `rel` or `abs`). Times compare in the run's unit:
ticks, or seconds under a cost model, exactly as `replay` prints them.

The counts at time t are the snapshot state after admission at the step t
falls in when that step is a boundary; between boundaries they are the
state left by the last boundary before it (after its dispatch allocated its
blocks), since nothing changes in between.

`check_trace` replays every policy and returns one `CheckResult` per
expectation and policy it applies to; `check`, `check --junit` and the
pytest plugin all report from it.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..engine.core import Engine, RunResult
from ..engine.summary import request_record
from ..fleet import make_fleet
from ..gpu.kv_pool import fit_pool
from ..gpu.run_cost import clock_for
from ..records.clock import Clock
from ..records.errors import UsageError
from ..records.option_values import show
from ..records.options import Options
from .trace import Trace
from .trace_records import Expectation

__all__ = ["StateProbe", "FieldOutcome", "CheckResult", "verify", "snapshot_ticks",
           "check_trace", "holds", "describe_expected", "DEFAULT_REL"]

DEFAULT_REL = 1e-6  # the tolerance of an `approx` given without `rel` or `abs`


class StateProbe:
    """An `on_state` listener that keeps the block counts at the steps asked for."""

    def __init__(self, ticks: list[int], num_blocks: int) -> None:
        self.ticks = sorted(set(ticks))
        self.values: dict[int, dict[str, int]] = {}
        self._i = 0
        empty = {"waiting": 0, "running": 0, "reserved": 0, "allocated": 0,
                 "draining": 0, "free": num_blocks}
        self._last_tick: int | None = None
        self._last_pre = empty
        self._last_post = empty

    def _settle(self, at: int) -> None:
        self.values[at] = self._last_pre if self._last_tick == at else self._last_post

    def __call__(self, tick: int, state: dict[str, int], after_dispatch: bool) -> None:
        ticks = self.ticks
        while self._i < len(ticks) and ticks[self._i] < tick:
            self._settle(ticks[self._i])
            self._i += 1
        if self._i >= len(ticks):
            return
        if after_dispatch:
            self._last_post = state
        else:
            self._last_tick = tick
            self._last_pre = self._last_post = state

    def finish(self) -> None:
        """Settle the steps after the last boundary."""
        while self._i < len(self.ticks):
            self._settle(self.ticks[self._i])
            self._i += 1


def holds(expected: Any, actual: Any) -> bool:
    """Whether `actual` meets `expected`: equal to it, or within its bounds (a dict)."""
    if isinstance(expected, dict):
        if isinstance(actual, bool) or not isinstance(actual, (int, float)):
            return False
        if "min" in expected and actual < expected["min"]:
            return False
        if "max" in expected and actual > expected["max"]:
            return False
        if "approx" in expected:
            target = expected["approx"]
            rel = expected.get("rel", 0 if "abs" in expected else DEFAULT_REL)
            allowed = max(rel * abs(target), expected.get("abs", 0))
            # A hair of slack for floating point, far below any tolerance people write.
            if abs(actual - target) > allowed * (1 + 1e-12) + 1e-15:
                return False
        return True
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    return expected == actual


def describe_expected(expected: Any) -> str:
    """How an expectation reads in a message: `8`, `<= 0.5`, `3504.1 (rel 0.001)`."""
    if not isinstance(expected, dict):
        return show(expected)
    parts = []
    if "min" in expected and "max" in expected:
        parts.append(f"between {show(expected['min'])} and {show(expected['max'])}")
    elif "min" in expected:
        parts.append(f">= {show(expected['min'])}")
    elif "max" in expected:
        parts.append(f"<= {show(expected['max'])}")
    if "approx" in expected:
        tolerances = [f"{k} {show(expected[k])}" for k in ("rel", "abs") if k in expected]
        tolerance = ", ".join(tolerances) or f"rel {DEFAULT_REL:g}"
        parts.append(f"{show(expected['approx'])} ({tolerance})")
    return " and ".join(parts)


@dataclasses.dataclass(frozen=True)
class FieldOutcome:
    """One compared field: what was expected, what the replay gave, whether it held."""

    field: str
    expected: Any
    actual: Any
    ok: bool

    def text(self) -> str:
        """`finished: expected 8, got 9`."""
        return f"{self.field}: expected {describe_expected(self.expected)}, got {show(self.actual)}"


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One expectation checked against one policy's replay."""

    expectation: Expectation
    policy: str
    fields: tuple[FieldOutcome, ...]

    @property
    def ok(self) -> bool:
        """True when every field held."""
        return all(f.ok for f in self.fields)

    @property
    def failures(self) -> list[FieldOutcome]:
        """The fields that did not hold."""
        return [f for f in self.fields if not f.ok]

    @property
    def name(self) -> str:
        """`line 5: request 'r2' [continuous]`: how a test runner names it."""
        return f"line {self.expectation.line}: {self.expectation.subject} [{self.policy}]"

    def messages(self, trace_name: str) -> list[str]:
        """One line per failed field: `trace.jsonl:5: [continuous] request 'r2' finished:
        expected 8, got 9`."""
        e = self.expectation
        return [f"{trace_name}:{e.line}: [{self.policy}] {e.subject} {f.text()}"
                for f in self.failures]


def _applies(exp: Expectation, policy: str) -> bool:
    return exp.policy is None or exp.policy == policy


def verify(expects: list[Expectation], result: RunResult,
           probe: StateProbe | None) -> list[CheckResult]:
    """Compare every expectation that applies to `result.policy`."""
    clock = result.clock
    slo = result.options.slo if result.options is not None else None
    out = []
    by_id = None
    for exp in expects:
        if not _applies(exp, result.policy):
            continue
        if exp.id is not None:
            if by_id is None:
                by_id = {r.rid: r for r in result.requests}
            req = by_id.get(exp.id)
            actual_record = request_record(req, clock, slo) if req is not None else {}
        elif exp.at is not None:
            step = clock.before(exp.at)
            actual_record = probe.values.get(step, {}) if probe else {}
        else:
            actual_record = result.summary
        fields = tuple(FieldOutcome(field, expected, actual_record.get(field),
                                    holds(expected, actual_record.get(field)))
                       for field, expected in exp.fields.items())
        out.append(CheckResult(exp, result.policy, fields))
    return out


def snapshot_ticks(expects: list[Expectation], policy: str, clock: Clock) -> list[int]:
    """The clock steps whose block counts the expectations for `policy` need."""
    return [clock.before(e.at) for e in expects if e.at is not None and _applies(e, policy)]


def check_trace(trace: Trace, options: Options) -> list[CheckResult]:
    """Replay `trace` under each of `options.policy` and check its expectations."""
    expects = list(trace.expects)
    options, _ = fit_pool(options)
    clock = clock_for(options)
    results: list[CheckResult] = []
    for policy in options.policy:
        if not any(_applies(e, policy) for e in expects):
            continue
        ticks = snapshot_ticks(expects, policy, clock)
        if options.fleet:
            # A fleet's summary and requests compare as one engine's do; its block
            # counts are per replica, which an `at` expectation cannot name.
            if ticks:
                raise UsageError("expect records with `at` (block counts at a time) need "
                                 f"one engine, got replicas {options.replicas}: check them "
                                 "with --replicas 1")
            results.extend(verify(expects, make_fleet(trace.workload, options, policy).run(),
                                  None))
            continue
        probe = StateProbe(ticks, options.num_blocks) if ticks else None
        result = Engine(trace.workload, options, policy, on_state=probe).run()
        if probe:
            probe.finish()
        results.extend(verify(expects, result, probe))
    return results
