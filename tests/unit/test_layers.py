"""The layering rule: plugins import only the framework (never each other, the
API client, the scheduler or the app); the framework imports nothing above it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "kscheduler"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return {m for m in out if m.startswith("kscheduler")}


@pytest.mark.parametrize("path", sorted((PKG / "plugins").glob("*.py")), ids=lambda p: p.name)
def test_plugins_import_only_the_framework(path: Path) -> None:
    if path.name == "__init__.py":
        return  # the registry lists the plugin modules by name
    bad = {m for m in imported_modules(path) if not m.startswith("kscheduler.framework")}
    assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize("path", sorted((PKG / "framework").glob("*.py")), ids=lambda p: p.name)
def test_framework_imports_nothing_above_it(path: Path) -> None:
    bad = {m for m in imported_modules(path) if not m.startswith("kscheduler.framework")}
    assert not bad, f"framework/{path.name} imports {sorted(bad)}"
