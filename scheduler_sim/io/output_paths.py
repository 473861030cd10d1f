"""Which names a command may write (`check_output_paths`, called before the
command reads or runs anything): an output flag given an empty name is
refused; so is an output that is one of the command's inputs, or that names
the same file as another output. Names are compared as the files they lead
to: after every symlink, `.` and `..` (realpath), and by device and inode
when both exist (hard links, bind mounts). Only files that hold data count:
a regular file, or a name that does not exist yet (what an output would
replace). A device, a FIFO, a socket or a terminal is written in place and
never replaced, so several outputs may name it (`/dev/null` twice); the
name of an open descriptor (`/dev/stdout`, `/dev/fd/N`) counts as the file
it leads to. `-` is not a path: standard output for an output, standard
input for an input; standard input redirected from a regular file counts as
that file (`replay - --events q.jsonl < q.jsonl` is refused).
"""
from __future__ import annotations

import os
import stat
from typing import Iterable

from ..records.errors import UsageError

__all__ = ["check_output_paths"]


def _holder(path: str) -> tuple[str, tuple[int, int] | None] | None:
    """How `path` is compared with other names: (its realpath, (device, inode) when it
    exists), or None when it is something written in place that holds no data (a
    device, a FIFO, a socket, a terminal, a directory)."""
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        real = os.path.abspath(path)
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # not there yet (or not reachable): its name decides
        return real, None
    if not stat.S_ISREG(st.st_mode):
        return None
    return real, (st.st_dev, st.st_ino)


def _stdin_holder() -> tuple[None, tuple[int, int]] | None:
    """Standard input as an input is compared by its file when it is a regular file
    (a redirection from one), by device and inode; else (a pipe, a terminal) None."""
    try:
        st = os.fstat(0)
    except (OSError, ValueError):
        return None
    return (None, (st.st_dev, st.st_ino)) if stat.S_ISREG(st.st_mode) else None


def _same(one: tuple[str, tuple[int, int] | None],
          other: tuple[str, tuple[int, int] | None]) -> bool:
    return one[0] == other[0] or (one[1] is not None and one[1] == other[1])


def check_output_paths(outputs: Iterable[tuple[str, str | None]],
                       inputs: Iterable[tuple[str, str | None]] = ()) -> None:
    """Refuse (UsageError) what one command's outputs must not be, before anything
    is read or written: an empty name, one of the inputs, or the file of another
    output (the module's docstring says how names are compared).

    `outputs` are (flag, path) pairs (`("--events", "q.jsonl")`, path None when the
    flag was not given); `inputs` are (what, path) pairs, `what` saying what the
    file is to the command (`"the trace"`); None is skipped in both, and `-` too
    but for an input redirected from a regular file (`_stdin_holder`)."""
    given = [(flag, path) for flag, path in outputs if path is not None]
    for flag, path in given:
        if not path:
            raise UsageError(f"{flag} needs a file name, or - for standard output; "
                             "got an empty one")
    sources = [(what, "standard input" if path == "-" else path,
                _stdin_holder() if path == "-" else _holder(path))
               for what, path in inputs if path]
    written: list[tuple[str, str, tuple[str, tuple[int, int] | None]]] = []
    for flag, path in given:
        holder = _holder(path) if path != "-" else None
        if holder is None:
            continue
        for what, source, other in sources:
            if other is not None and _same(holder, other):
                raise UsageError(f"{flag} {path} is {what} ({source}): an output never "
                                 "replaces an input")
        for earlier, earlier_path, other in written:
            if _same(holder, other):
                raise UsageError(f"{earlier} {earlier_path} and {flag} {path} name the "
                                 "same file")
        written.append((flag, path, holder))
