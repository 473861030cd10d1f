"""Reading input files whole (`-`: standard input): as text with bad bytes replaced
(`read_text`), as bytes no larger than a limit (`read_limited`), and as text
gunzipped when it is a gzip stream, inflated no further than a limit
(`read_input`); standard input's bytes (`read_stdin`), closed (`<&-`) or not; and
what is not a regular file read no further than a bound (`read_bounded`). Every
failure is a UsageError naming the file.
"""
from __future__ import annotations

import io
import os
import stat
import sys
import zlib

from ..records.errors import UsageError

__all__ = ["read_text", "read_limited", "read_input", "read_stdin", "read_bounded",
           "MAX_DECOMPRESSED", "MAX_PIPED"]

# The most text a gzip input may decompress to: far above any trace `convert`
# reads, and a bound on what a small file that inflates without end can take.
MAX_DECOMPRESSED = 2 ** 31

# The most bytes read whole from what is not a regular file (standard input from a
# pipe, a FIFO, `<(...)`, a device): far above any public trace, and a bound on an
# endless one (`/dev/zero`, `yes |`), which took memory until none was left.
MAX_PIPED = 2 ** 30


def read_bounded(handle, name: str) -> bytes:
    """Every byte of `handle`, opened on `name`: a regular file's, whatever its size;
    anything else's up to MAX_PIPED (a UsageError past that)."""
    try:
        regular = stat.S_ISREG(os.fstat(handle.fileno()).st_mode)
    except (OSError, ValueError):  # (no descriptor: a stand-in for standard input)
        regular = False
    if regular:
        return handle.read()
    data = handle.read(MAX_PIPED + 1)
    if len(data) > MAX_PIPED:
        size = f"{MAX_PIPED // 2 ** 30} GiB" if MAX_PIPED >= 2 ** 30 else f"{MAX_PIPED} bytes"
        raise UsageError(f"{name}: more than {size} from a pipe or a device, which is read "
                         "whole: save it to a file")
    return data


def read_stdin(limit: int = -1) -> bytes:
    """Standard input's bytes (at most `limit`; all when negative). Started with it
    closed (`<&-`), Python has no `sys.stdin`: a UsageError, as when it cannot be read
    (an AttributeError traceback before)."""
    if sys.stdin is None:
        raise UsageError("<stdin>: cannot read: standard input is closed")
    try:
        if limit < 0:
            return read_bounded(sys.stdin.buffer, "<stdin>")
        return sys.stdin.buffer.read(limit)
    except OSError as exc:
        raise UsageError(f"<stdin>: cannot read: {exc.strerror or exc}") from None


def read_text(path: str) -> str:
    """The text of a file (`-`: standard input); bad bytes become U+FFFD."""
    if path == "-":
        return read_stdin().decode("utf-8", errors="replace")
    try:
        with open(path, "rb") as handle:
            return read_bounded(handle, path).decode("utf-8", errors="replace")
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
            data = read_stdin(limit + 1)
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
            data = read_stdin()
        else:
            with open(path, "rb") as handle:
                data = read_bounded(handle, path)
    except OSError as exc:
        raise UsageError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if data[:2] == b"\x1f\x8b":
        import gzip  # (here, for a gzip input: 1.6 million instructions of every start)
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
                data = stream.read(limit + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise UsageError(f"{name}: not a readable gzip file: {exc}") from None
        if len(data) > limit:
            raise UsageError(f"{name}: decompresses to more than {limit // 2 ** 20:,} MiB")
    return data.decode("utf-8", errors="replace")
