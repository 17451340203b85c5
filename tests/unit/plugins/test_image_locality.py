from __future__ import annotations

import hashlib
from typing import Any

import pytest

from kscheduler.cache import Cache, Snapshot
from kscheduler.framework import CycleState, NodeInfo, PodInfo
from kscheduler.framework.interface import ImageState
from kscheduler.framework.parse import parse_pod
from kscheduler.plugins.image_locality import (
    ENTRY,
    MB,
    ImageLocality,
    calculate_priority,
    normalized_image_name,
)

from ..builders import node, pod


class FakeSnapshot:
    def __init__(self, nodes: list[NodeInfo]) -> None:
        self._nodes = nodes

    def node_infos(self) -> list[NodeInfo]:
        return self._nodes


class FakeHandle:
    def __init__(self, nodes: list[NodeInfo]) -> None:
        self.snapshot = FakeSnapshot(nodes)


def mkpod(*images: str, init: tuple[str, ...] = ()) -> PodInfo:
    raw: dict[str, Any] = pod("p").raw()
    raw["spec"]["containers"] = [{"name": f"c{i}", "image": img} for i, img in enumerate(images)]
    if init:
        raw["spec"]["initContainers"] = [
            {"name": f"i{i}", "image": img} for i, img in enumerate(init)
        ]
    return parse_pod(raw)


def mknode(name: str, *images: tuple[str, int]) -> NodeInfo:
    b = node(name)
    for image, size in images:
        b = b.image(image, size)
    return b.build()


# m1 holds gcr.io/40 (also as :v1), gcr.io/300 and gcr.io/2000; m2 gcr.io/250 and gcr.io/10.
M1 = (
    ("gcr.io/40:latest", 40 * MB),
    ("gcr.io/40:v1", 40 * MB),
    ("gcr.io/300:latest", 300 * MB),
    ("gcr.io/2000:latest", 2000 * MB),
)
M2 = (("gcr.io/250:latest", 250 * MB), ("gcr.io/10:latest", 10 * MB))


def scores(p: PodInfo, nodes: list[NodeInfo]) -> list[int]:
    pl = ImageLocality.new(None, FakeHandle(nodes))  # type: ignore[arg-type]
    state = CycleState()
    out = []
    for n in nodes:
        s, st = pl.score(state, p, n)
        assert st is None
        out.append(s)
    return out


@pytest.mark.parametrize(
    ("p", "extra_nodes", "want"),
    [
        # m1: 40Mi on 1 of 2 nodes -> 20Mi < 23Mi -> 0.
        # m2: 250Mi/2 = 125Mi; 2 containers: max 2000Mi -> 100*(125-23)/(2000-23) = 5
        (mkpod("gcr.io/40", "gcr.io/250"), 0, [0, 5]),
        # m1: 20Mi + 150Mi = 170Mi -> 100*147/1977 = 7
        (mkpod("gcr.io/40", "gcr.io/300"), 0, [7, 0]),
        # m1: 2000Mi/2 = 1000Mi -> 100*977/1977 = 49; m2: 10Mi/2 -> 0
        (mkpod("gcr.io/10", "gcr.io/2000"), 0, [49, 0]),
        # three nodes: int(2000Mi/3) = 699050666 bytes -> 100*(699050666-23Mi)/1977Mi = 32
        (mkpod("gcr.io/10", "gcr.io/2000"), 1, [32, 0, 0]),
        # one container: the cap is 1000Mi: m1 2000Mi/2 = 1000Mi -> 100
        (mkpod("gcr.io/2000"), 0, [100, 0]),
        # tagged names match exactly; an init container counts toward both sum and cap:
        # 20Mi + 150Mi over 3 containers: 100*(170-23)/(3000-23) = 4
        (mkpod("gcr.io/40:v1", "gcr.io/nope", init=("gcr.io/300",)), 0, [4, 0]),
        # no containers at all
        (mkpod(), 0, [0, 0]),
    ],
)
def test_score(p: PodInfo, extra_nodes: int, want: list[int]) -> None:
    nodes = [mknode("m1", *M1), mknode("m2", *M2)]
    nodes += [mknode(f"m{3 + i}") for i in range(extra_nodes)]
    assert scores(p, nodes) == want


def test_score_spread_over_nodes() -> None:
    # 500Mi image on 3 of 4 nodes: 375Mi each -> 100*(375-23)/977 = 36; the bare node 0.
    nodes = [mknode(f"n{i}", ("app:1", 500 * MB)) for i in range(3)] + [mknode("n3")]
    assert scores(mkpod("app:1"), nodes) == [36, 36, 36, 0]


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("root", "root:latest"),
        ("gcr.io:5000/root", "gcr.io:5000/root:latest"),
        ("root:tag", "root:tag"),
        ("gcr.io:5000/root:tag", "gcr.io:5000/root:tag"),
    ],
)
def test_normalized_image_name(name: str, want: str) -> None:
    assert normalized_image_name(name) == want


def test_normalized_image_name_keeps_digests() -> None:
    digest = "root@sha256:" + hashlib.sha256(b"root").hexdigest()
    assert normalized_image_name(digest) == digest


def test_calculate_priority_clamps() -> None:
    assert calculate_priority(0, 1) == 0
    assert calculate_priority(23 * MB, 1) == 0
    assert calculate_priority(5000 * MB, 1) == 100
    assert calculate_priority(5000 * MB, 2) == 100
    assert calculate_priority(1000 * MB, 2) == 100 * 977 // 1977


def test_entry() -> None:
    assert ENTRY.name == "ImageLocality"
    assert ENTRY.parse_args is None
    assert ENTRY.extension_points == frozenset({"score"})


def cached(*nodes: NodeInfo) -> tuple[Cache, Snapshot]:
    cache = Cache()
    for ni in nodes:
        assert ni.node is not None
        cache.add_node(ni.node)
    snap = Snapshot(cache)
    snap.update()
    return cache, snap


def test_cache_keeps_the_first_size_seen_for_an_image() -> None:
    cache, _ = cached(mknode("n1", ("app:2", 800 * MB)), mknode("n2", ("app:2", 300 * MB)))
    assert cache.image_state("app:2") == ImageState(800 * MB, 2)
    assert cache.image_state("other:1") is None
    # the first holder goes: the size stays while another node holds the image
    cache.remove_node("n1")
    assert cache.image_state("app:2") == ImageState(800 * MB, 1)
    # an update of the sole holder re-registers the image with its own size
    n2 = mknode("n2", ("app:2", 300 * MB), ("app:3", 1 * MB)).node
    assert n2 is not None
    cache.update_node(n2)
    assert cache.image_state("app:2") == ImageState(300 * MB, 1)
    assert cache.image_state("app:3") == ImageState(1 * MB, 1)
    cache.remove_node("n2")
    assert cache.image_state("app:2") is None


def test_score_uses_the_cluster_wide_size_like_kube_scheduler() -> None:
    # 800Mi on n1, 300Mi on n2: both score with the first size seen (800Mi), so they tie.
    nodes = [
        mknode("n0"),
        mknode("n1", ("app:2", 800 * MB)),
        mknode("n2", ("app:2", 300 * MB)),
    ]
    _, snap = cached(*nodes)

    class Handle:
        snapshot = snap

    pl = ImageLocality.new(None, Handle())  # type: ignore[arg-type]
    state = CycleState()
    got = [pl.score(state, mkpod("app:2"), ni)[0] for ni in snap.node_infos()]
    # int(800Mi * 2/3) -> 100*(533.3-23)/977 = 52
    assert got == [0, 52, 52]
    # a lister without image states: each node counted, the first size in list order
    assert scores(mkpod("app:2"), nodes) == [0, 52, 52]
