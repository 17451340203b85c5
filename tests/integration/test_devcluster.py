"""`kscheduler dev-cluster` as a new user meets it: kubectl creates a Deployment, its
template is pointed at kscheduler, and the rollout reaches Available."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from kscheduler.controlplane.binaries import find_control_plane

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 120


def _read_until(proc: subprocess.Popen[str], pattern: str, timeout: float) -> str:
    """Lines of proc's stdout until one matches pattern; all of them."""
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if re.search(pattern, line):
            return "".join(seen)
    raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(seen)}")


def test_kubectl_deployment_rolls_out_on_dev_cluster(tmp_path: Path) -> None:
    kubectl = find_control_plane().kube_apiserver.parent / "kubectl"
    assert kubectl.is_file(), f"{kubectl} missing: `make control-plane` builds it"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cluster = subprocess.Popen(
        [sys.executable, "-m", "kscheduler", "dev-cluster", "--nodes", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    scheduler: subprocess.Popen[bytes] | None = None
    try:
        text = _read_until(cluster, r"Press Ctrl-C", TIMEOUT)
        assert "kube-controller-manager" in text and "kwok" in text
        assert "no container ever runs" in text
        admin = re.search(r"admin kubeconfig:\s+(\S+)", text)
        sched = re.search(r"scheduler kubeconfig:\s+(\S+)", text)
        assert admin and sched, text
        workdir = Path(admin.group(1)).parent
        kenv = {**env, "KUBECONFIG": admin.group(1)}

        def kubectl_run(*args: str) -> str:
            done = subprocess.run(
                [str(kubectl), *args], env=kenv, capture_output=True, text=True, timeout=TIMEOUT
            )
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
            return done.stdout

        with open(tmp_path / "kscheduler.log", "wb") as log:
            scheduler = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kscheduler",
                    "--kubeconfig",
                    sched.group(1),
                    "--secure-port",
                    "0",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
            kubectl_run("create", "deployment", "web", "--image=nginx", "--replicas=3")
            kubectl_run(
                "patch",
                "deployment",
                "web",
                "-p",
                '{"spec":{"template":{"spec":{"schedulerName":"kscheduler"}}}}',
            )
            out = kubectl_run("rollout", "status", "deployment/web", f"--timeout={TIMEOUT}s")
            assert "successfully rolled out" in out
            available = kubectl_run(
                "get",
                "deployment",
                "web",
                "-o",
                'jsonpath={.status.conditions[?(@.type=="Available")].status}',
            )
            assert available == "True"
            phases = kubectl_run(
                "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].status.phase}"
            )
            assert phases.split() == ["Running"] * 3
        cluster.send_signal(signal.SIGTERM)
        assert cluster.wait(60) == 0
        assert not workdir.exists(), "dev-cluster left its state behind"
    finally:
        for proc in (scheduler, cluster):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
