"""The event stream written to a file (`replay --events FILE`): `EventFile` opens
it as an `outputs.Output` (atomic for a regular file, in place for a device or
a FIFO, `-` for standard output) and hands each policy's run, or each replica
of a fleet, a line listener that writes the event lines in batches (`_FileLines`); a
replica's lines carry its number (`ReplicaLines`).
"""
from __future__ import annotations

import json
from typing import Callable, TextIO

from ..records.clock import Clock
from ..records.event_lines import LineListener
from ..records.events import Event
from .outputs import Output

__all__ = ["EventFile", "ReplicaLines", "BATCH"]

# Event lines kept before the buffer is written out (every way a line comes in).
BATCH = 4096


class _FileLines(LineListener):
    """One policy's event lines into an `EventFile`, written 4,096 lines at a time,
    or sooner once folded stretches' texts (`write_text`) pass about a megabyte."""

    def __init__(self, file: "EventFile", policy: str | None) -> None:
        super().__init__(policy, file.clock)
        self.lines = file._lines
        self.handle = file.handle
        self.output = file.output
        self.text_size = 0  # characters of the texts among `lines`

    def __call__(self, event: Event) -> None:
        # (`write` of the record's line, inline: a call fewer for each of the 58,098
        # request lines of the Azure trace; benchmarks/README.md, "fourteenth
        # steps", helper ev10.)
        lines = self.lines
        lines.append(event.to_json(self.policy, self.clock))
        if len(lines) >= BATCH:
            self._flush()

    def write(self, line: str) -> None:
        lines = self.lines
        lines.append(line)
        if len(lines) >= BATCH:
            self._flush()

    def write_all(self, lines: list[str]) -> None:
        self.lines += lines
        if len(self.lines) >= BATCH:
            self._flush()

    def write_text(self, text: str) -> None:
        """Several lines as one text: kept as if one line (the buffer is written
        joined by newlines, so the bytes are the same)."""
        self.lines.append(text)
        self.text_size += len(text)
        if self.text_size >= 1 << 20 or len(self.lines) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        lines = self.lines
        lines.append("")  # (the last newline, without copying the joined text again)
        try:
            self.handle.write("\n".join(lines))
        except OSError as exc:
            raise self.output.failed(exc) from None
        lines.clear()
        self.text_size = 0


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
        """Tag one line with the replica and hand it on."""
        self.inner.write(self._tagged(line))

    def write_all(self, lines: list[str]) -> None:
        """Tag each line with the replica and hand them on together."""
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
