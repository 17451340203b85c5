from __future__ import annotations

import functools

import pytest

from kscheduler.plugins.priority_sort import ENTRY, PrioritySort

from ..builders import pod, queued

PS = PrioritySort()


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # (priority, timestamp) of a and b -> less(a, b)
        ((10, 2.0), (5, 1.0), True),
        ((5, 1.0), (10, 2.0), False),
        ((5, 1.0), (5, 2.0), True),
        ((5, 2.0), (5, 1.0), False),
        ((5, 1.0), (5, 1.0), False),
        ((-1, 1.0), (0, 2.0), False),
    ],
)
def test_less(a: tuple[int, float], b: tuple[int, float], expected: bool) -> None:
    qa = queued(pod("a").priority(a[0]).build(), a[1])
    qb = queued(pod("b").priority(b[0]).build(), b[1])
    assert PS.less(qa, qb) is expected


def test_no_priority_counts_as_zero() -> None:
    qa = queued(pod("a").build(), 2.0)
    qb = queued(pod("b").priority(0).build(), 1.0)
    assert PS.less(qb, qa)


def test_sort_key_matches_less() -> None:
    pods = [
        queued(pod(f"p{i}").priority(prio).build(), ts)
        for i, (prio, ts) in enumerate([(0, 3.0), (100, 5.0), (0, 1.0), (100, 4.0), (-5, 0.0)])
    ]

    def cmp(x: object, y: object) -> int:
        assert isinstance(x, type(pods[0])) and isinstance(y, type(pods[0]))
        return -1 if PS.less(x, y) else (1 if PS.less(y, x) else 0)

    by_less = sorted(pods, key=functools.cmp_to_key(cmp))
    by_key = sorted(pods, key=PS.sort_key)
    assert [q.pod.name for q in by_key] == [q.pod.name for q in by_less]
    assert [q.pod.name for q in by_key] == ["p3", "p1", "p2", "p0", "p4"]


def test_entry() -> None:
    assert ENTRY.name == "PrioritySort"
    assert "queueSort" in ENTRY.extension_points
