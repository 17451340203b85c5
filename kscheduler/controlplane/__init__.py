"""A whole cluster minus containers on loopback (etcd, kube-apiserver,
kube-controller-manager, kwok) and the reference kube-scheduler, for tests and local runs."""

from kscheduler.controlplane.binaries import (
    ETCD_VERSION,
    K8S_VERSION,
    KWOK_VERSION,
    BinariesNotFoundError,
    find_control_plane,
    find_kube_scheduler,
)
from kscheduler.controlplane.harness import ControlPlane, ControlPlaneError

__all__ = [
    "ETCD_VERSION",
    "K8S_VERSION",
    "KWOK_VERSION",
    "BinariesNotFoundError",
    "ControlPlane",
    "ControlPlaneError",
    "find_control_plane",
    "find_kube_scheduler",
]
