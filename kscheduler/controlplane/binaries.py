"""Locate the kube-apiserver, etcd and kube-scheduler binaries.

Lookup order:

1. ``PATH``, when both ``kube-apiserver`` and ``etcd`` are on it;
2. ``$KUBEBUILDER_ASSETS`` (the envtest layout: one directory with the binaries);
3. the build cache written by ``make control-plane`` (``hack/build-control-plane.sh``):
   ``${KSCHEDULER_CACHE:-${XDG_CACHE_HOME:-~/.cache}/kscheduler}/controlplane/
   k8s-<K8S_VERSION>_etcd-<ETCD_VERSION>/``.

kube-scheduler is looked up the same way, on its own.

``K8S_VERSION`` and ``ETCD_VERSION`` must match ``hack/controlplane/go.mod``
(an integration test checks this).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

K8S_VERSION = "v1.35.4"
ETCD_VERSION = "v3.6.5"

KUBE_APISERVER = "kube-apiserver"
ETCD = "etcd"
KUBE_SCHEDULER = "kube-scheduler"


class BinariesNotFoundError(RuntimeError):
    """The control-plane binaries are not installed where we look for them."""


@dataclass(frozen=True, slots=True)
class ControlPlaneBinaries:
    kube_apiserver: Path
    etcd: Path
    source: str  # "PATH", "KUBEBUILDER_ASSETS" or "cache"


def cache_root() -> Path:
    """The kscheduler cache root (same rule as hack/build-control-plane.sh)."""
    explicit = os.environ.get("KSCHEDULER_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "kscheduler"


def cache_dir() -> Path:
    """Directory the build script writes the pinned binaries into."""
    return cache_root() / "controlplane" / f"k8s-{K8S_VERSION}_etcd-{ETCD_VERSION}"


def _executable(path: Path) -> Path | None:
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _in_dir(directory: str | Path | None, name: str) -> Path | None:
    if not directory:
        return None
    return _executable(Path(directory) / name)


def _on_path(name: str) -> Path | None:
    found = shutil.which(name)
    return Path(found) if found else None


def _searched() -> str:
    assets = os.environ.get("KUBEBUILDER_ASSETS") or "(unset)"
    return f"PATH, $KUBEBUILDER_ASSETS={assets}, and {cache_dir()}"


def _hint() -> str:
    return (
        f"Run `make control-plane` (hack/build-control-plane.sh) to build the pinned "
        f"kube-apiserver/kube-scheduler {K8S_VERSION} and etcd {ETCD_VERSION} into "
        f"{cache_dir()}, or put the binaries on PATH or in $KUBEBUILDER_ASSETS."
    )


def find_control_plane() -> ControlPlaneBinaries:
    """Find kube-apiserver and etcd (from one source), or raise BinariesNotFoundError."""
    apiserver, etcd = _on_path(KUBE_APISERVER), _on_path(ETCD)
    if apiserver and etcd:
        return ControlPlaneBinaries(apiserver, etcd, "PATH")
    for source, directory in (
        ("KUBEBUILDER_ASSETS", os.environ.get("KUBEBUILDER_ASSETS")),
        ("cache", str(cache_dir())),
    ):
        apiserver, etcd = _in_dir(directory, KUBE_APISERVER), _in_dir(directory, ETCD)
        if apiserver and etcd:
            return ControlPlaneBinaries(apiserver, etcd, source)
    raise BinariesNotFoundError(
        f"kube-apiserver and etcd were not found together in {_searched()}. {_hint()}"
    )


def find_kube_scheduler() -> Path:
    """Find the kube-scheduler binary, or raise BinariesNotFoundError."""
    found = (
        _on_path(KUBE_SCHEDULER)
        or _in_dir(os.environ.get("KUBEBUILDER_ASSETS"), KUBE_SCHEDULER)
        or _in_dir(cache_dir(), KUBE_SCHEDULER)
    )
    if found is None:
        raise BinariesNotFoundError(f"kube-scheduler was not found in {_searched()}. {_hint()}")
    return found
