"""The options a run takes from a trace's `config` record and from flags: each
value checked (`check_options`, the same words for a config record, a flag and a
sweep's axis), resolved over the defaults (`resolve_options`), and the rule that
a trace is data: a plugin policy its config names runs only when the user asks.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..gpu.catalogue import GPUS, MODELS, is_path, parse_cost_model
from ..policies import POLICIES, is_plugin, spelling_problem
from ..records.errors import UsageError
from ..records.option_table import OPTIONS
from ..records.option_values import check_value, show
from ..records.options import Options
from ..requests.queues import QUEUE_ORDERS
from .problems import did_you_mean
from .specs import load_specs

if TYPE_CHECKING:  # only named in annotations; trace.py imports this module
    from .trace import Trace

__all__ = ["resolve_options", "check_options", "ALLOW_FLAG", "plugins_from_trace",
           "allow_trace_plugins"]


def resolve_options(config: dict[str, Any], values: dict[str, Any],
                    directory: str | None = None, specs: bool = True, combined: bool = True
                    ) -> tuple[Options, dict[str, Any]]:
    """Defaults, then a trace's `config`, then `values` (flags or keyword options),
    checked: the options and the checked values, with the model and GPU a cost model
    prices read when `specs` (`specs.load_specs`; a file the config names is taken from
    the trace's `directory`; a sweep's base options, whose axes may give the model or the
    GPU, leave them to each configuration). Every problem raises UsageError (ConfigError
    for a bad spec file); without `combined`, values that do not work together are left
    for later (a sweep's base options, which its axes complete)."""
    problems: list[str] = []
    checked = check_options(values, problems.append)
    if problems:
        raise UsageError("; ".join(problems))
    options = dataclasses.replace(Options.resolve(config, checked), trace_dir=directory)
    if combined and options.problems():
        raise UsageError("; ".join(options.problems()))
    return (load_specs(options) if specs else options), checked


def check_options(values: dict[str, Any], report) -> dict[str, Any]:
    """Validate option values (config record or flags); `report(msg)` each problem."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key not in OPTIONS:
            report(f"unknown option {key!r}{did_you_mean(key, OPTIONS)}")
            continue
        checked, problem = check_value(key, value)
        if problem:
            report(problem)
            continue
        if key == "policy":
            unknown = [p for p in checked if p not in POLICIES and not is_plugin(p)]
            if unknown:
                report(f"unknown policy {unknown[0]!r}{did_you_mean(unknown[0], POLICIES)} "
                       f"(known: {', '.join(POLICIES)}, or MODULE:CLASS or FILE.py:CLASS "
                       "for your own)")
                continue
            # A plugin's spelling is checked here; its code is never run (a trace is
            # data: `plugins_from_trace`).
            broken = [spelling_problem(name) for name in checked if is_plugin(name)]
            broken = [problem for problem in broken if problem]
            if broken:
                report(broken[0])
                continue
            if len(set(checked)) != len(checked):
                report(f"policy lists a name twice, got {show(checked)}")
                continue
        if key == "cost_model" and checked is not None:
            try:
                parse_cost_model(checked)
            except ValueError as exc:
                report(str(exc))
                continue
        if key in ("model", "gpu") and checked is not None and not is_path(checked):
            known = MODELS if key == "model" else GPUS
            if checked not in known:
                what = "a config.json" if key == "model" else "a GPU spec .json"
                report(f"unknown {key} {checked!r}{did_you_mean(checked, known)} (known: "
                       f"{', '.join(known)}; or the path of {what})")
                continue
        if key == "order" and checked not in QUEUE_ORDERS:
            report(f"unknown order {checked!r}{did_you_mean(checked, QUEUE_ORDERS)} "
                   f"(known: {', '.join(QUEUE_ORDERS)})")
            continue
        out[key] = checked
    return out


# --- a trace is data -----------------------------------------------------------------

ALLOW_FLAG = "--allow-trace-plugins"


def plugins_from_trace(options: Options) -> list[str]:
    """The plugin policies (`FILE.py:CLASS`, `MODULE:CLASS`) that `options` would run
    because a trace's config names them (no flag or argument gave the policies)."""
    if options.origin.get("policy") != "trace":
        return []
    return [name for name in options.policy if is_plugin(name)]


def allow_trace_plugins(trace: Trace, options: Options, allowed: bool,
                        how: str = f"pass {ALLOW_FLAG} (or name it with --policy)"
                        ) -> Options:
    """`options` as they may run: a plugin named only by the trace's config is code
    the user did not ask for on the command line, refused (UsageError naming it and
    `how` to allow it) unless `allowed`; allowed, a relative file is taken from the
    trace's folder."""
    named = plugins_from_trace(options)
    if not named:
        return options
    if not allowed:
        listed = ", ".join(repr(name) for name in named)
        noun = "policy" if len(named) == 1 else "policies"
        raise UsageError(f"{trace.name}: its config names the plugin {noun} {listed}: "
                         f"Python code, which a trace never runs on its own; to run it, "
                         f"{how}")
    return dataclasses.replace(options, plugin_dir=trace.directory)
