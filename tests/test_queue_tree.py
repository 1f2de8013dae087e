"""`topogate status --queues` draws the cohort tree (cohorts, ClusterQueues, LocalQueues) with
nominal, used, borrowed, lent, share and pending per node, from the API server or from files
(`--cluster`), and names what is wrong in the tree (a cycle, a parent no Cohort holds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_status import _queue, _run, _usage_workload, fake
from topogate.cli import main
from topogate.commands.status import queue_report, render_queues
from topogate.kube.errors import KubeError
from topogate.kube.resources import CLUSTER_QUEUES, COHORTS, KUEUE_COHORTS
from topogate.testing.fakekube import FakeKube

GPU = "nvidia.com/gpu"
Obj = dict[str, Any]
__all__ = ["fake"]  # the fixture: status connected to a FakeKube


def _cohort(name: str, parent: str | None = None, gpus: int = 0, **limits: int) -> Obj:
    spec: Obj = {}
    if parent:
        spec["parentName"] = parent
    if gpus:
        quota = {"name": GPU, "nominalQuota": gpus, **limits}
        spec["resourceGroups"] = [
            {"coveredResources": [GPU], "flavors": [{"name": "h100", "resources": [quota]}]}
        ]
    return {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "Cohort",
        "metadata": {"name": name},
        "spec": spec,
    }


def _with_share(queue: Obj) -> Obj:
    return {**queue, "status": {"fairSharing": {"weightedShare": 1}}}


LOCAL = [{"metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "a"}}]


def test_the_tree_with_shares_lending_and_pending() -> None:
    """org (16 GPUs of its own) > team > {a, b}, 8 each: a uses 20, 8 of them b's and 4
    org's; team borrows those 4 from org. Shares (as serve writes them): a 12 of team's
    potential 32, 375 per mille; team 4 of org's 32, 125."""
    report = queue_report(
        [_with_share(_queue("a", 8)), _queue("b", 8), _queue("solo", 4, cohort=None)],
        LOCAL,
        [_usage_workload("big", "a", 20), _usage_workload("waiting", None, 0)],
        [_cohort("team", "org"), _cohort("org", gpus=16)],
    )
    assert report.warnings == []
    assert render_queues(report, "table") == (
        "NODE              FLAVOR  RESOURCE        NOMINAL  USED  BORROWED  LENT  SHARE  PENDING\n"
        "cohort org        h100    nvidia.com/gpu  32       20    0         0     0      1\n"
        "└─ cohort team    h100    nvidia.com/gpu  16       20    4         0     125    1\n"
        "   ├─ cq a        h100    nvidia.com/gpu  8        20    12        0     375    1\n"
        "   │  └─ lq ml/q                                                                1\n"
        "   └─ cq b        h100    nvidia.com/gpu  8        0     0         8     0      0\n"
        "cq solo           h100    nvidia.com/gpu  4        0     0         0     0      0\n"
    )
    tree = yaml.safe_load(render_queues(report, "yaml"))["tree"]
    team = tree[0]["children"][0]
    assert (team["name"], team["weightedShare"], team["pendingWorkloads"]) == ("team", 125, 1)
    assert team["resources"] == [
        {
            "flavor": "h100",
            "resource": GPU,
            "nominal": "16",
            "used": "20",
            "borrowed": "4",
            "lent": "0",
        }
    ]
    assert team["children"][0]["children"] == [
        {"kind": "LocalQueue", "name": "ml/q", "pendingWorkloads": 1}
    ]


def test_a_lending_limit_caps_what_is_lent() -> None:
    """b may lend only 2 of its 8: a borrows 4, b shows 2 lent (the rest comes from c)."""
    b = _queue("b", 8)
    b["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["lendingLimit"] = 2
    report = queue_report(
        [_queue("a", 8), b, _queue("c", 8)], LOCAL, [_usage_workload("big", "a", 12)]
    )
    lent = {
        node["name"]: node["resources"][0]["lent"]
        for node in yaml.safe_load(render_queues(report, "yaml"))["tree"][0]["children"]
    }
    assert lent == {"a": "0", "b": "2", "c": "4"}


def test_a_cycle_and_an_unknown_parent_are_named() -> None:
    report = queue_report(
        [_queue("a", 8, cohort="x"), _queue("b", 8, cohort="w")],
        [],
        [],
        [_cohort("x", "y"), _cohort("y", "x"), _cohort("w", "x"), _cohort("z", "nowhere")],
    )
    assert report.warnings == [
        "Cohort z: parentName nowhere names no Cohort; nowhere is a root cohort without quota "
        "of its own",
        "Cohort x is in a cycle (x -> y -> x): ClusterQueues a, b are inactive and admit nothing",
    ]
    lines = render_queues(report, "table").splitlines()
    assert lines[1].startswith("cohort nowhere ")
    assert lines[2].startswith("└─ cohort z ")
    assert any(line.startswith("cohort x (in a cycle: x -> y -> x) ") for line in lines)


def test_a_cohort_chain_deeper_than_the_tree_reads_stops_only_its_own_queues() -> None:
    # A chain of 600 Cohorts overflowed the stack of every walk over the tree (the admitter's
    # cycle, fair shares, `status --queues`), and finding cycles walked it once per Cohort.
    chain = [_cohort(f"c{i}", f"c{i - 1}" if i else None, gpus=8) for i in range(600)]
    queues = [_queue("shallow", 8, cohort="c10"), _queue("deep", 8, cohort="c599")]
    report = queue_report(queues, [], [], chain)
    assert report.warnings == [
        "Cohort c64 is 64 levels below its root Cohort; topogate reads 63 at most: "
        "ClusterQueues deep at or below it are inactive and admit nothing"
    ]
    lines = render_queues(report, "table").splitlines()
    assert any(line.strip().startswith("└─ cq shallow") for line in lines)
    assert any(
        line.startswith("cohort c599 (599 levels below its root, too deep)") for line in lines
    )


def test_cycles_are_found_once_with_the_cohorts_that_lead_into_them() -> None:
    from topogate.admission.quota import CohortSpec, CohortTree

    parents = {"a": "b", "b": "c", "c": "a", "l1": "l2", "l2": "b", "r": None, "s": "r"}
    tree = CohortTree({}, {n: CohortSpec(n, p) for n, p in parents.items()})
    assert tree.cycles == {
        "a": ("a", "b", "c", "a"),
        "b": ("b", "c", "a", "b"),
        "c": ("c", "a", "b", "c"),
        "l1": ("b", "c", "a", "b"),
        "l2": ("b", "c", "a", "b"),
    }
    assert tree.parent["s"] == "r" and tree.too_deep == {}


def _write(path: Path, docs: list[Obj]) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _queue_object(name: str, gpus: int, cohort: str) -> Obj:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        **_queue(name, gpus, cohort),
    }


def test_from_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kueue's objects from files: a ClusterQueue, a Cohort with a typo'd parent, a
    Workload; the tree on stdout, the warning on stderr, exit 0."""
    cohort = {**_cohort("team", "orgg"), "apiVersion": "kueue.x-k8s.io/v1beta2"}
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        **_usage_workload("big", "a", 4),
    }
    path = _write(tmp_path / "c.yaml", [_queue_object("a", 8, "team"), cohort, workload])
    assert main(["status", "--queues", "--cluster", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == (
        "NODE            FLAVOR  RESOURCE        NOMINAL  USED  BORROWED  LENT  PENDING\n"
        "cohort orgg     h100    nvidia.com/gpu  8        4     0         0     0\n"
        "└─ cohort team  h100    nvidia.com/gpu  8        4     0         0     0\n"
        "   └─ cq a      h100    nvidia.com/gpu  8        4     0         0     0\n"
    )
    assert err == (
        "topogate status: warning: Cohort team: parentName orgg names no Cohort; orgg is a "
        "root cohort without quota of its own\n"
    )


def test_a_bad_cohort_file_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _cohort("org", None, 8, borrowingLimit=2)  # limits need a parent
    path = _write(tmp_path / "bad.yaml", [_queue_object("a", 8, "org"), root])
    assert main(["status", "--queues", "--cluster", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"topogate status: error: {path}: Cohort org")
    assert "borrowingLimit and lendingLimit need a parentName" in err


def test_cluster_files_need_queues(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--cluster", "x.yaml"]) == 2
    assert capsys.readouterr().err == "topogate status: error: --cluster needs --queues\n"


def test_live_cohorts_of_both_groups_and_kueues_forbidden(
    fake: FakeKube, capsys: pytest.CaptureFixture[str]
) -> None:
    """topogate's Cohort team under Kueue's org (16 GPUs); Kueue's own team is shadowed by
    topogate's. A user who may not list Kueue's Cohorts still gets the tree, without them."""
    fake.seed(CLUSTER_QUEUES, _queue("a", 8))
    fake.seed(COHORTS, _cohort("team", "org"))
    kueue = "kueue.x-k8s.io/v1beta2"
    fake.seed(KUEUE_COHORTS, {**_cohort("org", gpus=16), "apiVersion": kueue})
    fake.seed(KUEUE_COHORTS, {**_cohort("team", gpus=99), "apiVersion": kueue})
    assert _run(capsys, "--queues") == (
        0,
        "NODE            FLAVOR  RESOURCE        NOMINAL  USED  BORROWED  LENT  PENDING\n"
        "cohort org      h100    nvidia.com/gpu  24       0     0         0     0\n"
        "└─ cohort team  h100    nvidia.com/gpu  8        0     0         0     0\n"
        "   └─ cq a      h100    nvidia.com/gpu  8        0     0         0     0\n",
        "",
    )
    fake.fail_next("list", KubeError(403, "Forbidden", "not yours"), resource=KUEUE_COHORTS)
    code, out, err = _run(capsys, "--queues")
    org = "cohort org      h100    nvidia.com/gpu  8        0     0         0     0"
    assert (code, out.splitlines()[1]) == (0, org)  # no quota of its own now
    assert err == (
        "topogate status: warning: Cohort team: parentName org names no Cohort; org is a root "
        "cohort without quota of its own\n"
        "topogate status: warning: Kueue's Cohorts are not drawn: listing them is forbidden "
        "(not yours)\n"
    )
