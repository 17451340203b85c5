"""bench.method: CPU sets, ABBA order, request counters, audit counts, spread."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bench.method import (
    abba,
    audit_counts,
    audit_policy,
    counter_delta,
    parse_cpus,
    pin,
    request_counts,
    split_cpus,
    spread,
)


def test_parse_cpus() -> None:
    assert parse_cpus("1") == [1]
    assert parse_cpus("0-3") == [0, 1, 2, 3]
    assert parse_cpus("4,0-1") == [0, 1, 4]
    for bad in ("", "a", "3-1", "1,,2", "-1"):
        with pytest.raises(ValueError):
            parse_cpus(bad)


def test_split_cpus_leaves_the_rest_for_the_control_plane() -> None:
    assert split_cpus([1], [0, 1]) == [0]
    assert split_cpus([0, 1, 2, 3], list(range(16))) == list(range(4, 16))
    with pytest.raises(ValueError, match="no CPU is left"):
        split_cpus([0, 1], [0, 1])
    with pytest.raises(ValueError, match="not available"):
        split_cpus([7], [0, 1])


def test_pin_sets_every_thread() -> None:
    mine = sorted(os.sched_getaffinity(0))
    assert pin(os.getpid(), mine) >= 1
    assert sorted(os.sched_getaffinity(0)) == mine


def test_abba_alternates() -> None:
    assert abba(["A", "B"], 2) == [(0, "A"), (0, "B"), (1, "B"), (1, "A")]
    order = [s for _, s in abba(["A", "B", "C"], 2)]
    assert order == ["A", "B", "C", "C", "B", "A"]


def test_spread() -> None:
    d = spread([10.0, 30.0, 20.0])
    assert (d["n"], d["median"], d["min"], d["max"]) == (3, 20.0, 10.0, 30.0)
    assert d["range_pct"] == pytest.approx(100.0)
    assert spread([4.0, 2.0])["median"] == 3.0
    assert spread([]) == {"n": 0}


def _sample(verb: str, resource: str, sub: str, code: str, n: int) -> str:
    labels = (
        f'code="{code}",component="apiserver",dry_run="",group="",resource="{resource}",'
        f'scope="resource",subresource="{sub}",verb="{verb}",version="v1"'
    )
    return f"apiserver_request_total{{{labels}}} {n}"


METRICS = "\n".join(
    [
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests",
        _sample("POST", "pods", "binding", "201", 10),
        _sample("POST", "pods", "binding", "409", 2),
        _sample("LIST", "pods", "", "200", 3),
        'apiserver_request_total_other{verb="POST"} 99',
    ]
)


def test_request_counts_fold_codes() -> None:
    counts = request_counts(METRICS)
    assert counts == {"POST pods/binding": 12, "LIST pods": 3}
    before = request_counts(METRICS.replace("} 10", "} 4"))
    assert counter_delta(counts, before) == {"POST pods/binding": 6}


def _audit(stage: str, verb: str, resource: str, sub: str = "") -> str:
    ref = {"resource": resource, **({"subresource": sub} if sub else {})}
    return json.dumps(
        {
            "stage": stage,
            "verb": verb,
            "objectRef": ref,
            "userAgent": "kube-scheduler/v1.37.2 (linux/amd64)",
        }
    )


def test_audit_counts_once_per_request_from_an_offset(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    early = _audit("ResponseComplete", "create", "pods", "binding") + "\n"
    lines = [
        _audit("ResponseComplete", "create", "pods", "binding"),
        _audit("ResponseComplete", "create", "pods", "binding"),
        _audit("ResponseComplete", "patch", "pods", "status"),
        _audit("ResponseStarted", "watch", "nodes"),
        _audit("ResponseComplete", "watch", "nodes"),  # the same watch, closing
    ]
    log.write_text(early + "\n".join(lines) + "\n" + '{"stage": "Resp')  # a torn last line
    verbs, agents, offset = audit_counts(log, len(early))
    assert verbs == {"create pods/binding": 2, "patch pods/status": 1, "watch nodes": 1}
    assert agents == {"kube-scheduler/v1.37.2": 4}
    assert offset == log.stat().st_size - len('{"stage": "Resp')
    assert "system:kube-scheduler" in audit_policy() and "level: None" in audit_policy()


def test_binder_writes_what_kube_scheduler_writes() -> None:
    from bench.binder import binding, scheduled_event

    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "3"}}
    b = binding(pod, "n1")
    assert b["kind"] == "Binding" and b["target"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "n1",
    }
    ev = scheduled_event(pod, "n1", "bench-binder")
    assert (ev["reason"], ev["action"], ev["type"]) == ("Scheduled", "Binding", "Normal")
    assert ev["note"] == "Successfully assigned ns/p to n1"
    assert ev["regarding"]["uid"] == "u" and ev["reportingController"] == "bench-binder"


def _run(scheduler: str, avg: float, cpu_ms: float, pair: int = 0) -> Any:
    from bench.run import RunResult

    r = RunResult("W", scheduler, "unthrottled", 5000.0, 5000, 10, 0, 100, cpu_mode="pinned")
    r.pair = pair
    r.bound = r.scheduled_events = 100
    r.complete = True
    r.throughput = {"Average": avg, "Perc50": avg, "Perc90": avg, "Perc99": avg}
    r.window_pods_per_second = avg
    r.cpu_ms_per_pod = cpu_ms
    return r


def test_summary_gives_median_spread_and_fraction_of_the_ceiling() -> None:
    from bench.run import markdown, summarize

    runs = [
        _run("kube-scheduler", 40.0, 4.0, 0),
        _run("kscheduler", 60.0, 3.0, 0),
        _run("kscheduler", 80.0, 2.0, 1),
        _run("kube-scheduler", 50.0, 5.0, 1),
        _run("ceiling", 100.0, 1.0, 0),
    ]
    (row,) = summarize(runs)
    ks = row["schedulers"]["kscheduler"]
    assert ks["average"]["median"] == 70.0 and (ks["average"]["min"], ks["average"]["max"]) == (
        60.0,
        80.0,
    )
    assert ks["of_ceiling"]["average"] == 0.7
    assert row["schedulers"]["kube-scheduler"]["of_ceiling"]["average"] == 0.45
    assert row["ratios"]["kscheduler"]["average"] == 70.0 / 45.0
    assert row["ratios"]["kscheduler"]["cpu_ms_per_pod"] == 2.5 / 4.5
    table = markdown([row])
    assert "| 70 [60-80] |" in table and "| 70% |" in table
