"""Proposed kscheduler changes, tried out as patches applied at start-up.

    python -m bench.experiments --patches NAME -- --config F --kubeconfig K ...
    python -m bench.run --kscheduler-patches ALL ...
    python -m bench.cycle --patches gc --check

Each patch replaces functions of kscheduler in this process only, so that a
proposal can be measured with bench.run or bench.cycle before it is made in the
source (where it belongs: these copies do not follow later edits of the code
they replace). ``bench.cycle --check`` compares every placement with an
unpatched run. Nothing here is imported by kscheduler itself.

Patches (``ALL`` applies every one of them but the in-process ones):

* ``gc``             (for bench.cycle) the daemon's GC policy in this process: a
                     higher generation-0 threshold, gc.freeze() once synced.
* ``no-node-memo``   the framework's node memo off (kscheduler.framework.node_memo):
                     every Filter and Score plugin on every node, each cycle. With
                     ``bench.cycle --patches no-node-memo --check``, the pods placed
                     differently with the memo and without it.
* ``no-cycle``       (a measurement, never a proposal) PreFilter only, then each pod
                     to the next node in turn: no Filter, PreScore or Score. What the
                     daemon spends on everything but choosing the node (watches,
                     queue, assume, Reserve to PostBind, the Binding, the event,
                     the logs), for the same pods. The placements differ from
                     kube-scheduler's.
* ``quiet-results``  (a measurement) the per-attempt result log lines off, as with
                     ``-q``: what writing them costs.
* ``gc-stats``       (a measurement) every garbage collection's generation and
                     duration, written as JSON to $KSCHEDULER_GC_STATS (default
                     /tmp/kscheduler-gc-<pid>.json) every few seconds.
* ``no-reparse``     (a measurement) every pod and node version parsed whole, as
                     before Informer.retransform: what reparse_pod and reparse_node
                     save.

Proposals that were measured here and then made in the source (a yield between
cycles, batch ``score_nodes`` scoring, O(log n) event-log trimming, the GC
policy in the daemon, the cache's change log with PodTopologySpread and
InterPodAffinity PreFilter counts kept per node across cycles, the inline filter
loop, NodeResourcesFit's fast "fits" path, select_host's per-plugin sums, plain
int scores from run_score) are no longer patches: the code itself has them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import sys
from collections.abc import Callable, Sequence
from typing import Any

PATCHES: dict[str, Callable[[], None]] = {}
APPLIED: list[str] = []


def patch(name: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    def register(fn: Callable[[], None]) -> Callable[[], None]:
        PATCHES[name] = fn
        return fn

    return register


#: Patches that only hold in process (bench.cycle): left out of ALL.
IN_PROCESS_ONLY: frozenset[str] = frozenset({"no-node-memo"})

#: Patches that measure a part of the cost and change what the daemon does (its
#: placements, its logs): left out of ALL too.
MEASUREMENTS: frozenset[str] = frozenset({"no-cycle", "quiet-results", "gc-stats", "no-reparse"})


def apply(names: Sequence[str]) -> None:
    if "ALL" in names:
        names = [
            n
            for n in PATCHES
            if n not in APPLIED and n not in IN_PROCESS_ONLY and n not in MEASUREMENTS
        ]
    for name in names:
        if name not in PATCHES:
            raise SystemExit(f"unknown patch {name!r}; known: {', '.join(sorted(PATCHES))}")
        if name in APPLIED:
            continue
        PATCHES[name]()
        APPLIED.append(name)


# --------------------------------------------------------------------------- gc


@patch("gc")
def _gc() -> None:
    from kscheduler.app import SchedulerApp

    gc.set_threshold(50_000, 20, 100)
    original = SchedulerApp._wait_synced

    async def wait_synced(self: SchedulerApp, stop: asyncio.Event) -> None:
        await original(self, stop)
        gc.collect()
        gc.freeze()  # the synced cache is long-lived: keep it out of every collection

    SchedulerApp._wait_synced = wait_synced  # type: ignore[method-assign]


# --------------------------------------------------------------------------- gc-stats


@patch("gc-stats")
def _gc_stats() -> None:
    """Each collection as [seconds since start, generation, ms, objects collected]."""
    import json
    import os
    import time

    path = os.environ.get("KSCHEDULER_GC_STATS") or f"/tmp/kscheduler-gc-{os.getpid()}.json"
    start = time.perf_counter()
    began = [0.0]
    written = [start]
    collections: list[list[float]] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            began[0] = now
            return
        collections.append(
            [
                round(now - start, 3),
                info["generation"],
                round((now - began[0]) * 1e3, 3),
                info["collected"],
            ]
        )
        if now - written[0] > 5.0:
            written[0] = now
            with open(path, "w") as f:
                json.dump({"collections": collections, "counts": gc.get_count()}, f)

    gc.callbacks.append(callback)


# --------------------------------------------------------------------------- no-node-memo


@patch("no-node-memo")
def _no_node_memo() -> None:
    """Every plugin on every node, each cycle: the node memo off (to compare with it)."""
    from kscheduler.framework.runtime import Framework

    Framework.node_memo = False


# --------------------------------------------------------------------------- no-cycle


@patch("no-cycle")
def _no_cycle() -> None:
    """PreFilter (Reserve and PreBind read its state), then the next node in turn."""
    from kscheduler.algorithm import Algorithm, ScheduleResult
    from kscheduler.framework.cycle_state import CycleState
    from kscheduler.framework.interface import SharedLister
    from kscheduler.framework.runtime import Framework
    from kscheduler.framework.types import PodInfo

    turn = itertools.count()
    original = Algorithm.schedule_pod

    def schedule_pod(
        self: Algorithm,
        fwk: Framework,
        state: CycleState,
        pod: PodInfo,
        snapshot: SharedLister,
        **kwargs: Any,
    ) -> ScheduleResult:
        nodes = snapshot.node_infos()
        if not nodes or kwargs.get("record") is not None:
            return original(self, fwk, state, pod, snapshot, **kwargs)
        _, status, _ = fwk.run_pre_filter(state, pod, nodes)
        if status is not None:
            # the real cycle reports a PreFilter rejection or error (PreFilter again)
            return original(self, fwk, state, pod, snapshot, **kwargs)
        return ScheduleResult(nodes[next(turn) % len(nodes)].name, 1, 1)

    Algorithm.schedule_pod = schedule_pod  # type: ignore[method-assign]


# --------------------------------------------------------------------------- quiet-results


@patch("quiet-results")
def _quiet_results() -> None:
    import kscheduler.scheduler as scheduler

    class Quiet:
        """The scheduler module's logger with info() dropped (warnings stay)."""

        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def info(self, *args: Any, **kwargs: Any) -> None:
            return None

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    scheduler.log = Quiet(scheduler.log)


# --------------------------------------------------------------------------- no-reparse


@patch("no-reparse")
def _no_reparse() -> None:
    """Every pod and node version parsed whole: the informers' retransform off."""
    from kscheduler.app import SchedulerApp

    original = SchedulerApp.__init__

    def init(self: SchedulerApp, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.pod_informer.retransform = None
        self.node_informer.retransform = None

    SchedulerApp.__init__ = init  # type: ignore[method-assign]


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(prog="python -m bench.experiments")
    p.add_argument("--patches", default="", help=f"comma-separated, of: {', '.join(PATCHES)}")
    args = p.parse_args(argv)
    apply([n for n in args.patches.split(",") if n])
    from kscheduler.cli import main as kscheduler_main

    return kscheduler_main(rest)


if __name__ == "__main__":
    sys.exit(main())
