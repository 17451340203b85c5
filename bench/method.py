"""The pieces of bench.run's method that are not about pods: CPU sets, the
apiserver's request counters, the audit log of the scheduler identity, etcd
compaction, the machine's description, and ABBA ordering."""

from __future__ import annotations

import base64
import json
import os
import platform
import re
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------- CPU sets


def parse_cpus(spec: str) -> list[int]:
    """'1', '0-3', '0,2-3' -> sorted CPU numbers; ValueError names what is wrong."""
    cpus: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            raise ValueError(f"empty item in {spec!r}")
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"{part!r} is not a CPU number or range")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ValueError(f"range {part!r} runs backwards")
        cpus.update(range(a, b + 1))
    return sorted(cpus)


def format_cpus(cpus: Iterable[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def available_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def split_cpus(scheduler: Sequence[int], available: Sequence[int]) -> list[int]:
    """The CPUs left for the control plane and driver; ValueError when none is."""
    missing = sorted(set(scheduler) - set(available))
    if missing:
        raise ValueError(f"CPUs {format_cpus(missing)} are not available here")
    rest = sorted(set(available) - set(scheduler))
    if not rest:
        raise ValueError("no CPU is left for the control plane and the driver")
    return rest


def pin(pid: int, cpus: Iterable[int]) -> int:
    """Set the affinity of every thread of ``pid`` (a thread keeps its own; new
    threads inherit their creator's). Returns how many threads were pinned."""
    wanted = set(cpus)
    n = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            os.sched_setaffinity(int(tid), wanted)
            n += 1
        except OSError:  # a thread that exited meanwhile
            pass
    return n


def affinity(pid: int) -> list[int]:
    try:
        return sorted(os.sched_getaffinity(pid))
    except OSError:
        return []


# --------------------------------------------------------------------------- order


def abba(schedulers: Sequence[str], pairs: int) -> list[tuple[int, str]]:
    """(pair, scheduler) in alternating order: A B, B A, A B, ...

    With more than two schedulers the whole list is reversed every other pair,
    so each one's mean position over two pairs is the same.
    """
    out: list[tuple[int, str]] = []
    for p in range(pairs):
        order = list(schedulers) if p % 2 == 0 else list(reversed(schedulers))
        out += [(p, s) for s in order]
    return out


def median(values: Sequence[float]) -> float | None:
    s = sorted(values)
    if not s:
        return None
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and (max - min) / median of repeated measurements."""
    vals = [v for v in values if v is not None]
    m = median(vals)
    if m is None:
        return {"n": 0}
    return {
        "n": len(vals),
        "median": m,
        "min": min(vals),
        "max": max(vals),
        "range_pct": (max(vals) - min(vals)) / m * 100 if m else None,
    }


# --------------------------------------------------------------------------- apiserver metrics

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}\s+(\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def request_counts(metrics_text: str) -> Counter[str]:
    """apiserver_request_total summed by "VERB resource[/subresource]" (codes and
    groups folded together)."""
    out: Counter[str] = Counter()
    for line in metrics_text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        labels = dict(_LABEL.findall(m.group(2)))
        key = labels.get("verb", "?") + " " + labels.get("resource", "")
        if labels.get("subresource"):
            key += "/" + labels["subresource"]
        out[key] += int(float(m.group(3)))
    return out


def counter_delta(after: Counter[str], before: Counter[str]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in sorted(after) if after[k] - before.get(k, 0)}


# --------------------------------------------------------------------------- audit log

AUDITED_USER = "system:kube-scheduler"


def audit_policy(user: str = AUDITED_USER) -> str:
    """Metadata level (no bodies) for one user's requests, nothing for anyone else's."""
    return (
        "apiVersion: audit.k8s.io/v1\n"
        "kind: Policy\n"
        "omitStages: [RequestReceived]\n"
        "rules:\n"
        f"- level: Metadata\n  users: [{json.dumps(user)}]\n"
        "- level: None\n"
    )


def audit_apiserver_args(workdir: Path) -> list[str]:
    policy = workdir / "audit-policy.yaml"
    policy.write_text(audit_policy())
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={workdir / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-maxsize=0",
    ]


def audit_counts(path: Path, offset: int) -> tuple[dict[str, int], dict[str, int], int]:
    """Requests logged since ``offset``: ("VERB resource[/sub]" -> n, user agent -> n,
    new offset). A watch or list is counted once, at ResponseComplete; a watch
    still open is counted when it started (ResponseStarted)."""
    verbs: Counter[str] = Counter()
    agents: Counter[str] = Counter()
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return {}, {}, offset
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        stage = ev.get("stage")
        long_running = ev.get("verb") == "watch"
        if (long_running and stage != "ResponseStarted") or (
            not long_running and stage != "ResponseComplete"
        ):
            continue
        ref = ev.get("objectRef") or {}
        key = f"{ev.get('verb', '?')} {ref.get('resource', ev.get('requestURI', ''))}"
        if ref.get("subresource"):
            key += "/" + ref["subresource"]
        verbs[key] += 1
        agents[str(ev.get("userAgent", "")).split(" ")[0]] += 1
    return dict(sorted(verbs.items())), dict(sorted(agents.items())), offset + end


# --------------------------------------------------------------------------- etcd


def _etcd_post(endpoint: str, path: str, body: dict[str, Any], timeout: float) -> Any:
    req = urllib.request.Request(
        endpoint + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"{}")


def etcd_compact_defrag(endpoint: str, timeout: float = 300.0) -> dict[str, Any]:
    """Compact etcd to its current revision (physically) and defragment it; returns
    the revision and the database size before and after."""
    key = base64.b64encode(b"\0").decode()
    status0 = _etcd_post(endpoint, "/v3/maintenance/status", {}, timeout)
    rng = _etcd_post(endpoint, "/v3/kv/range", {"key": key, "limit": 1}, timeout)
    rev = int(rng["header"]["revision"])
    _etcd_post(endpoint, "/v3/kv/compaction", {"revision": rev, "physical": True}, timeout)
    _etcd_post(endpoint, "/v3/maintenance/defragment", {}, timeout)
    status1 = _etcd_post(endpoint, "/v3/maintenance/status", {}, timeout)
    return {
        "revision": rev,
        "db_bytes_before": int(status0.get("dbSize", 0)),
        "db_bytes_after": int(status1.get("dbSize", 0)),
    }


# --------------------------------------------------------------------------- machine


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def machine() -> dict[str, Any]:
    """What the run ran on, and how loaded the machine was when it started."""
    model = ""
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kib = 0
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    return {
        "cpus": os.cpu_count(),
        "cpus_available": available_cpus(),
        "cpu_model": model,
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "loadavg_at_start": load(),
    }


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


# ----------------------------------------------------------------- what else ran

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def busy_seconds(stat_text: str | None = None) -> float:
    """CPU seconds every CPU spent busy since boot (/proc/stat: all but idle and iowait).

    guest time is already inside user time, so it is not added again.
    """
    text = stat_text if stat_text is not None else _read("/proc/stat")
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            ticks = [int(x) for x in parts[1:9]]
            ticks += [0] * (8 - len(ticks))
            return (sum(ticks) - ticks[3] - ticks[4]) / _TICK
    return 0.0


def _proc_stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, utime + stime + cutime + cstime in seconds) of one process."""
    text = _read(f"/proc/{pid}/stat")
    end = text.rfind(")")
    if end < 0:
        return None
    fields = text[end + 2 :].split()
    try:
        ppid = int(fields[1])
        cpu = sum(int(fields[i]) for i in (11, 12, 13, 14)) / _TICK
    except (IndexError, ValueError):
        return None
    return ppid, cpu


def tree_seconds(root: int, table: dict[int, tuple[int, float]] | None = None) -> float:
    """CPU seconds of ``root`` and every live process under it, each with the CPU of the
    children it has reaped (a child that exited and was waited for is in its parent's
    cutime/cstime, so nothing it used is lost)."""
    if table is None:
        table = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                got = _proc_stat(entry)
                if got is not None:
                    table[int(entry)] = got
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            total += table[pid][1]
        todo += children.get(pid, [])
    return total


class ForeignCpu:
    """CPU the machine spent outside one process tree between two readings.

    A benchmark's own processes (the driver, the control plane it started, the
    scheduler under test) are the tree; anything else that ran on the machine
    meanwhile (a build, a test suite, another benchmark) is foreign and makes
    the run's CPU and throughput figures suspect.
    """

    def __init__(self, root: int | None = None) -> None:
        self.root = os.getpid() if root is None else root
        self.restart()

    def seconds(self) -> float:
        """Foreign CPU seconds since construction (or the last ``restart``)."""
        return max(0.0, (busy_seconds() - self._busy0) - (tree_seconds(self.root) - self._tree0))

    def restart(self) -> None:
        self.started = time.monotonic()
        self._busy0 = busy_seconds()
        self._tree0 = tree_seconds(self.root)
