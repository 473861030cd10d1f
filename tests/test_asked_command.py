"""cli/asked_command.py: the command a command line asks for, and a parser that adds
only that command's arguments."""
from __future__ import annotations

import io

from scheduler_sim.cli.asked_command import asked_command
from scheduler_sim.cli.commands import COMMANDS
from scheduler_sim.cli.main import build_parser


def test_the_asked_command_is_the_first_word_without_a_dash():
    """`--version replay x` asks for replay; `-` and `-1` are skipped; a word naming no
    command, or none at all, asks for none."""
    assert asked_command(["replay", "t.jsonl", "--quiet"], COMMANDS) == "replay"
    assert asked_command(["--version", "sweep-merge", "a"], COMMANDS) == "sweep-merge"
    assert asked_command(["-", "-1", "cost"], COMMANDS) == "cost"
    assert asked_command(["t.jsonl", "replay"], COMMANDS) is None
    assert asked_command(["--help"], COMMANDS) is None
    assert asked_command([], COMMANDS) is None


def test_a_parser_built_for_one_command_names_all_and_fills_that_one():
    """Built for `replay`: every command is a choice, replay's parser has its flags, the
    others are stand-ins, and a replay line parses as with every command built."""
    argv = ["replay", "t.jsonl", "--block-size", "4", "--policy", "vllm", "--quiet"]
    full = build_parser(io.StringIO(), io.StringIO())
    one = build_parser(io.StringIO(), io.StringIO(), "replay")
    assert list(one.commands) == list(full.commands) and set(one.commands) == set(COMMANDS)
    assert len(one.commands["replay"]._actions) == len(full.commands["replay"]._actions) > 60
    assert not hasattr(one.commands["cost"], "parse_args")  # (a stand-in, never parsing)
    assert one.parse_args(argv) == full.parse_args(argv)
