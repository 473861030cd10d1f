"""The sweep: one replay per configuration of a grid of options and policies.

This module owns the grid and everything made from it:

- the axes (`check_axis`): an option of `OPTIONS` and its values, each
  checked as a flag or a config record is, with the same messages; a
  `policy` axis takes one policy name per value;
- the configurations (`build_grid`): the cross product of the axes in the
  order they were given, the first axis varying slowest and the last
  (the policies, unless the grid places them) fastest, each resolved over
  the trace's config and the fixed options, and numbered from 0 in that
  order. They are made when asked for (`GridConfigurations`: configuration
  i is computed from i), so that a grid costs memory only for what runs;
  `build_grid` still resolves every one of them once, keeping none, so that
  a combination that cannot work is refused before anything runs; a grid
  has at most `MAX_CONFIGURATIONS`;
- the slices of `--shard K/N` (`shard_of`): configuration i belongs to
  shard i mod N (0 <= K < N), so that every shard gets a share of every
  part of the grid; a shard makes only its own configurations;
- running the configurations (`run_grid`) in process or on any
  `concurrent.futures.Executor` (a process pool, a Dask or Ray client's
  executor), one task per configuration, rows always in grid order
  (`sweep -j N` runs `run_configuration` in the command line's own worker
  processes and makes each row with `configuration_row`);
- the rows (`index`, the swept values, `time_unit`, `stalled`, then every
  field of the run summary), their CSV and JSONL (`format_csv`,
  `format_jsonl`: a first JSONL line, the header, fingerprints the trace's
  bytes, the axes and the fixed options: `fingerprint`), and the aligned
  table `sweep` prints (`format_table`).

This module owns the grid, its configurations and shards; running them is
`sweep_runs`', their rows as text `sweep_rows`', and joining shards back
(`sweep merge`) `sweep_merge`'s. Nothing here writes files or reads argv:
`cli.sweep` does.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import os
import re
from typing import Any, Iterable, Iterator, Sequence

from ..engine.host_summary import HOST_RUN_FIELDS
from ..engine.summary import FLEET_RUN_FIELDS, RUN_FIELDS
from ..gpu.kv_pool import fit_pool
from ..records.errors import UsageError
from ..records.option_table import OPTIONS, format_slo
from ..records.option_values import show
from ..records.options import Options
from .request_rows import csv_text
from .specs import load_specs
from .trace import Trace, read_trace, read_whole_trace
from .trace_config import check_options, resolve_options

__all__ = ["SWEEP_VERSION", "Axis", "Configuration", "GridConfigurations", "Grid",
           "check_axis", "with_policies", "build_grid", "fingerprint", "parse_shard", "shard_of",
           "file_digest", "trace_and_digest", "cell_text", "json_value_of", "MAX_CONFIGURATIONS"]

SWEEP_VERSION = 1
# `--shard K/N`: ASCII digits only; at most 18 of them, so that int() never meets
# Python's limit on the length of a decimal string (and N fits any index).
_SHARD = re.compile(r"([0-9]{1,18})/([0-9]{1,18})")
# The most configurations a grid may have (and a merge may join). Every one is
# resolved before the first runs (about 12 us each: a million take about 12 s,
# in every shard), and the unsharded rows and `sweep merge` hold one row
# per configuration: a cross product past this is refused up front rather than
# left to run for hours.
MAX_CONFIGURATIONS = 1_000_000


@dataclasses.dataclass(frozen=True)
class Axis:
    """One swept option and its values (checked and normalised), in the order given."""

    name: str
    values: tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class Configuration:
    """One point of the grid: its number, its swept values and the options it runs with."""

    index: int
    values: tuple[tuple[str, Any], ...]
    options: Options

    @property
    def policy(self) -> str:
        """The one policy this configuration replays."""
        return self.options.policy[0]

    def label(self) -> str:
        """`num_blocks=8, policy=vllm`: how messages name it."""
        return _label(self.values)


def _label(values: Iterable[tuple[str, Any]]) -> str:
    return ", ".join(f"{name}={cell_text(name, value)}" for name, value in values)


class GridConfigurations(Sequence[Configuration]):
    """The configurations of a grid in grid order, each made when asked for: from
    its index, its values (the first axis varying slowest) and its options,
    resolved over the trace's `config` and the `fixed` options (checked values).
    Indexing, slicing, `len` and iteration; nothing is kept."""

    def __init__(self, config: dict[str, Any], fixed: dict[str, Any],
                 axes: tuple[Axis, ...], plugin_dir: str | None = None,
                 trace_dir: str | None = None) -> None:
        self._config = config
        self._plugin_dir = plugin_dir  # where a relative plugin file is taken from
        self._trace_dir = trace_dir    # where a spec file the trace's config names is
        self._specs: dict = {}         # spec files read, each once (specs.load_specs)
        self._fixed = fixed
        self._axes = axes
        self._names = tuple(axis.name for axis in axes)
        self._count = math.prod(len(axis.values) for axis in axes)

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if not -self._count <= index < self._count:
            raise IndexError(f"configuration {index} of {self._count}")
        index %= self._count
        combo = []
        rest = index
        for axis in reversed(self._axes):
            rest, digit = divmod(rest, len(axis.values))
            combo.append(axis.values[digit])
        combo.reverse()
        return self._make(index, tuple(combo))

    def __iter__(self) -> Iterator[Configuration]:
        for index, combo in enumerate(self._combinations()):
            yield self._make(index, combo)

    def _combinations(self) -> Iterator[tuple[Any, ...]]:
        return itertools.product(*(axis.values for axis in self._axes))

    def _make(self, index: int, combo: tuple[Any, ...]) -> Configuration:
        values = tuple(zip(self._names, combo))
        return Configuration(index, values, self.options_of(index, values))

    def options_of(self, index: int, values: tuple[tuple[str, Any], ...]) -> Options:
        """The options of configuration `index`, whose swept values are `values`;
        UsageError naming it if they cannot work together."""
        raw = dict(self._fixed)
        raw.update((name, [value] if name == "policy" else value) for name, value in values)
        try:
            # Every value was checked already (the fixed ones by `build_grid`, the swept
            # ones by `check_axis`): what is left is how they go together.
            options = dataclasses.replace(Options.resolve(self._config, raw),
                                          trace_dir=self._trace_dir)
            problems = options.problems()
            if problems:
                raise UsageError("; ".join(problems))
            options = fit_pool(load_specs(options, self._specs))[0]
        except UsageError as exc:
            raise UsageError(f"grid: configuration {index} ({_label(values)}): {exc}") from None
        if self._plugin_dir is None:
            return options
        return dataclasses.replace(options, plugin_dir=self._plugin_dir)

    def check_all(self) -> tuple[bool, bool]:
        """Resolve every configuration in order, keeping none: the first that cannot
        work raises UsageError naming it. Returns whether any is a fleet, and whether
        any models host memory (`Options.host`: its summary has the host fields)."""
        fleet = host = False
        names = self._names
        for index, combo in enumerate(self._combinations()):
            options = self.options_of(index, tuple(zip(names, combo)))
            fleet = options.fleet or fleet
            host = options.host or host
        return fleet, host


@dataclasses.dataclass(frozen=True)
class Grid:
    """The axes, the fixed options, the configurations in grid order (made when asked
    for), the columns of the rows, and the fingerprint that tells shards of the same
    sweep apart from others."""

    trace_name: str
    trace_sha256: str | None
    axes: tuple[Axis, ...]
    fixed: dict[str, Any]
    configurations: GridConfigurations
    columns: tuple[str, ...]
    fingerprint: str

    def __len__(self) -> int:
        return len(self.configurations)


def json_value_of(name: str, value: Any) -> Any:
    """A checked option value as JSON spells it (objectives as an object)."""
    if name == "slo" and value is not None:
        return dict(value)
    return value


def cell_text(name: str, value: Any) -> str:
    """A value as CSV and messages spell it (`request_rows.csv_text`), objectives as
    the flag spells them."""
    if isinstance(value, dict):
        return format_slo(tuple(value.items()))
    return csv_text(value)


def with_policies(axes: list[Axis], policies: Any, where: str) -> list[Axis]:
    """`axes` and, when `policies` is given (a name or a list: `where`, the flag or
    argument that gave it), a last axis of them; a grid that lists policies too is a
    UsageError."""
    if policies is None:
        return axes
    if any(axis.name == "policy" for axis in axes):
        raise UsageError(f"{where} and a grid's policy list both give the policies; "
                         "use one of them")
    return axes + [check_axis("policy", [policies] if isinstance(policies, str)
                              else list(policies), where)]


def check_axis(name: str, values: Any, where: str = "grid") -> Axis:
    """An axis, its values checked one by one as a flag's would be; UsageError names
    `where` (`--grid`, the grid file), what is wrong and the value given."""
    spec = OPTIONS.get(name)
    if spec is None:
        problems: list[str] = []
        check_options({name: None}, problems.append)
        raise UsageError(f"{where}: {problems[0]}")
    if spec.trace_only:
        raise UsageError(f"{where}: {name} is a property of the trace file and cannot be "
                         f"swept, got {name}")
    if not isinstance(values, (list, tuple)) or not values:
        raise UsageError(f"{where}: {name} needs a non-empty list of values, got "
                         f"{show(values)}")
    checked = []
    # Values seen, for "listed twice": by hash where they have one (equal values,
    # such as 1 and 1.0, hash alike), so that a long list is checked in linear time.
    seen: set[Any] = set()
    unhashable: list[Any] = []
    for value in values:
        if name == "policy" and not isinstance(value, str):
            raise UsageError(f"{where}: policy values are single policy names, got "
                             f"{show(value)}")
        problems = []
        out = check_options({name: value}, problems.append)
        if problems:
            raise UsageError(f"{where}: {problems[0]}")
        normal = out[name][0] if name == "policy" else json_value_of(name, out[name])
        try:
            twice = normal in seen
            seen.add(normal)
        except TypeError:  # an objectives dict
            twice = normal in unhashable
            unhashable.append(normal)
        if twice:
            raise UsageError(f"{where}: {name} lists the value {show(value)} twice")
        checked.append(normal)
    return Axis(name, tuple(checked))


def build_grid(trace: Trace, axes: Iterable[Axis], fixed: dict[str, Any],
               trace_sha256: str | None = None, plugin_dir: str | None = None) -> Grid:
    """The grid of the cross product of `axes`, its configurations resolved over the
    trace's config and the `fixed` options (raw values, checked here). Without a
    `policy` axis, the policies of `fixed` (else the trace's, else the default) are
    the last axis. A grid of more than MAX_CONFIGURATIONS, or a configuration whose
    values cannot work together (order lpm without prefix caching, say), raises
    UsageError naming it: every configuration is resolved here, and none kept. A
    relative plugin file is taken from `plugin_dir` (None: the working directory);
    whether a plugin may run at all is the caller's to decide
    (`trace.allow_trace_plugins`)."""
    axes = list(axes)
    names = [axis.name for axis in axes]
    for name in names:
        if names.count(name) > 1:
            raise UsageError(f"grid: the option {name} is swept twice; give all its values "
                             "in one list")
    for name in names:
        if name in fixed and fixed[name] is not None:
            flag = "--policy" if name == "policy" else OPTIONS[name].flag
            raise UsageError(f"grid: {name} is both swept and fixed ({flag}); drop one")
    # (How the options go together is each configuration's to check: an axis may
    # complete the fixed ones.)
    base, checked = resolve_options(trace.config, dict(fixed), trace.directory, specs=False,
                                    combined=False)
    if "policy" not in names:
        axes.append(Axis("policy", tuple(base.policy)))
        names.append("policy")
    configurations = GridConfigurations(trace.config, checked, tuple(axes), plugin_dir,
                                        trace.directory)
    if len(configurations) > MAX_CONFIGURATIONS:
        sizes = " x ".join(f"{len(axis.values):,} {axis.name}" for axis in axes)
        raise UsageError(f"grid: {len(configurations):,} configurations ({sizes}), more than "
                         f"the {MAX_CONFIGURATIONS:,} a sweep may have; sweep fewer values")
    fleet, host = configurations.check_all()
    fields = (RUN_FIELDS + (FLEET_RUN_FIELDS if fleet else ())
              + (HOST_RUN_FIELDS if host else ()))
    columns = ("index", *names, "time_unit", "stalled", *fields)
    fixed_json = {name: json_value_of(name, value) for name, value in checked.items()}
    identity = fingerprint(trace_sha256, [[axis.name, list(axis.values)] for axis in axes],
                           fixed_json)
    return Grid(trace.name, trace_sha256, tuple(axes), fixed_json, configurations,
                columns, identity)


def fingerprint(trace_sha256: str | None, grid: list[list[Any]],
                 options: dict[str, Any]) -> str:
    """The fingerprint of a sweep's identity: the trace's bytes, the grid (a list of
    [option, values]) and the fixed options. Shards of one sweep share it."""
    identity = {"sweep": SWEEP_VERSION, "trace_sha256": trace_sha256, "grid": grid,
                "options": options}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def parse_shard(text: str) -> tuple[int, int]:
    """`K/N` with 0 <= K < N -> (K, N); UsageError otherwise.

    K and N are ASCII digits and nothing else: no sign, space, underscore or
    other script's digits, all of which Python's int() would take."""
    match = _SHARD.fullmatch(text)
    if match is None and re.fullmatch(r"[0-9]+/[0-9]+", text):  # (0 <= K < N may hold)
        raise UsageError(f"--shard's K and N have at most 18 digits each, got {show(text)}")
    shard, shards = (int(match[1]), int(match[2])) if match else (-1, -1)
    if not 0 <= shard < shards:
        raise UsageError(f"--shard must be K/N with 0 <= K < N (K counts from 0), got "
                         f"{show(text)}")
    return shard, shards


def shard_of(grid: Grid, shard: tuple[int, int] | None) -> list[Configuration]:
    """The configurations of shard K of N: those whose index is K modulo N (only
    they are made); every configuration without a shard."""
    configurations = grid.configurations
    if shard is None:
        return list(configurations)
    k, n = shard
    return [configurations[i] for i in range(k, len(configurations), n)]




def file_digest(path: str) -> str:
    """The SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return digest.hexdigest()


def trace_and_digest(path: str) -> tuple[Trace, str]:
    """The trace at `path` (`-`: standard input) and the SHA-256 of its bytes, which
    name it in a sweep's rows. What is not a regular file (a FIFO, `<(...)`, a device)
    is read once, for both: a second read saw nothing (`sweep <(cat t.jsonl)` replayed
    an empty trace) or waited for a writer that had gone (`search` of a FIFO)."""
    if path != "-" and os.path.isfile(path):
        return read_trace(path), file_digest(path)
    trace, data = read_whole_trace(path)
    return trace, hashlib.sha256(data).hexdigest()
