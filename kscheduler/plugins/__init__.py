"""In-tree plugins, one module each, listed by hand in :func:`in_tree_registry`."""

from __future__ import annotations

import importlib

from kscheduler.framework.registry import Registry

#: Module names under kscheduler.plugins, in the order of the default profile.
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
]


def in_tree_registry() -> Registry:
    reg = Registry()
    for mod_name in IN_TREE:
        try:
            mod = importlib.import_module(f"kscheduler.plugins.{mod_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"kscheduler.plugins.{mod_name}":
                continue  # not implemented yet
            raise
        reg.register(mod.ENTRY)
    return reg
