"""Running the policies of one `replay`: in turn, or in parallel processes (`-j N`).

This module owns what one policy's run writes (`Sinks`: its event lines, its
CSV rows, its Perfetto part, its per-request records) and the order in which
runs reach the outputs. `run_policy` replays one policy into its sinks.
`run_all` yields each policy's `Finished` in the policies' order:

- with one process, each run writes straight into the command's outputs;
- with `-j N`, at most N worker processes (`workers.Workers`, never more
  than there are policies) run the policies; each writes its outputs to
  files of its own in a temporary directory, and the parent copies them
  into the command's outputs in the policies' order, so every output is
  byte for byte what one process writes. The temporary directory is
  removed whatever happens; a worker that dies ends the replay
  (`WorkerDied`), and on Ctrl-C or SIGTERM the workers are stopped.

A KeyboardInterrupt (or SIGTERM's Terminated) out of `run_all` carries
nothing; the caller keeps the `Finished` runs it was given, and before the
interrupt goes on `run_all` hands over those a worker had returned but that
were not handed over yet.
"""
from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any, Callable

from ..engine.core import Engine
from ..engine.summary import request_record
from ..engine.work_series import WorkSeries
from ..io.event_file import EventFile
from ..io.outputs import Output
from ..io.progress import Progress
from ..io.request_rows import csv_row
from ..records import interrupts
from ..records.clock import Clock
from ..records.frozen import Record, record

if TYPE_CHECKING:  # (each loaded only when asked for: see `run_policy`)
    from ..io.perfetto import PerfettoFile
    from ..io.report_series import RunSeries

__all__ = ["Sinks", "Finished", "RequestRows", "run_policy", "run_all", "Plan"]


class RequestRows:
    """Per-request records of one policy's run, made as requests end and passed on
    in replay order (arrival, then trace position): written to the CSV output at
    once, and kept only for a table or JSON that prints them at the end. Holds
    back only the records of requests that ended before an earlier one."""

    def __init__(self, trace, clock: Clock, slo, policy: str, csv: Output | None,
                 keep: bool) -> None:
        self.clock, self.slo, self.policy, self.csv = clock, slo, policy, csv
        self.records: list[dict[str, Any]] | None = [] if keep else None
        self._order = (spec.id for spec in trace.workload.arrivals())
        self._next = next(self._order, None)
        self._waiting: dict[str, dict[str, Any]] = {}

    def ended(self, req) -> None:
        """The engine's `on_request_end`."""
        waiting = self._waiting
        waiting[req.rid] = request_record(req, self.clock, self.slo)
        while self._next is not None and self._next in waiting:
            record = waiting.pop(self._next)
            if self.csv is not None:
                self.csv.write(csv_row(self.policy, record))
            if self.records is not None:
                self.records.append(record)
            self._next = next(self._order, None)


@record  # a dataclass, its methods written once (records/frozen.py)
class Sinks(Record):
    """Where one policy's run writes (None: not asked for)."""

    events: EventFile | None = None
    csv: Output | None = None
    perfetto: Any = None  # a perfetto.Part


@record  # a dataclass, its methods written once (records/frozen.py)
class Finished(Record):
    """One policy's finished run: its summary row (with `replicas` in a fleet), its
    per-request records (kept for `--requests`) and whether it stalled."""

    position: int
    policy: str
    run: dict[str, Any]
    records: list[dict[str, Any]] | None
    stalled: bool
    series: RunSeries | None = None  # what --report draws


@record  # a dataclass, its methods written once (records/frozen.py)
class Plan(Record):
    """What every policy's run needs, the same for each (sent once to each child)."""

    trace: Any
    options: Any
    clock: Clock
    keep_records: bool  # --requests
    tag_policy: bool  # several policies: event lines carry `policy`
    want_events: bool
    want_csv: bool
    want_perfetto: bool
    tids: Any  # request id -> Perfetto track (perfetto.TrackNumbers), or None
    want_report: bool = False


class _Both:
    """Two event listeners as one (reading the record kinds either reads)."""

    def __init__(self, first: Callable, second: Callable) -> None:
        self.first, self.second = first, second
        kinds = [getattr(f, "kinds", None) for f in (first, second)]
        if None not in kinds:
            self.kinds = kinds[0] | kinds[1]

    def __call__(self, event) -> None:
        self.first(event)
        self.second(event)


def _chain(first: Callable | None, second: Callable | None) -> Callable | None:
    if first is None or second is None:
        return first or second
    return lambda req: (first(req), second(req))


def run_policy(plan: Plan, position: int, policy: str, sinks: Sinks,
               on_end: Callable | None = None) -> Finished:
    """Replay `policy` (at `position` among the policies) into `sinks`; `on_end` also
    sees each request that ends (progress)."""
    options = plan.options
    rows = (RequestRows(plan.trace, plan.clock, options.slo, policy, sinks.csv,
                        plan.keep_records)
            if plan.keep_records or sinks.csv else None)
    engines = (options.prefill_replicas + options.decode_replicas if options.disagg
               else options.replicas)
    # A fleet's modules and the report's series are loaded only when asked for (a
    # lone engine's replay without --report: 11 modules fewer, 12.6 million
    # instructions, 2.3% of a six-request replay's; benchmarks/README.md, "twelfth
    # steps: the fixed cost of a process").
    seen = None
    if plan.want_report:
        from ..io.report_series import RunSeries
        seen = RunSeries(policy, plan.clock, options.num_blocks, engines,
                         requests=len(plan.trace.workload))
    on_request_end = _chain(_chain(rows.ended if rows else None, on_end),
                            seen.ended if seen else None)
    events, part = sinks.events, sinks.perfetto

    def listener(replica: int | None = None) -> Callable | None:
        found = [f for f in (events.listener(policy, replica) if events else None,
                             part.listener(replica) if part is not None else None,
                             seen.listener(replica) if seen and options.fleet else seen)
                 if f is not None]
        if not found:
            return None
        first = found[0]
        for other in found[1:]:
            first = _Both(first, other)
        return first

    if options.fleet:
        from ..fleet import make_fleet
        runner = make_fleet(plan.trace.workload, options, policy,
                            on_event=listener if events or part is not None or seen else None,
                            keep_requests=False, on_request_end=on_request_end)
        engines = runner.engines
    else:
        runner = Engine(plan.trace.workload, options, policy, on_event=listener(),
                        keep_requests=False, on_request_end=on_request_end)
        engines = [runner]
    # Utilisation over time, for the report and the Perfetto file (a cost model's run).
    work = ([engine.ledger.draw_work() for engine in engines]
            if options.has_cost_model and (part is not None or seen is not None) else None)
    result = runner.run()
    if part is not None:
        if work is not None:
            from ..io.perfetto_work import draw_work  # (only with --perfetto)
            draw_work(part, work)
        part.finish()
    if seen is not None:
        seen.finish()
        seen.survival = result.survival
        if work is not None:
            seen.work = WorkSeries.pooled(work)
    run = {"policy": policy, **result.summary}
    if options.fleet:
        run["replicas"] = result.replicas
    return Finished(position, policy, run, rows.records if rows else None,
                    bool(result.stalled), seen)


# --- in parallel ----------------------------------------------------------------------

class _Discard:
    """A stand-in for standard output in a child (its outputs are always files)."""

    def write(self, text: str) -> int:
        raise RuntimeError("a child of replay -j wrote to standard output")


def _paths(tmpdir: str, position: int) -> dict[str, str]:
    return {kind: os.path.join(tmpdir, f"{position}.{kind}")
            for kind in ("events", "csv", "perfetto")}


def _child_run(shared: tuple[Plan, str], task: tuple[int, str]) -> Finished:
    """One policy's run in a worker process: its outputs to its own files in the
    temporary directory. `shared` is (plan, temporary directory), `task` (position,
    policy)."""
    plan, tmpdir = shared
    position, policy = task
    paths = _paths(tmpdir, position)
    stdout = _Discard()
    sinks = Sinks()
    opened: list = []
    try:
        if plan.want_events:
            sinks.events = EventFile(paths["events"], stdout, plan.tag_policy, plan.clock)
            opened.append(sinks.events)
        if plan.want_csv:
            sinks.csv = Output(paths["csv"], stdout, "cannot write requests", ".requests-")
            opened.append(sinks.csv)
        if plan.want_perfetto:
            out = Output(paths["perfetto"], stdout, "cannot write the Perfetto trace",
                         ".perfetto-")
            opened.append(out)
            from ..io.perfetto import fragment
            sinks.perfetto = fragment(out, position, policy, plan.clock, plan.tids)
        finished = run_policy(plan, position, policy, sinks)
        for output in opened:
            output.commit()
        return finished
    except Exception:
        for output in opened:
            output.abort()
        raise


def _copy(path: str, write: Callable[[str], None]) -> None:
    with open(path, encoding="utf-8", newline="") as handle:
        while True:
            chunk = handle.read(1 << 20)
            if not chunk:
                return
            write(chunk)


def _join(tmpdir: str, position: int, outputs: Sinks, perfetto: PerfettoFile | None) -> None:
    """Copy a child's output files into the command's outputs, then remove them."""
    paths = _paths(tmpdir, position)
    if outputs.events is not None:
        _copy(paths["events"], outputs.events.output.write)
    if outputs.csv is not None:
        _copy(paths["csv"], outputs.csv.write)
    if perfetto is not None:
        perfetto.join(paths["perfetto"])
    for path in paths.values():
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def run_all(plan: Plan, policies: list[str], jobs: int, outputs: Sinks,
            perfetto: PerfettoFile | None, progress: Progress,
            on_finished: Callable[[Finished], None]) -> None:
    """Run every policy; hand each `Finished` to `on_finished` in the policies' order,
    once its outputs are written. `outputs` are the command's outputs (the
    Perfetto file as `perfetto`).

    With -j, a worker that dies raises `WorkerDied`; on KeyboardInterrupt (or
    Terminated, SIGTERM's) the
    runs the workers had returned but that were not handed over yet are handed
    over too (their outputs are not written: the caller aborts them), then the
    interrupt goes on."""
    if jobs <= 1 or len(policies) <= 1:
        for position, policy in enumerate(policies):
            sinks = Sinks(outputs.events, outputs.csv,
                          perfetto.part(position, policy) if perfetto else None)
            on_finished(run_policy(plan, position, policy, sinks, progress.listener(policy)))
        return
    from .workers import Workers  # (-j only: a plain replay never loads multiprocessing)
    tasks = list(enumerate(policies))
    # Made with signals held: the folder is removed at exit by its finalizer even if an
    # interrupt comes before the `with` below takes it.
    with interrupts.held():
        folder = tempfile.TemporaryDirectory(prefix=".scheduler-sim-j-")
    with folder as tmpdir, \
            Workers(_child_run, (plan, tmpdir), tasks, jobs,
                    lambda i: f"replaying policy '{policies[i]}'") as workers:
        current: Finished | None = None  # received, its outputs not joined yet
        try:
            for position, finished in workers.results():
                current = finished
                _join(tmpdir, position, outputs, perfetto)
                progress.policy_done(position + 1)
                current = None
                on_finished(finished)
        except (KeyboardInterrupt, interrupts.Terminated):
            for finished in ([current] if current else []) + workers.received():
                on_finished(finished)
            raise
