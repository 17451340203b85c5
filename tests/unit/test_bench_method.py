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


def test_summary_leaves_out_perturbed_runs_but_keeps_them() -> None:
    from bench.run import summarize

    spoiled = _run("kscheduler", 10.0, 9.0, 0)
    spoiled.perturbed = True
    runs = [_run("kube-scheduler", 40.0, 4.0, 0), spoiled, _run("kscheduler", 60.0, 3.0, 0)]
    (row,) = summarize(runs)
    ks = row["schedulers"]["kscheduler"]
    assert ks["n"] == 1 and ks["average"]["median"] == 60.0
    assert len(runs) == 3


def test_busy_seconds_leaves_out_idle_and_iowait() -> None:
    from bench.method import _TICK, busy_seconds

    stat = "cpu  100 5 50 9000 40 3 2 1 0 0\ncpu0 50 2 25 4500 20 1 1 0 0 0\n"
    assert busy_seconds(stat) == pytest.approx((100 + 5 + 50 + 3 + 2 + 1) / _TICK)


def test_tree_seconds_sums_a_process_and_everything_under_it() -> None:
    from bench.method import tree_seconds

    table = {
        10: (1, 1.0),  # the driver
        11: (10, 2.0),  # the apiserver it started
        12: (11, 0.5),  # a child of that
        20: (1, 7.0),  # something else on the machine
        21: (20, 3.0),
    }
    assert tree_seconds(10, table) == 3.5
    assert tree_seconds(20, table) == 10.0
    assert tree_seconds(99, table) == 0.0


def test_foreign_cpu_sees_a_process_outside_the_tree() -> None:
    import subprocess
    import sys
    import time

    from bench.method import ForeignCpu, tree_seconds

    spin = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.6: pass\n"
    # the orphan spins longer: it must still run at a reading after its 0.5th second
    # (an exited process's CPU is seen no more), readings being 0.5 s apart
    orphan = spin.replace("<0.6", "<2.0")
    # a child of this process is inside the tree (reaped, in this process's cutime)
    before = tree_seconds(os.getpid())
    subprocess.run([sys.executable, "-c", spin], check=True)
    assert tree_seconds(os.getpid()) - before >= 0.5
    # a process whose parent is outside the tree (a fresh session whose parent exits
    # at once, so init adopts it) is foreign
    outside = ForeignCpu()
    before = tree_seconds(os.getpid())
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import subprocess,sys;subprocess.Popen([sys.executable,'-c',"
            + repr(orphan)
            + "],start_new_session=True)",
        ],
        check=True,
    )
    deadline = time.monotonic() + 20
    while outside.seconds() < 0.5 and time.monotonic() < deadline:
        time.sleep(0.5)  # each reading walks /proc: this process's own CPU stays small
    assert outside.seconds() >= 0.5
    # this process's CPU meanwhile (its readings, the short-lived parent) but not the
    # orphan's
    assert tree_seconds(os.getpid()) - before < 0.45


def test_main_pairs_apply_to_the_main_workloads_unthrottled_and_pinned() -> None:
    from bench.run import PINNED, SHARED, pairs_for

    both = [PINNED, SHARED]
    assert pairs_for("SchedulingBasic", "unthrottled", PINNED, both, 1, 3) == 3
    assert pairs_for("SchedulingBasic", "unthrottled", SHARED, both, 1, 3) == 1
    assert pairs_for("SchedulingBasic", "default", PINNED, both, 1, 3) == 1
    assert pairs_for("Preemption", "unthrottled", PINNED, both, 1, 3) == 1
    assert pairs_for("TopologySpreading", "unthrottled", SHARED, [SHARED], 1, 3) == 3


def test_resume_keeps_the_runs_and_refuses_another_measurement(tmp_path: Path) -> None:
    from dataclasses import asdict

    from bench.run import resume

    fresh = {
        "size": "5000",
        "revision": "abc",
        "kubernetes": "v1.37.2",
        "scheduler_cpus": [1],
        "scheduler_config": {"enableProfiling": False},
        "machine": {"cpus": 2},
    }
    done = _run("kscheduler", 60.0, 3.0, 0)
    doc = {"meta": dict(fresh, finished="x"), "runs": [dict(asdict(done), dropped_field=1)]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    meta, runs = resume(path, fresh)
    assert [r.scheduler for r in runs] == ["kscheduler"] and runs[0].cpu_ms_per_pod == 3.0
    assert "finished" not in meta and len(meta["resumed"]) == 1
    with pytest.raises(ValueError, match="revision"):
        resume(path, dict(fresh, revision="def"))
    with pytest.raises(ValueError, match="ceiling_binder"):
        resume(path, dict(fresh, ceiling_binder="bench.binder (Python, aiohttp, JSON)"))
    with pytest.raises(ValueError, match="uncommitted"):
        path.write_text(json.dumps({"meta": dict(fresh, revision="abc+dirty"), "runs": []}))
        resume(path, dict(fresh, revision="abc+dirty"))
    with pytest.raises(ValueError, match="cannot read"):
        resume(tmp_path / "missing.json", fresh)


def test_stop_by_is_the_next_such_time() -> None:
    import time

    from bench.run import parse_stop_by

    at = parse_stop_by("00:00")
    assert 0 < at - time.time() <= 86400
    assert time.localtime(at).tm_hour == 0
    for bad in ("24:00", "7", "ab:cd"):
        with pytest.raises(SystemExit):
            parse_stop_by(bad)


async def test_binder_offers_a_refused_pod_again() -> None:
    import asyncio
    import itertools
    from typing import cast

    from bench.binder import Binder
    from kscheduler.controlplane.rest import ApiError, RestClient

    pods = {
        name: {"metadata": {"name": name, "namespace": "ns", "uid": name}, "spec": {}}
        for name in ("a", "b")
    }
    refused = {"b"}
    posts: list[str] = []

    class Api:
        async def post(self, path: str, body: dict[str, Any]) -> None:
            posts.append(path)
            name = body["metadata"]["name"]
            if path.endswith("/binding"):
                if name in refused:
                    refused.discard(name)
                    raise ApiError("POST", path, 409, {"reason": "Conflict"})
                pods[name]["spec"]["nodeName"] = body["target"]["name"]

        async def get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
            pending = [p for p in pods.values() if not p["spec"].get("nodeName")]
            return {"items": pending, "metadata": {"resourceVersion": "1"}}

    binder = Binder(cast(RestClient, Api()), "bench-binder", "ns", 1)
    binder.nodes = itertools.cycle(["n1"])
    await binder.list_pending()
    worker = asyncio.create_task(binder.worker())
    try:
        for _ in range(100):
            await asyncio.sleep(0)
        assert binder.bound == 1 and pods["a"]["spec"].get("nodeName")
        await binder.list_pending()  # what resync does once the watch goes quiet
        for _ in range(100):
            await asyncio.sleep(0)
    finally:
        worker.cancel()
    assert binder.bound == 2 and all(p["spec"].get("nodeName") for p in pods.values())


def test_each_run_names_its_own_pods() -> None:
    from bench.workloads import workloads

    wl = workloads("quick")[0]
    first = [p["metadata"]["name"] for p in wl.measured_pods("s", prefix="r1")]
    second = [p["metadata"]["name"] for p in wl.measured_pods("s", prefix="r2")]
    assert len(first) == wl.measure.count and not set(first) & set(second)
    assert wl.measured_pods("s")[0]["metadata"]["name"] == "pod-0"


def test_the_ceiling_runs_bench_binder_unless_told_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys
    from types import SimpleNamespace
    from typing import cast

    import bench.run as run
    from kscheduler.controlplane.binaries import BinariesNotFoundError
    from kscheduler.controlplane.harness import ControlPlane

    cp = cast(
        ControlPlane,
        SimpleNamespace(url="https://127.0.0.1:6443", scheduler_token="t", ca_file="/ca.crt"),
    )
    fake = tmp_path / "bench-binder"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setattr(run, "find_kube_scheduler", lambda: tmp_path / "kube-scheduler")
    go = run.BinderProcess(cp, "ns", workdir=tmp_path / "go", cpus=[1])
    assert go.proc.argv[:4] == ["taskset", "-c", "1", str(fake)]
    assert go.proc.env is not None and go.proc.env["GOMAXPROCS"] == "1"
    assert "--scheduler-name" in go.proc.argv and "bench-binder" in go.proc.argv
    python = run.BinderProcess(cp, "ns", workdir=tmp_path / "py", cpus=None, binder="python")
    assert python.proc.argv[:3] == [sys.executable, "-m", "bench.binder"]
    with pytest.raises(ValueError, match="binder"):
        run.BinderProcess(cp, "ns", workdir=tmp_path / "x", cpus=None, binder="rust")
    # not built: the error says how to build it
    fake.unlink()
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BinariesNotFoundError, match="make control-plane"):
        run.find_bench_binder()
