"""Writing output files, and reading input text (the top layer's file I/O).

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

Which names a command may write (`check_output_paths`, called before the
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
input for an input.

If a command fails or is interrupted (SIGINT, or SIGTERM, which the command
line turns into the same path), `abort` removes the temporary file; what was
already written in place stays written. Every write error (disk full, file
too large, permission denied) becomes an `OutputError` naming the output,
and a reader that went away (a closed pipe, on standard output or a FIFO)
a `PipeClosed`; both are `SimError`s, so that they pass through the engine
even from inside an event listener. A character no encoding can carry (a
lone surrogate in a request id, in a CSV) is written as a backslash escape.
"""
from __future__ import annotations

import errno
import gzip
import io
import zlib
import json
import os
import re
import stat
import sys
import tempfile
from typing import Any, Callable, Iterable, TextIO

from ..records import interrupts
from ..records.clock import Clock
from ..records.errors import SimError, UsageError
from ..records.events import Event, LineListener
from .report import printable

__all__ = ["EventFile", "Output", "OutputError", "PipeClosed", "GuardedStream",
           "write_whole", "jsonl", "read_text", "read_input", "check_output_paths",
           "MAX_DECOMPRESSED"]

# The most text a gzip input may decompress to: far above any trace `convert`
# reads, and a bound on what a small file that inflates without end can take.
MAX_DECOMPRESSED = 2 ** 31


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


# The name of an open descriptor: written in place whatever it leads to.
_DESCRIPTOR = re.compile(r"/proc/[^/]+/fd/[0-9]+|/dev/fd/[0-9]+")


def _real(path: str) -> str:
    """`path` with its directory's symlinks resolved, its last component kept."""
    head, tail = os.path.split(path)
    return os.path.join(os.path.realpath(head or "."), tail)


def _follow(target: str) -> tuple[str, bool]:
    """Where `target` leads once every symlink is followed, and whether that is the name
    of an open descriptor (`/dev/stdout` leads to `/proc/<pid>/fd/1`: stop there)."""
    path = _real(os.path.join(os.getcwd(), target))
    for _ in range(40):
        if _DESCRIPTOR.fullmatch(path):
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

    def commit(self) -> None:
        """Make the output appear complete (flush it; close it; rename it into place),
        unless an interrupt signal arrived: then raise it (records/interrupts.py), so
        that an interrupted command leaves no output."""
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


class _FileLines(LineListener):
    """One policy's event lines into an `EventFile`, written 4,096 at a time."""

    def __init__(self, file: "EventFile", policy: str | None) -> None:
        super().__init__(policy, file.clock)
        self.lines = file._lines
        self.handle = file.handle
        self.output = file.output

    def write(self, line: str) -> None:
        lines = self.lines
        lines.append(line)
        if len(lines) >= 4096:
            self._flush()

    def write_all(self, lines: list[str]) -> None:
        self.lines += lines
        if len(self.lines) >= 4096:
            self._flush()

    def _flush(self) -> None:
        lines = self.lines
        try:
            self.handle.write("\n".join(lines) + "\n")
        except OSError as exc:
            raise self.output.failed(exc) from None
        lines.clear()


class ReplicaLines(LineListener):
    """A replica's event lines: each carries `"replica":N` after its event kind
    (and its policy, when several policies run), then goes to `inner`."""

    def __init__(self, inner: LineListener, replica: int) -> None:
        super().__init__(inner.policy, inner.clock)
        self.inner = inner
        self.tag = f',"replica":{replica}'
        # Where the tag goes: after `"event":"kind"` and the policy's field.
        self.skip = (0 if inner.policy is None
                     else len(',"policy":' + json.encoder.encode_basestring_ascii(inner.policy)))

    def _tagged(self, line: str) -> str:
        at = line.index('"', line.index('"event":"') + 9) + 1 + self.skip
        return line[:at] + self.tag + line[at:]

    def write(self, line: str) -> None:
        self.inner.write(self._tagged(line))

    def write_all(self, lines: list[str]) -> None:
        self.inner.write_all(list(map(self._tagged, lines)))


class EventFile:
    """Streams event records to an `Output` (atomic for a regular file).

    `commit` makes the file appear complete; `abort` removes the temporary file.
    `-` streams to standard output instead. Times are written in `clock`'s unit
    (ticks, or seconds with a cost model).
    """

    def __init__(self, target: str, stdout: TextIO, tag_policy: bool,
                 clock: Clock | None = None) -> None:
        self.target = target
        self.tag_policy = tag_policy
        self.clock = clock if clock is not None and clock.in_seconds else None
        self._lines: list[str] = []
        self.output = Output(target, stdout, "cannot write events", ".events-")
        self.handle = self.output.handle

    def listener(self, policy: str, replica: int | None = None) -> Callable[[Event], None]:
        """The `on_event` callback for one policy's run, or for one replica of a fleet
        (lines are written in batches; `flush` writes the rest)."""
        lines = _FileLines(self, policy if self.tag_policy else None)
        return lines if replica is None else ReplicaLines(lines, replica)

    def flush(self) -> None:
        """Write the lines still buffered."""
        if self._lines:
            self.output.write("\n".join(self._lines) + "\n")
            self._lines.clear()

    def commit(self) -> None:
        """Make the file appear under its name, complete."""
        self.flush()
        self.output.commit()

    def abort(self) -> None:
        """Leave nothing behind."""
        self.output.abort()


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
    file is to the command (`"the trace"`); `-` and None are skipped in both."""
    given = [(flag, path) for flag, path in outputs if path is not None]
    for flag, path in given:
        if not path:
            raise UsageError(f"{flag} needs a file name, or - for standard output; "
                             "got an empty one")
    sources = [(what, path, _holder(path)) for what, path in inputs if path and path != "-"]
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


def read_text(path: str) -> str:
    """The text of a file (`-`: standard input); bad bytes become U+FFFD."""
    if path == "-":
        return sys.stdin.buffer.read().decode("utf-8", errors="replace")
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_limited(path: str, limit: int, why: str) -> bytes:
    """The bytes of a file (`-`: standard input), read no further than `limit` bytes:
    UsageError `FILE: larger than LIMIT, WHY` past that, or when it cannot be read."""
    name = "<stdin>" if path == "-" else path
    size = f"{limit // 2 ** 30} GiB" if limit >= 2 ** 30 else f"{limit // 2 ** 20} MiB"
    too_big = UsageError(f"{name}: larger than {size}, {why}")
    try:
        if path == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as handle:
                if os.fstat(handle.fileno()).st_size > limit:
                    raise too_big
                data = handle.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise too_big
    return data


def read_input(path: str, limit: int = MAX_DECOMPRESSED) -> str:
    """The text of an input file (`-`: standard input), gunzipped when it starts with
    gzip's magic bytes, whatever its name; bad bytes become U+FFFD. A gzip stream
    is inflated no further than `limit` bytes (UsageError past that), and a
    corrupt one is a UsageError naming the file."""
    name = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as handle:
                data = handle.read()
    except OSError as exc:
        raise UsageError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
                data = stream.read(limit + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise UsageError(f"{name}: not a readable gzip file: {exc}") from None
        if len(data) > limit:
            raise UsageError(f"{name}: decompresses to more than {limit // 2 ** 20:,} MiB")
    return data.decode("utf-8", errors="replace")
