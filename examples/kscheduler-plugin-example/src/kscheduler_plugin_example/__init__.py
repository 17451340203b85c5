"""An out-of-tree kscheduler plugin package (see node_label_preference)."""

from kscheduler_plugin_example.node_label_preference import (
    ENTRY,
    NAME,
    NodeLabelPreference,
    NodeLabelPreferenceArgs,
    parse_args,
)

__all__ = ["ENTRY", "NAME", "NodeLabelPreference", "NodeLabelPreferenceArgs", "parse_args"]
