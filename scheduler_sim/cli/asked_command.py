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
    """The parser of a command that was not asked for: it is never used to parse (the
    command argparse takes is the asked one, or no command at all), and what would
    add arguments to it adds nothing."""

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        return None

    def add_argument_group(self, *args: Any, **kwargs: Any) -> "_Unbuilt":
        return self


class Subcommands:
    """The commands of `parser` (its `add_subparsers`, given `kwargs`), as their builders
    see them: `add_parser` names every command (its help, the choices a wrong name is
    told), and makes a parser to fill only for `asked` (every command when `asked` is
    None), an `_Unbuilt` stand-in for the others (made by the `parser_class` it hands
    argparse: an `ArgumentParser` is a few translated texts and a help formatter to
    make, each a few hundred thousand instructions)."""

    def __init__(self, parser: Any, asked: str | None, **kwargs: Any) -> None:
        self.asked = asked
        self.parser_class = type(parser)
        self.filled = True  # whether the parser being added is filled
        self.action = parser.add_subparsers(parser_class=self._make, **kwargs)

    def _make(self, **kwargs: Any) -> Any:
        return self.parser_class(**kwargs) if self.filled else _Unbuilt()

    @property
    def choices(self) -> dict[str, Any]:
        """Command name -> its parser (an `_Unbuilt` when not asked for)."""
        return self.action.choices

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        self.filled = self.asked is None or self.asked == name
        return self.action.add_parser(name, **kwargs)
