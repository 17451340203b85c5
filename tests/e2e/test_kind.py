"""kscheduler on kind, end to end: image -> kind -> deploy/ -> a pod bound by kscheduler.

Needs a Docker engine, kind and kubectl (``make e2e-kind``); skipped with the reason when one
is missing. ``KIND_CLUSTER=name`` uses that existing cluster and leaves it (and kscheduler in
it) in place; without it a cluster is created for the test and deleted afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
EXAMPLE = DEPLOY / "examples" / "pod.yaml"
OWN_CLUSTER = "kscheduler-e2e"


def why_not_runnable() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return "no Docker engine: kind cannot run here (no docker command)"
    try:
        info = subprocess.run([docker, "info"], capture_output=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return "no Docker engine: kind cannot run here (`docker info` timed out)"
    if info.returncode != 0:
        return "no Docker engine: kind cannot run here (`docker info` failed)"
    for tool in ("kind", "kubectl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: the kind end-to-end test cannot run here"
    return None


def run(*argv: str, timeout: float = 600, check: bool = True) -> str:
    """Run a command; its stdout. A failure shows the command and its output."""
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"`{' '.join(argv)}` exited with {done.returncode}\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


def eventually(check: Callable[[], Any], *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last={last!r}")


@dataclass(frozen=True)
class Kind:
    name: str
    kubeconfig: Path

    def kubectl(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        return run(
            "kubectl", f"--kubeconfig={self.kubeconfig}", *args, timeout=timeout, check=check
        )

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json"))


@pytest.fixture(scope="module")
def kind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kind]:
    reason = why_not_runnable()
    if reason:
        pytest.skip(reason)
    name = os.environ.get("KIND_CLUSTER", "")
    create = not name
    name = name or OWN_CLUSTER
    exists = name in run("kind", "get", "clusters").split()
    if create and not exists:
        run("kind", "create", "cluster", "--name", name, "--wait", "120s", timeout=900)
    elif not exists:
        pytest.fail(f"KIND_CLUSTER={name}: no such kind cluster (kind get clusters)")
    try:
        kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
        kubeconfig.write_text(run("kind", "get", "kubeconfig", "--name", name))
        yield Kind(name, kubeconfig)
    finally:
        if create and not exists:
            run("kind", "delete", "cluster", "--name", name, check=False)


def deployment_image() -> str:
    for doc in yaml.safe_load_all((DEPLOY / "deployment.yaml").read_text()):
        if doc and doc["kind"] == "Deployment":
            return str(doc["spec"]["template"]["spec"]["containers"][0]["image"])
    raise AssertionError("no Deployment in deploy/deployment.yaml")


def diagnostics(k: Kind) -> str:
    selector = "app.kubernetes.io/name=kscheduler"
    parts = [
        k.kubectl("-n", "kube-system", "describe", "pods", "-l", selector, check=False),
        k.kubectl("-n", "kube-system", "logs", "-l", selector, "--tail=50", check=False),
    ]
    return "\n".join(parts)


def test_kscheduler_on_kind_binds_the_example_pod(kind: Kind) -> None:
    image = deployment_image()
    run("docker", "build", "-t", image, str(REPO), timeout=1200)
    run("kind", "load", "docker-image", image, "--name", kind.name, timeout=600)

    kind.kubectl("apply", "-k", str(DEPLOY))
    rollout = kind.kubectl(
        "-n",
        "kube-system",
        "rollout",
        "status",
        "deployment/kscheduler",
        "--timeout=300s",
        timeout=330,
        check=False,
    )
    assert "successfully rolled out" in rollout, f"{rollout}\n{diagnostics(kind)}"

    ns = f"kscheduler-e2e-{uuid.uuid4().hex[:6]}"
    kind.kubectl("create", "namespace", ns)
    try:
        kind.kubectl("-n", ns, "apply", "-f", str(EXAMPLE))
        pod_name = yaml.safe_load(EXAMPLE.read_text())["metadata"]["name"]
        waited = kind.kubectl(
            "-n",
            ns,
            "wait",
            "--for=condition=PodScheduled",
            f"pod/{pod_name}",
            "--timeout=180s",
            timeout=210,
            check=False,
        )
        assert "condition met" in waited, f"{waited}\n{diagnostics(kind)}"
        pod = kind.kubectl_json("-n", ns, "get", "pod", pod_name)
        assert pod["spec"]["schedulerName"] == "kscheduler"
        assert pod["spec"].get("nodeName"), pod

        # the Scheduled event comes from kscheduler, not from kube-scheduler
        def scheduled_by_kscheduler() -> bool:
            events = kind.kubectl_json("-n", ns, "get", "events.events.k8s.io")["items"]
            return any(
                e.get("reason") == "Scheduled"
                and e.get("reportingController") == "kscheduler"
                and e.get("regarding", {}).get("name") == pod_name
                for e in events
            )

        eventually(scheduled_by_kscheduler, timeout=60, what="a Scheduled event from kscheduler")

        # one replica holds the Lease kube-system/kscheduler (holder: <pod name>_<random UUID>)
        lease = kind.kubectl_json("-n", "kube-system", "get", "lease", "kscheduler")
        replicas = kind.kubectl_json(
            "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=kscheduler"
        )["items"]
        names = {p["metadata"]["name"] for p in replicas}
        holder = lease["spec"].get("holderIdentity", "")
        assert holder.rsplit("_", 1)[0] in names, (holder, names)

        # /metrics over HTTPS through the Service, with a ServiceAccount token bound to
        # kscheduler:metrics-reader (what Prometheus does); without a token: 401
        binding = f"kscheduler-metrics-{ns}"
        kind.kubectl(
            "create",
            "clusterrolebinding",
            binding,
            "--clusterrole=kscheduler:metrics-reader",
            f"--serviceaccount={ns}:default",
        )
        token = kind.kubectl("-n", ns, "create", "token", "default").strip()
        status, metrics = scrape_through_port_forward(kind, token)
        assert status == 200, metrics
        assert "scheduler_schedule_attempts_total" in metrics
        assert "leader_election_master_status" in metrics
        assert scrape_through_port_forward(kind, None)[0] == 401
    finally:
        kind.kubectl("delete", "clusterrolebinding", f"kscheduler-metrics-{ns}", check=False)
        kind.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def scrape_through_port_forward(k: Kind, token: str | None) -> tuple[int, str]:
    """GET https://<Service kscheduler>:10259/metrics via kubectl port-forward."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    forward = subprocess.Popen(
        [
            "kubectl",
            f"--kubeconfig={k.kubeconfig}",
            "-n",
            "kube-system",
            "port-forward",
            "svc/kscheduler",
            f"{port}:10259",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the self-signed certificate made at start
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")

    def get() -> tuple[int, str] | None:
        try:
            with urllib.request.urlopen(request, context=ctx, timeout=10) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()
        except OSError:
            return None  # the forward is not up yet

    try:
        answer: tuple[int, str] = eventually(get, timeout=60, what="a port-forwarded scrape")
        return answer
    finally:
        forward.terminate()
        forward.wait(timeout=10)
