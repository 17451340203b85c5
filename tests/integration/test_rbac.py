"""deploy/ on a real kube-apiserver with RBAC on: the manifests, the identity, the grant.

* Every manifest in deploy/ passes server-side dry-run (``?dryRun=All``) as written, the
  Deployment's pod template too. The ServiceMonitor (deploy/prometheus/) is checked only when
  the monitoring.coreos.com CRD is installed, which the harness never does: it is left out
  here, and only it may be left out.
* deploy/'s ServiceAccount and RBAC objects are created (moved into the test's namespace, and
  cluster-scoped names suffixed, so that nothing collides with kube-system), a token is minted
  for the ServiceAccount (TokenRequest), and kscheduler runs as the deployment runs it: two
  replicas, the Deployment's arguments, the ConfigMap's configuration with leader election on
  (short lease timings), authenticating with that token only. The replicas elect a leader,
  schedule pods, write events, hand the Lease over on SIGTERM, and log no 403.
* The same token is refused what a scheduler must not do: read secrets, delete or patch
  nodes, create pods in kube-system, grant itself roles, touch other Leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import aiohttp
import pytest_asyncio
import yaml

from kscheduler.config import load_config
from kscheduler.controlplane.builders import create_nodes, create_pods, make_node, make_pod
from kscheduler.controlplane.harness import ControlPlane, free_ports
from kscheduler.controlplane.rest import JSON, ApiError, RestClient
from kscheduler.informers import RESOURCES
from kscheduler.plugins import in_tree_registry
from tests.integration.runner import wait_for

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
#: The namespace deploy/ is written for.
DEPLOY_NAMESPACE = "kube-system"
SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"
#: kscheduler's log lines that mean a request was refused (kube.ApiError text).
REFUSED = re.compile(r"HTTP 403|forbidden", re.IGNORECASE)


# ---------------------------------------------------------------------------- reading deploy/


@dataclass(frozen=True)
class Manifest:
    file: str  # relative to deploy/
    obj: JSON

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    def __str__(self) -> str:
        return f"{self.file}: {self.kind}/{self.name}"


def manifests() -> list[Manifest]:
    """Every object in every YAML file under deploy/, kustomization files aside."""
    out = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append(Manifest(str(path.relative_to(DEPLOY)), doc))
    return out


def one(kind: str, *, file: str | None = None) -> JSON:
    found = [m.obj for m in manifests() if m.kind == kind and file in (None, m.file)]
    assert len(found) == 1, f"expected one {kind} in deploy/, found {len(found)}"
    return found[0]


def scheduler_config_text() -> str:
    return str(one("ConfigMap")["data"]["config.yaml"])


def container() -> JSON:
    containers = one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def arg_value(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith(f"{flag}="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
    return None


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# ---------------------------------------------------------------------------- API plumbing


async def resource_of(rest: RestClient, api_version: str, kind: str) -> tuple[str, bool] | None:
    """(plural, namespaced) of kind from discovery; None when the API is not served."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    try:
        listing = await rest.get(base)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    for r in listing["resources"]:
        if r["kind"] == kind and "/" not in r["name"]:
            return str(r["name"]), bool(r["namespaced"])
    return None


async def collection_path(rest: RestClient, obj: JSON, namespace: str | None = None) -> str:
    found = await resource_of(rest, obj["apiVersion"], obj["kind"])
    assert found is not None, f"{obj['apiVersion']} {obj['kind']} is not served"
    plural, namespaced = found
    base = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
    if not namespaced:
        return f"{base}/{plural}"
    ns = namespace or obj["metadata"].get("namespace") or "default"
    return f"{base}/namespaces/{ns}/{plural}"


async def status_of(call: Any) -> int:
    """HTTP status of an awaited RestClient call (200 when it succeeded)."""
    try:
        await call
    except ApiError as exc:
        return exc.status
    return 200


# ---------------------------------------------------------------------------- the manifests


def test_kustomizations_list_every_manifest() -> None:
    base = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    on_disk = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(base["resources"]) == on_disk
    prom = yaml.safe_load((DEPLOY / "prometheus" / "kustomization.yaml").read_text())
    assert prom["resources"] == ["rbac.yaml", "servicemonitor.yaml"]
    # kustomize's image override matches the Deployment's image by name
    image_name = container()["image"].split(":")[0]
    assert [i["name"] for i in base["images"]] == [image_name]


def test_manifests_agree_with_each_other_and_with_kscheduler() -> None:
    deployment = one("Deployment")
    pod_spec = deployment["spec"]["template"]["spec"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    c = container()
    sa = one("ServiceAccount")
    cm = one("ConfigMap")

    # every namespaced object sits in kube-system; bindings name our ServiceAccount (but
    # Prometheus's, which names its)
    for m in manifests():
        if m.file.startswith("examples/") or m.kind.startswith("Cluster"):
            continue
        assert m.obj["metadata"].get("namespace") == DEPLOY_NAMESPACE, str(m)
    for m in manifests():
        if m.kind in ("RoleBinding", "ClusterRoleBinding") and m.file != "prometheus/rbac.yaml":
            assert m.obj["subjects"] == [
                {
                    "kind": "ServiceAccount",
                    "name": sa["metadata"]["name"],
                    "namespace": sa["metadata"]["namespace"],
                }
            ], str(m)
    assert pod_spec["serviceAccountName"] == sa["metadata"]["name"]

    # --config points into the ConfigMap's volume; the configuration loads and elects
    config_path = arg_value(c["args"], "--config")
    assert config_path is not None
    mounts = {v["name"]: v["mountPath"] for v in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    (vol_name,) = [n for n, v in volumes.items() if "configMap" in v]
    assert volumes[vol_name]["configMap"]["name"] == cm["metadata"]["name"]
    mount, key = config_path.rsplit("/", 1)
    assert mounts[vol_name] == mount and key in cm["data"]
    cfg = load_config(scheduler_config_text(), registry=in_tree_registry())
    le = cfg.leader_election
    assert le.leader_elect and le.resource_name != "kube-scheduler"
    assert le.resource_namespace == DEPLOY_NAMESPACE
    example = one("Pod", file="examples/pod.yaml")
    assert example["spec"]["schedulerName"] in {p.scheduler_name for p in cfg.profiles}

    # the Lease Role is for exactly the configured Lease
    (lease_rule,) = [r for r in one("Role")["rules"] if "leases" in r["resources"]]
    assert one("Role")["metadata"]["namespace"] == le.resource_namespace
    assert lease_rule["resourceNames"] == [le.resource_name]
    assert set(lease_rule["verbs"]) == {"get", "update"}

    # probes and metrics on the port kscheduler serves (--secure-port, default 10259, HTTPS);
    # no plain-HTTP port
    (port,) = c["ports"]
    assert arg_value(c["args"], "--insecure-port") in (None, "0")
    expected_port = int(arg_value(c["args"], "--secure-port") or 10259)
    assert port["containerPort"] == expected_port
    for probe, path in (
        ("startupProbe", "/livez"),
        ("livenessProbe", "/livez"),
        ("readinessProbe", "/readyz"),
    ):
        assert c[probe]["httpGet"]["path"] == path
        assert c[probe]["httpGet"]["port"] == port["name"]
        assert c[probe]["httpGet"].get("scheme") == "HTTPS"

    # hardening: the image's uid, nothing writable but the emptyDir
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["securityContext"]["runAsUser"] == 65532
    assert pod_spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert c["resources"]["requests"] and c["resources"]["limits"]
    assert deployment["spec"]["replicas"] == 2

    # Service -> pods, ServiceMonitor -> Service, PDB -> pods
    svc = one("Service")
    assert selects(svc["spec"]["selector"], pod_labels)
    (svc_port,) = svc["spec"]["ports"]
    assert svc_port["targetPort"] in (port["name"], port["containerPort"])
    sm = one("ServiceMonitor")
    assert selects(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"])
    assert svc["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"]
    assert [e["port"] for e in sm["spec"]["endpoints"]] == [svc_port["name"]]
    # ... over HTTPS with Prometheus's token, which the binding beside it allows /metrics
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["bearerTokenFile"]
    readers = {m.name: m.obj["rules"] for m in manifests() if m.file == "metrics-reader.yaml"}
    assert readers == {
        "kscheduler:metrics-reader": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        "kscheduler:debug-reader": [{"nonResourceURLs": ["/debug/*"], "verbs": ["get"]}],
    }
    prom_binding = one("ClusterRoleBinding", file="prometheus/rbac.yaml")
    assert prom_binding["roleRef"]["name"] == "kscheduler:metrics-reader"
    assert [s["kind"] for s in prom_binding["subjects"]] == ["ServiceAccount"]
    assert selects(one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"], pod_labels)
    assert selects(deployment["spec"]["selector"]["matchLabels"], pod_labels)


async def test_every_manifest_passes_server_side_dry_run(rest: RestClient, namespace: str) -> None:
    crd_installed = (
        await status_of(
            rest.get(
                f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{SERVICE_MONITOR_CRD}"
            )
        )
        == 200
    )
    checked: list[str] = []
    left_out: list[str] = []
    for m in manifests():
        if await resource_of(rest, m.obj["apiVersion"], m.kind) is None:
            left_out.append(str(m))
            continue
        # the example pod names no namespace: it goes wherever the user applies it
        ns = namespace if m.file.startswith("examples/") else None
        path = await collection_path(rest, m.obj, ns)
        try:
            await rest.post(path, m.obj, {"dryRun": "All", "fieldValidation": "Strict"})
        except ApiError as exc:
            raise AssertionError(f"{m} fails server-side dry-run: {exc}") from exc
        checked.append(str(m))
    # The Deployment's pods, as the ReplicaSet would create them in kube-system.
    deployment = one("Deployment")
    template = deployment["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **template["metadata"],
            "generateName": "kscheduler-",
            "namespace": DEPLOY_NAMESPACE,
        },
        "spec": template["spec"],
    }
    # The ServiceAccount admission plugin wants the pod's account to exist: create it
    # for real for this one check.
    sa = one("ServiceAccount")
    sa_path = f"/api/v1/namespaces/{DEPLOY_NAMESPACE}/serviceaccounts"
    await rest.post(sa_path, sa)
    try:
        await rest.post(
            f"/api/v1/namespaces/{DEPLOY_NAMESPACE}/pods",
            pod,
            {"dryRun": "All", "fieldValidation": "Strict"},
        )
    finally:
        await rest.delete(f"{sa_path}/{sa['metadata']['name']}")
    # Only the ServiceMonitor may be left out, and only when its CRD is not installed (the
    # harness installs no CRDs; test_manifests_agree_with_each_other_and_with_kscheduler
    # checks it against the Service instead).
    expected_out = (
        [] if crd_installed else ["prometheus/servicemonitor.yaml: ServiceMonitor/kscheduler"]
    )
    assert left_out == expected_out
    assert len(checked) == len(manifests()) - len(left_out) >= 11


# ---------------------------------------------------------------------------- the identity


@dataclass(frozen=True)
class Identity:
    """deploy/'s ServiceAccount and RBAC, applied for one test."""

    namespace: str  # where the ServiceAccount, its Role and the Lease are
    service_account: str
    token: str
    kubeconfig: Path
    created: tuple[str, ...]  # object paths, deleted afterwards


def relocated(objs: list[JSON], namespace: str) -> list[JSON]:
    """deploy/'s objects moved from kube-system to ``namespace``.

    Bindings to a Role that deploy/ does not define (extension-apiserver-authentication-reader)
    stay beside that Role in kube-system. Objects outside ``namespace`` get a suffix so that
    parallel or repeated runs never collide.
    """
    ours = {o["metadata"]["name"] for o in objs if o["kind"] == "Role"}
    out = []
    for obj in copy.deepcopy(objs):
        meta = obj["metadata"]
        stays = (
            obj["kind"] == "RoleBinding"
            and obj["roleRef"]["kind"] == "Role"
            and obj["roleRef"]["name"] not in ours
        )
        if "namespace" in meta and not stays:
            meta["namespace"] = namespace
        else:
            meta["name"] = f"{meta['name']}:{namespace}"
        for subject in obj.get("subjects", []):
            if subject.get("kind") == "ServiceAccount":
                subject["namespace"] = namespace
        out.append(obj)
    return out


async def self_allowed(client: RestClient, attributes: JSON) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }
    answer = await client.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
    return bool(answer["status"].get("allowed"))


async def first_permission(rest: RestClient, binding: JSON) -> JSON:
    """Access-review attributes for the first permission the binding's role grants."""
    ref = binding["roleRef"]
    ns = binding["metadata"].get("namespace")
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    if ref["kind"] == "Role":
        role = await rest.get(f"{rbac}/namespaces/{ns}/roles/{ref['name']}")
    else:
        role = await rest.get(f"{rbac}/clusterroles/{ref['name']}")
    rule = role["rules"][0]
    resource, _, subresource = rule["resources"][0].partition("/")
    attributes: JSON = {
        "verb": rule["verbs"][0],
        "group": rule["apiGroups"][0],
        "resource": resource,
        "subresource": subresource,
    }
    if rule.get("resourceNames"):
        attributes["name"] = rule["resourceNames"][0]
    if ns:
        attributes["namespace"] = ns
    return attributes


@pytest_asyncio.fixture
async def identity(
    control_plane: ControlPlane, rest: RestClient, namespace: str, tmp_path: Path
) -> AsyncIterator[Identity]:
    objs = [m.obj for m in manifests() if m.file in ("serviceaccount.yaml", "rbac.yaml")]
    assert {o["kind"] for o in objs} == {
        "ServiceAccount",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    }
    created: list[str] = []
    try:
        applied = relocated(objs, namespace)
        for obj in applied:
            path = await collection_path(rest, obj)
            await rest.post(path, obj)
            created.append(f"{path}/{obj['metadata']['name']}")
        (sa,) = [o for o in objs if o["kind"] == "ServiceAccount"]
        sa_name = sa["metadata"]["name"]
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        }
        minted = await rest.post(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa_name}/token", request
        )
        token = minted["status"]["token"]
        kubeconfig = control_plane.kubeconfig_for_token(
            token, tmp_path / "kscheduler.kubeconfig", user=sa_name
        )
        async with control_plane.client(token) as client:
            who = await client.post(
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            )
            assert who["status"]["userInfo"]["username"] == (
                f"system:serviceaccount:{namespace}:{sa_name}"
            )

            # The RBAC authorizer sees new bindings through its informers: wait until each
            # binding is in effect (one permission of its role allowed), whatever it grants.
            probes = [await first_permission(rest, b) for b in applied if "roleRef" in b]

            async def in_effect() -> bool:
                return all([await self_allowed(client, p) for p in probes])

            await wait_for(in_effect, timeout=15, what="deploy/'s bindings to take effect")
        yield Identity(namespace, sa_name, token, kubeconfig, tuple(created))
    finally:
        for path in reversed(created):
            with contextlib.suppress(ApiError):
                await rest.delete(path)


async def test_identity_is_allowed_everything_kscheduler_does(
    control_plane: ControlPlane, identity: Identity
) -> None:
    ns = identity.namespace
    cfg = yaml.safe_load(scheduler_config_text())
    lease = cfg["leaderElection"]["resourceName"]
    wanted: list[JSON] = []
    # informers: list + watch of every kind kscheduler knows (plus CSIStorageCapacity, which
    # volume binding reads)
    kinds = {name: r.path for name, r in RESOURCES.items()}
    kinds["csistoragecapacities"] = "/apis/storage.k8s.io/v1/csistoragecapacities"
    for plural, path in sorted(kinds.items()):
        group = "" if path.startswith("/api/") else path.split("/")[2]
        for verb in ("list", "watch", "get"):
            wanted.append({"verb": verb, "group": group, "resource": plural})
    # writes
    wanted += [
        {"verb": "create", "resource": "pods", "subresource": "binding", "namespace": ns},
        {"verb": "patch", "resource": "pods", "subresource": "status", "namespace": ns},
        {"verb": "delete", "resource": "pods", "namespace": ns},
        {"verb": "create", "group": "events.k8s.io", "resource": "events", "namespace": ns},
        {"verb": "patch", "group": "events.k8s.io", "resource": "events", "namespace": ns},
        {"verb": "create", "group": "coordination.k8s.io", "resource": "leases", "namespace": ns},
        {
            "verb": "get",
            "group": "coordination.k8s.io",
            "resource": "leases",
            "name": lease,
            "namespace": ns,
        },
        {
            "verb": "update",
            "group": "coordination.k8s.io",
            "resource": "leases",
            "name": lease,
            "namespace": ns,
        },
        {"verb": "update", "resource": "persistentvolumes"},
        {"verb": "patch", "resource": "persistentvolumes"},
        {"verb": "update", "resource": "persistentvolumeclaims", "namespace": ns},
        {"verb": "patch", "resource": "persistentvolumeclaims", "namespace": ns},
        # DRA: the claim's finalizer (update), its allocation and reservedFor (update of
        # status), deallocation in PostFilter (update) and Unreserve (patch of status);
        # the claim for a pod's extended resources backed by DRA (create in PreBind,
        # delete in Unreserve and PostFilter; the pod's extendedResourceClaimStatus is a
        # patch of pods/status, above)
        {
            "verb": "create",
            "group": "resource.k8s.io",
            "resource": "resourceclaims",
            "namespace": ns,
        },
        {
            "verb": "delete",
            "group": "resource.k8s.io",
            "resource": "resourceclaims",
            "namespace": ns,
        },
        {
            "verb": "update",
            "group": "resource.k8s.io",
            "resource": "resourceclaims",
            "namespace": ns,
        },
        {
            "verb": "update",
            "group": "resource.k8s.io",
            "resource": "resourceclaims",
            "subresource": "status",
            "namespace": ns,
        },
        {
            "verb": "patch",
            "group": "resource.k8s.io",
            "resource": "resourceclaims",
            "subresource": "status",
            "namespace": ns,
        },
        {
            "verb": "get",
            "resource": "configmaps",
            "name": "extension-apiserver-authentication",
            "namespace": "kube-system",
        },
        # delegated authentication and authorization of the secure port
        {"verb": "create", "group": "authentication.k8s.io", "resource": "tokenreviews"},
        {"verb": "create", "group": "authorization.k8s.io", "resource": "subjectaccessreviews"},
    ]
    async with control_plane.client(identity.token) as client:
        denied = [w for w in wanted if not await self_allowed(client, w)]
    assert denied == [], f"deploy/'s RBAC does not allow: {denied}"


async def test_identity_is_refused_what_it_must_not_do(
    control_plane: ControlPlane, rest: RestClient, identity: Identity, fresh_nodes: None
) -> None:
    ns = identity.namespace
    await create_nodes(rest, [make_node("rbac-victim")])
    other_lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "kube-controller-manager", "namespace": ns},
        "spec": {"holderIdentity": "someone-else"},
    }
    await rest.post(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", other_lease)
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    async with control_plane.client(identity.token) as sa:
        refused = {
            "list secrets everywhere": sa.get("/api/v1/secrets"),
            "list secrets in kube-system": sa.get("/api/v1/namespaces/kube-system/secrets"),
            "list secrets in its own namespace": sa.get(f"/api/v1/namespaces/{ns}/secrets"),
            "delete a node": sa.delete("/api/v1/nodes/rbac-victim"),
            "patch a node": sa.patch(
                "/api/v1/nodes/rbac-victim", {"spec": {"unschedulable": True}}
            ),
            "create a pod in kube-system": sa.post(
                "/api/v1/namespaces/kube-system/pods", make_pod("intruder", "kube-system")
            ),
            "create a pod in its own namespace": sa.post(
                f"/api/v1/namespaces/{ns}/pods", make_pod("intruder", ns)
            ),
            "read configmaps in kube-system": sa.get("/api/v1/namespaces/kube-system/configmaps"),
            "read another Lease": sa.get(f"{leases}/kube-controller-manager"),
            "take over another Lease": sa.put(
                f"{leases}/kube-controller-manager",
                {**other_lease, "spec": {"holderIdentity": "kscheduler"}},
            ),
            "bind itself cluster-admin": sa.post(
                "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": f"escalate-{ns}"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "cluster-admin",
                    },
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "name": identity.service_account,
                            "namespace": ns,
                        }
                    ],
                },
            ),
        }
        statuses = {what: await status_of(call) for what, call in refused.items()}
    assert statuses == dict.fromkeys(refused, 403)
    node = await rest.get("/api/v1/nodes/rbac-victim")
    assert not node["spec"].get("unschedulable")


# ------------------------------------------------------------------- kscheduler as deployed


@dataclass
class Replica:
    proc: asyncio.subprocess.Process
    port: int
    log_path: Path
    log: TextIO

    @property
    def identity(self) -> str:
        """The holderIdentity kscheduler writes into the Lease, as its log announces it."""
        self.log.flush()
        for line in self.log_path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("event") == "waiting for the leader lease":
                return str(entry["identity"])
        return ""

    def log_tail(self, lines: int = 40) -> str:
        self.log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def deployed_args(config_file: Path) -> list[str]:
    """The Deployment's container arguments, with the config file at ``config_file``."""
    c = container()
    assert "command" not in c, "the image's ENTRYPOINT (kscheduler) is expected to run"
    args = [a for a in c["args"] if not a.startswith("--config")]
    assert len(args) == len(c["args"]) - 1
    return [f"--config={config_file}", *args]


@contextlib.contextmanager
def open_logs(paths: list[Path]) -> Iterator[list[TextIO]]:
    files: list[TextIO] = [p.open("w") for p in paths]
    try:
        yield files
    finally:
        for f in files:
            f.close()


async def start_replica(args: list[str], port: int, log_path: Path, log: TextIO) -> Replica:
    # the token in --kubeconfig is the only credential: no $KUBECONFIG, no in-cluster config
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kscheduler",
        *args,
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        cwd=REPO,
    )
    return Replica(proc, port, log_path, log)


async def http_get(session: aiohttp.ClientSession, r: Replica, path: str) -> tuple[int, str]:
    if r.proc.returncode is not None:
        raise AssertionError(
            f"kscheduler (pid {r.proc.pid}) exited with {r.proc.returncode}:\n{r.log_tail()}"
        )
    try:
        async with session.get(f"https://127.0.0.1:{r.port}{path}", ssl=False) as resp:
            return resp.status, await resp.text()
    except aiohttp.ClientError:
        return 0, ""


async def holder_of(rest: RestClient, lease_path: str) -> str:
    """The Lease's holderIdentity; "" when it is free or does not exist."""
    try:
        lease = await rest.get(lease_path)
    except ApiError as exc:
        if exc.status == 404:
            return ""
        raise
    return str(lease["spec"].get("holderIdentity") or "")


async def all_bound(rest: RestClient, ns: str, names: list[str]) -> bool:
    """Whether every named pod of ns is bound to a node."""
    pods = await rest.list(f"/api/v1/namespaces/{ns}/pods")
    nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}
    return all(nodes.get(n) for n in names)


async def exercise_other_writes(
    rest: RestClient, ns: str, scheduler_name: str, cluster_objects: list[str]
) -> None:
    """Pods that make kscheduler write what it writes besides bindings, events and the
    Lease; cluster-scoped objects made here are appended to cluster_objects."""
    sc_name, pv_name = f"wffc-{ns}", f"local-{ns}"
    low, high = f"low-{ns}", f"high-{ns}"
    for path, body in (
        (
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "metadata": {"name": sc_name},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            },
        ),
        (
            "/api/v1/persistentvolumes",
            {
                "metadata": {"name": pv_name},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": sc_name,
                    "local": {"path": "/mnt/data"},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/hostname",
                                            "operator": "In",
                                            "values": ["rbac-2"],
                                        }
                                    ]
                                }
                            ]
                        }
                    },
                },
            },
        ),
        ("/apis/scheduling.k8s.io/v1/priorityclasses", {"metadata": {"name": low}, "value": 10}),
        ("/apis/scheduling.k8s.io/v1/priorityclasses", {"metadata": {"name": high}, "value": 1000}),
    ):
        await rest.post(path, body)
        cluster_objects.append(f"{path}/{body['metadata']['name']}")
    await rest.post(
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
        {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": sc_name,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    claimed = make_pod("claimed", ns, cpu="100m", scheduler_name=scheduler_name)
    claimed["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    # each node has 4 CPUs; the fillers leave less than 3 free on either
    fillers = [
        make_pod(f"filler-{i}", ns, cpu="3", scheduler_name=scheduler_name, priority_class_name=low)
        for i in range(2)
    ]
    await create_pods(
        rest, [claimed, *fillers, make_pod("too-big", ns, cpu="64", scheduler_name=scheduler_name)]
    )

    async def settled() -> bool:
        pods = {p["metadata"]["name"]: p for p in await rest.list(f"/api/v1/namespaces/{ns}/pods")}
        placed = all(pods[n]["spec"].get("nodeName") for n in ("claimed", "filler-0", "filler-1"))
        reported = any(
            c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in (pods["too-big"].get("status") or {}).get("conditions") or []
        )
        claim = await rest.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data")
        return placed and reported and (claim.get("status") or {}).get("phase") == "Bound"

    await wait_for(settled, timeout=60, what="the claim bound, fillers placed, too-big reported")
    pv = await rest.get(f"/api/v1/persistentvolumes/{pv_name}")
    assert pv["spec"]["claimRef"]["name"] == "data" and pv["status"]["phase"] == "Bound"
    claimed_now = await rest.get(f"/api/v1/namespaces/{ns}/pods/claimed")
    assert claimed_now["spec"]["nodeName"] == "rbac-2"

    await create_pods(
        rest,
        [make_pod("vip", ns, cpu="3", scheduler_name=scheduler_name, priority_class_name=high)],
    )

    async def vip_bound_after_preemption() -> bool:
        pods = {p["metadata"]["name"]: p for p in await rest.list(f"/api/v1/namespaces/{ns}/pods")}
        evicted = len([n for n in ("filler-0", "filler-1") if n not in pods]) == 1
        return evicted and bool(pods["vip"]["spec"].get("nodeName"))

    await wait_for(vip_bound_after_preemption, timeout=60, what="vip bound after preempting")


async def delete_pods_and(rest: RestClient, ns: str, paths: list[str]) -> None:
    with contextlib.suppress(ApiError):
        await rest.delete(f"/api/v1/namespaces/{ns}/pods", {"gracePeriodSeconds": 0})
    with contextlib.suppress(ApiError):
        await rest.delete(f"/api/v1/namespaces/{ns}/persistentvolumeclaims")
    for path in reversed(paths):
        with contextlib.suppress(ApiError):
            await rest.delete(path)


async def test_kscheduler_runs_on_the_service_account_token_with_leader_election(
    control_plane: ControlPlane,
    rest: RestClient,
    identity: Identity,
    fresh_nodes: None,
    tmp_path: Path,
) -> None:
    ns = identity.namespace
    # The ConfigMap's configuration, with the Lease in the test's namespace (where the Role
    # was put) and short timings so that the hand-over is quick.
    cfg = yaml.safe_load(scheduler_config_text())
    le = cfg["leaderElection"]
    assert le["leaderElect"] is True
    le.update(resourceNamespace=ns, leaseDuration="4s", renewDeadline="3s", retryPeriod="1s")
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{le['resourceName']}"
    scheduler_name = cfg["profiles"][0]["schedulerName"]
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(cfg))
    args = [*deployed_args(config_file), f"--kubeconfig={identity.kubeconfig}"]

    await create_nodes(rest, [make_node("rbac-1", cpu="4"), make_node("rbac-2", cpu="4")])

    async def lease_holder() -> str:
        return await holder_of(rest, lease_path)

    async def bound(names: list[str]) -> bool:
        return await all_bound(rest, ns, names)

    async def scheduled_events(names: list[str]) -> bool:
        events = await rest.list(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")
        seen = {
            e["regarding"]["name"]
            for e in events
            if e.get("reason") == "Scheduled" and e.get("reportingController") == scheduler_name
        }
        return set(names) <= seen

    log_paths = [tmp_path / "replica-0.log", tmp_path / "replica-1.log"]
    replicas: list[Replica] = []
    cluster_objects: list[str] = []
    with open_logs(log_paths) as logs:
        try:
            ports = free_ports(2)
            for i in range(2):
                replicas.append(await start_replica(args, ports[i], log_paths[i], logs[i]))
            # /readyz and /livez are open; /metrics over HTTPS needs a token that the
            # replica, on its ServiceAccount's token, gets reviewed and authorized
            admin = {"Authorization": f"Bearer {control_plane.admin_token}"}
            async with aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=5), headers=admin
            ) as http:

                async def all_ready() -> bool:
                    codes = [(await http_get(http, r, "/readyz"))[0] for r in replicas]
                    return codes == [200, 200]

                await wait_for(all_ready, timeout=60, what="both replicas ready (/readyz)")
                for r in replicas:
                    assert (await http_get(http, r, "/livez"))[0] == 200
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as anon:
                    assert (await http_get(anon, replicas[0], "/livez"))[0] == 200
                    assert (await http_get(anon, replicas[0], "/metrics"))[0] == 401

                # one leader, the other standing by
                holder = await wait_for(lease_holder, timeout=30, what="a Lease holder")
                by_identity = {r.identity: r for r in replicas}
                assert holder in by_identity, f"{holder!r} is neither replica"
                leader = by_identity[holder]
                (standby,) = [r for r in replicas if r is not leader]
                gauge = re.escape(f'leader_election_master_status{{name="{le["resourceName"]}"}}')
                assert re.search(
                    rf"^{gauge} 1(\.0)?$", (await http_get(http, leader, "/metrics"))[1], re.M
                )
                assert re.search(
                    rf"^{gauge} 0(\.0)?$", (await http_get(http, standby, "/metrics"))[1], re.M
                )

                first = [f"first-{i}" for i in range(3)]
                await create_pods(
                    rest,
                    [make_pod(n, ns, cpu="100m", scheduler_name=scheduler_name) for n in first],
                )
                await wait_for(lambda: bound(first), what="pods bound by the leader")
                await wait_for(lambda: scheduled_events(first), what="Scheduled events")
                metrics = (await http_get(http, leader, "/metrics"))[1]
                assert re.search(
                    r'scheduler_schedule_attempts_total\{[^}]*result="scheduled"[^}]*\} [1-9]',
                    metrics,
                ), "the leader's /metrics shows no scheduled attempt"

                # the other writes, made with the token too: VolumeBinding's PUT of a
                # volume (the PV controller then binds the claim), a pending pod's status,
                # and preemption's delete of a victim
                await exercise_other_writes(rest, ns, scheduler_name, cluster_objects)

                # SIGTERM the leader: it exits cleanly and releases the Lease; the standby
                # takes it over and schedules from then on
                leader.proc.send_signal(signal.SIGTERM)
                async with asyncio.timeout(30):
                    assert await leader.proc.wait() == 0, leader.log_tail()

                async def standby_leads() -> bool:
                    return await lease_holder() == standby.identity

                await wait_for(standby_leads, timeout=20, what="the standby to take the Lease over")
                second = [f"second-{i}" for i in range(2)]
                await create_pods(
                    rest,
                    [make_pod(n, ns, cpu="100m", scheduler_name=scheduler_name) for n in second],
                )
                await wait_for(lambda: bound(second), what="pods bound by the new leader")
                await wait_for(lambda: scheduled_events(second), what="Scheduled events")

                standby.proc.send_signal(signal.SIGTERM)
                async with asyncio.timeout(30):
                    assert await standby.proc.wait() == 0, standby.log_tail()
                assert await lease_holder() == "", "the last leader did not release the Lease"
        finally:
            for r in replicas:
                if r.proc.returncode is None:
                    r.proc.kill()
                    await r.proc.wait()
            await delete_pods_and(rest, ns, cluster_objects)

    for r, path in zip(replicas, log_paths, strict=True):
        refused = [line for line in path.read_text().splitlines() if REFUSED.search(line)]
        assert refused == [], f"replica pid {r.proc.pid} was refused requests:\n" + "\n".join(
            refused[:10]
        )
