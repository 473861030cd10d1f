"""The command a command line asks for, and a parser built for it alone.

`cli.main` builds the parser of every command (`build_parser`) to parse one
command line. Every command is named there (the top level's help lists them,
and a wrong name is told the choices), but only the asked command's own
arguments are read: `asked_command` finds it before parsing, and
`Subcommands` adds every command's parser while giving the builders of the
others a `_Unbuilt` stand-in, so that their arguments are never made.

The asked command is the first argument that does not begin with `-`: the top
level's only options, `-h` and `--version`, take no value, so that argument is
the one argparse takes for the command. When argparse takes another (`-`, or
`-1`, which it reads as positional), that one is no command and the error is the
same whichever parsers were built; when the argument names no command, every
parser is built.

Speed (every process): building every command's arguments (about 300, each
making a help formatter that asks for the terminal's size) costs about 3 ms of
CPU, for a `replay` that reads about 80 of them (benchmarks/README.md,
"thirteenth steps: a process's fixed cost", helper st9).
"""
from __future__ import annotations

from typing import Any, Collection

__all__ = ["asked_command", "Subcommands"]


def asked_command(argv: list[str], commands: Collection[str]) -> str | None:
    """The command `argv` asks for, if it names one of `commands`; else None."""
    word = next((word for word in argv if not word.startswith("-")), None)
    return word if word in commands else None


class _Unbuilt:
    """The parser of a command that was not asked for, as its builder sees it: what
    would add arguments to it adds nothing."""

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        return None

    def add_argument_group(self, *args: Any, **kwargs: Any) -> "_Unbuilt":
        return self

    def add_mutually_exclusive_group(self, *args: Any, **kwargs: Any) -> "_Unbuilt":
        return self

    def set_defaults(self, **kwargs: Any) -> None:
        return None


class Subcommands:
    """An `add_subparsers` action as the commands' builders see it: `add_parser` adds
    every command's parser, and returns it to be filled only for `asked` (every
    command when `asked` is None); a stand-in otherwise."""

    def __init__(self, action: Any, asked: str | None) -> None:
        self.action = action
        self.asked = asked

    @property
    def choices(self) -> dict[str, Any]:
        """Command name -> its parser."""
        return self.action.choices

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        parser = self.action.add_parser(name, **kwargs)
        if self.asked is None or self.asked in (name, *kwargs.get("aliases", ())):
            return parser
        return _Unbuilt()
