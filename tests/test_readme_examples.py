"""The README's quoted sessions: every fenced block that starts with `$ scheduler-sim`
and whose inputs ship in the repository is run as written, and what it prints is what
the block quotes (a line `...` stands for lines left out)."""
from __future__ import annotations

import io
import re
import shlex
from pathlib import Path

import pytest

from scheduler_sim.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^ *```[a-z]*\n(.*?)^ *```", re.M | re.S)


def sessions(text: str) -> list[tuple[str, list[str]]]:
    """Each fenced block starting with `$ scheduler-sim`: its command (continuation lines
    joined) and the lines it quotes as output."""
    found = []
    for block in FENCE.findall(text):
        lines = block.splitlines()
        if not lines or not lines[0].startswith("$ scheduler-sim "):
            continue
        command = lines[0][2:]
        rest = lines[1:]
        while command.endswith("\\"):
            command = command[:-1].rstrip() + " " + rest.pop(0).strip()
        found.append((command, rest))
    return found


def runnable(command: str) -> bool:
    """A command whose input files are in the repository (the README's other examples
    name files a reader brings: a raw trace, a trace of their own)."""
    words = shlex.split(command)[1:]
    inputs = [w for w in words[1:] if w.endswith((".jsonl", ".csv"))
              and not w.startswith("-")]
    outputs = {words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--csv", "-o")}
    return all((ROOT / w).is_file() for w in inputs if w not in outputs)


def matches(quoted: list[str], printed: list[str]) -> bool:
    """The quoted lines, in order: the printed ones exactly, where `...` may stand for any
    run of lines."""
    pattern = "".join(".*?" if line.strip() == "..." else re.escape(line + "\n")
                      for line in quoted)
    return re.fullmatch(pattern, "".join(line + "\n" for line in printed), re.S) is not None


README_SESSIONS = [s for s in sessions((ROOT / "README.md").read_text()) if runnable(s[0])]


def test_the_readme_sessions_are_found():
    """The parser finds the README's runnable sessions (a README rewrite that hid them from
    it would otherwise pass unchecked), and skips those needing a reader's own file."""
    commands = [command.split(" ")[1] for command, _ in README_SESSIONS]
    assert commands == ["replay", "replay", "sweep", "search", "search", "cost"]
    assert not runnable("scheduler-sim validate conversation_trace.jsonl")


def test_matches_reads_an_ellipsis_as_any_lines():
    """`...` stands for any run of lines; every other line must be printed as quoted."""
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "d"], ["a", "d"])
    assert not matches(["a", "d"], ["a", "b", "d"])
    assert not matches(["a", "...", "d"], ["a", "b", "d", "e"])


@pytest.mark.parametrize("command,quoted", README_SESSIONS, ids=[c for c, _ in README_SESSIONS])
def test_a_readme_session_prints_what_it_quotes(command, quoted, tmp_path, monkeypatch):
    """Run from a scratch folder that sees the repository's traces, the command prints
    (standard output, then standard error) the lines the README quotes."""
    (tmp_path / "traces").symlink_to(ROOT / "traces")
    monkeypatch.chdir(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    main(shlex.split(command)[1:], out=out, err=err)
    printed = (out.getvalue() + err.getvalue()).splitlines()
    assert matches(quoted, printed), "\n".join(printed)
