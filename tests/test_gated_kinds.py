"""Kinds with no suspend switch (api/kinds/base.Gated): plain pod groups and LeaderWorkerSet.

Their PodSets as Kueue names, counts and orders them; the webhook's marks on the object and
on each pod; ranks with LeaderWorkerSet's offset; and the job sync carrying a group from its
pods to a Workload, through eviction (pods deleted, admission taken back) and to finished,
against FakeKube.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
from typing import Any

import pytest

from tests.test_shells import RACK, Harness, pod_template
from topogate.api import constants as c
from topogate.api.errors import InputError
from topogate.api.jobs import workload_from_object
from topogate.api.keywarnings import key_warnings
from topogate.api.kinds import LEADERWORKERSET, POD_GROUP, gated_pod, podgroup
from topogate.api.kinds.lws import group_workload_name
from topogate.api.objects import condition, owner_job
from topogate.controllers.jobsync import JobSync
from topogate.kube.events import EventRecorder
from topogate.kube.resources import JOB_RESOURCES, PODS, WORKLOADS
from topogate.ungater.ranks import Domain, PodView, plan_ungates
from topogate.webhooks.review import Review, mutate

Obj = dict[str, Any]
LWS = JOB_RESOURCES["LeaderWorkerSet"]
REQUIRED = f"{c.KUEUE_GROUP}/{c.REQUIRED_TOPOLOGY}"
QUEUE = "kueue.x-k8s.io/queue-name"


def lws(size: int = 3, replicas: int = 2, leader: bool = True, group: bool = True) -> Obj:
    annotations = {REQUIRED: RACK}
    if group:
        annotations[f"{c.KUEUE_GROUP}/{c.GROUP_NAME}"] = "gang"
    lwt: Obj = {"size": size, "workerTemplate": pod_template(4, dict(annotations))}
    if leader:
        lwt["leaderTemplate"] = pod_template(2, dict(annotations))
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve", "namespace": "ml", "uid": "u-1", "labels": {QUEUE: "q"}},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": lwt},
    }


def group_pod(name: str, total: int = 2, gpus: int = 4, **labels: str) -> Obj:
    template = pod_template(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "labels": {QUEUE: "q", c.POD_GROUP_NAME: "team-a", **labels},
            "annotations": {
                c.POD_GROUP_TOTAL_COUNT: str(total),
                **template["metadata"]["annotations"],
            },
        },
        "spec": template["spec"],
        "status": {"phase": "Pending"},
    }


def review(obj: Obj, group: str = "") -> Review:
    return Review.parse(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": group, "version": "v1", "kind": obj["kind"]},
                "operation": "CREATE",
                "namespace": "ml",
                "object": obj,
            },
        }
    )


def mutated(obj: Obj, group: str = "") -> Obj:
    """The object as the API server stores it after the mutating webhook's patch (``add``
    ops only, which is all the webhook sends)."""
    answer = mutate(review(obj, group))["response"]
    out = copy.deepcopy(obj)
    for op in json.loads(base64.b64decode(answer["patch"])) if "patch" in answer else []:
        assert op["op"] == "add"
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")
        ]
        target: Any = out
        for part in parents:
            target = target[part]
        if last == "-":
            target.append(op["value"])
        else:
            target[last] = op["value"]
    return out


# -- LeaderWorkerSet ---------------------------------------------------------------------------


def test_a_leaderworkerset_has_kueues_podsets_leader_then_worker() -> None:
    source = workload_from_object(lws(size=4))
    leader, worker = source.workload.spec.pod_sets
    assert (leader.name, leader.count, worker.name, worker.count) == ("leader", 1, "worker", 3)
    assert leader.topology_request is not None and worker.topology_request is not None
    assert leader.topology_request.pod_set_group_name == "gang"
    assert source.template_paths == {
        "leader": "spec.leaderWorkerTemplate.leaderTemplate",
        "worker": "spec.leaderWorkerTemplate.workerTemplate",
    }
    [main] = workload_from_object(lws(size=4, leader=False, group=False)).workload.spec.pod_sets
    assert (main.name, main.count) == ("main", 4)


def test_a_leaderworkerset_runs_one_workload_per_group() -> None:
    assert LEADERWORKERSET.groups(lws(replicas=3)) == [
        group_workload_name("serve", i) for i in range(3)
    ]
    assert group_workload_name("serve", 1).startswith("leaderworkerset-serve-1-")
    assert len(group_workload_name("x" * 300, 7)) <= 63


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda o: o["spec"]["leaderWorkerTemplate"].update(size=0), "size: Invalid value: 0"),
        (lambda o: o["spec"].update(replicas=-1), "spec.replicas: -1 must be a non-negative"),
        (
            lambda o: o["spec"]["leaderWorkerTemplate"].pop("workerTemplate"),
            "spec.leaderWorkerTemplate.workerTemplate: is required",
        ),
        (
            lambda o: (
                o["metadata"].update(annotations={"kai.scheduler/topology": "a"})
                or o["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"][
                    "annotations"
                ].update({"kai.scheduler/topology": "b"})
            ),
            "leaderTemplate.metadata.annotations[kai.scheduler/topology]: Invalid value: 'b': "
            "metadata.annotations[kai.scheduler/topology] says 'a'; set it in one place",
        ),
    ],
    ids=["size", "replicas", "worker", "kai-conflict"],
)
def test_a_bad_leaderworkerset_is_refused_naming_the_field(change: Any, message: str) -> None:
    obj = lws()
    change(obj)
    with pytest.raises(InputError) as refused:
        workload_from_object(obj)
    assert message in refused.value.describe()
    assert refused.value.describe().startswith("LeaderWorkerSet ml/serve")


def test_a_topology_key_on_the_leaderworkerset_itself_is_warned_about() -> None:
    obj = lws()
    obj["metadata"]["annotations"] = {REQUIRED: RACK}
    assert key_warnings(obj) == [
        f"metadata.annotations[{REQUIRED}]: not read on the LeaderWorkerSet; move it to "
        "spec.leaderWorkerTemplate.{leaderTemplate,workerTemplate}.metadata.annotations"
    ]


def test_the_webhook_marks_a_queued_leaderworkersets_templates_and_does_not_suspend_it() -> None:
    marked = mutated(lws(), "leaderworkerset.x-k8s.io")
    lwt = marked["spec"]["leaderWorkerTemplate"]
    assert "suspend" not in marked["spec"]
    assert lwt["leaderTemplate"]["metadata"]["labels"] == {c.PODSET_LABEL: "leader", QUEUE: "q"}
    assert lwt["workerTemplate"]["metadata"]["labels"] == {c.PODSET_LABEL: "worker", QUEUE: "q"}
    assert lwt["workerTemplate"]["metadata"]["annotations"][c.POD_INDEX_OFFSET] == "1"
    assert c.POD_INDEX_OFFSET not in lwt["leaderTemplate"]["metadata"]["annotations"]
    assert mutated(marked, "leaderworkerset.x-k8s.io") == marked  # twice changes nothing
    unqueued = lws()
    unqueued["metadata"]["labels"] = {}
    assert "patch" not in mutate(review(unqueued, "leaderworkerset.x-k8s.io"))["response"]


def lws_pod(name: str, podset: str, worker_index: str, group_index: str | None) -> Obj:
    labels = {
        c.LWS_NAME_LABEL: "serve",
        c.LWS_WORKER_INDEX: worker_index,
        c.PODSET_LABEL: podset,
        QUEUE: "q",
    }
    if group_index is not None:
        labels[c.LWS_GROUP_INDEX] = group_index
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": labels},
        "spec": pod_template(4)["spec"],
    }


def test_the_pod_webhook_gates_a_leaderworkerset_pod_into_its_groups_workload() -> None:
    leader = mutated(lws_pod("serve-1", "leader", "0", None))  # before LWS labelled its group
    worker = mutated(lws_pod("serve-1-2", "worker", "2", "1"))
    for pod in (leader, worker):
        assert pod["spec"]["schedulingGates"] == [{"name": c.TOPOLOGY_GATE}]
        assert pod["metadata"]["annotations"][c.WORKLOAD_ANNOTATION] == group_workload_name(
            "serve", 1
        )
    assert gated_pod(leader) is not None and LEADERWORKERSET.pod_owner(leader) == "ml/serve"


def test_workers_rank_from_one_when_a_leader_has_rank_zero() -> None:
    """Worker-index 1..3 with Kueue's offset 1 are ranks 0..2: worker 1 goes to the first
    domain, whatever the names' order (the greedy fallback's)."""
    indexes = {"w-a": 3, "w-b": 1, "w-c": 2}
    pods = [
        PodView(name, name, {c.LWS_WORKER_INDEX: str(i)}, {c.POD_INDEX_OFFSET: "1"}, gated=True)
        for name, i in indexes.items()
    ]
    domains = [Domain(("h1",), 1), Domain(("h2",), 2)]
    plan = plan_ungates(["host"], domains, pods, count=3, index_label=c.LWS_WORKER_INDEX)
    assert {u.pod: u.node_selector["host"] for u in plan} == {"w-b": "h1", "w-c": "h2", "w-a": "h2"}


# -- plain pod groups --------------------------------------------------------------------------


def test_a_pod_group_has_one_podset_per_role_sorted_by_name() -> None:
    pods = [group_pod("a"), group_pod("b"), group_pod("c", gpus=1)]
    for pod in pods:
        pod["metadata"]["annotations"][c.POD_GROUP_TOTAL_COUNT] = "3"
    group = podgroup.compose("ml", "team-a", pods)
    podsets = workload_from_object(group).workload.spec.pod_sets
    roles = sorted({podgroup.role_hash(pods[0]), podgroup.role_hash(pods[2])})
    assert [p.name for p in podsets] == roles
    assert {p.name: p.count for p in podsets} == {
        podgroup.role_hash(pods[0]): 2,
        podgroup.role_hash(pods[2]): 1,
    }
    assert all(len(p.name) == 8 for p in podsets)
    assert all(p.topology_request and p.topology_request.required == RACK for p in podsets)
    # Kueue's role-hash annotation names the role.
    pods[2]["metadata"]["annotations"][c.POD_GROUP_ROLE_HASH] = "driver"
    assert podgroup.role_hash(pods[2]) == "driver"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda p: p[1]["metadata"]["annotations"].update({c.POD_GROUP_TOTAL_COUNT: "3"}),
            "the group's pods say 2, 3; every pod must say the same",
        ),
        (
            lambda p: [
                x["metadata"]["annotations"].update({c.POD_GROUP_TOTAL_COUNT: "0"}) for x in p
            ],
            "Invalid value: '0': must be an integer above 0",
        ),
        (
            lambda p: p[1].update(status={"phase": "Failed"}),
            "has 1 runnable pod(s) of the 2 its kueue.x-k8s.io/pod-group-total-count says",
        ),
        (
            lambda p: p[0]["metadata"]["annotations"].update({REQUIRED: "bad value!"}),
            "pods[a].metadata.annotations",
        ),
    ],
    ids=["disagree", "zero", "missing", "bad-topology"],
)
def test_a_bad_pod_group_is_refused_naming_the_group_and_field(change: Any, message: str) -> None:
    pods = [group_pod("a"), group_pod("b")]
    change(pods)
    with pytest.raises(InputError) as refused:
        workload_from_object(podgroup.compose("ml", "team-a", pods))
    assert refused.value.describe().startswith("PodGroup ml/team-a")
    assert message in refused.value.describe()


def test_the_pod_webhook_gates_a_queued_group_member_and_copies_its_index() -> None:
    pod = group_pod("a", rank="3")
    pod["metadata"]["annotations"][c.POD_GROUP_POD_INDEX_LABEL] = "rank"
    out = mutated(pod)
    assert out["spec"]["schedulingGates"] == [{"name": c.TOPOLOGY_GATE}]
    assert out["metadata"]["labels"][c.PODSET_LABEL] == podgroup.role_hash(pod)
    assert out["metadata"]["labels"][c.POD_GROUP_POD_INDEX] == "3"
    assert out["metadata"]["annotations"][c.WORKLOAD_ANNOTATION] == "team-a"
    unqueued = group_pod("b")
    del unqueued["metadata"]["labels"][QUEUE]
    assert "patch" not in mutate(review(unqueued))["response"]  # not topogate's to hold


def test_a_pod_group_finishes_as_kueues() -> None:
    pods = [group_pod("a"), group_pod("b")]
    group = podgroup.compose("ml", "team-a", pods)
    assert POD_GROUP.group_finished(group, []) is None
    pods[0]["status"] = {"phase": "Succeeded"}
    assert POD_GROUP.group_finished(podgroup.compose("ml", "team-a", pods), []) is None
    pods[1]["status"] = {"phase": "Failed"}
    assert POD_GROUP.group_finished(podgroup.compose("ml", "team-a", pods), []) is None  # retried
    pods[1]["metadata"]["annotations"][c.POD_GROUP_RETRIABLE] = "false"
    assert POD_GROUP.group_finished(podgroup.compose("ml", "team-a", pods), []) == "Failed"
    pods[1]["status"] = {"phase": "Succeeded"}
    assert POD_GROUP.group_finished(podgroup.compose("ml", "team-a", pods), []) == "Succeeded"


# -- the job sync --------------------------------------------------------------------------------


def admitted(h: Harness, key: str) -> bool:
    return h.state.ledger.admission_of(key) is not None


async def test_job_sync_carries_a_pod_group_from_its_pods_to_finished() -> None:
    h = Harness()
    events = EventRecorder(h.kube, "test")
    sync = JobSync(h.kube, h.state, events)
    admitter, _ = h.admitter()
    h.kube.seed(PODS, mutated(group_pod("a")))
    h.deliver()
    await sync.reconcile("PodGroup", "ml/team-a")
    assert h.kube.objects(WORKLOADS) == []  # one of its two pods: no Workload yet
    h.kube.seed(PODS, mutated(group_pod("b")))
    h.deliver()
    await sync.reconcile("PodGroup", "ml/team-a")
    [created] = h.kube.objects(WORKLOADS)
    assert created["metadata"]["name"] == "team-a"
    assert created["metadata"]["annotations"] == {c.IS_GROUP_WORKLOAD: "true"}
    assert [r["name"] for r in created["metadata"]["ownerReferences"]] == ["a", "b"]
    assert owner_job(created) == ("PodGroup", "ml/team-a")
    h.deliver()
    await admitter.cycle()
    h.deliver()
    assert admitted(h, "ml/team-a")
    for name in ("a", "b"):
        pod = h.kube.stored(PODS, name, "ml")
        assert pod is not None
        pod["status"] = {"phase": "Succeeded"}
        h.kube.seed(PODS, pod)
    h.deliver()
    await sync.reconcile("PodGroup", "ml/team-a")
    finished = condition(h.kube.stored(WORKLOADS, "team-a", "ml"), "Finished")
    assert finished is not None and finished["reason"] == "Succeeded"


@pytest.mark.parametrize("released", [("a",), ("a", "b")], ids=["one-released", "all-released"])
async def test_an_evicted_pod_group_loses_its_pods_then_its_admission(
    released: tuple[str, ...],
) -> None:
    h = Harness()
    events = EventRecorder(h.kube, "test")
    sync = JobSync(h.kube, h.state, events)
    admitter, _ = h.admitter()
    for name in ("a", "b"):
        h.kube.seed(PODS, mutated(group_pod(name)))
    h.deliver()
    await sync.reconcile("PodGroup", "ml/team-a")
    h.deliver()
    await admitter.cycle()
    h.deliver()
    for name in released:  # released by the ungater and bound
        running = h.kube.stored(PODS, name, "ml")
        assert running is not None
        running["spec"] = {**running["spec"], "schedulingGates": [], "nodeName": "n1"}
        h.kube.seed(PODS, running)
    workload = h.kube.stored(WORKLOADS, "team-a", "ml")
    assert workload is not None
    workload["status"]["conditions"].append(
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "m"}
    )
    h.kube.seed(WORKLOADS, workload)
    h.deliver()
    await sync.reconcile("PodGroup", "ml/team-a")
    h.deliver()
    # The running pods are deleted, as Kueue stops a pod group; a gated one holds nothing
    # and is left to wait for the next admission.
    left = sorted({"a", "b"} - set(released))
    assert [p["metadata"]["name"] for p in h.kube.objects(PODS)] == left
    assert admitted(h, "ml/team-a")  # until the watch shows the pods gone
    # As the pods' deletion events bring it (with none left, keyed by its Workload alone).
    await sync.reconcile("PodGroup", "ml/team-a")
    h.deliver()
    requeued = h.kube.stored(WORKLOADS, "team-a", "ml")
    assert requeued is not None and not requeued["status"].get("admission")
    assert not admitted(h, "ml/team-a")


async def test_job_sync_makes_one_workload_per_leaderworkerset_group_and_never_writes_it() -> None:
    h = Harness()
    events = EventRecorder(h.kube, "test")
    sync = JobSync(h.kube, h.state, events)
    admitter, _ = h.admitter()
    h.kube.seed(LWS, mutated(lws(size=2, replicas=2), "leaderworkerset.x-k8s.io"))
    h.deliver()
    await sync.reconcile("LeaderWorkerSet", "ml/serve")
    names = sorted(w["metadata"]["name"] for w in h.kube.objects(WORKLOADS))
    assert names == sorted(group_workload_name("serve", i) for i in range(2))
    first = h.kube.stored(WORKLOADS, names[0], "ml")
    assert first is not None
    assert [p["name"] for p in first["spec"]["podSets"]] == ["leader", "worker"]
    assert first["spec"]["podSets"][1]["topologyRequest"]["podIndexLabel"] == c.LWS_WORKER_INDEX
    assert owner_job(first) == ("LeaderWorkerSet", "ml/serve")
    before = h.kube.stored(LWS, "serve", "ml")
    h.deliver()
    await admitter.cycle()
    h.deliver()
    await sync.reconcile("LeaderWorkerSet", "ml/serve")
    assert h.kube.stored(LWS, "serve", "ml") == before  # admission is ungating, not a write
    assert all(admitted(h, f"ml/{n}") for n in names)


def test_after_a_restart_every_pod_group_is_looked_at_again() -> None:
    h = Harness()
    for name in ("a", "b"):
        h.kube.seed(PODS, mutated(group_pod(name)))
    h.deliver()
    assert ("PodGroup", "ml/team-a") in set(h.state.store.job_keys())
    assert h.state.store.job("PodGroup", "ml/nobody") is None


def validated(obj: Obj) -> dict[str, Any]:
    from topogate.webhooks.review import validate

    answer: dict[str, Any] = validate(review(obj))["response"]
    return answer


def test_a_group_member_with_a_bad_count_or_topology_key_is_refused_naming_the_field() -> None:
    assert validated(group_pod("a"))["allowed"]
    bad = group_pod("a")
    bad["metadata"]["annotations"][c.POD_GROUP_TOTAL_COUNT] = "two"
    answer = validated(bad)
    assert not answer["allowed"] and answer["status"]["code"] == 422
    assert answer["status"]["message"] == (
        f"Pod ml/a: metadata.annotations[{c.POD_GROUP_TOTAL_COUNT}]: Invalid value: 'two': "
        "must be an integer above 0"
    )
    clash = group_pod("a")
    clash["metadata"]["annotations"][f"{c.KUEUE_GROUP}/{c.PREFERRED_TOPOLOGY}"] = RACK
    answer = validated(clash)
    assert not answer["allowed"]
    assert answer["status"]["message"].startswith("Pod ml/a: metadata.annotations")
    typo = group_pod("a")
    typo["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topolgy"] = RACK
    answer = validated(typo)
    assert (
        answer["allowed"]
        and "did you mean kueue.x-k8s.io/podset-required-topology" in (answer["warnings"][0])
    )


def test_a_queued_leaderworkersets_templates_and_size_are_immutable() -> None:
    from topogate.webhooks.review import validate

    old = mutated(lws(), "leaderworkerset.x-k8s.io")

    def update(new: Obj) -> dict[str, Any]:
        body = dataclasses.replace(
            review(new, "leaderworkerset.x-k8s.io"), operation="UPDATE", old=old
        )
        answer: dict[str, Any] = validate(body)["response"]
        return answer

    same = copy.deepcopy(old)
    same["spec"]["replicas"] = 5  # more groups: more Workloads, each as the others
    assert update(same)["allowed"]
    annotations = old["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["annotations"]
    for field, value in (("workerTemplate", pod_template(1, dict(annotations))), ("size", 9)):
        changed = copy.deepcopy(old)
        changed["spec"]["leaderWorkerTemplate"][field] = value
        answer = update(changed)
        assert not answer["allowed"]
        assert answer["status"]["message"] == (
            f"LeaderWorkerSet ml/serve: spec.leaderWorkerTemplate.{field}: Invalid value: "
            "field is immutable while the LeaderWorkerSet is queued"
        )


async def test_released_group_pods_get_the_flavors_node_labels_and_tolerations() -> None:
    """A pod group's pods were not made from a template topogate marked: the ungater adds
    what a started job's templates carry (the flavor's node labels and tolerations)."""
    from topogate.kube.resources import RESOURCE_FLAVORS
    from topogate.ungater.controller import Ungater

    h = Harness()
    flavor = h.kube.stored(RESOURCE_FLAVORS, "tas")
    assert flavor is not None
    taint = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    flavor["spec"]["tolerations"] = [taint]
    h.kube.seed(RESOURCE_FLAVORS, flavor)
    own = {"key": "own", "operator": "Exists"}
    for name in ("a", "b"):
        pod = mutated(group_pod(name))
        pod["spec"]["tolerations"] = [own]
        h.kube.seed(PODS, pod)
    h.deliver()
    sync = JobSync(h.kube, h.state, EventRecorder(h.kube, "test"))
    await sync.reconcile("PodGroup", "ml/team-a")
    h.deliver()
    admitter, _ = h.admitter()
    await admitter.cycle()
    h.deliver()
    await Ungater(h.kube, h.state, h.metrics).round(["ml/team-a"])
    for name in ("a", "b"):
        released = h.kube.stored(PODS, name, "ml")
        assert released is not None and released["spec"]["schedulingGates"] == []
        selector = released["spec"]["nodeSelector"]
        assert selector["pool"] == "gpu"  # the flavor's
        assert selector["kubernetes.io/hostname"] in ("n1", "n2", "n3")  # the domain's
        assert released["spec"]["tolerations"] == [own, taint]


def solo_pod(name: str = "solo", owner: str | None = None) -> Obj:
    pod = group_pod(name)
    del pod["metadata"]["labels"][c.POD_GROUP_NAME]
    del pod["metadata"]["annotations"][c.POD_GROUP_TOTAL_COUNT]
    if owner is not None:
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": "u", "controller": True}
        ]
    return pod


async def test_a_single_queued_pod_is_a_gang_of_one() -> None:
    """As Kueue's plain pod integration: a queued pod of no group and no controller gets its
    own Workload (PodSet main); a pod a Job controls is the Job's business."""
    marked = mutated(solo_pod())
    workload = podgroup.single_pod_workload("solo")
    assert workload.startswith("pod-solo-")
    assert marked["metadata"]["annotations"][c.WORKLOAD_ANNOTATION] == workload
    assert marked["metadata"]["labels"][c.PODSET_LABEL] == "main"
    assert marked["spec"]["schedulingGates"] == [{"name": c.TOPOLOGY_GATE}]
    assert "patch" not in mutate(review(solo_pod("child", owner="train")))["response"]
    h = Harness()
    h.kube.seed(PODS, marked)
    h.deliver()
    assert ("PodGroup", f"ml/{workload}") in set(h.state.store.job_keys())
    sync = JobSync(h.kube, h.state, EventRecorder(h.kube, "test"))
    await sync.reconcile("PodGroup", f"ml/{workload}")
    [created] = h.kube.objects(WORKLOADS)
    assert created["metadata"]["name"] == workload
    assert [(p["name"], p["count"]) for p in created["spec"]["podSets"]] == [("main", 1)]
    h.deliver()
    failed = copy.deepcopy(marked)
    failed["status"] = {"phase": "Failed"}
    h.kube.seed(PODS, failed)
    h.deliver()
    await sync.reconcile("PodGroup", f"ml/{workload}")
    finished = condition(h.kube.stored(WORKLOADS, workload, "ml"), "Finished")
    assert finished is not None and finished["reason"] == "Failed"


async def test_a_leaderworkerset_scaled_down_loses_the_workloads_of_its_removed_groups() -> None:
    h = Harness()
    sync = JobSync(h.kube, h.state, EventRecorder(h.kube, "test"))
    h.kube.seed(LWS, mutated(lws(size=2, replicas=3), "leaderworkerset.x-k8s.io"))
    h.deliver()
    await sync.reconcile("LeaderWorkerSet", "ml/serve")
    h.deliver()
    assert len(h.kube.objects(WORKLOADS)) == 3
    other = copy.deepcopy(h.kube.objects(WORKLOADS)[0])  # another set's: left alone
    other["metadata"]["name"] = "someone-else"
    other["metadata"]["ownerReferences"][0]["uid"] = "u-2"
    h.kube.seed(WORKLOADS, other)
    scaled = h.kube.stored(LWS, "serve", "ml")
    assert scaled is not None
    scaled["spec"]["replicas"] = 1
    h.kube.seed(LWS, scaled)
    h.deliver()
    await sync.reconcile("LeaderWorkerSet", "ml/serve")
    names = sorted(w["metadata"]["name"] for w in h.kube.objects(WORKLOADS))
    assert names == sorted([group_workload_name("serve", 0), "someone-else"])
