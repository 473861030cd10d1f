"""A streamed trace's blocks as its validation read them, kept for the replays
(issue 26): each replay of a long trace reads its requests back from here instead
of matching and converting the file's text again.

Validation reads a long trace a block of whole lines at a time (`trace.py`). A
block whose every line is a request as `generate` and `convert` write it has been
converted to its four columns (`trace_fast_path.Columns`): they are kept as they
are; any other block is kept as its bytes, which the replay reads a line at a time
as before. Each block is written, in file order, to one anonymous temporary file
(`marshal`: exact for the columns' strings, integers and floats), so that memory
does not grow with the trace; the replay reads one block back at a time. The
replay so reads exactly what was validated, even if the file changes after.

A copy sent to another process (pickled with a streamed trace, to a sweep's
worker) keeps nothing there: its reader reads the trace file again.

Speed: the replay's read of 50,000 generated requests' lines took about
14,540 instructions a line (the block's regular expression, `int` of three
columns, the `RequestSpec`s); read back from here about 5,100, of which the
`RequestSpec`s 3,850 (callgrind, benchmarks/README.md, "Issue 26, thirteenth
steps: a million generated requests, the trace converted once").
"""
from __future__ import annotations

import marshal
from typing import IO, Iterator

from .trace_fast_path import Columns

__all__ = ["ValidatedCopy"]


class ValidatedCopy:
    """The blocks of a trace file in order, each its first line's number and either
    its columns (`Columns`) or its bytes; `blocks()` reads them back, as often as
    asked."""

    __slots__ = ("file", "places", "kept")

    def __init__(self, kept: bool = True) -> None:
        self.file: IO[bytes] | None = None
        self.places: list[tuple[int, int]] = []  # (offset, length) of each block written
        # False: a copy sent to another process (a sweep's worker): an open temporary
        # file does not travel, so it keeps nothing and its reader reads the trace
        # file again there, as validation converted it (`trace._converted_blocks`).
        self.kept = kept

    def __reduce__(self):
        return ValidatedCopy, (False,)

    def add(self, first: int, block: bytes, columns: Columns | None) -> None:
        """Keep block `block` (whole lines), whose first line is line `first`: as its
        columns if validation converted it (`columns`), else as its bytes."""
        if self.file is None:
            import tempfile  # (only for a long trace: a short one is read whole)
            self.file = tempfile.TemporaryFile()
        data = marshal.dumps((first, block) if columns is None else (first, *columns))
        file = self.file
        self.places.append((file.seek(0, 2), len(data)))
        file.write(data)

    def blocks(self) -> Iterator[tuple[int, bytes] | tuple[int, Columns]]:
        """(first line's number, bytes) or (first line's number, columns) of each
        block, in file order. Replays may read at the same time: each block is
        sought and read in one step."""
        file = self.file
        if file is not None:
            file.flush()
        for offset, length in self.places:
            file.seek(offset)
            kept = marshal.loads(file.read(length))
            if len(kept) == 2:
                yield kept
            else:
                yield kept[0], Columns(*kept[1:])

    def close(self) -> None:
        """Give the temporary file back (the blocks cannot be read after)."""
        if self.file is not None:
            self.file.close()
            self.file = None
        self.places = []
