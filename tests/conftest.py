"""Shared fixtures: one real control plane per session, REST clients, per-test namespaces.

Tests under tests/integration are marked ``integration`` automatically
(``pytest -m "not integration"`` runs the unit layer alone). Missing binaries
are an error, not a skip: run ``make control-plane`` first.

Set KSCHEDULER_KEEP_CONTROLPLANE=1 to keep the control plane's work directory
(logs, kubeconfigs) after the session.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from kscheduler.controlplane.builders import create_namespace, delete_all_nodes, delete_namespace
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.rest import RestClient

INTEGRATION_DIR = Path(__file__).parent / "integration"

_started: list[ControlPlane] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in item.path.parents:
            item.add_marker(pytest.mark.integration)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for cp in _started:
        terminalreporter.write_line(
            "cluster (etcd, kube-apiserver, kube-controller-manager, kwok) ready in "
            f"{cp.startup_seconds or 0:.2f}s "
            f"(binaries from {cp.binaries.source}: {cp.binaries.kube_apiserver.parent})"
        )


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """A real kube-apiserver + etcd for the whole session."""
    cp = ControlPlane()
    cp.start()
    _started.append(cp)
    try:
        yield cp
    finally:
        cp.stop()


@pytest_asyncio.fixture(scope="session")
async def rest(control_plane: ControlPlane) -> AsyncIterator[RestClient]:
    """Raw JSON client authenticated as the admin (system:masters)."""
    async with control_plane.client() as client:
        yield client


@pytest_asyncio.fixture(scope="session")
async def scheduler_rest(control_plane: ControlPlane) -> AsyncIterator[RestClient]:
    """Raw JSON client authenticated as system:kube-scheduler."""
    async with control_plane.client(control_plane.scheduler_token) as client:
        yield client


@pytest_asyncio.fixture
async def namespace(rest: RestClient) -> AsyncIterator[str]:
    """A fresh namespace; its pods and the namespace are deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    await create_namespace(rest, name, exist_ok=False)
    try:
        yield name
    finally:
        await delete_namespace(rest, name)


@pytest_asyncio.fixture
async def fresh_nodes(rest: RestClient) -> AsyncIterator[None]:
    """No nodes at the start of the test, and none left after it."""
    await delete_all_nodes(rest)
    try:
        yield
    finally:
        await delete_all_nodes(rest)
