"""Locate the control-plane binaries: kube-apiserver, etcd, kube-controller-manager, kwok
and kube-scheduler (the reference).

Lookup order:

1. ``PATH``, when kube-apiserver, etcd, kube-controller-manager and kwok are all on it;
2. ``$KUBEBUILDER_ASSETS`` (the envtest layout: one directory with the binaries);
3. the build cache written by ``make control-plane`` (``hack/build-control-plane.sh``):
   ``${KSCHEDULER_CACHE:-${XDG_CACHE_HOME:-~/.cache}/kscheduler}/controlplane/
   k8s-<K8S_VERSION>_etcd-<ETCD_VERSION>_kwok-<KWOK_VERSION>/``.

kube-scheduler is looked up the same way, on its own. kwok's stage definitions
(what it does to nodes and pods) are the ``kwok-stages/`` folder next to the kwok
binary in the cache, or ``$KSCHEDULER_KWOK_STAGES``.

``K8S_VERSION`` and ``ETCD_VERSION`` must match ``hack/controlplane/go.mod`` and
``KWOK_VERSION`` the build script (an integration test checks this).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

K8S_VERSION = "v1.37.2"
ETCD_VERSION = "v3.7.0"
KWOK_VERSION = "v0.8.0"

KUBE_APISERVER = "kube-apiserver"
ETCD = "etcd"
KUBE_CONTROLLER_MANAGER = "kube-controller-manager"
KWOK = "kwok"
KUBE_SCHEDULER = "kube-scheduler"
KWOK_STAGES_ENV = "KSCHEDULER_KWOK_STAGES"
_CLUSTER = (KUBE_APISERVER, ETCD, KUBE_CONTROLLER_MANAGER, KWOK)


class BinariesNotFoundError(RuntimeError):
    """The control-plane binaries are not installed where we look for them."""


@dataclass(frozen=True, slots=True)
class ControlPlaneBinaries:
    kube_apiserver: Path
    etcd: Path
    kube_controller_manager: Path
    kwok: Path
    kwok_stages: Path  # a folder of kwok Stage YAML files
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
    return (
        cache_root() / "controlplane" / f"k8s-{K8S_VERSION}_etcd-{ETCD_VERSION}_kwok-{KWOK_VERSION}"
    )


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
        f"kube-apiserver/kube-scheduler/kube-controller-manager {K8S_VERSION}, etcd "
        f"{ETCD_VERSION} and kwok {KWOK_VERSION} into "
        f"{cache_dir()}, or put the binaries on PATH or in $KUBEBUILDER_ASSETS."
    )


def _stages_beside(kwok: Path) -> Path | None:
    explicit = os.environ.get(KWOK_STAGES_ENV)
    for candidate in (Path(explicit) if explicit else None, kwok.parent / "kwok-stages"):
        if candidate is not None and candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    # kwok on PATH without its stages: the cache has them when make control-plane ran
    cached = cache_dir() / "kwok-stages"
    return cached if cached.is_dir() and any(cached.glob("*.yaml")) else None


def _found(paths: dict[str, Path | None], source: str) -> ControlPlaneBinaries | None:
    apiserver, etcd, controller_manager, kwok = (paths[name] for name in _CLUSTER)
    if apiserver is None or etcd is None or controller_manager is None or kwok is None:
        return None
    stages = _stages_beside(kwok)
    if stages is None:
        return None
    return ControlPlaneBinaries(
        kube_apiserver=apiserver,
        etcd=etcd,
        kube_controller_manager=controller_manager,
        kwok=kwok,
        kwok_stages=stages,
        source=source,
    )


def find_control_plane() -> ControlPlaneBinaries:
    """Find kube-apiserver, etcd, kube-controller-manager and kwok (from one source),
    or raise BinariesNotFoundError."""
    found = _found({name: _on_path(name) for name in _CLUSTER}, "PATH")
    if found is not None:
        return found
    for source, directory in (
        ("KUBEBUILDER_ASSETS", os.environ.get("KUBEBUILDER_ASSETS")),
        ("cache", str(cache_dir())),
    ):
        found = _found({name: _in_dir(directory, name) for name in _CLUSTER}, source)
        if found is not None:
            return found
    raise BinariesNotFoundError(
        f"{', '.join(_CLUSTER)} (and kwok's stages) were not found together in "
        f"{_searched()}. {_hint()}"
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
