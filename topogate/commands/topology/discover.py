"""``topogate topology discover``: the HyperNodes node labels describe, as ``serve
--hypernode-discovery`` would make them (the rule itself is ``cache.hypernodes``'s, which
``serve``'s discovery runs too)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import yaml

from topogate.api.errors import InputError
from topogate.cache.hypernodes import DiscoveryType, discover_offline, discovery_config
from topogate.files import load_discovery_config

from ..loader import ClusterInput, write_output


def discover(args: argparse.Namespace, cluster: ClusterInput) -> None:
    """Write the HyperNodes the --labels or --discovery-config types make of the nodes."""
    if args.output not in (None, "yaml", "json"):
        raise InputError(f"discover writes yaml or json, not {args.output}", where="--output")
    types = types_from_flag(args.labels)
    if args.discovery_config is not None:
        types += load_discovery_config(args.discovery_config)
    if not types:
        raise InputError(
            "discover needs --labels TYPE=LABEL,... or --discovery-config FILE",
        )
    found = discover_offline(cluster.nodes, types)
    if args.output == "json":
        text = json.dumps(found, indent=2) + "\n"
    else:
        text = yaml.safe_dump_all(found, sort_keys=False)
    write_output(text, args.out)


def types_from_flag(values: Sequence[str]) -> list[DiscoveryType]:
    """``--labels TYPE=top,...,kubernetes.io/hostname`` flags as discovery types."""
    config = []
    for value in values:
        name, sep, labels = value.partition("=")
        if not sep or not labels:
            raise InputError(
                f"{value!r} is not TYPE=LABEL,LABEL,... (top level first)", where="--labels"
            )
        config.append(
            {
                "source": "label",
                "enabled": True,
                "config": {
                    "networkTopologyTypes": {
                        name: [{"nodeLabel": label} for label in labels.split(",")]
                    }
                },
            }
        )
    return discovery_config({"networkTopologyDiscovery": config}, where="--labels")
