"""kscheduler.metrics: exposed names, types, labels and buckets match kube-scheduler's."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import generate_latest

from kscheduler.framework.status import Code, Status
from kscheduler.framework.types import PodInfo, QueuedPodInfo
from kscheduler.metrics import Metrics, exponential_buckets, go_float
from kscheduler.queue import SchedulingQueue
from tests.unit.builders import pod

#: name -> (type, label names), as pkg/scheduler/metrics/metrics.go and client-go declare them
EXPECTED = {
    "scheduler_schedule_attempts_total": ("counter", {"result", "profile"}),
    "scheduler_scheduling_attempt_duration_seconds": ("histogram", {"result", "profile"}),
    "scheduler_pending_pods": ("gauge", {"queue"}),
    "scheduler_pod_scheduling_sli_duration_seconds": ("histogram", {"attempts"}),
    "scheduler_pod_scheduling_attempts": ("histogram", set()),
    "scheduler_framework_extension_point_duration_seconds": (
        "histogram",
        {"extension_point", "status", "profile"},
    ),
    "scheduler_plugin_execution_duration_seconds": (
        "histogram",
        {"plugin", "extension_point", "status"},
    ),
    "scheduler_queue_incoming_pods_total": ("counter", {"queue", "event"}),
    "scheduler_preemption_attempts_total": ("counter", set()),
    "scheduler_preemption_victims": ("histogram", set()),
    "scheduler_unschedulable_pods": ("gauge", {"plugin", "profile"}),
    "scheduler_goroutines": ("gauge", {"operation"}),
    "leader_election_master_status": ("gauge", {"name"}),
}

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(m: Metrics) -> str:
    return generate_latest(m.registry).decode()


def types(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        mt = SAMPLE.match(line)
        assert mt, line
        labels = dict(LABEL.findall(mt["labels"] or ""))
        out.append((mt["name"], labels, float(mt["value"])))
    return out


def value(text: str, name: str, /, **labels: str) -> float | None:
    for n, lab, v in samples(text):
        if n == name and lab == labels:
            return v
    return None


def bucket_bounds(text: str, name: str, /, **labels: str) -> list[str]:
    return [
        lab["le"]
        for n, lab, _ in samples(text)
        if n == f"{name}_bucket" and {k: v for k, v in lab.items() if k != "le"} == labels
    ]


def fed() -> Metrics:
    """Metrics with one observation in every event-driven series."""
    m = Metrics(process_metrics=False)
    obs = m.scheduler_observer()
    obs.attempt("scheduled", "p1", 0.003)
    obs.attempt("unschedulable", "p1", 0.5)
    qp = QueuedPodInfo(pod("a").build(), 0.0)
    qp.attempts = 3
    obs.scheduled(qp, 1.5)
    obs.preemption(2)
    obs.preemption(0)
    m.queue_observer().incoming("active", "PodAdd")
    m.queue_observer().incoming("gated", "PodAdd")
    fw = m.framework_observer("p1")
    fw.extension_point("Filter", None, 0.0002)
    fw.extension_point("Bind", Status(Code.ERROR, ["boom"]), 0.01)
    return m


# ---- formatting ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("v", "text"),
    [
        (1.0, "1"),
        (64.0, "64"),
        (0.001, "0.001"),
        (0.0001, "0.0001"),
        (1e-05, "1e-05"),
        (1.5e-05, "1.5e-05"),
        (16.384, "16.384"),
        (5242.88, "5242.88"),
        (123456.0, "123456"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (float("inf"), "+Inf"),
    ],
)
def test_go_float(v: float, text: str) -> None:
    assert go_float(v) == text


def test_exponential_buckets_multiply_like_go() -> None:
    assert exponential_buckets(0.001, 2, 15)[-1] == 16.384
    b = exponential_buckets(0.00001, 1.5, 20)
    assert len(b) == 20 and b[1] == 0.00001 * 1.5 and b[2] == (0.00001 * 1.5) * 1.5


# ---- names, types, labels --------------------------------------------------------------------
def test_every_family_is_declared_with_upstream_type() -> None:
    text = scrape(Metrics(process_metrics=False))
    declared = types(text)
    for name, (kind, _) in EXPECTED.items():
        assert declared.get(name) == kind, name


def test_label_names_match_upstream() -> None:
    m = fed()
    m.attach(fake_app(leader_elect=True))
    text = scrape(m)
    seen: dict[str, set[str]] = {}
    for name, labels, _ in samples(text):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if base not in EXPECTED:
            base = name
        seen.setdefault(base, set()).update(set(labels) - {"le"})
    for name, (_, labelnames) in EXPECTED.items():
        if name in (
            "scheduler_plugin_execution_duration_seconds",  # declared, not observed
            "scheduler_unschedulable_pods",  # no pending pods here: see the attach test
        ):
            continue
        assert seen.get(name) == labelnames, name


def test_no_created_series_and_counters_end_in_total() -> None:
    text = scrape(fed())
    assert "_created" not in text
    assert "scheduler_schedule_attempts_total_total" not in text
    assert value(text, "scheduler_schedule_attempts_total", profile="p1", result="scheduled") == 1


def test_process_metrics_are_exported_by_default() -> None:
    text = scrape(Metrics())
    assert "# TYPE process_cpu_seconds_total counter" in text
    assert "# TYPE scheduler_pending_pods gauge" in text


# ---- buckets ---------------------------------------------------------------------------------
def _bounds(start: float, factor: float, count: int) -> list[str]:
    return [go_float(b) for b in exponential_buckets(start, factor, count)] + ["+Inf"]


def test_bucket_bounds_match_upstream() -> None:
    text = scrape(fed())
    attempt = bucket_bounds(
        text, "scheduler_scheduling_attempt_duration_seconds", profile="p1", result="scheduled"
    )
    assert attempt == [
        "0.001", "0.002", "0.004", "0.008", "0.016", "0.032", "0.064", "0.128", "0.256",
        "0.512", "1.024", "2.048", "4.096", "8.192", "16.384", "+Inf",
    ]  # fmt: skip
    assert bucket_bounds(text, "scheduler_pod_scheduling_attempts") == [
        "1", "2", "4", "8", "16", "+Inf",
    ]  # fmt: skip
    assert bucket_bounds(text, "scheduler_preemption_victims") == [
        "1", "2", "4", "8", "16", "32", "64", "+Inf",
    ]  # fmt: skip
    sli = bucket_bounds(text, "scheduler_pod_scheduling_sli_duration_seconds", attempts="3")
    assert sli == _bounds(0.01, 2, 20) and sli[0] == "0.01" and sli[-2] == "5242.88"
    ext = bucket_bounds(
        text,
        "scheduler_framework_extension_point_duration_seconds",
        extension_point="Filter",
        profile="p1",
        status="Success",
    )
    assert ext == _bounds(0.0001, 2, 12) and ext[0] == "0.0001" and ext[-2] == "0.2048"
    m = Metrics(process_metrics=False)
    m.plugin_execution_duration.observe(0.0001, "P", "Filter", "Success")
    pbounds = bucket_bounds(
        scrape(m),
        "scheduler_plugin_execution_duration_seconds",
        plugin="P",
        extension_point="Filter",
        status="Success",
    )
    assert len(pbounds) == 21 and pbounds[0] == "1e-05" and pbounds[1] == "1.5000000000000002e-05"


def test_histogram_counts_are_cumulative_and_le_inclusive() -> None:
    m = Metrics(process_metrics=False)
    obs = m.scheduler_observer()
    for seconds in (0.001, 0.0015, 0.002, 100.0):
        obs.attempt("scheduled", "p", seconds)
    text = scrape(m)
    name = "scheduler_scheduling_attempt_duration_seconds"
    labels = {"profile": "p", "result": "scheduled"}
    assert value(text, f"{name}_bucket", le="0.001", **labels) == 1
    assert value(text, f"{name}_bucket", le="0.002", **labels) == 3
    assert value(text, f"{name}_bucket", le="16.384", **labels) == 3
    assert value(text, f"{name}_bucket", le="+Inf", **labels) == 4
    assert value(text, f"{name}_count", **labels) == 4
    assert value(text, f"{name}_sum", **labels) == pytest.approx(100.0045)


# ---- observers -------------------------------------------------------------------------------
def test_observers_feed_their_series() -> None:
    text = scrape(fed())
    assert (
        value(text, "scheduler_schedule_attempts_total", profile="p1", result="unschedulable") == 1
    )
    assert value(text, "scheduler_pod_scheduling_sli_duration_seconds_count", attempts="3") == 1
    assert value(text, "scheduler_pod_scheduling_attempts_bucket", le="4") == 1
    assert value(text, "scheduler_pod_scheduling_attempts_bucket", le="2") == 0
    assert value(text, "scheduler_preemption_attempts_total") == 2
    assert value(text, "scheduler_preemption_victims_count") == 1
    assert value(text, "scheduler_queue_incoming_pods_total", event="PodAdd", queue="active") == 1
    # upstream keeps gated pods in the unschedulable pool
    assert (
        value(text, "scheduler_queue_incoming_pods_total", event="PodAdd", queue="unschedulable")
        == 1
    )
    assert (
        value(
            text,
            "scheduler_framework_extension_point_duration_seconds_count",
            extension_point="Bind",
            profile="p1",
            status="Error",
        )
        == 1
    )


# ---- state read from the app -----------------------------------------------------------------
def fake_app(*, leader_elect: bool, queue: SchedulingQueue | None = None) -> Any:
    def pre_enqueue(p: PodInfo) -> Status | None:
        if p.scheduling_gates:
            return Status.unresolvable("gated").with_plugin("SchedulingGates")
        return None

    q = queue or SchedulingQueue(
        sort_key=lambda qp: qp.timestamp, pre_enqueue=pre_enqueue, events={}
    )
    return SimpleNamespace(
        queue=q,
        frameworks={"p1": SimpleNamespace(observer=None), "p2": SimpleNamespace(observer=None)},
        scheduler=SimpleNamespace(binds=[object(), object()]),
        cfg=SimpleNamespace(leader_election=SimpleNamespace(resource_name="kscheduler")),
        leading=False,
        _leader_elect=lambda: leader_elect,
    )


async def test_attach_exports_queue_binds_and_leadership() -> None:
    m = Metrics(process_metrics=False)
    app = fake_app(leader_elect=True)
    m.attach(app)
    assert app.frameworks["p1"].observer is not None
    assert app.frameworks["p2"].observer is not None
    q: SchedulingQueue = app.queue
    q.add(pod("a").build())
    q.add(pod("b").build())
    q.add(pod("gated").gates("example.com/wait").build())
    qp = await q.pop()
    assert qp is not None
    qp.unschedulable_plugins = {"NodeResourcesFit", "TaintToleration"}
    q.add_unschedulable_if_not_present(qp)

    text = scrape(m)
    pending = {lab["queue"]: v for n, lab, v in samples(text) if n == "scheduler_pending_pods"}
    assert set(pending) == {"active", "backoff", "unschedulable", "gated"}
    assert pending["active"] == 1 and pending["gated"] == 1
    assert pending["unschedulable"] + pending["backoff"] == 1
    sched = qp.pod.scheduler_name
    for plugin in ("NodeResourcesFit", "TaintToleration", "SchedulingGates"):
        assert value(text, "scheduler_unschedulable_pods", plugin=plugin, profile=sched) == 1
    assert value(text, "scheduler_goroutines", operation="binding") == 2
    assert value(text, "leader_election_master_status", name="kscheduler") == 0
    assert value(text, "scheduler_queue_incoming_pods_total", event="PodAdd", queue="active") == 2

    # popped again: the pod no longer counts for the plugins that rejected it
    q.activate([qp.pod.uid])
    again = await q.pop()
    while again is not None and again.pod.uid != qp.pod.uid:
        again = await q.pop()
    app.leading = True
    text = scrape(m)
    assert (
        value(text, "scheduler_unschedulable_pods", plugin="NodeResourcesFit", profile=sched)
        is None
    )
    assert value(text, "leader_election_master_status", name="kscheduler") == 1


def test_no_leader_status_without_leader_election() -> None:
    m = Metrics(process_metrics=False)
    m.attach(fake_app(leader_elect=False))
    text = scrape(m)
    assert "# TYPE leader_election_master_status gauge" in text
    assert value(text, "leader_election_master_status", name="kscheduler") is None
