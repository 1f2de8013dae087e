"""What `topogate plan` missed or said badly (issue 26): an admitted Workload's nodes, keys in
the wrong place, the pod set in a no-fit message, Volcano's suggestion, and smaller gaps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.test_cli_plan import _job, _node
from tests.test_hypernodes import hn
from tests.test_plan_checks import FLAVOR, LOCAL_QUEUE, _cluster_queue, _plan, _queued
from topogate.api.constants import PODSET_LABEL, WORKLOAD_ANNOTATION
from topogate.api.hypernodes import parse_hypernode
from topogate.cache.hypernodes import build_forest
from topogate.cache.nodes import node_from_kube
from topogate.commands.loader import hypernode_warnings

HOST = "kubernetes.io/hostname"


def _admitted(nodes: list[str], gpus: int = 8, **admission: Any) -> dict[str, Any]:
    """An admitted Workload (Kueue v1beta2) holding ``gpus`` GPUs on each of ``nodes``."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "running", "namespace": "ml"},
        "spec": {
            "queueName": "q",
            "podSets": [
                {
                    "name": "main",
                    "count": len(nodes),
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                                }
                            ]
                        }
                    },
                }
            ],
        },
        "status": {
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "flavors": {"nvidia.com/gpu": "gpu"},
                        "resourceUsage": {"nvidia.com/gpu": str(gpus * len(nodes))},
                        "count": len(nodes),
                        "topologyAssignment": {
                            "levels": [HOST],
                            "domains": [{"values": [n], "count": 1} for n in nodes],
                        },
                    }
                ],
                **admission,
            }
        },
    }


def _hosts(document: dict[str, Any]) -> list[str]:
    (assignment,) = document["status"]["admission"]["podSetAssignments"]
    topology = assignment["topologyAssignment"]
    (level,) = topology["levels"]
    assert level == HOST
    (piece,) = topology["slices"]
    individual = piece["valuesPerLevel"][0]["individual"]
    return [individual.get("prefix", "") + root for root in individual["roots"]]


@pytest.mark.parametrize("queues", [True, False])
def test_an_admitted_workload_holds_the_nodes_of_its_assignment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], queues: bool
) -> None:
    # Rack r0 of block b0 is full with the admitted Workload's pods: plan booked it again.
    objects = (FLAVOR, _cluster_queue(64), LOCAL_QUEUE, _admitted(["h000", "h001"]))
    args = ("-o", "json") if queues else ("-o", "json", "--ignore-queues")
    assert _plan(tmp_path, _queued(2), *objects, args=args) == 0
    assert _hosts(json.loads(capsys.readouterr().out)) == ["h010", "h011"]


@pytest.mark.parametrize(
    ("podset_label", "workload_annotation"),
    [
        (PODSET_LABEL, WORKLOAD_ANNOTATION),
        ("kueue.x-k8s.io/podset", "kueue.x-k8s.io/workload"),  # a Kueue cluster's dump
    ],
)
def test_an_admitted_workload_s_own_pods_are_not_counted_twice(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    podset_label: str,
    workload_annotation: str,
) -> None:
    # Half of h000's GPUs held by the Workload, its pod bound there too: block b0 has 28 GPUs
    # free (7 pods of 4), not 24.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "running-0",
            "namespace": "ml",
            "labels": {podset_label: "main"},
            "annotations": {workload_annotation: "running"},
        },
        "spec": {
            "nodeName": "h000",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
        },
        "status": {"phase": "Running"},
    }
    objects = (FLAVOR, _admitted(["h000"], gpus=4), pod)
    job = _job(7, {"kueue.x-k8s.io/podset-required-topology": "cloud.example.com/topology-block"})
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 4
    assert _plan(tmp_path, job, *objects, args=("-o", "json")) == 0
    (assignment,) = json.loads(capsys.readouterr().out)["status"]["admission"]["podSetAssignments"]
    assert assignment["count"] == 7
    job["spec"]["parallelism"] = 8
    (tmp_path / "more").mkdir()
    assert _plan(tmp_path / "more", job, *objects) == 1


def test_with_queues_a_no_fit_names_the_pod_set_as_without(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = (FLAVOR, _cluster_queue(1000), LOCAL_QUEUE)
    (tmp_path / "a").mkdir()
    assert _plan(tmp_path, _queued(3), *objects) == 1  # a rack holds 2 pods of 8 GPUs
    fit = 'topology "dc" allows to fit only 2 out of 3 pod(s)'
    assert capsys.readouterr().out.splitlines()[-1] == f"DOES NOT FIT: flavor gpu: main: {fit}"
    assert _plan(tmp_path / "a", _queued(3), *objects, args=("--ignore-queues",)) == 1
    assert f"DOES NOT FIT: main: {fit}" in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("queues", [True, False])
def test_nodes_lacking_the_flavor_s_label_are_named_in_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], queues: bool
) -> None:
    # "no topology domains at level: ..." said which level, not which label was missing.
    flavor = json.loads(json.dumps(FLAVOR))
    flavor["spec"]["nodeLabels"] = {"node-group": "h100"}
    args = () if queues else ("--ignore-queues",)
    assert _plan(tmp_path, _queued(1), flavor, _cluster_queue(64), LOCAL_QUEUE, args=args) == 1
    assert capsys.readouterr().err == (
        "topogate plan: warning: no node of --cluster has the label node-group=h100 that "
        "ResourceFlavor gpu selects (spec.nodeLabels)\n"
    )


def test_nodes_lacking_a_level_label_are_named_in_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topology = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": "zoned"},
        "spec": {"levels": [{"nodeLabel": "example.com/zone"}, {"nodeLabel": HOST}]},
    }
    flavor = json.loads(json.dumps(FLAVOR))
    flavor["spec"]["topologyName"] = "zoned"
    assert _plan(tmp_path, _job(1, {}), flavor, topology) == 1
    assert capsys.readouterr().err == (
        "topogate plan: warning: none of the 4 node(s) of ResourceFlavor gpu has the label "
        "example.com/zone, a level of topology zoned\n"
    )


def test_hypernodes_whose_members_are_not_in_the_cluster_say_so() -> None:
    # A HyperNode of nodes missing from --cluster showed "0 nodes" with no word.

    nodes = [node_from_kube(_node(n, "b0", "r0")) for n in ("n1", "n2")]
    regex = {"type": "Node", "selector": {"regexMatch": {"pattern": "^gpu-.*"}}}
    hypernodes = [
        hn("full", 1, ["n1"]),
        hn("half", 1, ["n2", "x1"]),
        hn("none", 1, ["x2", "x3", "x4", "x5"]),
        hn("top", 2, children=["full", "half", "none"]),
    ]

    pattern = parse_hypernode(
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": "pattern"},
            "spec": {"tier": 1, "members": [regex]},
        }
    )
    assert hypernode_warnings(build_forest([*hypernodes, pattern], nodes)) == [
        "HyperNode half: 1 of its 2 member node(s) are not in --cluster: x1",
        "HyperNode none: 4 of its 4 member node(s) are not in --cluster: x2, x3, x4 and 1 more",
        "HyperNode pattern: its members select no node of --cluster",
    ]


def _in_cohort(name: str, gpus: int) -> dict[str, Any]:
    queue = _cluster_queue(gpus)
    queue["metadata"]["name"] = name
    queue["spec"]["cohortName"] = "team"
    return queue


def test_a_fit_that_borrows_from_the_cohort_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It fitted with no word that it lasts only while the cohort lends.
    objects = (FLAVOR, _in_cohort("cq", 8), _in_cohort("other", 16), LOCAL_QUEUE)
    assert _plan(tmp_path, _queued(2), *objects, args=("-o", "json")) == 0
    borrowing = (
        "borrowing nvidia.com/gpu=8 beyond ClusterQueue cq's nominal quota in flavor gpu "
        "from cohort team"
    )
    (condition,) = json.loads(capsys.readouterr().out)["status"]["conditions"]
    assert condition["message"] == f"fits on flavor 'gpu', topology 'dc', {borrowing}"
    (tmp_path / "table").mkdir()
    assert _plan(tmp_path / "table", _queued(2), *objects) == 0
    assert capsys.readouterr().out.splitlines()[1] == f"quota: {borrowing}"
    (tmp_path / "within").mkdir()
    assert _plan(tmp_path / "within", _queued(1), *objects) == 0
    assert "borrowing" not in capsys.readouterr().out


def test_parallelism_0_says_there_is_nothing_to_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It printed a table header with no rows.
    assert _plan(tmp_path, _job(0)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == ["", "podset main: 0 pods, nothing to place"]


def test_a_hostname_label_over_63_characters_is_invalid_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A one-pod plan wrote it as the assignment's universal value: a pydantic traceback.
    long = "gpu-" + "x" * 60
    node = _node("n1", "b0", "r9", gpus=16)  # the one node a 16-GPU pod fits on
    node["metadata"]["labels"][HOST] = long
    assert _plan(tmp_path, _job(1, gpus=16), node, args=("-o", "json")) == 2
    assert capsys.readouterr().err == (
        f"topogate plan: error: {tmp_path / 'cluster' / 'nodes.yaml'}: Node n1: "
        f'metadata.labels[{HOST}]: Invalid value: "{long}": must be no more than 63 characters\n'
    )


def test_version_imports_no_command() -> None:
    # Every command's module (numpy, aiohttp, the kubernetes client) was imported: 1.1 s.
    code = (
        "import sys\n"
        "from topogate.cli import main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('numpy', 'aiohttp', 'kubernetes', 'pydantic', 'topogate.commands.plan')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.splitlines() == ["topogate 0.1.0", "[]"]
