"""The change log folding rests on (engine/steadiness.py) is written wherever a request
changes state: a structural check over the engine and the fleet drivers, so that a new
transition cannot silently miss it (a missed write would fold a step that is not a
repeat)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "scheduler_sim"

# A request's state changes only through these methods of Request (requests/request.py).
TRANSITIONS = {"admit", "finish", "preempt", "wait_for_remote_kv", "load_remote_kv", "cancel",
               "reject", "time_out", "fail"}
# Calls that write the change log: itself, and the engine's steps that always write it.
WRITES = {"changed", "note_change", "_end"}


def _counts_a_change(node: ast.AST) -> bool:
    """`<anything>.changes += 1`: `Steadiness.changed` written inline."""
    return (isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add)
            and isinstance(node.target, ast.Attribute) and node.target.attr == "changes")


def unlogged_transitions(source: str) -> list[str]:
    """The functions of `source` that call a request transition (on anything but `self`)
    and write no change log (a call of `WRITES`, or its count added to inline)."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef):
            continue
        calls = [node.func for node in ast.walk(fn) if isinstance(node, ast.Call)
                 and isinstance(node.func, ast.Attribute)]
        moves = [c.attr for c in calls if c.attr in TRANSITIONS
                 and not (isinstance(c.value, ast.Name) and c.value.id == "self")]
        if moves and not any(c.attr in WRITES for c in calls) and not any(
                map(_counts_a_change, ast.walk(fn))):
            out.append(f"{fn.name} ({', '.join(sorted(set(moves)))})")
    return out


def test_every_transition_in_the_engine_and_the_fleets_writes_the_change_log():
    """Every engine or fleet function that moves a request (admit, finish, preempt, park,
    land, cancel, reject, time out, fail) writes the change log in the same function."""
    found = []
    for folder in ("engine", "fleet"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            found += [f"{path.relative_to(ROOT)}: {name}"
                      for name in unlogged_transitions(path.read_text())]
    assert found == []


def test_the_scan_finds_a_transition_without_a_write():
    """A made-up driver that cancels a request and writes nothing is found, as is one
    that subtracts from the count; one that writes the log (by a call, or adding 1 to
    its count inline), or only calls its own method of that name, is not."""
    source = ("def quiet(engine, req):\n    req.cancel(3)\n"
              "def logged(engine, req):\n    req.cancel(3)\n    engine.note_change()\n"
              "def inline(engine, req):\n    req.admit(3, 0, 1)\n"
              "    engine.steadiness.changes += 1\n"
              "def other(engine, req):\n    req.admit(3, 0, 1)\n    engine.changes -= 1\n"
              "def own(self):\n    self.cancel(3)\n")
    assert unlogged_transitions(source) == ["quiet (cancel)", "other (admit)"]
