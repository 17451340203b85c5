"""Reading pods' volume claims and PersistentVolumeClaims, shared by the volume plugins."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kscheduler.framework.types import PodInfo

#: The storage class annotation that predates spec.storageClassName (and wins over it).
ANN_BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def claim_names(spec: Mapping[str, Any]) -> list[str]:
    """Names of the claims a pod spec's ``persistentVolumeClaim`` volumes reference."""
    out = []
    vols = spec.get("volumes")
    for v in vols if isinstance(vols, list) else ():
        claim = v.get("persistentVolumeClaim") if isinstance(v, dict) else None
        if isinstance(claim, dict):
            out.append(str(claim.get("claimName") or ""))
    return out


def claim_storage_class(pvc: Mapping[str, Any]) -> str:
    """The claim's storage class: the beta annotation if set, else spec.storageClassName."""
    annotations = _dict(_dict(pvc.get("metadata")).get("annotations"))
    if ANN_BETA_STORAGE_CLASS in annotations:
        return str(annotations[ANN_BETA_STORAGE_CLASS])
    return str(_dict(pvc.get("spec")).get("storageClassName") or "")


def owned_by_pod(meta: Mapping[str, Any], pod: PodInfo) -> bool:
    """Whether ``pod`` is the controller owner of the object with metadata ``meta``
    (a generic ephemeral volume's claim must be)."""
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            return bool(ref.get("uid") == pod.uid)
    return False
