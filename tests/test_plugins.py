"""Policies from outside the package: loading, checking every decision, failing cleanly."""
from __future__ import annotations

import json
import textwrap

import pytest

from conftest import req, run_cli as run, write_trace
from scheduler_sim.engine import Engine
from scheduler_sim.options import Options
from scheduler_sim.policies import PluginError, policy_class
from scheduler_sim.trace import parse_trace

# A first-come-first-served policy with reservation credits, written as a user
# would: no folding hooks, just admission and a plan.
FIFO = '''
from scheduler_sim import QueueAndListPolicy


class Fifo(QueueAndListPolicy):
    """Admit in order while the credit fits; every running request gets its next
    chunk (a decode is one token), oldest first, within the budgets."""

    def schedule(self, now):
        view = self.view
        while self.waiting:
            head = self.waiting.peek()
            credit = self.blocks_to_finish(head)
            if not view.allocator.can_reserve(credit):
                view.report_blocked(head, "reservation", credit)
                break
            self.waiting.pop()
            view.admit(head, credit)
            self.running.append(head)
        plan, budget = [], self.options.token_budget
        for req in self.running[: self.options.max_rows]:
            tokens = min(req.phase_remaining, budget)
            if tokens == 0:
                break
            plan.append((req, tokens))
            budget -= tokens
        return plan
'''

# The built-in continuous policy without its folding hooks.
PLAIN = '''
from scheduler_sim import Policy
from scheduler_sim.policies.continuous import ContinuousPolicy


class PlainContinuous(ContinuousPolicy):
    steady = Policy.steady
'''

# Three requests, two of which must wait for credits (8 blocks of 4).
RECORDS = [{"type": "config", "block_size": 4, "num_blocks": 8, "token_budget": 8},
           req("a", 0, 9, 4), req("b", 0, 4, 6), req("c", 1, 12, 3)]


@pytest.fixture
def plugin(tmp_path):
    """Write a plugin file; return the `file.py:Class` spelling."""
    def make(source: str, cls: str, name: str = "mine.py") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return f"{path}:{cls}"
    return make


def replay(spec: str, records=RECORDS, **kwargs):
    trace = parse_trace("".join(json.dumps(r) + "\n" for r in records).encode(), "t.jsonl")
    return Engine(trace.workload, Options.resolve(trace.config), spec, **kwargs).run()


def test_a_plugin_from_a_file_replays(plugin):
    """Fifo on RECORDS: a (P=9, credit ceil(12/4) = 3) and b (P=4, credit 3) are admitted
    at 0; the 8-token budget gives a 8 tokens and b none. At 1 c arrives (credit 4: 6 + 4 >
    8, blocked); a takes its last prompt token and b its 4: both emit output 1 at 2. a
    decodes at 2, 3, 4 and finishes at 5, giving back 3 blocks: c is admitted at 5 and
    prefills 7 then 5 tokens beside b's decodes, so its first token comes at 7. The run
    is named by the spelling given."""
    spec = plugin(FIFO, "Fifo")
    result = replay(spec, audit=True)
    assert result.policy == spec
    assert result.summary["completed"] == 3
    assert [(r.rid, r.admitted_at, r.first_token_at) for r in result.requests] == [
        ("a", 0, 2), ("b", 0, 2), ("c", 5, 7)]
    assert result.requests[0].finished_at == 5


def test_a_plugin_from_a_module(plugin, tmp_path, monkeypatch):
    """`module:Class` imports a module on the path: the same results as by file."""
    by_file = plugin(FIFO, "Fifo", name="fifo_policy.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert replay("fifo_policy:Fifo").summary == replay(by_file).summary


def test_without_folding_hooks_the_results_are_those_of_stepping(plugin):
    """PlainContinuous is `continuous` with the base class's steady() (never steady): it
    never folds, and its summary and events equal the built-in policy's, folded or
    stepped, field for field."""
    spec = plugin(PLAIN, "PlainContinuous")
    mine, folded, stepped = [], [], []
    a = replay(spec, on_event=lambda e: mine.append(e.to_json()))
    b = replay("continuous", on_event=lambda e: folded.append(e.to_json()))
    c = replay("continuous", on_event=lambda e: stepped.append(e.to_json()),
               fast_forward=False)
    assert a.summary == b.summary == c.summary
    assert mine == folded == stepped


def test_the_command_line_takes_plugins_in_flags_config_and_expectations(plugin, tmp_path):
    """`--policy FILE.py:Class` beside a built-in; the same spelling in the config record
    and in an expectation's `policy`: check holds."""
    spec = plugin(FIFO, "Fifo")
    path = write_trace(tmp_path, RECORDS)
    status, out, err = run(["replay", path, "--policy", spec, "--policy", "continuous"])
    assert status == 0, err
    assert spec in out and "continuous" in out
    records = [dict(RECORDS[0], policy=spec), *RECORDS[1:],
               {"type": "expect", "policy": spec, "completed": 3}]
    status, out, err = run(["check", write_trace(tmp_path, records, "c.jsonl")])
    assert (status, err) == (0, ""), out


BAD = '''
from scheduler_sim import QueueAndListPolicy


class TooMuch(QueueAndListPolicy):
    """Admits a and plans all 9 prompt tokens in an 8-token budget."""
    def schedule(self, now):
        if self.waiting:
            head = self.waiting.pop()
            self.view.admit(head, self.blocks_to_finish(head))
            self.running.append(head)
        return [(r, r.phase_remaining) for r in self.running]


class NotRunning(QueueAndListPolicy):
    """Dispatches the queue head without admitting it."""
    def schedule(self, now):
        return [(self.waiting.peek(), 4)] if self.waiting else []


class Greedy(QueueAndListPolicy):
    """Admits with a credit of 100 blocks in a pool of 8."""
    def schedule(self, now):
        while self.waiting:
            self.view.admit(self.waiting.pop(), 100)
        return []


class Twice(QueueAndListPolicy):
    """Puts the same request in a dispatch twice."""
    def schedule(self, now):
        while self.waiting:
            head = self.waiting.pop()
            self.view.admit(head, self.blocks_to_finish(head))
            self.running.append(head)
        first = self.running[0]
        return [(first, 1), (first, 1)]


class NotAList(QueueAndListPolicy):
    """Returns a dict, as vLLM's SchedulerOutput would map ids to tokens."""
    def schedule(self, now):
        return {"a": 4}


class Crashes(QueueAndListPolicy):
    """Divides by zero."""
    def schedule(self, now):
        return 1 // 0
'''

ONE = [{"type": "config", "block_size": 4, "num_blocks": 8, "token_budget": 8},
       req("a", 0, 9, 2), req("b", 0, 4, 2)]


@pytest.mark.parametrize("cls, message", [
    ("TooMuch", "broke a rule at tick 0: dispatch tokens(9) <= token_budget(8) is false"),
    ("NotRunning", "broke a rule at tick 0: request 'a' dispatched while waiting with 4 "
                   "tokens"),
    ("Greedy", "broke a rule at tick 0: held(0) + draining(0) + unused credit(100) <= "
               "num_blocks(8) is false"),
    ("Twice", "broke a rule at tick 0: each request appears at most once in a dispatch is "
              "false"),
    ("NotAList", "broke a rule at tick 0: schedule() returns a list of (request, tokens) "
                 "pairs, got dict"),
])
def test_a_broken_rule_exits_3_naming_the_policy_the_tick_and_the_rule(plugin, tmp_path,
                                                                       cls, message):
    """Each bad plugin is stopped at its first broken rule: exit 3, one line naming the
    policy (its spelling), the tick and the equation or rule; nothing on stdout."""
    spec = plugin(BAD, cls)
    status, out, err = run(["replay", write_trace(tmp_path, ONE), "--policy", spec])
    assert (status, out) == (3, "")
    assert err == f"scheduler-sim: policy error: policy '{spec}' {message}\n"


def test_an_exception_in_a_plugin_names_its_file_and_line(plugin, tmp_path):
    """Crashes raises ZeroDivisionError in schedule(): exit 3 naming the exception, the
    tick, and the plugin's file, line and function; never a traceback."""
    spec = plugin(BAD, "Crashes")
    path = spec.rsplit(":", 1)[0]
    line = BAD.splitlines().index("        return 1 // 0") + 1
    status, out, err = run(["replay", write_trace(tmp_path, ONE), "--policy", spec])
    assert (status, out) == (3, "")
    assert err == (f"scheduler-sim: policy error: policy '{spec}' raised ZeroDivisionError at "
                   f"tick 0: integer division or modulo by zero ({path}:{line} in schedule)\n")


@pytest.mark.parametrize("source, cls, message", [
    (None, "Fifo", "no such file"),
    ("x = 1\n", "Fifo", "has no 'Fifo'"),
    ("class Fifo:\n    pass\n", "Fifo", "Fifo is not a subclass of scheduler_sim.Policy"),
    ("def broken(:\n", "Fifo", "SyntaxError"),
    ("import not_a_module_anywhere\n", "Fifo", "ModuleNotFoundError"),
])
def test_a_plugin_that_cannot_be_loaded_is_a_usage_error(tmp_path, source, cls, message):
    """A missing file, a missing class, a class that is no Policy, a syntax error, or a
    failing import: exit 2 with one line saying which, never a traceback."""
    path = tmp_path / "p.py"
    if source is not None:
        path.write_text(source)
    status, out, err = run(["replay", write_trace(tmp_path, ONE), "--policy", f"{path}:{cls}"])
    assert (status, out) == (2, "")
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_policy_class_resolves_builtins_and_refuses_bad_spellings():
    """A built-in name gives its class; `:Fifo` and `x.py:` are not plugin spellings."""
    assert policy_class("vllm").name == "vllm"
    for bad in (":Fifo", "x.py:", "x.py:not-a-name"):
        with pytest.raises(PluginError, match="MODULE:CLASS or FILE.py:CLASS"):
            policy_class(bad)


def test_under_a_cost_model_the_time_of_a_broken_rule_is_in_seconds(plugin, tmp_path):
    """The same TooMuch plugin on a trace in seconds with a cost model: the second
    dispatch would carry too many tokens at 0.2 s, and the message gives that time in
    seconds, like every other output of the run."""
    spec = plugin(BAD, "TooMuch")
    records = [{"type": "config", "time_unit": "s", "block_size": 4, "num_blocks": 8,
                "token_budget": 8, "cost_model": "llama-3-8b/h100-sxm"},
               req("a", 0.2, 9, 2)]
    status, out, err = run(["replay", write_trace(tmp_path, records), "--policy", spec])
    assert (status, out) == (3, "")
    assert err == (f"scheduler-sim: policy error: policy '{spec}' broke a rule at 0.2 s: "
                   "dispatch tokens(9) <= token_budget(8) is false\n")
