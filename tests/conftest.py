"""Shared helpers for the tests: build a trace from records and replay it."""
from __future__ import annotations

import compileall
import importlib.util
import json
import os
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Many tests run the simulator as a child process from this checkout. Where
# PYTHONDONTWRITEBYTECODE is set (it is on our CI machines), each child would
# compile the package's ~140 modules from source again, about 0.3 s of CPU a
# child (callgrind: a tiny replay is 1.31e9 instructions without bytecode
# files, 0.53e9 with). Compiling them once here, as `pip install` does for an
# installed copy, lets every child read them.
compileall.compile_dir(str(ROOT / "scheduler_sim"), quiet=1)


MAX_WORKERS = 4


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """The suite on the machine's cores (`_use_the_cores`); the test modules rewritten
    for pytest's assertions once, before the workers start.

    Rewriting every test module costs about 7.6 s of CPU (10 s to collect the suite,
    2 s with `--assert=plain`), and each pytest-xdist worker collects the whole suite.
    pytest caches a rewritten module in `__pycache__` unless bytecode writing is off,
    as PYTHONDONTWRITEBYTECODE turns it off on our CI machines. So it is turned on for
    this process (the children the tests run keep the variable), and when workers
    will run the suite the main process imports every test module first: the workers
    then read the cached modules instead of each rewriting them. Measured on two
    cores (default tier): a fresh checkout 49.8 s wall and 81 s of CPU (88 s before,
    each worker rewriting), a second run 42.5 s and 73 s."""
    sys.dont_write_bytecode = False
    if hasattr(config, "workerinput"):
        return
    _use_the_cores(config)
    if not getattr(config.option, "numprocesses", None):
        return
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        importlib.import_module(path.stem)

from scheduler_sim.engine.core import Engine, RunResult  # noqa: E402
from scheduler_sim.records.options import Options  # noqa: E402
from scheduler_sim.io.trace import parse_trace  # noqa: E402


@pytest.fixture(autouse=True)
def _own_interning_table(monkeypatch):
    """Each test interns hash ids in a table of its own (ids from 0): the shared table
    lives as long as any keys made from it, so a test that kept keys alive would
    otherwise change the ids, and so the runs of consecutive keys, of the tests after
    it in the same worker (kv/block_keys.py's `_entries`)."""
    from scheduler_sim.kv import block_keys
    monkeypatch.setattr(block_keys, "_current_entries",
                        block_keys.weakref.ref(block_keys._Entries()))


def trace_bytes(records: list[dict]) -> bytes:
    """JSONL bytes for a list of record dicts."""
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def twelve_arrivals() -> list[dict]:
    """Twelve requests 37 ms apart, for a cost model: they arrive into and finish
    inside counted stretches (tests/test_counted_fold.py, tests/test_events.py)."""
    return [{"type": "config", "time_unit": "s"}] + [
        {"type": "request", "id": f"r{i}", "arrival": round(0.037 * i, 6),
         "prompt_tokens": 40 + 13 * i, "output_tokens": 5 + (7 * i) % 23} for i in range(12)]


def twelve_arrivals_stepped():
    """The twelve arrivals parsed, their options (Llama-3-8B on an H100, blocks of 16,
    a pool of 512), their clock, and the lines of their stepped replay (no
    fast-forward) under `continuous`, tagged "p": what a listened replay must write."""
    from scheduler_sim.records.clock import Clock

    trace = parse_trace(trace_bytes(twelve_arrivals()), "counted.jsonl")
    options = Options.resolve(trace.config, {"cost_model": "llama-3-8b/h100-sxm",
                                             "block_size": 16, "num_blocks": 512})
    clock = Clock.of(options)
    stepped: list[str] = []
    Engine(trace.workload, options, "continuous", fast_forward=False,
           on_event=lambda e: stepped.append(e.to_json("p", clock))).run()
    return trace, options, clock, stepped


def random_engine_options(rng: random.Random, cost_model: bool = False) -> dict:
    """Blocks of 4, a pool of 16-64, a budget of 4-64 tokens, 1-8 rows and a release
    delay of 0 or 2 (drawn in that order), and with `cost_model` Llama-3-8B on an H100
    on a 2 ms clock: the engines the folding, step-protocol and fleet tests run."""
    options = dict(block_size=4, num_blocks=rng.randint(16, 64),
                   token_budget=rng.randint(4, 64), max_rows=rng.randint(1, 8),
                   release_delay=rng.choice([0, 0, 2]))
    if cost_model:
        options.update(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002)
    return options


def slow_beyond(values, keep: int) -> list:
    """The values of a wide parametrized sweep (seeds, usually): the first `keep` run in
    the default tier, the rest are marked `slow` (`python -m pytest -q -m slow`, which
    CI runs too). Test ids stay the values themselves."""
    values = list(values)
    return values[:keep] + [pytest.param(v, marks=pytest.mark.slow) for v in values[keep:]]


def run_parts(total: int, default: int) -> list:
    """One seeded run of `total` cases (a fuzzer's) as two parameters, ranges of case
    numbers: the first `default` cases run by default, the rest in the slow tier. A part
    draws every case before it from the generator (cheap) and runs only its own, so the
    two parts together run exactly the cases of the run of `total`."""
    return [pytest.param(range(default), id=f"0-{default}"),
            pytest.param(range(default, total), id=f"{default}-{total}",
                         marks=pytest.mark.slow)]


def random_workload(seed: int) -> list[dict]:
    """1 to 30 requests (prompts 1-40, outputs 1-60 tokens) arriving in bursts and
    gaps, a tenth of them cancelled up to 50 ticks later: the random traces the
    folding and step-protocol tests replay."""
    rng = random.Random(seed)
    records = []
    t = 0
    for i in range(rng.randint(1, 30)):
        t += rng.choice([0, 0, 1, 3, 10, 40])
        records.append({"type": "request", "id": f"r{i}", "arrival": t,
                        "prompt_tokens": rng.randint(1, 40),
                        "output_tokens": rng.randint(1, 60)})
        if rng.random() < 0.1:
            records.append({"type": "cancel", "id": f"r{i}", "at": t + rng.randint(0, 50)})
    return records



def stir(records: list[dict], rng: random.Random, horizon: int, each=None) -> list[dict]:
    """Add to a workload's requests a cancellation (a tenth of them) or a forced
    preemption (another tenth) at a tick up to `horizon` after each one's arrival;
    `each(request)` is called first for every request (drawing from the same
    `rng`, so a workload stays the one its seed gave). Returns `records`."""
    for i, request in enumerate(list(records)):
        if each is not None:
            each(request)
        roll = rng.random()
        at = request["arrival"] + rng.randint(0, horizon)
        if roll < 0.1:
            records.append({"type": "cancel", "id": f"r{i}", "at": at})
        elif roll < 0.2:
            records.append({"type": "preempt", "id": f"r{i}", "at": at})
    return records

class Sim:
    """The outcome of one replay: result, event dicts and per-request lookups."""

    def __init__(self, result: RunResult, events: list[dict]) -> None:
        self.result = result
        self.events = events
        self.summary = result.summary
        self.req = {r.rid: r for r in result.requests}

    def of(self, kind: str) -> list[dict]:
        """All events of one kind, in order."""
        return [e for e in self.events if e["event"] == kind]

    def at(self, tick: int, kind: str | None = None) -> list[dict]:
        """Events at one tick (optionally of one kind)."""
        return [e for e in self.events if e["tick"] == tick and (kind is None or e["event"] == kind)]

    def dispatches(self) -> list[tuple[int, list[tuple[str, str, int, bool]]]]:
        """Each dispatch as (tick, [(id, phase, tokens, emits), ...])."""
        return [(e["tick"], [(r["id"], r["phase"], r["tokens"], r["emits"]) for r in e["rows"]])
                for e in self.of("dispatch")]


def simulate(records: list[dict], policy: str = "continuous", audit: bool = True,
             **options) -> Sim:
    """Replay `records` (request/cancel/preempt dicts, `type` optional for requests)
    under `policy` with the given options, auditing every boundary."""
    full = []
    for r in records:
        r = dict(r)
        r.setdefault("type", "request")
        full.append(r)
    trace = parse_trace(trace_bytes(full), "test.jsonl")
    opts = Options.resolve(trace.config, options)
    events: list[dict] = []
    result = Engine(trace.workload, opts, policy,
                    on_event=lambda e: events.append(e.to_dict()), audit=audit).run()
    return Sim(result, events)


def req(rid: str, arrival: int, prompt: int, output: int, **extra) -> dict:
    """A request record."""
    return {"type": "request", "id": rid, "arrival": arrival, "prompt_tokens": prompt,
            "output_tokens": output, **extra}


@pytest.fixture
def sim():
    """The `simulate` function, as a fixture."""
    return simulate


def write_trace(directory: Path, records: list, name: str = "trace.jsonl") -> str:
    """Write records (dicts, or raw str lines) as a JSONL file; return its path."""
    path = directory / name
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """Call the command line in-process; return (status, stdout text, stderr text)."""
    import io
    from scheduler_sim.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    status = main(argv, out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def load_script(path: Path, name: str):
    """A script from outside the package (benchmarks/, labs/) as a module named `name`,
    loaded once per session (registered in sys.modules: dataclasses look their module
    up by name)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _use_the_cores(config) -> None:
    """With pytest-xdist installed and no -n given (and no --pdb, no collection alone),
    run on one worker a core, at most MAX_WORKERS, each taking half of a busy one's
    remaining tests when it runs out (`worksteal`): about half the wall time on two
    cores. Set here rather than in `addopts`, so that a pytest without the plugin
    still runs the suite, in one process. (pytest-xdist has read its command line
    by now: this sets what its `pytest_cmdline_main` would have for `-n N`, and its
    own `pytest_configure`, which runs last, starts the workers.)"""
    if not config.pluginmanager.hasplugin("xdist") or config.option.numprocesses is not None:
        return
    if config.getoption("usepdb", False) or config.getvalue("collectonly"):
        return
    workers = min(os.cpu_count() or 1, MAX_WORKERS)
    if workers < 2:
        return
    config.option.numprocesses = workers
    config.option.dist = "worksteal"
    config.option.tx = ["popen"] * workers
