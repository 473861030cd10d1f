"""The prices of a one-row decode dispatch at each context (engine/context_prices.py),
and the slices `stretch_timing` takes of them."""
from __future__ import annotations

from scheduler_sim.engine import context_prices, stretch_timing
from scheduler_sim.engine.context_prices import TOP, priced
from scheduler_sim.engine.stretch_timing import time_stretch
from test_stretch_timing import INF, US, Series, one_at_a_time


def test_a_table_is_priced_once_and_grown(monkeypatch):
    """base 0.5 s, kv 0.25 s a context, steps of 0.125 s (all exact in binary): contexts
    0 to 3 cost 0.5, 0.75, 1.0 and 1.25 s, 4, 6, 8 and 10 steps; asked up to 6, the
    same lists grow by 1.5 and 1.75 s (12 and 14 steps); asked up to 2, they stay."""
    monkeypatch.setattr(context_prices, "_TABLES", {})
    seconds, steps = table = priced(0.5, 0.25, 0.125, 4)
    assert (seconds, steps) == ([0.5, 0.75, 1.0, 1.25], [4.0, 6.0, 8.0, 10.0])
    assert priced(0.5, 0.25, 0.125, 6) is table
    assert (seconds, steps) == ([0.5, 0.75, 1.0, 1.25, 1.5, 1.75],
                                [4.0, 6.0, 8.0, 10.0, 12.0, 14.0])
    assert priced(0.5, 0.25, 0.125, 2) is table and len(seconds) == 6
    # Another step (or terms) is another table; a fifth one forgets the four kept.
    assert priced(0.5, 0.25, 0.25, 2) == ([0.5, 0.75], [2.0, 3.0])
    for base in (1.0, 2.0):
        priced(base, 0.25, 0.125, 1)
    assert len(context_prices._TABLES) == 4
    assert priced(4.0, 0.25, 0.125, 1) == ([4.0], [32.0])
    assert list(context_prices._TABLES) == [(4.0, 0.25, 0.125)]


def test_one_rows_slices_are_taken_from_the_table_up_to_its_top(monkeypatch):
    """One row, 200 dispatches of about 6.5 ms on 1 us steps, no `until`: one slice of
    all 200. From context TOP - 300 (contexts TOP - 299 to TOP - 100) it is sliced out
    of a table reaching TOP - 99; from TOP - 100 it would pass TOP and is priced by
    itself. Two rows are never taken from a table. Either way the stretch is timed as
    one dispatch at a time would be."""
    monkeypatch.setattr(context_prices, "_TABLES", {})
    tops: list[int] = []

    def asked(base, kv, step_seconds, top):
        tops.append(top)
        return priced(base, kv, step_seconds, top)

    monkeypatch.setattr(stretch_timing, "priced", asked)
    cost = Series(0.0065, 1e-8)
    for rows, start, expected_tops in ((1, TOP - 300, [TOP - 99]), (1, TOP - 100, []),
                                       (2, TOP - 600, [])):
        tops.clear()
        gaps: dict[int, int] = {}
        got = time_stretch(cost, US, 1000.25, 1001, rows, start, 200, INF, None, gaps)
        assert tops == expected_tops
        assert (got, gaps) == one_at_a_time(cost, US, 1000.25, 1001, rows, start, 200, INF)


def test_a_table_past_its_top_is_refused_and_zero_terms_are_priced_directly(monkeypatch):
    """A table reaches TOP contexts at most: asked for TOP + 1 it raises. A one-row
    stretch whose per-context term is 0.0 never reads a table (0.0 and -0.0 would
    share one; 1e-8 s a context does): 200 dispatches of 6.5 ms on 1 us steps, timed
    as one dispatch at a time would be."""
    monkeypatch.setattr(context_prices, "_TABLES", {})
    try:
        priced(0.5, 0.25, 0.125, TOP + 1)
    except ValueError as e:
        assert str(e) == f"top({TOP + 1}) <= TOP({TOP}) is false"
    else:
        raise AssertionError("a table past TOP was priced")
    asked: list[float] = []

    def noted(base, kv, step_seconds, top):
        asked.append(kv)
        return priced(base, kv, step_seconds, top)

    monkeypatch.setattr(stretch_timing, "priced", noted)
    for kv in (0.0, 1e-8):
        cost = Series(0.0065, kv)
        gaps: dict[int, int] = {}
        got = time_stretch(cost, US, 1000.25, 1001, 1, 1000, 200, INF, None, gaps)
        assert (got, gaps) == one_at_a_time(cost, US, 1000.25, 1001, 1, 1000, 200, INF)
    assert asked == [1e-8]  # (one slice of all 200)
