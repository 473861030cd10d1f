"""Verifying `expect` records against a replay (the `check` command, SPEC §10).

An expectation compares fields of one request's summary (`id`), of the run
summary, or of the block counts at a tick (`at`). The counts at tick t are
the snapshot state after admission at t when t is a boundary; between
boundaries they are the state left by the last boundary before t (after its
dispatch allocated its blocks), since nothing changes in between.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .engine import RunResult
from .options import show
from .summary import request_record
from .trace import Expectation

__all__ = ["StateProbe", "Failure", "verify", "snapshot_ticks"]


class StateProbe:
    """An `on_state` listener that keeps the block counts at the ticks asked for."""

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
        """Settle the ticks after the last boundary."""
        while self._i < len(self.ticks):
            self._settle(self.ticks[self._i])
            self._i += 1


@dataclasses.dataclass(frozen=True)
class Failure:
    """An expectation that did not hold."""

    expectation: Expectation
    policy: str
    field: str
    expected: Any
    actual: Any

    def message(self, trace_name: str) -> str:
        """`trace.jsonl:5: [continuous] request 'r2' finished: expected 8, got 9`."""
        return (f"{trace_name}:{self.expectation.line}: [{self.policy}] "
                f"{self.expectation.subject} {self.field}: expected "
                f"{show(self.expected)}, got {show(self.actual)}")


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    return expected == actual


def verify(expects: list[Expectation], result: RunResult,
           probe: StateProbe | None) -> list[Failure]:
    """Compare every expectation that applies to `result.policy`; return the failures."""
    failures = []
    by_id = None
    for exp in expects:
        if exp.policy is not None and exp.policy != result.policy:
            continue
        if exp.id is not None:
            if by_id is None:
                by_id = {r.rid: r for r in result.requests}
            req = by_id.get(exp.id)
            actual_record = request_record(req) if req is not None else {}
        elif exp.at is not None:
            actual_record = probe.values.get(exp.at, {}) if probe else {}
        else:
            actual_record = result.summary
        for field, expected in exp.fields.items():
            actual = actual_record.get(field)
            if not _same(expected, actual):
                failures.append(Failure(exp, result.policy, field, expected, actual))
    return failures


def snapshot_ticks(expects: list[Expectation], policy: str) -> list[int]:
    """The ticks whose block counts the expectations for `policy` need."""
    return [e.at for e in expects
            if e.at is not None and (e.policy is None or e.policy == policy)]


