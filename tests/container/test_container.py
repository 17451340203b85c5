"""kscheduler's image run as deploy/ runs it: two replicas in a real container runtime.

The image is built with `make image` (tests/container/docker.py: cached by a hash of its
inputs). Both replicas run as the Deployment's pod template says: read-only root, uid
65532, every capability dropped, no-new-privileges, the default seccomp profile, a
16 MiB tmpfs at /tmp, the Deployment's arguments and the ConfigMap's configuration file
mounted at /etc/kscheduler, and in-cluster configuration: a TokenRequest token of
deploy/'s ServiceAccount (its RBAC applied, moved into the test's namespace) and the
apiserver's CA at /var/run/secrets/kubernetes.io/serviceaccount/,
KUBERNETES_SERVICE_HOST/PORT naming the harness's apiserver. The one difference: the
containers share the host's network (the apiserver listens on 127.0.0.1), so each gets
its own --secure-port, and both have the host's hostname and run as PID 1, which is
what makes the Lease identity's random part necessary.

The probes' endpoints are polled as the kubelet would (the Deployment's periods and
thresholds). A real Prometheus (Debian's) scrapes both replicas with
docs/prometheus-scrape.yaml, the README's scrape configuration, and every PromQL query
the README shows must return data. Then the leader is killed (SIGKILL): the standby
takes over within the lease timings, and no pod is lost or bound twice; a replacement
replica starts, and the leader is stopped (SIGTERM): it releases the Lease and the
standby takes over at once. Timings are printed (pytest -s) and kept in
``container-timings.json`` under the test's tmp_path.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import json
import os
import re
import shutil
import ssl
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml

from kscheduler.controlplane.builders import create_nodes, create_pods, make_node, make_pod
from kscheduler.controlplane.harness import ControlPlane, free_ports
from kscheduler.controlplane.rest import JSON, ApiError, RestClient
from tests.container.docker import Docker, base_image, docker_engine, kscheduler_image
from tests.integration.runner import wait_for
from tests.integration.test_rbac import (  # noqa: F401  (identity is a fixture)
    Identity,
    all_bound,
    collection_path,
    container,
    holder_of,
    identity,
    manifests,
    relocated,
    scheduler_config_text,
)

pytestmark = pytest.mark.container

REPO = Path(__file__).resolve().parents[2]
SCRAPE_CONFIG = REPO / "docs" / "prometheus-scrape.yaml"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Every replica's address on the host network, as an Endpoints object would list it.
HOST = "127.0.0.1"


def readme_promql() -> list[str]:
    """Every PromQL query the README shows: the ```promql block and the `# http://...: ` line."""
    text = (REPO / "README.md").read_text()
    queries: list[str] = []
    for block in re.findall(r"```promql\n(.*?)```", text, re.S):
        queries += [q.strip() for q in block.splitlines() if q.strip()]
    queries += re.findall(r"^# http://localhost:9090: (.+)$", text, re.M)
    return list(dict.fromkeys(queries))


# ---------------------------------------------------------------------------- the engine


@pytest.fixture(scope="session")
def docker() -> Iterator[Docker]:
    with docker_engine() as engine:
        yield engine


@pytest.fixture(scope="session")
def image(docker: Docker) -> str:
    return kscheduler_image(docker)


# ---------------------------------------------------------------------------- replicas


@dataclass
class Probe:
    path: str
    period: float
    timeout: float
    failure_threshold: int
    failures: int = 0
    successes: int = 0
    #: consecutive failures reached failureThreshold (the kubelet would restart / unready)
    tripped: int = 0


@dataclass
class Replica:
    name: str
    port: int
    started_at: float
    probes: dict[str, Probe] = field(default_factory=dict)
    ready_at: float | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def identity(self, docker: Docker) -> str:
        """The holderIdentity this replica announced when its election started."""
        for entry in log_entries(docker, self.name):
            if entry.get("event") == "waiting for the leader lease":
                return str(entry["identity"])
        return ""


def log_entries(docker: Docker, name: str) -> list[dict[str, Any]]:
    out = []
    for line in docker.logs(name).splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def probes_of_deployment() -> dict[str, Probe]:
    c = container()
    out = {}
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        spec = c[kind]
        assert spec["httpGet"].get("scheme") == "HTTPS"
        out[kind] = Probe(
            path=spec["httpGet"]["path"],
            period=float(spec.get("periodSeconds", 10)),
            timeout=float(spec.get("timeoutSeconds", 1)),
            failure_threshold=int(spec.get("failureThreshold", 3)),
        )
    return out


async def probe_loop(http: aiohttp.ClientSession, r: Replica) -> None:
    """The kubelet's prober for one container: the startup probe until it succeeds, then
    liveness and readiness, each at its period; HTTPS without verification."""
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE

    async def once(p: Probe) -> bool:
        try:
            async with http.get(
                f"https://{HOST}:{r.port}{p.path}",
                ssl=insecure,
                timeout=aiohttp.ClientTimeout(total=p.timeout),
            ) as resp:
                ok = 200 <= resp.status < 400
        except (aiohttp.ClientError, TimeoutError):
            ok = False
        if ok:
            p.successes += 1
            p.failures = 0
        else:
            p.failures += 1
            if p.failures == p.failure_threshold:
                p.tripped += 1
        return ok

    startup = r.probes["startupProbe"]
    while not await once(startup):  # noqa: ASYNC110 (a probe period, not a wait for an event)
        await asyncio.sleep(startup.period)

    async def every(p: Probe, on_success: Any = None) -> None:
        while True:
            if await once(p) and on_success is not None:
                on_success()
            await asyncio.sleep(p.period)

    def mark_ready() -> None:
        if r.ready_at is None:
            r.ready_at = time.monotonic()

    await asyncio.gather(
        every(r.probes["livenessProbe"]), every(r.probes["readinessProbe"], mark_ready)
    )


def deployment_pod_spec() -> dict[str, Any]:
    deployment = next(m.obj for m in manifests() if m.kind == "Deployment")
    return dict(deployment["spec"]["template"]["spec"])


def deployment_run_args(
    image: str, name: str, port: int, config_dir: Path, sa_dir: Path, apiserver_port: int
) -> list[str]:
    """`docker run` for one replica, from deploy/deployment.yaml's pod template."""
    pod = deployment_pod_spec()
    c = container()
    sc, psc = c["securityContext"], pod["securityContext"]
    assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
    assert (
        sc["capabilities"]["drop"] == ["ALL"] and psc["seccompProfile"]["type"] == "RuntimeDefault"
    )
    tmp = next(v for v in pod["volumes"] if "emptyDir" in v)
    (tmp_mount,) = [m["mountPath"] for m in c["volumeMounts"] if m["name"] == tmp["name"]]
    (cfg_mount,) = [m["mountPath"] for m in c["volumeMounts"] if m["name"] != tmp["name"]]
    size = tmp["emptyDir"]["sizeLimit"].replace("Mi", "m")
    return [
        "run", "--detach", "--name", name,
        "--network", "host",
        "--read-only",
        "--user", f"{psc['runAsUser']}:{psc['runAsGroup']}",
        "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges",
        "--tmpfs", f"{tmp_mount}:size={size},mode=1777",
        "--memory", c["resources"]["limits"]["memory"].replace("Gi", "g"),
        "--cpus", str(c["resources"]["limits"]["cpu"]),
        "--volume", f"{config_dir}:{cfg_mount}:ro",
        "--volume", f"{sa_dir}:{SA_DIR}:ro",
        "--env", f"KUBERNETES_SERVICE_HOST={HOST}",
        "--env", f"KUBERNETES_SERVICE_PORT={apiserver_port}",
        image,
        *c["args"],
        f"--secure-port={port}",
    ]  # fmt: skip


def service_account_dir(path: Path, token: str, ca_file: Path, namespace: str) -> Path:
    """What the kubelet projects at /var/run/secrets/kubernetes.io/serviceaccount."""
    path.mkdir(mode=0o755)
    (path / "token").write_text(token)
    shutil.copyfile(ca_file, path / "ca.crt")
    (path / "namespace").write_text(namespace)
    for f in path.iterdir():
        f.chmod(0o644)
    return path


async def mint_token(rest: RestClient, namespace: str, sa: str) -> str:
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    minted = await rest.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa}/token", request)
    return str(minted["status"]["token"])


# ---------------------------------------------------------------------------- Prometheus


@pytest_asyncio.fixture
async def prometheus_identity(
    control_plane: ControlPlane, rest: RestClient, namespace: str
) -> AsyncIterator[str]:
    """A ServiceAccount for Prometheus, bound by deploy/prometheus/rbac.yaml's binding (moved
    to it) to deploy/metrics-reader.yaml's kscheduler:metrics-reader (both under names of
    this test's own); yields its token."""
    await rest.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "prometheus"}},
    )
    binding = copy.deepcopy(next(m.obj for m in manifests() if m.file == "prometheus/rbac.yaml"))
    role = copy.deepcopy(
        next(
            m.obj
            for m in manifests()
            if m.file == "metrics-reader.yaml" and m.name == binding["roleRef"]["name"]
        )
    )
    role["metadata"]["name"] += f":{namespace}"
    binding["metadata"]["name"] += f":{namespace}"
    binding["roleRef"]["name"] = role["metadata"]["name"]
    binding["subjects"] = [{"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}]
    created: list[str] = []
    try:
        for obj in (role, binding):
            path = await collection_path(rest, obj)
            await rest.post(path, obj)
            created.append(f"{path}/{obj['metadata']['name']}")
        token = await mint_token(rest, namespace, "prometheus")
        async with control_plane.client(token) as client:

            async def allowed() -> bool:
                review = {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SelfSubjectAccessReview",
                    "spec": {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}},
                }
                answer = await client.post(
                    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review
                )
                return bool(answer["status"].get("allowed"))

            await wait_for(allowed, timeout=15, what="Prometheus may get /metrics")
        yield token
    finally:
        for obj_path in reversed(created):
            with contextlib.suppress(ApiError):
                await rest.delete(obj_path)


def prometheus_config(targets_file: str) -> dict[str, Any]:
    """docs/prometheus-scrape.yaml (the README's), with a 2s scrape interval.

    Debian's prometheus is built without Kubernetes service discovery, so its
    kubernetes_sd_configs is replaced by a file_sd_configs whose targets carry the
    __meta_kubernetes_* labels that discovery would give them (service name, endpoint
    port name, the endpoint address's target pod); everything else (scheme,
    authorization, TLS, relabelling) is the file's, unchanged.
    """
    cfg = yaml.safe_load(SCRAPE_CONFIG.read_text())
    (job,) = cfg["scrape_configs"]
    (sd,) = job.pop("kubernetes_sd_configs")
    assert sd["role"] == "endpoints"
    job["file_sd_configs"] = [{"files": [targets_file], "refresh_interval": "1s"}]
    cfg["global"] = {"scrape_interval": "2s", "evaluation_interval": "2s"}
    return dict(cfg)


def prometheus_targets(replicas: list[Replica]) -> list[JSON]:
    """The Endpoints of deploy/'s Service as Prometheus's endpoints role would see them."""
    service = next(m.obj for m in manifests() if m.kind == "Service")
    (port,) = service["spec"]["ports"]
    return [
        {
            "targets": [f"{HOST}:{r.port}"],
            "labels": {
                "__meta_kubernetes_namespace": service["metadata"]["namespace"],
                "__meta_kubernetes_service_name": service["metadata"]["name"],
                "__meta_kubernetes_endpoint_port_name": port["name"],
                "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                "__meta_kubernetes_endpoint_address_target_name": r.name,
            },
        }
        for r in replicas
    ]


# ---------------------------------------------------------------------------- the test


# A fresh machine builds the base (debootstrap) and the image in this test's setup.
@pytest.mark.timeout(1800)
async def test_two_replicas_in_containers(
    control_plane: ControlPlane,
    rest: RestClient,
    identity: Identity,  # noqa: F811
    prometheus_identity: str,
    fresh_nodes: None,
    docker: Docker,
    image: str,
    tmp_path: Path,
) -> None:
    ns = identity.namespace
    timings: dict[str, float] = dict(docker.timings)
    size = int(docker.cmd("image", "inspect", "-f", "{{.Size}}", image).strip())
    timings["image size MB"] = size / 1e6
    assert_no_ca_bundle_in(docker, image)

    # the ConfigMap's configuration, its Lease moved to the test's namespace (where the
    # Role is); kube-scheduler's lease timings (15s/10s/2s) as deploy/ leaves them
    cfg = yaml.safe_load(scheduler_config_text())
    le = cfg["leaderElection"]
    le["resourceNamespace"] = ns
    lease_duration = float(str(le.get("leaseDuration", "15s")).rstrip("s"))
    retry_period = float(str(le.get("retryPeriod", "2s")).rstrip("s"))
    scheduler_name = cfg["profiles"][0]["schedulerName"]
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{le['resourceName']}"
    config_dir = tmp_path / "config"
    config_dir.mkdir(mode=0o755)
    (config_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    (config_dir / "config.yaml").chmod(0o644)
    sa_dir = service_account_dir(tmp_path / "sa", identity.token, control_plane.ca_file, ns)
    apiserver_port = int(control_plane.url.rsplit(":", 1)[1])

    await create_nodes(rest, [make_node(f"ctr-{i}", cpu="8") for i in range(3)])

    async def holder() -> str:
        return await holder_of(rest, lease_path)

    async def pods_bound(names: list[str]) -> bool:
        return await all_bound(rest, ns, names)

    async def make(prefix: str, count: int) -> list[str]:
        names = [f"{prefix}-{i}" for i in range(count)]
        await create_pods(
            rest, [make_pod(n, ns, cpu="100m", scheduler_name=scheduler_name) for n in names]
        )
        return names

    names: list[str] = []
    ports = free_ports(5)
    prom_port = ports.pop()
    replicas: list[Replica] = []
    prom_name = f"prometheus-{ns}"
    http = aiohttp.ClientSession()

    def start(label: str) -> Replica:
        name = f"kscheduler-{ns}-{label}"
        port = ports.pop()
        args = deployment_run_args(image, name, port, config_dir, sa_dir, apiserver_port)
        names.append(name)  # removed in the end even if `docker run` fails half-way
        r = Replica(name, port, time.monotonic(), probes_of_deployment())
        docker.cmd(*args)
        r.tasks.append(asyncio.create_task(probe_loop(http, r)))
        replicas.append(r)
        return r

    async def ready_within(r: Replica) -> float:
        """Seconds from `docker run` to /readyz 200 (polled every 0.1s)."""
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE

        async def ready() -> bool:
            running = docker.cmd("inspect", "-f", "{{.State.Running}}", r.name).strip()
            assert running == "true", f"{r.name} exited:\n{docker.logs(r.name)[-3000:]}"
            try:
                async with http.get(f"https://{HOST}:{r.port}/readyz", ssl=insecure) as resp:
                    return resp.status == 200
            except aiohttp.ClientError:
                return False

        await wait_for(ready, timeout=120, interval=0.1, what=f"{r.name} /readyz")
        return time.monotonic() - r.started_at

    try:
        a, b = start("a"), start("b")
        timings["start to ready a (s)"] = await ready_within(a)
        timings["start to ready b (s)"] = await ready_within(b)
        for r in (a, b):
            # uid 65532, read-only, no capabilities, as the kubelet would have run it
            inspect = json.loads(docker.cmd("inspect", r.name))[0]
            assert inspect["Config"]["User"] == "65532:65532"
            assert inspect["HostConfig"]["ReadonlyRootfs"] is True
            assert inspect["HostConfig"]["CapDrop"] == ["ALL"]
            assert "no-new-privileges" in inspect["HostConfig"]["SecurityOpt"]

        # exactly one leader, whose identity is one of the two announced
        lead_id = await wait_for(holder, timeout=lease_duration + 10, what="a Lease holder")
        ids = {a.identity(docker): a, b.identity(docker): b}
        assert len(ids) == 2 and "" not in ids, f"identities {list(ids)}"
        assert lead_id in ids, f"{lead_id!r} is neither replica ({list(ids)})"
        leader = ids[lead_id]
        standby = b if leader is a else a
        for _ in range(3 * int(retry_period)):  # and it stays so: nobody else leads
            await asyncio.sleep(1)
            assert await holder() == lead_id
        leading = [
            e
            for r in (a, b)
            for e in log_entries(docker, r.name)
            if e.get("event") == "became leader"
        ]
        assert len(leading) == 1, leading

        # Prometheus scrapes both, with the README's scrape configuration
        prom_dir = tmp_path / "prometheus"
        prom_dir.mkdir(mode=0o755)
        (prom_dir / "targets.json").write_text(json.dumps(prometheus_targets([a, b])))
        (prom_dir / "prometheus.yml").write_text(
            yaml.safe_dump(prometheus_config("/etc/prometheus/targets.json"))
        )
        for f in prom_dir.iterdir():
            f.chmod(0o644)
        prom_sa = service_account_dir(
            tmp_path / "prom-sa", prometheus_identity, control_plane.ca_file, ns
        )
        prom_bin = shutil.which("prometheus", path="/usr/bin:/usr/local/bin")
        assert prom_bin, "Debian's prometheus is not installed (apt-get install prometheus)"
        names.append(prom_name)
        docker.cmd(
            "run", "--detach", "--name", prom_name, "--network", "host", "--read-only",
            "--user", "65534:65534", "--tmpfs", "/prometheus:mode=1777",
            "--volume", f"{prom_bin}:/bin/prometheus:ro",
            "--volume", f"{prom_dir}:/etc/prometheus:ro",
            "--volume", f"{prom_sa}:{SA_DIR}:ro",
            "--entrypoint", "/bin/prometheus",
            base_image(docker),
            "--config.file=/etc/prometheus/prometheus.yml",
            "--storage.tsdb.path=/prometheus",
            f"--web.listen-address={HOST}:{prom_port}",
        )  # fmt: skip
        prom = f"http://{HOST}:{prom_port}"

        async def targets_up() -> bool:
            try:
                async with http.get(f"{prom}/api/v1/targets") as resp:
                    active = (await resp.json())["data"]["activeTargets"]
            except (aiohttp.ClientError, ValueError, KeyError):
                return False
            return len(active) == 2 and all(t["health"] == "up" for t in active)

        await wait_for(targets_up, timeout=60, what="Prometheus scraping both replicas (up)")

        # pods bound by the leader
        first = await make("first", 6)
        await wait_for(lambda: pods_bound(first), timeout=60, what="pods bound by the leader")

        # every README query returns data (non-empty, not NaN)
        queries = readme_promql()
        assert len(queries) >= 5, queries

        async def answered(q: str) -> list[Any]:
            async with http.get(f"{prom}/api/v1/query", params={"query": q}) as resp:
                body = await resp.json()
            assert body["status"] == "success", (q, body)
            return [
                s for s in body["data"]["result"] if s["value"][1] not in ("NaN", "+Inf", "-Inf")
            ]

        # A histogram's series appear with its first observation, and a rate needs the
        # series to grow between two scrapes: once Prometheus has the first pods' series,
        # more pods arrive, as they do in a cluster that keeps scheduling.
        async def first_scraped() -> bool:
            sli = 'sum(scheduler_pod_scheduling_sli_duration_seconds_count{job="kscheduler"})'
            return any(float(s["value"][1]) >= len(first) for s in await answered(sli))

        await wait_for(first_scraped, timeout=30, what="the first pods' series scraped")
        second = await make("second", 4)
        await wait_for(lambda: pods_bound(second), timeout=60, what="more pods bound")

        unanswered: list[str] = []

        async def all_answered() -> bool:
            unanswered[:] = [q for q in queries if not await answered(q)]
            return not unanswered

        try:
            await wait_for(all_answered, timeout=60, interval=2, what="every README query")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; no data for {unanswered}") from None
        by_pod = {
            s["metric"]["pod"]: s["value"][1]
            for s in await answered(next(q for q in queries if "leader_election" in q))
        }
        assert by_pod == {leader.name: "1", standby.name: "0"}, by_pod

        # SIGKILL the leader: the standby takes over within the lease timings
        killed_at = time.monotonic()
        docker.cmd("kill", leader.name)
        for t in leader.tasks:
            t.cancel()
        # made after the kill, so that they wait while nobody leads (made before it,
        # the leader could bind one and die before logging it)
        gap = await make("gap", 4)
        standby_id = standby.identity(docker)

        async def standby_leads() -> bool:
            return await holder() == standby_id

        await wait_for(
            standby_leads, timeout=lease_duration + 3 * retry_period + 5, interval=0.05,
            what="the standby to take over",
        )  # fmt: skip
        timings["failover after docker kill (s)"] = time.monotonic() - killed_at
        assert timings["failover after docker kill (s)"] <= lease_duration + 2 * retry_period + 1
        after_kill = await make("after-kill", 4)
        await wait_for(
            lambda: pods_bound(gap + after_kill), timeout=60, what="pods bound after kill"
        )

        # a replacement replica (as the ReplicaSet would start), then SIGTERM the leader
        c = start("c")
        timings["start to ready c (s)"] = await ready_within(c)

        async def c_announced() -> str:
            return c.identity(docker)

        await wait_for(c_announced, timeout=30, what="c's election")
        await asyncio.sleep(2 * retry_period)  # c has read the Lease: a standby
        for t in standby.tasks:  # the kubelet stops probing a terminating container
            t.cancel()
        stopped_at = time.monotonic()
        # the kubelet's SIGTERM, then SIGKILL after the pod's grace period
        grace = deployment_pod_spec()["terminationGracePeriodSeconds"]
        stop = asyncio.create_task(
            asyncio.to_thread(
                docker.cmd, "stop", "--time", str(grace), standby.name, timeout=grace + 30
            )
        )
        c_id = c.identity(docker)

        async def c_leads() -> bool:
            return await holder() == c_id

        await wait_for(
            c_leads, timeout=2 * retry_period + 5, interval=0.05, what="hand-over on SIGTERM"
        )
        timings["failover after docker stop (s)"] = time.monotonic() - stopped_at
        await stop
        exit_code = docker.cmd("inspect", "-f", "{{.State.ExitCode}}", standby.name).strip()
        assert exit_code == "0", docker.logs(standby.name)[-3000:]
        released = [
            e for e in log_entries(docker, standby.name) if "releas" in str(e.get("event", ""))
        ]
        assert released or timings["failover after docker stop (s)"] < lease_duration
        assert timings["failover after docker stop (s)"] <= retry_period * 1.2 + 1.5
        last = await make("after-stop", 4)
        await wait_for(lambda: pods_bound(last), timeout=60, what="pods bound after stop")

        # no pod lost, none bound twice, none bound by anyone else
        every = first + second + gap + after_kill + last
        assert await pods_bound(every)
        bound = Counter(
            e["pod"]
            for r in replicas
            for e in log_entries(docker, r.name)
            if e.get("event") == "bound"
        )
        assert bound == Counter(f"{ns}/{n}" for n in every), bound
        # the kubelet's probes: every replica became ready, none would have been restarted
        for r in (a, b, c):
            assert r.ready_at is not None, f"{r.name} never passed its readiness probe"
            for kind, p in r.probes.items():
                assert p.tripped == 0, f"{r.name}: {kind} reached its failureThreshold"
        for r in (a, b, c):
            logs = docker.logs(r.name)
            assert not re.search(r"HTTP 403|forbidden", logs, re.I), logs[-3000:]
    finally:
        for r in replicas:
            for t in r.tasks:
                t.cancel()
        await asyncio.gather(*(t for r in replicas for t in r.tasks), return_exceptions=True)
        await http.close()
        for name in names:
            docker.cmd("rm", "--force", name, check=False)
        report = "\n".join(f"  {k}: {v:.2f}" for k, v in timings.items())
        print(f"\ncontainer timings:\n{report}")
        (tmp_path / "container-timings.json").write_text(json.dumps(timings, indent=2))


def assert_no_ca_bundle_in(docker: Docker, image: str) -> None:
    """The build-time CA bundle (a secret) left nothing in the image: no /run/secrets, no
    PIP_CERT, no file with the bundle's bytes."""
    out = docker.cmd(
        "run", "--rm", "--entrypoint", "sh", image, "-c",
        "ls -A /run/secrets 2>/dev/null; env | grep -c PIP_CERT || true",
    )  # fmt: skip
    assert out.split() == ["0"], out
    ca = os.environ.get("CA_BUNDLE", os.environ.get("PIP_CERT", ""))
    if ca and Path(ca).is_file():
        data = Path(ca).read_bytes()
        same_size = docker.cmd(
            "run", "--rm", "--entrypoint", "find", image,
            "/", "-xdev", "-type", "f", "-size", f"{len(data)}c", check=False,
        ).split()  # fmt: skip
        digest = hashlib.sha256(data).hexdigest()
        if same_size:
            sums = docker.cmd("run", "--rm", "--entrypoint", "sha256sum", image, *same_size)
            assert digest not in sums, f"the build's CA bundle is in the image:\n{sums}"
