"""Start-up: `import scheduler_sim` loads nothing else, and a signal while the command
line loads the simulator ends it cleanly.

`scheduler_sim/__init__.py` imports its public names on first use (PEP 562), and the
entry point (`cli/entry.py`, for the console script and `python -m scheduler_sim`)
takes SIGINT and SIGTERM before it imports the simulator: a Ctrl-C during those few
hundred milliseconds of imports used to print a KeyboardInterrupt traceback and die by
the signal. The children here start with SIGINT and SIGTERM at their defaults, as a
shell leaves them, and get the signal once Python reports (-X importtime) that an
early module of the simulator is loaded, after delays that land in the imports and
after them.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import scheduler_sim as sim
from conftest import ROOT

QUICKSTART = "traces/quickstart.jsonl"
VALIDATED = ("traces/quickstart.jsonl: ok, 6 requests, arrivals 0..5 ticks, 1 cancel, "
             "0 preempts, 0 expects, config: block_size=4, num_blocks=12, token_budget=16, "
             'max_rows=4, policy=["serial", "continuous"]\n')


# A module the command line imports early in loading the simulator (neither
# `scheduler_sim/__init__.py` nor the entry module imports it).
EARLY = "scheduler_sim.records.errors"


def _default_signals() -> None:
    """In the child: SIGINT and SIGTERM as a shell leaves them."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _signal_while_loading(argv: list[str], signum: int, delay: float) -> tuple[int, str, str]:
    """Start `argv` with Python reporting each import as it ends (-X importtime, on
    standard error); once EARLY is imported, wait `delay` seconds and send `signum`:
    (status, stdout, stderr without the import lines)."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, preexec_fn=_default_signals)
    early = []
    for line in proc.stderr:
        early.append(line)
        if line.split("|")[-1].strip() == EARLY or not line.startswith("import time:"):
            break
    time.sleep(delay)  # sleeping, not spinning: 1.1 s of CPU less per command
    if proc.poll() is None:
        proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    lines = (early + err.splitlines(keepends=True))
    return proc.returncode, out, "".join(x for x in lines if not x.startswith("import time:"))


def _commands() -> list[list[str]]:
    """`python -m scheduler_sim`, and the console script when it is installed from this
    checkout's pyproject (an older install calls another entry point)."""
    commands = [[sys.executable, "-m", "scheduler_sim"]]
    script = Path(sys.executable).with_name("scheduler-sim")
    if script.is_file() and "scheduler_sim.cli.entry" in script.read_text(errors="replace"):
        # The same entry function behind another launcher: in the slow tier (four
        # processes, 1 s of CPU).
        commands.append(pytest.param([str(script)], marks=pytest.mark.slow))
    return commands


@pytest.mark.parametrize("delays", [  # a process each; the middle two in the slow tier
    (0, 1.0), pytest.param((0.01, 0.1), marks=pytest.mark.slow)], ids=["0-1000ms", "10-100ms"])
@pytest.mark.parametrize("command", _commands(), ids=lambda c: Path(c[-1]).name)
def test_sigint_while_loading_exits_130_with_one_line(command, delays):
    """SIGINT at 0 to 1000 ms after the simulator starts loading: status 130 and exactly
    `scheduler-sim: interrupted` while it loads (the first delays at least), else the
    finished command's output and status 0 (or, once it has finished, the signal's own
    end); never a traceback."""
    outcomes = []
    for delay in delays:
        status, out, err = _signal_while_loading([*command, "validate", QUICKSTART],
                                                 signal.SIGINT, delay)
        assert "Traceback" not in err
        if status == 130:
            assert (out, err) == ("", "scheduler-sim: interrupted\n")
        else:
            assert status in (0, -signal.SIGINT) and (out, err) == (VALIDATED, "")
        outcomes.append(status)
    assert outcomes[0] == 130 or delays[0] > 0


def test_sigterm_while_loading_exits_143_with_one_line():
    """SIGTERM as the simulator starts loading: status 143, `scheduler-sim: terminated`."""
    status, out, err = _signal_while_loading([sys.executable, "-m", "scheduler_sim",
                                              "validate", QUICKSTART], signal.SIGTERM, 0)
    assert (status, out, err) == (143, "", "scheduler-sim: terminated\n")


def _loaded_by(code: str) -> list[str]:
    """The modules of this package that `code` leaves loaded, in a fresh interpreter."""
    probe = (f"{code}\nimport sys\n"
             "print(sorted(m for m in sys.modules if m.startswith('scheduler_sim')))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return eval(out.stdout)


def test_import_loads_nothing_until_a_name_is_used():
    """`import scheduler_sim` runs only its own file, and the entry module only adds the
    command line's package and itself; the first use of a name loads what it needs."""
    assert _loaded_by("import scheduler_sim") == ["scheduler_sim"]
    assert _loaded_by("import scheduler_sim.cli.entry") == [
        "scheduler_sim", "scheduler_sim.cli", "scheduler_sim.cli.entry"]
    loaded = _loaded_by("import scheduler_sim\nscheduler_sim.UsageError")
    assert loaded == ["scheduler_sim", "scheduler_sim.records", "scheduler_sim.records.errors"]


def test_every_public_name_is_its_modules_object():
    """Each name of `__all__` is the object of the module it lives in, listed by dir();
    an unknown name is an AttributeError as for any module."""
    from scheduler_sim import api, policies
    from scheduler_sim.records import errors, options
    from scheduler_sim.requests import request
    homes = {name: api for name in ("Replay", "Run", "build", "check", "events", "load",
                                    "parse", "replay", "search", "sweep")}
    homes.update({name: policies for name in ("POLICIES", "Plan", "Policy",
                                              "QueueAndListPolicy", "SchedulerView")})
    homes.update({name: errors for name in ("InvariantError", "PolicyError", "SimError",
                                            "TraceError", "UsageError")})
    homes.update(Options=options, Request=request)
    assert sorted(homes) == sorted(set(sim.__all__) - {"__version__"})
    for name, module in homes.items():
        assert getattr(sim, name) is getattr(module, name)
    assert set(sim.__all__) <= set(dir(sim))
    with pytest.raises(AttributeError, match="module 'scheduler_sim' has no attribute 'nope'"):
        sim.nope


def test_python_m_holds_signals_before_it_loads_the_entry_module():
    """`python -m scheduler_sim` holds SIGINT and SIGTERM with its first statements,
    importing only the built-in `_signal` before, so that no Ctrl-C meets the loading
    of cli/entry.py (a window the fuzzer found: 17 tracebacks in 400 probes)."""
    import ast
    tree = ast.parse((ROOT / "scheduler_sim" / "__main__.py").read_text())
    body = [node for node in tree.body
            if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
    imports = [(i, node) for i, node in enumerate(body)
               if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert [ast.unparse(node) for _, node in imports] == [
        "import _signal", "from .cli.entry import main_entry"]
    held = [i for i, node in enumerate(body) if "_signal.signal(" in ast.unparse(node)]
    assert imports[0][0] == 0 and len(held) == 2 and max(held) < imports[1][0]
    assert ast.unparse(body[-1]) == (
        "raise SystemExit(main_entry((_held, _interruptible, _terminable), own_process=True))")


# What a plain replay has no use for: the HTML report and its charts and series,
# Perfetto, the `check` expectations and JUnit, sweeps, the worker pool (and
# multiprocessing), the importers, calibration fitting, the pytest plugin and fleets;
# difflib (a misspelt name's hint) and traceback (a plugin's failure); hashlib
# (OpenSSL's library: prefix keys take BLAKE2b from `_blake2`), `signal` (its enums:
# the built-in `_signal` serves), gzip (a gzip input) and unicodedata (text past ASCII).
# Each is loaded only by the command or the output that needs it.
UNUSED_BY_REPLAY = ("scheduler_sim.io.html_report", "scheduler_sim.io.svg_charts",
                    "scheduler_sim.io.report_series", "scheduler_sim.fleet",
                    "scheduler_sim.io.svg_axes", "scheduler_sim.io.sweep_page",
                    "scheduler_sim.io.utilisation_chart", "scheduler_sim.io.perfetto", "scheduler_sim.io.expectations",
                    "scheduler_sim.io.junit", "scheduler_sim.io.sweep",
                    "scheduler_sim.cli.sweep", "scheduler_sim.cli.workers", "multiprocessing",
                    "scheduler_sim.io.importers", "scheduler_sim.cli.calibrate",
                    "scheduler_sim.io.run_fit", "scheduler_sim.cli.pytest_plugin",
                    "difflib", "traceback", "hashlib", "signal", "gzip", "unicodedata")


def test_a_plain_replay_loads_no_report_perfetto_sweep_importers_or_workers():
    """`replay QUICKSTART` in a fresh interpreter leaves every module of UNUSED_BY_REPLAY
    unloaded; with `--report`, the report's modules are loaded (the check can fail)."""
    code = ("import io, sys; from scheduler_sim.cli.main import main; "
            "main(sys.argv[1:], out=io.StringIO(), err=io.StringIO()); "
            f"print(' '.join(m for m in {UNUSED_BY_REPLAY!r} if m in sys.modules))")
    run = [sys.executable, "-c", code, "replay", QUICKSTART]
    plain = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=True)
    assert plain.stdout.split() == []
    report = subprocess.run(run + ["--report", os.devnull], cwd=ROOT, capture_output=True,
                            text=True, check=True)
    assert set(report.stdout.split()) == {"scheduler_sim.io.html_report",
                                          "scheduler_sim.io.svg_charts",
                                          "scheduler_sim.io.report_series",
                                          "scheduler_sim.io.svg_axes",
                                          "scheduler_sim.io.sweep_page",
                                          "scheduler_sim.io.utilisation_chart"}


def test_converts_formats_are_the_importers():
    """The formats `convert --from` offers (named in cli/main.py so that building the
    parser loads no importer) are the importers' own."""
    from scheduler_sim.cli.main import CONVERT_FORMATS
    from scheduler_sim.io.importers import FORMATS, RUN_FORMATS
    assert CONVERT_FORMATS == list(FORMATS) + list(RUN_FORMATS)


@pytest.mark.parametrize("kind,status,line", [
    (KeyboardInterrupt, 130, "scheduler-sim: interrupted\n"),
    ("Terminated", 143, "scheduler-sim: terminated\n")])
@pytest.mark.parametrize("said", [False, True], ids=["before-its-last-word", "after"])
def test_an_interrupt_out_of_main_is_said_once(monkeypatch, capsys, kind, status, line, said):
    """An interrupt that escapes `main` (a Ctrl-C after the simulator loaded, before
    its command could catch it): status 130 (143 for SIGTERM) and the one line, once;
    after `main` had said its last word (`interrupts.ended`), the status alone."""
    from scheduler_sim.cli import entry, main as main_module
    from scheduler_sim.records import interrupts
    error = interrupts.Terminated if kind == "Terminated" else kind

    def interrupted_main():
        if said:
            interrupts.ended()
        raise error

    monkeypatch.setattr(main_module, "main", interrupted_main)
    monkeypatch.setitem(interrupts._state, "ended", False)
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGXFSZ)}
    try:
        assert entry.main_entry(([], False, False)) == status
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    assert capsys.readouterr().err == ("" if said else line)


def test_an_interrupt_caught_after_escaping_a_source_string_keeps_status_130(tmp_path):
    """A KeyboardInterrupt that escapes code run from a string (as a dataclass's methods
    are made) and is caught by the program: the process (`python -m`, as the command
    runs) ends with the status the program returned, 130, not by SIGINT (CPython's
    note of the interrupt is cleared)."""
    (tmp_path / "caught_interrupt.py").write_text(
        "import scheduler_sim.cli.main as m\n"
        "def interrupted():\n"
        "    try:\n"
        "        exec('raise KeyboardInterrupt')\n"
        "    except KeyboardInterrupt:\n"
        "        return 130\n"
        "m.main = interrupted\n"
        "from scheduler_sim.cli.entry import main_entry\n"
        "raise SystemExit(main_entry())\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "caught_interrupt"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, preexec_fn=_default_signals,
                          timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "")


def test_a_fleet_replay_loads_the_fleets():
    """`--replicas 2` loads the fleet package (a plain replay does not: above)."""
    code = ("import io, sys; from scheduler_sim.cli.main import main; "
            "status = main(sys.argv[1:], out=io.StringIO(), err=io.StringIO()); "
            "print(status, 'scheduler_sim.fleet' in sys.modules)")
    run = [sys.executable, "-c", code, "replay", QUICKSTART, "--replicas", "2"]
    done = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout == "0 True\n"


def _collector_after(code: str, call: str) -> str:
    """In a fresh interpreter that runs `code`, then `validate QUICKSTART` through
    `call` (`main_entry()` or `command()`, its output into a StringIO): the status,
    whether the output was the expected line, the objects frozen before, whether more
    than 20,000 are frozen after, whether the collector is on, and whether an object
    in a reference cycle dropped after the call is collected, and the young
    generation's threshold then."""
    probe = ("import gc, io, sys, weakref\n"
             f"{code}\n"
             "before = gc.get_freeze_count()\n"
             "from scheduler_sim.cli.entry import main_entry, command\n"
             f"sys.argv = ['scheduler-sim', 'validate', {QUICKSTART!r}]\n"
             "sys.stdout, real = io.StringIO(), sys.stdout\n"
             "class Loop: pass\n"
             "loop = Loop(); loop.me = loop; gone = weakref.ref(loop)\n"
             f"status = {call}\n"
             "said, sys.stdout = sys.stdout.getvalue(), real\n"
             "del loop; gc.collect()\n"
             "print(status, said == " + repr(VALIDATED) + ", before, "
             "gc.get_freeze_count() > 20000, gc.isenabled(), gone() is None, "
             "gc.get_threshold()[0])\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return done.stdout


def test_the_commands_process_freezes_what_lives_to_its_exit():
    """In the command's own process (`command`, the console script), every object
    alive when the command has ended is out of the collector's sight (more than the
    20,000 the imports alone make; a cycle alive then is never collected), and the
    collector runs again as before, its young pass after 10,000 objects instead of
    700; one that the program had turned off stays off."""
    assert _collector_after("", "command()") == "0 True 0 True True False 10000\n"
    assert _collector_after("gc.disable()", "command()") == "0 True 0 True False False 10000\n"


def test_a_program_that_calls_main_entry_keeps_its_collector():
    """A program that calls `main_entry()` itself and goes on (not the command's own
    process) keeps its collector: nothing frozen, and its object in a reference cycle,
    dropped after the call, is collected (a review found it frozen for good when only
    `scheduler_sim.cli.main` being unloaded was asked)."""
    assert _collector_after("import scheduler_sim.api", "main_entry()") == (
        "0 True 0 False True True 700\n")
    assert _collector_after("", "main_entry()") == "0 True 0 False True True 700\n"


def test_a_program_that_had_loaded_the_simulator_keeps_its_collector(monkeypatch):
    """`_Collector` for the command's process leaves the collector alone where
    cli/main.py was imported before (this one) and where the process is not the
    command's; as the first to load it in the command's process, it pauses the
    collector for the imports, then freezes what they made and turns it back on."""
    import gc
    import importlib
    from scheduler_sim.cli import entry
    importlib.import_module("scheduler_sim.cli.main")  # loaded before, as in a test run
    frozen, threshold = gc.get_freeze_count(), gc.get_threshold()
    assert frozen == 0  # (nothing in a test process freezes: unfreeze below restores it)
    collector = entry._Collector(own_process=True)
    assert not collector.owned
    collector.loading()
    assert gc.isenabled()
    collector.loaded()
    collector.exiting()
    assert (gc.isenabled(), gc.get_freeze_count(), gc.get_threshold()) == (True, frozen, threshold)
    monkeypatch.delitem(sys.modules, "scheduler_sim.cli.main")
    assert not entry._Collector().owned
    collector = entry._Collector(own_process=True)
    assert collector.owned
    try:
        collector.loading()
        assert not gc.isenabled()
        collector.loaded()
        assert gc.isenabled() and gc.get_freeze_count() > frozen
        assert gc.get_threshold() == (10_000, *threshold[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        gc.enable()
