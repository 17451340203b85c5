"""Run kscheduler with tracemalloc on, writing a heap snapshot every INTERVAL seconds.

    python -m bench.tracemalloc_run SNAPSHOT_DIR INTERVAL_S [kscheduler args...]

The snapshots (``snap-<seconds>.pickle``, seconds since start) are diffed afterwards
with :func:`top_growth`; the soak (``make soak SOAK_TRACEMALLOC=1``) does this for the
second half of its run. Tracing costs CPU and memory, so the RSS of such a run is not
the figure to quote.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path

#: frames kept per allocation (KSCHEDULER_TRACEMALLOC_FRAMES); fewer trace faster
FRAMES = int(os.environ.get("KSCHEDULER_TRACEMALLOC_FRAMES", "8"))
#: seconds between two samples of the traced total in ``traced.tsv``
TOTAL_EVERY = 10.0


def _snapshots(out: Path, interval: float, began: float) -> None:
    """A snapshot every ``interval`` seconds; the traced total (what the Python heap
    holds) every TOTAL_EVERY seconds, to set beside the process's RSS."""
    next_snap = began + interval
    with open(out / "traced.tsv", "a") as totals:
        while True:
            time.sleep(TOTAL_EVERY)
            now = time.monotonic()
            current, _ = tracemalloc.get_traced_memory()
            totals.write(f"{now - began:.1f}\t{current}\n")
            totals.flush()
            if now < next_snap:
                continue
            next_snap += interval
            _snapshot(out, int(now - began))


def traced_totals(out: Path) -> list[tuple[float, float]]:
    """(seconds since tracing began, traced MB) from ``out/traced.tsv``."""
    path = out / "traced.tsv"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        t, b = line.split("\t")
        rows.append((float(t), int(b) / 1e6))
    return rows


def _snapshot(out: Path, elapsed: int) -> None:
    snap = tracemalloc.take_snapshot()
    tmp = out / f".snap-{elapsed:06d}.tmp"
    snap.dump(str(tmp))
    tmp.rename(out / f"snap-{elapsed:06d}.pickle")


def top_growth(older: Path, newer: Path, limit: int = 25) -> list[str]:
    """The allocation sites that grew most from ``older`` to ``newer``, by traceback."""
    ignore = [
        tracemalloc.Filter(False, tracemalloc.__file__),
        tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"),
    ]
    a = tracemalloc.Snapshot.load(str(older)).filter_traces(ignore)
    b = tracemalloc.Snapshot.load(str(newer)).filter_traces(ignore)
    lines = []
    for stat in b.compare_to(a, "traceback")[:limit]:
        # the allocation first, then its callers
        frames = " <- ".join(
            f"{Path(f.filename).name}:{f.lineno}" for f in list(stat.traceback)[::-1][:6]
        )
        lines.append(
            f"{stat.size_diff / 1024:+.1f} KiB ({stat.count_diff:+d} blocks, "
            f"now {stat.size / 1024:.1f} KiB): {frames}"
        )
    return lines


def main() -> int:
    out, interval, rest = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    out.mkdir(parents=True, exist_ok=True)
    # imported before tracing starts: tracing every import's allocations is slow,
    # and what they allocate once is not what grows
    for module in ("kscheduler.app", "kscheduler.kube", "kscheduler.plugins"):
        importlib.import_module(module)
    from kscheduler.cli import main as kscheduler_main

    tracemalloc.start(FRAMES)
    began = time.monotonic()
    threading.Thread(target=_snapshots, args=(out, interval, began), daemon=True).start()
    return kscheduler_main(rest)


if __name__ == "__main__":
    sys.exit(main())
