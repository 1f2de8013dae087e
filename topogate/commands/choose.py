"""Which flavor and topology a command works on, from cluster files: one rule for ``plan``
(:func:`choose_flavor`) and ``topology`` (:func:`choose_source`, the same rule with
``--topology`` in the place of a topology the job names).

These choices exist only offline: ``serve`` takes the flavor from the ClusterQueue and the
topology from ``admission.podsets.queue_topology``. So their errors name the command's flags
and files (``--flavor``, ``--cluster``), which is why they live here and not in the core.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from topogate.admission.podsets import WantedTopology, flavor_tolerations, topology_name
from topogate.api.errors import InputError
from topogate.api.models import ResourceFlavor
from topogate.api.podspec import Toleration
from topogate.cache.hypernodes import HyperNodeForest
from topogate.cache.sources import TopologySource, topology_sources

from .loader import ClusterInput

IMPLICIT_FLAVOR = "default"


@dataclass(frozen=True, slots=True)
class FlavorChoice:
    name: str
    source: TopologySource
    node_labels: dict[str, str]
    tolerations: tuple[Toleration, ...]
    implicit: bool = False  # no ResourceFlavor: every node of the topology (IMPLICIT_FLAVOR)


def flavor_named(cluster: ClusterInput, name: str) -> ResourceFlavor:
    """The ResourceFlavor --flavor names."""
    flavor = cluster.flavors.get(name)
    if flavor is None:
        known = ", ".join(sorted(cluster.flavors)) or "none"
        raise InputError(
            f"no ResourceFlavor {name!r} in the cluster input (found: {known})", where="--flavor"
        )
    return flavor


def topology_flavors(cluster: ClusterInput) -> dict[str, ResourceFlavor]:
    """The ResourceFlavors with a topology: with exactly one, plan (and topology) use it
    without --flavor."""
    return {name: f for name, f in cluster.flavors.items() if f.spec.topology_name}


def choose_flavor(
    cluster: ClusterInput,
    flavor_name: str | None,
    wanted: WantedTopology,
    forest: HyperNodeForest | None = None,
) -> FlavorChoice:
    """The flavor and topology to plan on.

    The flavor: --flavor, the only topology flavor, or an implicit one over every node. The
    topology: :func:`choose_topology` (the one the job names, else the flavor's, else the
    HyperNode forest for Volcano's tier words), else the only topology in the input.
    """
    sources = topology_sources(cluster.topologies, forest)
    tas = topology_flavors(cluster)
    flavor: ResourceFlavor | None = None
    if flavor_name is not None:
        flavor = flavor_named(cluster, flavor_name)
        if not flavor.spec.topology_name and wanted.named is None and not wanted.volcano:
            raise InputError(
                "has no topologyName; plan needs a topology flavor",
                where=f"ResourceFlavor {flavor_name}",
                field="spec.topologyName",
            )
    elif len(tas) == 1:
        flavor = next(iter(tas.values()))
    elif len(tas) > 1:
        raise InputError(
            f"several topology ResourceFlavors ({', '.join(sorted(tas))}); pick one with --flavor",
            where="--cluster",
        )
    source = choose_topology(
        sources,
        wanted,
        flavor.spec.topology_name if flavor is not None else None,
        flavor_field=(
            f"ResourceFlavor {flavor.metadata.name if flavor else ''}",
            "spec.topologyName",
        ),
    )
    if flavor is None:
        # The implicit flavor: every node of the topology.
        return FlavorChoice(IMPLICIT_FLAVOR, source, {}, (), implicit=True)
    return FlavorChoice(
        flavor.metadata.name, source, dict(flavor.spec.node_labels), flavor_tolerations(flavor)
    )


def choose_topology(
    sources: Mapping[str, TopologySource],
    wanted: WantedTopology,
    flavor_topology: str | None,
    *,
    flavor_field: tuple[str, str],
) -> TopologySource:
    """The core's :func:`topology_name`, looked up; else the only topology there is. A named
    topology that does not exist is an InputError naming where it was named (``flavor_field``:
    the flavor object and field, when the flavor named it)."""
    name = topology_name(sources, wanted, flavor_topology)
    if name is not None:
        where, field = (
            ("the workload", "topology name annotation") if wanted.named else flavor_field
        )
        return pick_source(sources, name, where, field)
    if len(sources) == 1:
        return next(iter(sources.values()))
    found = ", ".join(sorted(sources)) or "none"
    raise InputError(
        "without a ResourceFlavor the cluster input must hold exactly one topology (a "
        f"Topology or HyperNodes), or the job must name one (found: {found})",
        where="--cluster",
    )


def pick_source(
    sources: Mapping[str, TopologySource], name: str, where: str, field: str
) -> TopologySource:
    source = sources.get(name)
    if source is None:
        known = ", ".join(sorted(sources)) or "none"
        raise InputError(
            f"names topology {name!r}, which is not in the cluster input (found: {known})",
            where=where,
            field=field,
        )
    return source


# --- topology: the same rule, asked with flags ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Shown:
    """What to show: the topology, and the node labels and tolerations of the flavor."""

    source: TopologySource
    node_labels: dict[str, str]
    tolerations: tuple[Toleration, ...] = ()
    flavor: str | None = None  # None: no flavor, every node of the topology


def choose_source(
    cluster: ClusterInput,
    topology: str | None,
    flavor: str | None,
    forest: HyperNodeForest | None = None,
) -> Shown:
    """The topology to show, and the nodes and tolerations of the flavor plan would use:
    :func:`choose_flavor`, with --topology as a topology the job names.

    The flags are checked first, so their mistakes are said in their own words: --flavor
    must have a topology, and --topology with --flavor must be that flavor's.
    """
    sources = topology_sources(cluster.topologies, forest)
    known = ", ".join(sorted(sources)) or "none"
    if flavor is not None:
        own = flavor_named(cluster, flavor).spec.topology_name
        if not own:
            raise InputError(
                "has no topologyName", where=f"ResourceFlavor {flavor}", field="spec.topologyName"
            )
        choice = choose_flavor(cluster, flavor, WantedTopology(None, False), forest)
        if topology is not None and topology != own:
            raise InputError(
                f"{topology!r} is not the topology of ResourceFlavor {flavor!r} ({own!r})",
                where="--topology",
            )
        return _shown(choice)
    if topology is not None and topology not in sources:
        raise InputError(
            f"no topology {topology!r} in the cluster input (found: {known})", where="--topology"
        )
    if topology is None and not topology_flavors(cluster) and len(sources) != 1:
        # choose_flavor's words would ask the job to name one; here a flag does.
        if not sources:
            raise InputError("holds no Topology and no HyperNodes", where="--cluster")
        raise InputError(
            f"several topologies ({known}); pick one with --topology or --flavor",
            where="--cluster",
        )
    return _shown(choose_flavor(cluster, None, WantedTopology(topology, False), forest))


def _shown(choice: FlavorChoice) -> Shown:
    flavor = None if choice.implicit else choice.name
    return Shown(choice.source, choice.node_labels, choice.tolerations, flavor)
