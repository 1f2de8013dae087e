"""KAI-Scheduler's own Topology (kai.scheduler/v1alpha1) as a topology source: read from
`--cluster` files by `plan` and `topology`, merged with Kueue's Topologies by name, and kept in
the controller's catalog from its watch.

The manifests are written in KAI's documented shape (docs/topology/README.md of
NVIDIA/KAI-Scheduler): a Topology ``cluster-topology`` with zone, rack and hostname levels,
and a Job carrying the ``kai.scheduler/*`` annotations in its own metadata.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kit import written_domains
from topogate.admission.podsets import build_catalog
from topogate.api.models import Topology
from topogate.api.validation import parse_model
from topogate.cache.sources import merge_kai_topologies
from topogate.cli import main
from topogate.kube.resources import KAI_TOPOLOGIES, TOPOLOGIES
from topogate.state import ControllerState

ZONE, RACK, HOST = (
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/rack",
    "kubernetes.io/hostname",
)
KAI = "kai.scheduler/v1alpha1"

# KAI's documented example: zone A has racks of 2, 1, 1 and 1 one-GPU nodes, zone B three
# racks of 2; a 3-pod job requiring a zone and preferring a rack lands on A1 (both nodes) and A2.
LAYOUT = {"zone-a": {"a1": 2, "a2": 1, "a3": 1, "a4": 1}, "zone-b": {"b1": 2, "b2": 2, "b3": 2}}


def kai_topology(
    name: str = "cluster-topology", levels: Any = (ZONE, RACK, HOST)
) -> dict[str, Any]:
    return {
        "apiVersion": KAI,
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": label} for label in levels]},
    }


def kueue_topology(name: str, levels: Any) -> dict[str, Any]:
    return {**kai_topology(name, levels), "apiVersion": "kueue.x-k8s.io/v1beta2"}


def node(name: str, labels: dict[str, str], gpus: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {HOST: name, **labels}},
        "status": {
            "allocatable": {
                "cpu": "8",
                "memory": "32Gi",
                "nvidia.com/gpu": str(gpus),
                "pods": "110",
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def nodes() -> list[dict[str, Any]]:
    out = [
        node(f"node-{rack}-{i + 1}", {ZONE: zone, RACK: f"rack-{rack}"})
        for zone, racks in LAYOUT.items()
        for rack, count in racks.items()
        for i in range(count)
    ]
    # No rack label: not part of KAI's topology (KAI's isNodePartOfTopology). Counted in, its
    # 8 GPUs would make zone A the roomier zone and the job would go to zone B.
    out.append(node("node-a-norack", {ZONE: "zone-a"}, gpus=8))
    return out


def kai_job(topology: str = "cluster-topology", pods: int = 3) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "distributed-training",
            "namespace": "ml",
            "annotations": {
                "kai.scheduler/topology": topology,
                "kai.scheduler/topology-required-placement": ZONE,
                "kai.scheduler/topology-preferred-placement": RACK,
            },
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}
                    ]
                }
            },
        },
    }


def write(directory: Path, name: str, *docs: Any) -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump_all(list(docs)))
    return path


@pytest.fixture
def run_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    def run(topologies: list[dict[str, Any]], job: dict[str, Any]) -> tuple[int, Any, str]:
        cluster = write(tmp_path, "cluster.yaml", *topologies, *nodes())
        workload = write(tmp_path, "job.yaml", job)
        code = main(["plan", "--cluster", str(cluster), "--workload", str(workload), "-o", "json"])
        captured = capsys.readouterr()
        return code, json.loads(captured.out) if code == 0 else None, captured.err

    return run


# --- plan, end to end through the CLI -------------------------------------------------------


def test_a_kai_job_places_on_its_kai_topology_as_kai_documents(run_plan: Any) -> None:
    # A Kueue Topology of another shape is there too: the job's annotation picks KAI's.
    other = kueue_topology("dc", (ZONE, HOST))
    code, out, err = run_plan([kai_topology(), other], kai_job())
    assert code == 0, err
    assert "skipped" not in err  # the KAI Topology is read, not skipped
    (assignment,) = out["status"]["admission"]["podSetAssignments"]
    domains = [d["values"][0] for d in written_domains(assignment["topologyAssignment"])]
    assert domains == ["node-a1-1", "node-a1-2", "node-a2-1"]


def test_a_job_naming_a_kai_topology_uses_its_levels(run_plan: Any) -> None:
    # Without a hostname level the assignment names full paths: the KAI levels, in order.
    racks_only = kai_topology("racks", (ZONE, RACK))
    job = kai_job("racks")
    job["metadata"]["annotations"].pop("kai.scheduler/topology-preferred-placement")
    code, out, err = run_plan([racks_only, kueue_topology("dc", (ZONE, HOST))], job)
    assert code == 0, err
    (assignment,) = out["status"]["admission"]["podSetAssignments"]
    assert assignment["topologyAssignment"]["levels"] == [ZONE, RACK]
    assert {d["values"][0] for d in written_domains(assignment["topologyAssignment"])} == {"zone-a"}


def test_same_name_same_levels_is_one_topology(run_plan: Any) -> None:
    # KAI's upgrade copies each Kueue Topology into a KAI Topology of the same name.
    levels = (ZONE, RACK, HOST)
    code, _, err = run_plan([kueue_topology("cluster-topology", levels), kai_topology()], kai_job())
    assert code == 0, err


def test_same_name_other_levels_is_refused_naming_both(run_plan: Any) -> None:
    kueue = kueue_topology("cluster-topology", (ZONE, HOST))
    code, _, err = run_plan([kai_topology(), kueue], kai_job())
    assert code == 2
    line = err.strip().splitlines()[-1]
    assert "cluster.yaml: Topology cluster-topology: spec.levels:" in line, line
    assert f"[{ZONE}, {RACK}, {HOST}]" in line and f"[{ZONE}, {HOST}]" in line
    assert "kueue.x-k8s.io/v1beta2" in line and "Traceback" not in err


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"levels": []}, "spec.levels", "at least 1"),
        ({}, "spec.levels", "is required"),
        ({"levels": [{"nodeLabel": ZONE}, {"nodeLabel": ZONE}]}, "spec.levels", "more than once"),
        ({"levels": [{"nodeLabel": f"l{i}"} for i in range(17)]}, "spec.levels", "at most 16"),
        ({"levels": [{"nodeLabel": HOST}, {"nodeLabel": RACK}]}, "spec.levels", "lowest"),
        ({"levels": [{}]}, "spec.levels[0].nodeLabel", "is required"),
        ({"levels": [{"nodeLabel": "bad key!"}]}, "spec.levels[0].nodeLabel", ""),
    ],
)
def test_malformed_kai_topology_is_refused_with_object_and_field(
    run_plan: Any, spec: dict[str, Any], field: str, words: str
) -> None:
    bad = {**kai_topology(), "spec": spec}
    code, _, err = run_plan([bad], kai_job())
    assert code == 2
    line = err.strip().splitlines()[-1]
    assert f"Topology cluster-topology: {field}:" in line and words in line, line


def test_kai_topology_of_an_unserved_version_is_named_and_not_read(run_plan: Any) -> None:
    # KAI's migration script writes kai.scheduler/v1, which KAI's CRD does not serve: the
    # object is not guessed at; the warning says what is read, and the job naming it is refused.
    code, _, err = run_plan([{**kai_topology(), "apiVersion": "kai.scheduler/v1"}], kai_job())
    assert code == 2
    assert (
        "topogate plan: warning: Topology kai.scheduler/v1 is not read (1 object: "
        "cluster-topology); topogate reads Topology as topogate.dev/v1alpha1, "
        f"kueue.x-k8s.io/v1alpha1, kueue.x-k8s.io/v1beta1, kueue.x-k8s.io/v1beta2 or {KAI}"
    ) in err
    assert "names topology 'cluster-topology', which is not in the cluster input" in err


def test_two_kai_topologies_of_one_name_are_refused(run_plan: Any) -> None:
    code, _, err = run_plan([kai_topology(), kai_topology()], kai_job())
    assert code == 2 and "metadata.name" in err and "defined twice" in err


def test_topology_command_shows_a_kai_topology(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = write(tmp_path, "cluster.yaml", kai_topology(), *nodes())
    code = main(["topology", "--cluster", str(cluster), "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["topology"] == "cluster-topology" and out["levels"] == [ZONE, RACK, HOST]
    root = out["domains"][0]
    assert root["nodes"] == 11  # the node without a rack label is not part of it


# --- the merge and the controller's catalog ---------------------------------------------------


def parsed(obj: dict[str, Any]) -> Topology:
    return parse_model(Topology, obj, "")


def test_merge_keeps_kueue_topology_on_a_clash() -> None:
    kueue = parsed(kueue_topology("t", (ZONE, HOST)))
    merged, clashes = merge_kai_topologies(
        {"t": kueue}, {"t": parsed(kai_topology("t")), "k": parsed(kai_topology("k"))}
    )
    assert merged["t"] is kueue and merged["k"].is_kai
    assert set(clashes) == {"t"} and clashes["t"].field == "spec.levels"


def test_catalog_offers_kai_topologies_and_warns_on_a_clash() -> None:
    catalog, warnings = build_catalog(
        [],
        [],
        [],
        [kueue_topology("t", (ZONE, HOST))],
        None,
        [kai_topology("t"), kai_topology("k"), {**kai_topology("bad"), "spec": {"levels": []}}],
    )
    assert catalog.sources["k"].level_keys == (ZONE, RACK, HOST)
    assert catalog.sources["t"].level_keys == (ZONE, HOST)  # Kueue's keeps the name
    assert "bad" not in catalog.sources
    assert len(warnings) == 2
    assert any(f"Topology bad ({KAI}): spec.levels" in w for w in warnings), warnings
    assert any(f"Topology t ({KAI}): spec.levels" in w for w in warnings), warnings


def test_state_follows_kai_topologies_apart_from_topogate_ones() -> None:
    state = ControllerState()
    on_kai, on_topology = state.handler(KAI_TOPOLOGIES), state.handler(TOPOLOGIES)
    topogate_one = {
        **kai_topology("cluster-topology", (ZONE, HOST)),
        "apiVersion": "topogate.dev/v1alpha1",
    }
    on_topology(None, topogate_one)
    on_kai(None, kai_topology("racks", (ZONE, RACK)))
    generation = state.catalogs.generation
    assert set(state.catalogs.catalog().sources) == {"cluster-topology", "racks"}
    assert len(state.store.objects(TOPOLOGIES)) == len(state.store.objects(KAI_TOPOLOGIES)) == 1
    on_kai(kai_topology("racks", (ZONE, RACK)), None)
    assert state.catalogs.generation > generation
    assert set(state.catalogs.catalog().sources) == {"cluster-topology"}
