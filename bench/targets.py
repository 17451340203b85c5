"""Issue 17's speed targets, read from a bench.run results file.

    python -m bench.targets bench/results/<time>.json [--markdown]

For every workload, client setting and CPU mode in the file's summary it prints
kscheduler's median against kube-scheduler's in the same run (CPU ms per pod,
pods/s), kscheduler's fraction of the trivial binder's ceiling, and whether each
target holds:

- CPU per scheduled pod at most 0.5x kube-scheduler's (every workload);
- pinned and unthrottled: pods/s at least 1.5x kube-scheduler's and at least
  95% of the ceiling (SchedulingBasic, SchedulingNodeAffinity,
  TopologySpreading, SchedulingPodAntiAffinity). With the default client
  (50 qps, burst 100) both schedulers bind at their client's limit, so those
  cells show the ratios unjudged;
- SchedulingBasic in at most 1 ms of kscheduler CPU per pod.

A target the file cannot judge (a missing run, no ceiling) reads "-".
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CPU_RATIO_MAX = 0.5
THROUGHPUT_RATIO_MIN = 1.5
CEILING_MIN = 0.95
BASIC_CPU_MS_MAX = 1.0
THROUGHPUT_WORKLOADS = (
    "SchedulingBasic",
    "SchedulingNodeAffinity",
    "TopologySpreading",
    "SchedulingPodAntiAffinity",
)

KUBE = "kube-scheduler"
KS = "kscheduler"


def _median(cell: Any) -> float | None:
    """A summary value: a plain number, or a {median, min, max} spread."""
    if isinstance(cell, dict):
        cell = cell.get("median")
    return float(cell) if isinstance(cell, int | float) else None


def _verdict(value: float | None, ok: bool | None) -> str:
    if value is None or ok is None:
        return "-"
    return "met" if ok else "not met"


def target_rows(summary: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per summary entry that has both schedulers, with each target judged."""
    rows: list[dict[str, Any]] = []
    for entry in summary:
        scheds = entry.get("schedulers", {})
        ks, kube = scheds.get(KS), scheds.get(KUBE)
        if not ks or not kube:
            continue
        ks_cpu, kube_cpu = _median(ks.get("cpu_ms_per_pod")), _median(kube.get("cpu_ms_per_pod"))
        ks_rate, kube_rate = _median(ks.get("average")), _median(kube.get("average"))
        cpu_ratio = ks_cpu / kube_cpu if ks_cpu is not None and kube_cpu else None
        rate_ratio = ks_rate / kube_rate if ks_rate is not None and kube_rate else None
        of_ceiling = (ks.get("of_ceiling") or {}).get("average")
        pinned = entry.get("cpu_mode") == "pinned"
        throughput_target = (
            pinned
            and entry["throttle"] == "unthrottled"
            and entry["workload"] in THROUGHPUT_WORKLOADS
        )
        row: dict[str, Any] = {
            "workload": entry["workload"],
            "throttle": entry["throttle"],
            "cpu_mode": entry["cpu_mode"],
            "runs": f"{ks.get('complete', 0)}/{ks.get('n', 0)}",
            "kscheduler_cpu_ms": ks_cpu,
            "kube_cpu_ms": kube_cpu,
            "cpu_ratio": cpu_ratio,
            "cpu_target": _verdict(cpu_ratio, None if cpu_ratio is None else cpu_ratio <= 0.5),
            "kscheduler_pods_s": ks_rate,
            "kube_pods_s": kube_rate,
            "throughput_ratio": rate_ratio,
            "of_ceiling": of_ceiling,
            "throughput_target": "",
            "ceiling_target": "",
            "basic_cpu_target": "",
        }
        if throughput_target:
            row["throughput_target"] = _verdict(
                rate_ratio, None if rate_ratio is None else rate_ratio >= THROUGHPUT_RATIO_MIN
            )
            row["ceiling_target"] = _verdict(
                of_ceiling, None if of_ceiling is None else of_ceiling >= CEILING_MIN
            )
        if entry["workload"] == "SchedulingBasic":
            row["basic_cpu_target"] = _verdict(
                ks_cpu, None if ks_cpu is None else ks_cpu <= BASIC_CPU_MS_MAX
            )
        rows.append(row)
    return rows


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


HEADER = (
    "workload",
    "client",
    "cpus",
    "runs",
    "CPU ms/pod ks / kube",
    "CPU ratio (<= 0.5x)",
    "pods/s ks / kube",
    "pods/s ratio (>= 1.5x)",
    "of ceiling (>= 95%)",
    "SchedulingBasic <= 1 ms",
)


def render(rows: Sequence[dict[str, Any]], *, markdown: bool) -> str:
    cells: list[list[str]] = []
    for r in rows:
        cpu_ratio = _num(r["cpu_ratio"], "{:.2f}x")
        rate_ratio = _num(r["throughput_ratio"], "{:.2f}x")
        ceiling = _num(r["of_ceiling"], "{:.1%}")
        if r["throughput_target"]:
            rate_ratio += f" {r['throughput_target']}"
            ceiling += f" {r['ceiling_target']}"
        cells.append(
            [
                r["workload"],
                r["throttle"],
                r["cpu_mode"],
                r["runs"],
                f"{_num(r['kscheduler_cpu_ms'], '{:.2f}')} / {_num(r['kube_cpu_ms'], '{:.2f}')}",
                f"{cpu_ratio} {r['cpu_target']}",
                f"{_num(r['kscheduler_pods_s'], '{:.0f}')} / {_num(r['kube_pods_s'], '{:.0f}')}",
                rate_ratio,
                ceiling,
                r["basic_cpu_target"],
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(c) + " |" for c in cells]
        return "\n".join(lines)
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(HEADER)]
    out = ["  ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True))]
    out += ["  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)) for c in cells]
    return "\n".join(line.rstrip() for line in out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.targets", description="issue 17's speed targets from a results file"
    )
    p.add_argument("results", type=Path, help="a bench.run results JSON")
    p.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = p.parse_args(argv)
    try:
        doc = json.loads(args.results.read_text())
        summary = doc["summary"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"{args.results}: not a bench.run results file ({exc})", file=sys.stderr)
        return 2
    print(render(target_rows(summary), markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
