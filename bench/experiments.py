"""Proposed kscheduler changes, tried out as patches applied at start-up.

    python -m bench.experiments --patches score-ints -- --config F --kubeconfig K ...
    python -m bench.run --kscheduler-patches ALL ...
    python -m bench.cycle --patches score-ints,gc --check

Each patch replaces functions of kscheduler in this process only, so that a
proposal can be measured with bench.run or bench.cycle before it is made in the
source (where it belongs: these copies do not follow later edits of the code
they replace). ``bench.cycle --check`` compares every placement with an
unpatched run. Nothing here is imported by kscheduler itself.

Patches (``ALL`` applies every one of them but score-ints):

* ``score-ints``     (bench.cycle only) run_score returns int lists, select_host
                     sums them: no NodeScore object per plugin and node;
* ``gc``             (for bench.cycle) the daemon's GC policy in this process: a
                     higher generation-0 threshold, gc.freeze() once synced.

Proposals that were measured here and then made in the source (a yield between
cycles, batch ``score_nodes`` scoring, O(log n) event-log trimming, the GC
policy in the daemon, the cache's change log with PodTopologySpread and
InterPodAffinity PreFilter counts kept per node across cycles, the inline filter
loop, NodeResourcesFit's fast "fits" path, select_host's per-plugin sums) are no
longer patches: the code itself has them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
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
IN_PROCESS_ONLY = frozenset({"score-ints"})


def apply(names: Sequence[str]) -> None:
    if "ALL" in names:
        names = [n for n in PATCHES if n not in APPLIED and n not in IN_PROCESS_ONLY]
    for name in names:
        if name not in PATCHES:
            raise SystemExit(f"unknown patch {name!r}; known: {', '.join(sorted(PATCHES))}")
        if name in APPLIED:
            continue
        PATCHES[name]()
        APPLIED.append(name)


# --------------------------------------------------------------------------- scoring


@patch("score-ints")
def _score_ints() -> None:
    """run_score hands select_host plain int lists (no NodeScore per plugin and node).

    In-process only (bench.cycle): the daemon's explain/annotation code still
    reads NodeScore objects from ScheduleResult.scores.
    """
    from kscheduler import algorithm as alg
    from kscheduler.framework.interface import NodeScore, ScoreNormalizer
    from kscheduler.framework.runtime import Framework
    from kscheduler.framework.status import Code, Status

    def run_score_ints(
        self: Framework, state: Any, pod: Any, nodes: Sequence[Any]
    ) -> tuple[dict[str, list[int]], Any]:
        out: dict[str, list[int]] = {}
        skip = state.skip_score_plugins
        for p in self.score_plugins:
            if skip and p.name in skip:
                continue
            batch = getattr(p, "score_nodes", None)
            if batch is not None:
                ints, st = batch(state, pod, nodes)
            else:
                ints = []
                st = None
                for ni in nodes:
                    s, st = p.score(state, pod, ni)
                    if st is not None and st.code != Code.SUCCESS:
                        break
                    ints.append(s)
            if st is not None and st.code != Code.SUCCESS:
                return out, st.with_plugin(p.name)
            if isinstance(p, ScoreNormalizer):
                scores = [NodeScore(ni.name, s) for ni, s in zip(nodes, ints, strict=True)]
                p.normalize_score(state, pod, scores)
                ints = [ns.score for ns in scores]
            if ints and (min(ints) < 0 or max(ints) > 100):
                return out, Status.as_error(f"plugin {p.name}: invalid score", p.name)
            w = self.score_weights[p.name]
            out[p.name] = [s * w for s in ints] if w != 1 else ints
        return out, None

    def select_host(
        self: alg.Algorithm, nodes: Sequence[Any], scores: dict[str, list[int]]
    ) -> tuple[str, dict[str, int]]:
        lists = list(scores.values())
        totals = [sum(t) for t in zip(*lists, strict=True)] if lists else [0] * len(nodes)
        best = max(totals)
        ties = [i for i, t in enumerate(totals) if t == best]
        pick = ties[0] if len(ties) == 1 else ties[self.rng.randrange(len(ties))]
        return nodes[pick].name, {ni.name: totals[i] for i, ni in enumerate(nodes)}

    Framework.run_score = run_score_ints  # type: ignore[method-assign,assignment]
    alg.Algorithm.select_host = select_host  # type: ignore[method-assign,assignment]


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
