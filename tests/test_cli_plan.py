"""`topogate plan`: the contract's exit codes, outputs and error lines."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kit import written_domains
from topogate.cli import main

BLOCK = "cloud.example.com/topology-block"
RACK = "cloud.example.com/topology-rack"


def _node(name: str, block: str, rack: str, gpus: int = 8, **extra: Any) -> dict[str, Any]:
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {BLOCK: block, RACK: rack, "kubernetes.io/hostname": name},
        },
        "status": {
            "allocatable": {
                "cpu": "32",
                "memory": "256Gi",
                "nvidia.com/gpu": str(gpus),
                "pods": "110",
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    node.update(extra)
    return node


TOPOLOGY = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Topology",
    "metadata": {"name": "dc"},
    "spec": {
        "levels": [
            {"nodeLabel": BLOCK},
            {"nodeLabel": RACK},
            {"nodeLabel": "kubernetes.io/hostname"},
        ]
    },
}


def _job(
    parallelism: int, annotations: dict[str, str] | None = None, gpus: int = 8
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "parallelism": parallelism,
            "template": {
                "metadata": {
                    "annotations": annotations
                    if annotations is not None
                    else {"kueue.x-k8s.io/podset-required-topology": RACK}
                },
                "spec": {
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]
                },
            },
        },
    }


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    directory = tmp_path / "cluster"
    directory.mkdir()
    nodes = [
        _node(f"h{b}{r}{h}", f"b{b}", f"r{r}") for b in range(2) for r in range(2) for h in range(2)
    ]
    (directory / "nodes.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes})
    )
    (directory / "topology.json").write_text(json.dumps(TOPOLOGY))
    (directory / "notes.txt").write_text("ignored: not yaml or json")
    return directory


def _write(tmp_path: Path, obj: Any, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(obj))
    return path


def test_fits_json_is_a_workload_with_admission(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "plan",
            "--cluster",
            str(cluster),
            "--workload",
            str(_write(tmp_path, _job(2))),
            "-o",
            "json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["apiVersion"] == "topogate.dev/v1alpha1" and out["kind"] == "Workload"
    (assignment,) = out["status"]["admission"]["podSetAssignments"]
    assert assignment["name"] == "main" and assignment["count"] == 2
    assert assignment["flavors"] == {"nvidia.com/gpu": "default"}
    topology = assignment["topologyAssignment"]
    assert topology["levels"] == ["kubernetes.io/hostname"]
    # Required rack, 2 pods of 8 GPUs: the first rack by path, both its hosts.
    assert written_domains(topology) == [
        {"values": ["h000"], "count": 1},
        {"values": ["h001"], "count": 1},
    ]
    assert out["status"]["conditions"][0]["status"] == "True"


def test_yaml_prints_the_same_object(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = str(_write(tmp_path, _job(2)))
    main(["plan", "--cluster", str(cluster), "--workload", job, "-o", "json"])
    as_json = json.loads(capsys.readouterr().out)
    main(["plan", "--cluster", str(cluster), "--workload", job, "-o", "yaml"])
    as_yaml = yaml.safe_load(capsys.readouterr().out)
    for doc in (as_json, as_yaml):
        doc["status"]["conditions"][0].pop("lastTransitionTime")
    assert as_json == as_yaml


def test_does_not_fit_exits_1_with_pending_condition(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "plan",
            "--cluster",
            str(cluster),
            "--workload",
            str(_write(tmp_path, _job(3))),
            "-o",
            "json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert "admission" not in out["status"]
    (condition,) = out["status"]["conditions"]
    assert condition["status"] == "False"
    assert condition["message"] == (
        "couldn't assign flavors to pod set main: "
        'topology "dc" allows to fit only 2 out of 3 pod(s)'
    )


def test_table_names_domains_and_free_capacity(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["plan", "--cluster", str(cluster), "--workload", str(_write(tmp_path, _job(1, gpus=4)))]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "h000" in out and "nvidia.com/gpu=4" in out


def test_non_hostname_lowest_level_writes_full_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topology = {**TOPOLOGY, "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}]}}
    nodes = [_node("a", "b1", "r1"), _node("b", "b1", "r1"), _node("c", "b1", "r2")]
    cluster = _write(tmp_path, None, "c.yaml")
    cluster.write_text(yaml.safe_dump_all([topology, *nodes]))
    code = main(
        [
            "plan",
            "--cluster",
            str(cluster),
            "--workload",
            str(_write(tmp_path, _job(2))),
            "-o",
            "json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    topo = out["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    # Kueue v1beta2's slices: one domain, so every level and the pod count are universal.
    assert topo == {
        "levels": [BLOCK, RACK],
        "slices": [
            {
                "domainCount": 1,
                "valuesPerLevel": [{"universal": "b1"}, {"universal": "r1"}],
                "podCounts": {"universal": 2},
            }
        ],
    }


def test_other_kinds_are_skipped_with_one_warning(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (cluster / "extra.yaml").write_text(
        yaml.safe_dump_all(
            [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "b"}},
            ]
        )
    )
    assert (
        main(["plan", "--cluster", str(cluster), "--workload", str(_write(tmp_path, _job(1)))]) == 0
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "topogate plan: warning: skipped 2 object(s) of kinds plan does not use: ConfigMap x1, Service x1"
    ]


def test_a_known_kind_under_another_api_version_is_named_with_what_is_read(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not guessed at: a Topology of another project (or an unknown Kueue version) is left
    out with its apiVersion and the apiVersions topogate reads."""
    other = {**TOPOLOGY, "apiVersion": "example.com/v1alpha1"}
    (cluster / "extra.yaml").write_text(
        yaml.safe_dump_all(
            [
                {**other, "metadata": {"name": "b"}},
                {**other, "metadata": {"name": "a"}},
                {**TOPOLOGY, "apiVersion": "kueue.x-k8s.io/v1", "metadata": {"name": "c"}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}},
            ]
        )
    )
    code = main(["plan", "--cluster", str(cluster), "--workload", str(_write(tmp_path, _job(1)))])
    assert code == 0  # planned on the one Topology that is read
    read = (
        "topogate reads Topology as topogate.dev/v1alpha1, kueue.x-k8s.io/v1alpha1, "
        "kueue.x-k8s.io/v1beta1, kueue.x-k8s.io/v1beta2 or kai.scheduler/v1alpha1"
    )
    assert capsys.readouterr().err.splitlines() == [
        f"topogate plan: warning: Topology example.com/v1alpha1 is not read (2 objects: b, a); {read}",
        f"topogate plan: warning: Topology kueue.x-k8s.io/v1 is not read (1 object: c); {read}",
        "topogate plan: warning: skipped 1 object(s) of kinds plan does not use: ConfigMap x1",
    ]
    # The same lines from topology, which loads the cluster the same way.
    assert main(["topology", "--cluster", str(cluster), "-o", "json"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        f"topogate topology: warning: Topology example.com/v1alpha1 is not read (2 objects: b, a); {read}"
    )


def test_bound_pods_count_as_usage(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    busy = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": "x"},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
            },
            "status": {"phase": phase},
        }
        for i, (node, phase) in enumerate(
            [("h000", "Running"), ("h001", "Pending"), ("h010", "Succeeded")]
        )
    ]
    (cluster / "pods.yaml").write_text(yaml.safe_dump_all(busy))
    code = main(
        [
            "plan",
            "--cluster",
            str(cluster),
            "--workload",
            str(_write(tmp_path, _job(2))),
            "-o",
            "json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    domains = written_domains(
        out["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    )
    # Rack b0/r0 is partly busy (running + pending pods); the succeeded pod on h010 frees it.
    assert domains == [{"values": ["h010"], "count": 1}, {"values": ["h011"], "count": 1}]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda job: job["spec"]["template"]["metadata"]["annotations"].update(
                {"kueue.x-k8s.io/podset-preferred-topology": BLOCK}
            ),
            "Job ml/train: spec.template.metadata.annotations: Invalid value: must not contain "
            "more than one topology annotation (required, preferred, unconstrained); found "
            "kueue.x-k8s.io/podset-required-topology, kueue.x-k8s.io/podset-preferred-topology",
        ),
        (
            lambda job: job["spec"]["template"]["metadata"]["annotations"].update(
                {"kueue.x-k8s.io/podset-required-topology": "no-such-level"}
            ),
            "Job ml/train: spec.template.metadata.annotations[kueue.x-k8s.io/podset-required-topology]: "
            "'no-such-level' is not a level of topology 'dc' (levels: "
            "cloud.example.com/topology-block (tier 2), cloud.example.com/topology-rack (tier 1), "
            "kubernetes.io/hostname (tier 0))",
        ),
        (
            lambda job: job["spec"]["template"]["spec"]["containers"][0]["resources"][
                "limits"
            ].update({"nvidia.com/gpu": "eight"}),
            "Job ml/train: spec.template.spec.containers[0].resources.limits.nvidia.com/gpu: "
            "'eight' is not a quantity (expected e.g. 500m, 2, 1.5Gi, 4e3)",
        ),
        (
            lambda job: job["spec"].update({"parallelism": -1}),
            "Job ml/train: spec.parallelism: -1 must be a non-negative integer",
        ),
        (
            lambda job: job.update({"kind": "Deployment", "apiVersion": "apps/v1"}),
            "Deployment ml/train: kind 'Deployment' with apiVersion 'apps/v1' is not a workload; "
            "expected batch/v1 Job, jobset.x-k8s.io/v1alpha2 JobSet, leaderworkerset.x-k8s.io/v1 "
            "LeaderWorkerSet, kubeflow.org/v1 PyTorchJob, kubeflow.org/v2beta1 MPIJob, "
            "ray.io/v1 RayCluster, ray.io/v1 RayJob, trainer.kubeflow.org/v1alpha1 TrainJob, "
            "v1 Pod (alone or in a group) or topogate.dev/v1alpha1 Workload",
        ),
    ],
)
def test_invalid_workload_exits_2_with_one_line(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: Any, expected: str
) -> None:
    job = _job(2)
    mutate(job)
    path = _write(tmp_path, job)
    assert main(["plan", "--cluster", str(cluster), "--workload", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0] == f"topogate plan: error: {path}: {expected}"


def test_invalid_node_names_file_object_and_field(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _node("broken", "b9", "r9")
    bad["status"]["allocatable"]["memory"] = "lots"
    (cluster / "zz.yaml").write_text(yaml.safe_dump(bad))
    assert (
        main(["plan", "--cluster", str(cluster), "--workload", str(_write(tmp_path, _job(1)))]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert err == (
        f"topogate plan: error: {cluster / 'zz.yaml'}: Node broken: status.allocatable.memory: "
        "'lots' is not a quantity (expected e.g. 500m, 2, 1.5Gi, 4e3)"
    )


def test_invalid_topology_names_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topology = {
        **TOPOLOGY,
        "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": RACK}]},
    }
    path = _write(tmp_path, topology, "t.yaml")
    assert main(["plan", "--cluster", str(path), "--workload", str(_write(tmp_path, _job(1)))]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"topogate plan: error: {path}: "
        "Topology dc: spec.levels: kubernetes.io/hostname is allowed only as the lowest (last) level\n"
    )


def test_a_workload_s_written_assignment_is_read_in_either_form_and_checked(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A Workload plans afresh whatever its status says; a malformed slice is still bad input.
    plan = ["plan", "--cluster", str(cluster), "-o", "json", "--workload"]
    assert main([*plan, str(_write(tmp_path, _job(2)))]) == 0
    first = json.loads(capsys.readouterr().out)
    expected = json.loads(json.dumps(first["status"]["admission"]))
    (assignment,) = first["status"]["admission"]["podSetAssignments"]
    topology = assignment["topologyAssignment"]
    old = {"levels": topology["levels"], "domains": written_domains(topology)}
    for form in (topology, old):
        assignment["topologyAssignment"] = form
        assert main([*plan, str(_write(tmp_path, first, "again.yaml"))]) == 0
        assert json.loads(capsys.readouterr().out)["status"]["admission"] == expected
    topology["slices"][0]["podCounts"] = {"individual": [1]}
    assignment["topologyAssignment"] = topology
    path = _write(tmp_path, first, "broken.yaml")
    assert main([*plan, str(path)]) == 2
    assert capsys.readouterr().err == (
        f"topogate plan: error: {path}: Workload {first['metadata']['namespace']}/"
        f"{first['metadata']['name']}: status.admission.podSetAssignments[0].topologyAssignment: "
        "slices[0].podCounts.individual: has 1 entries; it must have domainCount (2)\n"
    )


def test_flavor_choice(cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flavors = [
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ResourceFlavor",
            "metadata": {"name": name},
            "spec": {"nodeLabels": {RACK: rack}, "topologyName": "dc"},
        }
        for name, rack in (("rack0", "r0"), ("rack1", "r1"))
    ]
    (cluster / "flavors.yaml").write_text(yaml.safe_dump_all(flavors))
    job = str(_write(tmp_path, _job(1)))
    assert main(["plan", "--cluster", str(cluster), "--workload", job]) == 2
    assert (
        "several topology ResourceFlavors (rack0, rack1); pick one with --flavor"
        in capsys.readouterr().err
    )
    assert (
        main(
            [
                "plan",
                "--cluster",
                str(cluster),
                "--workload",
                job,
                "--flavor",
                "rack1",
                "-o",
                "json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assignment = out["status"]["admission"]["podSetAssignments"][0]
    assert assignment["flavors"] == {"nvidia.com/gpu": "rack1"}
    assert written_domains(assignment["topologyAssignment"]) == [{"values": ["h010"], "count": 1}]
    assert main(["plan", "--cluster", str(cluster), "--workload", job, "--flavor", "nope"]) == 2
    assert "no ResourceFlavor 'nope'" in capsys.readouterr().err


def test_jobset_podsets_and_group(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def replicated(name: str, replicas: int, parallelism: int, gpus: int) -> dict[str, Any]:
        return {
            "name": name,
            "replicas": replicas,
            "template": {
                "spec": {
                    "parallelism": parallelism,
                    "template": {
                        "metadata": {
                            "annotations": {"kueue.x-k8s.io/podset-required-topology": BLOCK}
                        },
                        "spec": {
                            "containers": [
                                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
                            ]
                        },
                    },
                }
            },
        }

    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {"replicatedJobs": [replicated("driver", 1, 1, 1), replicated("workers", 2, 2, 8)]},
    }
    code = main(
        [
            "plan",
            "--cluster",
            str(cluster),
            "--workload",
            str(_write(tmp_path, jobset)),
            "-o",
            "json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    counts = {a["name"]: a["count"] for a in out["status"]["admission"]["podSetAssignments"]}
    assert counts == {"driver": 1, "workers": 4}


def test_example_and_console_script_without_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "topogate", "plan", "--example", "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"]["admission"]["podSetAssignments"][0]["count"] == 6
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [unclosed")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "topogate",
            "plan",
            "--cluster",
            str(broken),
            "--workload",
            str(broken),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr == (
        f"topogate plan: error: {broken}: invalid YAML: line 2, column 1: did not find "
        "expected ',' or ']' (while parsing a flow sequence at line 1, column 7)\n"
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["plan", "--example", "--cluster", "x"],
            "topogate plan: error: --example cannot be combined with --cluster or --workload",
        ),
        (["plan"], "topogate plan: error: needs --cluster PATH and --workload PATH (or --example)"),
        (
            ["topology", "discover", "--cluster", "topogate/examples/cluster.yaml"],
            "topogate topology: error: discover needs --labels TYPE=LABEL,... or "
            "--discovery-config FILE",
        ),
        (
            ["gpu", "import", "--pcie-gbps", "-1"],
            "topogate gpu import: error: --pcie-gbps: must be a positive number of GB/s",
        ),
    ],
)
def test_errors_carry_the_command_prefix_once(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert main(argv) == 2
    assert capsys.readouterr().err == line + "\n"


def test_cluster_from_stdin(
    cluster: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`kubectl get nodes,pods -A -o yaml | topogate plan --cluster - ...`: a v1 List on stdin,
    as YAML or as JSON (kubectl -o json), with more files next to it."""
    job = str(_write(tmp_path, _job(2)))
    assert main(["plan", "--cluster", str(cluster), "--workload", job]) == 0
    from_files = capsys.readouterr().out
    nodes = yaml.safe_load((cluster / "nodes.yaml").read_text())
    topology = str(cluster / "topology.json")
    for text in (yaml.safe_dump(nodes), json.dumps(nodes, indent=4)):
        monkeypatch.setattr("sys.stdin", io.StringIO(text))
        assert main(["plan", "--cluster", "-", "--cluster", topology, "--workload", job]) == 0
        assert capsys.readouterr() == (from_files, "")
    monkeypatch.setattr("sys.stdin", io.StringIO("kind: [unclosed"))
    assert main(["plan", "--cluster", "-", "--workload", job]) == 2
    assert capsys.readouterr().err.startswith("topogate plan: error: <stdin>: invalid YAML: ")
    assert main(["plan", "--cluster", "-", "--cluster", "-", "--workload", job]) == 2
    assert capsys.readouterr().err == (
        "topogate plan: error: --cluster: stdin can be read once; give --cluster - once\n"
    )
    assert main(["plan", "--cluster", "-", "--workload", "-"]) == 2
    assert capsys.readouterr().err == (
        "topogate plan: error: --workload: - reads stdin, which --cluster - already reads; "
        "give the workload as a file\n"
    )
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(nodes)))
    assert main(["topology", "--cluster", "-", "--cluster", topology, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["domains"][0]["nodes"] == 8


@pytest.mark.parametrize(
    ("annotations", "pods", "asked"),
    [
        ({"kueue.x-k8s.io/podset-required-topology": RACK}, 2, f"required {RACK}"),
        ({}, 1, "unconstrained"),
        (
            {
                "kai.scheduler/topology-preferred-placement": RACK,
                "kai.scheduler/topology-required-placement": BLOCK,
            },
            3,
            f"preferred {RACK}, climbing no higher than {BLOCK}",
        ),
        (
            {
                "kueue.x-k8s.io/podset-preferred-topology": BLOCK,
                "kueue.x-k8s.io/podset-slice-required-topology": RACK,
                "kueue.x-k8s.io/podset-slice-size": "2",
            },
            4,
            f"preferred {BLOCK}; slices of 2 pod(s) in one {RACK}",
        ),
        (
            {
                "kueue.x-k8s.io/podset-slice-required-topology": RACK,
                "kueue.x-k8s.io/podset-slice-size": "2",
            },
            4,
            f"slices of 2 pod(s) in one {RACK}",
        ),
    ],
)
def test_table_shows_the_topology_request_it_honoured(
    cluster: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    annotations: dict[str, str],
    pods: int,
    asked: str,
) -> None:
    job = _write(tmp_path, _job(pods, annotations))
    assert main(["plan", "--cluster", str(cluster), "--workload", str(job)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == f"podset main: {pods} pod(s), {asked}"


def test_table_of_a_misfit_shows_what_was_asked(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _write(tmp_path, _job(3))
    assert main(["plan", "--cluster", str(cluster), "--workload", str(job)]) == 1
    assert capsys.readouterr().out.splitlines()[1:] == [
        'DOES NOT FIT: main: topology "dc" allows to fit only 2 out of 3 pod(s)',
        f"podset main asked: required {RACK}",
    ]


def _group_pod(name: str, total: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": {"kueue.x-k8s.io/pod-group-name": "gang"},
            "annotations": {
                "kueue.x-k8s.io/pod-group-total-count": str(total),
                "kueue.x-k8s.io/podset-required-topology": RACK,
            },
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }


def test_a_pod_group_file_is_planned_as_one_gang_of_its_roles(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Pods of one pod group, as serve composes them: a PodSet per role."""
    pods = [_group_pod("w0", 3, 8), _group_pod("w1", 3, 8), _group_pod("driver", 3, 1)]
    path = tmp_path / "gang.yaml"
    path.write_text(yaml.safe_dump_all(pods))
    argv = ["plan", "--cluster", str(cluster), "--workload", str(path), "-o", "json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["metadata"]["name"] == "gang"
    counts = sorted(a["count"] for a in out["status"]["admission"]["podSetAssignments"])
    assert counts == [1, 2]
    # One pod short of its total: refused naming the group, exit 2.
    path.write_text(yaml.safe_dump_all(pods[:2]))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "PodGroup ml/gang: has 2 runnable pod(s) of the 3 its "
        "kueue.x-k8s.io/pod-group-total-count says; a group is admitted with all its pods"
    )


def test_a_leaderworkerset_is_planned_as_one_group(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def template(gpus: int) -> dict[str, Any]:
        return {
            "metadata": {
                "annotations": {
                    "kueue.x-k8s.io/podset-required-topology": RACK,
                    "kueue.x-k8s.io/podset-group-name": "g",
                }
            },
            "spec": {
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]
            },
        }

    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve", "namespace": "ml"},
        "spec": {
            "replicas": 3,
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": template(8),
                "workerTemplate": template(8),
            },
        },
    }
    argv = ["plan", "--cluster", str(cluster), "--workload", str(_write(tmp_path, lws))]
    assert main([*argv, "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    [leader, worker] = out["status"]["admission"]["podSetAssignments"]
    assert (leader["name"], leader["count"], worker["name"], worker["count"]) == (
        "leader",
        1,
        "worker",
        1,
    )
    # Leader and worker in one rack: together they fill both hosts of the first one.
    hosts = [
        d["values"][0] for a in (leader, worker) for d in written_domains(a["topologyAssignment"])
    ]
    assert sorted(hosts) == ["h000", "h001"]


def test_a_pytorchjob_is_planned_master_then_workers(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def replica(replicas: int) -> dict[str, Any]:
        annotations = {
            "kueue.x-k8s.io/podset-required-topology": RACK,
            "kueue.x-k8s.io/podset-group-name": "g",
        }
        container = {"name": "pytorch", "resources": {"limits": {"nvidia.com/gpu": 8}}}
        return {
            "replicas": replicas,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"containers": [container]},
            },
        }

    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "finetune", "namespace": "ml"},
        "spec": {"pytorchReplicaSpecs": {"Worker": replica(1), "Master": replica(1)}},
    }
    argv = ["plan", "--cluster", str(cluster), "--workload", str(_write(tmp_path, job))]
    assert main([*argv, "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    [master, worker] = out["status"]["admission"]["podSetAssignments"]
    assert [(a["name"], a["count"]) for a in (master, worker)] == [("master", 1), ("worker", 1)]
    # Master and worker in one rack: together they fill both hosts of the first one.
    hosts = [
        d["values"][0] for a in (master, worker) for d in written_domains(a["topologyAssignment"])
    ]
    assert sorted(hosts) == ["h000", "h001"]
