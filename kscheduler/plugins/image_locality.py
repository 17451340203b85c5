"""ImageLocality: favour nodes that already hold the pod's container images.

Each container (init containers included) whose image the node reports adds the
image size scaled by the share of nodes holding it (an image present everywhere
counts fully, a rare one little, so pods do not pile onto the few nodes that
have it). As in kube-scheduler, an image's size is the one reported by the first
node the cache saw holding it, whatever size other nodes report. The sum is
clamped to [23 MiB, 1000 MiB * containers] and mapped linearly onto [0, 100].
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from kscheduler.framework import (
    MAX_NODE_SCORE,
    CycleState,
    Handle,
    NodeInfo,
    PluginEntry,
    PodInfo,
    Status,
    signing,
)
from kscheduler.framework.signing import SignFragment

NAME = "ImageLocality"

MB = 1024 * 1024
#: Lower bound of the summed image score: smaller totals all score 0.
MIN_THRESHOLD = 23 * MB
#: Upper bound per container of the summed image score.
MAX_CONTAINER_THRESHOLD = 1000 * MB

_SPREAD_KEY = "Score" + NAME


def normalized_image_name(name: str) -> str:
    """The name as the container runtime reports it: ":latest" added when untagged.

    A name is tagged (or pinned by digest) when its last ':' comes after its last
    '/'; "registry:5000/app" is therefore untagged.
    """
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


def calculate_priority(sum_scores: int, num_containers: int) -> int:
    max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
    if sum_scores < MIN_THRESHOLD:
        sum_scores = MIN_THRESHOLD
    elif sum_scores > max_threshold:
        sum_scores = max_threshold
    return _div_trunc(MAX_NODE_SCORE * (sum_scores - MIN_THRESHOLD), max_threshold - MIN_THRESHOLD)


def _div_trunc(a: int, b: int) -> int:
    """Integer division rounding toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def scaled_image_score(size: int, num_nodes: int, total_nodes: int) -> int:
    if total_nodes <= 0:
        return 0
    spread = num_nodes / total_nodes
    return int(float(size) * spread)


class _ImageSpread:
    """Per cycle: normalized image name -> (size, nodes holding it), and the node count."""

    __slots__ = ("states", "total")

    def __init__(self, states: dict[str, tuple[int, int]], total: int) -> None:
        self.states = states
        self.total = total


class ImageLocality:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self._handle = handle

    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """The pod's normalized image names (OpportunisticBatching)."""
        names = sorted({normalized_image_name(i) for i in pod.images})
        return [SignFragment(signing.IMAGE_NAMES, names)], None

    @classmethod
    def new(cls, args: Any, handle: Handle) -> ImageLocality:
        return cls(handle)

    def _spread(self, state: CycleState, images: list[str]) -> _ImageSpread:
        spread = state.get(_SPREAD_KEY)
        if isinstance(spread, _ImageSpread):
            return spread
        lister = self._handle.snapshot
        all_nodes = lister.node_infos()
        lookup = getattr(lister, "image_state", None)
        states: dict[str, tuple[int, int]] = {}
        if lookup is not None:
            for name in images:
                st = lookup(name)
                if st is not None:
                    states[name] = (st.size, st.num_nodes)
        else:  # a lister keeping no image states: count, taking the first size seen
            for ni in all_nodes:
                node = ni.node
                if node is None or not node.images:
                    continue
                held = node.images
                for name in images:
                    size = held.get(name)
                    if size is not None:
                        size_seen, count = states.get(name, (size, 0))
                        states[name] = (size_seen, count + 1)
        spread = _ImageSpread(states, len(all_nodes))
        state.write(_SPREAD_KEY, spread)
        return spread

    def score_key(self, state: CycleState, pod: PodInfo) -> Hashable | None:
        """NodeLocalScore: the pod's images and container count, and how the cluster
        holds those images (sizes, nodes holding each, the number of nodes)."""
        spec = pod.spec
        num_containers = len(spec.get("containers") or []) + len(spec.get("initContainers") or [])
        images = [normalized_image_name(i) for i in pod.images]
        if not images:
            return (num_containers,)
        spread = self._spread(state, images)
        return (
            num_containers,
            tuple(images),
            tuple(sorted(spread.states.items())),
            spread.total,
        )

    def score(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo
    ) -> tuple[int, Status | None]:
        """The score in [0, 100]; never fails."""
        spec = pod.spec
        containers = spec.get("containers") or []
        inits = spec.get("initContainers") or []
        num_containers = len(containers) + len(inits)
        images = [normalized_image_name(i) for i in pod.images]
        node = node_info.node
        total = 0
        if images and node is not None and node.images:
            spread = self._spread(state, images)
            held = node.images
            for image in images:
                if image in held:
                    st = spread.states.get(image)
                    if st is not None:
                        total += scaled_image_score(st[0], st[1], spread.total)
        return calculate_priority(total, num_containers), None

    def score_nodes(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[list[int], Status | None]:
        """score() for many nodes at once: a node reporting no images scores 0."""
        out = [0] * len(nodes)
        score = self.score
        for i, ni in enumerate(nodes):
            node = ni.node
            if node is not None and node.images:
                out[i] = score(state, pod, ni)[0]
        return out, None


ENTRY = PluginEntry(NAME, ImageLocality, ImageLocality.new)
