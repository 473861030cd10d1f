"""The audit's surfaces, a few fixed cases each, drawn from `benchmarks/fuzz_cli.py`.

Each case runs as `benchmarks/fuzz_cli.py` runs it: `python -m scheduler_sim`
(or `python -m pytest`) from this checkout, in a child process of its own
session, in a folder of its own, and is judged by the fuzzer's own rules (no
traceback, no orphan process, no input file changed, no temporary file left,
and what each surface adds; see the fuzzer's docstring). The full fuzzer
draws thousands of such cases (benchmarks/README.md); these are the few that
CI runs, chosen to cover each surface's main promise:

- a trace cannot make the tool import a plugin it names, unless the reader
  opts in (`--allow-trace-plugins`) or names it with `--policy`;
- a plugin that raises, exits or kills itself in any mode ends the run with
  exit 3 and one line naming the policy;
- an output that names an input (or another output, or nothing) is refused,
  and no file changes;
- SIGINT / SIGTERM leave no temporary file, no unfinished output and no process;
- corrupted sweep shards and grid files are refused without a traceback;
- times at the format's limit go through every output.

One case runs by default (a trace naming a plugin, validated); the others run in
the slow tier (`pytest -m slow`, which CI runs too): each is a process of its
own, about half a second of CPU, and each surface's promise is also pinned in
process by its own tests (test_trace_is_data, test_plugin_contract,
test_output_paths, test_outputs and test_workers, test_sweep_inputs,
test_huge_times).

The timeout (30 s) only turns a hang into a failure, and a signal case passes
whichever comes first, the end of the run or the signal: a correct tool passes
on a machine of any speed.
"""
from __future__ import annotations

import random
import signal

import pytest

from conftest import ROOT, load_script


fuzz = load_script(ROOT / "benchmarks" / "fuzz_cli.py", "fuzz_cli")
TIMEOUT = 30.0


def passes(case) -> None:
    """Run `case` as the fuzzer does and fail with its problem, command and message."""
    outcome = fuzz.run_subprocess(case, TIMEOUT)
    assert outcome.problem is None, (
        f"{outcome.problem}\n  {case.shown()}\n  -> {fuzz.status_text(outcome.status)}: "
        f"{outcome.detail}")


def tiered(names, default: set[str]) -> list:
    """The case names of a surface: those in `default` run by default, the others are
    marked `slow`."""
    return [name if name in default else pytest.param(name, marks=pytest.mark.slow)
            for name in names]


def rng(seed: int = 0) -> random.Random:
    """The generators' random choices that the arguments below do not fix."""
    return random.Random(seed)


TRACE_PLUGINS = {
    "validate of a trace naming FILE.py:CLASS": dict(spelling="FILE.py:CLASS", run="validate"),
    "replay --policy continuous of a trace naming a list": dict(
        spelling="a list", run="replay --policy continuous", opt_in=False),
    "check of a trace naming a path through ..": dict(
        spelling="a path through ..", run="check", opt_in=False),
    "pytest of a trace naming MODULE:CLASS": dict(spelling="MODULE:CLASS", run="pytest",
                                                  opt_in=False),
    "check --allow-trace-plugins runs the plugin": dict(
        spelling="an absolute path", run="check", opt_in=True),
    "pytest --allow-trace-plugins runs the plugin": dict(
        spelling="FILE.py:CLASS", run="pytest", opt_in=True),
}


@pytest.mark.parametrize("name", tiered(TRACE_PLUGINS,
                                        {"validate of a trace naming FILE.py:CLASS"}))
def test_a_trace_cannot_import_the_plugin_it_names(name):
    """A trace whose config names a plugin (that leaves a marker when imported) leaves
    no marker unless the reader opted in, and then runs it normally."""
    passes(fuzz.trace_plugin_case(rng(), **TRACE_PLUGINS[name]))


PLUGIN_FAULTS = {
    "ValueError in schedule, --replicas 3": ("ValueError", "schedule", "--replicas 3"),
    "ValueError in __init__, lone engine": ("ValueError", "__init__", "lone engine"),
    "SystemExit(0) in add, check": ("SystemExit(0)", "add", "check"),
    "KeyboardInterrupt at import, sweep": ("KeyboardInterrupt", "import", "sweep"),
    "SIGKILL in schedule, -j 2": ("SIGKILL to itself", "schedule", "-j 2, two policies"),
    "garbage plan, disaggregated": ("plan [(req,)]", "schedule",
                                    "--prefill-replicas 1 --decode-replicas 1"),
    "__str__ raises, pytest": ("an exception whose __str__ raises", "schedule", "pytest"),
}


@pytest.mark.parametrize("name", tiered(PLUGIN_FAULTS, set()))
def test_a_misbehaving_plugin_is_a_policy_error(name):
    """A plugin that raises, exits or kills itself ends the run with exit 3 and one line
    `policy error: policy '...'` (pytest: a failed test naming it), never a pass."""
    fault, where, mode = PLUGIN_FAULTS[name]
    passes(fuzz.plugin_fault_case(rng(), fault=fault, where=where, mode=mode))


OUTPUT_PATHS = {
    "replay --events naming the trace": ("replay", "an input", "the same name"),
    "convert -o through a hard link to its input": ("convert", "an input", "a hard link"),
    "sweep merge writing over a shard by a symlink": ("sweep merge", "an input", "a symlink"),
    "two outputs of replay, one by ./NAME": ("replay", "another output", "./NAME"),
    "an empty output path": ("check", "an empty path", None),
}


@pytest.mark.parametrize("name", tiered(OUTPUT_PATHS, set()))
def test_an_output_naming_an_input_is_refused(name):
    """An output naming an input (by any spelling), another output, or nothing: exit 2,
    and every file in the folder is byte for byte what it was."""
    command, collision, alias = OUTPUT_PATHS[name]
    passes(fuzz.output_path_case(rng(), command=command, collision=collision, alias=alias))


SIGNALS = {
    "SIGINT to replay -j 2": ("replay -j 2", signal.SIGINT, 1),
    "SIGTERM to sweep -j 2 with an idle worker": ("sweep -j 2, one configuration",
                                                  signal.SIGTERM, 2),
}


@pytest.mark.parametrize("name", tiered(SIGNALS, set()))
def test_a_signal_leaves_nothing_behind(name):
    """SIGINT / SIGTERM to the process group 0.2 s after the run opened its outputs (a sweep
    worker idle): 130 / 143 (or a normal end), no traceback, temporary file, unfinished output
    or process left."""
    run, signum, seed = SIGNALS[name]
    passes(fuzz.signal_case(rng(seed), run=run, signum=signum, delay=0.2, started=True,
                            target="group", size=1500))


@pytest.mark.parametrize("what, seed", [pytest.param("shard", 1, marks=pytest.mark.slow),
                                        pytest.param("grid", 1, marks=pytest.mark.slow)])
def test_a_corrupted_sweep_file_is_refused(what, seed):
    """`sweep merge` of a corrupted shard, `sweep --grid-file` of a corrupted grid file:
    exit 0, 1 or 2, never a traceback."""
    passes(fuzz.sweep_file_case(rng(seed), what=what))


@pytest.mark.parametrize("unit, output", [
    pytest.param("s", "--report", marks=pytest.mark.slow),
    pytest.param("ms", "--perfetto", marks=pytest.mark.slow),
    pytest.param("tick", "--json --requests", marks=pytest.mark.slow)])
def test_times_at_the_limit_go_through_every_output(unit, output):
    """Arrivals, deadlines and cancellations up to 1e15 in the trace's unit, under a cost
    model: exit 0, 1 or 2, no traceback, and JSON outputs are strict JSON."""
    passes(fuzz.huge_time_case(rng(1), unit=unit, output=output, cost_model=True))
