"""KAI-Scheduler and Volcano words for topology requests, and HyperJob on a JobSet, via `plan`.

The KAI tree is the seed's datacenter/zone/rack example (GPUs per node as drawn there); the
Volcano tree is the seed's s0-s6 HyperNode example.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.kit import hypernode_object, written_domains
from topogate.api.errors import InputError
from topogate.api.hypernodes import parse_hypernode
from topogate.api.jobs import workload_from_object
from topogate.api.models import Topology
from topogate.api.validation import parse_model
from topogate.cache.nodes import NodeInfo
from topogate.commands.loader import ClusterInput
from topogate.commands.plan import PlanResult, plan

DC, ZONE, RACK, HOST = "datacenter", "zone", "rack", "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"

# The seed's KAI example: zone -> rack -> node: GPUs.
KAI_TREE = {
    "zone-a": {"rack-a1": {"na1": 2, "na2": 2, "na3": 2}, "rack-a2": {"na4": 4},
               "rack-a3": {"na5": 2, "na6": 2, "na7": 2}},
    "zone-b": {"rack-b1": {"nb1": 4, "nb2": 4}, "rack-b2": {"nb3": 2}},
    "zone-c": {"rack-c1": {"nc1": 2, "nc2": 4}},
}  # fmt: skip


def _node(name: str, gpus: int, **labels: str) -> NodeInfo:
    return NodeInfo(
        name,
        labels={HOST: name, **labels},
        allocatable={"cpu": 64_000, GPU: gpus, "pods": 110},
    )


def kai_cluster() -> ClusterInput:
    nodes = [
        _node(name, gpus, **{DC: "dc1", ZONE: zone, RACK: rack})
        for zone, racks in KAI_TREE.items()
        for rack, members in racks.items()
        for name, gpus in members.items()
    ]
    topology = parse_model(
        Topology,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": "gpu-tree"},
            "spec": {"levels": [{"nodeLabel": key} for key in (DC, ZONE, RACK, HOST)]},
        },
        "",
    )
    return ClusterInput(nodes=nodes, topologies={"gpu-tree": topology})


def job(pods: int, annotations: dict[str, str], gpus: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "containers": [{"name": "c", "resources": {"requests": {GPU: str(gpus)}}}]
                },
            },
        },
    }


def run(cluster: ClusterInput, obj: dict[str, Any], flavor: str | None = None) -> PlanResult:
    return plan(cluster, workload_from_object(obj), flavor)


def zones_used(result: PlanResult) -> set[str]:
    labels = {n.name: n.labels for n in kai_cluster().nodes}
    return {
        labels[node][ZONE]
        for placement in result.decision.placements
        for node in placement.node_counts
    }


def racks_used(result: PlanResult) -> set[str]:
    labels = {n.name: n.labels for n in kai_cluster().nodes}
    return {
        labels[node][RACK]
        for placement in result.decision.placements
        for node in placement.node_counts
    }


# --- KAI-Scheduler ------------------------------------------------------------------------


def kai(required: str | None = None, preferred: str | None = None) -> dict[str, str]:
    out = {"kai.scheduler/topology": "gpu-tree"}
    if required:
        out["kai.scheduler/topology-required-placement"] = required
    if preferred:
        out["kai.scheduler/topology-preferred-placement"] = preferred
    return out


def test_kai_preferred_rack_fits_in_one_rack() -> None:
    result = run(kai_cluster(), job(8, kai(required=ZONE, preferred=RACK)))
    assert result.fits
    assert racks_used(result) == {"rack-b1"}  # the only rack with 8 GPUs


def test_kai_preferred_rack_climbs_to_the_required_zone() -> None:
    result = run(kai_cluster(), job(10, kai(required=ZONE, preferred=RACK)))
    assert result.fits
    # No rack holds 10; zone-b holds exactly 10 (Kueue's best fit: the tightest domain).
    assert zones_used(result) == {"zone-b"}
    assert len(racks_used(result)) == 2


def test_kai_climbs_no_higher_than_the_required_zone() -> None:
    result = run(kai_cluster(), job(17, kai(required=ZONE, preferred=RACK)))
    assert not result.fits
    assert result.decision.message == 'topology "gpu-tree" allows to fit only 16 out of 17 pod(s)'


def test_kai_preferred_only_may_span_zones() -> None:
    result = run(kai_cluster(), job(17, kai(preferred=RACK)))
    assert result.fits
    assert len(zones_used(result)) >= 2


def test_kai_required_only_is_a_hard_level() -> None:
    refused = run(kai_cluster(), job(9, kai(required=RACK)))
    assert not refused.fits
    assert refused.decision.message == 'topology "gpu-tree" allows to fit only 8 out of 9 pod(s)'
    assert racks_used(run(kai_cluster(), job(6, kai(required=RACK)))) in (
        {"rack-a1"},
        {"rack-a3"},
        {"rack-c1"},
    )


def on_the_job(pods: int, annotations: dict[str, str]) -> dict[str, Any]:
    """KAI's documented shape: the annotations on the Job's own metadata."""
    obj = job(pods, {})
    obj["metadata"]["annotations"] = annotations
    return obj


def test_kai_annotations_on_the_job_itself_are_read() -> None:
    # Before, such a Job was placed with no constraint at all: 9 pods spread over racks.
    refused = run(kai_cluster(), on_the_job(9, kai(required=RACK)))
    assert not refused.fits
    assert refused.decision.message == 'topology "gpu-tree" allows to fit only 8 out of 9 pod(s)'
    placed = run(kai_cluster(), on_the_job(8, kai(required=ZONE, preferred=RACK)))
    assert racks_used(placed) == {"rack-b1"}


def test_the_same_kai_annotation_in_both_places_is_fine_a_conflict_is_refused() -> None:
    both = on_the_job(8, kai(required=ZONE, preferred=RACK))
    both["spec"]["template"]["metadata"]["annotations"] = kai(required=ZONE)
    assert racks_used(run(kai_cluster(), both)) == {"rack-b1"}
    both["spec"]["template"]["metadata"]["annotations"] = kai(required=RACK)
    with pytest.raises(InputError) as error:
        run(kai_cluster(), both)
    assert error.value.describe() == (
        "Job ml/train: spec.template.metadata.annotations"
        "[kai.scheduler/topology-required-placement]: Invalid value: 'rack': "
        "metadata.annotations[kai.scheduler/topology-required-placement] says 'zone'; "
        "set it in one place"
    )


def test_kai_preferred_above_required_is_an_error() -> None:
    with pytest.raises(InputError) as error:
        run(kai_cluster(), job(2, kai(required=RACK, preferred=ZONE)))
    assert error.value.describe() == (
        "Job ml/train: spec.template.metadata.annotations"
        "[kai.scheduler/topology-preferred-placement]: "
        "the preferred level 'zone' is above the required level 'rack'"
    )


def test_kai_unknown_level_names_the_annotation() -> None:
    with pytest.raises(InputError) as error:
        run(kai_cluster(), job(2, kai(required="row")))
    assert error.value.describe() == (
        "Job ml/train: spec.template.metadata.annotations"
        "[kai.scheduler/topology-required-placement]: "
        "'row' is not a level of topology 'gpu-tree' (levels: datacenter (tier 3), "
        "zone (tier 2), rack (tier 1), kubernetes.io/hostname (tier 0))"
    )


def test_kai_unknown_topology_is_an_error() -> None:
    annotations = {**kai(required=ZONE), "kai.scheduler/topology": "other"}
    with pytest.raises(InputError) as error:
        run(kai_cluster(), job(2, annotations))
    assert error.value.describe() == (
        "the workload: topology name annotation: names topology 'other', "
        "which is not in the cluster input (found: gpu-tree)"
    )


def test_two_vocabularies_at_once_are_refused() -> None:
    annotations = {**kai(required=ZONE), "kueue.x-k8s.io/podset-required-topology": RACK}
    with pytest.raises(InputError) as error:
        workload_from_object(job(2, annotations))
    assert error.value.describe() == (
        "Job ml/train: spec.template.metadata.annotations: Invalid value: topology requests "
        "in more than one vocabulary: Kueue (kueue.x-k8s.io/podset-required-topology); "
        "KAI-Scheduler (kai.scheduler/topology-required-placement/"
        "kai.scheduler/topology-preferred-placement); use one"
    )


# --- Volcano tiers on a label topology (tier 1 = the level above hostname) ----------------


def volcano(**fields: Any) -> dict[str, str]:
    return {"topogate.dev/network-topology": json.dumps(fields)}


def test_volcano_hard_tier_on_labels() -> None:
    # tier 1 = rack, tier 2 = zone, tier 3 = datacenter.
    result = run(kai_cluster(), job(10, volcano(mode="hard", highestTierAllowed=2)))
    assert result.fits and zones_used(result) == {"zone-b"}
    refused = run(kai_cluster(), job(17, volcano(mode="hard", highestTierAllowed=2)))
    assert not refused.fits
    assert refused.decision.message == 'topology "gpu-tree" allows to fit only 16 out of 17 pod(s)'
    assert run(kai_cluster(), job(17, volcano(mode="hard", highestTierAllowed=3))).fits


def test_volcano_tier_name_is_the_label_key() -> None:
    result = run(kai_cluster(), job(8, volcano(mode="hard", highestTierName=RACK)))
    assert racks_used(result) == {"rack-b1"}
    with pytest.raises(InputError) as error:
        run(kai_cluster(), job(8, volcano(mode="hard", highestTierName="spine")))
    assert error.value.describe() == (
        "Job ml/train: spec.template.metadata.annotations[topogate.dev/network-topology]: "
        "highestTierName 'spine' names no tier of topology 'gpu-tree' (levels: "
        "datacenter (tier 3), zone (tier 2), rack (tier 1), kubernetes.io/hostname (tier 0))"
    )


def test_volcano_soft_prefers_tier_1_and_may_span() -> None:
    assert racks_used(run(kai_cluster(), job(8, volcano(mode="soft")))) == {"rack-b1"}
    assert run(kai_cluster(), job(30, volcano(mode="soft"))).fits


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"mode": "hard"},
            ": Required value: hard mode needs highestTierAllowed or highestTierName",
        ),
        ({"mode": "firm"}, '.mode: Unsupported value: \'firm\': supported values: "hard", "soft"'),
        (
            {"highestTierAllowed": -1},
            ".highestTierAllowed: Invalid value: -1: must be an integer >= 0",
        ),
        (
            {"highestTierAllowed": 1, "highestTierName": "x"},
            ": Invalid value: highestTierAllowed and highestTierName may not both be set",
        ),
        (
            {"tier": 1},
            ': Invalid value: unknown field(s) tier; expected {"mode": "hard"|"soft", '
            '"highestTierAllowed": <tier>} or {"mode": "hard", "highestTierName": "<tier name>"}; '
            "spec.template.metadata.annotations[topogate.dev/network-topology]: "
            "Required value: hard mode needs highestTierAllowed or highestTierName",
        ),
    ],
)
def test_volcano_annotation_errors(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError) as error:
        workload_from_object(job(2, volcano(**fields)))
    assert error.value.describe() == (
        "Job ml/train: spec.template.metadata.annotations[topogate.dev/network-topology]" + message
    )


# --- HyperJob on a JobSet: one replica per domain ----------------------------------------


def jobset(replicas: int, per_job: int, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "hyper", "namespace": "ml"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": per_job,
                            "completions": per_job,
                            "template": {
                                "metadata": {"annotations": annotations},
                                "spec": {
                                    "containers": [
                                        {"name": "c", "resources": {"requests": {GPU: "2"}}}
                                    ]
                                },
                            },
                        }
                    },
                }
            ]
        },
    }


def test_hyperjob_puts_each_replica_in_its_own_rack() -> None:
    # Three replicas of 2 pods x 2 GPUs: rack-b1 could hold two replicas (8 GPUs), but each
    # replica gets a rack of its own.
    annotations = {"topogate.dev/replica-required-topology": RACK}
    result = run(kai_cluster(), jobset(3, 2, annotations))
    assert result.fits
    placement = result.decision.placements[0]
    labels = {n.name: n.labels for n in kai_cluster().nodes}
    per_rack: dict[str, int] = {}
    for node, count in placement.node_counts.items():
        per_rack[labels[node][RACK]] = per_rack.get(labels[node][RACK], 0) + count
    assert sorted(per_rack.values()) == [2, 2, 2]
    # Ranks fill the assignment in order, so each replica (2 consecutive ranks) has one rack.
    counts = [d.count for d in placement.domains]
    racks = [labels[d.values[-1]][RACK] for d in placement.domains]
    ranks: list[str] = [rack for rack, n in zip(racks, counts, strict=True) for _ in range(n)]
    assert [len(set(ranks[i : i + 2])) for i in range(0, 6, 2)] == [1, 1, 1]


def test_hyperjob_with_more_replicas_than_racks_does_not_fit() -> None:
    annotations = {"topogate.dev/replica-required-topology": RACK}
    result = run(kai_cluster(), jobset(7, 1, annotations))
    assert not result.fits  # 6 racks, 7 replicas
    assert result.decision.message == 'topology "gpu-tree" allows to fit only 6 out of 7 pod(s)'


def test_hyperjob_annotation_on_a_job_is_refused() -> None:
    with pytest.raises(InputError) as error:
        workload_from_object(job(2, {"topogate.dev/replica-required-topology": RACK}))
    assert error.value.describe() == (
        "Job ml/train: spec.template.metadata.annotations"
        "[topogate.dev/replica-required-topology]: "
        "Forbidden: only a JobSet's replicated job has replicas to place one per domain"
    )


# --- Volcano on the seed's s0-s6 HyperNode tree ---------------------------------------------


def seed_forest_cluster(extra: list[dict[str, Any]] | None = None) -> ClusterInput:
    # s0..s3 (tier 1) hold node0..node7 in pairs; s4={s0,s1}, s5={s2,s3} (tier 2); s6 on top.
    objects = [hypernode_object(f"s{i}", 1, [f"node{2 * i}", f"node{2 * i + 1}"]) for i in range(4)]
    objects += [
        hypernode_object("s4", 2, children=["s0", "s1"]),
        hypernode_object("s5", 2, children=["s2", "s3"]),
        hypernode_object("s6", 3, children=["s4", "s5"]),
    ]
    cluster = ClusterInput(nodes=[_node(f"node{i}", 1) for i in range(8)])
    for obj in objects + (extra or []):
        hypernode = parse_hypernode(obj)
        cluster.hypernodes[hypernode.name] = hypernode
    return cluster


def tier2_of(result: PlanResult) -> set[str]:
    group = {f"node{i}": "s4" if i < 4 else "s5" for i in range(8)}
    return {group[n] for p in result.decision.placements for n in p.node_counts}


def test_volcano_hard_tier_2_never_spans_s6() -> None:
    cluster = seed_forest_cluster()
    result = run(cluster, job(4, volcano(mode="hard", highestTierAllowed=2)))
    assert result.fits and len(tier2_of(result)) == 1
    assert result.choice.source.name == "hypernodes"
    assert result.choice.source.level_keys == ("tier-3", "tier-2", "tier-1", HOST)
    refused = run(cluster, job(5, volcano(mode="hard", highestTierAllowed=2)))
    assert not refused.fits
    assert refused.decision.message == 'topology "hypernodes" allows to fit only 4 out of 5 pod(s)'
    assert run(cluster, job(5, volcano(mode="hard", highestTierAllowed=3))).fits


def test_volcano_hard_tier_1_keeps_a_pair() -> None:
    result = run(seed_forest_cluster(), job(2, volcano(mode="hard", highestTierAllowed=1)))
    nodes = sorted(n for p in result.decision.placements for n in p.node_counts)
    assert len(nodes) == 2 and int(nodes[0][4:]) // 2 == int(nodes[1][4:]) // 2


def test_volcano_soft_spans_the_whole_forest_when_needed() -> None:
    result = run(seed_forest_cluster(), job(8, volcano(mode="soft")))
    assert result.fits, result.decision.message
    assert result.choice.source.name == "hypernodes"
    [placement] = result.decision.placements
    assert placement.levels == (HOST,)
    # All 8 single-GPU nodes, one pod each: both tier-2 domains (s4 and s5) under s6.
    assert placement.node_counts == {f"node{i}": 1 for i in range(8)}
    assert tier2_of(result) == {"s4", "s5"}
    # Only when needed: 4 pods stay inside one tier-2 domain.
    small = run(seed_forest_cluster(), job(4, volcano(mode="soft")))
    assert small.fits and tier2_of(small) == {"s4"}
    assert small.decision.placements[0].node_counts == {f"node{i}": 1 for i in range(4)}


def test_kai_words_on_hypernode_tiers() -> None:
    annotations = {
        "kai.scheduler/topology": "hypernodes",
        "kai.scheduler/topology-preferred-placement": "tier-1",
        "kai.scheduler/topology-required-placement": "tier-2",
    }
    result = run(seed_forest_cluster(), job(3, annotations))
    assert result.fits and len(tier2_of(result)) == 1


def test_a_bad_hypernode_does_not_stop_placement() -> None:
    # x1 and x2 name each other: both are left out with a warning; s0-s6 still place jobs.
    cycle = [hypernode_object("x1", 4, children=["x2"]), hypernode_object("x2", 5, children=["x1"])]
    result = run(seed_forest_cluster(cycle), job(4, volcano(mode="hard", highestTierAllowed=2)))
    assert result.fits
    assert any("HyperNode x1" in w and "cycle" in w for w in result.warnings)


# --- balanced placement, as an option on preferred requests --------------------------------


def two_racks() -> ClusterInput:
    cluster = kai_cluster()
    cluster.nodes = [
        _node("x1", 15, **{DC: "dc1", ZONE: "z1", RACK: "r1"}),
        _node("x2", 15, **{DC: "dc1", ZONE: "z1", RACK: "r2"}),
    ]
    return cluster


def test_balanced_placement_splits_evenly() -> None:
    preferred = {"kueue.x-k8s.io/podset-preferred-topology": RACK}
    packed = run(two_racks(), job(25, preferred))
    assert sorted(packed.decision.placements[0].node_counts.values()) == [10, 15]
    balanced = run(two_racks(), job(25, {**preferred, "topogate.dev/balanced-placement": "true"}))
    assert sorted(balanced.decision.placements[0].node_counts.values()) == [12, 13]


def test_balanced_placement_needs_a_preferred_request() -> None:
    required = {
        "kueue.x-k8s.io/podset-required-topology": ZONE,
        "topogate.dev/balanced-placement": "true",
    }
    with pytest.raises(InputError) as error:
        run(two_racks(), job(4, required))
    assert error.value.describe() == (
        "Job ml/train: spec.template.metadata.annotations[topogate.dev/balanced-placement]: "
        "balanced placement applies to preferred requests only (Kueue's "
        "podset-preferred-topology, KAI's preferred placement or Volcano's tiers)"
    )
    with pytest.raises(InputError) as error:
        workload_from_object(job(4, {"topogate.dev/balanced-placement": "yes"}))
    assert error.value.describe() == (
        "Job ml/train: spec.template.metadata.annotations[topogate.dev/balanced-placement]: "
        'Unsupported value: \'yes\': supported values: "true", "false"'
    )


def test_builtin_hypernode_example_plans_within_a_spine(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    from topogate.cli import main

    examples = Path(__file__).resolve().parents[1] / "topogate" / "examples"
    code = main(
        [
            "plan",
            "--cluster",
            str(examples / "hypernodes-cluster.yaml"),
            "--workload",
            str(examples / "volcano-job.yaml"),
            "-o",
            "json",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assignment = json.loads(out)["status"]["admission"]["podSetAssignments"][0]
    hosts = [d["values"][-1] for d in written_domains(assignment["topologyAssignment"])]
    # node0 is busy; s4 (node0-3) has exactly the 3 free nodes: the tightest spine.
    assert sorted(hosts) == ["node1", "node2", "node3"]


@pytest.mark.parametrize(
    ("kind", "api_version"),
    [("Job", "batch.volcano.sh/v1alpha1"), ("PodGroup", "scheduling.volcano.sh/v1beta1")],
)
def test_a_volcano_job_or_podgroup_is_refused_with_what_to_write(
    kind: str, api_version: str
) -> None:
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "t", "namespace": "ml"}}
    with pytest.raises(InputError) as error:
        workload_from_object(obj)
    message = error.value.describe()
    assert message.startswith(f"{kind} ml/t: {kind} {api_version} is Volcano's own kind")
    assert "batch/v1 Job" in message and "topogate.dev/network-topology" in message


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (
            None,
            "; it asks for no network topology, so it needs no topogate.dev/network-topology "
            "annotation",
        ),
        (
            {"networkTopology": {"mode": "hard", "highestTierAllowed": 2}},
            "; put its network topology on the pod templates as the annotation "
            """topogate.dev/network-topology: '{"mode":"hard","highestTierAllowed":2}'""",
        ),
        (
            {"networkTopology": {"highestTierName": "spine"}},
            """topogate.dev/network-topology: '{"mode":"hard","highestTierName":"spine"}'""",
        ),
        (
            {
                "tasks": [
                    {
                        "name": "workers",
                        "replicas": 8,
                        "partitionPolicy": {
                            "totalPartitions": 2,
                            "partitionSize": 4,
                            "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
                        },
                    }
                ]
            },
            "; for the groups of 4 pods within tier 1 of task workers, annotate its pod "
            "template with kueue.x-k8s.io/podset-slice-required-topology: <the node label of "
            'tier 1> and kueue.x-k8s.io/podset-slice-size: "4"',
        ),
    ],
)
def test_a_volcano_job_is_told_the_annotation_matching_what_it_says(
    spec: dict[str, Any] | None, says: str
) -> None:
    # Every Volcano Job was told {"mode": "hard", "highestTierAllowed": 1}, whatever it said.
    obj = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "t", "namespace": "ml"},
        "spec": spec,
    }
    with pytest.raises(InputError) as error:
        workload_from_object(obj)
    assert error.value.message.endswith(says)
    assert '"highestTierAllowed": 1' not in error.value.message


def test_a_volcano_pod_group_s_sub_groups_are_slices() -> None:
    obj = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "t", "namespace": "ml"},
        "spec": {"subGroupPolicy": [{"name": "g", "subGroupSize": 8}]},
    }
    with pytest.raises(InputError) as error:
        workload_from_object(obj)
    assert error.value.message.endswith(
        "; for the groups of 8 pods of subGroup g, annotate its pod template with "
        "kueue.x-k8s.io/podset-slice-required-topology: <the node label of the domain each "
        'group shares> and kueue.x-k8s.io/podset-slice-size: "8"'
    )


@pytest.mark.parametrize(
    ("constraint", "says"),
    [
        (None, "with the queue label kueue.x-k8s.io/queue-name. Pods with no such owner"),
        (
            {"topology": "dc", "requiredTopologyLevel": "rack"},
            "with the queue label kueue.x-k8s.io/queue-name, with its topologyConstraint as the "
            "annotations kai.scheduler/topology: dc, kai.scheduler/topology-required-placement: "
            "rack (on the Job or its pod template, as KAI's podgrouper reads them). ",
        ),
    ],
)
def test_a_kai_pod_group_is_refused_with_what_to_write(
    constraint: dict[str, str] | None, says: str
) -> None:
    # It got the generic "kind 'PodGroup' ... is not a workload".
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ml"},
        "spec": {"minMember": 4, "queue": "team-a"},
    }
    if constraint is not None:
        obj["spec"]["topologyConstraint"] = constraint
    with pytest.raises(InputError) as error:
        workload_from_object(obj)
    message = error.value.message
    assert message.startswith(
        "PodGroup scheduling.run.ai/v2alpha2 is KAI-Scheduler's pod group, which topogate does "
        "not admit yet; submit the pods' owner instead: a batch/v1 Job"
    )
    assert says in message
    assert message.endswith(
        "Pods with no such owner cannot be queued as one group yet; a "
        "single v1 Pod can be planned alone"
    )
