"""A real kube-apiserver + etcd (and the reference kube-scheduler) for tests and local runs."""

from kscheduler.controlplane.binaries import (
    ETCD_VERSION,
    K8S_VERSION,
    BinariesNotFoundError,
    find_control_plane,
    find_kube_scheduler,
)
from kscheduler.controlplane.harness import ControlPlane, ControlPlaneError

__all__ = [
    "ETCD_VERSION",
    "K8S_VERSION",
    "BinariesNotFoundError",
    "ControlPlane",
    "ControlPlaneError",
    "find_control_plane",
    "find_kube_scheduler",
]
