"""`topogate status`: the pure summary, its renderers, and the command on a real API server."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes import client

from tests.cluster import fake_node
from topogate.cli import main
from topogate.commands import status as status_module
from topogate.commands.status import (
    BOUND,
    FINISHED,
    GATED,
    RUNNING,
    UNGATED,
    Connection,
    PodCounts,
    admission_state,
    connect,
    document,
    pod_state,
    render_json,
    render_table,
    render_workload,
    render_yaml,
    select,
    summarize,
)
from topogate.kube.errors import KubeError
from topogate.kube.resources import CLUSTER_QUEUES, LOCAL_QUEUES, PODS, WORKLOADS, Obj, Resource
from topogate.testing.controlplane import ControlPlane, free_port
from topogate.testing.fakekube import FakeKube
from topogate.webhooks.certs import KeyPair, issue

BLOCK = "status.example.com/block"
RACK = "status.example.com/rack"
GATE = {"name": "topogate.dev/topology"}


# --- builders ---------------------------------------------------------------------------


def _workload(
    name: str,
    namespace: str = "team",
    pod_sets: dict[str, int] | None = None,
    status: dict[str, Any] | None = None,
    owners: list[dict[str, Any]] | None = None,
    queue: str | None = "user-q",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if owners:
        metadata["ownerReferences"] = owners
    spec: dict[str, Any] = {
        "podSets": [{"name": n, "count": c} for n, c in (pod_sets or {"main": 6}).items()]
    }
    if queue:
        spec["queueName"] = queue
    workload: dict[str, Any] = {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "Workload",
        "metadata": metadata,
        "spec": spec,
    }
    if status is not None:
        workload["status"] = status
    return workload


def _condition(kind: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def _admitted(
    domains: list[tuple[list[str], int]],
    levels: tuple[str, ...] = (BLOCK, RACK),
    pod_set: str = "main",
    cluster_queue: str = "gpu-cq",
) -> dict[str, Any]:
    return {
        "conditions": [
            _condition("QuotaReserved", "True", "QuotaReserved"),
            _condition("Admitted", "True", "Admitted"),
        ],
        "admission": {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [
                {
                    "name": pod_set,
                    "count": sum(c for _, c in domains),
                    "flavors": {"nvidia.com/gpu": "gpu"},
                    "resourceUsage": {"nvidia.com/gpu": "48"},
                    "topologyAssignment": {
                        "levels": list(levels),
                        "domains": [{"values": v, "count": c} for v, c in domains],
                    },
                }
            ],
        },
    }


def _pod(
    name: str,
    workload: str = "train-abc",
    pod_set: str = "main",
    namespace: str = "team",
    *,
    gated: bool = False,
    domain: tuple[str, str] | None = None,
    node: str | None = None,
    phase: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Never"}
    if gated:
        spec["schedulingGates"] = [GATE]
    if domain:
        spec["nodeSelector"] = {BLOCK: domain[0], RACK: domain[1]}
    if node:
        spec["nodeName"] = node
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"topogate.dev/podset": pod_set},
            "annotations": {"topogate.dev/workload": workload},
        },
        "spec": spec,
    }
    if phase:
        pod["status"] = {"phase": phase}
    return pod


R1, R2 = ("b1", "r1"), ("b1", "r2")


def _admitted_scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    workload = _workload("train-abc", status=_admitted([(["b1", "r1"], 3), (["b1", "r2"], 3)]))
    pods = [
        _pod("p0", domain=R1, node="n1", phase="Running"),
        _pod("p1", domain=R1, node="n1", phase="Running"),
        _pod("p2", domain=R1, node="n2", phase="Pending"),
        _pod("p3", domain=R2),
        _pod("p4", domain=R2, node="n3", phase="Succeeded"),
        _pod("p5", domain=R2, gated=True),
        _pod("p6", gated=True),  # not placed yet
        _pod("p7", domain=("b9", "r9")),  # a domain the assignment does not name
        # Not this workload's pods:
        _pod("q0", workload="other", domain=R1, phase="Running"),
        _pod("q1", namespace="elsewhere", domain=R1, phase="Running"),
        _pod("q2", pod_set="unknown", domain=R1, phase="Running"),
    ]
    unannotated = _pod("q3", domain=R1, phase="Running")
    del unannotated["metadata"]["annotations"]
    return [workload], [*pods, unannotated]


# --- the pure summary -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "phase", "state"),
    [
        ({"schedulingGates": [GATE]}, "Pending", GATED),
        ({"schedulingGates": [{"name": "other.io/gate"}]}, "Pending", UNGATED),
        ({}, None, UNGATED),
        ({"nodeSelector": {BLOCK: "b1"}}, "Pending", UNGATED),
        ({"nodeName": "n1"}, "Pending", BOUND),
        ({"nodeName": "n1"}, "Running", RUNNING),
        ({"nodeName": "n1"}, "Succeeded", FINISHED),
        ({"nodeName": "n1"}, "Failed", FINISHED),
        ({"schedulingGates": [GATE], "nodeName": "n1"}, "Running", GATED),
    ],
)
def test_pod_state(spec: dict[str, Any], phase: str | None, state: str) -> None:
    pod: dict[str, Any] = {"spec": spec}
    if phase:
        pod["status"] = {"phase": phase}
    assert pod_state(pod) == state


def test_pods_are_counted_per_domain_and_state() -> None:
    workloads, pods = _admitted_scenario()
    [summary] = summarize(workloads, pods)
    assert (summary.namespace, summary.name, summary.queue, summary.cluster_queue) == (
        "team",
        "train-abc",
        "user-q",
        "gpu-cq",
    )
    assert (summary.state, summary.reason, summary.message) == ("Admitted", "Admitted", "")
    [main_set] = summary.pod_sets
    assert (main_set.name, main_set.count, main_set.levels) == ("main", 6, (BLOCK, RACK))
    r1, r2 = main_set.domains
    assert (r1.values, r1.assigned, r1.pods) == (("b1", "r1"), 3, PodCounts(bound=1, running=2))
    assert (r2.values, r2.assigned, r2.pods) == (
        ("b1", "r2"),
        3,
        PodCounts(gated=1, ungated=1, finished=1),
    )
    assert main_set.unassigned == PodCounts(gated=1, ungated=1)


def test_kueue_v1beta2_slices_read_as_domains_do() -> None:
    workloads, pods = _admitted_scenario()
    (assignment,) = workloads[0]["status"]["admission"]["podSetAssignments"]
    old = summarize(workloads, pods)
    assignment["topologyAssignment"] = {
        "levels": [BLOCK, RACK],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [
                    {"universal": "b1"},
                    {"individual": {"prefix": "r", "roots": ["1", "2"]}},
                ],
                "podCounts": {"universal": 3},
            }
        ],
    }
    assert summarize(workloads, pods) == old
    assert [d.values for d in old[0].pod_sets[0].domains] == [("b1", "r1"), ("b1", "r2")]


def test_a_malformed_assignment_is_shown_not_a_traceback() -> None:
    workloads, pods = _admitted_scenario()
    (before,) = summarize(workloads, pods)[0].pod_sets
    members = before.unassigned.total + sum(d.pods.total for d in before.domains)
    (assignment,) = workloads[0]["status"]["admission"]["podSetAssignments"]
    assignment["topologyAssignment"]["slices"] = []  # beside domains: not both
    [summary] = summarize(workloads, pods)
    (pod_set,) = summary.pod_sets
    assert pod_set.problem == "topologyAssignment.domains: set either slices or domains, not both"
    assert pod_set.domains == [] and pod_set.unassigned.total == members
    assert "UNREADABLE ASSIGNMENT topologyAssignment.domains" in render_workload(summary)
    assert document([summary])["workloads"][0]["podSets"][0]["problem"] == pod_set.problem


@pytest.mark.parametrize("count", ["abc", [1], float("inf"), None])
def test_a_pod_count_that_is_no_integer_is_shown_as_zero(count: Any) -> None:
    workload = {"metadata": {"name": "w"}, "spec": {"podSets": [{"name": "main", "count": count}]}}
    [summary] = summarize([workload], [])
    assert summary.pod_sets[0].count == 0
    assert "main" in render_workload(summary)


def test_pending_workload_has_its_message_and_unassigned_pods() -> None:
    status = {
        "conditions": [
            _condition(
                "QuotaReserved",
                "False",
                "Pending",
                "couldn't assign flavors to pod set workers: insufficient unused quota",
            )
        ]
    }
    workload = _workload(
        "launcher", pod_sets={"leader": 1, "workers": 4}, status=status, queue=None
    )
    pods = [
        _pod("l0", workload="launcher", pod_set="leader", gated=True),
        _pod("w0", workload="launcher", pod_set="workers", gated=True),
        _pod("w1", workload="launcher", pod_set="workers", gated=True),
    ]
    [summary] = summarize([workload], pods)
    assert (summary.state, summary.reason) == ("Pending", "Pending")
    assert summary.message.endswith("insufficient unused quota")
    assert (summary.queue, summary.cluster_queue) == (None, None)
    assert [(p.name, p.count, p.levels, p.domains) for p in summary.pod_sets] == [
        ("leader", 1, (), []),
        ("workers", 4, (), []),
    ]
    assert [p.unassigned for p in summary.pod_sets] == [PodCounts(gated=1), PodCounts(gated=2)]
    assert render_table([summary], "team") == (
        "WORKLOAD team/launcher  QUEUE - (-)  STATE Pending  couldn't assign flavors to pod set "
        "workers: insufficient unused quota\n"
        "  PODSET leader  COUNT 1  LEVELS -\n"
        "    DOMAIN  ASSIGNED  GATED  UNGATED  BOUND  RUNNING  FINISHED\n"
        "    -       -         1      0        0      0        0\n"
        "  PODSET workers  COUNT 4  LEVELS -\n"
        "    DOMAIN  ASSIGNED  GATED  UNGATED  BOUND  RUNNING  FINISHED\n"
        "    -       -         2      0        0      0        0\n"
    )


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], ("Queued", "", "")),
        (
            [
                _condition("Admitted", "True", "Admitted"),
                _condition("Finished", "True", "Failed", "pod p3 failed"),
            ],
            ("Finished", "Failed", "pod p3 failed"),
        ),
        (
            [_condition("QuotaReserved", "True", "QuotaReserved")],
            ("QuotaReserved", "QuotaReserved", ""),
        ),
        (
            [_condition("QuotaReserved", "False", "Pending", "no room")],
            ("Pending", "Pending", "no room"),
        ),
        (
            [
                _condition("QuotaReserved", "True", "QuotaReserved"),
                _condition("Admitted", "True", "Admitted"),
                _condition("Finished", "False", "Running"),
            ],
            ("Admitted", "Admitted", ""),
        ),
    ],
)
def test_admission_state(conditions: list[dict[str, Any]], expected: tuple[str, str, str]) -> None:
    assert admission_state(_workload("w", status={"conditions": conditions})) == expected


def test_finished_workload_shows_its_reason() -> None:
    status = _admitted([(["b1", "r1"], 2)])
    status["conditions"].append(_condition("Finished", "True", "Succeeded", "done"))
    pods = [_pod(f"p{i}", domain=R1, node="n1", phase="Succeeded") for i in range(2)]
    [summary] = summarize([_workload("train-abc", pod_sets={"main": 2}, status=status)], pods)
    assert summary.state_text == "Finished (Succeeded)"
    assert summary.pod_sets[0].domains[0].pods == PodCounts(finished=2)
    assert render_table([summary], "team").splitlines()[0] == (
        "WORKLOAD team/train-abc  QUEUE user-q (gpu-cq)  STATE Finished (Succeeded)"
    )


def test_a_replaced_node_is_shown() -> None:
    status = _admitted([(["b1", "r1"], 2)])
    status["unhealthyNodes"] = [{"name": "n7"}, {"name": "n9"}]
    [summary] = summarize([_workload("train-abc", pod_sets={"main": 2}, status=status)], [])
    assert summary.unhealthy_nodes == ("n7", "n9")
    assert render_table([summary], "team").splitlines()[1] == "  UNHEALTHY NODES n7, n9"
    assert document([summary])["workloads"][0]["unhealthyNodes"] == ["n7", "n9"]


def test_hostname_assignment_matches_on_the_hostname_selector() -> None:
    host = "kubernetes.io/hostname"
    status = _admitted([(["h1"], 1), (["h2"], 1)], levels=(host,))
    pods = [
        _pod("p0"),
        _pod("p1"),
    ]
    pods[0]["spec"]["nodeSelector"] = {host: "h2", BLOCK: "b1"}
    [summary] = summarize([_workload("train-abc", pod_sets={"main": 2}, status=status)], pods)
    h1, h2 = summary.pod_sets[0].domains
    assert (h1.pods, h2.pods, summary.pod_sets[0].unassigned) == (
        PodCounts(),
        PodCounts(ungated=1),
        PodCounts(ungated=1),
    )


def test_workloads_are_sorted_by_namespace_then_name() -> None:
    workloads = [_workload("b", "ns2"), _workload("a", "ns2"), _workload("z", "ns1")]
    assert [(w.namespace, w.name) for w in summarize(workloads, [])] == [
        ("ns1", "z"),
        ("ns2", "a"),
        ("ns2", "b"),
    ]


def _owner(kind: str, name: str, controller: bool | None = True) -> dict[str, Any]:
    ref: dict[str, Any] = {
        "apiVersion": "batch/v1" if kind == "Job" else "jobset.x-k8s.io/v1alpha2",
        "kind": kind,
        "name": name,
        "uid": str(uuid.uuid4()),
    }
    if controller is not None:
        ref["controller"] = controller
    return ref


def names(workloads: list[Any]) -> list[str]:
    return [w["metadata"]["name"] for w in workloads]


def test_name_resolves_to_the_workload_or_its_owning_job_or_jobset() -> None:
    workloads = [
        _workload("job-train-1a2b3", owners=[_owner("Job", "train")]),
        _workload("jobset-big-9z8y7", owners=[_owner("JobSet", "big")]),
        _workload("train"),  # a Workload named like a Job: its own name wins
        _workload("loose-x", owners=[_owner("Job", "loose", controller=None)]),
        _workload("cm-owned", owners=[_owner("ConfigMap", "cfg")]),
    ]
    assert names(select(workloads, "job-train-1a2b3")) == ["job-train-1a2b3"]
    assert names(select(workloads, "big")) == ["jobset-big-9z8y7"]
    assert names(select(workloads, "train")) == ["train"]
    assert names(select(workloads, "loose")) == []  # not its controller
    assert names(select(workloads, "cfg")) == []
    assert names(select(workloads, "nothing")) == []


def test_a_pytorchjob_name_resolves_to_its_workload() -> None:
    owner = {**_owner("PyTorchJob", "finetune"), "apiVersion": "kubeflow.org/v1"}
    workloads = [_workload("pytorchjob-finetune-1a2b3", owners=[owner])]
    assert names(select(workloads, "finetune")) == ["pytorchjob-finetune-1a2b3"]


def test_a_leaderworkerset_name_resolves_to_every_groups_workload() -> None:
    workloads = [
        _workload("leaderworkerset-serve-0-aaaaa", owners=[_owner("LeaderWorkerSet", "serve")]),
        _workload("leaderworkerset-serve-1-bbbbb", owners=[_owner("LeaderWorkerSet", "serve")]),
        # A pod group's Workload is named after the group and owned by its pods.
        _workload("team-a", owners=[_owner("Pod", "team-a-0", controller=None)]),
    ]
    assert names(select(workloads, "serve")) == [
        "leaderworkerset-serve-0-aaaaa",
        "leaderworkerset-serve-1-bbbbb",
    ]
    assert names(select(workloads, "team-a")) == ["team-a"]
    assert names(select(workloads, "team-a-0")) == []  # a pod is no job


# --- renderers --------------------------------------------------------------------------

ADMITTED_TABLE = (
    "WORKLOAD team/train-abc  QUEUE user-q (gpu-cq)  STATE Admitted\n"
    "  PODSET main  COUNT 6  LEVELS status.example.com/block, status.example.com/rack\n"
    "    DOMAIN  ASSIGNED  GATED  UNGATED  BOUND  RUNNING  FINISHED\n"
    "    b1/r1   3         0      0        1      2        0\n"
    "    b1/r2   3         1      1        0      0        1\n"
    "    -       -         1      1        0      0        0\n"
)

ADMITTED_DOCUMENT = {
    "workloads": [
        {
            "namespace": "team",
            "name": "train-abc",
            "queue": "user-q",
            "clusterQueue": "gpu-cq",
            "state": "Admitted",
            "reason": "Admitted",
            "message": "",
            "unhealthyNodes": [],
            "podSets": [
                {
                    "name": "main",
                    "count": 6,
                    "minCount": None,
                    "admittedCount": 6,
                    "levels": [BLOCK, RACK],
                    "domains": [
                        {
                            "values": ["b1", "r1"],
                            "assigned": 3,
                            "gated": 0,
                            "ungated": 0,
                            "bound": 1,
                            "running": 2,
                            "finished": 0,
                        },
                        {
                            "values": ["b1", "r2"],
                            "assigned": 3,
                            "gated": 1,
                            "ungated": 1,
                            "bound": 0,
                            "running": 0,
                            "finished": 1,
                        },
                    ],
                    "unassigned": {
                        "gated": 1,
                        "ungated": 1,
                        "bound": 0,
                        "running": 0,
                        "finished": 0,
                    },
                }
            ],
        }
    ]
}


def test_table_json_and_yaml_renderings() -> None:
    summaries = summarize(*_admitted_scenario())
    assert render_table(summaries, "team") == ADMITTED_TABLE
    assert document(summaries) == ADMITTED_DOCUMENT
    assert json.loads(render_json(summaries)) == ADMITTED_DOCUMENT
    assert yaml.safe_load(render_yaml(summaries)) == ADMITTED_DOCUMENT
    # Keys keep their documented order in both formats.
    assert list(json.loads(render_json(summaries))["workloads"][0]) == [
        "namespace",
        "name",
        "queue",
        "clusterQueue",
        "state",
        "reason",
        "message",
        "unhealthyNodes",
        "podSets",
    ]


def test_several_workloads_print_one_block_each_and_none_prints_a_line() -> None:
    workloads, pods = _admitted_scenario()
    workloads.append(_workload("waiting", pod_sets={"main": 2}))
    table = render_table(summarize(workloads, pods), "team")
    assert table == ADMITTED_TABLE + (
        "\n"
        "WORKLOAD team/waiting  QUEUE user-q (-)  STATE Queued\n"
        "  PODSET main  COUNT 2  LEVELS -\n"
        "    DOMAIN  ASSIGNED  GATED  UNGATED  BOUND  RUNNING  FINISHED\n"
        "    -       -         0      0        0      0        0\n"
    )
    assert render_table([], "team") == "No workloads in namespace team.\n"
    assert render_table([], None) == "No workloads in any namespace.\n"
    assert json.loads(render_json([])) == {"workloads": []}


# --- the command without a server -------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "-n", "a", "-A"],
        ["status", "-o", "wide"],
        ["status", "a", "b"],
        ["status", "--no-such-flag"],
    ],
)
def test_bad_flags_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "usage: topogate" in capsys.readouterr().err


def test_name_with_all_namespaces_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "train", "-A"]) == 2
    assert capsys.readouterr().err == (
        "topogate status: error: NAME cannot be combined with --all-namespaces\n"
    )


def _kubeconfig(
    path: Path,
    server: str,
    namespace: str | None = None,
    user: dict[str, Any] | None = None,
    ca: str | None = None,
) -> Path:
    cluster: dict[str, Any] = {"server": server}
    if ca:
        cluster["certificate-authority"] = ca
    else:
        cluster["insecure-skip-tls-verify"] = True
    context: dict[str, Any] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user or {"token": "t"}}],
        "contexts": [{"name": "ctx", "context": context}],
        "current-context": "ctx",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_unreachable_server_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = f"https://127.0.0.1:{free_port()}"
    kubeconfig = _kubeconfig(tmp_path / "config", server)
    assert main(["status", "--kubeconfig", str(kubeconfig)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith(
        f"topogate status: error: cannot connect to the API server at {server}: "
    )
    assert "Connection refused" in line


@pytest.fixture
def silent_server() -> Iterator[str]:
    """An API server that takes the connection and the request and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):  # closed: the test is over
            while True:
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for conn in held:
            conn.close()


def test_a_silent_server_is_given_up_on_after_the_read_timeout(
    tmp_path: Path,
    silent_server: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # As before the one client (#21): 10 s to connect, 120 s for each read, not 60 s in all.
    assert status_module._TIMEOUT == (10, 120)
    monkeypatch.setattr(status_module, "_TIMEOUT", (10, 0.2))
    kubeconfig = _kubeconfig(tmp_path / "config", silent_server)
    started = time.monotonic()
    assert main(["status", "--kubeconfig", str(kubeconfig)]) == 1
    assert time.monotonic() - started < 10
    assert capsys.readouterr().err == (
        f"topogate status: error: cannot connect to the API server at {silent_server}: "
        "no answer in time\n"
    )


def test_missing_kubeconfig_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    assert main(["status", "--kubeconfig", str(missing)]) == 2  # invalid arguments
    assert (
        capsys.readouterr().err == f"topogate status: error: kubeconfig {missing} does not exist\n"
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "is empty; a kubeconfig names a cluster, a user and a context"),
        ("# nothing\n", "is empty; a kubeconfig names a cluster, a user and a context"),
        ("[1, 2]\n", "must be a mapping (a kubeconfig)"),
        ("a: [\n", "is not YAML: "),
        ("apiVersion: v1\nkind: Config\n", "cannot load: Invalid kube-config file. "),
    ],
)
def test_an_unusable_kubeconfig_is_invalid_arguments(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    text: str,
    says: str,
) -> None:
    # An empty kubeconfig exited 1 (the API server failed), though 2 means invalid arguments.
    config = tmp_path / "config"
    config.write_text(text)
    assert main(["status", "--kubeconfig", str(config)]) == 2
    assert capsys.readouterr().err.startswith(
        f"topogate status: error: kubeconfig {config}: {says}"
    )
    monkeypatch.setenv("KUBECONFIG", str(config))  # found, not given: the same
    assert main(["status"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_serve_with_an_empty_kubeconfig_is_one_line(tmp_path: Path) -> None:
    # The async loader raised a TypeError traceback.
    config = tmp_path / "config"
    config.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "topogate", "serve", "--kubeconfig", str(config)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (
        2,
        f"topogate serve: error: {config}: is empty; a kubeconfig names a cluster, a user and "
        "a context\n",
    )


def test_no_configuration_at_all_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    assert main(["status"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "topogate status: error: no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) "
        "and not running in a cluster"
    )


def test_default_namespace_comes_from_the_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_namespace = _kubeconfig(tmp_path / "a", "https://127.0.0.1:1", namespace="team-x")
    without = _kubeconfig(tmp_path / "b", "https://127.0.0.1:1")

    def connected(kubeconfig: str | None) -> tuple[str, str]:
        async def server_and_namespace() -> tuple[str, str]:
            connection = await connect(kubeconfig)
            await connection.kube.close()
            return connection.server, connection.namespace

        return asyncio.run(server_and_namespace())

    assert connected(str(with_namespace)) == ("https://127.0.0.1:1", "team-x")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{without}")
    assert connected(None) == ("https://127.0.0.1:1", "default")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG")
    (tmp_path / ".kube").mkdir()
    with_namespace.rename(tmp_path / ".kube" / "config")
    assert connected(None) == ("https://127.0.0.1:1", "team-x")


# --- the command against FakeKube -----------------------------------------------------------

SERVER = "https://fake.example:6443"


class PagingKube(FakeKube):
    """FakeKube answering lists in pages of ``limit`` items, as the API server does."""

    async def list(self, resource: Resource, namespace: str | None = None, **params: Any) -> Obj:
        limit, start = int(params.pop("limit")), int(params.pop("continue", 0))
        whole = await super().list(resource, namespace, **params)
        items = whole["items"]
        metadata = dict(whole["metadata"])
        if start + limit < len(items):
            metadata["continue"] = str(start + limit)
        return {**whole, "metadata": metadata, "items": items[start : start + limit]}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    """`topogate status` connected to a FakeKube (the default namespace: ``team``)."""
    kube = PagingKube()

    async def connect(kubeconfig: str | None) -> Connection:
        return Connection(kube, SERVER, "team")

    monkeypatch.setattr("topogate.commands.status.connect", connect)
    return kube


def _seed(kube: FakeKube, workloads: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
    for workload in workloads:
        kube.seed(WORKLOADS, workload)
    for pod in pods:
        kube.seed(PODS, pod)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["status", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_status_against_fakekube_by_name_by_job_and_in_pages(
    fake: FakeKube, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("topogate.commands.status._PAGE", 2)  # lists come in pages
    workloads, pods = _admitted_scenario()
    workloads[0]["metadata"]["ownerReferences"] = [_owner("Job", "train")]
    _seed(fake, workloads, pods)
    assert _run(capsys, "train-abc") == (0, ADMITTED_TABLE, "")
    assert _run(capsys, "train", "-n", "team") == (0, ADMITTED_TABLE, "")
    code, out, _ = _run(capsys, "-A", "-o", "json")
    assert (code, json.loads(out)) == (0, ADMITTED_DOCUMENT)
    assert [c.namespace for c in fake.calls_of("list", PODS)][-1] is None  # every namespace
    assert _run(capsys, "-n", "empty") == (0, "No workloads in namespace empty.\n", "")


def test_status_against_fakekube_names_what_is_missing(
    fake: FakeKube, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(capsys, "no-such") == (
        1,
        "",
        "topogate status: error: Workload team/no-such not found (no Workload or Job/JobSet of "
        "that name)\n",
    )
    fake.fail_next(
        "list", KubeError(404, "NotFound", "the server could not find the requested resource")
    )
    assert _run(capsys) == (
        1,
        "",
        f"topogate status: error: the API server at {SERVER} does not serve topogate.dev/v1alpha1 "
        "workloads (are topogate's CRDs installed?)\n",
    )


def test_status_against_fakekube_reports_a_refusal_with_its_message(
    fake: FakeKube, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed(fake, *_admitted_scenario())
    forbidden = 'pods is forbidden: User "u" cannot list resource "pods" in the namespace "team"'
    fake.fail_next("list", KubeError(403, "Forbidden", forbidden), resource=PODS)
    assert _run(capsys) == (
        1,
        "",
        f"topogate status: error: the API server at {SERVER} answered 403 Forbidden listing pods: "
        f"{forbidden}\n",
    )
    fake.fail_next("list", KubeError(401, "Unauthorized", ""))
    assert _run(capsys)[2] == (
        f"topogate status: error: the API server at {SERVER} answered 401 Unauthorized\n"
    )


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (ConnectionResetError(errno.ECONNRESET, "reset"), "[Errno 104] Connection reset by peer"),
        (aiohttp.ServerDisconnectedError(), "Server disconnected"),
        (TimeoutError(), "no answer in time"),
    ],
)
def test_status_against_fakekube_reports_a_broken_transport(
    fake: FakeKube, capsys: pytest.CaptureFixture[str], error: BaseException, said: str
) -> None:
    fake.fail_next("list", error)
    assert _run(capsys) == (
        1,
        "",
        f"topogate status: error: cannot connect to the API server at {SERVER}: {said}\n",
    )


def test_queues_against_fakekube(fake: FakeKube, capsys: pytest.CaptureFixture[str]) -> None:
    for queue in (_queue("a", 8), _queue("b", 8)):
        fake.seed(CLUSTER_QUEUES, queue)
    fake.seed(
        LOCAL_QUEUES, {"metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "a"}}
    )
    _seed(fake, [_usage_workload("big", "a", 12), _usage_workload("waiting", None, 0)], [])
    assert _run(capsys, "--queues") == (
        0,
        "NODE           FLAVOR  RESOURCE        NOMINAL  USED  BORROWED  LENT  PENDING\n"
        "cohort team    h100    nvidia.com/gpu  16       12    0         0     1\n"
        "├─ cq a        h100    nvidia.com/gpu  8        12    4         0     1\n"
        "│  └─ lq ml/q                                                         1\n"
        "└─ cq b        h100    nvidia.com/gpu  8        0     0         4     0\n",
        "",
    )
    fake.fail_next("list", KubeError(403, "Forbidden", "no"), resource=LOCAL_QUEUES)
    assert _run(capsys, "--queues") == (
        1,
        "",
        f"topogate status: error: the API server at {SERVER} answered 403 Forbidden listing "
        "clusterqueues: no\n",
    )


# --- on the real API server ---------------------------------------------------------------


class Scenario:
    """One namespace with an admitted Workload owned by a suspended Job, a pending Workload,
    and pods in every state; a node for the bound ones (unschedulable, tainted, so nothing
    else lands there)."""

    def __init__(self, api: client.ApiClient, plane: ControlPlane) -> None:
        suffix = uuid.uuid4().hex[:6]
        self.api, self.plane = api, plane
        self.namespace = f"status-{suffix}"
        self.empty_namespace = f"status-empty-{suffix}"
        self.node = f"status-node-{suffix}"
        self.core: Any = client.CoreV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)
        self.batch: Any = client.BatchV1Api(api)

    def create(self) -> None:
        for namespace in (self.namespace, self.empty_namespace):
            self.core.create_namespace({"metadata": {"name": namespace}})
        node = fake_node(self.node)
        node["spec"] = {
            "unschedulable": True,
            "taints": [{"key": "status.example.com/test", "effect": "NoSchedule"}],
        }
        self.core.create_node(node)
        job = self.batch.create_namespaced_job(
            self.namespace,
            {
                "metadata": {"name": "train"},
                "spec": {
                    "suspend": True,
                    "parallelism": 6,
                    "completions": 6,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "c", "image": "x"}],
                        }
                    },
                },
            },
        )
        owner = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "uid": job.metadata.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        admitted = _workload("train-abc", self.namespace, owners=[owner])
        status = {
            "conditions": [
                {**c, "lastTransitionTime": "2025-01-01T00:00:00Z"}
                for c in _admitted([(["b1", "r1"], 3), (["b1", "r2"], 3)])["conditions"]
            ],
            "admission": _admitted([(["b1", "r1"], 3), (["b1", "r2"], 3)])["admission"],
        }
        pending_status = {
            "conditions": [
                {
                    **_condition("QuotaReserved", "False", "Pending", "waiting for quota"),
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                }
            ]
        }
        for body, workload_status in (
            (admitted, status),
            (_workload("waiting", self.namespace, pod_sets={"main": 2}), pending_status),
        ):
            name = body["metadata"]["name"]
            self.custom.create_namespaced_custom_object(
                "topogate.dev", "v1alpha1", self.namespace, "workloads", body
            )
            self.custom.patch_namespaced_custom_object_status(
                "topogate.dev",
                "v1alpha1",
                self.namespace,
                "workloads",
                name,
                {"status": workload_status},
                _content_type="application/merge-patch+json",
            )
        pods = [
            (_pod("p0", domain=R1, node=self.node), "Running"),
            (_pod("p1", domain=R1, node=self.node), "Running"),
            (_pod("p2", domain=R1, node=self.node), None),
            (_pod("p3", domain=R2), None),
            (_pod("p4", domain=R2, node=self.node), "Succeeded"),
            (_pod("p5", domain=R2, gated=True), None),
            (_pod("p6", gated=True), None),
            (_pod("p7", domain=("b9", "r9")), None),
            (_pod("q0", workload="other", domain=R1, node=self.node), "Running"),
        ]
        for pod, phase in pods:
            pod["metadata"]["namespace"] = self.namespace
            self.core.create_namespaced_pod(self.namespace, pod)
            if phase:
                self.core.patch_namespaced_pod_status(
                    pod["metadata"]["name"], self.namespace, {"status": {"phase": phase}}
                )

    def delete(self) -> None:
        """Everything this scenario made; pods at once (no kubelet confirms a graceful end)."""
        calls: list[Callable[[], Any]] = [
            lambda: self.core.delete_collection_namespaced_pod(
                self.namespace, grace_period_seconds=0
            ),
            lambda: self.custom.delete_collection_namespaced_custom_object(
                "topogate.dev", "v1alpha1", self.namespace, "workloads"
            ),
            lambda: self.batch.delete_namespaced_job(
                "train", self.namespace, propagation_policy="Background"
            ),
            lambda: self.core.delete_node(self.node),
            lambda: self.core.delete_namespace(self.namespace),
            lambda: self.core.delete_namespace(self.empty_namespace),
        ]
        for call in calls:
            try:
                call()
            except client.ApiException as error:
                if error.status != 404:
                    raise


@pytest.fixture(scope="module")
def scenario(crds: client.ApiClient, control_plane: ControlPlane) -> Iterator[Scenario]:
    made = Scenario(crds, control_plane)
    try:
        made.create()
        yield made
    finally:
        made.delete()


def _status(
    scenario: Scenario, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    code = main(["status", "--kubeconfig", str(scenario.plane.kubeconfig), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _in(scenario: Scenario, text: str) -> str:
    return text.replace("team/", f"{scenario.namespace}/")


WAITING_TABLE = (
    "WORKLOAD team/waiting  QUEUE user-q (-)  STATE Pending  waiting for quota\n"
    "  PODSET main  COUNT 2  LEVELS -\n"
    "    DOMAIN  ASSIGNED  GATED  UNGATED  BOUND  RUNNING  FINISHED\n"
    "    -       -         0      0        0      0        0\n"
)


@pytest.mark.cluster
def test_status_of_a_workload_by_its_name_and_by_its_jobs(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    ns = scenario.namespace
    assert _status(scenario, capsys, "train-abc", "-n", ns) == (
        0,
        _in(scenario, ADMITTED_TABLE),
        "",
    )
    assert _status(scenario, capsys, "train", "-n", ns) == (0, _in(scenario, ADMITTED_TABLE), "")


@pytest.mark.cluster
def test_status_as_json_and_yaml(scenario: Scenario, capsys: pytest.CaptureFixture[str]) -> None:
    expected = json.loads(json.dumps(ADMITTED_DOCUMENT))
    expected["workloads"][0]["namespace"] = scenario.namespace
    code, out, _ = _status(scenario, capsys, "train", "-n", scenario.namespace, "-o", "json")
    assert (code, json.loads(out)) == (0, expected)
    code, out, _ = _status(scenario, capsys, "train-abc", "-n", scenario.namespace, "-o", "yaml")
    assert (code, yaml.safe_load(out)) == (0, expected)


@pytest.mark.cluster
def test_namespace_listing_uses_the_contexts_namespace(
    scenario: Scenario,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        "topogate.commands.status._PAGE", 2
    )  # lists come in pages: follow `continue`
    admin = yaml.safe_load(scenario.plane.kubeconfig.read_text())
    admin["contexts"][0]["context"]["namespace"] = scenario.namespace
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump(admin))
    code = main(["status", "--kubeconfig", str(kubeconfig)])
    out = capsys.readouterr().out
    assert (code, out) == (0, _in(scenario, ADMITTED_TABLE + "\n" + WAITING_TABLE))
    # -A: ours among whatever other tests left.
    code, out, _ = _status(scenario, capsys, "-A", "-o", "json")
    ours = [w for w in json.loads(out)["workloads"] if w["namespace"] == scenario.namespace]
    assert code == 0
    assert [(w["name"], w["state"], w["message"]) for w in ours] == [
        ("train-abc", "Admitted", ""),
        ("waiting", "Pending", "waiting for quota"),
    ]
    assert _status(scenario, capsys, "-n", scenario.empty_namespace) == (
        0,
        f"No workloads in namespace {scenario.empty_namespace}.\n",
        "",
    )


@pytest.mark.cluster
def test_not_found_is_one_line_and_exit_1(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    ns = scenario.namespace
    assert _status(scenario, capsys, "no-such", "-n", ns) == (
        1,
        "",
        f"topogate status: error: Workload {ns}/no-such not found "
        "(no Workload or Job/JobSet of that name)\n",
    )


@pytest.mark.cluster
def test_forbidden_names_the_server_and_status(
    scenario: Scenario, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = scenario.plane.directory
    ca = KeyPair(
        (directory / "client-ca.crt").read_bytes(), (directory / "client-ca.key").read_bytes()
    )
    issue(ca, "status-nobody", client=True).write(tmp_path / "u.crt", tmp_path / "u.key")
    kubeconfig = _kubeconfig(
        tmp_path / "config",
        scenario.plane.url,
        namespace=scenario.namespace,
        user={"client-certificate": str(tmp_path / "u.crt"), "client-key": str(tmp_path / "u.key")},
        ca=str(directory / "serving-ca.crt"),
    )
    assert main(["status", "--kubeconfig", str(kubeconfig)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith(
        f"topogate status: error: the API server at {scenario.plane.url} answered 403 Forbidden "
        'listing workloads: workloads.topogate.dev is forbidden: User "status-nobody" cannot list'
    ), line


def _queue(name: str, nominal: int, cohort: str | None = "team") -> dict[str, Any]:
    quota = {"name": "nvidia.com/gpu", "nominalQuota": nominal}
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [{"name": "h100", "resources": [quota]}],
            }
        ]
    }
    if cohort:
        spec["cohort"] = cohort
    return {"metadata": {"name": name}, "spec": spec}


def _usage_workload(name: str, cq: str | None, gpus: int, finished: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if cq is not None:
        status["admission"] = {
            "clusterQueue": cq,
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": 1,
                    "flavors": {"nvidia.com/gpu": "h100"},
                    "resourceUsage": {"nvidia.com/gpu": str(gpus)},
                }
            ],
        }
    if finished:
        status["conditions"] = [_condition("Finished", "True", "Succeeded", "done")]
    return {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"queueName": "q"},
        "status": status,
    }


def test_queue_report_shows_usage_borrowing_and_pending_per_queue() -> None:
    from topogate.commands.status import queue_report, render_queues

    rows = queue_report(
        [_queue("a", 8), _queue("b", 8), _queue("solo", 4, cohort=None)],
        [{"metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "a"}}],
        [
            _usage_workload("big", "a", 12),
            _usage_workload("waiting", None, 0),
            _usage_workload("done", "b", 8, finished=True),
        ],
    )
    # b lends the 4 GPUs a borrows; solo has no cohort to lend to.
    assert render_queues(rows, "table") == (
        "NODE           FLAVOR  RESOURCE        NOMINAL  USED  BORROWED  LENT  PENDING\n"
        "cohort team    h100    nvidia.com/gpu  16       12    0         0     1\n"
        "├─ cq a        h100    nvidia.com/gpu  8        12    4         0     1\n"
        "│  └─ lq ml/q                                                         1\n"
        "└─ cq b        h100    nvidia.com/gpu  8        0     0         4     0\n"
        "cq solo        h100    nvidia.com/gpu  4        0     0         0     0\n"
    )
    document = json.loads(render_queues(rows, "json"))
    assert document["clusterQueues"][0] == {
        "clusterQueue": "a",
        "cohort": "team",
        "flavor": "h100",
        "resource": "nvidia.com/gpu",
        "nominal": "8",
        "used": "12",
        "borrowed": "4",
        "available": "4",
        "pendingWorkloads": 1,
    }


def test_queues_take_no_workload_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--queues", "train"]) == 2
    assert capsys.readouterr().err == (
        "topogate status: error: --queues shows every ClusterQueue; it takes no NAME, "
        "--namespace or --all-namespaces\n"
    )
