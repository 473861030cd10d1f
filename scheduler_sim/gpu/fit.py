"""Fitting coefficients to measurements: a bounded Nelder-Mead, standard library only.

`minimize(loss, start, bounds)` searches the box `bounds` for the point
where `loss` is least, by the Nelder-Mead simplex (reflect, expand,
contract, shrink) on coordinates scaled to the box, each a fraction of its
range, so that a microsecond floor and a fraction of peak FLOP/s move at
the same pace. Points outside the box are clipped onto it. The search is
deterministic: the same loss, start and bounds give the same point.

`log_error(predicted, measured)` is the loss of one point: the square of
log(predicted / measured), which weighs 10% too slow and 10% too fast
alike and keeps a 20 us kernel and a 20 ms one on one scale.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

__all__ = ["minimize", "log_error", "Fit"]


class Fit:
    """The result of `minimize`: the point, its loss, and the evaluations it took."""

    def __init__(self, point: list[float], loss: float, evaluations: int) -> None:
        self.point = point
        self.loss = loss
        self.evaluations = evaluations


def log_error(predicted: float, measured: float) -> float:
    """(log(predicted / measured))^2; infinite for a non-positive prediction."""
    if predicted <= 0 or measured <= 0:
        return math.inf
    e = math.log(predicted / measured)
    return e * e


def minimize(loss: Callable[[list[float]], float], start: Sequence[float],
             bounds: Sequence[tuple[float, float]], *, iterations: int = 4000,
             restarts: int = 2, tolerance: float = 1e-12) -> Fit:
    """The point of the box `bounds` (one (low, high) per coordinate) where `loss` is
    least, found by Nelder-Mead from `start`, restarted `restarts` times from the best
    point so far (a collapsed simplex starts afresh)."""
    n = len(start)
    if n != len(bounds) or n == 0:
        raise ValueError(f"start has {n} coordinates and bounds {len(bounds)}")
    lows = [float(low) for low, _ in bounds]
    spans = [float(high) - float(low) for low, high in bounds]
    for span in spans:
        if not span > 0:
            raise ValueError(f"every bound must have low < high, got {list(bounds)}")

    def to_box(u: list[float]) -> list[float]:
        return [lows[i] + spans[i] * min(1.0, max(0.0, u[i])) for i in range(n)]

    evaluations = 0

    def f(u: list[float]) -> float:
        nonlocal evaluations
        evaluations += 1
        value = loss(to_box(u))
        return value if value == value else math.inf  # NaN counts as the worst

    best = [min(1.0, max(0.0, (float(start[i]) - lows[i]) / spans[i])) for i in range(n)]
    best_value = f(best)
    for _ in range(restarts + 1):
        best, best_value = _simplex(f, best, best_value, iterations, tolerance)
    return Fit(to_box(best), best_value, evaluations)


def _simplex(f: Callable[[list[float]], float], x0: list[float], f0: float,
             iterations: int, tolerance: float) -> tuple[list[float], float]:
    """One Nelder-Mead run in the unit box from x0 (steps of 0.1 along each axis,
    away from the nearer face)."""
    n = len(x0)
    points = [list(x0)]
    for i in range(n):
        x = list(x0)
        x[i] += 0.1 if x[i] <= 0.5 else -0.1
        points.append(x)
    values = [f0] + [f(p) for p in points[1:]]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=lambda i: values[i])
        points = [points[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) <= tolerance * (abs(values[0]) + tolerance):
            break
        centre = [sum(p[j] for p in points[:-1]) / n for j in range(n)]
        worst = points[-1]
        reflected = [2 * centre[j] - worst[j] for j in range(n)]
        fr = f(reflected)
        if fr < values[0]:
            expanded = [3 * centre[j] - 2 * worst[j] for j in range(n)]
            fe = f(expanded)
            points[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            points[-1], values[-1] = reflected, fr
        else:
            contracted = [centre[j] + 0.5 * (worst[j] - centre[j]) for j in range(n)]
            fc = f(contracted)
            if fc < values[-1]:
                points[-1], values[-1] = contracted, fc
            else:
                for i in range(1, n + 1):
                    points[i] = [points[0][j] + 0.5 * (points[i][j] - points[0][j])
                                 for j in range(n)]
                    values[i] = f(points[i])
    i = min(range(n + 1), key=lambda i: values[i])
    return [min(1.0, max(0.0, v)) for v in points[i]], values[i]
