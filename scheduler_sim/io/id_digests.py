"""The request ids of a streamed trace as 64-bit digests, in memory that does not grow
with the trace: which digests occur more than once (`IdDigests.repeated`).

Streamed validation (`trace_validator`) looks for duplicate ids without keeping
the ids: it keeps a digest of each (8 bytes) in one of `BUCKETS` arrays by the
digest's low bits, and at the end sorts one bucket at a time and compares
neighbours. Kept in memory, those arrays grew by 8 bytes a request: 8 MB for a
million requests, the whole growth of a replay's peak memory from 100,000 to a
million requests (`validate` alone: 24.7 MB at 100k, 36.6 MB at 1M). So past
`IN_MEMORY` digests the buckets are written out, each as it is (a chunk of
the bucket), to one anonymous temporary file, and emptied; at the end each
bucket is read back whole (its chunks and what is left in memory), sorted and
compared, one bucket at a time, as before. Memory is then `IN_MEMORY` digests
plus one bucket (a 256th of the requests) while it is sorted.
"""
from __future__ import annotations

from array import array
from typing import IO, Sequence

__all__ = ["IdDigests", "BUCKETS", "IN_MEMORY"]

# Digests are kept in this many arrays (by their low bits): sorted one at a time to
# find repeats, each a list of Python ints for a moment (about 40 bytes a digest:
# 40 MB for a million requests if they were sorted all at once, 0.16 MB a bucket).
BUCKETS = 256
# Digests held in memory at most (8 bytes each: 512 KiB); past them the buckets go to
# a temporary file. (`validate` of 1M generated requests peaked at 36.6 MB with
# every digest in 64 arrays; 27.0 MB with 2^17 held in 64 buckets; 24.9 MB with
# these, against 24.1 MB for 100k requests.)
IN_MEMORY = 1 << 16


class IdDigests:
    """Signed 64-bit digests, added one at a time or a list at a time; `repeated()`
    gives those added more than once (see the module)."""

    __slots__ = ("buckets", "held", "limit", "file", "chunks")

    def __init__(self, limit: int | None = None) -> None:
        self.buckets = [array("q") for _ in range(BUCKETS)]
        self.held = 0        # digests in the buckets in memory
        self.limit = IN_MEMORY if limit is None else limit  # ... at most
        self.file: IO[bytes] | None = None  # the chunks written out, if any
        self.chunks: list[list[tuple[int, int]]] = [[] for _ in range(BUCKETS)]  # (offset, count)

    def add(self, digest: int) -> None:
        """One more digest (`add_all` of one: a request checked alone)."""
        self.add_all((digest,))

    def add_all(self, digests: Sequence[int]) -> None:
        """Digests (a sequence) added in turn, in one loop without a call a digest
        (a block of a trace's ids at a time: those held may pass `limit` by a
        block; then they are written out)."""
        buckets = self.buckets
        for digest in digests:
            buckets[digest % BUCKETS].append(digest)
        self.held += len(digests)
        if self.held >= self.limit:
            self._write_out()

    def _write_out(self) -> None:
        """Every bucket in memory becomes a chunk of the file, and is emptied."""
        if self.file is None:
            import tempfile  # (only for traces this long: a plain replay never loads it)
            self.file = tempfile.TemporaryFile()
        file = self.file
        file.seek(0, 2)
        for i, bucket in enumerate(self.buckets):
            if bucket:
                self.chunks[i].append((file.tell(), len(bucket)))
                bucket.tofile(file)
                self.buckets[i] = array("q")
        self.held = 0

    def _bucket(self, i: int) -> array:
        """Every digest of bucket `i`: its chunks read back, and those in memory."""
        whole = array("q")
        file = self.file
        for offset, count in self.chunks[i]:
            file.seek(offset)
            whole.fromfile(file, count)
        whole += self.buckets[i]
        return whole

    def repeated(self) -> set[int]:
        """The digests added more than once (the temporary file is closed after)."""
        shared: set[int] = set()
        try:
            for i in range(BUCKETS):
                whole = self._bucket(i)
                # A bucket without a repeat (nearly every one) needs no sort: a set of
                # its digests, made in C, is as long as it (the 200,000 ids of a test
                # trace: 1,432 -> 661 instructions a digest, callgrind; benchmarks/
                # README.md, "Issue 26, thirteenth steps: a million generated requests").
                if len(set(whole)) == len(whole):
                    continue
                ordered = sorted(whole)
                shared.update(a for a, b in zip(ordered, ordered[1:]) if a == b)
        finally:
            if self.file is not None:
                self.file.close()
                self.file = None
        return shared
