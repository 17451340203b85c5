"""The installed plugin changes where the kscheduler command places pods, through its
config alone: against a real kube-apiserver + etcd from kscheduler's harness."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from kscheduler.controlplane.binaries import BinariesNotFoundError, find_control_plane
from kscheduler.controlplane.builders import (
    create_namespace,
    create_nodes,
    create_pods,
    delete_all_nodes,
    delete_namespace,
    make_node,
    make_pod,
)
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.rest import RestClient

pytestmark = pytest.mark.integration

DISK = "example.com/disk"

PLAIN = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
"""

WITH_PLUGIN = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
profiles:
- schedulerName: kscheduler
  plugins:
    score:
      enabled:
      - name: NodeLabelPreference
        weight: 5
  pluginConfig:
  - name: NodeLabelPreference
    args:
      label: example.com/disk
      scores: {ssd: 100}
"""


@pytest.fixture(scope="module")
def control_plane() -> Iterator[ControlPlane]:
    try:
        find_control_plane()
    except BinariesNotFoundError as exc:
        pytest.fail(
            f"no kube-apiserver/etcd binaries (run `make control-plane` in kscheduler): {exc}"
        )
    cp = ControlPlane()
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@asynccontextmanager
async def kscheduler(cp: ControlPlane, config: str, tmp_path: Path) -> AsyncIterator[None]:
    """The kscheduler command, as a user runs it."""
    path = tmp_path / f"config-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(config)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kscheduler",
        "--config",
        str(path),
        "--kubeconfig",
        str(cp.scheduler_kubeconfig),
        "--secure-port",
        "0",
        "-q",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()


async def placed(rest: RestClient, ns: str, count: int, timeout: float = 30) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    got: dict[str, str] = {}
    while time.monotonic() < deadline:
        items: list[dict[str, Any]] = (await rest.get(f"/api/v1/namespaces/{ns}/pods"))["items"]
        got = {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in items}
        if len(got) == count and all(got.values()):
            return got
        await asyncio.sleep(0.2)
    raise AssertionError(f"pods not bound within {timeout}s: {got}")


async def test_the_plugin_moves_pods_to_the_preferred_nodes(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    async with control_plane.client() as rest:
        await delete_all_nodes(rest)
        # the preferred node is the smallest: without the plugin, pods go elsewhere
        await create_nodes(
            rest,
            [
                make_node("ssd-small", cpu="4", memory="8Gi", labels={DISK: "ssd"}),
                make_node("hdd-big-1", cpu="32", memory="64Gi", labels={DISK: "hdd"}),
                make_node("hdd-big-2", cpu="32", memory="64Gi", labels={DISK: "hdd"}),
            ],
        )
        ns = f"plugin-{uuid.uuid4().hex[:8]}"
        await create_namespace(rest, ns)
        try:

            def pods(prefix: str) -> list[dict[str, Any]]:
                return [
                    make_pod(
                        f"{prefix}-{i}", ns, cpu="1", memory="1Gi", scheduler_name="kscheduler"
                    )
                    for i in range(3)
                ]

            async with kscheduler(control_plane, PLAIN, tmp_path):
                await create_pods(rest, pods("before"))
                before = await placed(rest, ns, 3)
            async with kscheduler(control_plane, WITH_PLUGIN, tmp_path):
                await create_pods(rest, pods("after"))
                after = await placed(rest, ns, 6)
        finally:
            await delete_namespace(rest, ns)
            await delete_all_nodes(rest)
    assert "ssd-small" not in before.values(), before
    assert {after[f"after-{i}"] for i in range(3)} == {"ssd-small"}, after
