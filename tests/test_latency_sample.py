"""LatencySample: a latency's values counted per distinct value, then an array past
DISTINCT distinct values; the same mean, percentiles and max as the sorted list."""
import random

from scheduler_sim.engine import latency_sample
from scheduler_sim.engine.latency_sample import LatencySample, counted_rank, counted_ranks
from scheduler_sim.engine.summary import nearest_rank


def listed(values, percentiles=(50, 90, 99)):
    ordered = sorted(values)
    if not ordered:
        return None, [None] * len(percentiles), None
    return (sum(ordered) / len(ordered), [nearest_rank(ordered, p) for p in percentiles],
            ordered[-1])


def test_counts_by_hand():
    sample = LatencySample()
    for value in (3, 1, 3, 7, 3):
        sample.add(value)
    assert sample.counts == {3: 3, 1: 1, 7: 1} and not sample.rest
    # sorted: 1 3 3 3 7; mean 17/5; p50 rank 3 -> 3, p90 rank 5 -> 7, p99 rank 5 -> 7
    assert sample.stats((50, 90, 99)) == (3.4, [3, 7, 7], 7)
    assert len(sample) == 5


def test_empty():
    assert LatencySample().stats((50, 90)) == (None, [None, None], None)


def test_past_distinct_values_go_to_the_array(monkeypatch):
    monkeypatch.setattr(latency_sample, "DISTINCT", 2)
    sample = LatencySample()
    for value in (5, 2, 9, 5, 2, 9, 1):
        sample.add(value)
    assert sample.counts == {5: 2, 2: 2} and list(sample.rest) == [9, 9, 1]
    # sorted: 1 2 2 5 5 9 9; mean 33/7; p50 rank 4 -> 5; p90 rank 7 -> 9
    assert sample.stats((50, 90)) == (33 / 7, [5, 9], 9)


def test_integers_past_64_bits(monkeypatch):
    monkeypatch.setattr(latency_sample, "DISTINCT", 1)
    sample = LatencySample()
    for value in (1, 2 ** 70, 3):
        sample.add(value)
    assert sample.rest == [2 ** 70, 3]
    assert sample.stats((50,)) == ((1 + 2 ** 70 + 3) / 3, [3], 2 ** 70)


def test_float_sum_is_the_sorted_lists(monkeypatch):
    # Float sums depend on their order: the counted sum must be sum(sorted(values)).
    rng = random.Random(7)
    values = [rng.choice([0.1, 0.7, 1 / 3, 2.5e-9, 1e6 / 7]) for _ in range(1000)]
    for cap in (100, 3):
        monkeypatch.setattr(latency_sample, "DISTINCT", cap)
        sample = LatencySample(floats=True)
        for value in values:
            sample.add(value)
        assert sample.stats((50, 90, 99)) == listed(values)


def test_update_pools_two_samples(monkeypatch):
    monkeypatch.setattr(latency_sample, "DISTINCT", 3)
    rng = random.Random(3)
    first, second = LatencySample(), LatencySample()
    a = [rng.randrange(10) for _ in range(50)]
    b = [rng.randrange(20) for _ in range(70)]
    for value in a:
        first.add(value)
    for value in b:
        second.add(value)
    first.update(second)
    assert len(first) == 120 and first.stats((50, 90, 99)) == listed(a + b)


def test_counted_rank():
    pairs = [(1, 2), (4, 1), (6, 3)]  # 1 1 4 6 6 6
    assert [counted_rank(pairs, 6, p) for p in (1, 50, 51, 100)] == [1, 4, 6, 6]
    assert counted_rank([], 0, 50) is None


def test_counted_ranks_by_hand():
    """Every percentile at once, by bisection over the running counts: 1 1 4 6 6 6
    (running 2 3 6): ranks 1, 3, 4 and 6 are 1, 4, 6 and 6; a value counted zero
    times is never a rank's (0 0 2 2 -> 5 passed over), and nothing has none."""
    assert counted_ranks((1, 4, 6), (2, 1, 3), (1, 50, 51, 100)) == [1, 4, 6, 6]
    assert counted_ranks((5, 8), (0, 2), (1, 50, 100)) == [8, 8, 8]
    assert counted_ranks((), (), (50, 90)) == [None, None]
    assert counted_ranks((3,), (0,), (50,)) == [None]


def test_counted_ranks_agree_with_the_walk():
    rng = random.Random(26)
    for _ in range(200):
        values = sorted(rng.sample(range(1000), rng.randint(1, 40)))
        counts = [rng.choice((0, 1, 1, 2, 5, 30)) for _ in values]
        pairs = list(zip(values, counts))
        total = sum(counts)
        percentiles = (1, 25, 50, 90, 99, 99.9, 100)
        assert counted_ranks(tuple(values), tuple(counts), percentiles) == [
            counted_rank(pairs, total, p) for p in percentiles]


def test_add_all_by_hand():
    sample = LatencySample()
    sample.add(3)
    sample.add_all([1, 3, 3, 7])
    assert sample.counts == {3: 3, 1: 1, 7: 1} and not sample.rest
    assert list(sample.counts) == [3, 1, 7]  # first seen first, as `add` keeps them


def test_add_all_past_the_bound_is_add_one_by_one(monkeypatch):
    """DISTINCT 3: a list that would pass the bound goes value by value, so the dict
    holds the first three distinct values and the array the rest, in order."""
    monkeypatch.setattr(latency_sample, "DISTINCT", 3)
    values = [5, 2, 5, 9, 1, 2, 8, 1]
    one_by_one, at_once = LatencySample(), LatencySample()
    for value in values:
        one_by_one.add(value)
    at_once.add_all(values[:2])  # (room for both: counted in C)
    at_once.add_all(values[2:])  # (5 + 2 values > 3: one by one)
    assert at_once.counts == one_by_one.counts == {5: 2, 2: 2, 9: 1}
    assert list(at_once.rest) == list(one_by_one.rest) == [1, 8, 1]


def test_add_all_once_full_counts_keys_and_appends_the_rest(monkeypatch):
    """DISTINCT 2, the dict full before the list: 4 is a key (counted), 6 and 7 are
    not (to the array, in the list's order)."""
    monkeypatch.setattr(latency_sample, "DISTINCT", 2)
    sample = LatencySample()
    sample.add_all([4, 5])
    sample.add_all([6, 4, 7, 6, 5])
    assert sample.counts == {4: 2, 5: 2} and list(sample.counts) == [4, 5]
    assert list(sample.rest) == [6, 7, 6]


def test_add_all_past_64_bits_is_add_one_by_one(monkeypatch):
    """An integer past 64 bits in the values that go to the array: the array becomes a
    list holding every value past the dict, in order, as `add` one by one makes it."""
    monkeypatch.setattr(latency_sample, "DISTINCT", 1)
    values = [1, 2, 1, 2 ** 70, 3, 1]
    one_by_one, at_once = LatencySample(), LatencySample()
    for value in values:
        one_by_one.add(value)
    at_once.add_all(values)
    assert at_once.counts == one_by_one.counts == {1: 3}
    assert type(at_once.rest) is list and at_once.rest == one_by_one.rest == [2, 2 ** 70, 3]


def test_add_all_random_lists_as_add(monkeypatch):
    """Lists of every length across the bound, integers and floats: the same dict (keys
    in the same order), the same array, as `add` of each value."""
    monkeypatch.setattr(latency_sample, "DISTINCT", 5)
    rng = random.Random(11)
    for floats in (False, True):
        one_by_one, at_once = LatencySample(floats), LatencySample(floats)
        for _ in range(60):
            values = [rng.randrange(12) / 3 if floats else rng.randrange(12)
                      for _ in range(rng.randrange(6))]
            for value in values:
                one_by_one.add(value)
            at_once.add_all(values)
            assert list(at_once.counts.items()) == list(one_by_one.counts.items())
            assert list(at_once.rest) == list(one_by_one.rest)
            assert type(at_once.rest) is type(one_by_one.rest)
