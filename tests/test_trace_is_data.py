"""A trace is data: reading, validating, checking or collecting one never runs code.

A plugin policy that only a trace's config (or a sweep's grid file) names runs
only when the command line says so (`--allow-trace-plugins`, or naming it with
`--policy`), and its file is then taken from the trace's own folder.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, req, run_cli as run, write_trace
import scheduler_sim as sim
from scheduler_sim.records.errors import UsageError

pytest_plugins = ["pytester"]  # the pytest runs of a trace, in this process

# If this module is ever imported, it leaves a file beside itself.
EVIL = '''
import pathlib
pathlib.Path(__file__).with_name("PWNED").write_text("imported")
from scheduler_sim import QueueAndListPolicy


class X(QueueAndListPolicy):
    def schedule(self, now):
        while self.waiting:
            head = self.waiting.pop()
            self.view.admit(head, self.blocks_to_finish(head))
            self.running.append(head)
        return [(r, r.phase_remaining) for r in self.running]
'''

CONFIG = {"type": "config", "block_size": 4, "num_blocks": 8, "token_budget": 8}
REFUSED = ("its config names the plugin policy 'evil.py:X': Python code, which a trace "
           "never runs on its own; to run it, pass --allow-trace-plugins (or name it with "
           "--policy)")


@pytest.fixture
def evil(tmp_path):
    """A folder with evil.py and a trace whose config names it beside a built-in."""
    (tmp_path / "evil.py").write_text(EVIL)
    records = [dict(CONFIG, policy=["evil.py:X", "continuous"]), req("a", 0, 4, 2),
               {"type": "expect", "completed": 1}]
    return tmp_path, write_trace(tmp_path, records, "t.jsonl")


def pwned(folder: Path) -> bool:
    return (folder / "PWNED").exists()


@pytest.mark.parametrize("argv", [
    ["validate", "{trace}"],
    ["replay", "{trace}", "--policy", "continuous"],
    ["check", "{trace}", "--policy", "continuous"],
    ["sweep", "{trace}", "--grid", "num_blocks=8,16", "--policy", "continuous"],
])
def test_commands_that_do_not_run_the_plugin_never_import_it(evil, argv):
    """validate, and replay/check/sweep with the policies given on the command line,
    read the trace whose config names evil.py and never import it."""
    folder, trace = evil
    status, _, err = run([a.format(trace=trace) for a in argv])
    assert status == 0, err
    assert not pwned(folder)


@pytest.mark.parametrize("command", [["replay"], ["check"],
                                     ["sweep", "--grid", "num_blocks=8,16"]])
def test_a_plugin_only_the_trace_names_is_refused_without_the_flag(evil, command):
    """replay, check and sweep taking their policies from the trace: exit 2, one line
    naming the plugin and the flag, nothing imported, nothing on stdout."""
    folder, trace = evil
    status, out, err = run([command[0], trace, *command[1:]])
    assert (status, out) == (2, "")
    assert err == f"scheduler-sim: error: {trace}: {REFUSED}\n"
    assert not pwned(folder)


def test_with_the_flag_the_plugin_runs_from_the_traces_folder(evil, monkeypatch, tmp_path):
    """With --allow-trace-plugins the plugin runs, its relative file taken from the
    trace's folder even when the command runs elsewhere."""
    folder, trace = evil
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    status, out, err = run(["check", trace, "--allow-trace-plugins"])
    assert (status, err) == (0, ""), out
    assert out.endswith("ok: 2 expectation(s) hold (evil.py:X, continuous)\n")
    assert pwned(folder)


def test_naming_the_plugin_on_the_command_line_needs_no_flag(evil, monkeypatch):
    """`--policy evil.py:X` is the user's own choice: it runs (from the working
    directory, as every command-line path)."""
    folder, trace = evil
    monkeypatch.chdir(folder)
    status, _, err = run(["replay", trace, "--policy", "evil.py:X"])
    assert (status, err) == (0, "")
    assert pwned(folder)


def test_a_grid_files_plugin_needs_the_flag(evil):
    """A sweep's grid file is a file too: its policy list's plugin needs the flag."""
    folder, trace = evil
    grid = folder / "grid.json"
    grid.write_text(json.dumps({"policy": ["evil.py:X"]}))
    status, out, err = run(["sweep", trace, "--grid-file", str(grid)])
    assert (status, out) == (2, "")
    assert err == (f"scheduler-sim: error: {grid}: its policy list names the plugin policy "
                   "'evil.py:X': Python code, which a grid file never runs on its own; to "
                   "run it, pass --allow-trace-plugins (or name it with --policy)\n")
    assert not pwned(folder)
    status, out, err = run(["sweep", trace, "--grid-file", str(grid), "--allow-trace-plugins"])
    assert status == 0, err
    assert pwned(folder)


def test_the_api_refuses_a_trace_borne_plugin_unless_allowed(evil):
    """sim.load, sim.replay and sim.check refuse the trace's plugin with the same
    message (its hint in the API's words), and run it with allow_trace_plugins=True."""
    folder, trace = evil
    loaded = sim.load(trace)
    for call in (sim.replay, sim.check):
        with pytest.raises(UsageError) as info:
            call(loaded)
        assert str(info.value) == f"{trace}: " + REFUSED.replace(
            "pass --allow-trace-plugins (or name it with --policy)",
            "pass allow_trace_plugins=True (or name it in policies=)")
    with pytest.raises(UsageError):
        sim.sweep(loaded, {"num_blocks": [8]})
    assert not pwned(folder)
    result = sim.replay(loaded, allow_trace_plugins=True)
    assert [run.summary["completed"] for run in result.runs] == [1, 1]
    assert pwned(folder)


def _pytest(folder: Path, *flags: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *flags, str(folder)], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow  # three pytest processes, as a user runs them: 3.5 s of CPU
def test_pytest_collects_and_runs_traces_without_importing_their_plugins(evil):
    """`pytest --collect-only DIR` and `pytest DIR` over the trace: nothing imported;
    the plugin's item fails saying how to allow it, the built-in's passes; with
    `--allow-trace-plugins` both pass."""
    folder, _ = evil
    collected = _pytest(folder, "--collect-only")
    assert "t.jsonl::line 3: run [evil.py:X]" in collected.stdout
    assert not pwned(folder)
    ran = _pytest(folder)
    assert ran.returncode == 1
    assert "1 failed, 1 passed" in ran.stdout
    assert "to run it, run pytest with --allow-trace-plugins" in ran.stdout
    assert not pwned(folder)
    allowed = _pytest(folder, "--allow-trace-plugins")
    assert allowed.returncode == 0, allowed.stdout
    assert pwned(folder)


def test_pytest_in_process_collects_and_runs_traces_without_importing_their_plugins(
        evil, pytester, monkeypatch):
    """The test above with pytest run in this process (pytester) and only the package's
    plugin loaded: the same three runs, the same outcomes."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    folder, _ = evil

    def run_pytest(*flags: str):
        return pytester.runpytest("-p", "scheduler_sim.cli.pytest_plugin", "-p",
                                  "no:cacheprovider", *flags, str(folder))
    collected = run_pytest("--collect-only", "-q")
    assert "t.jsonl::line 3: run [evil.py:X]" in "\n".join(collected.outlines)
    assert not pwned(folder)
    ran = run_pytest("-q")
    assert ran.ret == 1
    ran.assert_outcomes(failed=1, passed=1)
    assert "to run it, run pytest with --allow-trace-plugins" in "\n".join(ran.outlines)
    assert not pwned(folder)
    allowed = run_pytest("-q", "--allow-trace-plugins")
    assert allowed.ret == 0, allowed.outlines
    assert pwned(folder)


def test_a_plugin_spelling_is_still_checked_without_importing(tmp_path):
    """A config policy that is no plugin spelling (`evil.py:` has no class) is a trace
    error at its line, found without importing anything."""
    path = write_trace(tmp_path, [dict(CONFIG, policy="evil.py:"), req("a", 0, 4, 2)])
    status, _, err = run(["validate", path])
    assert status == 2
    assert err == (f"{path}:1: config: a plugin policy is MODULE:CLASS or FILE.py:CLASS, "
                   "got 'evil.py:'\n")
