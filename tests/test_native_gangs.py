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
from topogate.kube.resources import PODS, WORKLOADS, Resource
from topogate.runtime.serve import podgroup_version
from topogate.testing.fakekube import FakeKube
from topogate.webhooks.review import Review, mutate

RACK, BLOCK, HOST = "example.com/rack", "example.com/block", c.HOSTNAME_LABEL


def test_name_is_workload_and_podset_and_long_ones_stay_valid_and_distinct() -> None:
    assert podgroup_name("job-train-1a2b3", "main") == "job-train-1a2b3-main"
    long_a, long_b = podgroup_name("w" * 260, "a"), podgroup_name("w" * 260, "b")
    assert len(long_a) == 253 and long_a != long_b


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
    group = podgroup("scheduling.k8s.io/v1alpha2", workload, "main", 4, RACK)
    assert group["metadata"]["name"] == "job-a-main"
    assert group["metadata"]["namespace"] == "ns"
    assert group["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert group["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "schedulingConstraints": {"topology": [{"key": RACK}]},
    }
    loose = podgroup("scheduling.k8s.io/v1alpha2", workload, "main", 4, None)
    assert "schedulingConstraints" not in loose["spec"]
    # As the API server returns it (defaults added): the same; another count or level: stale.
    served = {**group, "spec": {**group["spec"], "disruptionMode": "Pod"}}
    assert same_spec(served, group)
    assert not same_spec(served, podgroup("scheduling.k8s.io/v1alpha2", workload, "main", 3, RACK))
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


def test_webhook_joins_a_marked_pod_to_its_podsets_group_only_with_native_gangs() -> None:
    join = {
        "op": "add",
        "path": "/spec/schedulingGroup",
        "value": {"podGroupName": "job-a-workers"},
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
    stale = podgroup(
        GROUPS.api_version, {"metadata": {"name": "w", "namespace": "ml"}}, "main", 5, None
    )
    h.kube.seed(GROUPS, stale)
    h.deliver()
    ungater = Ungater(h.kube, h.state, h.metrics, podgroups=GROUPS.api_version)
    h.kube.fail_next("create", aiohttp.ServerDisconnectedError(), resource=GROUPS)
    assert await ungater.round(["ml/w"]) == {"ml/w"}  # tried again: no group, no pod out
    held = h.kube.stored(PODS, "w-0", "ml")
    assert held is not None and held["spec"]["schedulingGates"]
    assert await ungater.round(["ml/w"]) == set()
    group = h.kube.stored(GROUPS, "w-main", "ml")
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
    assert h.kube.stored(GROUPS, "w-main", "ml") is None
