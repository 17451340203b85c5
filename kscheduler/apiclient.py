"""The writes the scheduler and its plugins make, over the raw Kubernetes client."""

from __future__ import annotations

from typing import Any

from kscheduler.events import micro_time
from kscheduler.framework.types import PodInfo
from kscheduler.kube import KubeClient

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


class ApiClusterClient:
    """Implements the framework's ClusterClient, the scheduler's PodStatusWriter and
    the event recorder's EventSink."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    # ClusterClient
    async def bind(self, pod: PodInfo, node_name: str) -> None:
        await self.kube.bind(pod.namespace, pod.name, pod.uid, node_name)

    async def delete_pod(self, pod: PodInfo, *, reason: str, message: str) -> None:
        """Mark the pod DisruptionTarget (reason) then delete it, preconditioned on its UID."""
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
        if reason:
            cond = {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": reason,
                "message": message,
                "lastTransitionTime": micro_time()[:19] + "Z",
            }
            try:
                await self.kube.patch_json(
                    f"{path}/status", {"status": {"conditions": [cond]}}, SMP
                )
            except Exception as exc:  # deletion matters more than the condition
                if getattr(exc, "not_found", False):
                    return
        await self.kube.delete(
            path,
            {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": pod.uid}},
        )

    async def request(
        self, method: str, path: str, body: Any = None, *, content_type: str | None = None
    ) -> Any:
        return await self.kube.request(method, path, body, content_type=content_type)

    # PodStatusWriter
    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        await self.kube.patch_json(f"/api/v1/namespaces/{namespace}/pods/{name}/status", patch, SMP)

    # EventSink
    async def create(self, namespace: str, body: dict[str, Any]) -> None:
        await self.kube.post_json(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events", body)

    async def patch(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        await self.kube.patch_json(
            f"/apis/events.k8s.io/v1/namespaces/{namespace}/events/{name}", body, MERGE
        )
