"""One contract for a plugin policy's failures, wherever it runs.

Whatever a policy of your own raises (any BaseException: SystemExit(0),
KeyboardInterrupt, GeneratorExit, an exception whose str() fails, even one of
the simulator's own error types) and whatever rule it breaks (a request field
it may not write), the run stops with exit status 3 and one line naming the
policy, the time and the policy's file and line: on one engine, in a fleet of
replicas, lockstep ranks, prefill/decode replicas, in worker processes, in
`check`, `sweep`, the Python API and the pytest plugin.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conftest import req, run_cli as run, write_trace
import scheduler_sim as sim
from scheduler_sim.records.errors import PolicyError

BAD = textwrap.dedent('''
    from scheduler_sim import QueueAndListPolicy
    from scheduler_sim.records.errors import UsageError
    from scheduler_sim.records.states import RequestStatus


    class Base(QueueAndListPolicy):
        def schedule(self, now):
            while self.waiting:
                head = self.waiting.pop()
                self.view.admit(head, self.blocks_to_finish(head))
                self.running.append(head)
            self.misbehave()
            return [(r, r.phase_remaining) for r in self.running]

        def misbehave(self):
            pass


    class Stubborn(Exception):
        def __str__(self):
            raise RuntimeError("no text")


    class Custom(BaseException):
        pass


    class ValueErrors(Base):
        def misbehave(self):
            raise ValueError("bad value")


    class Exits(Base):
        def misbehave(self):
            raise SystemExit(0)


    class Interrupts(Base):
        def misbehave(self):
            raise KeyboardInterrupt


    class GeneratorExits(Base):
        def misbehave(self):
            raise GeneratorExit


    class BaseExceptions(Base):
        def misbehave(self):
            raise Custom("custom")


    class StrFails(Base):
        def misbehave(self):
            raise Stubborn()


    class OursRaised(Base):
        def misbehave(self):
            raise UsageError("not the user's")


    class RewritesOutputs(Base):
        def misbehave(self):
            for r in self.running:
                r.output_tokens = 1


    class RewritesPrompt(Base):
        def misbehave(self):
            for r in self.running:
                r.prompt_tokens = 1


    class RewritesStatus(Base):
        def misbehave(self):
            for r in self.running:
                r.status = RequestStatus.FINISHED_STOPPED


    class RewritesArrival(Base):
        def misbehave(self):
            for r in self.running:
                r.arrival = 99


    class ReportsNaN(Base):
        def misbehave(self):
            self.view.report_blocked(self.running[0], "blocks", float("nan"))


    class FailsInInit(Base):
        def __init__(self, options, view):
            raise SystemExit(1)


    class FailsInAdd(Base):
        def add(self, req):
            raise KeyboardInterrupt
''')

LINES = BAD.splitlines()


def line_of(text: str, after: str) -> int:
    """The number of the first line holding `text` after the line holding `after`."""
    start = next(i for i, line in enumerate(LINES) if after in line)
    return next(i for i, line in enumerate(LINES) if i > start and text in line) + 1


# (class, what the message says after the policy's name, the line, its function)
KINDS = [
    ("ValueErrors", "raised ValueError at tick 0: bad value", "raise ValueError", "misbehave"),
    ("Exits", "raised SystemExit at tick 0: 0", "raise SystemExit(0)", "misbehave"),
    ("Interrupts", "raised KeyboardInterrupt at tick 0", "raise KeyboardInterrupt",
     "misbehave"),
    ("GeneratorExits", "raised GeneratorExit at tick 0", "raise GeneratorExit", "misbehave"),
    ("BaseExceptions", "raised Custom at tick 0: custom", "raise Custom", "misbehave"),
    ("StrFails", "raised Stubborn at tick 0: (its str() raised RuntimeError)",
     "raise Stubborn()", "misbehave"),
    ("OursRaised", "raised UsageError at tick 0: not the user's", "raise UsageError",
     "misbehave"),
    ("RewritesOutputs", "broke a rule at tick 0: request 'a': a policy may not set "
     "output_tokens (to 1); it is what the trace asked for", "r.output_tokens = 1",
     "misbehave"),
    ("RewritesPrompt", "broke a rule at tick 0: request 'a': a policy may not set "
     "prompt_tokens (to 1); it is what the trace asked for", "r.prompt_tokens = 1",
     "misbehave"),
    ("RewritesStatus", "broke a rule at tick 0: request 'a': a policy may not set status "
     "(to finished_stopped); it changes only through the view's transitions (admit, "
     "preempt)", "r.status =", "misbehave"),
    ("RewritesArrival", "broke a rule at tick 0: request 'a': a policy may not set arrival "
     "(to 99); it is what the trace asked for", "r.arrival = 99", "misbehave"),
    ("FailsInAdd", "raised KeyboardInterrupt at tick 0", "raise KeyboardInterrupt",
     "add"),
]

MODES = {
    "engine": [],
    "replicas": ["--replicas", "3"],
    "lockstep": ["--dp-lockstep", "--replicas", "2"],
    "disagg": ["--prefill-replicas", "1", "--decode-replicas", "1"],
}

CONFIG = {"type": "config", "block_size": 4, "num_blocks": 8, "token_budget": 8}


@pytest.fixture
def bad(tmp_path):
    """The plugin file and a one-request trace with an expectation."""
    path = tmp_path / "bad.py"
    path.write_text(BAD)
    trace = write_trace(tmp_path, [CONFIG, req("a", 0, 4, 3),
                                   {"type": "expect", "completed": 1}])
    return str(path), trace


def _line(cls: str, text: str) -> int:
    """The line of `text` in `cls`, or in Base's misbehave hook it overrides."""
    return line_of(text, f"class {cls}(")


# Every misbehaviour on one engine, and in the fleets' modes a raise, an interrupt and a
# broken rule, by default; the other crossings (27 of 48) in the slow tier.
ACROSS_MODES = {"ValueErrors", "Interrupts", "RewritesOutputs"}


def _misbehaviour(index: int, kind: tuple, mode: str):
    """One crossing, with the id pytest gave it as a grid (a value over 100 characters
    is named by its argument and index)."""
    names = ("cls", "message", "text", "function")
    shown = [value if len(value) <= 100 else f"{name}{index}"
             for name, value in zip(names, kind)]
    slow = mode != "engine" and kind[0] not in ACROSS_MODES
    return pytest.param(*kind, mode, id="-".join([*shown, mode]),
                        marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("cls, message, text, function, mode", [
    _misbehaviour(index, kind, mode) for mode in MODES for index, kind in enumerate(KINDS)])
def test_every_misbehaviour_in_every_mode_is_the_policys_exit_3(bad, mode, cls, message, text,
                                                                function):
    """The same one line and exit 3 on one engine, replicas, lockstep ranks and
    prefill/decode replicas; nothing on stdout, never a traceback."""
    path, trace = bad
    status, out, err = run(["replay", trace, "--policy", f"{path}:{cls}", *MODES[mode]])
    assert (status, out) == (3, "")
    assert err == (f"scheduler-sim: policy error: policy '{path}:{cls}' {message} "
                   f"({path}:{_line(cls, text)} in {function})\n")


@pytest.mark.parametrize("mode", MODES)
def test_a_blocked_report_of_garbage_is_the_policys_fault(bad, mode):
    """`report_blocked(req, "blocks", nan)` went into the events file as it was
    (`"needed":NaN`, not JSON) and the run ended 0; now it is a broken rule, exit 3, with
    no events file. (The request's own outputs differ on a prefill replica.)"""
    path, trace = bad
    events = str(Path(path).with_name("ev.jsonl"))
    status, out, err = run(["replay", trace, "--policy", f"{path}:ReportsNaN", "--events",
                            events, *MODES[mode]])
    assert (status, out) == (3, "")
    head, _, tail = err.partition("got (Request('a', running, outputs=0/")
    assert head == (f"scheduler-sim: policy error: policy '{path}:ReportsNaN' broke a rule at "
                    "tick 0: report_blocked(req, reason, needed) takes a request of this run, "
                    "a non-empty string and an int >= 0, ")
    assert tail == (f"{1 if mode == 'disagg' else 3}, resident=0), 'blocks', nan) "
                    f"({path}:{_line('ReportsNaN', 'report_blocked')} in misbehave)\n")
    assert not Path(events).exists()


@pytest.mark.parametrize("mode", MODES)
def test_a_constructor_that_exits_is_the_policys_fault(bad, mode):
    """A plugin whose __init__ raises SystemExit(1): exit 3 when the engine (or each
    replica) builds it, naming the policy and the line."""
    path, trace = bad
    status, out, err = run(["replay", trace, "--policy", f"{path}:FailsInInit",
                            *MODES[mode]])
    assert (status, out) == (3, "")
    assert err == (f"scheduler-sim: policy error: policy '{path}:FailsInInit' raised "
                   f"SystemExit at tick 0: 1 ({path}:{_line('FailsInInit', 'raise')} in "
                   "__init__)\n")


@pytest.mark.parametrize("cls", ["Exits", "Interrupts", "RewritesOutputs"])
def test_check_never_passes_when_the_plugin_misbehaves(bad, cls):
    """`check` with a plugin raising SystemExit(0), KeyboardInterrupt, or rewriting a
    request's outputs: exit 3, not 0 and not 130; the JUnit file is not written."""
    path, trace = bad
    junit = trace + ".xml"
    status, out, err = run(["check", trace, "--policy", f"{path}:{cls}", "--junit", junit])
    assert (status, out) == (3, "")
    assert err.startswith(f"scheduler-sim: policy error: policy '{path}:{cls}' ")
    import os
    assert not os.path.exists(junit)


@pytest.mark.parametrize("jobs", [[], ["-j", "2"]])
def test_sweep_stops_at_a_misbehaving_plugin(bad, jobs):
    """A sweep over two configurations, in process or in two workers: exit 3 with the
    plugin's line, no traceback."""
    path, trace = bad
    status, out, err = run(["sweep", trace, "--grid", "num_blocks=8,16", "--policy",
                            f"{path}:Exits", *jobs])
    assert (status, out) == (3, "")
    assert err == (f"scheduler-sim: policy error: policy '{path}:Exits' raised SystemExit "
                   f"at tick 0: 0 ({path}:{_line('Exits', 'raise SystemExit')} in "
                   "misbehave)\n")


def test_replay_in_worker_processes_stops_at_a_misbehaving_plugin(bad):
    """`replay -j 2` with the plugin beside a built-in: the worker's failure is the
    policy's, exit 3, one line."""
    path, trace = bad
    status, out, err = run(["replay", trace, "--policy", "continuous", "--policy",
                            f"{path}:Interrupts", "-j", "2"])
    assert (status, out) == (3, "")
    assert err == (f"scheduler-sim: policy error: policy '{path}:Interrupts' raised "
                   f"KeyboardInterrupt at tick 0 ({path}:"
                   f"{_line('Interrupts', 'raise KeyboardInterrupt')} in misbehave)\n")


@pytest.mark.parametrize("call", ["replay", "check"])
def test_the_api_raises_policy_error(bad, call):
    """sim.replay and sim.check raise PolicyError for a plugin raising SystemExit(0)."""
    path, trace = bad
    with pytest.raises(PolicyError, match=r"raised SystemExit at tick 0: 0 \("):
        getattr(sim, call)(sim.load(trace), f"{path}:Exits")


def test_an_interrupt_a_signal_explains_is_still_an_interrupt():
    """The rule that tells them apart: while watching, an interrupt is a real one only
    after a signal was marked; outside, every interrupt is taken as real."""
    from scheduler_sim.records import interrupts
    assert interrupts.from_signal(KeyboardInterrupt())
    with interrupts.watching():
        assert not interrupts.from_signal(KeyboardInterrupt())
        assert not interrupts.from_signal(interrupts.Terminated())
        interrupts.mark()
        assert interrupts.from_signal(KeyboardInterrupt())
        assert not interrupts.from_signal(ValueError())
    assert interrupts.from_signal(KeyboardInterrupt())


def test_check_fails_when_the_plugins_module_exits_while_imported(tmp_path):
    """A plugin file that runs `raise SystemExit(0)` when imported: `check` exits 3 (it
    used to exit 0, silently, with no JUnit file), naming the policy and the line."""
    path = tmp_path / "exits.py"
    path.write_text("raise SystemExit(0)\n")
    trace = write_trace(tmp_path, [CONFIG, req("a", 0, 4, 3),
                                   {"type": "expect", "completed": 1}])
    status, out, err = run(["check", trace, "--policy", f"{path}:X", "--junit",
                            str(tmp_path / "j.xml")])
    assert (status, out) == (3, "")
    assert err == (f"scheduler-sim: policy error: policy '{path}:X' raised SystemExit while "
                   f"its module was imported: 0 ({path}:1 in <module>)\n")
    assert not (tmp_path / "j.xml").exists()


def test_with_sigint_ignored_a_plugins_interrupt_is_still_the_plugins(bad):
    """A command started with SIGINT ignored (as a shell starts a background job): no
    Ctrl-C can reach it, so a KeyboardInterrupt the plugin raises is its error, exit 3,
    not an interruption (130)."""
    import os
    import signal
    import subprocess
    import sys
    from conftest import ROOT
    path, trace = bad

    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    done = subprocess.run([sys.executable, "-m", "scheduler_sim", "replay", trace, "--policy",
                           f"{path}:Interrupts"], capture_output=True, text=True, timeout=60,
                          preexec_fn=ignore_sigint, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (done.returncode, done.stdout) == (3, "")
    assert done.stderr.startswith(f"scheduler-sim: policy error: policy '{path}:Interrupts' "
                                  "raised KeyboardInterrupt at tick 0")
