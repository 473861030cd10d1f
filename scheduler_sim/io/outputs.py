"""Writing output files whole, and reading input text (the top layer's file I/O).

Every file the command line writes appears complete or not at all: records
go to a temporary file beside the target, renamed over it at the end, with
the permissions the umask gives a new file. `-` means standard output.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any, Callable, TextIO

from ..records.clock import Clock
from ..records.errors import UsageError
from ..records.events import Event

__all__ = ["EventFile", "write_whole", "jsonl", "read_text"]


def _file_mode() -> int:
    """The mode a new file gets from the umask (mkstemp's are private: 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


class EventFile:
    """Streams event records to a file that appears only when complete.

    Records go to a temporary file beside the target, renamed over it at
    `commit`; `abort` removes it. `-` streams to standard output instead.
    Times are written in `clock`'s unit (ticks, or seconds with a cost model).
    """

    def __init__(self, target: str, stdout: TextIO, tag_policy: bool,
                 clock: Clock | None = None) -> None:
        self.target = target
        self.tag_policy = tag_policy
        self.clock = clock if clock is not None and clock.in_seconds else None
        self._tmp: str | None = None
        self._lines: list[str] = []
        if target == "-":
            self.handle = stdout
        elif os.path.isdir(target):
            raise UsageError(f"{target}: cannot write events: it is a directory")
        else:
            directory = os.path.dirname(os.path.abspath(target))
            try:
                fd, self._tmp = tempfile.mkstemp(prefix=".events-", suffix=".tmp", dir=directory)
            except OSError as exc:
                raise UsageError(f"{target}: cannot write events: {exc.strerror or exc}") from None
            self.handle = os.fdopen(fd, "w", encoding="utf-8", newline="\n")

    def listener(self, policy: str) -> Callable[[Event], None]:
        """The `on_event` callback for one policy's run (lines are written in
        batches; `flush` writes the rest)."""
        tag = policy if self.tag_policy else None
        lines = self._lines
        append = lines.append
        handle = self.handle
        clock = self.clock

        def on_event(event: Event) -> None:
            append(event.to_json(tag, clock))
            if len(lines) >= 4096:
                handle.write("\n".join(lines) + "\n")
                lines.clear()
        return on_event

    def flush(self) -> None:
        """Write the lines still buffered."""
        if self._lines:
            self.handle.write("\n".join(self._lines) + "\n")
            self._lines.clear()

    def commit(self) -> None:
        """Make the file appear under its name, complete."""
        self.flush()
        if self._tmp is None:
            self.handle.flush()
            return
        self.handle.close()
        os.chmod(self._tmp, _file_mode())
        os.replace(self._tmp, self.target)
        self._tmp = None

    def abort(self) -> None:
        """Leave nothing behind."""
        if self._tmp is not None:
            self.handle.close()
            os.unlink(self._tmp)
            self._tmp = None


def write_whole(target: str | None, text: str, stdout: TextIO) -> None:
    """Write `text` to `target` under a temporary name, then rename (or to stdout)."""
    if target in (None, "-"):
        stdout.write(text)
        return
    if os.path.isdir(target):
        raise UsageError(f"{target}: cannot write: it is a directory")
    directory = os.path.dirname(os.path.abspath(target))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".out-", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise UsageError(f"{target}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(tmp, _file_mode())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
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
