"""Utilization shapes: the ``shape`` argument of NodeResourcesFit's
RequestedToCapacityRatio strategy and of VolumeBinding's capacity score, as
(utilization %, score 0..10) points, and the broken linear function through them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kscheduler.framework.args import ConfigError, Fields

MAX_CUSTOM_PRIORITY_SCORE = 10
MAX_UTILIZATION = 100


@dataclass(frozen=True, slots=True)
class UtilizationShapePoint:
    #: Utilization in percent, 0..100.
    utilization: int
    #: Score at that utilization, 0..10.
    score: int


def parse_shape(f: Fields) -> tuple[UtilizationShapePoint, ...]:
    items = f.objects("shape")
    path = f.child("shape")
    if not items:
        raise ConfigError(path, "at least one point must be specified")
    points = []
    for p in items:
        u = p.integer("utilization", 0, minimum=-(2**31), maximum=2**31 - 1)
        s = p.integer("score", 0, minimum=-(2**31), maximum=2**31 - 1)
        p.done()
        points.append(UtilizationShapePoint(u, s))
    for i in range(1, len(points)):
        if points[i - 1].utilization >= points[i].utilization:
            raise ConfigError(
                f"{path}[{i}].utilization", "values must be sorted in increasing order"
            )
    for i, pt in enumerate(points):
        if not 0 <= pt.utilization <= MAX_UTILIZATION:
            raise ConfigError(
                f"{path}[{i}].utilization", f"not in valid range [0, {MAX_UTILIZATION}]"
            )
        if not 0 <= pt.score <= MAX_CUSTOM_PRIORITY_SCORE:
            raise ConfigError(
                f"{path}[{i}].score", f"not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]"
            )
    return tuple(points)


def _go_div(a: int, b: int) -> int:
    """Integer division truncating toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def broken_linear(points: Sequence[tuple[int, int]]) -> Callable[[int], int]:
    """Piecewise linear through (utilization, score) points, flat outside them."""

    def f(p: int) -> int:
        for i, (u, s) in enumerate(points):
            if p <= u:
                if i == 0:
                    return s
                u0, s0 = points[i - 1]
                return s0 + _go_div((s - s0) * (p - u0), u - u0)
        return points[-1][1]

    return f
