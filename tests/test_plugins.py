"""Policies from outside the package: loading, checking every decision, failing cleanly."""
from __future__ import annotations

import json
import pathlib
import textwrap

import pytest

from conftest import req, run_cli as run, write_trace
from scheduler_sim.engine.core import Engine
from scheduler_sim.records.options import Options
from scheduler_sim.policies import PluginError, policy_class
from scheduler_sim.io.trace import parse_trace

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

# One request at a time, in slices of five outputs: the choice changes as the
# request decodes, which the engine cannot see (the dict is changed in place).
SLICES = '''
from scheduler_sim import QueueAndListPolicy


class Slices(QueueAndListPolicy):
    def __init__(self, options, view):
        super().__init__(options, view)
        self.slice_start = {}  # id -> outputs when its current slice began

    def schedule(self, now):
        while self.waiting:
            head = self.waiting.peek()
            credit = self.blocks_to_finish(head)
            if not self.view.allocator.can_reserve(credit):
                self.view.report_blocked(head, "reservation", credit)
                break
            self.waiting.pop()
            self.view.admit(head, credit)
            self.running.append(head)
            self.slice_start[head.rid] = 0
        if not self.running:
            return []
        current = self.running[0]
        if current.outputs - self.slice_start[current.rid] >= 5:
            self.running.append(self.running.pop(0))
            current = self.running[0]
            self.slice_start[current.rid] = current.outputs
        return [(current, min(current.phase_remaining, self.options.token_budget))]
'''

# The same, saying that its choices change as requests decode.
SAYS_SO = SLICES + '''

class SlicesSaysSo(Slices):
    def may_fold(self, blocked_reason):
        return False
'''

# Round-robin, one request per step for three steps each, by a step counter.
COUNTER = FIFO + '''

class TakeTurns(Fifo):
    def __init__(self, options, view):
        super().__init__(options, view)
        self.steps = 0

    def schedule(self, now):
        plan = super().schedule(now)
        self.steps += 1
        if not plan:
            return plan
        return [plan[(self.steps // 3) % len(plan)]]
'''

# a and b run; c waits for credit (9 + 6 of 16 blocks taken, it needs 4) until b ends.
LONG = [{"type": "config", "block_size": 4, "num_blocks": 16, "token_budget": 8},
        req("a", 0, 4, 30), req("b", 0, 4, 20), req("c", 1, 4, 10)]


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


def both_ways(spec: str, records, **kwargs):
    """(folded run, its events, stepped run, its events)."""
    folded_events, stepped_events = [], []
    trace = parse_trace("".join(json.dumps(r) + "\n" for r in records).encode(), "t.jsonl")
    options = Options.resolve(trace.config)
    engine = Engine(trace.workload, options, spec,
                    on_event=lambda e: folded_events.append(e.to_json()), **kwargs)
    folded = engine.run()
    stepped = Engine(trace.workload, options, spec, fast_forward=False,
                     on_event=lambda e: stepped_events.append(e.to_json()), **kwargs).run()
    return engine, folded, folded_events, stepped, stepped_events


def test_a_plugin_without_folding_knowledge_folds_and_matches_stepping(plugin):
    """Fifo says nothing about folding. While c waits for credit nothing is folded
    (the default `may_fold` declines with a blocked head). b ends at 20 (prefill at
    0, output 1 at 1, 19 decodes); c is admitted at 20 and prefills. At 21 a and c
    decode: the call changed nothing, and after a step with a prefill row every
    running request decodes, so it repeats. a has 21 outputs, c 1: min(30 - 21,
    10 - 1) - 1 = 8 boundaries emit without a finish, so 8 dispatches are folded;
    a and c end at 30. Summary, records and every event equal a
    step-by-step replay."""
    engine, folded, folded_events, stepped, stepped_events = both_ways(
        plugin(FIFO, "Fifo"), LONG)
    assert engine.folded == 8
    assert [r.finished_at for r in folded.requests] == [30, 20, 30]
    assert folded.summary == stepped.summary
    assert folded_events == stepped_events


def test_a_step_counter_in_the_policy_is_seen_and_nothing_is_folded(plugin):
    """TakeTurns changes its own attribute at every step: no step repeats the one
    before, so nothing is folded and the replay is the step-by-step one."""
    engine, folded, folded_events, stepped, stepped_events = both_ways(
        plugin(COUNTER, "TakeTurns"), LONG)
    assert engine.folded == 0
    assert folded.summary == stepped.summary
    assert folded_events == stepped_events


VLLM_RADIX = """
from scheduler_sim.policies.vllm import VllmPolicy


class VllmRadix(VllmPolicy):
    radix_eviction = True  # vLLM's scheduling over SGLang's radix tree
"""


def test_a_vllm_policy_over_a_radix_tree_is_not_folded(plugin):
    """vllm's `schedule` keys each block as it fills; a radix tree keys decoded blocks
    only when the engine says so at a request's end, and a fold skips `schedule`.
    Blocks of 8, a pool of 10, prefix caching: a (P=36, N=30) prefills at 0 (5
    blocks) and decodes from 1; b (P=5, N=9) is admitted at 21 beside a's 8 blocks,
    its first output at 22; its decode at 24 writes row 7 and fills its first block,
    keyed then; at 25 it opens its second (10 of 10). At 29 a's row 64 needs a ninth
    block: b (lifo) is preempted with 8 outputs and 12 rows, freeing 2 blocks, its
    first cached. a ends at 30; b resumes at 30 with 8 cached tokens, recomputes rows
    8-12 (4 replayed) and ends at 31. Folded, b's decodes 22-28 were one stretch and
    its first block was never keyed: 0 cached, 12 replayed. Now nothing is folded."""
    from scheduler_sim.engine.summary import request_record
    records = [{"type": "config", "block_size": 8, "num_blocks": 10, "prefix_caching": True},
               req("a", 0, 36, 30), req("b", 21, 5, 9)]
    trace = parse_trace("".join(json.dumps(r) + "\n" for r in records).encode(), "t.jsonl")
    options = Options.resolve(trace.config)
    spec = plugin(VLLM_RADIX, "VllmRadix")
    engine = Engine(trace.workload, options, spec)  # (no listener: one stops every fold here)
    folded = engine.run()
    stepped = Engine(trace.workload, options, spec, fast_forward=False).run()
    assert engine.folded == 0
    b = folded.requests[1]
    assert (b.preemptions, b.cached_tokens, b.replay_rows, b.finished_at) == (1, 8, 4, 31)
    assert folded.requests[0].finished_at == 30
    assert folded.summary == stepped.summary
    assert ([request_record(r) for r in folded.requests]
            == [request_record(r) for r in stepped.requests])


def test_choices_that_change_as_requests_decode_need_may_fold_false(plugin):
    """Slices runs a (P=4, N=12) and b (P=4, N=12) five outputs at a time: a prefills
    at 0 (output 1 at 1) and decodes to 5 outputs at 5; b prefills at 5 and reaches 5
    at 10; a to 10 at 15, b to 10 at 20; a ends at 22, b at 24. Answering
    `may_fold` False gives exactly that; with the default the engine sees a's
    decodes repeat, cannot see the slice, and runs a to its end at 12."""
    records = [{"type": "config", "block_size": 4, "num_blocks": 40, "token_budget": 8},
               req("a", 0, 4, 12), req("b", 0, 4, 12)]
    engine, folded, folded_events, stepped, stepped_events = both_ways(
        plugin(SAYS_SO, "SlicesSaysSo"), records)
    assert [(r.first_token_at, r.finished_at) for r in stepped.requests] == [(1, 22), (6, 24)]
    assert engine.folded == 0
    assert folded.summary == stepped.summary
    assert folded_events == stepped_events
    _, unsaid, _, _, _ = both_ways(plugin(SLICES, "Slices", name="slices.py"), records)
    assert unsaid.requests[0].finished_at == 12


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
    status, out, err = run(["check", write_trace(tmp_path, records, "c.jsonl"),
                            "--allow-trace-plugins"])
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


class TwiceOverBudget(QueueAndListPolicy):
    """Names a twice with 8 of its 9 prompt tokens: the duplicate is the fault named,
    not the 8-token budget the two entries exceed together."""
    def schedule(self, now):
        while self.waiting:
            head = self.waiting.pop()
            self.view.admit(head, self.blocks_to_finish(head))
            self.running.append(head)
        first = self.running[0]
        return [(first, 8), (first, 8)]


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


@pytest.mark.parametrize("cls, message, inside", [
    ("TooMuch", "broke a rule at tick 0: dispatch tokens(9) <= token_budget(8) is false",
     None),
    ("NotRunning", "broke a rule at tick 0: request 'a' dispatched while waiting with 4 "
                   "tokens", None),
    ("Greedy", "broke a rule at tick 0: held(0) + draining(0) + unused credit(100) <= "
               "num_blocks(8) is false",
     "            self.view.admit(self.waiting.pop(), 100)"),
    ("Twice", "broke a rule at tick 0: request 'a' appears twice in one dispatch (a request "
              "runs at most once per dispatch)", None),
    ("TwiceOverBudget", "broke a rule at tick 0: request 'a' appears twice in one dispatch "
                        "(a request runs at most once per dispatch)", None),
    ("NotAList", "broke a rule at tick 0: schedule() returns a list of (request, tokens) "
                 "pairs, got dict", None),
])
def test_a_broken_rule_exits_3_naming_the_policy_the_tick_and_the_rule(plugin, tmp_path,
                                                                       cls, message, inside):
    """Each bad plugin is stopped at its first broken rule: exit 3, one line naming the
    policy (its spelling), the tick and the equation or rule, and, when the rule broke
    inside a call the policy made (`view.admit`), the policy's line; nothing on stdout."""
    spec = plugin(BAD, cls)
    status, out, err = run(["replay", write_trace(tmp_path, ONE), "--policy", spec])
    assert (status, out) == (3, "")
    where = ""
    if inside is not None:
        where = (f" ({spec.rsplit(':', 1)[0]}:{BAD.splitlines().index(inside) + 1} in "
                 "schedule)")
    assert err == f"scheduler-sim: policy error: policy '{spec}' {message}{where}\n"


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


def test_a_relative_spelling_names_the_plugins_file_by_its_absolute_path(tmp_path,
                                                                         monkeypatch):
    """`--policy mine.py:Crashes` typed in the plugin's folder: the policy keeps the name
    it was given, and the file and line are the absolute path the plugin was loaded
    from (docs/policies.md quotes such a message)."""
    (tmp_path / "mine.py").write_text(BAD)
    trace = write_trace(tmp_path, ONE)
    monkeypatch.chdir(tmp_path)
    line = BAD.splitlines().index("        return 1 // 0") + 1
    status, out, err = run(["replay", trace, "--policy", "mine.py:Crashes"])
    assert (status, out) == (3, "")
    assert err == ("scheduler-sim: policy error: policy 'mine.py:Crashes' raised "
                   "ZeroDivisionError at tick 0: integer division or modulo by zero "
                   f"({tmp_path / 'mine.py'}:{line} in schedule)\n")


@pytest.mark.parametrize("source, cls, message", [
    (None, "Fifo", "no such file"),
    ("x = 1\n", "Fifo", "has no 'Fifo'"),
    ("class Fifo:\n    pass\n", "Fifo", "Fifo is not a subclass of scheduler_sim.Policy"),
])
def test_a_plugin_that_cannot_be_found_is_a_usage_error(tmp_path, source, cls, message):
    """A missing file, a missing class, or a class that is no Policy: the name leads
    nowhere, exit 2 with one line saying which, never a traceback."""
    path = tmp_path / "p.py"
    if source is not None:
        path.write_text(source)
    status, out, err = run(["replay", write_trace(tmp_path, ONE), "--policy", f"{path}:{cls}"])
    assert (status, out) == (2, "")
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_missing_module_is_a_usage_error(tmp_path):
    """`--policy no_such_module_here:Fifo`: nothing by that name, exit 2."""
    status, out, err = run(["replay", write_trace(tmp_path, ONE), "--policy",
                            "no_such_module_here:Fifo"])
    assert (status, out) == (2, "")
    assert err == ("scheduler-sim: error: cannot load policy from module "
                   "'no_such_module_here': no such module (is it installed, or on "
                   "PYTHONPATH?); a file of your own is named FILE.py:CLASS\n")


def test_a_module_spelling_of_a_file_that_is_there_names_the_file(tmp_path, monkeypatch):
    """`--policy spf:ShortestPromptFirst` where only spf.py exists (the installed command
    does not import from the working folder): the error names the file spelling."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spf.py").write_text("raise SystemExit('never imported')\n")
    status, out, err = run(["replay", write_trace(tmp_path, ONE), "--policy",
                            "spf:ShortestPromptFirst"])
    assert (status, out) == (2, "")
    assert err == ("scheduler-sim: error: cannot load policy from module 'spf': no such "
                   "module (is it installed, or on PYTHONPATH?); there is a file spf.py: "
                   "did you mean 'spf.py:ShortestPromptFirst'?\n")


@pytest.mark.parametrize("source, message", [
    ("def broken(:\n", "raised SyntaxError while its module was imported: invalid syntax "
                       "({path}:1)"),
    ("import not_a_module_anywhere\n",
     "raised ModuleNotFoundError while its module was imported: No module named "
     "'not_a_module_anywhere' ({path}:1 in <module>)"),
    ("raise SystemExit(0)\n", "raised SystemExit while its module was imported: 0 ({path}:1 "
                              "in <module>)"),
    ("raise KeyboardInterrupt\n", "raised KeyboardInterrupt while its module was imported "
                                  "({path}:1 in <module>)"),
])
def test_a_plugin_whose_module_raises_is_the_plugins_fault(tmp_path, source, message):
    """A plugin file whose own code raises while it is imported (a syntax error, an
    import of its own that fails, even SystemExit(0) or KeyboardInterrupt): exit 3, one
    line naming the policy, what it raised and its file and line."""
    path = tmp_path / "p.py"
    path.write_text(source)
    spec = f"{path}:Fifo"
    status, out, err = run(["replay", write_trace(tmp_path, ONE), "--policy", spec])
    assert (status, out) == (3, "")
    assert err == (f"scheduler-sim: policy error: policy '{spec}' "
                   f"{message.format(path=path)}\n")


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


@pytest.mark.parametrize("trace", ["mixed.jsonl", "check.jsonl"])
def test_the_lab_solution_folds_to_the_same_replay(trace):
    """Lab 08's reference solution says nothing about folding: on the lab's traces
    its folded replay equals the step-by-step one, summary and events."""
    lab = pathlib.Path(__file__).resolve().parent.parent / "labs" / "08-your-own-scheduler"
    records = [json.loads(line) for line in (lab / trace).read_text().splitlines()]
    config = {"type": "config", "block_size": 4, "num_blocks": 40, "token_budget": 32,
              "max_rows": 8}
    records = [config] + [r for r in records if r["type"] == "request"]
    spec = str(lab / "solution" / "shortest_first.py") + ":ShortestFirst"
    engine, folded, folded_events, stepped, stepped_events = both_ways(spec, records)
    assert engine.folded > 0
    assert folded.summary == stepped.summary
    assert folded_events == stepped_events


def test_steadiness_sees_a_policy_attribute_given_a_new_value_not_an_equal_one():
    """Steadiness compares the policy's attributes before and after a call: x = 1 then
    1.0 (equal) is no change; 2, a new attribute, a removal, a value that cannot be
    compared and a changed slot each are; the change log counts its writes."""
    from scheduler_sim.engine.steadiness import Steadiness
    from scheduler_sim.policies.base import Policy

    class Uncomparable:
        def __eq__(self, other):
            raise ValueError("ambiguous")

    policy = Policy(Options.resolve({}), view=None)
    policy.x = 1
    steady = Steadiness(policy)
    assert steady.before_call() == (0, None, ())  # no plan before: nothing to compare
    before = (0, *steady.policy_state())
    policy.x = 1.0
    assert not steady.policy_changed(before)
    policy.x = 2
    assert steady.policy_changed(before)
    policy.x = 1
    policy.y = 0
    assert steady.policy_changed(before)  # a new attribute
    del policy.y
    del policy.x
    assert steady.policy_changed(before)  # a removal
    policy.x = Uncomparable()
    before = (0, *steady.policy_state())
    assert not steady.policy_changed(before)  # the same object
    policy.x = Uncomparable()
    assert steady.policy_changed(before)  # cannot be compared: counted as changed

    class Slotted(Policy):
        __slots__ = ("turn",)

    slotted = Slotted(Options.resolve({}), view=None)
    slotted.turn = 0
    steady = Steadiness(slotted)
    before = (0, *steady.policy_state())
    assert not steady.policy_changed(before)
    slotted.turn = 1
    assert steady.policy_changed(before)
    assert steady.changes == 0
    steady.changed()
    steady.changed()
    assert (steady.changes, steady.before_call()[0]) == (2, 2)


def test_a_plugin_built_on_continuous_gets_lists_and_no_counted_decoders(plugin):
    """A plugin subclassing `continuous` (which sets `lazy_decoders`) runs without the
    engine's decode cohort, and its inherited `schedule` returns a plain list of
    (request, tokens) pairs it may edit; its results are the built-in policy's."""
    spec = plugin('''
        from scheduler_sim.policies.continuous import ContinuousPolicy

        class Mine(ContinuousPolicy):
            name = "mine"
            def schedule(self, now):
                plan = super().schedule(now)
                assert type(plan) is list
                return plan
    ''', "Mine")
    trace = parse_trace("".join(json.dumps(r) + "\n" for r in LONG).encode(), "t.jsonl")
    options = Options.resolve(trace.config)
    engine = Engine(trace.workload, options, spec)
    assert engine.cohort is None and not engine.takes_decodes_first
    mine = engine.run()
    builtin = Engine(trace.workload, options, "continuous").run()
    assert mine.summary == builtin.summary


def test_a_plugin_built_on_vllm_gets_lists_under_prefix_caching(plugin, monkeypatch):
    """Under prefix caching the built-in `vllm` hands its run of decodes from the
    first row over as one list (`DecodesFirst`): on this trace in 1 of the 2 steps it
    plans, at tick 1 (`c`'s arrival: `a`'s and `b`'s decodes, then `c`'s prompt; tick
    0 is the two prompts). The other dispatches are started without a call: nothing
    waits after tick 1 and `vllm` is at its fixed point under prefix caching too
    (`repeats_decodes`: the decodes after `c`'s prompt at 2, after `c`'s end at 11 and
    `b`'s at 20), and folded. A plugin subclassing it is asked at every one of those
    (the engine asks a plugin for no promise) and gets a plain list of (request,
    tokens) pairs from the inherited `schedule` every time (a plugin's plan must be
    a list), and its results are the built-in policy's."""
    from scheduler_sim.policies.base import DecodesFirst
    from scheduler_sim.policies.vllm import VllmPolicy

    spec = plugin('''
        from scheduler_sim.policies.vllm import VllmPolicy

        class Mine(VllmPolicy):
            name = "mine"
            def schedule(self, now):
                plan = super().schedule(now)
                assert type(plan) is list
                return plan
    ''', "Mine")
    records = [dict(LONG[0], prefix_caching=True), *LONG[1:]]
    trace = parse_trace("".join(json.dumps(r) + "\n" for r in records).encode(), "t.jsonl")
    options = Options.resolve(trace.config)
    mine = Engine(trace.workload, options, spec).run()
    kinds = []
    schedule = VllmPolicy.schedule

    def counted(self, now):
        plan = schedule(self, now)
        kinds.append(type(plan) is DecodesFirst)
        return plan

    monkeypatch.setattr(VllmPolicy, "schedule", counted)
    builtin = Engine(trace.workload, options, "vllm").run()
    assert kinds == [False, True]
    assert mine.summary == builtin.summary
