"""A streamed trace's blocks as its validation read them, kept for the replays
(issue 26): each replay of a long trace reads its requests back from here instead
of matching and converting the file's text again.

Validation reads a long trace a block of whole lines at a time (`trace.py`). A
block whose every line is a request as `generate` and `convert` write it has been
converted to its columns (`trace_fast_path.Columns`): they are kept as they
are; any other block is kept as its bytes, which the replay reads a line at a time
as before. Each block is written, in file order, to one anonymous temporary file
(`marshal`: exact for the columns' strings, integers and floats), so that memory
does not grow with the trace; the replay reads one block back at a time. The
replay so reads exactly what was validated, even if the file changes after.

Once validation has ended the file is sealed (flushed, never written again), and
a block is read back by its offset (`os.pread`), never through the file object's
position or buffer: replays in threads (the API's sweeps, `events()`) and in
forked worker processes (`-j N`: they inherit the open file, sharing its
position) read it at the same time. (Where `os.pread` is missing, a lock keeps
each block's seek and read together: such a platform starts its workers afresh,
and they read the trace file again, below.) A review found `-j 2` on a 6 MB
trace failing with `bad marshal data` when blocks were sought and read through
the shared position.

A copy sent to another process by pickling (a worker started afresh) keeps
nothing there: its reader reads the trace file again.

Speed: the replay's read of 50,000 generated requests' lines took about
14,540 instructions a line (the block's regular expression, `int` of three
columns, the `RequestSpec`s); read back from here about 5,100, of which the
`RequestSpec`s 3,850 (callgrind, benchmarks/README.md, "Issue 26, thirteenth
steps: a million generated requests, the trace converted once").
"""
from __future__ import annotations

import marshal
import os
import threading
from typing import IO, Iterator

from .trace_fast_path import Columns

__all__ = ["ValidatedCopy"]


class ValidatedCopy:
    """The blocks of a trace file in order, each its first line's number and either
    its columns (`Columns`) or its bytes; `blocks()` reads them back, as often as
    asked."""

    __slots__ = ("file", "places", "kept", "end", "sealed", "lock")

    def __init__(self, kept: bool = True) -> None:
        self.file: IO[bytes] | None = None
        self.places: list[tuple[int, int]] = []  # (offset, length) of each block written
        self.end = 0  # bytes written
        self.sealed = False  # flushed, and written no more
        self.lock = threading.Lock()  # (only where os.pread is missing)
        # False: a copy sent to another process (a sweep's worker: an open temporary
        # file does not travel) or of a trace nothing replays (`validate`): it keeps
        # nothing, and a reader reads the trace file again, as validation converted
        # it (`trace._converted_blocks`).
        self.kept = kept

    def __reduce__(self):
        return ValidatedCopy, (False,)

    def add(self, first: int, block: bytes, columns: Columns | None) -> None:
        """Keep block `block` (whole lines), whose first line is line `first`: as its
        columns if validation converted it (`columns`), else as its bytes."""
        if not self.kept:
            return  # (a copy that keeps nothing: its reader reads the file again)
        if self.sealed:
            raise ValueError("a sealed copy takes no more blocks")
        if self.file is None:
            import tempfile  # (only for a long trace: a short one is read whole)
            self.file = tempfile.TemporaryFile()
        data = marshal.dumps((first, block) if columns is None else (first, *columns))
        self.places.append((self.end, len(data)))
        try:
            self.file.write(data)
        except OSError as exc:
            raise _named(exc) from None
        self.end += len(data)

    def seal(self) -> None:
        """Flush what was written, once, before any reader (`read_trace` seals the copy
        when validation ends, before a worker process can inherit it: a buffer
        flushed by two processes would be written twice)."""
        if not self.sealed:
            self.sealed = True
            if self.file is not None:
                try:
                    self.file.flush()
                except OSError as exc:
                    raise _named(exc) from None

    def blocks(self) -> Iterator[tuple[int, bytes] | tuple[int, Columns]]:
        """(first line's number, bytes) or (first line's number, columns) of each
        block, in file order. Replays may read at the same time, in threads or in
        forked processes: each block is read by its offset (`_read`)."""
        self.seal()
        for offset, length in self.places:
            kept = marshal.loads(self._read(offset, length))
            if len(kept) == 2:
                yield kept
            else:
                yield kept[0], Columns(*kept[1:])

    def _read(self, offset: int, length: int) -> bytes:
        """The `length` bytes at `offset`, leaving the file's position alone."""
        file = self.file
        if hasattr(os, "pread"):
            data = os.pread(file.fileno(), length, offset)
            while len(data) < length:  # (a regular file gives all at once; to be sure)
                more = os.pread(file.fileno(), length - len(data), offset + len(data))
                if not more:
                    raise EOFError("temporary copy of the trace ended at byte "
                                   f"{offset + len(data)}")
                data += more
            return data
        with self.lock:
            file.seek(offset)
            return file.read(length)

    def close(self) -> None:
        """Give the temporary file back (the blocks cannot be read after)."""
        if self.file is not None:
            self.file.close()
            self.file = None
        self.places = []


def _named(exc: OSError) -> OSError:
    """A failure to write the copy (a full disk, most likely), naming where it is: an
    anonymous file has no name of its own, so the error names the temporary folder."""
    import tempfile
    return OSError(exc.errno, f"cannot keep the trace's validated copy in the temporary "
                   f"folder: {exc.strerror or exc} (TMPDIR chooses the folder)",
                   tempfile.gettempdir())
