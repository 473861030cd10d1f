"""What a command's flags say: each option flag's text as the value the option
table checks (`flag_values`), the options resolved over a trace's config
(`resolve_options`), and the plugin policies they name, loaded before anything
runs (`load_plugins`) and listed as inputs the outputs may not overwrite
(`plugin_sources`).
"""
from __future__ import annotations

import argparse
from typing import Any, Iterable, TextIO

from ..gpu.kv_pool import PoolSizing, fit_pool
from ..io.trace import Trace
from ..io.trace_config import allow_trace_plugins
from ..io.trace_config import resolve_options as resolve_trace_options
from ..policies import PluginError, is_plugin, plugin_file, policy_class
from ..records.errors import UsageError
from ..records.option_table import OPTIONS
from ..records.options import Options
from .entry import PROG

__all__ = ["flag_value", "flag_values", "resolve_options", "load_plugins", "plugin_sources",
           "check_outputs_and_jobs"]


# Options for which `none` is a value, not null: `--calibration none` is the uncalibrated
# physics, `--calibration null` the default (the GPU's shipped calibration).
_NONE_IS_A_VALUE = frozenset({"calibration"})


def check_outputs_and_jobs(outputs: Iterable[tuple[str, Any]], jobs: int) -> list[str]:
    """At most one of a command's outputs (flag, target) may be standard output
    (`-`), and `-j` is at least 1; UsageError otherwise. Returns the flag writing
    to standard output, if one does (then the command's own text goes to stderr)."""
    to_stdout = [flag for flag, target in outputs if target == "-"]
    if len(to_stdout) > 1:
        raise UsageError(f"{to_stdout[0]} - and {to_stdout[1]} - cannot both write to standard "
                         "output; send one of them to a file")
    if jobs < 1:
        raise UsageError(f"-j must be an integer >= 1, got {jobs}")
    return to_stdout


def flag_value(spec_kind: str, text: str, name: str = "") -> Any:
    """Turn a flag's text into the JSON-like value `check_value` expects (`null`, and
    `none` but for the options in `_NONE_IS_A_VALUE`, are None)."""
    lowered = text.lower()
    if lowered == "none" and name in _NONE_IS_A_VALUE:
        return "none"
    if lowered in ("null", "none"):
        return None
    if spec_kind == "int":
        try:
            return int(text)
        except ValueError:
            return text
    if spec_kind in ("float", "duration"):
        try:
            return int(text) if spec_kind == "duration" else float(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return text
    return text


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The option flags given, as the JSON-like values `check_value` expects."""
    raw: dict[str, Any] = {}
    for spec in OPTIONS.values():
        value = getattr(args, spec.name, None)
        if value is None:
            continue
        if spec.kind in ("int", "float", "str", "duration"):
            value = flag_value(spec.kind, value, spec.name)
        raw[spec.name] = value
    return raw


def resolve_options(trace: Trace, args: argparse.Namespace,
                    err: TextIO | None = None) -> tuple[Options, PoolSizing | None]:
    """Defaults, then the trace's config, then the flags; then the KV pool from the GPU
    when a cost model runs (`kv_pool.fit_pool`). Bad flags raise UsageError.

    A flag that moves the trace's own times (`--tick-seconds` over a tick
    trace's config, under a cost model) is worth a warning on `err`. A plugin
    policy that only the trace's config names is refused unless the command
    line allows it (`--allow-trace-plugins`); `load_plugins` then loads them.
    """
    options, flags = resolve_trace_options(trace.config, flag_values(args), trace.directory)
    options = allow_trace_plugins(trace, options, getattr(args, "allow_trace_plugins", False))
    ticks = trace.config.get("tick_seconds")
    if (err is not None and options.has_cost_model and options.time_unit == "tick"
            and "tick_seconds" in flags and ticks is not None and flags["tick_seconds"] != ticks):
        err.write(f"{PROG}: warning: --tick-seconds {flags['tick_seconds']:g} overrides the "
                  f"trace's tick of {ticks:g} s: every arrival and wait in the trace moves "
                  "with it\n")
    return fit_pool(options)


def load_plugins(policies, base: str | None) -> None:
    """Load every plugin among `policies` now (a relative file from `base`): a name
    that leads nowhere is a UsageError; a module that raises, the plugin's
    PolicyError."""
    for name in policies:
        if is_plugin(name):
            try:
                policy_class(name, base)
            except PluginError as exc:
                raise UsageError(str(exc)) from None


def plugin_sources(policies: Iterable[Any] | None,
                   base: str | None = None) -> list[tuple[str, str]]:
    """The source files of the plugin policies spelled FILE.py:CLASS (a relative one
    taken from `base`), as inputs for `check_output_paths` (a plugin's source is read
    like a trace is)."""
    sources = []
    for spec in policies or ():
        path = plugin_file(str(spec), base) if is_plugin(str(spec)) else None
        if path is not None:
            sources.append((f"the source of policy {spec}", path))
    return sources
