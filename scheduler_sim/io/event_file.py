"""The event stream written to a file (`replay --events FILE`): `EventFile` opens
it as an `outputs.Output` (atomic for a regular file, in place for a device or
a FIFO, `-` for standard output) and hands each policy's run, or each replica
of a fleet, a line listener that writes the event lines in batches (`_FileLines`); a
replica's lines carry its number (`ReplicaLines`).

The batch is a list of the text's pieces, written joined by nothing: each line
its text and a newline, a folded stretch's lines the pieces `steady_parts`
lays out (records/event_lines.py) and a newline. Speed: a folded stretch's
text is joined once, at the batch's write, not once for itself and again
with the batch (its 783 bytes a folded dispatch copied once less; see
`_FileLines.write_parts`).
"""
from __future__ import annotations

import json
from typing import Callable, TextIO

from ..records.clock import Clock
from ..records.event_lines import STEADY_ROWS, STEADY_STEP, LineListener, json_string
from ..records.events import Event
from .outputs import Output

__all__ = ["EventFile", "ReplicaLines", "BATCH"]

# Event lines kept before the buffer is written out (every way a line comes in;
# a line is two pieces of the buffer, its text and a newline).
BATCH = 4096
_PIECES = 2 * BATCH  # (the buffer's pieces before it is written out)


class _FileLines(LineListener):
    """One policy's event lines into an `EventFile`, written 4,096 lines (8,192
    pieces) at a time, or sooner once texts of several lines (`write_text`), or the
    rows' texts of folded stretches (`write_parts`), pass about a megabyte (8,192
    pieces about 0.9 MB on the Azure trace)."""

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
        lines.append("\n")
        if len(lines) >= _PIECES:
            self._flush()

    # A request's lines, each appended as `write` would (a call fewer a line: see
    # `LineListener.arrived`).
    def arrived(self, tick: int, rid: str) -> None:
        lines = self.lines
        lines.append(self.arrival % (self.when(tick), json_string(rid)))
        lines.append("\n")
        if len(lines) >= _PIECES:
            self._flush()

    def admitted(self, tick: int, rid: str, reserved: int, resumed: bool, cached: int) -> None:
        lines = self.lines
        lines.append(self.admission % (self.when(tick), json_string(rid), reserved,
                                       "true" if resumed else "false", cached))
        lines.append("\n")
        if len(lines) >= _PIECES:
            self._flush()

    def finished(self, tick: int, rid: str, status: str) -> None:
        lines = self.lines
        lines.append(self.finish % (self.when(tick), json_string(rid), json_string(status)))
        lines.append("\n")
        if len(lines) >= _PIECES:
            self._flush()

    def write(self, line: str) -> None:
        lines = self.lines
        lines.append(line)
        lines.append("\n")
        if len(lines) >= _PIECES:
            self._flush()

    def write_all(self, lines: list[str]) -> None:
        if lines:
            self.write_text("\n".join(lines))

    def write_text(self, text: str) -> None:
        """Several lines as one text: kept as if one line (a newline after it)."""
        lines = self.lines
        lines.append(text)
        lines.append("\n")
        self.text_size += len(text)
        if self.text_size >= 1 << 20 or len(lines) >= _PIECES:
            self._flush()

    def write_parts(self, parts: list[str]) -> None:
        """A text of several lines as its pieces (none: nothing): kept as they are, a
        newline after them, joined with the rest of the batch when it is written.
        Speed: the first 2,000 Azure requests under `continuous` with `--events`,
        1.9719e9 -> 1.9512e9 instructions (callgrind; benchmarks/README.md,
        "fifteenth steps", helper ev11)."""
        if not parts:
            return
        lines = self.lines
        lines += parts
        lines.append("\n")
        # (The rows' texts counted toward the megabyte by one of them, the layout
        # `steady_parts` gives: a sum over the pieces cost 4.6% of the instructions of
        # the first 2,000 Azure requests with `--events`, 1.9333e9 -> 2.0231e9.)
        if len(parts) > STEADY_ROWS:
            self.text_size += len(parts[STEADY_ROWS]) * (len(parts) // STEADY_STEP)
        if self.text_size >= 1 << 20 or len(lines) >= _PIECES:
            self._flush()

    def _flush(self) -> None:
        lines = self.lines
        try:
            self.handle.write("".join(lines))
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
            self.output.write("".join(self._lines))
            self._lines.clear()

    def commit(self) -> None:
        """Make the file appear under its name, complete."""
        self.flush()
        self.output.commit()

    def abort(self) -> None:
        """Leave nothing behind."""
        self.output.abort()
