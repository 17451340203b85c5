"""Sampling profiles of a running process with py-spy, and a text summary of them.

    python -m bench.pyspy PROFILE.txt [--top 40] [--filter kscheduler]

``record`` attaches py-spy to a live pid (no restart, no instrumentation: the
process runs at full speed), writing collapsed stacks ("raw" format: one line
per distinct stack, frames separated by ';', then the sample count).
``summarize`` turns such a file into self-time and inclusive-time tables per
function, and per kscheduler module.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^:()]+)(?::(?P<line>\d+))?\)$")


def py_spy_binary() -> str | None:
    local = Path(sys.executable).parent / "py-spy"
    if local.exists():
        return str(local)
    return shutil.which("py-spy")


class Recorder:
    """``py-spy record --pid`` until stop() (SIGINT makes py-spy write its output)."""

    def __init__(self, pid: int, out: Path, *, rate: int = 200) -> None:
        binary = py_spy_binary()
        if binary is None:
            raise RuntimeError("py-spy is not installed (pip install -e '.[bench]')")
        self.out = out
        self._log = open(out.with_suffix(".log"), "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                binary,
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(rate),
                "--nonblocking",
                "--format",
                "raw",
                "--output",
                str(out),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def _label(frame: str) -> tuple[str, str]:
    """(function label, file) of one collapsed-stack frame."""
    m = _FRAME.match(frame.strip())
    if m is None:
        return frame.strip(), ""
    path = m.group("file")
    short = path
    for marker in ("/kscheduler/", "/site-packages/", "/lib/python3"):
        i = path.rfind(marker)
        if i >= 0:
            short = path[i + 1 :]
            break
    return f"{m.group('func')} ({short})", short


def summarize(path: Path, *, top: int = 40, focus: str = "kscheduler") -> str:
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    modules: Counter[str] = Counter()
    total = 0
    for raw in path.read_text(errors="replace").splitlines():
        stack, _, count_text = raw.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        n = int(count_text)
        total += n
        frames = [f for f in stack.split(";") if f]
        # py-spy's first frame may be the thread name ("process 123:..." or "thread ...")
        if frames and not _FRAME.match(frames[0].strip()):
            frames = frames[1:]
        labels = [_label(f) for f in frames]
        if labels:
            self_time[labels[-1][0]] += n
        for label in {lab for lab, _ in labels}:
            inclusive[label] += n
        # the innermost frame of ours: where time is spent from our code's point of view
        ours = [f for lab, f in labels if f.startswith(focus + "/")]
        modules[ours[-1] if ours else "(outside " + focus + ")"] += n
    if total == 0:
        return f"{path}: no samples"

    def pct(n: int) -> str:
        return f"{100 * n / total:5.1f}%"

    lines = [f"{path}: {total} samples"]
    lines.append(f"\nself time, top {top}:")
    lines += [f"  {pct(n)}  {lab}" for lab, n in self_time.most_common(top)]
    lines.append(f"\ninclusive time ({focus} functions), top {top}:")
    ours_incl = [(lab, n) for lab, n in inclusive.most_common() if f"({focus}/" in lab]
    lines += [f"  {pct(n)}  {lab}" for lab, n in ours_incl[:top]]
    lines.append(f"\nby innermost {focus} module:")
    lines += [f"  {pct(n)}  {mod}" for mod, n in modules.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pyspy", description=__doc__.split("\n")[0])
    p.add_argument("profile", type=Path, help="a py-spy --format raw output file")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--focus", default="kscheduler", help="package whose functions to list")
    args = p.parse_args(argv)
    with contextlib.suppress(BrokenPipeError):
        print(summarize(args.profile, top=args.top, focus=args.focus))
    return 0


if __name__ == "__main__":
    sys.exit(main())
