"""The real kube-scheduler, run as a reference next to kscheduler.

    with ReferenceScheduler.for_control_plane(cp, scheduler_name="reference-scheduler") as ref:
        ...  # pods with spec.schedulerName "reference-scheduler" get bound by kube-scheduler

It runs with leader election off, one profile for ``scheduler_name``, and the
client QPS/burst given (kube-scheduler's own defaults are 50/100). /readyz on
its secure port (checks include informer sync) gates ``start()``; /metrics is
readable with any token the apiserver accepts whose user may ``get`` the
``/metrics`` non-resource URL (the admin token).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from kscheduler.controlplane.binaries import find_kube_scheduler
from kscheduler.controlplane.harness import (
    LOOPBACK,
    ControlPlane,
    ControlPlaneError,
    ManagedProcess,
    free_ports,
)

DEFAULT_SCHEDULER_NAME = "reference-scheduler"


class ReferenceScheduler:
    """A kube-scheduler process with one profile; start()/stop() or a context manager."""

    def __init__(
        self,
        kubeconfig: str | os.PathLike[str],
        *,
        scheduler_name: str = DEFAULT_SCHEDULER_NAME,
        qps: float = 50.0,
        burst: int = 100,
        binary: str | os.PathLike[str] | None = None,
        workdir: str | os.PathLike[str] | None = None,
        secure_port: int | None = None,
        percentage_of_nodes_to_score: int | None = None,
        profile_extra: Mapping[str, Any] | None = None,
        config_extra: Mapping[str, Any] | None = None,
        extra_args: Sequence[str] = (),
        verbosity: int = 2,
    ) -> None:
        """secure_port: None picks a free port; 0 disables serving (no /readyz, /metrics).

        profile_extra is merged into the profile (plugins, pluginConfig);
        config_extra into the top level of the KubeSchedulerConfiguration.
        """
        self.kubeconfig = Path(kubeconfig)
        self.scheduler_name = scheduler_name
        self.qps = qps
        self.burst = burst
        self.binary = Path(binary) if binary is not None else find_kube_scheduler()
        self._workdir_arg = Path(workdir) if workdir is not None else None
        self._own_workdir = False
        self.workdir: Path | None = None
        self.secure_port = secure_port
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self.profile_extra = dict(profile_extra or {})
        self.config_extra = dict(config_extra or {})
        self.extra_args = list(extra_args)
        self.verbosity = verbosity
        self._proc: ManagedProcess | None = None
        self._port = 0

    @classmethod
    def for_control_plane(cls, cp: ControlPlane, **kwargs: Any) -> ReferenceScheduler:
        """Run as the system:kube-scheduler identity of cp (its scheduler kubeconfig)."""
        name = kwargs.get("scheduler_name", DEFAULT_SCHEDULER_NAME)
        kwargs.setdefault("workdir", cp.workdir / f"kube-scheduler-{name}")
        return cls(cp.scheduler_kubeconfig, **kwargs)

    # ----------------------------------------------------------------- attributes

    @property
    def process(self) -> ManagedProcess:
        if self._proc is None:
            raise ControlPlaneError("kube-scheduler not started")
        return self._proc

    @property
    def url(self) -> str | None:
        """https://127.0.0.1:<port> of its secure port, or None when serving is off."""
        return f"https://{LOOPBACK}:{self._port}" if self._port else None

    @property
    def config_path(self) -> Path:
        if self.workdir is None:
            raise ControlPlaneError("kube-scheduler not started")
        return self.workdir / "kube-scheduler.yaml"

    def config(self) -> dict[str, Any]:
        """The KubeSchedulerConfiguration this instance runs with."""
        profile: dict[str, Any] = {"schedulerName": self.scheduler_name, **self.profile_extra}
        config: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "clientConnection": {
                "kubeconfig": str(self.kubeconfig.resolve()),
                "qps": self.qps,
                "burst": self.burst,
            },
            "profiles": [profile],
        }
        if self.percentage_of_nodes_to_score is not None:
            config["percentageOfNodesToScore"] = self.percentage_of_nodes_to_score
        config.update(self.config_extra)
        return config

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.alive()

    def log_tail(self, lines: int = 40) -> str:
        return self._proc.log_tail(lines) if self._proc is not None else ""

    # ----------------------------------------------------------------- lifecycle

    def _prepare(self) -> ManagedProcess:
        if self._workdir_arg is not None:
            self.workdir = self._workdir_arg
            self.workdir.mkdir(parents=True, exist_ok=True)
        else:
            self.workdir = Path(tempfile.mkdtemp(prefix="kscheduler-kube-scheduler-"))
            self._own_workdir = True
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        self._port = free_ports(1)[0] if self.secure_port is None else self.secure_port
        argv = [
            str(self.binary),
            f"--config={self.config_path}",
            f"--secure-port={self._port}",
            f"--v={self.verbosity}",
        ]
        if self._port:
            kubeconfig = str(self.kubeconfig.resolve())
            argv += [
                f"--bind-address={LOOPBACK}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                # Token auth only: there is no client CA to look up in the
                # extension-apiserver-authentication ConfigMap.
                "--authentication-skip-lookup=true",
            ]
        argv += self.extra_args
        self._proc = ManagedProcess(
            f"kube-scheduler[{self.scheduler_name}]",
            argv,
            self.workdir / "kube-scheduler.log",
            cwd=self.workdir,
        )
        return self._proc

    def start(self, *, wait: bool = True, ready_within: float = 60.0) -> ReferenceScheduler:
        """Start it; with wait, block until /readyz is ok (informers synced)."""
        proc = self._prepare()
        try:
            proc.start()
            if wait:
                self.wait_ready(ready_within)
        except BaseException:
            self.stop()
            raise
        return self

    async def astart(self, *, wait: bool = True, ready_within: float = 60.0) -> ReferenceScheduler:
        proc = self._prepare()
        try:
            proc.start()
            if wait:
                await asyncio.to_thread(self.wait_ready, ready_within)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        proc = self.process
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            if not proc.alive():
                raise ControlPlaneError(
                    f"{proc.name} exited with code {proc.returncode}\n"
                    f"---- last lines of {proc.log_path} ----\n{proc.log_tail()}\n----"
                )
            if not self._port or self._get("/readyz", None)[0] == 200:
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{proc.name}: /readyz not ok after {timeout}s\n"
                    f"---- last lines of {proc.log_path} ----\n{proc.log_tail()}\n----"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop(timeout=10.0)
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self._own_workdir = False

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> ReferenceScheduler:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> ReferenceScheduler:
        return await self.astart()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.astop()

    # ----------------------------------------------------------------- HTTP endpoints

    def _get(self, path: str, token: str | None) -> tuple[int, str]:
        if not self._port:
            raise ControlPlaneError("kube-scheduler runs without a secure port")
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(f"{self.url}{path}", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5.0, context=ctx) as resp:
                return int(resp.status), resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except (OSError, urllib.error.URLError) as exc:
            return 0, str(exc)

    def metrics(self, token: str) -> str:
        """The Prometheus text of /metrics (token: e.g. the control plane's admin token)."""
        status, body = self._get("/metrics", token)
        if status != 200:
            raise ControlPlaneError(f"GET {self.url}/metrics -> {status}: {body[:300]}")
        return body
