"""The seconds and steps of a one-row decode dispatch at each context, priced once:
a table a cost model's one-row terms (`decode_terms(1)`) and a clock's step,
which `stretch_timing._time_slices` slices instead of pricing each slice anew.

Each entry is computed as the series computes it, `base + kv * c` for context
c (and that over the step), so a slice of the table holds exactly the floats
of pricing the slice itself. A table reaches at most `TOP` contexts and only
`KEYS` tables are kept (then all are forgotten): a table holds values, never
state, so which ones are kept changes no output.

Speed: a fleet's replicas run one row a dispatch (the Mooncake trace on 64
prefix-affinity replicas times 3.66 million of its 3.85 million sliced
dispatches in slices of one row, about 260 a stretch, 95% of them at contexts
under 65,536). A slice of 260 priced in three C passes (`map`s of `mul`,
`add` and `truediv` over a `range`) took 36 us, sliced from the tables 12 us;
the whole replay 0.936x the CPU, paired, for a peak RSS 4.9 MB higher
(benchmarks/README.md, "twentieth steps", flt21).
"""
from __future__ import annotations

from itertools import repeat
from operator import add, mul, truediv
from threading import Lock

__all__ = ["priced", "TOP"]

TOP = 1 << 16  # contexts a table reaches at most: 2 x 65,536 floats, about 4.2 MB
KEYS = 4       # tables kept at most (a cost model and clock each)

_TABLES: dict[tuple[float, float, float], tuple[list[float], list[float]]] = {}
_GROWING = Lock()


def priced(base: float, kv: float, step_seconds: float, top: int
           ) -> tuple[list[float], list[float]]:
    """The seconds `base + kv * c` of contexts c = 0, 1, ... (at least up to `top`,
    excluded; `top` at most `TOP`) and their steps, the seconds over
    `step_seconds`.

    Replays in threads (the API's) share the tables: they only grow, one
    thread at a time (`_GROWING`), the steps before the seconds, so a table
    whose seconds reach `top` has its steps there too. The terms are positive
    floats (`decode_terms`; the caller asks nothing else): a key compares by
    value, and 0.0 and -0.0, or 1 and 1.0, would share a table."""
    if top > TOP:
        raise ValueError(f"top({top}) <= TOP({TOP}) is false")
    table = _TABLES.get((base, kv, step_seconds))
    if table is None or len(table[0]) < top:
        with _GROWING:
            table = _TABLES.get((base, kv, step_seconds))
            if table is None:
                if len(_TABLES) >= KEYS:
                    _TABLES.clear()
                table = _TABLES[base, kv, step_seconds] = ([], [])
            seconds, steps = table
            if len(seconds) < top:
                more = list(map(add, repeat(base), map(mul, repeat(kv), range(len(seconds), top))))
                steps += map(truediv, more, repeat(step_seconds))
                seconds += more
    return table
