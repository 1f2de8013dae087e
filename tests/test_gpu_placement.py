"""GPU sets in placement: counts, the node tie-break, the hard minimum, and no GPU given twice."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.test_gpusets import SEED
from topogate.admission.cycle import FlavorTopology, SnapshotPlacer, admission_cycle
from topogate.admission.gpusets import bottleneck, pair_bandwidth
from topogate.admission.lanes import PendingWorkload
from topogate.admission.placement import place
from topogate.admission.quota import FlavorQuota, QueueSpec
from topogate.admission.request import (
    Mode,
    PlacementDecision,
    PlacementRequest,
    PodSetRequest,
)
from topogate.api.gpus import GPU_RESOURCE, Matrix, profile
from topogate.cache.nodes import NodeInfo, PodUsage
from topogate.cache.snapshot import CapacityCache, ClusterSnapshot
from topogate.cache.topology import DomainTree
from topogate.cli import main

HOST = "kubernetes.io/hostname"
RACK = "cloud.example.com/topology-rack"
EXAMPLES = Path(__file__).resolve().parent.parent / "topogate" / "examples"
SEED_MATRIX: Matrix = tuple(tuple(row) for row in SEED)


def gpu_node(name: str, matrix: Matrix | None, gpus: int = 8, rack: str = "r0") -> NodeInfo:
    return NodeInfo(
        name,
        {HOST: name, RACK: rack},
        {GPU_RESOURCE: gpus, "pods": 110, "cpu": 96_000},
        gpu_bandwidth=matrix,
    )


def gpus(
    count: int,
    per_pod: int,
    name: str = "main",
    *,
    required: str | None = None,
    minimum: float | None = None,
    group: str | None = None,
) -> PodSetRequest:
    return PodSetRequest(
        name=name,
        count=count,
        requests={GPU_RESOURCE: per_pod, "cpu": 1000},
        mode=Mode.REQUIRED if required else Mode.UNCONSTRAINED,
        level=required,
        group=group,
        gpu_min_bandwidth=minimum,
    )


def run(
    nodes: list[NodeInfo],
    *podsets: PodSetRequest,
    levels: tuple[str, ...] = (RACK, HOST),
    pods: tuple[PodUsage, ...] = (),
    held_gpus: dict[str, set[int]] | None = None,
) -> PlacementDecision:
    snapshot = ClusterSnapshot.build(nodes, pods, extra_gpus=held_gpus)
    tree = DomainTree.from_labels(snapshot, levels)
    return place(tree, snapshot, PlacementRequest("wl", podsets), topology_name="t")


def sets(decision: PlacementDecision, name: str = "main") -> dict[str, list[tuple[int, ...]]]:
    assert decision.fits, decision.message
    placement = next(p for p in decision.placements if p.name == name)
    return {node: list(s) for node, s in placement.gpu_sets.items()}


def test_the_seed_job_gets_the_48_gbps_group_on_one_node() -> None:
    decision = run([gpu_node("a", SEED_MATRIX)], gpus(2, 2, required=HOST))
    assert sets(decision) == {"a": [(0, 3), (1, 2)]}
    placement = decision.placements[0]
    assert placement.visible_gpus == {"a": (0, 1, 2, 3)}
    pair = pair_bandwidth(SEED)
    assert bottleneck(pair, placement.visible_gpus["a"]) == pytest.approx(48.33)


def test_ties_between_nodes_go_to_the_better_connected_free_set() -> None:
    # Same free capacity everywhere; the core's order would pick "a" by name.
    nodes = [
        gpu_node("a", profile("pcie-numa-8")),
        gpu_node("b", SEED_MATRIX),
        gpu_node("c", None),
        gpu_node("d", profile("nvswitch-8")),
    ]
    decision = run(nodes, gpus(1, 4, required=HOST))
    assert sets(decision) == {"d": [(0, 1, 2, 3)]}
    # Without the NVSwitch node the measured one (48.33 for four) beats PCIe (10 for four).
    decision = run(nodes[:3], gpus(1, 4, required=HOST))
    assert list(sets(decision)) == ["b"]


def test_the_tie_break_never_overrides_the_cores_order() -> None:
    # BestFit packs: the node with less free capacity wins even if its GPUs link worse.
    busy = PodUsage("ns/x", "a", {GPU_RESOURCE: 4}, gpus=frozenset({4, 5, 6, 7}))
    nodes = [gpu_node("a", profile("pcie-numa-8")), gpu_node("b", profile("nvswitch-8"))]
    decision = run(nodes, gpus(1, 2, required=HOST), pods=(busy,))
    assert sets(decision) == {"a": [(0, 1)]}


def test_single_gpu_pods_keep_well_connected_pairs_free() -> None:
    # GPU 4 and 5 are left of an NVLink island; a 1-GPU pod takes one whose partners are gone.
    matrix = np.full((8, 8), 10.0)
    for island in ((0, 1, 2, 3), (4, 5, 6, 7)):
        for i, j in itertools.permutations(island, 2):
            matrix[i, j] = 100.0
    busy = PodUsage("ns/x", "a", {GPU_RESOURCE: 2}, gpus=frozenset({6, 7}))
    node = gpu_node("a", tuple(tuple(r) for r in matrix.tolist()))
    decision = run([node], gpus(2, 2, required=HOST), pods=(busy,))
    assert sets(decision) == {"a": [(0, 1), (2, 3)]}  # the whole island: never 4/5 across
    decision = run([node], gpus(1, 2, required=HOST), pods=(busy,))
    assert sets(decision) == {"a": [(4, 5)]}  # the fragment, keeping {0,1,2,3} intact


def test_the_minimum_is_hard_and_has_its_own_message() -> None:
    nodes = [gpu_node(f"pcie-{i}", profile("pcie-numa-8")) for i in range(12)]
    nodes.append(gpu_node("unknown", None))
    decision = run(nodes, gpus(2, 4, required=HOST, minimum=40))
    assert not decision.fits
    assert decision.message == (
        'topology "t" doesn\'t allow to fit any of 2 pod(s). Total nodes: 13; 12 node(s) have '
        "no free set of 4 GPUs with a bottleneck of at least 40 GB/s; 1 node(s) have no GPU "
        "bandwidth matrix to check 40 GB/s against"
    )
    # With an NVSwitch node it fits there, and only there.
    nodes.append(gpu_node("nvswitch", profile("nvswitch-8")))
    decision = run(nodes, gpus(2, 4, minimum=40))
    assert sets(decision) == {"nvswitch": [(0, 1, 2, 3), (4, 5, 6, 7)]}


def test_the_minimum_counts_disjoint_sets_per_node() -> None:
    # The seed node's 96 GB/s links (0-3, 0-6, 1-2, 1-7, 2-3, 4-5, 4-7, 5-6) hold four
    # disjoint pairs: four pods of two at 90 GB/s or better.
    decision = run([gpu_node("a", SEED_MATRIX)], gpus(4, 2, minimum=90))
    chosen = sets(decision)["a"]
    pair = pair_bandwidth(SEED)
    assert len(chosen) == 4 and all(bottleneck(pair, s) >= 90 for s in chosen)
    assert len({g for s in chosen for g in s}) == 8
    # Two pods of four at 48 GB/s: {0,1,2,3} and {4,5,6,7}; three cannot fit.
    assert sets(run([gpu_node("a", SEED_MATRIX)], gpus(2, 4, minimum=48))) == {
        "a": [(0, 1, 2, 3), (4, 5, 6, 7)]
    }
    decision = run([gpu_node("a", SEED_MATRIX)], gpus(3, 2, minimum=97))
    assert not decision.fits
    assert "1 node(s) have no free set of 2 GPUs with a bottleneck of at least 97 GB/s" in (
        decision.message
    )


def test_the_minimum_needs_a_hostname_lowest_level() -> None:
    decision = run([gpu_node("a", SEED_MATRIX)], gpus(1, 2, minimum=40), levels=(RACK,))
    assert not decision.fits
    assert "lowest level is kubernetes.io/hostname" in decision.message


def test_without_a_hostname_level_no_sets_are_chosen() -> None:
    decision = run([gpu_node("a", SEED_MATRIX)], gpus(2, 2), levels=(RACK,))
    assert decision.fits and decision.placements[0].gpu_sets == {}


def test_free_indices_cap_the_count_so_no_gpu_is_given_twice() -> None:
    # The resource says 8 free, but a pod's annotation holds 6 indices: only one pod of 2.
    stray = PodUsage("ns/x", "a", {}, gpus=frozenset(range(6)))
    decision = run([gpu_node("a", profile("nvswitch-8"))], gpus(2, 2, required=HOST), pods=(stray,))
    assert not decision.fits
    decision = run([gpu_node("a", profile("nvswitch-8"))], gpus(1, 2), pods=(stray,))
    assert sets(decision) == {"a": [(6, 7)]}


def test_podsets_of_one_workload_never_share_a_gpu_and_see_each_other() -> None:
    decision = run(
        [gpu_node("a", SEED_MATRIX)],
        gpus(1, 2, name="leader", required=HOST),
        gpus(2, 2, name="workers", required=HOST),
    )
    leader, workers = sets(decision, "leader")["a"], sets(decision, "workers")["a"]
    assert not set(leader[0]) & {g for s in workers for g in s}
    visible = decision.placements[0].visible_gpus["a"]
    assert visible == decision.placements[1].visible_gpus["a"]
    assert set(visible) == set(leader[0]) | {g for s in workers for g in s}


def test_leader_and_workers_of_one_group() -> None:
    decision = run(
        [gpu_node("a", SEED_MATRIX), gpu_node("b", SEED_MATRIX)],
        gpus(3, 2, name="workers", group="g", required=RACK, minimum=90),
        gpus(1, 2, name="leader", group="g", required=RACK, minimum=90),
    )
    every = [
        (node, s)
        for name in ("leader", "workers")
        for node, chosen in sets(decision, name).items()
        for s in chosen
    ]
    assert len(every) == 4
    for node in ("a", "b"):
        held = [g for n, s in every if n == node for g in s]
        assert len(held) == len(set(held))
    pair = pair_bandwidth(SEED)
    assert all(bottleneck(pair, s) >= 90 for _, s in every)


def test_no_gpu_is_given_twice_across_workloads() -> None:
    # One admission cycle, two workloads on one node: the second sees the first's sets.
    node = gpu_node("a", SEED_MATRIX)
    snapshot = ClusterSnapshot.build([node])
    tree = DomainTree.from_labels(snapshot, (HOST,))
    queue = QueueSpec("q", "BestEffortFIFO", (FlavorQuota("f", {GPU_RESOURCE: 8, "cpu": 10**6}),))
    pending = [
        PendingWorkload(f"ns/w{i}", "q", 0, f"2024-01-0{i + 1}", PlacementRequest(f"w{i}", (p,)))
        for i, p in enumerate([gpus(2, 2, required=HOST), gpus(1, 4, required=HOST)])
    ]
    placer = SnapshotPlacer(snapshot, {"f": FlavorTopology(tree, "t")})
    result = admission_cycle({"q": queue}, pending, {}, placer)
    assert [a.key for a in result.admitted] == ["ns/w0", "ns/w1"]
    first, second = (sets(a.decision)["a"] for a in result.admitted if a.decision is not None)
    assert first == [(0, 3), (1, 2)]
    assert second == [(4, 5, 6, 7)]
    # Later cycles: the cache holds both workloads' sets until they are released.
    cache = CapacityCache()
    cache.upsert_node(node)
    cache.set_workload_gpus("ns/w0", {"main": {"a": ((0, 3), (1, 2))}})
    assert cache.snapshot().gpu.free(0) == [4, 5, 6, 7]
    cache.release_workload("ns/w0")
    assert cache.snapshot().gpu.free(0) == list(range(8))


def test_bound_pods_annotations_take_their_gpus() -> None:
    busy = PodUsage("ns/x", "a", {GPU_RESOURCE: 4}, gpus=frozenset({0, 1, 2, 3}))
    decision = run([gpu_node("a", SEED_MATRIX)], gpus(2, 2, required=HOST), pods=(busy,))
    # 96.25 and 96.23 inside the pods, not 96.25 and 48.33 ({4,5}, {6,7}).
    assert sets(decision) == {"a": [(4, 7), (5, 6)]}


# --- through `topogate plan` ---------------------------------------------------------------


def _cluster_file(tmp_path: Path, annotations: dict[str, str]) -> Path:
    text = f"""
apiVersion: topogate.dev/v1alpha1
kind: Topology
metadata: {{name: hosts}}
spec:
  levels: [{{nodeLabel: kubernetes.io/hostname}}]
---
apiVersion: v1
kind: Node
metadata:
  name: gpu-0
  labels: {{kubernetes.io/hostname: gpu-0}}
  annotations: {json.dumps(annotations)}
status:
  allocatable: {{nvidia.com/gpu: '8', pods: '110', cpu: '96'}}
  conditions: [{{type: Ready, status: 'True'}}]
"""
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


def _job_file(tmp_path: Path, minimum: str | None = None) -> Path:
    annotation = f"\n        topogate.dev/gpu-min-bandwidth: '{minimum}'" if minimum else ""
    text = f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: pair, namespace: ns}}
spec:
  parallelism: 2
  completions: 2
  template:
    metadata:
      annotations:
        kueue.x-k8s.io/podset-required-topology: kubernetes.io/hostname{annotation}
    spec:
      containers:
      - name: a
        image: x
        resources: {{limits: {{nvidia.com/gpu: 2}}}}
"""
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_plan_prints_the_seed_sets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = _cluster_file(tmp_path, {"topogate.dev/gpu-bandwidth": json.dumps(SEED)})
    job = _job_file(tmp_path)
    assert main(["plan", "--cluster", str(cluster), "--workload", str(job)]) == 0
    out = capsys.readouterr().out
    assert "gpu-0  [0,3] [1,2]   96.25 96.25      0,1,2,3       48.33" in out
    assert main(["plan", "--cluster", str(cluster), "--workload", str(job), "-o", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    annotation = document["metadata"]["annotations"]["topogate.dev/gpu-assignment"]
    assert json.loads(annotation) == {"main": {"gpu-0": [["0", "3"], ["1", "2"]]}}


def test_plan_refuses_a_bad_gpu_annotation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _cluster_file(tmp_path, {"topogate.dev/gpu-bandwidth": "[[0, 1], [1, 0]]"})
    assert main(["plan", "--cluster", str(cluster), "--workload", str(_job_file(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err == (
        "topogate plan: error: Node gpu-0: metadata.annotations[topogate.dev/gpu-bandwidth]: "
        "describes 2 GPUs but the node has 8 allocatable nvidia.com/gpu\n"
    )


def test_plan_refuses_a_bad_minimum(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = _cluster_file(tmp_path, {"topogate.dev/gpu-profile": "nvswitch-8"})
    job = _job_file(tmp_path, minimum="fast")
    assert main(["plan", "--cluster", str(cluster), "--workload", str(job)]) == 2
    err = capsys.readouterr().err
    assert "spec.template.metadata.annotations[topogate.dev/gpu-min-bandwidth]" in err
    assert "'fast': must be a positive number of GB/s" in err


def test_plan_reports_the_minimum(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = _cluster_file(tmp_path, {"topogate.dev/gpu-profile": "pcie-numa-8"})
    job = _job_file(tmp_path, minimum="40")
    assert main(["plan", "--cluster", str(cluster), "--workload", str(job)]) == 1
    assert (
        "1 node(s) have no free set of 2 GPUs with a bottleneck of at least 40 GB/s"
        in capsys.readouterr().out
    )


def test_the_example_prints_optimal_sets() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "topogate",
            "plan",
            "--cluster",
            str(EXAMPLES / "gpu-cluster.yaml"),
            "--workload",
            str(EXAMPLES / "gpu-job.yaml"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "gpu-measured  [0,3] [1,2]   96.25 96.25      0,1,2,3       48.33" in done.stdout


def test_a_leaders_gpus_count_against_its_workers_on_the_same_node() -> None:
    # 4 of 8 GPUs are held by a pod that requests none (only its annotation holds them), so
    # nvidia.com/gpu capacity alone would fit leader 1x2 + workers 2x2; the GPU sets do not.
    stray = PodUsage("ns/x", "a", {}, gpus=frozenset(range(4)))
    nodes = [gpu_node("a", profile("nvswitch-8"))]
    workers = gpus(2, 2, name="workers", group="g", required=HOST)
    leader = gpus(1, 2, name="leader", group="g", required=HOST)
    decision = run(nodes, workers, leader, pods=(stray,))
    assert not decision.fits
