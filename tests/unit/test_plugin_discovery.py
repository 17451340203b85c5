"""Out-of-tree plugins through the ``kscheduler.plugins`` entry-point group, with small
distributions written to a temporary site directory."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kscheduler.plugins import (
    ENTRY_POINT_GROUP,
    PluginDiscoveryError,
    full_registry,
    in_tree_registry,
)

PLUGIN = """
from kscheduler.framework import PluginEntry


class {cls}:
    name = "{name}"

    def score(self, state, pod, node_info):
        return 0, None


ENTRY = PluginEntry("{name}", {cls}, lambda args, handle: {cls}())
"""


class Site:
    """A directory of installed distributions (dist-info + modules)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def dist(self, name: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
        info = self.root / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        eps = "".join(f"{k} = {v}\n" for k, v in entry_points.items())
        (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{eps}")
        for mod, text in modules.items():
            (self.root / f"{mod}.py").write_text(textwrap.dedent(text))

    def entry_points(self) -> list[importlib.metadata.EntryPoint]:
        return [
            ep
            for d in importlib.metadata.distributions(path=[str(self.root)])
            for ep in d.entry_points
            if ep.group == ENTRY_POINT_GROUP
        ]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    s = Site(tmp_path / f"site_{tmp_path.name}")
    monkeypatch.syspath_prepend(str(s.root))
    return s


def test_object_and_module_entry_points_are_registered(site: Site) -> None:
    site.dist(
        "plugin-a",
        {"Alpha": "kst_alpha:ENTRY", "Beta": "kst_beta"},
        {
            "kst_alpha": PLUGIN.format(cls="Alpha", name="Alpha"),
            "kst_beta": PLUGIN.format(cls="Beta", name="Beta"),
        },
    )
    reg = full_registry(site.entry_points())
    assert {"Alpha", "Beta"} <= set(reg)
    assert set(in_tree_registry()) <= set(reg)
    assert reg["Alpha"].extension_points == frozenset({"score"})


def test_a_name_taken_in_tree_is_refused(site: Site) -> None:
    site.dist(
        "shadow",
        {"NodeName": "kst_shadow:ENTRY"},
        {"kst_shadow": PLUGIN.format(cls="Shadow", name="NodeName")},
    )
    with pytest.raises(PluginDiscoveryError) as ei:
        full_registry(site.entry_points())
    msg = str(ei.value)
    assert 'plugin "NodeName" is registered twice' in msg
    assert "kscheduler (in-tree)" in msg and "distribution shadow 1.0" in msg


def test_a_name_two_distributions_register_is_refused(site: Site) -> None:
    site.dist("one", {"Same": "kst_one:ENTRY"}, {"kst_one": PLUGIN.format(cls="One", name="Same")})
    site.dist("two", {"Same": "kst_two:ENTRY"}, {"kst_two": PLUGIN.format(cls="Two", name="Same")})
    with pytest.raises(PluginDiscoveryError) as ei:
        full_registry(site.entry_points())
    msg = str(ei.value)
    assert 'plugin "Same" is registered twice' in msg
    assert "distribution one 1.0" in msg and "distribution two 1.0" in msg


@pytest.mark.parametrize(
    ("target", "module", "error"),
    [
        (
            "kst_b1:ENTRY",
            "import kst_missing_dependency\n",
            "entry point Broken = kst_b1:ENTRY of distribution broken 1.0 "
            "(group kscheduler.plugins) cannot be loaded: ModuleNotFoundError: "
            "No module named 'kst_missing_dependency'",
        ),
        ("kst_b2:THING", "THING = 42\n", "expected a kscheduler.framework.PluginEntry"),
        ("kst_b3", "x = 1\n", "module kst_b3 has no ENTRY"),
        (
            "kst_b4:ENTRY",
            PLUGIN.format(cls="Other", name="Other"),
            'the entry point must be named after the plugin, "Other"',
        ),
    ],
)
def test_a_broken_entry_point_is_a_clear_error(
    site: Site, target: str, module: str, error: str
) -> None:
    site.dist("broken", {"Broken": target}, {target.split(":")[0]: module})
    with pytest.raises(PluginDiscoveryError) as ei:
        full_registry(site.entry_points())
    assert error in str(ei.value)


def test_the_command_reports_a_broken_plugin_and_exits_2(site: Site) -> None:
    site.dist("broken", {"Broken": "kst_b5:ENTRY"}, {"kst_b5": "raise RuntimeError('no')\n"})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site.root), *sys.path]))
    done = subprocess.run(
        [sys.executable, "-m", "kscheduler"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "entry point Broken = kst_b5:ENTRY of distribution broken 1.0" in done.stderr
    assert "RuntimeError: no" in done.stderr
    assert "Traceback" not in done.stderr
