"""A whole cluster minus containers on loopback, for tests, benchmarks and local runs.

etcd, kube-apiserver, kube-controller-manager (Deployments, StatefulSets, Jobs,
DaemonSets, the PV binder, the disruption controller, the resourceclaim
controller, namespaces, garbage collection, ServiceAccounts ...) and kwok, which
plays the kubelet of every node: it keeps nodes Ready with Lease heartbeats,
moves bound pods to Running with a pod IP and removes deleted pods. No container
ever runs.

The processes are external, so the API is synchronous (``start()``/``stop()``,
``with ControlPlane() as cp``) and usable from a plain pytest session fixture.
``async with ControlPlane() as cp`` does the waiting off the event loop.

Children run in their own process group (so a terminal Ctrl-C does not reach
them before we stop them in order) and are torn down on ``stop()``, at
interpreter exit, on SIGTERM, and by the kernel (``PR_SET_PDEATHSIG``) if the
Python process dies without running any cleanup.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import itertools
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

import yaml

from kscheduler.controlplane.binaries import ControlPlaneBinaries, find_control_plane

if TYPE_CHECKING:
    from kscheduler.controlplane.rest import RestClient

ADMIN_USER = "admin"
SCHEDULER_USER = "system:kube-scheduler"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
LOOPBACK = "127.0.0.1"
POD_CIDR = "10.244.0.0/16"
# Controllers a real cluster runs; no IPAM (kwok hands out pod IPs) and no
# attach/detach (no volume is ever attached).
CONTROLLERS = "*,-nodeipam,-attachdetach"
# Annotation on a pod: how long kwok waits, once the pod is being deleted, before it
# removes it, as a Go duration ("10s") or an RFC 3339 time (none when absent; a bare
# number is not a duration and means none too): the window a kubelet's graceful stop
# gives.
POD_DELETE_DELAY_ANNOTATION = "pod-delete.stage.kwok.x-k8s.io/delay"
# kwok's pod deletion: right away, or after the pod's delay annotation.
_KWOK_POD_DELETE_STAGE = f"""apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: Exists
    - key: .metadata.finalizers
      operator: DoesNotExist
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["{POD_DELETE_DELAY_ANNOTATION}"]'
  next:
    delete: true
"""
KEEP_ENV = "KSCHEDULER_KEEP_CONTROLPLANE"


class ControlPlaneError(RuntimeError):
    """The control plane failed to start or stopped unexpectedly."""


# --------------------------------------------------------------------------- cleanup registry

_cleanups: dict[int, Callable[[], None]] = {}
_cleanup_lock = threading.Lock()
_cleanup_ids = itertools.count()
_sigterm_installed = False
_previous_sigterm: Any = signal.SIG_DFL


def _run_all_cleanups() -> None:
    with _cleanup_lock:
        pending = list(_cleanups.values())
        _cleanups.clear()
    for fn in reversed(pending):
        with contextlib.suppress(Exception):
            fn()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _run_all_cleanups()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _register_cleanup(fn: Callable[[], None]) -> int:
    """Run fn at interpreter exit or on SIGTERM unless unregistered first."""
    global _sigterm_installed, _previous_sigterm
    with _cleanup_lock:
        key = next(_cleanup_ids)
        _cleanups[key] = fn
        install = not _sigterm_installed and threading.current_thread() is threading.main_thread()
        if install:
            _sigterm_installed = True
    if install:
        current = signal.getsignal(signal.SIGTERM)
        if current is not signal.SIG_IGN:
            _previous_sigterm = current
            signal.signal(signal.SIGTERM, _on_sigterm)
    return key


def _unregister_cleanup(key: int | None) -> None:
    if key is None:
        return
    with _cleanup_lock:
        _cleanups.pop(key, None)


atexit.register(_run_all_cleanups)


# --------------------------------------------------------------------------- processes

_PR_SET_PDEATHSIG = 1
_prctl: Any = None
if sys.platform == "linux":
    with contextlib.suppress(OSError, AttributeError):
        _prctl = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class ManagedProcess:
    """One external process in its own process group, logging to a file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self._cleanup_key: int | None = None
        self._swept = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        if self.alive():
            raise ControlPlaneError(f"{self.name} is already running (pid {self.pid})")
        # The kernel ties PDEATHSIG to the spawning *thread*: only use it from the
        # main thread, whose exit is the process's exit.
        main = threading.current_thread() is threading.main_thread()
        with open(self.log_path, "ab") as log:
            log.write(f"==== {time.strftime('%H:%M:%S')} starting {self.name}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent if main and _prctl is not None else None,
            )
        self._swept = False
        self._cleanup_key = _register_cleanup(self._stop_at_exit)

    def _stop_at_exit(self) -> None:
        self.stop(timeout=5.0)

    def signal(self, sig: int) -> None:
        """Send sig to the whole process group."""
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    def stop(self, timeout: float = 10.0, *, graceful: bool = True) -> int | None:
        """SIGTERM (unless graceful=False), wait up to timeout, then SIGKILL the group."""
        proc = self._proc
        if proc is None or self._swept:
            return proc.returncode if proc is not None else None
        try:
            if proc.poll() is None and graceful:
                self.signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout)
            # Sweep the group once: a child may outlive its leader.
            self.signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10.0)
            self._swept = True
        finally:
            _unregister_cleanup(self._cleanup_key)
            self._cleanup_key = None
        return proc.returncode

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 64 * 1024))
                data = f.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(data.splitlines()[-lines:])


def _start_reaper(workdir: Path) -> subprocess.Popen[bytes]:
    """A watcher, in its own session, that removes workdir once this process is gone,
    however it ends (SIGKILL included): it blocks reading a pipe whose only writer is
    this process, and the kernel closes that pipe when the process dies. The children
    die then too (PR_SET_PDEATHSIG); the watcher waits a moment for them to let go."""
    script = 'read _ignored; sleep 1; rm -rf -- "$0"; sleep 2; rm -rf -- "$0"'
    return subprocess.Popen(
        ["/bin/sh", "-c", script, str(workdir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def free_ports(count: int) -> list[int]:
    """Distinct free TCP ports on loopback (held open together so they differ)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def write_kubeconfig(
    path: str | os.PathLike[str],
    *,
    server: str,
    token: str,
    ca_file: str | os.PathLike[str] | None,
    user: str = "user",
    cluster: str = "kscheduler-dev",
) -> Path:
    """Write a single-context, token-authenticated kubeconfig."""
    cluster_entry: dict[str, Any] = {"server": server}
    if ca_file is not None:
        cluster_entry["certificate-authority"] = str(Path(ca_file).resolve())
    else:
        cluster_entry["insecure-skip-tls-verify"] = True
    context = f"{user}@{cluster}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": cluster_entry}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
    }
    out = Path(path)
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    out.chmod(0o600)
    return out


def _generate_rsa_key(path: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ControlPlaneError(
            "the `openssl` command is needed to generate the service-account signing key"
        )
    subprocess.run(
        [openssl, "genrsa", "-out", str(path), "2048"],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    path.chmod(0o600)


def _generate_ca(key: Path, cert: Path, name: str) -> None:
    """A self-signed P-256 CA, valid for a week."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ControlPlaneError("the `openssl` command is needed to generate the client CA")
    subprocess.run(
        [
            openssl, "req", "-x509", "-nodes", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-keyout", str(key), "-out", str(cert), "-days", "7", "-subj", f"/CN={name}",
        ],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    key.chmod(0o600)


def _lost_port_race(exc: BaseException) -> bool:
    """A port picked by free_ports() was taken by someone else before we bound it."""
    return isinstance(exc, ControlPlaneError) and "address already in use" in str(exc)


def _unverified_ssl() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


# --------------------------------------------------------------------------- the control plane


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kwok on free loopback ports,
    state in a temporary directory.

    ``controllers=False`` starts etcd and kube-apiserver alone (a bare apiserver
    for tests of the apiserver itself).

    After ``start()``: ``url``, ``ca_file``, ``admin_token``, ``scheduler_token``,
    ``admin_kubeconfig``, ``scheduler_kubeconfig``, ``etcd_endpoint``, ``workdir``,
    ``tokens`` (user -> bearer token) and ``startup_seconds``.
    """

    def __init__(
        self,
        *,
        binaries: ControlPlaneBinaries | None = None,
        users: Mapping[str, Sequence[str]] | None = None,
        extra_apiserver_args: Sequence[str] = (),
        extra_etcd_args: Sequence[str] = (),
        workdir_parent: str | os.PathLike[str] | None = None,
        keep_workdir: bool | None = None,
        start_timeout: float = 90.0,
        controllers: bool = True,
        node_lease_seconds: int = 40,
    ) -> None:
        """users: extra token identities, user name -> groups (tokens in ``self.tokens``).

        keep_workdir (default: $KSCHEDULER_KEEP_CONTROLPLANE set and not "0") keeps
        the logs, kubeconfigs and etcd data after stop().

        node_lease_seconds: the node Leases' duration; kwok renews each a quarter of
        it apart, as a kubelet does (the default is the kubelet's 40 s: 5000 nodes
        then write 500 Lease updates a second). The node lifecycle controller's
        grace period follows it, so that no node is ever marked unreachable.
        """
        self.binaries = binaries or find_control_plane()
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.extra_etcd_args = list(extra_etcd_args)
        self.workdir_parent = workdir_parent
        if keep_workdir is None:
            keep_workdir = os.environ.get(KEEP_ENV, "") not in ("", "0")
        self.keep_workdir = keep_workdir
        self.start_timeout = start_timeout
        self.controllers = controllers
        self.node_lease_seconds = node_lease_seconds
        self.admin_token = secrets.token_hex(16)
        self.scheduler_token = secrets.token_hex(16)
        self.tokens: dict[str, str] = {
            ADMIN_USER: self.admin_token,
            SCHEDULER_USER: self.scheduler_token,
        }
        self._user_groups: dict[str, list[str]] = {ADMIN_USER: ["system:masters"]}
        self._user_groups[SCHEDULER_USER] = []
        for user, groups in (users or {}).items():
            self.tokens.setdefault(user, secrets.token_hex(16))
            self._user_groups[user] = list(groups)
        self.startup_seconds: float | None = None
        self._workdir: Path | None = None
        self._etcd: ManagedProcess | None = None
        self._apiserver: ManagedProcess | None = None
        self._controller_manager: ManagedProcess | None = None
        self._kwok: ManagedProcess | None = None
        self._kwok_port = 0
        self._secure_port = 0
        self._etcd_client_port = 0
        self._workdir_cleanup_key: int | None = None
        self._reaper: subprocess.Popen[bytes] | None = None

    # ----------------------------------------------------------------- attributes

    def _need(self, value: Any, what: str) -> Any:
        if value is None:
            raise ControlPlaneError(f"control plane not started: no {what} yet")
        return value

    @property
    def workdir(self) -> Path:
        path: Path = self._need(self._workdir, "workdir")
        return path

    @property
    def url(self) -> str:
        self._need(self._apiserver, "url")
        return f"https://{LOOPBACK}:{self._secure_port}"

    @property
    def etcd_endpoint(self) -> str:
        self._need(self._etcd, "etcd endpoint")
        return f"http://{LOOPBACK}:{self._etcd_client_port}"

    @property
    def cert_dir(self) -> Path:
        return self.workdir / "certs"

    @property
    def ca_file(self) -> Path:
        """Bundle that verifies the apiserver's self-signed serving certificate."""
        return self.cert_dir / "apiserver.crt"

    @property
    def client_ca_file(self) -> Path:
        """The CA the apiserver trusts for client certificates (and publishes)."""
        return self.workdir / "client-ca.crt"

    @property
    def client_ca_key(self) -> Path:
        """Its private key, to sign client certificates for tests."""
        return self.workdir / "client-ca.key"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def scheduler_kubeconfig(self) -> Path:
        return self.workdir / "scheduler.kubeconfig"

    @property
    def apiserver_process(self) -> ManagedProcess:
        proc: ManagedProcess = self._need(self._apiserver, "apiserver")
        return proc

    @property
    def controller_manager_process(self) -> ManagedProcess:
        proc: ManagedProcess = self._need(self._controller_manager, "kube-controller-manager")
        return proc

    @property
    def kwok_process(self) -> ManagedProcess:
        proc: ManagedProcess = self._need(self._kwok, "kwok")
        return proc

    def processes(self) -> list[ManagedProcess]:
        """The processes of this cluster, in start order."""
        return [
            p
            for p in (self._etcd, self._apiserver, self._controller_manager, self._kwok)
            if p is not None
        ]

    @property
    def etcd_process(self) -> ManagedProcess:
        proc: ManagedProcess = self._need(self._etcd, "etcd")
        return proc

    def kubeconfig_for_token(
        self, token: str, path: str | os.PathLike[str], *, user: str = "user"
    ) -> Path:
        """Write a kubeconfig for this apiserver that authenticates with token."""
        return write_kubeconfig(path, server=self.url, token=token, ca_file=self.ca_file, user=user)

    def client(self, token: str | None = None, **kwargs: Any) -> RestClient:
        """A RestClient for this apiserver (admin token by default)."""
        from kscheduler.controlplane.rest import RestClient

        return RestClient(self.url, token or self.admin_token, ca_file=self.ca_file, **kwargs)

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> ControlPlane:
        """Start etcd and kube-apiserver and wait until /readyz is ok."""
        self._check_not_running()
        began = time.monotonic()
        for attempt in itertools.count(1):
            self._prepare()
            try:
                self.etcd_process.start()
                self._wait_etcd()
                self.apiserver_process.start()
                self._wait_apiserver()
                self._write_kubeconfigs()
                self._start_controllers()
                self._wait_controllers()
                break
            except BaseException as exc:
                self.stop()
                if not _lost_port_race(exc) or attempt >= 3:
                    raise
        self.startup_seconds = time.monotonic() - began
        return self

    async def astart(self) -> ControlPlane:
        """start() that waits off the event loop (processes spawn on the caller's thread)."""
        self._check_not_running()
        began = time.monotonic()
        for attempt in itertools.count(1):
            await asyncio.to_thread(self._prepare)
            try:
                self.etcd_process.start()
                await asyncio.to_thread(self._wait_etcd)
                self.apiserver_process.start()
                await asyncio.to_thread(self._wait_apiserver)
                self._write_kubeconfigs()
                self._start_controllers()
                await asyncio.to_thread(self._wait_controllers)
                break
            except BaseException as exc:
                self.stop()
                if not _lost_port_race(exc) or attempt >= 3:
                    raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Stop kwok, kube-controller-manager, kube-apiserver, then etcd; remove the
        work directory. Idempotent."""
        for proc in (self._kwok, self._controller_manager):
            if proc is not None:
                proc.stop(timeout=5.0)
        if self._apiserver is not None:
            self._apiserver.stop(timeout=5.0)
        if self._etcd is not None:
            self._etcd.stop(timeout=5.0)
        self._remove_workdir()

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> ControlPlane:
        return await self.astart()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.astop()

    def _check_not_running(self) -> None:
        if any(p.alive() for p in self.processes()):
            raise ControlPlaneError("this control plane is already running; stop() it first")

    def is_prepared(self) -> bool:
        """True once start() has created the work directory."""
        return self._workdir is not None

    def is_running(self) -> bool:
        procs = self.processes()
        return len(procs) == (4 if self.controllers else 2) and all(p.alive() for p in procs)

    # ----------------------------------------------------------------- fault injection

    def stop_apiserver(self, *, graceful: bool = True) -> None:
        """Stop only kube-apiserver (SIGKILL right away if graceful=False)."""
        self.apiserver_process.stop(timeout=15.0, graceful=graceful)

    def start_apiserver(self, *, wait: bool = True) -> None:
        """Start kube-apiserver again with the same ports, flags and certificates."""
        self.apiserver_process.start()
        if wait:
            self._wait_apiserver()

    def restart_apiserver(self, *, downtime: float = 0.0, graceful: bool = True) -> None:
        """Stop and start kube-apiserver in place, waiting for /readyz again."""
        self.stop_apiserver(graceful=graceful)
        if downtime > 0:
            time.sleep(downtime)
        self.start_apiserver()

    async def arestart_apiserver(self, *, downtime: float = 0.0, graceful: bool = True) -> None:
        """restart_apiserver() that keeps the event loop running while it waits."""
        await asyncio.to_thread(self.apiserver_process.stop, 15.0, graceful=graceful)
        if downtime > 0:
            await asyncio.sleep(downtime)
        self.apiserver_process.start()
        await asyncio.to_thread(self._wait_apiserver)

    def wait_ready(self, timeout: float | None = None) -> None:
        self._wait_apiserver(timeout)

    # ----------------------------------------------------------------- internals

    def _prepare(self) -> None:
        parent = self.workdir_parent
        if parent is not None:
            Path(parent).mkdir(parents=True, exist_ok=True)
        self._workdir = Path(tempfile.mkdtemp(prefix="kscheduler-cp-", dir=parent))
        workdir = self._workdir
        self._workdir_cleanup_key = _register_cleanup(self._remove_workdir)
        if not self.keep_workdir:
            self._reaper = _start_reaper(workdir)
        (workdir / "certs").mkdir()
        sa_key = workdir / "sa.key"
        _generate_rsa_key(sa_key)
        _generate_ca(self.client_ca_key, self.client_ca_file, "kscheduler-harness-client-ca")
        token_file = workdir / "tokens.csv"
        lines = []
        for user, token in self.tokens.items():
            groups = ",".join(self._user_groups.get(user, []))
            lines.append(
                f'{token},{user},{user}-uid,"{groups}"' if groups else f"{token},{user},{user}-uid"
            )
        token_file.write_text("\n".join(lines) + "\n")
        token_file.chmod(0o600)

        client_port, peer_port, secure_port, kwok_port = free_ports(4)
        self._etcd_client_port, self._secure_port = client_port, secure_port
        self._kwok_port = kwok_port
        client_url = f"http://{LOOPBACK}:{client_port}"
        peer_url = f"http://{LOOPBACK}:{peer_port}"
        etcd_argv = [
            str(self.binaries.etcd),
            "--name=kscheduler",
            f"--data-dir={workdir / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=kscheduler={peer_url}",
            "--unsafe-no-fsync=true",
            # One member on loopback: elect it at once instead of after ~1s.
            "--heartbeat-interval=20",
            "--election-timeout=200",
            "--log-level=warn",
            *self.extra_etcd_args,
        ]
        apiserver_argv = [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers={client_url}",
            f"--cert-dir={workdir / 'certs'}",
            f"--secure-port={secure_port}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            # 1.37 refuses a loopback address for the `kubernetes` Service's endpoints;
            # nothing here routes through that Service (no kube-proxy)
            "--endpoint-reconciler-type=none",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--authorization-mode=RBAC",
            f"--token-auth-file={token_file}",
            # client certificates: the apiserver publishes this CA in kube-system's
            # extension-apiserver-authentication ConfigMap, where delegated
            # authentication (kscheduler's secure port) reads it
            f"--client-ca-file={self.client_ca_file}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={sa_key}",
            f"--service-account-signing-key-file={sa_key}",
            # kwok makes a node Ready within milliseconds; without this plugin a new
            # node is not tainted not-ready until then (nodes come Ready here).
            "--disable-admission-plugins=TaintNodesByCondition",
            "--allow-privileged=true",
            # Close open watches when stopping; otherwise a connected client
            # (a scheduler's informers) holds shutdown open for a minute.
            "--shutdown-watch-termination-grace-period=1s",
            # Parallel DeleteCollection: halves the time to clean up thousands of pods.
            "--delete-collection-workers=4",
            *self.extra_apiserver_args,
        ]
        self._etcd = ManagedProcess("etcd", etcd_argv, workdir / "etcd.log", cwd=workdir)
        self._apiserver = ManagedProcess(
            "kube-apiserver", apiserver_argv, workdir / "kube-apiserver.log", cwd=workdir
        )
        if self.controllers:
            self._prepare_controllers(sa_key)

    def _prepare_controllers(self, sa_key: Path) -> None:
        workdir = self.workdir
        kubeconfig = str(self.admin_kubeconfig)
        controller_manager_argv = [
            str(self.binaries.kube_controller_manager),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--authentication-skip-lookup=true",
            f"--service-account-private-key-file={sa_key}",
            f"--root-ca-file={self.ca_file}",
            "--use-service-account-credentials=false",
            "--leader-elect=false",
            "--secure-port=0",
            f"--controllers={CONTROLLERS}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # the client limits of a cluster's controller-manager are tuned for
            # thousands of nodes; the defaults (20/30) throttle bulk test set-ups
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            # the default is 50 s for 40 s Leases: keep that margin for longer ones
            f"--node-monitor-grace-period={max(50, self.node_lease_seconds + 10)}s",
            "--v=1",
        ]
        stages = sorted(
            p for p in self.binaries.kwok_stages.glob("*.yaml") if p.name != "pod-delete.yaml"
        )
        pod_delete = workdir / "kwok-pod-delete.yaml"
        pod_delete.write_text(_KWOK_POD_DELETE_STAGE)
        kwok_argv = [
            str(self.binaries.kwok),
            f"--kubeconfig={kubeconfig}",
            "--manage-all-nodes=true",
            f"--cidr={POD_CIDR}",
            f"--node-ip={LOOPBACK}",
            f"--server-address={LOOPBACK}:{self._kwok_port}",
            # 40 s is a kubelet's default: the node lifecycle controller sees each
            # Lease renewed every 10 s
            f"--node-lease-duration-seconds={self.node_lease_seconds}",
            *(f"--config={p}" for p in [*stages, pod_delete]),
        ]
        self._controller_manager = ManagedProcess(
            "kube-controller-manager",
            controller_manager_argv,
            workdir / "kube-controller-manager.log",
            cwd=workdir,
        )
        # kwok reads $HOME/.kwok for defaults: keep it inside the work directory
        env = {**os.environ, "HOME": str(workdir)}
        self._kwok = ManagedProcess("kwok", kwok_argv, workdir / "kwok.log", env=env, cwd=workdir)

    def _start_controllers(self) -> None:
        for proc in (self._controller_manager, self._kwok):
            if proc is not None:
                proc.start()

    def _wait_controllers(self, timeout: float | None = None) -> None:
        """Wait for kwok's /healthz and for the controller-manager's first work: the
        ServiceAccount controller creating ``default`` in the default namespace (the
        ServiceAccount admission plugin refuses pods until it exists)."""
        if self._kwok is not None:
            url = f"http://{LOOPBACK}:{self._kwok_port}/healthz"

            def kwok_healthy() -> bool:
                try:
                    with urllib.request.urlopen(url, timeout=1.0) as resp:
                        return bool(resp.status == 200)
                except (OSError, urllib.error.URLError):
                    return False

            self._poll(self._kwok, kwok_healthy, "kwok /healthz", timeout)
        if self._controller_manager is not None:
            request = urllib.request.Request(
                f"{self.url}/api/v1/namespaces/default/serviceaccounts/default",
                headers={"Authorization": f"Bearer {self.admin_token}"},
            )
            ctx = _unverified_ssl()

            def default_service_account() -> bool:
                try:
                    with urllib.request.urlopen(request, timeout=2.0, context=ctx) as resp:
                        return bool(resp.status == 200)
                except (OSError, urllib.error.URLError):
                    return False

            self._poll(
                self._controller_manager,
                default_service_account,
                "the default ServiceAccount (controllers running)",
                timeout,
            )

    def _remove_workdir(self) -> None:
        _unregister_cleanup(self._workdir_cleanup_key)
        self._workdir_cleanup_key = None
        reaper, self._reaper = self._reaper, None
        if reaper is not None and reaper.stdin is not None:
            reaper.stdin.close()  # it removes the directory too (already gone below)
            with contextlib.suppress(subprocess.TimeoutExpired):
                reaper.wait(0)
        if self._workdir is not None and not self.keep_workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def _fail(self, proc: ManagedProcess, message: str) -> ControlPlaneError:
        keep = "" if self.keep_workdir else f" (set {KEEP_ENV}=1 to keep these files)"
        return ControlPlaneError(f"{message}{keep}\n{self.log_tails(30)}\n----")

    def _poll(
        self, proc: ManagedProcess, check: Callable[[], bool], what: str, timeout: float | None
    ) -> None:
        deadline = time.monotonic() + (timeout if timeout is not None else self.start_timeout)
        delay = 0.02
        while True:
            if not proc.alive():
                raise self._fail(
                    proc, f"{proc.name} exited with code {proc.returncode} before {what}"
                )
            if check():
                return
            if time.monotonic() > deadline:
                raise self._fail(proc, f"{proc.name}: timed out waiting for {what}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.1)

    def _wait_etcd(self, timeout: float | None = None) -> None:
        url = f"{self.etcd_endpoint}/health"

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=1.0) as resp:
                    return b'"health":"true"' in resp.read()
            except (OSError, urllib.error.URLError):
                return False

        self._poll(self.etcd_process, healthy, "etcd /health", timeout)

    def _wait_apiserver(self, timeout: float | None = None) -> None:
        request = urllib.request.Request(
            f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.admin_token}"}
        )
        ctx = _unverified_ssl()

        def ready() -> bool:
            try:
                with urllib.request.urlopen(request, timeout=2.0, context=ctx) as resp:
                    return bool(resp.status == 200)
            except (OSError, urllib.error.URLError):
                return False

        self._poll(self.apiserver_process, ready, "/readyz", timeout)

    def _write_kubeconfigs(self) -> None:
        self.kubeconfig_for_token(self.admin_token, self.admin_kubeconfig, user=ADMIN_USER)
        self.kubeconfig_for_token(
            self.scheduler_token, self.scheduler_kubeconfig, user=SCHEDULER_USER
        )

    def log_tails(self, lines: int = 40) -> str:
        """The last lines of each process's log (for error messages)."""
        parts = []
        for proc in self.processes():
            parts.append(f"---- last lines of {proc.log_path} ----\n{proc.log_tail(lines)}")
        return "\n".join(parts)
