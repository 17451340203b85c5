"""Prometheus metrics with kube-scheduler's names, labels and buckets.

Existing kube-scheduler dashboards and alerts work unchanged: the names,
label names, metric types and histogram buckets follow
pkg/scheduler/metrics/metrics.go, plus client-go's
``leader_election_master_status{name}``. Bucket bounds are printed as Go
prints them (``le="1"``, not ``le="1.0"``) and counters carry no ``_created``
series, as with the Go client.

Plugins hold no metrics code. Events are reported through observer hooks (the
scheduler's :class:`~kscheduler.scheduler.SchedulerObserver`, the queue's
:class:`~kscheduler.queue.QueueObserver`, each framework's ``observer``);
state (pending pods, binds in flight, unschedulable pods per plugin,
leadership) is read from the app when scraped, so it cannot drift.

Everything runs on the event loop's thread, scrapes included, so the series
are plain dicts without locks.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from kscheduler.framework.status import Status
from kscheduler.framework.types import QueuedPodInfo
from kscheduler.queue import ACTIVE, BACKOFF, GATED, UNSCHEDULABLE, QueueObserver
from kscheduler.scheduler import SchedulerObserver

if TYPE_CHECKING:
    from kscheduler.app import SchedulerApp

#: scheduler_goroutines{operation} value for bind tasks, as upstream.
OPERATION_BINDING = "binding"
#: scheduler_pending_pods{queue} values, always all exported.
PENDING_QUEUES = (ACTIVE, BACKOFF, UNSCHEDULABLE, GATED)


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """Go's prometheus.ExponentialBuckets, multiplied step by step as Go does so that
    every bound is the same float (and prints the same)."""
    out = []
    for _ in range(count):
        out.append(start)
        start *= factor
    return tuple(out)


def go_float(value: float) -> str:
    """A float as Go's strconv.FormatFloat(v, 'g', -1, 64) prints it: ``1``, ``0.001``,
    ``1e-05``, ``1e+06``; the form Go clients use for ``le`` labels."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(value)
    sign = "-" if text.startswith("-") else ""
    text = text.lstrip("-")
    if "e" in text:
        mantissa, _, exp = text.partition("e")
        exponent = int(exp)
        digits = mantissa.replace(".", "")
    else:
        whole, _, frac = text.partition(".")
        frac = frac.rstrip("0")
        if whole != "0":
            exponent = len(whole) - 1
            digits = whole + frac
        else:
            stripped = frac.lstrip("0")
            exponent = -(len(frac) - len(stripped)) - 1
            digits = stripped or "0"
    digits = digits.rstrip("0") or "0"
    if exponent < -4 or exponent >= 6:  # 'g' at the shortest precision, as Go decides
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    whole = digits[: exponent + 1].ljust(exponent + 1, "0")
    frac = digits[exponent + 1 :]
    return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"


# ---- series ----------------------------------------------------------------------------------
class CounterVec:
    """A counter family; ``name`` as exposed (ending in ``_total``)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def get(self, *labels: str) -> float:
        return self.values.get(labels, 0.0)

    def family(self) -> CounterMetricFamily:
        fam = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, value in self.values.items():
            fam.add_metric(labels, value)
        return fam


class _Histogram:
    __slots__ = ("counts", "sum")

    def __init__(self, n: int) -> None:
        self.counts = [0] * (n + 1)  # the last one is +Inf
        self.sum = 0.0


class HistogramVec:
    """A histogram family with fixed upper bounds (``le`` inclusive, as Prometheus)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.buckets = tuple(buckets)
        self._le = [go_float(b) for b in self.buckets] + ["+Inf"]
        self.series: dict[tuple[str, ...], _Histogram] = {}

    def observe(self, value: float, *labels: str) -> None:
        h = self.series.get(labels)
        if h is None:
            h = self.series[labels] = _Histogram(len(self.buckets))
        h.counts[bisect.bisect_left(self.buckets, value)] += 1
        h.sum += value

    def count(self, *labels: str) -> int:
        h = self.series.get(labels)
        return sum(h.counts) if h is not None else 0

    def family(self) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, h in self.series.items():
            cumulative = 0
            points: list[tuple[str, float]] = []
            for le, n in zip(self._le, h.counts, strict=True):
                cumulative += n
                points.append((le, float(cumulative)))
            fam.add_metric(labels, points, h.sum)
        return fam


# ---- the registry ----------------------------------------------------------------------------
class Metrics:
    """kube-scheduler's metric set on a private :class:`CollectorRegistry`.

    ``scheduler_observer()`` goes to the :class:`~kscheduler.scheduler.Scheduler`;
    ``attach(app)`` wires the queue and the frameworks and makes the state
    gauges readable.
    """

    def __init__(self, *, process_metrics: bool = True) -> None:
        self.schedule_attempts = CounterVec(
            "scheduler_schedule_attempts_total",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod "
            "could not be scheduled, while 'error' means an internal scheduler problem.",
            ("result", "profile"),
        )
        self.scheduling_attempt_duration = HistogramVec(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            ("result", "profile"),
            buckets=exponential_buckets(0.001, 2, 15),
        )
        self.pod_scheduling_sli_duration = HistogramVec(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the "
            "scheduling queue and might involve multiple scheduling attempts.",
            ("attempts",),
            buckets=exponential_buckets(0.01, 2, 20),
        )
        self.pod_scheduling_attempts = HistogramVec(
            "scheduler_pod_scheduling_attempts",
            "Number of attempts to successfully schedule a pod.",
            buckets=exponential_buckets(1, 2, 5),
        )
        self.framework_extension_point_duration = HistogramVec(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            ("extension_point", "status", "profile"),
            buckets=exponential_buckets(0.0001, 2, 12),
        )
        #: Declared for dashboards; per-plugin timing is not sampled yet.
        self.plugin_execution_duration = HistogramVec(
            "scheduler_plugin_execution_duration_seconds",
            "Duration for running a plugin at a specific extension point.",
            ("plugin", "extension_point", "status"),
            buckets=exponential_buckets(0.00001, 1.5, 20),
        )
        self.queue_incoming_pods = CounterVec(
            "scheduler_queue_incoming_pods_total",
            "Number of pods added to scheduling queues by event and queue type.",
            ("queue", "event"),
        )
        self.preemption_attempts = CounterVec(
            "scheduler_preemption_attempts_total",
            "Total preemption attempts in the cluster till now",
        )
        self.preemption_victims = HistogramVec(
            "scheduler_preemption_victims",
            "Number of selected preemption victims for preemption initiated by a single pod",
            buckets=exponential_buckets(1, 2, 7),
        )
        self._app: SchedulerApp | None = None
        self.registry = CollectorRegistry()
        self.registry.register(self)
        if process_metrics:
            ProcessCollector(registry=self.registry)

    # ---- hooks -------------------------------------------------------------------------------
    def scheduler_observer(self) -> SchedulerObserver:
        return _SchedulerHook(self)

    def queue_observer(self) -> QueueObserver:
        return _QueueHook(self)

    def framework_observer(self, profile: str) -> FrameworkHook:
        return FrameworkHook(self, profile)

    def attach(self, app: SchedulerApp) -> None:
        """Observe ``app``'s queue and frameworks and export its state gauges."""
        self._app = app
        app.queue.observer = self.queue_observer()
        for profile, fwk in app.frameworks.items():
            fwk.observer = self.framework_observer(profile)

    # ---- collection ----------------------------------------------------------------------------
    def _static(self) -> list[CounterVec | HistogramVec]:
        return [
            self.schedule_attempts,
            self.scheduling_attempt_duration,
            self.pod_scheduling_sli_duration,
            self.pod_scheduling_attempts,
            self.framework_extension_point_duration,
            self.plugin_execution_duration,
            self.queue_incoming_pods,
            self.preemption_attempts,
            self.preemption_victims,
        ]

    def describe(self) -> Iterable[Metric]:
        yield from (s.family() for s in self._static())
        yield from self._state(None)

    def collect(self) -> Iterable[Metric]:
        yield from (s.family() for s in self._static())
        yield from self._state(self._app)

    def _state(self, app: SchedulerApp | None) -> Iterator[Metric]:
        pending = GaugeMetricFamily(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type. 'active' means number of pods in "
            "activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number "
            "of pods in unschedulablePods that the scheduler attempted to schedule and failed; "
            "'gated' is the number of unschedulable pods that the scheduler never attempted to "
            "schedule because they are gated.",
            labels=("queue",),
        )
        unschedulable = GaugeMetricFamily(
            "scheduler_unschedulable_pods",
            "The number of unschedulable pods broken down by plugin name. A pod will increment "
            "the gauge for all plugins that caused it to not schedule and so this metric have "
            "meaning only when broken down by plugin.",
            labels=("plugin", "profile"),
        )
        goroutines = GaugeMetricFamily(
            "scheduler_goroutines",
            "Number of running goroutines split by the work they do such as binding.",
            labels=("operation",),
        )
        leader = GaugeMetricFamily(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease. "
            "Please make sure to group by name.",
            labels=("name",),
        )
        if app is not None:
            counts = app.queue.counts()
            for queue in PENDING_QUEUES:
                pending.add_metric((queue,), float(counts.get(queue, 0)))
            for (plugin, profile), n in sorted(_unschedulable_by_plugin(app).items()):
                unschedulable.add_metric((plugin, profile), float(n))
            goroutines.add_metric((OPERATION_BINDING,), float(len(app.scheduler.binds)))
            if app._leader_elect():
                name = app.cfg.leader_election.resource_name
                leader.add_metric((name,), 1.0 if app.leading else 0.0)
        yield pending
        yield unschedulable
        yield goroutines
        yield leader


def _unschedulable_by_plugin(app: SchedulerApp) -> dict[tuple[str, str], int]:
    """(plugin, profile) -> pending pods that plugin rejected (or gates).

    Upstream increments the gauge when a rejected pod enters the queue and
    decrements it when the pod is popped again or deleted; counting the pods
    waiting in the queue when scraped gives the same numbers.
    """
    out: dict[tuple[str, str], int] = {}
    for where, qp in app.queue.pending():
        if where not in PENDING_QUEUES:
            continue  # in flight: being scheduled again
        plugins = qp.unschedulable_plugins | qp.pending_plugins
        if qp.gated:
            plugins = plugins | {qp.gated}
        for plugin in plugins:
            if plugin.startswith("<"):  # the queue's internal markers, not plugins
                continue
            key = (plugin, qp.pod.scheduler_name)
            out[key] = out.get(key, 0) + 1
    return out


# ---- observers -------------------------------------------------------------------------------
class _SchedulerHook(SchedulerObserver):
    def __init__(self, metrics: Metrics) -> None:
        self._m = metrics

    def attempt(self, result: str, profile: str, seconds: float) -> None:
        self._m.schedule_attempts.inc(result, profile)
        self._m.scheduling_attempt_duration.observe(seconds, result, profile)

    def scheduled(self, qp: QueuedPodInfo, sli_seconds: float) -> None:
        self._m.pod_scheduling_sli_duration.observe(sli_seconds, str(qp.attempts))
        self._m.pod_scheduling_attempts.observe(float(qp.attempts))

    def unschedulable_plugins(self, plugins: set[str], profile: str) -> None:
        """Nothing to do: scheduler_unschedulable_pods is counted from the queue when
        scraped, so pods that are popped again or deleted drop out by themselves."""

    def preemption(self, victims: int) -> None:
        """One PostFilter preemption attempt; ``victims`` pods were selected (0: none)."""
        self._m.preemption_attempts.inc()
        if victims > 0:
            self._m.preemption_victims.observe(float(victims))


class _QueueHook(QueueObserver):
    def __init__(self, metrics: Metrics) -> None:
        self._m = metrics

    def incoming(self, queue: str, event: str) -> None:
        # upstream keeps gated pods in its unschedulable pool and labels them so
        self._m.queue_incoming_pods.inc(UNSCHEDULABLE if queue == GATED else queue, event)


class FrameworkHook:
    """A framework's observer: extension point durations for one profile."""

    __slots__ = ("_profile", "_series")

    def __init__(self, metrics: Metrics, profile: str) -> None:
        self._series = metrics.framework_extension_point_duration
        self._profile = profile

    def extension_point(self, point: str, status: Status | None, seconds: float) -> None:
        code = "Success" if status is None else status.code.label
        self._series.observe(seconds, point, code, self._profile)
