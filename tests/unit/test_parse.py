"""pod_requests: the effective request of a pod, as kube-scheduler computes it."""

from __future__ import annotations

from typing import Any

import pytest

from kscheduler.framework.parse import parse_pod, pod_requests
from kscheduler.framework.types import DEFAULT_MEMORY_REQUEST as MEM0
from kscheduler.framework.types import DEFAULT_MILLI_CPU_REQUEST as CPU0

from .builders import PodBuilder, pod

Gi = 1024**3
Mi = 1024**2


def _req(p: PodBuilder) -> tuple[dict[str, int], int, int]:
    r, nz_cpu, nz_mem = pod_requests(p.raw()["spec"])
    return r.as_dict(), nz_cpu, nz_mem


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        (pod("p"), {"cpu": 0, "memory": 0}),
        (pod("p").req(cpu="1", memory="1Gi"), {"cpu": 1000, "memory": Gi}),
        # containers add up
        (pod("p").req(cpu="1", memory="1Gi").req(cpu="500m"), {"cpu": 1500, "memory": Gi}),
        # the init container example of the scheduler's documentation: cpu 3, memory 3G
        (
            pod("p")
            .init(cpu="2", memory="1G")
            .init(cpu="2", memory="3G")
            .req(cpu="2", memory="1G")
            .req(cpu="1", memory="1G"),
            {"cpu": 3000, "memory": 3 * 10**9},
        ),
        # a sidecar runs beside the containers and beside later init containers
        (pod("p").sidecar(cpu="1").init(cpu="2").req(cpu="1"), {"cpu": 3000, "memory": 0}),
        # ... but not beside init containers that ran before it
        (pod("p").init(cpu="2").sidecar(cpu="1").req(cpu="1"), {"cpu": 2000, "memory": 0}),
        (
            pod("p").sidecar(cpu="1").sidecar(memory="1Gi").init(cpu="500m").req(cpu="1"),
            {"cpu": 2000, "memory": Gi},
        ),
        # overhead is added on top
        (
            pod("p").req(cpu="1", memory="1Gi").overhead(cpu="250m", memory="120Mi"),
            {"cpu": 1250, "memory": Gi + 120 * Mi},
        ),
        (
            pod("p").init(cpu="2").req(cpu="1").overhead(cpu="100m"),
            {"cpu": 2100, "memory": 0},
        ),
        # extended resources follow the same rules
        (
            pod("p").req(**{"example.com/gpu": "1"}).init(**{"example.com/gpu": "2"}),
            {"cpu": 0, "memory": 0, "example.com/gpu": 2},
        ),
        (pod("p").req(ephemeral_storage="1Gi"), {"cpu": 0, "memory": 0, "ephemeral-storage": Gi}),
        # pod-level requests replace the container sum for cpu and memory
        (
            pod("p").req(cpu="1", memory="1Gi").req(cpu="1").pod_requests(cpu="3"),
            {"cpu": 3000, "memory": Gi},
        ),
        (
            pod("p").req(cpu="1").pod_requests(cpu="2", memory="2Gi").overhead(cpu="100m"),
            {"cpu": 2100, "memory": 2 * Gi},
        ),
    ],
)
def test_requests(p: PodBuilder, expected: dict[str, int]) -> None:
    assert _req(p)[0] == expected


@pytest.mark.parametrize(
    ("p", "nz_cpu", "nz_mem"),
    [
        (pod("p"), 0, 0),
        (pod("p").container(), CPU0, MEM0),
        (pod("p").container().container(), 2 * CPU0, 2 * MEM0),
        (pod("p").req(cpu="1"), 1000, MEM0),
        (pod("p").req(memory="1Gi"), CPU0, Gi),
        (pod("p").req(cpu="1", memory="1Gi").container(), 1000 + CPU0, Gi + MEM0),
        # an init container without requests needs the defaults while it runs
        (pod("p").req(cpu="50m", memory="10Mi").init(), CPU0, MEM0),
        (pod("p").req(cpu="1", memory="1Gi").init(), 1000, Gi),
        # sidecars count with the containers, defaults included
        (pod("p").sidecar().req(cpu="1", memory="1Gi"), 1000 + CPU0, Gi + MEM0),
        # overhead adds to the non-zero values too
        (pod("p").container().overhead(cpu="10m", memory="1Mi"), CPU0 + 10, MEM0 + Mi),
        # pod-level cpu replaces the cpu; memory keeps the per-container default
        (pod("p").container().pod_requests(cpu="2"), 2000, MEM0),
    ],
)
def test_non_zero_requests(p: PodBuilder, nz_cpu: int, nz_mem: int) -> None:
    _, cpu, mem = _req(p)
    assert (cpu, mem) == (nz_cpu, nz_mem)


def test_non_zero_keeps_explicit_zero() -> None:
    _, cpu, mem = _req(pod("p").req(cpu="0", memory="1Gi"))
    assert (cpu, mem) == (0, Gi)


def test_pod_level_hugepages() -> None:
    p = pod("p").req(**{"hugepages-2Mi": "2Mi"}).pod_requests(cpu="1", **{"hugepages-2Mi": "8Mi"})
    assert _req(p)[0]["hugepages-2Mi"] == 8 * Mi


def test_parse_pod_sets_requests() -> None:
    raw: dict[str, Any] = pod("p").req(cpu="1").container().raw()
    info = parse_pod(raw)
    assert info.parse_error is None
    assert info.requests.milli_cpu == 1000
    assert (info.non_zero_cpu, info.non_zero_memory) == (1000 + CPU0, 2 * MEM0)


def test_bad_quantity_is_a_parse_error() -> None:
    info = parse_pod(pod("p").req(cpu="lots").raw())
    assert info.parse_error is not None
    assert "spec.containers[0].resources.requests.cpu" in info.parse_error
