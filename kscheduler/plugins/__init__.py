"""In-tree plugins, one module each, listed by hand in :func:`in_tree_registry`, and
out-of-tree plugins found through the ``kscheduler.plugins`` entry-point group
(:func:`full_registry`)."""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Iterable
from types import ModuleType

from kscheduler.framework.registry import PluginEntry, Registry

#: Module names under kscheduler.plugins, in the order of the default profile.
#: Modules past the default profile's plugins are shipped but enabled only by config.
IN_TREE = [
    "scheduling_gates",
    "priority_sort",
    "node_unschedulable",
    "node_name",
    "taint_toleration",
    "node_affinity",
    "node_ports",
    "node_resources_fit",
    "volume_restrictions",
    "node_volume_limits",
    "volume_binding",
    "volume_zone",
    "pod_topology_spread",
    "inter_pod_affinity",
    "dynamic_resources",
    "default_preemption",
    "balanced_allocation",
    "image_locality",
    "default_binder",
    "node_declared_features",
    "coscheduling",
]

#: The entry-point group out-of-tree plugin distributions register under.
ENTRY_POINT_GROUP = "kscheduler.plugins"

_IN_TREE_OWNER = "kscheduler (in-tree)"


class PluginDiscoveryError(Exception):
    """An out-of-tree plugin cannot be registered; the message names the entry point
    and its distribution. Raised at startup, before the config is read."""


def in_tree_registry() -> Registry:
    reg = Registry()
    for mod_name in IN_TREE:
        mod = importlib.import_module(f"kscheduler.plugins.{mod_name}")
        reg.register(mod.ENTRY)
    return reg


def full_registry(
    entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
) -> Registry:
    """The in-tree plugins plus every plugin registered under :data:`ENTRY_POINT_GROUP`.

    Each entry point names a :class:`PluginEntry` object (``pkg.mod:ENTRY``) or a module
    that has one as ``ENTRY`` (``pkg.mod``); its name must be the plugin's name. A
    plugin name registered twice (in-tree or by another distribution), an entry point
    that fails to import, or one that names something else raises
    :class:`PluginDiscoveryError`. ``entry_points`` replaces discovery (for tests).
    """
    reg = in_tree_registry()
    owners = dict.fromkeys(reg, _IN_TREE_OWNER)
    eps = (
        importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        if entry_points is None
        else entry_points
    )
    for ep in sorted(eps, key=lambda e: (e.name, _owner(e))):
        entry = load_entry_point(ep)
        owner = _owner(ep)
        if entry.name in owners:
            raise PluginDiscoveryError(
                f'plugin "{entry.name}" is registered twice: by {owners[entry.name]} and by '
                f"{owner} (entry point {ep.name} = {ep.value}); uninstall one of them"
            )
        reg.register(entry)
        owners[entry.name] = owner
    return reg


def load_entry_point(ep: importlib.metadata.EntryPoint) -> PluginEntry:
    """Import one entry point of the group and check what it names."""
    where = f"entry point {ep.name} = {ep.value} of {_owner(ep)} (group {ENTRY_POINT_GROUP})"
    try:
        obj = ep.load()
    except Exception as exc:
        raise PluginDiscoveryError(
            f"{where} cannot be loaded: {type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(obj, ModuleType):
        module = obj
        obj = getattr(module, "ENTRY", None)
        if obj is None:
            raise PluginDiscoveryError(f"{where}: module {module.__name__} has no ENTRY")
    if not isinstance(obj, PluginEntry):
        raise PluginDiscoveryError(
            f"{where}: expected a kscheduler.framework.PluginEntry (or a module with "
            f"ENTRY), got {type(obj).__name__}"
        )
    problem = _entry_problem(obj)
    if problem:
        raise PluginDiscoveryError(f"{where}: {problem}")
    if ep.name != obj.name:
        raise PluginDiscoveryError(
            f'{where}: the entry point must be named after the plugin, "{obj.name}"'
        )
    return obj


def _entry_problem(entry: PluginEntry) -> str | None:
    if not isinstance(entry.name, str) or not entry.name:
        return "PluginEntry.name must be a non-empty string"
    if not isinstance(entry.plugin_type, type):
        return f"PluginEntry.plugin_type of {entry.name} must be a class"
    if not callable(entry.factory):
        return f"PluginEntry.factory of {entry.name} must be callable"
    if entry.parse_args is not None and not callable(entry.parse_args):
        return f"PluginEntry.parse_args of {entry.name} must be callable or None"
    if not entry.extension_points:
        return f"plugin {entry.name} implements no extension point"
    return None


def _owner(ep: importlib.metadata.EntryPoint) -> str:
    dist = ep.dist
    if dist is None:
        return "an unknown distribution"
    return f"distribution {dist.name} {dist.version}"


__all__ = [
    "ENTRY_POINT_GROUP",
    "IN_TREE",
    "PluginDiscoveryError",
    "full_registry",
    "in_tree_registry",
    "load_entry_point",
]
