"""bench.targets: issue 17's targets judged from a results summary."""

from __future__ import annotations

from typing import Any

import pytest

from bench.targets import render, target_rows


def _entry(
    workload: str,
    cpu_mode: str,
    ks: dict[str, Any],
    kube: dict[str, Any],
    throttle: str = "unthrottled",
) -> dict[str, Any]:
    return {
        "workload": workload,
        "throttle": throttle,
        "cpu_mode": cpu_mode,
        "schedulers": {"kscheduler": ks, "kube-scheduler": kube},
    }


def _sched(cpu: float, rate: float, of_ceiling: float | None = None) -> dict[str, Any]:
    s: dict[str, Any] = {
        "n": 3,
        "complete": 3,
        "cpu_ms_per_pod": {"median": cpu, "min": cpu, "max": cpu},
        "average": {"median": rate, "min": rate, "max": rate},
    }
    if of_ceiling is not None:
        s["of_ceiling"] = {"average": of_ceiling}
    return s


def test_each_target_is_judged_against_its_bound() -> None:
    rows = target_rows(
        [
            _entry("SchedulingBasic", "pinned", _sched(0.9, 150, 0.96), _sched(2.0, 100)),
            _entry("TopologySpreading", "pinned", _sched(1.1, 140, 0.9488), _sched(2.0, 100)),
            _entry("Preemption", "pinned", _sched(3.0, 10), _sched(2.0, 10)),
            _entry("SchedulingBasic", "shared", _sched(1.2, 100), _sched(2.0, 100)),
            _entry("SchedulingBasic", "pinned", _sched(0.9, 50, 0.5), _sched(2.0, 50), "default"),
        ]
    )
    basic, spread, preemption, shared, client_limited = rows
    assert basic["cpu_target"] == "met" and basic["cpu_ratio"] == pytest.approx(0.45)
    assert basic["throughput_target"] == "met" and basic["ceiling_target"] == "met"
    assert basic["basic_cpu_target"] == "met"
    # 0.55x CPU, 1.4x pods/s and 94.88% of the ceiling all miss their bounds
    assert spread["cpu_target"] == "not met"
    assert spread["throughput_target"] == "not met"
    assert spread["ceiling_target"] == "not met"
    assert spread["basic_cpu_target"] == ""
    # the throughput targets apply to four workloads, pinned
    assert preemption["cpu_target"] == "not met" and preemption["throughput_target"] == ""
    assert shared["throughput_target"] == "" and shared["basic_cpu_target"] == "not met"
    # and unthrottled: at 50 qps both bind at their client's limit
    assert client_limited["throughput_target"] == "" and client_limited["ceiling_target"] == ""
    assert client_limited["cpu_target"] == "met" and client_limited["basic_cpu_target"] == "met"
    assert "94.9% not met" in render(rows, markdown=True)


def test_a_missing_scheduler_or_ceiling_is_not_judged() -> None:
    only_kube = {
        "workload": "SchedulingBasic",
        "throttle": "default",
        "cpu_mode": "pinned",
        "schedulers": {"kube-scheduler": _sched(2.0, 50)},
    }
    assert target_rows([only_kube]) == []
    (row,) = target_rows(
        [_entry("SchedulingNodeAffinity", "pinned", _sched(1.0, 80), _sched(2.0, 50))]
    )
    assert row["throughput_target"] == "met" and row["ceiling_target"] == "-"
