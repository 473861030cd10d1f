"""The `GPU utilisation` counter of `replay --perfetto` (see `perfetto`), with a cost
model: per time bucket of an engine's `engine.work_series.WorkSeries` (at most
2,048 buckets, a power of two of clock steps wide), one counter event
(`"ph":"C"`, on the engine's process) at the bucket's start with the GPU's
`busy` share of the bucket and its `MFU` and `MBU` over the bucket's length,
in percent with 2 decimals; then one of zeros at the end of the last bucket.
Perfetto draws a counter track per argument (`GPU utilisation busy`, `GPU
utilisation MFU`, `GPU utilisation MBU`).
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Callable

__all__ = ["draw_work", "utilisation_lines"]


def draw_work(part: Any, series: list[Any]) -> None:
    """Write into `part` (a `perfetto.Part`, after its run) the counters of each
    engine's `WorkSeries`: a fleet's replicas in order (process 1000 x (policy's
    place + 1) + replica), or the one engine's."""
    for replica, work in enumerate(series):
        for line in utilisation_lines(1000 * (part.position + 1) + replica, work, part.us):
            part.sink.add(line)


def utilisation_lines(pid: int, work: Any, us: Callable[[int], Any]) -> Iterator[str]:
    """The counter events of `work` (a `WorkSeries`) on process `pid`; `us` turns
    clock steps into the file's microseconds."""
    head = f'{{"name":"GPU utilisation","ph":"C","pid":{pid},"tid":0,"ts":'
    width = work.width
    end = 0
    for i, (_, _, busy, mfu, mbu) in enumerate(work.points()):
        yield (f'{head}{us(i * width)},"args":{{"busy":{_percent(busy)},'
               f'"MFU":{_percent(mfu)},"MBU":{_percent(mbu)}}}}}')
        end = min((i + 1) * width, max(math.ceil(work.end), i * width + 1))
    if end:
        yield f'{head}{us(end)},"args":{{"busy":0,"MFU":0,"MBU":0}}}}'


def _percent(fraction: float) -> str:
    """A fraction as a percentage with 2 decimals, as JSON (0 without decimals)."""
    value = round(fraction * 100, 2)
    return "0" if value == 0 else repr(value)
