"""Writing output files whole or in place (the top layer's file output).

Where an output goes (`Output`, used by `EventFile` and `write_whole`):

- `-` is standard output.
- A symlink is followed to its target, link after link; the link itself is
  never replaced. The rules below apply to the file it leads to.
- A regular file, or a name that does not exist yet, is written atomically:
  the text goes to a hidden temporary file beside it (`.events-*.tmp`,
  `.out-*.tmp`), renamed over it when complete, with the permissions the
  umask gives a new file. So it is either whole or absent (or its old self).
- Anything else (a character device such as `/dev/null` or `/dev/full`, a
  FIFO, a terminal, a socket) is written in place: opened for writing,
  never replaced, never created. So are the names of open descriptors
  (`/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N`): the file standard output
  already writes to is written through standard output itself, and another
  regular file behind such a name is appended to. A FIFO blocks until a
  reader opens it, as for any tool.
- A directory is refused.

If a command fails or is interrupted (SIGINT, or SIGTERM, which the command
line turns into the same path), `abort` removes the temporary file; what was
already written in place stays written. Every write error (disk full, file
too large, permission denied) becomes an `OutputError` naming the output,
and a reader that went away (a closed pipe, on standard output or a FIFO)
a `PipeClosed`; both are `SimError`s, so that they pass through the engine
even from inside an event listener. A character no encoding can carry (a
lone surrogate in a request id, in a CSV) is written as a backslash escape.

Which names a command may write is `output_paths`'; the event stream's file
is `event_file`'s, and reading input files `inputs`'.
"""
from __future__ import annotations

import errno
import io
import json
import os
import re
import stat
import tempfile
from typing import Any, TextIO

from ..records import interrupts
from ..records.errors import SimError, UsageError
from .terminal_text import printable

__all__ = ["Output", "OutputError", "PipeClosed", "GuardedStream", "abort_unfinished",
           "write_whole", "jsonl"]


class OutputError(UsageError):
    """An output could not be opened or written: one line naming it, exit status 2."""


class PipeClosed(SimError):
    """The reader of a pipe went away (`scheduler-sim ... | head -1`): a quiet end."""


def _failure(name: str, what: str, exc: OSError) -> SimError:
    """The error a failed write of output `name` raises."""
    if isinstance(exc, BrokenPipeError):
        return PipeClosed(f"{name}: the reader went away")
    return OutputError(f"{printable(name)}: {what}: {exc.strerror or exc}")


class GuardedStream:
    """A text stream (standard output or error) whose write errors become `OutputError`
    or `PipeClosed`, and whose unencodable characters become backslash escapes.

    Over an unbuffered stream (`python -u`, PYTHONUNBUFFERED) the text is written
    to the raw file here, in a loop: TextIOWrapper would make one write() call
    and drop the rest when it comes up short, which it does when a pipe closes,
    a disk fills or `ulimit -f` is reached, so the output would be cut short
    without an error. A stream that is None (the program started with that
    descriptor closed, `>&-`) cannot be written.
    """

    def __init__(self, stream: TextIO | None, name: str) -> None:
        self.stream = stream
        self.name = name
        buffer = getattr(stream, "buffer", None)
        self._raw = buffer if isinstance(buffer, io.RawIOBase) else None

    def _write_raw(self, raw: io.RawIOBase, text: str) -> int:
        data = memoryview(text.encode(self.stream.encoding, self.stream.errors or "strict"))
        while data:
            done = raw.write(data)
            if done is None:  # a non-blocking descriptor that is full
                raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
            data = data[done:]
        return len(text)

    def write(self, text: str) -> int:
        if self.stream is None:
            raise OutputError(f"{self.name}: cannot write: it is closed")
        try:
            if self._raw is not None:
                return self._write_raw(self._raw, text)
            return self.stream.write(text)
        except UnicodeEncodeError:
            # TextIOWrapper encodes the whole text before buffering any of it.
            encoding = getattr(self.stream, "encoding", None) or "utf-8"
            return self.write(text.encode(encoding, "backslashreplace").decode(encoding))
        except OSError as exc:
            raise _failure(self.name, "cannot write", exc) from None

    def flush(self) -> None:
        if self.stream is None:
            return
        try:
            self.stream.flush()
        except OSError as exc:
            raise _failure(self.name, "cannot write", exc) from None

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.stream, attr)


def _file_mode() -> int:
    """The mode a new file gets from the umask (mkstemp's are private: 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


# The name of an open descriptor: written in place whatever it leads to. A pattern
# `re` compiles (and caches) when a file output is first opened, not at import: about
# 50 us of every process's start-up otherwise (timeit; benchmarks/README.md,
# "thirteenth steps", helper st9).
_DESCRIPTOR = r"/proc/[^/]+/fd/[0-9]+|/dev/fd/[0-9]+"


def _real(path: str) -> str:
    """`path` with its directory's symlinks resolved, its last component kept."""
    head, tail = os.path.split(path)
    return os.path.join(os.path.realpath(head or "."), tail)


def _follow(target: str) -> tuple[str, bool]:
    """Where `target` leads once every symlink is followed, and whether that is the name
    of an open descriptor (`/dev/stdout` leads to `/proc/<pid>/fd/1`: stop there)."""
    path = _real(os.path.join(os.getcwd(), target))
    for _ in range(40):
        if re.fullmatch(_DESCRIPTOR, path):
            return path, True
        try:
            link = os.readlink(path)
        except OSError:  # not a link, or nothing there yet
            return path, False
        path = _real(os.path.join(os.path.dirname(path), link))
    raise OSError(40, "Too many levels of symbolic links")


def _same_file(st: os.stat_result, stream: TextIO) -> bool:
    """Whether `st` is the file `stream` writes to."""
    try:
        other = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):  # a StringIO, a closed stream
        return False
    return (st.st_dev, st.st_ino) == (other.st_dev, other.st_ino)


class Output:
    """One output opened by the module's rules: `handle` is a text stream; `commit`
    makes the output appear complete, `abort` leaves no temporary file behind.

    `what` words the error messages (`cannot write events: ...`), `prefix` names
    the temporary file (`.events-`).
    """

    def __init__(self, target: str, stdout: TextIO, what: str = "cannot write",
                 prefix: str = ".out-") -> None:
        self.target = target
        self.what = what
        self.tmp: str | None = None  # the temporary file, while there is one
        self.path: str | None = None  # what it is renamed to
        self.owned = False  # whether `handle` is ours to close
        if target == "-":
            self.handle = stdout
            return
        try:
            path, descriptor = _follow(target)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                if descriptor:
                    raise
                st = None
        except OSError as exc:
            raise _failure(target, what, exc) from None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{printable(target)}: {what}: it is a directory")
        if st is not None and (descriptor or not stat.S_ISREG(st.st_mode)):
            if _same_file(st, stdout):
                self.handle = stdout
                return
            flags = os.O_WRONLY | os.O_NOCTTY | (os.O_APPEND if stat.S_ISREG(st.st_mode) else 0)
            try:
                fd = os.open(path, flags)
            except OSError as exc:
                raise _failure(target, what, exc) from None
        else:
            try:
                # Created and noted with signals held: an interrupt cannot fall between
                # the file's creation and the note that `abort_unfinished` reads.
                with interrupts.held():
                    fd, self.tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp",
                                                    dir=os.path.dirname(path))
                    _UNFINISHED.add(self)
            except OSError as exc:
                raise _failure(target, what, exc) from None
            self.path = path
        self.owned = True
        self.handle = open(fd, "w", encoding="utf-8", errors="backslashreplace",
                           newline="\n")

    def failed(self, exc: OSError) -> SimError:
        """The error to raise for a write to `handle` that raised `exc`."""
        return _failure(self.target, self.what, exc)

    def write(self, text: str) -> None:
        try:
            self.handle.write(text)
        except OSError as exc:
            raise self.failed(exc) from None

    def commit(self, interrupted: bool = False) -> None:
        """Make the output appear complete (flush it; close it; rename it into place),
        unless an interrupt signal arrived: then raise it (records/interrupts.py), so
        that an interrupted command leaves no output. `interrupted`: the command knows
        it was interrupted and keeps this output as it stands (a sweep's finished rows)."""
        if not interrupted:
            interrupts.raise_if_signalled()
        try:
            if not self.owned:
                self.handle.flush()
                return
            self.handle.close()
            if self.tmp is not None:
                os.chmod(self.tmp, _file_mode())
                os.replace(self.tmp, self.path)
                self.tmp = None
                _UNFINISHED.discard(self)
        except OSError as exc:
            self.abort()
            raise self.failed(exc) from None

    def abort(self) -> None:
        """Leave no temporary file behind (what went in place stays written)."""
        if self.owned:
            try:
                self.handle.close()
            except OSError:
                pass
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None
        _UNFINISHED.discard(self)


# Every Output whose temporary file exists (created, neither committed nor aborted).
_UNFINISHED: set = set()


def abort_unfinished() -> None:
    """Abort every output still unfinished: the command line calls it as a command
    ends, however it ends, so that no temporary file outlives the process even when an
    interrupt came between an output's creation and the code that would abort it."""
    with interrupts.held():
        for output in list(_UNFINISHED):
            output.abort()


def write_whole(target: str | None, text: str, stdout: TextIO) -> None:
    """Write `text` to `target` by the module's rules (`-` or None: to `stdout`)."""
    output = Output("-" if target is None else target, stdout)
    try:
        output.write(text)
        output.commit()
    except BaseException:
        output.abort()
        raise


def jsonl(records: list[dict[str, Any]]) -> str:
    """Records as JSONL text, compact, one per line."""
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
