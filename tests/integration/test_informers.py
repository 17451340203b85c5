"""KubeClient and informers against a real kube-apiserver + etcd.

The 410 tests start control planes of their own (a few seconds each) because
they compact etcd and restart the apiserver, which the shared one must not see.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import orjson
import pytest
import pytest_asyncio

from kscheduler.controlplane.builders import make_pod
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.rest import RestClient
from kscheduler.informers import Informer, InformerFactory, InformerSettings, object_key
from kscheduler.kube import USER_AGENT, ApiError, KubeClient, Params, load_client_config

JSON = dict[str, Any]

SETTINGS = InformerSettings(backoff_initial=0.05, backoff_max=0.5, inactivity_timeout=30.0)


# --------------------------------------------------------------------------- helpers


@pytest_asyncio.fixture
async def kube(control_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    """KubeClient for the admin kubeconfig (CA-verified TLS, bearer token), unthrottled."""
    async with await KubeClient.from_kubeconfig(
        str(control_plane.admin_kubeconfig), qps=0, burst=1
    ) as client:
        yield client


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def on_add(self, o: JSON) -> None:
        self.calls.append(("add", object_key(o)))

    def on_update(self, old: JSON, new: JSON) -> None:
        self.calls.append(("update", object_key(new)))

    def on_delete(self, o: JSON) -> None:
        self.calls.append(("delete", object_key(o)))


async def wait_until(cond: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def running(runnable: Informer[Any] | InformerFactory) -> AsyncIterator[None]:
    task = asyncio.create_task(runnable.run(), name="informer-under-test")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Partition:
    """A WatchClient in front of KubeClient whose network can be cut.

    While ``down``: requests fail to connect, and an open watch breaks at the
    next line it receives (the line is lost, as with a dropped connection).
    """

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.down = False
        self.broken_streams = 0
        self.watch_versions: list[str] = []

    async def get_json(self, path: str, params: Params = None) -> Any:
        if self.down:
            raise aiohttp.ClientConnectionError("partitioned")
        return await self.kube.get_json(path, params)

    async def stream_lines(
        self,
        path: str,
        params: Params = None,
        timeout: float | None = None,
        *,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncGenerator[bytes, None]:
        if self.down:
            raise aiohttp.ClientConnectionError("partitioned")
        self.watch_versions.append(str((params or {}).get("resourceVersion")))
        lines = self.kube.stream_lines(path, params, timeout, on_open=on_open)
        async with contextlib.aclosing(lines):
            async for line in lines:
                if self.down:
                    self.broken_streams += 1
                    raise aiohttp.ServerDisconnectedError("partitioned")
                yield line


async def etcd_compact(endpoint: str) -> int:
    """Compact etcd up to its current revision (v3 JSON gateway); returns the revision."""
    async with aiohttp.ClientSession() as session:
        key = base64.b64encode(b"/").decode()
        async with session.post(f"{endpoint}/v3/kv/range", json={"key": key}) as resp:
            resp.raise_for_status()
            revision = int((await resp.json())["header"]["revision"])
        body = {"revision": str(revision), "physical": True}
        async with session.post(f"{endpoint}/v3/kv/compaction", json=body) as resp:
            resp.raise_for_status()
    return revision


#: on the configmaps these tests make: the cluster's own (kube-root-ca.crt, which the
#: controller-manager puts in every namespace) stay out of the informers under test
OURS = "test=informers"


def configmap(name: str, **data: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"test": "informers"}},
        "data": data,
    }


CM_PATH = "/api/v1/namespaces/default/configmaps"


# --------------------------------------------------------------------------- client


async def test_load_client_config_from_the_harness_kubeconfigs(
    control_plane: ControlPlane,
) -> None:
    cfg = await load_client_config(str(control_plane.scheduler_kubeconfig), qps=50, burst=100)
    assert cfg.host == control_plane.url
    assert cfg.ca_file is not None and cfg.verify_tls
    assert await cfg.credentials.header() == f"Bearer {control_plane.scheduler_token}"
    async with KubeClient(cfg) as client:
        review = await client.post_json(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        assert review["status"]["userInfo"]["username"] == "system:kube-scheduler"
        version = await client.get_json("/version")
        assert version["gitVersion"].startswith("v1.")
    assert USER_AGENT.startswith("kscheduler/")


async def test_bind_sets_node_name(
    control_plane: ControlPlane, kube: KubeClient, namespace: str
) -> None:
    created = await kube.post_json(f"/api/v1/namespaces/{namespace}/pods", make_pod("p", namespace))
    uid = created["metadata"]["uid"]
    cfg = await load_client_config(str(control_plane.scheduler_kubeconfig), qps=50, burst=100)
    async with KubeClient(cfg) as scheduler:
        await scheduler.bind(namespace, "p", uid, "node-a")
        pod = await kube.get_json(f"/api/v1/namespaces/{namespace}/pods/p")
        assert pod["spec"]["nodeName"] == "node-a"

        with pytest.raises(ApiError) as again:
            await scheduler.bind(namespace, "p", uid, "node-b")
        assert again.value.is_conflict and again.value.status == 409

        await kube.post_json(f"/api/v1/namespaces/{namespace}/pods", make_pod("q", namespace))
        with pytest.raises(ApiError) as stale_uid:
            await scheduler.bind(namespace, "q", "not-the-uid", "node-a")
        assert stale_uid.value.is_conflict

        with pytest.raises(ApiError) as missing:
            await scheduler.bind(namespace, "nope", "uid", "node-a")
        assert missing.value.is_not_found and missing.value.reason == "NotFound"


async def test_error_mapping(kube: KubeClient, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    with pytest.raises(ApiError) as nf:
        await kube.get_json(f"{path}/nope")
    assert nf.value.is_not_found and "nope" in nf.value.message

    cm = await kube.post_json(path, configmap("c", a="1"))
    with pytest.raises(ApiError) as exists:
        await kube.post_json(path, configmap("c"))
    assert exists.value.is_already_exists

    await kube.patch_json(f"{path}/c", {"data": {"a": "2"}})
    with pytest.raises(ApiError) as conflict:
        await kube.put_json(f"{path}/c", {**cm, "data": {"a": "3"}})  # stale resourceVersion
    assert conflict.value.is_conflict and conflict.value.reason == "Conflict"

    patched = await kube.patch_json(
        f"{path}/c",
        [{"op": "replace", "path": "/data/a", "value": "4"}],
        "application/json-patch+json",
    )
    assert patched["data"] == {"a": "4"}
    assert "managedFields" in patched["metadata"]  # only informers strip them
    await kube.delete(f"{path}/c", {"preconditions": {"uid": cm["metadata"]["uid"]}})
    with pytest.raises(ApiError) as gone:
        await kube.delete(f"{path}/c")
    assert gone.value.is_not_found


async def test_stream_lines_of_a_real_watch(kube: KubeClient, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    listed = await kube.get_json(path)
    params = {"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"]}
    lines = kube.stream_lines(path, params, timeout=30)
    async with contextlib.aclosing(lines):
        await kube.post_json(path, configmap("w", big="x" * 200_000))
        first = orjson.loads(await anext(lines))
    assert first["type"] == "ADDED"
    assert first["object"]["data"]["big"] == "x" * 200_000


# --------------------------------------------------------------------------- informers


async def test_informer_sees_adds_updates_and_deletes(
    kube: KubeClient, rest: RestClient, namespace: str
) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    for name in ("before-1", "before-2"):
        await kube.post_json(pods, make_pod(name, namespace))

    inf = Informer(
        kube, "/api/v1/pods", field_selector=f"metadata.namespace={namespace}", settings=SETTINGS
    )
    rec = Recorder()
    inf.add_handler(rec)
    async with running(inf):
        await asyncio.wait_for(inf.has_synced.wait(), 20)
        assert sorted(rec.calls) == [
            ("add", f"{namespace}/before-1"),
            ("add", f"{namespace}/before-2"),
        ]
        assert all("managedFields" not in o["metadata"] for o in inf.store.values())

        await kube.post_json(pods, make_pod("after", namespace))
        await kube.patch_json(f"{pods}/before-1", {"metadata": {"labels": {"seen": "yes"}}})
        await kube.delete(f"{pods}/before-2", {"gracePeriodSeconds": 0})
        gone = ("delete", f"{namespace}/before-2")
        await wait_until(lambda: gone in rec.calls, what="watch events")
        # deleting a pod may first set its deletionTimestamp (an update), then remove it
        assert rec.calls[2:4] == [
            ("add", f"{namespace}/after"),
            ("update", f"{namespace}/before-1"),
        ]
        assert set(rec.calls[4:-1]) <= {("update", f"{namespace}/before-2")}
        assert rec.calls[-1] == gone
        stored = inf.get(namespace, "before-1")
        assert stored is not None and stored["metadata"]["labels"] == {"seen": "yes"}
        assert sorted(inf.store) == [f"{namespace}/after", f"{namespace}/before-1"]
        assert inf.relists == 1


async def test_informer_lists_in_pages(kube: KubeClient, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    await asyncio.gather(*(kube.post_json(path, configmap(f"cm-{i}")) for i in range(25)))
    settings = InformerSettings(page_size=10)
    inf = Informer(kube, path, label_selector=OURS, settings=settings)
    async with running(inf):
        await asyncio.wait_for(inf.has_synced.wait(), 20)
    assert len(inf) == 25


async def test_factory_and_object_lister(kube: KubeClient, namespace: str) -> None:
    await kube.post_json(
        f"/api/v1/namespaces/{namespace}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "svc"},
            "spec": {"selector": {"app": "a"}, "ports": [{"port": 80}]},
        },
    )
    factory = InformerFactory(kube, settings=SETTINGS)
    for kind in ("services", "namespaces", "storageclasses", "csinodes", "poddisruptionbudgets"):
        factory.informer(kind)
    async with running(factory):
        await factory.wait_synced(timeout=20)
        lister = factory.lister
        assert lister.get("namespaces", "", namespace) is not None
        assert [s["metadata"]["name"] for s in lister.list("services", namespace)] == ["svc"]
        assert lister.get("services", namespace, "svc") is not None
        # a kind not asked for before starts on first use and fills in once synced
        assert lister.list("replicasets", namespace) == []
        replicasets = factory.informers["replicasets"]
        await asyncio.wait_for(replicasets.has_synced.wait(), 20)


# --------------------------------------------------------------------------- 410 Gone


@pytest.fixture(scope="module")
def etcd_watch_plane() -> Iterator[ControlPlane]:
    """Watches served straight from etcd, so a compaction makes old versions 410."""
    with ControlPlane(extra_apiserver_args=["--watch-cache=false"]) as cp:
        yield cp


@pytest.fixture(scope="module")
def restartable_plane() -> Iterator[ControlPlane]:
    """A control plane of our own to restart (the watch cache starts empty)."""
    with ControlPlane() as cp:
        yield cp


async def _partitioned_relist(cp: ControlPlane, *, restart: bool) -> None:
    async with await KubeClient.from_kubeconfig(str(cp.admin_kubeconfig), qps=0) as kube:
        for name in ("stays", "victim", "edited"):
            await kube.post_json(CM_PATH, configmap(name, v="1"))
        net = Partition(kube)
        inf = Informer(net, CM_PATH, label_selector=OURS, settings=SETTINGS)
        rec = Recorder()
        inf.add_handler(rec)
        async with running(inf):
            await asyncio.wait_for(inf.has_synced.wait(), 20)
            assert inf.relists == 1
            # wait for the first watch to be open, then cut the network under it
            await wait_until(lambda: net.watch_versions != [], what="first watch")
            net.down = True
            await kube.post_json(CM_PATH, configmap("trigger"))
            await wait_until(lambda: net.broken_streams == 1, what="the watch to break")
            old_rv = inf.resource_version
            assert old_rv is not None

            await kube.delete(f"{CM_PATH}/victim")
            await kube.patch_json(f"{CM_PATH}/edited", {"data": {"v": "2"}})
            await kube.post_json(CM_PATH, configmap("born"))
            await etcd_compact(cp.etcd_endpoint)
            if restart:
                await cp.arestart_apiserver()

            # the version the informer holds is gone: a watch from it says so
            lines = kube.stream_lines(CM_PATH, {"watch": "true", "resourceVersion": old_rv}, 30)
            async with contextlib.aclosing(lines):
                try:
                    first = orjson.loads(await anext(lines))
                    assert first["type"] == "ERROR" and first["object"]["code"] == 410
                except ApiError as exc:  # some versions answer 410 outright
                    assert exc.is_gone

            net.down = False
            await wait_until(lambda: inf.relists == 2, what="the relist")
            await wait_until(lambda: "default/born" in inf.store, what="the relisted store")
            assert sorted(inf.store) == [
                "default/born",
                "default/edited",
                "default/stays",
                "default/trigger",
            ]
            edited = inf.get("default", "edited")
            assert edited is not None and edited["data"] == {"v": "2"}
            after_sync = rec.calls[3:]
            assert after_sync[0] == ("delete", "default/victim")
            assert sorted(after_sync[1:]) == [
                ("add", "default/born"),
                ("add", "default/trigger"),
                ("update", "default/edited"),
            ]
            assert old_rv in net.watch_versions  # it did try to resume first
            # and the watch goes on from the new list
            await kube.post_json(CM_PATH, configmap("later"))
            await wait_until(lambda: "default/later" in inf.store, what="a post-relist event")


async def test_gone_after_etcd_compaction_relists(etcd_watch_plane: ControlPlane) -> None:
    await _partitioned_relist(etcd_watch_plane, restart=False)


async def test_gone_from_the_watch_cache_after_restart_relists(
    restartable_plane: ControlPlane,
) -> None:
    await _partitioned_relist(restartable_plane, restart=True)


async def test_informer_survives_an_apiserver_restart(restartable_plane: ControlPlane) -> None:
    path = "/api/v1/namespaces/default/secrets"
    async with await KubeClient.from_kubeconfig(
        str(restartable_plane.admin_kubeconfig), qps=0
    ) as kube:
        inf = Informer(kube, path, settings=SETTINGS)
        async with running(inf):
            await asyncio.wait_for(inf.has_synced.wait(), 20)
            await restartable_plane.arestart_apiserver(graceful=False)
            await kube.post_json(
                path, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"}}
            )
            await wait_until(lambda: "default/s1" in inf.store, what="event after restart")
