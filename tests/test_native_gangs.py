"""Native gangs (`serve --native-gangs`) off the cluster: the PodGroup's name, shape and level,
the webhook joining pods to it, and the discovery of the served version."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from typing import Any

import aiohttp
import pytest

from tests.kit import review_for
from topogate.api import constants as c
from topogate.api.errors import InputError
from topogate.api.podgroups import podgroup, podgroup_name, same_spec, shared_level
from topogate.kube.errors import KubeError
from topogate.kube.podgroups import podgroup_version
from topogate.kube.resources import NODES, PODS, WORKLOADS, Resource
from topogate.testing.fakekube import FakeKube
from topogate.webhooks.review import Review, mutate

RACK, BLOCK, HOST = "example.com/rack", "example.com/block", c.HOSTNAME_LABEL


def test_the_group_is_named_as_its_workload() -> None:
    assert podgroup_name("job-train-1a2b3") == "job-train-1a2b3"


def test_shared_level_is_the_deepest_level_every_domain_shares() -> None:
    levels = [BLOCK, RACK, HOST]
    same_rack = [{BLOCK: "b0", RACK: "r1", HOST: f"n{i}"} for i in range(3)]
    assert shared_level(levels, same_rack) == RACK
    two_racks = [{BLOCK: "b0", RACK: "r0", HOST: "n0"}, {BLOCK: "b0", RACK: "r1", HOST: "n1"}]
    assert shared_level(levels, two_racks) == BLOCK
    two_blocks = [{BLOCK: "b0", RACK: "r0"}, {BLOCK: "b1", RACK: "r0"}]
    assert shared_level(levels, two_blocks) is None
    # A level some node lacks is no constraint the scheduler could meet.
    assert shared_level(levels, [{RACK: "r0"}, {RACK: "r0"}]) is None
    assert shared_level(levels, [{BLOCK: "b0", RACK: "r0", HOST: "n0"}]) == HOST


def test_podgroup_is_a_gang_of_the_count_owned_by_the_workload() -> None:
    workload = {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "job-a", "namespace": "ns", "uid": "u1"},
    }
    group = podgroup("scheduling.k8s.io/v1alpha2", workload, 4, RACK)
    assert group["metadata"]["name"] == "job-a"
    assert group["metadata"]["namespace"] == "ns"
    assert group["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert group["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "schedulingConstraints": {"topology": [{"key": RACK}]},
    }
    loose = podgroup("scheduling.k8s.io/v1alpha2", workload, 4, None)
    assert "schedulingConstraints" not in loose["spec"]
    # As the API server returns it (defaults added): the same; another count or level: stale.
    served = {**group, "spec": {**group["spec"], "disruptionMode": "Pod"}}
    assert same_spec(served, group)
    assert not same_spec(served, podgroup("scheduling.k8s.io/v1alpha2", workload, 3, RACK))
    assert not same_spec(served, loose)


def _pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "labels": {c.PODSET_LABEL: "workers"},
            "annotations": {c.WORKLOAD_ANNOTATION: "job-a"},
        },
        "spec": {"containers": [{"name": "c", "image": "i"}], **spec},
    }


def _patch(obj: dict[str, Any], native: bool) -> list[dict[str, Any]]:
    answer = mutate(Review.parse(review_for(obj, "Pod")), native_gangs=native)
    encoded = answer["response"].get("patch")
    return list(json.loads(base64.b64decode(encoded))) if encoded else []


def test_webhook_joins_a_marked_pod_to_its_workloads_group_only_with_native_gangs() -> None:
    join = {
        "op": "add",
        "path": "/spec/schedulingGroup",
        "value": {"podGroupName": "job-a"},
    }
    assert join in _patch(_pod(), native=True)
    assert join not in _patch(_pod(), native=False)
    # A group the pod names itself is the user's: kept.
    own = _pod(schedulingGroup={"podGroupName": "mine"})
    assert not [op for op in _patch(own, native=True) if "schedulingGroup" in op["path"]]


def test_version_is_discovered_newest_first_and_on_without_one_is_refused() -> None:
    async def run() -> None:
        kube = FakeKube()
        assert await podgroup_version(kube, "off") is None
        assert await podgroup_version(kube, "auto") == "scheduling.k8s.io/v1beta1"
        missing = KubeError(404, "NotFound", "the server could not find the requested resource")
        kube.fail_next("list", missing, resource="podgroups")
        assert await podgroup_version(kube, "auto") == "scheduling.k8s.io/v1alpha2"
        kube.fail_next("list", missing, times=2, resource="podgroups")
        assert await podgroup_version(kube, "auto") is None
        kube.fail_next("list", missing, times=2, resource="podgroups")
        with pytest.raises(InputError) as refused:
            await podgroup_version(kube, "on")
        assert "--native-gangs" in str(refused.value)
        assert "scheduling.k8s.io/v1alpha2=true" in str(refused.value)

    asyncio.run(run())


GROUPS = Resource("scheduling.k8s.io/v1alpha2", "podgroups")


async def test_ungater_writes_the_group_before_any_pod_goes_and_drops_it_on_eviction() -> None:
    from tests.test_shells import Harness, admitted_with_a_gated_pod
    from topogate.ungater.controller import Ungater

    h = Harness()
    pod = await admitted_with_a_gated_pod(h)
    h.kube.seed(PODS, pod)
    # An earlier admission's group (another count): replaced, its spec being immutable.
    stale = podgroup(GROUPS.api_version, {"metadata": {"name": "w", "namespace": "ml"}}, 5, None)
    h.kube.seed(GROUPS, stale)
    h.deliver()
    ungater = Ungater(h.kube, h.state, h.metrics, podgroups=GROUPS.api_version)
    h.kube.fail_next("create", aiohttp.ServerDisconnectedError(), resource=GROUPS)
    assert await ungater.round(["ml/w"]) == {"ml/w"}  # tried again: no group, no pod out
    held = h.kube.stored(PODS, "w-0", "ml")
    assert held is not None and held["spec"]["schedulingGates"]
    assert await ungater.round(["ml/w"]) == set()
    group = h.kube.stored(GROUPS, "w", "ml")
    assert group is not None
    assert group["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": 1}},
        "schedulingConstraints": {"topology": [{"key": HOST}]},  # one node: its rack and host
    }
    stored = h.kube.stored(WORKLOADS, "w", "ml")
    assert stored is not None
    assert group["metadata"]["ownerReferences"][0]["uid"] == stored["metadata"]["uid"]
    released = h.kube.stored(PODS, "w-0", "ml")
    assert released is not None and released["spec"]["schedulingGates"] == []
    # Evicted: the next round deletes its group.
    evicted = copy.deepcopy(stored)
    evicted["status"]["conditions"].append(
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "m"}
    )
    h.kube.seed(WORKLOADS, evicted)
    h.deliver()
    assert "ml/w" in h.state.signals.take_ungates()
    await ungater.round(["ml/w"])
    assert h.kube.stored(GROUPS, "w", "ml") is None


# --- a gang kube-scheduler cannot bind ----------------------------------------------------


def _tried(pod: dict[str, Any], at: str, message: str = "0/2 placements") -> dict[str, Any]:
    """``pod`` released into its group and marked unschedulable by kube-scheduler at ``at``."""
    out = copy.deepcopy(pod)
    out["spec"]["schedulingGates"] = []
    out["spec"]["schedulingGroup"] = {"podGroupName": "w"}
    out["status"] = {
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": at,
            }
        ]
    }
    return out


def _member(name: str, podset: str = "main") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {c.PODSET_LABEL: podset}},
        "spec": {"schedulingGates": [{"name": c.TOPOLOGY_GATE}]},
    }


def test_a_gang_is_stuck_only_when_every_pod_was_released_and_none_bound() -> None:
    from topogate.api.podgroups import StuckGang, stuck_gangs

    def stuck(pods: list[dict[str, Any]], count: int = 2) -> list[StuckGang]:
        return stuck_gangs(pods, {"main": count}, c.TOPOLOGY_GATE, c.PODSET_LABEL)

    a = _tried(_member("a"), "2026-01-01T00:00:05Z", "0/2 placements are available")
    b = _tried(_member("b"), "2026-01-01T00:00:09Z")
    found = stuck([a, b])
    assert [(g.podset, g.group, g.pods) for g in found] == [("main", "w", 2)]
    assert found[0].since == 1767225609.0  # the latest pod's transition
    assert stuck([a, _member("b")]) == []  # one still gated: not tried as a whole yet
    assert stuck([a]) == []  # fewer pods than admitted: the job has not made them all
    bound = copy.deepcopy(b)
    bound["spec"]["nodeName"] = "n0"
    assert stuck([a, bound]) == []
    alone = copy.deepcopy(b)
    del alone["spec"]["schedulingGroup"]  # no native gang: kube-scheduler binds one by one
    assert stuck([a, alone]) == []
    going = copy.deepcopy(b)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:10Z"
    assert stuck([a, going]) == []
    pending = copy.deepcopy(b)
    pending["status"] = {}
    assert stuck([a, pending]) == []
    assert stuck([a, b], count=0) == []


def test_domain_name_is_the_level_value_every_domain_shares() -> None:
    from topogate.api.podgroups import domain_name

    nodes = {"n0": {RACK: "r0", BLOCK: "b0"}, "n1": {RACK: "r0", BLOCK: "b0"}}
    hosts = [("n0",), ("n1",)]
    assert domain_name([HOST], hosts, RACK, lambda n: nodes[n]) == f"{RACK}=r0"
    assert domain_name([BLOCK, RACK], [("b0", "r0")], RACK, lambda n: {}) == f"{RACK}=r0"
    two = [("b0", "r0"), ("b0", "r1")]
    assert domain_name([BLOCK, RACK], two, RACK, lambda n: {}) == "b0/r0, b0/r1"
    assert domain_name([HOST], hosts, None, lambda n: {}) == "n0, n1"


async def test_a_gang_unschedulable_past_the_grace_evicts_its_workload_naming_domain_and_reason() -> (
    None
):
    from tests.test_shells import RACK as HARNESS_RACK
    from tests.test_shells import Harness, admitted_with_a_gated_pod
    from topogate.api.times import parse_time
    from topogate.controllers.gangfailures import GANG_UNSCHEDULABLE, GangFailures
    from topogate.kube.events import EventRecorder

    h = Harness()
    pod = await admitted_with_a_gated_pod(h)
    events = EventRecorder(h.kube, "test")
    at = "2026-01-01T00:00:00Z"
    start = parse_time(at)
    assert start is not None
    now = [start + 5]
    shell = GangFailures(h.kube, h.state, h.metrics, events, grace=30, clock=lambda: now[0])
    shell.podgroups = GROUPS.api_version
    group = podgroup(
        GROUPS.api_version, {"metadata": {"name": "w", "namespace": "ml"}}, 1, HARNESS_RACK
    )
    group["status"] = {
        "conditions": [
            {
                "type": "PodGroupScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/2 placements are available",
            }
        ]
    }
    h.kube.seed(GROUPS, group)
    h.kube.seed(PODS, _tried(pod, at, "pod message"))
    h.deliver()
    assert await shell.sweep() == 25  # within the grace: looked at again when it runs out
    stored = h.kube.stored(WORKLOADS, "w", "ml")
    assert stored is not None and not any(
        cond["type"] == "Evicted" for cond in stored["status"]["conditions"]
    )
    now[0] = start + 31
    assert await shell.sweep() is None
    stored = h.kube.stored(WORKLOADS, "w", "ml")
    assert stored is not None
    evicted = [cond for cond in stored["status"]["conditions"] if cond["type"] == "Evicted"]
    assert evicted and evicted[0]["status"] == "True"
    assert evicted[0]["reason"] == GANG_UNSCHEDULABLE
    message = evicted[0]["message"]
    assert "PodGroup w " in message and "PodSet main" in message
    # The domain, at the group's topology key (the assignment names the host: its node's rack).
    assert f" in {HARNESS_RACK}=" in message
    assert message.endswith(": 0/2 placements are available")  # the group's reason wins
    h.deliver()
    assert await shell.sweep() is None  # evicted once: not again
    await events.drain()
    reasons = [e.get("reason") for e in h.kube.objects(Resource("events.k8s.io/v1", "events"))]
    assert GANG_UNSCHEDULABLE in reasons


# --- a user's own PodGroup, queued -----------------------------------------------------------


def native_group(name: str = "train", count: int = 2, key: str | None = None) -> dict[str, Any]:
    from tests.test_shells import RACK as HARNESS_RACK

    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": count}}}
    spec["schedulingConstraints"] = {"topology": [{"key": key or HARNESS_RACK}]}
    return {
        "apiVersion": GROUPS.api_version,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": spec,
    }


def native_member(name: str, group: str = "train", gpus: int = 4) -> dict[str, Any]:
    """A queued pod of no controller naming ``group``, as a user writes it (no topology key
    of its own: the group's)."""
    from tests.test_shells import pod_template

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
        },
        "spec": {**pod_template(gpus)["spec"], "schedulingGroup": {"podGroupName": group}},
        "status": {"phase": "Pending"},
    }


def _created(pod: dict[str, Any], native: bool) -> dict[str, Any]:
    """The pod as stored after the mutating webhook (``add`` ops only)."""
    out = copy.deepcopy(pod)
    for op in _patch(pod, native):
        assert op["op"] == "add"
        *parents, last = [p.replace("~1", "/") for p in op["path"][1:].split("/")]
        target: Any = out
        for part in parents:
            target = target[part]
        if last == "-":
            target.append(op["value"])
        else:
            target[last] = op["value"]
    return out


def test_a_pod_naming_its_own_podgroup_is_gated_into_it_only_with_native_gangs() -> None:
    pod = native_member("a")
    held = _created(pod, native=True)
    assert held["spec"]["schedulingGates"] == [{"name": c.TOPOLOGY_GATE}]
    assert held["metadata"]["annotations"][c.WORKLOAD_ANNOTATION] == "train"
    assert held["spec"]["schedulingGroup"] == {"podGroupName": "train"}  # its own, kept
    assert _patch(pod, native=False) == []  # off: kube-scheduler's alone, not queued
    unqueued = copy.deepcopy(pod)
    del unqueued["metadata"]["labels"]
    assert _patch(unqueued, native=True) == []


def _native_harness() -> Any:
    from tests.test_shells import Harness
    from topogate.kube.resources import native_podgroups

    h = Harness()
    deliver = h.state.handler(native_podgroups(GROUPS.api_version))
    return h, deliver


async def test_a_native_podgroups_pods_are_one_workload_of_its_min_count_at_its_level() -> None:
    from tests.kit import written_domains
    from tests.test_shells import RACK as HARNESS_RACK
    from topogate.controllers.jobsync import JobSync
    from topogate.kube.events import EventRecorder
    from topogate.ungater.controller import Ungater

    h, deliver_group = _native_harness()
    sync = JobSync(h.kube, h.state, EventRecorder(h.kube, "test"))
    for name in ("a", "b", "c"):  # one more than the gang: left out, as Kueue's excess pods
        h.kube.seed(PODS, _created(native_member(name), native=True))
    h.deliver()
    await sync.reconcile("PodGroup", "ml/train")
    assert h.kube.objects(WORKLOADS) == []  # its PodGroup is not there yet
    group = native_group()
    h.kube.seed(GROUPS, group)
    deliver_group(None, group)
    assert ("PodGroup", "ml/train") in h.state.signals.take_jobs()
    await sync.reconcile("PodGroup", "ml/train")
    [created] = h.kube.objects(WORKLOADS)
    assert created["metadata"]["name"] == "train"
    [podset] = created["spec"]["podSets"]
    assert podset["count"] == 2
    annotations = podset["template"]["metadata"]["annotations"]
    assert annotations[f"{c.KUEUE_GROUP}/{c.REQUIRED_TOPOLOGY}"] == HARNESS_RACK
    h.deliver()
    admitter, _ = h.admitter()
    await admitter.cycle()
    h.deliver()
    admission = h.state.ledger.admission_of("ml/train")
    assert admission is not None
    domains = written_domains(admission["podSetAssignments"][0]["topologyAssignment"])
    assert sum(d["count"] for d in domains) == 2
    ungater = Ungater(h.kube, h.state, h.metrics, podgroups=GROUPS.api_version)
    await ungater.round(["ml/train"])
    # The user's group is the gang: topogate writes none of its own, and releases the pods.
    assert [g["metadata"]["name"] for g in h.kube.objects(GROUPS)] == ["train"]
    released = [p for p in h.kube.objects(PODS) if not p["spec"]["schedulingGates"]]
    assert len(released) == 2


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        (
            {"schedulingPolicy": {"basic": {}}},
            "spec.schedulingPolicy.gang",
            "topogate queues a PodGroup as one gang",
        ),
        (
            {"schedulingPolicy": {"gang": {"minCount": 0}}},
            "spec.schedulingPolicy.gang.minCount",
            "must be an integer above 0",
        ),
    ],
)
def test_a_native_podgroup_that_is_no_gang_is_refused_naming_it_and_the_field(
    spec: dict[str, Any], field: str, words: str
) -> None:
    from topogate.api.kinds import POD_GROUP
    from topogate.api.kinds import podgroup as plain

    group = {**native_group(), "spec": spec}
    pods = [_created(native_member(n), native=True) for n in ("a", "b")]
    with pytest.raises(InputError, match="Not found: its pods name this PodGroup"):
        POD_GROUP.podsets(plain.compose("ml", "train", pods), "PodGroup train")  # as `plan`
    composed = plain.compose("ml", "train", pods, group)
    with pytest.raises(InputError) as refused:
        POD_GROUP.podsets(composed, "PodGroup train")
    text = str(refused.value)
    assert "PodGroup ml/train (scheduling.k8s.io)" in text and field in text and words in text


async def test_a_native_podgroups_key_that_is_no_level_of_the_topology_is_refused_naming_it() -> (
    None
):
    from topogate.admission.podsets import translate
    from topogate.controllers.jobsync import JobSync
    from topogate.kube.events import EventRecorder

    h, deliver_group = _native_harness()
    sync = JobSync(h.kube, h.state, EventRecorder(h.kube, "test"))
    for name in ("a", "b"):
        h.kube.seed(PODS, _created(native_member(name), native=True))
    group = native_group(key="example.com/zone")
    h.kube.seed(GROUPS, group)
    deliver_group(None, group)
    h.deliver()
    await sync.reconcile("PodGroup", "ml/train")
    h.deliver()
    workload = h.state.store.objects(WORKLOADS)["ml/train"]
    translation = translate(workload, "ml/train", h.state.catalogs.catalog())
    assert translation.pending is None
    assert (
        "PodGroup ml/train (scheduling.k8s.io) spec.schedulingConstraints.topology[0].key: "
        "'example.com/zone' is not a level of topology" in str(translation.problem)
    ), translation.problem


async def test_one_group_holds_every_podset_of_a_workload_so_it_binds_as_one_gang() -> None:
    """A JobSet's (or a leader's and its workers') PodSets: one PodGroup of all their admitted
    pods, at the deepest level all their domains share, that every pod joins."""
    from tests.test_shells import RACK as HARNESS_RACK
    from tests.test_shells import Harness, pod_template, workload
    from topogate.ungater.controller import Ungater

    h = Harness()
    two = workload("js", count=2)
    two["spec"]["podSets"].append({"name": "workers", "count": 2, "template": pod_template(4)})
    h.kube.seed(WORKLOADS, two)
    h.deliver()
    admitter, events = h.admitter()
    await admitter.cycle()
    await events.drain()
    h.deliver()
    admission = h.state.ledger.admission_of("ml/js")
    assert admission is not None and len(admission["podSetAssignments"]) == 2
    for podset in ("main", "workers"):
        for i in range(2):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{podset}-{i}",
                    "namespace": "ml",
                    "labels": {c.PODSET_LABEL: podset, c.JOB_COMPLETION_INDEX: str(i)},
                    "annotations": {c.WORKLOAD_ANNOTATION: "js"},
                },
                "spec": {
                    "schedulingGates": [{"name": c.TOPOLOGY_GATE}],
                    "schedulingGroup": {"podGroupName": podgroup_name("js")},
                    **pod_template(4)["spec"],
                },
            }
            h.kube.seed(PODS, pod)
    h.deliver()
    ungater = Ungater(h.kube, h.state, h.metrics, podgroups=GROUPS.api_version)
    assert await ungater.round(["ml/js"]) == set()
    [group] = h.kube.objects(GROUPS)
    assert group["metadata"]["name"] == "js"
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    racks = set()
    nodes: Any = h.state.store.objects(NODES)
    for pod in h.kube.objects(PODS):
        spec: Any = pod["spec"]
        assert not spec["schedulingGates"]  # every pod out, into the one group
        racks.add(nodes[spec["nodeSelector"][HOST]]["metadata"]["labels"][HARNESS_RACK])
    key = group["spec"].get("schedulingConstraints", {}).get("topology", [{}])[0].get("key")
    # The deepest level shared by both PodSets' domains: their rack when they share one.
    assert key == (HARNESS_RACK if len(racks) == 1 else None), (key, racks)


def test_only_a_users_podgroup_brings_its_pods_group_to_the_job_sync() -> None:
    """topogate's own groups are named as their Workloads (a Job's too): their events must not
    make the job sync read that Workload's pods as a pod group."""
    from topogate.kube.resources import native_podgroups
    from topogate.state import ControllerState

    state = ControllerState()
    deliver = state.handler(native_podgroups(GROUPS.api_version))
    ours = podgroup(GROUPS.api_version, {"metadata": {"name": "job-x", "namespace": "ml"}}, 2, None)
    deliver(None, ours)
    assert state.signals.take_jobs() == set()
    deliver(None, native_group())
    assert state.signals.take_jobs() == {("PodGroup", "ml/train")}


async def test_a_refused_eviction_write_is_retried_with_a_doubling_wait_not_every_second() -> None:
    from tests.test_shells import RACK as HARNESS_RACK
    from tests.test_shells import Harness, admitted_with_a_gated_pod
    from topogate.api.times import parse_time
    from topogate.controllers.gangfailures import RETRY_MAX_SECONDS, GangFailures
    from topogate.kube.events import EventRecorder

    h = Harness()
    pod = await admitted_with_a_gated_pod(h)
    at = "2026-01-01T00:00:00Z"
    start = parse_time(at)
    assert start is not None
    now = [start + 31]  # past the grace at once
    shell = GangFailures(
        h.kube, h.state, h.metrics, EventRecorder(h.kube, "test"), grace=30, clock=lambda: now[0]
    )
    shell.podgroups = GROUPS.api_version
    h.kube.seed(GROUPS, podgroup(GROUPS.api_version, {"metadata": {"name": "w"}}, 1, HARNESS_RACK))
    h.kube.seed(PODS, _tried(pod, at, "pod message"))
    h.deliver()
    forbidden = KubeError(403, "Forbidden", "workloads/status is forbidden")
    h.kube.fail_next("patch", forbidden, times=8, resource=WORKLOADS)

    def writes() -> int:
        return len(h.kube.calls_of("patch", WORKLOADS))

    waits = []
    for _ in range(8):
        before = writes()
        wait = await shell.sweep()
        assert wait is not None and writes() == before + 1  # one try per due sweep
        assert await shell.sweep() is not None and writes() == before + 1  # not before its time
        waits.append(wait)
        now[0] += wait
    assert waits == [1, 2, 4, 8, 16, 32, RETRY_MAX_SECONDS, RETRY_MAX_SECONDS]
    assert await shell.sweep() is None  # taken at last: evicted, nothing left to retry
    stored = h.kube.stored(WORKLOADS, "w", "ml")
    assert stored is not None
    assert any(cond["type"] == "Evicted" for cond in stored["status"]["conditions"])
