"""Proposed kscheduler changes, tried out as patches applied at start-up.

    python -m bench.experiments --patches yield -- --config F --kubeconfig K ...
    python -m bench.run --kscheduler-patches yield ...

Each patch replaces a function of kscheduler in this process only, so that a
proposal can be measured with bench.run or bench.cycle before it is made in
the source. Nothing here is imported by kscheduler itself.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

PATCHES: dict[str, Callable[[], None]] = {}


def patch(name: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    def register(fn: Callable[[], None]) -> Callable[[], None]:
        PATCHES[name] = fn
        return fn

    return register


def apply(names: list[str]) -> None:
    for name in names:
        if name not in PATCHES:
            raise SystemExit(f"unknown patch {name!r}; known: {', '.join(sorted(PATCHES))}")
        PATCHES[name]()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(prog="python -m bench.experiments")
    p.add_argument("--patches", default="", help="comma-separated patch names")
    args = p.parse_args(argv)
    apply([n for n in args.patches.split(",") if n])
    from kscheduler.cli import main as kscheduler_main

    return kscheduler_main(rest)


if __name__ == "__main__":
    sys.exit(main())
