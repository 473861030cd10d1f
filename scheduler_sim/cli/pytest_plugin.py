"""A pytest plugin: trace files with `expect` records become test items.

Installing scheduler-sim registers this module with pytest (the `pytest11`
entry point), so `pytest traces/` collects every `.jsonl` file that holds at
least one record of type `expect`, and runs one test item per expectation
and policy, named `line N: <what> [<policy>]`. A failure shows each field
with its expected and actual value, exactly as `scheduler-sim check` prints
it; a trace that does not parse fails one item with the parser's messages.
Other `.jsonl` files (data, logs) are left alone.

A trace is data: collecting one never runs code. A plugin policy that a
trace's config names (`"policy": "my_policy.py:Mine"`) runs only with
`pytest --allow-trace-plugins` (its file taken from the trace's folder);
without it, that trace's items fail with a message saying so. Whatever a
plugin does wrong fails its item with the one-line `policy error` of the
command line, never a traceback of the simulator.

The package never imports this module: only pytest does, so the simulator
itself needs nothing outside the standard library.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from ..gpu.kv_pool import fit_pool
from ..io.expectations import CheckResult, check_trace
from ..io.specs import load_specs
from ..io.trace import Trace, read_trace
from ..io.trace_config import ALLOW_FLAG, allow_trace_plugins
from ..policies import PluginError, is_plugin, policy_class
from ..records import interrupts
from ..records.errors import SimError, TraceError, UsageError
from ..records.options import Options

__all__ = ["pytest_addoption", "pytest_collect_file", "TraceFile", "ExpectationItem",
           "TraceProblem"]


def pytest_addoption(parser: Any) -> None:
    """`--allow-trace-plugins`: run the plugin policies traces' configs name."""
    parser.getgroup("scheduler-sim").addoption(
        ALLOW_FLAG, action="store_true", dest="scheduler_sim_allow_trace_plugins",
        help="scheduler-sim: run a plugin policy (FILE.py:CLASS, MODULE:CLASS) that a "
             "trace's config names; without it a trace never runs code")

_EXPECT = re.compile(rb'"type"\s*:\s*"expect"')


def pytest_collect_file(file_path: Any, parent: Any) -> Any:
    """Collect a `.jsonl` file that has `expect` records."""
    if file_path.suffix != ".jsonl":
        return None
    try:
        data = file_path.read_bytes()
    except OSError:
        return None
    if not _EXPECT.search(data):
        return None
    return TraceFile.from_parent(parent, path=file_path)


class TraceProblem(Exception):
    """The trace or its options are invalid; carries the messages."""


class ExpectationFailed(Exception):
    """An expectation did not hold; carries its check result."""


class TraceFile(pytest.File):
    """A trace with expectations: one item per expectation and policy."""

    def collect(self):
        try:
            trace = read_trace(str(self.path))
            options = dataclasses.replace(Options.resolve(trace.config),
                                          trace_dir=trace.directory)
            if options.problems():
                raise UsageError("; ".join(options.problems()))
            options, _ = fit_pool(load_specs(options))
        except TraceError as exc:
            yield ProblemItem.from_parent(self, name="trace", messages=exc.problems)
            return
        except UsageError as exc:
            yield ProblemItem.from_parent(self, name="options", messages=[str(exc)])
            return
        self._trace = trace
        self._options = options
        self._results: dict[str, list[CheckResult]] = {}
        for policy in options.policy:
            for exp in trace.expects:
                if exp.policy is None or exp.policy == policy:
                    name = f"line {exp.line}: {exp.subject} [{policy}]"
                    yield ExpectationItem.from_parent(self, name=name, line=exp.line,
                                                      policy=policy)

    def result(self, policy: str, line: int) -> CheckResult:
        """The check of the expectation on `line` under `policy` (each policy replays once)."""
        if policy not in self._results:
            allowed = self.config.getoption("scheduler_sim_allow_trace_plugins", False)
            options = dataclasses.replace(self._options, policy=(policy,))
            options = allow_trace_plugins(self._trace, options, allowed,
                                          f"run pytest with {ALLOW_FLAG}")
            with interrupts.watching():  # an interrupt a policy raises is not Ctrl-C
                if is_plugin(policy):
                    try:
                        policy_class(policy, options.plugin_dir)
                    except PluginError as exc:
                        raise UsageError(str(exc)) from None
                self._results[policy] = check_trace(self._trace, options)
        return next(r for r in self._results[policy] if r.expectation.line == line)

    @property
    def trace(self) -> Trace:
        """The parsed trace."""
        return self._trace


class ExpectationItem(pytest.Item):
    """One expectation of a trace, checked against one policy's replay."""

    def __init__(self, *, line: int, policy: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.line = line
        self.policy = policy

    def runtest(self) -> None:
        result = self.parent.result(self.policy, self.line)
        if not result.ok:
            raise ExpectationFailed(result)

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        if isinstance(excinfo.value, ExpectationFailed):
            return "\n".join(excinfo.value.args[0].messages(str(self.path)))
        if isinstance(excinfo.value, SimError):  # a plugin's fault, a refused plugin, ...
            return f"{type(excinfo.value).__name__}: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int, str]:
        return self.path, self.line - 1, self.name


class ProblemItem(pytest.Item):
    """A trace that cannot be checked: fails with the problems found."""

    def __init__(self, *, messages: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.messages = messages

    def runtest(self) -> None:
        raise TraceProblem("\n".join(self.messages))

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        if isinstance(excinfo.value, TraceProblem):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int, str]:
        return self.path, 0, self.name
