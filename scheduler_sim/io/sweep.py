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
  bytes, the axes and the fixed options), joining shards back
  (`merge_shards`: every file checked whole, as a trace is, its header
  field by field and each row against the header; at most
  MAX_CONFIGURATIONS configurations and MAX_SHARD_BYTES a file), and the
  aligned table `sweep` prints (`format_table`).

Nothing here writes files or reads argv: `cli.commands` does.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import os
import re
import sys
from concurrent.futures import Executor
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..engine.core import Engine
from ..engine.summary import FLEET_RUN_FIELDS, RUN_FIELDS
from ..fleet import make_fleet
from ..gpu.costmodel import fit_pool
from ..records.clock import Clock
from ..records.errors import TraceError, UsageError
from ..records.options import OPTIONS, Options, check_value, format_slo, show
from .report import csv_field, format_number, printable, text_width
from .trace import Problems, Trace, check_options, json_value, resolve_options

__all__ = ["SWEEP_VERSION", "Axis", "Configuration", "GridConfigurations", "Grid",
           "check_axis", "build_grid", "parse_shard", "shard_of", "run_configuration",
           "configuration_row", "run_grid", "format_jsonl", "format_csv", "format_table",
           "merge_shards", "Merged", "read_shard", "read_limited", "file_digest",
           "MAX_CONFIGURATIONS", "MAX_SHARD_BYTES", "HEADER_FIELDS"]

SWEEP_VERSION = 1
# `--shard K/N`: ASCII digits only; at most 18 of them, so that int() never meets
# Python's limit on the length of a decimal string (and N fits any index).
_SHARD = re.compile(r"([0-9]{1,18})/([0-9]{1,18})")
# The most configurations a grid may have (and a merge may join). Every one is
# resolved before the first runs (some 15 to 40 us each: a million take up to a
# minute, in every shard), and the unsharded rows and `sweep merge` hold one row
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
    return ", ".join(f"{name}={_cell(name, value)}" for name, value in values)


class GridConfigurations(Sequence[Configuration]):
    """The configurations of a grid in grid order, each made when asked for: from
    its index, its values (the first axis varying slowest) and its options,
    resolved over the trace's `config` and the `fixed` options (checked values).
    Indexing, slicing, `len` and iteration; nothing is kept."""

    def __init__(self, config: dict[str, Any], fixed: dict[str, Any],
                 axes: tuple[Axis, ...], plugin_dir: str | None = None) -> None:
        self._config = config
        self._plugin_dir = plugin_dir  # where a relative plugin file is taken from
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
            options = fit_pool(resolve_options(self._config, raw)[0])[0]
        except UsageError as exc:
            raise UsageError(f"grid: configuration {index} ({_label(values)}): {exc}") from None
        if self._plugin_dir is None:
            return options
        return dataclasses.replace(options, plugin_dir=self._plugin_dir)

    def check_all(self) -> bool:
        """Resolve every configuration in order, keeping none: the first that cannot
        work raises UsageError naming it. Returns whether any is a fleet."""
        fleet = False
        names = self._names
        for index, combo in enumerate(self._combinations()):
            fleet = self.options_of(index, tuple(zip(names, combo))).fleet or fleet
        return fleet


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


def _json_value(name: str, value: Any) -> Any:
    """A checked option value as JSON spells it (objectives as an object)."""
    if name == "slo" and value is not None:
        return dict(value)
    return value


def _cell(name: str, value: Any) -> str:
    """A value as CSV and messages spell it: null empty, booleans lowercase, floats
    exactly (repr), objectives as the flag spells them."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return format_slo(tuple(value.items()))
    return str(value)


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
        normal = out[name][0] if name == "policy" else _json_value(name, out[name])
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
    base, checked = resolve_options(trace.config, dict(fixed))
    if "policy" not in names:
        axes.append(Axis("policy", tuple(base.policy)))
        names.append("policy")
    configurations = GridConfigurations(trace.config, checked, tuple(axes), plugin_dir)
    if len(configurations) > MAX_CONFIGURATIONS:
        sizes = " x ".join(f"{len(axis.values):,} {axis.name}" for axis in axes)
        raise UsageError(f"grid: {len(configurations):,} configurations ({sizes}), more than "
                         f"the {MAX_CONFIGURATIONS:,} a sweep may have; sweep fewer values")
    fleet = configurations.check_all()
    fields = RUN_FIELDS + (FLEET_RUN_FIELDS if fleet else ())
    columns = ("index", *names, "time_unit", "stalled", *fields)
    fixed_json = {name: _json_value(name, value) for name, value in checked.items()}
    identity = {"sweep": SWEEP_VERSION, "trace_sha256": trace_sha256,
                "grid": [[axis.name, list(axis.values)] for axis in axes],
                "options": fixed_json}
    fingerprint = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return Grid(trace.name, trace_sha256, tuple(axes), fixed_json, configurations,
                columns, fingerprint)


def parse_shard(text: str) -> tuple[int, int]:
    """`K/N` with 0 <= K < N -> (K, N); UsageError otherwise.

    K and N are ASCII digits and nothing else: no sign, space, underscore or
    other script's digits, all of which Python's int() would take."""
    match = _SHARD.fullmatch(text)
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


def run_configuration(trace: Trace, options: Options) -> tuple[dict[str, Any], bool]:
    """Replay one configuration (one policy): its run summary and whether it stalled.

    A module-level function, so that a process pool or a cluster can run it."""
    policy = options.policy[0]
    if options.fleet:
        result = make_fleet(trace.workload, options, policy, keep_requests=False).run()
    else:
        result = Engine(trace.workload, options, policy, keep_requests=False).run()
    return result.summary, result.stalled


def configuration_row(config: Configuration, summary: dict[str, Any],
                      stalled: bool) -> dict[str, Any]:
    """The row of one configuration from its run summary (`run_configuration`)."""
    row: dict[str, Any] = {"index": config.index}
    row.update((name, _json_value(name, value)) for name, value in config.values)
    row["time_unit"] = Clock.of(config.options).label
    row["stalled"] = stalled
    row.update(summary)
    return row


def run_grid(trace: Trace, configurations: list[Configuration],
             executor: Executor | None = None) -> list[dict[str, Any]]:
    """One row per configuration, in the order given, whatever order they finish in.

    Without an executor each runs here in turn; with one, each is a task
    (`executor.submit`), and the rows are the same."""
    if executor is None:
        return [configuration_row(c, *run_configuration(trace, c.options))
                for c in configurations]
    futures = [executor.submit(run_configuration, trace, c.options) for c in configurations]
    try:
        return [configuration_row(c, *future.result())
                for c, future in zip(configurations, futures)]
    except BaseException:
        for future in futures:
            future.cancel()
        raise


def _header(grid: Grid, shard: tuple[int, int] | None) -> dict[str, Any]:
    return {"sweep": SWEEP_VERSION, "trace": grid.trace_name,
            "trace_sha256": grid.trace_sha256,
            "grid": {axis.name: list(axis.values) for axis in grid.axes},
            "options": grid.fixed, "configurations": len(grid),
            "shard": None if shard is None else f"{shard[0]}/{shard[1]}",
            "columns": list(grid.columns), "fingerprint": grid.fingerprint}


def _jsonl(header: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(record, separators=(",", ":")) + "\n"
                   for record in [header, *rows])


def format_jsonl(grid: Grid, rows: list[dict[str, Any]],
                 shard: tuple[int, int] | None = None) -> str:
    """The header line (what `merge` checks), then one row per configuration."""
    return _jsonl(_header(grid, shard), rows)


def _csv(columns: Iterable[str], rows: Iterable[dict[str, Any]]) -> str:
    columns = list(columns)
    lines = [",".join(columns)]
    lines.extend(",".join(csv_field(_cell(name, row.get(name))) for name in columns)
                 for row in rows)
    return "\n".join(lines) + "\n"


def format_csv(grid: Grid, rows: list[dict[str, Any]]) -> str:
    """One line per configuration: `index`, the swept values, `time_unit`, `stalled` and
    every summary field (a fleet's fields too when the grid has one); each field as
    `report.csv_field` writes it (RFC 4180 quoting, control characters escaped), LF line
    ends."""
    return _csv(grid.columns, rows)


# --- sweep merge: reading shards back ----------------------------------------------

# What `sweep merge` reads, with limits no real sweep reaches: a grid of at most
# MAX_CONFIGURATIONS (each one a whole replay), and shard files of at most 1 GiB
# each (a row is about 2 KB: some 500,000 rows in one file).
MAX_SHARD_BYTES = 2 ** 30
# The header's fields, in the order the sweep writes them.
HEADER_FIELDS = ("sweep", "trace", "trace_sha256", "grid", "options", "configurations",
                 "shard", "columns", "fingerprint")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CONTENT = re.compile(rb"[^ \t\r\n]")
_TIME_UNITS = ("ticks", "s")
_NUMBERS = (int, float)  # exactly: JSON's true and false are not numbers


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


# Shards are read strictly: a duplicate key, NaN or Infinity is a problem of the line.
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constant)


def _decode(raw: bytes) -> tuple[Any, str | None]:
    """One line of a shard as a JSON value, or why it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, (f"invalid UTF-8 at byte {exc.start + 1}, got "
                      f"{raw[exc.start:exc.start + 1]!r}")
    return json_value(_DECODER.decode, text)


def _lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(number, text without its line end) of each line of a shard, read lazily, up to
    the last line that holds anything (blank lines after it are not lines)."""
    size = len(data)
    pos = number = 0
    content = 0  # the first non-blank byte at or after `pos`, once looked for
    while pos <= size:
        if pos >= content:
            found = _CONTENT.search(data, pos)
            if found is None:
                return
            content = found.start()
        end = data.find(b"\n", pos)
        end = size if end < 0 else end
        number += 1
        line = data[pos:end]
        yield number, line[:-1] if line.endswith(b"\r") else line
        pos = end + 1


def read_limited(path: str, limit: int, why: str) -> bytes:
    """The bytes of a file (`-`: standard input), read no further than `limit` bytes:
    UsageError `FILE: larger than LIMIT, WHY` past that, or when it cannot be read."""
    name = "<stdin>" if path == "-" else path
    size = f"{limit // 2 ** 30} GiB" if limit >= 2 ** 30 else f"{limit // 2 ** 20} MiB"
    too_big = UsageError(f"{name}: larger than {size}, {why}")
    try:
        if path == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as handle:
                if os.fstat(handle.fileno()).st_size > limit:
                    raise too_big
                data = handle.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise too_big
    return data


def read_shard(path: str) -> bytes:
    """The bytes of a shard file (`-`: standard input), at most MAX_SHARD_BYTES."""
    return read_limited(path, MAX_SHARD_BYTES, "which no shard of a sweep is; split the "
                        "sweep into more shards")


def _fingerprint(trace_sha256: str | None, grid: list[list[Any]],
                 options: dict[str, Any]) -> str:
    """The fingerprint of a sweep's identity, as `build_grid` computes it."""
    identity = {"sweep": SWEEP_VERSION, "trace_sha256": trace_sha256, "grid": grid,
                "options": options}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON spells them: 1, 1.0 and true differ, and so does key order."""
    return json.dumps(a) == json.dumps(b)


def _checked_grid(header: dict[str, Any], fail: Callable[[str], None]) -> bool:
    """Whether the header's grid is an object of sweepable options and non-empty lists
    of values each of which the option takes (checked as the sweep checks them,
    without loading a policy of one's own)."""
    grid = header.get("grid")
    if not isinstance(grid, dict) or not grid or not all(
            isinstance(values, list) and values for values in grid.values()):
        fail(f"grid must be an object of option names and non-empty lists of values, got "
             f"{show(grid)}")
        return False
    ok = True
    for name, values in grid.items():
        spec = OPTIONS.get(name)
        if spec is None or spec.trace_only:
            fail(f"grid: {name!r} is not an option a sweep can sweep")
            ok = False
            continue
        for value in values:
            problem = check_value(name, value)[1]
            if problem is None and name == "policy" and not isinstance(value, str):
                problem = f"policy values are single policy names, got {show(value)}"
            if problem is not None:
                fail(f"grid: {problem}")
                ok = False
                break
    return ok


def _checked_options(header: dict[str, Any], fail: Callable[[str], None]) -> bool:
    """Whether the header's fixed options are an object of valid option values."""
    options = header.get("options")
    if not isinstance(options, dict):
        fail(f"options must be an object of option values, got {show(options)}")
        return False
    ok = True
    for name, value in options.items():
        if name not in OPTIONS:
            fail(f"options: unknown option {name!r}")
            ok = False
            continue
        problem = check_value(name, value)[1]
        if problem is not None:
            fail(f"options: {problem}")
            ok = False
    return ok


def _check_header(problems: Problems, line: tuple[int, bytes] | None
                  ) -> dict[str, Any] | None:
    """A shard's header (its first line), each field checked; None when it is not a
    sweep's header or any field is wrong (every problem reported)."""
    if line is None:
        problems.add(1, "empty, not the JSONL output of a sweep (its first line is the "
                     "sweep's header)")
        return None
    number, raw = line
    value, problem = _decode(raw)
    if problem is not None or not isinstance(value, dict) or "sweep" not in value:
        why = f", got {show(value)}" if problem is None else f": {problem}"
        if problem is not None and problem.startswith("invalid JSON"):
            why += f", got {show(raw.decode('utf-8', 'replace'))}"
        problems.add(number, "not the JSONL output of a sweep (its first line must be the "
                     f"sweep's header){why}")
        return None
    before = problems.count

    def fail(text: str) -> None:
        problems.add(number, "header: " + text)

    version = value["sweep"]
    if not _is_count(version) or version != SWEEP_VERSION:  # not true, nor 1.0
        fail(f"sweep must be {SWEEP_VERSION} (the version of the format this scheduler-sim "
             f"reads), got {show(version)}")
        return None
    for name in value:
        if name not in HEADER_FIELDS:
            fail(f"unknown field {name!r}")
    missing = [name for name in HEADER_FIELDS if name not in value]
    for name in missing:
        fail(f"missing field {name!r}")
    if "trace" not in missing and not isinstance(value["trace"], str):
        fail(f"trace must be a string (the trace's name), got {show(value['trace'])}")
    digest = value.get("trace_sha256")
    digest_ok = digest is None or (isinstance(digest, str) and _SHA256.fullmatch(digest))
    if not digest_ok:
        fail(f"trace_sha256 must be null or 64 lowercase hexadecimal digits, got "
             f"{show(digest)}")
    grid_ok = "grid" not in missing and _checked_grid(value, fail)
    options_ok = "options" not in missing and _checked_options(value, fail)
    total = value.get("configurations")
    if "configurations" in missing:
        pass
    elif not _is_count(total) or not 1 <= total <= MAX_CONFIGURATIONS:
        fail(f"configurations must be an integer from 1 to {MAX_CONFIGURATIONS:,}, got "
             f"{show(total)}")
    elif grid_ok:
        product = 1
        for values in value["grid"].values():
            product *= len(values)
        if total != product:
            fail(f"configurations must be {product:,}, the product of the lengths of the "
                 f"grid's lists, got {show(total)}")
    shard = value.get("shard")
    if shard is not None and not (isinstance(shard, str) and _shard_or_none(shard)):
        fail(f"shard must be null or K/N with 0 <= K < N, got {show(shard)}")
    columns = value.get("columns")
    if "columns" not in missing and grid_ok:
        first = ["index", *value["grid"], "time_unit", "stalled"]
        if (not isinstance(columns, list) or not all(isinstance(c, str) for c in columns)
                or len(set(columns)) != len(columns) or columns[:len(first)] != first):
            fail(f"columns must be a list of distinct names that starts with "
                 f"{', '.join(first[:-1])} and stalled, got {show(columns)}")
    fingerprint = value.get("fingerprint")
    if "fingerprint" in missing:
        pass
    elif not isinstance(fingerprint, str) or not _SHA256.fullmatch(fingerprint):
        fail(f"fingerprint must be 64 lowercase hexadecimal digits, got {show(fingerprint)}")
    elif digest_ok and grid_ok and options_ok and "trace_sha256" not in missing:
        grid = [[name, values] for name, values in value["grid"].items()]
        if fingerprint != _fingerprint(digest, grid, value["options"]):
            fail(f"fingerprint does not match the header's trace_sha256, grid and options "
                 f"(an edited header?), got {show(fingerprint)}")
    return value if problems.count == before else None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shard_or_none(text: str) -> tuple[int, int] | None:
    """`K/N` as `parse_shard` takes it, or None."""
    try:
        return parse_shard(text)
    except UsageError:
        return None


class _RowSchema:
    """What a row of one file must be, from the file's (checked) header."""

    def __init__(self, header: dict[str, Any]) -> None:
        self.total = header["configurations"]
        self.shard_text = header["shard"]
        self.shard = None if self.shard_text is None else parse_shard(self.shard_text)
        self.columns = header["columns"]
        self.axes = list(header["grid"].items())
        self.known = frozenset(self.columns)
        # Every column but the index (checked first) and a fleet's fields, which a
        # configuration that is not such a fleet leaves out.
        self.required = [c for c in self.columns if c != "index" and c not in FLEET_RUN_FIELDS]
        self.summary = frozenset(self.columns) - {"index", "time_unit", "stalled",
                                                  *header["grid"]}

    def problems(self, row: dict[str, Any]) -> list[str]:
        """What is wrong with a row (a JSON object), each problem worded whole."""
        found = []
        index = row.get("index")
        label = ""
        if "index" not in row:
            found.append("missing field 'index'")
        elif not _is_count(index) or not 0 <= index < self.total:
            found.append(f"index must be an integer from 0 to {self.total - 1:,}, got "
                         f"{show(index)}")
        else:
            label = f"configuration {index}: "
            if self.shard is not None and index % self.shard[1] != self.shard[0]:
                found.append(f"{label}not in shard {self.shard_text} (the file's header): its "
                             f"index modulo {self.shard[1]} is {index % self.shard[1]}")
        unknown = [key for key in row if key not in self.known]
        if unknown:
            found.append(f"{label}unknown {_fields(unknown)}")
        missing = [key for key in self.required if key not in row]
        if missing:
            found.append(f"{label}missing {_fields(missing)}")
        if label:
            rest = index
            for axis, values in reversed(self.axes):
                expected = values[rest % len(values)]
                rest //= len(values)
                if axis in row and not _same(row[axis], expected):
                    found.append(f"{label}{axis} must be {show(expected)}, the header's grid "
                                 f"at this index, got {show(row[axis])}")
        unit, stalled = row.get("time_unit", "s"), row.get("stalled", False)
        if unit not in _TIME_UNITS:
            found.append(f"{label}time_unit must be 'ticks' or 's', got {show(unit)}")
        if not isinstance(stalled, bool):
            found.append(f"{label}stalled must be true or false, got {show(stalled)}")
        summary = self.summary
        found.extend(f"{label}{key} must be a number or null (a field of the run summary), "
                     f"got {show(value)}" for key, value in row.items()
                     if key in summary and value is not None and type(value) not in _NUMBERS)
        return found


class _Rows:
    """The rows of a merge so far, each checked against its file's header, and kept as
    its JSON line (fields in the header's order) until the merge writes them."""

    def __init__(self) -> None:
        self.text: dict[int, str] = {}  # configuration -> its row
        self.where: dict[int, tuple[str, int]] = {}  # configuration -> (file, line)

    def read(self, name: str, problems: Problems, header: dict[str, Any],
             lines: Iterator[tuple[int, bytes]]) -> None:
        """Check and keep the rows of one file (the lines after its header)."""
        schema = _RowSchema(header)
        total, columns = schema.total, schema.columns
        for number, raw in lines:
            if number > total + 1:
                problems.add(number, f"more lines than a sweep of {total:,} configurations "
                             "writes (a header and a row each); read no further")
                return
            if not raw.strip():
                problems.add(number, "blank line (a sweep writes none)")
                continue
            row, problem = _decode(raw)
            if problem is None and not isinstance(row, dict):
                problem = f"expected a JSON object (a row of the sweep), got {show(row)}"
            found = [problem] if problem is not None else schema.problems(row)
            if not found:
                index = row["index"]
                if index in self.text:
                    other, line = self.where[index]
                    found.append(f"configuration {index} is also in {other} (line {line}): "
                                 "shards overlap")
            if found:
                for text in found:
                    problems.add(number, text)
                continue
            self.text[index] = json.dumps({c: row[c] for c in columns if c in row},
                                          separators=(",", ":"))
            self.where[index] = (name, number)


def _fields(names: list[str]) -> str:
    """`field 'x'`, or `fields 'x', 'y', 'z' and 4 more`."""
    if len(names) == 1:
        return f"field {names[0]!r}"
    shown = ", ".join(repr(n) for n in names[:5])
    return f"fields {shown}" + (f" and {len(names) - 5} more" if len(names) > 5 else "")


@dataclasses.dataclass(frozen=True)
class Merged:
    """The shards of a sweep joined back: the header (its `shard` null) and every
    configuration's row in grid order, as the unsharded sweep writes them."""

    header: dict[str, Any]
    rows: tuple[str, ...]  # each configuration's JSONL line, without its newline
    files: int

    def jsonl(self) -> str:
        """The JSONL the unsharded sweep writes, byte for byte."""
        head = json.dumps(self.header, separators=(",", ":"))
        return head + "\n" + "".join(row + "\n" for row in self.rows)

    def csv(self) -> str:
        """The CSV the unsharded sweep writes, byte for byte."""
        return _csv(self.header["columns"], (json.loads(row) for row in self.rows))


def merge_shards(shards: Iterable[tuple[str, bytes]]) -> Merged:
    """Join the JSONL outputs of a sharded sweep, given as (name, bytes).

    Each file is checked whole, as a trace is: its header field by field, then
    every row against the header (the index, the fields its columns name, the
    swept values the grid gives that index, the kind of every other value),
    and every problem of every file is raised at once as a TraceError
    (`file:line: what is wrong, got what`, MAX_PROBLEMS a file). A file from
    another sweep (another trace's bytes, grid or fixed options) or another
    version's columns, or a configuration in two files, is a problem of its
    line; configurations in no file raise UsageError."""
    first: tuple[str, dict[str, Any]] | None = None
    rows = _Rows()
    messages: list[str] = []
    files = 0
    for name, data in shards:
        files += 1
        problems = Problems(name)
        lines = _lines(data)
        header = _check_header(problems, next(lines, None))
        if header is not None and first is not None:
            header = _same_sweep(problems, header, *first)
        if header is not None:
            first = first or (name, header)
            rows.read(name, problems, header, lines)
        try:
            problems.raise_if_any()
        except TraceError as exc:
            messages.extend(exc.problems)
    if messages:
        raise TraceError(messages)
    if first is None:
        raise UsageError("sweep merge needs at least one shard file (JSONL), got none")
    header = {field: first[1][field] for field in HEADER_FIELDS}
    header["shard"] = None
    total = header["configurations"]
    missing = [i for i in range(total) if i not in rows.text]
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
        raise UsageError(f"sweep merge: {len(missing)} of {total} configurations are in no "
                         f"file (a shard is missing?): {shown}")
    return Merged(header, tuple(rows.text[i] for i in range(total)), files)


def _same_sweep(problems: Problems, header: dict[str, Any], first: str,
                theirs: dict[str, Any]) -> dict[str, Any] | None:
    """The header of a later file if it belongs to the same sweep as the first's (the
    same fingerprint and columns), else None with the problem reported."""
    if header["fingerprint"] != theirs["fingerprint"]:
        problems.add(1, f"header: from another sweep than {first} (trace bytes, grid or "
                     f"fixed options differ): fingerprint {show(header['fingerprint'])}, "
                     f"expected {show(theirs['fingerprint'])}")
        return None
    if header["columns"] != theirs["columns"]:
        problems.add(1, f"header: columns differ from those of {first} (written by another "
                     f"version of scheduler-sim?), got {show(header['columns'])}")
        return None
    return header


# (heading, summary field, kind) of the table `sweep` prints.
_TABLE = (("completed", "completed", "count"), ("ttft p50", "ttft_p50", "time"),
          ("ttft p99", "ttft_p99", "time"), ("tpot p50", "tpot_p50", "time"),
          ("e2el p99", "e2el_p99", "time"), ("throughput", "request_throughput", "rate"),
          ("output", "output_throughput", "tokens"), ("preempted", "preemptions", "count"),
          ("makespan", "makespan", "time"))
_UNITS = {"count": lambda unit: "", "time": lambda unit: unit,
          "rate": lambda unit: "req/" + ("s" if unit == "s" else "tick"),
          "tokens": lambda unit: "tok/" + ("s" if unit == "s" else "tick")}


def _column(values: list[Any], kind: str, units: list[str]) -> list[str]:
    """A column of the table: counts with separators, rates to 2 decimals (3 figures
    below 0.01), seconds to 4 decimals, ticks whole unless one has a fraction."""
    fractions = any(isinstance(v, float) for v, u in zip(values, units) if u != "s")
    out = []
    for value, unit in zip(values, units):
        if value is None:
            out.append("-")
        elif kind == "count":
            out.append(format_number(value))
        elif kind in ("rate", "tokens"):
            out.append(f"{value:.3g}" if value and abs(value) < 0.01 else f"{value:,.2f}")
        elif unit == "s":
            out.append(f"{value:,.4f}")
        else:
            out.append(f"{value:,.2f}" if fractions else format_number(value))
    return out


def format_table(grid: Grid, rows: list[dict[str, Any]]) -> str:
    """One aligned line per configuration: its number, swept values and key metrics,
    under a line of headings and a line of units (a `unit` column instead when the
    configurations do not share one)."""
    units = [row["time_unit"] for row in rows]
    shared = units[0] if units and len(set(units)) == 1 else None
    heads = ["#", *(axis.name for axis in grid.axes)]
    under = [""] * len(heads)
    columns = [[str(row["index"]) for row in rows]]
    columns += [[printable(_cell(a.name, row[a.name])) or "null" for row in rows]
                for a in grid.axes]
    if shared is None:
        heads.append("unit")
        under.append("")
        columns.append(units)
    for head, field, kind in _TABLE:
        heads.append(head)
        under.append(_UNITS[kind](shared) if shared else "")
        columns.append(_column([row.get(field) for row in rows], kind, units))
    heads.append("")
    under.append("")
    columns.append(["stalled" if row["stalled"] else "" for row in rows])
    widths = [max(text_width(h), text_width(u), *map(text_width, c))
              for h, u, c in zip(heads, under, columns)]
    left = set(range(1, 1 + len(grid.axes))) | {len(heads) - 1}

    def line(values: list[str]) -> str:
        return "  ".join(v + " " * (w - text_width(v)) if i in left
                         else " " * (w - text_width(v)) + v
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    out = [line(heads)]
    if any(under):
        out.append(line(under))
    out.extend(line([c[r] for c in columns]) for r in range(len(rows)))
    return "\n".join(out) + "\n"


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
