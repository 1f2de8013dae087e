"""Webhook handlers and server without a cluster: patches, refusals, bad bodies, rotation."""

from __future__ import annotations

import base64
import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.kit import hypernode_object, review_for
from topogate.admission.podsets import Catalog as PodsetCatalog
from topogate.admission.podsets import build_catalog
from topogate.webhooks.certs import issue, make_ca
from topogate.webhooks.review import Review, mutate, validate
from topogate.webhooks.server import ServingCertificate, make_app

RACK = "cloud.com/rack"


def _job(
    labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ml", "labels": labels or {}},
        "spec": {
            "parallelism": 4,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Never"},
            },
        },
    }


def _patch(answer: dict[str, Any]) -> list[dict[str, Any]]:
    raw = answer["response"].get("patch")
    return json.loads(base64.b64decode(raw)) if raw else []


def test_queued_job_is_suspended_on_create() -> None:
    answer = mutate(
        Review.parse(review_for(_job({"kueue.x-k8s.io/queue-name": "q"}), "Job", "batch"))
    )
    assert answer["response"]["allowed"] is True
    assert _patch(answer) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert _patch(mutate(Review.parse(review_for(_job(), "Job", "batch")))) == []
    update = review_for(_job({"topogate.dev/queue-name": "q"}), "Job", "batch", operation="UPDATE")
    assert _patch(mutate(Review.parse(update))) == []


def test_marked_pod_gets_the_gate_and_marks() -> None:
    pod: dict[str, Any] = {
        "metadata": {
            "labels": {
                "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                "topogate.dev/podset": "workers",
            },
            "annotations": {"kueue.x-k8s.io/workload": "wl-1"},
        },
        "spec": {"containers": [{"name": "c"}]},
    }
    patch = _patch(mutate(Review.parse(review_for(pod, "Pod"))))
    assert patch == [
        {"op": "add", "path": "/metadata/annotations/topogate.dev~1workload", "value": "wl-1"},
        {
            "op": "add",
            "path": "/spec/schedulingGates",
            "value": [{"name": "topogate.dev/topology"}],
        },
    ]
    pod["spec"]["schedulingGates"] = [{"name": "other"}]
    pod["metadata"]["annotations"]["topogate.dev/workload"] = "wl-1"
    assert _patch(mutate(Review.parse(review_for(pod, "Pod")))) == [
        {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "topogate.dev/topology"}}
    ]


def test_invalid_annotation_is_refused_with_the_field() -> None:
    job = _job({"kueue.x-k8s.io/queue-name": "q"}, {"kueue.x-k8s.io/podset-slice-size": "2"})
    answer = validate(Review.parse(review_for(job, "Job", "batch")))["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 422
    assert answer["status"]["message"] == (
        "Job ml/j: spec.template.metadata.annotations[kueue.x-k8s.io/podset-slice-size]: Forbidden: "
        "may not be set when 'kueue.x-k8s.io/podset-slice-required-topology' is not specified"
    )


def test_level_must_belong_to_the_queue_topology() -> None:
    catalog, warnings = build_catalog(
        [
            {
                "metadata": {"name": "cq"},
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [
                                {"name": "tas", "resources": [{"name": "cpu", "nominalQuota": 8}]}
                            ],
                        }
                    ]
                },
            }
        ],
        [{"metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}}],
        [
            {
                "metadata": {"name": "tas"},
                "spec": {"nodeLabels": {"pool": "gpu"}, "topologyName": "dc"},
            }
        ],
        [
            {
                "metadata": {"name": "dc"},
                "spec": {"levels": [{"nodeLabel": "cloud.com/block"}, {"nodeLabel": RACK}]},
            }
        ],
        None,
    )
    assert warnings == []

    class Catalog:
        def catalog_for(self, namespace: str, queue: str) -> PodsetCatalog | None:
            return catalog

        def hypernodes(self) -> None:
            return None

    job = _job(
        {"kueue.x-k8s.io/queue-name": "q"},
        {"kueue.x-k8s.io/podset-required-topology": "cloud.com/zone"},
    )
    answer = validate(Review.parse(review_for(job, "Job", "batch", namespace="ml")), Catalog())[
        "response"
    ]
    assert answer["allowed"] is False and answer["status"]["code"] == 422
    assert answer["status"]["message"] == (
        "Job ml/j: spec.template.metadata.annotations[kueue.x-k8s.io/podset-required-topology]: "
        "'cloud.com/zone' is not a level of topology 'dc' used by queue 'q' (levels: cloud.com/block, cloud.com/rack)"
    )
    job["spec"]["template"]["metadata"]["annotations"][
        "kueue.x-k8s.io/podset-required-topology"
    ] = RACK
    assert (
        validate(Review.parse(review_for(job, "Job", "batch", namespace="ml")), Catalog())[
            "response"
        ]["allowed"]
        is True
    )


def test_topology_flavor_and_queue_objects_are_validated() -> None:
    topology = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": "t"},
        "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": RACK}]},
    }
    answer = validate(Review.parse(review_for(topology, "Topology", "kueue.x-k8s.io")))["response"]
    assert answer["allowed"] is False
    assert answer["status"] == {
        "code": 422,
        "message": "Topology t: spec.levels: "
        "kubernetes.io/hostname is allowed only as the lowest (last) level",
        "reason": "Invalid",
    }
    queue = {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "lots"}]}
                    ],
                }
            ]
        },
    }
    answer = validate(Review.parse(review_for(queue, "ClusterQueue", "topogate.dev")))["response"]
    assert answer["allowed"] is False
    assert answer["status"] == {
        "code": 422,
        "message": "ClusterQueue cq: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: "
        "'lots' is not a quantity (expected e.g. 500m, 2, 1.5Gi, 4e3)",
        "reason": "Invalid",
    }


async def test_server_answers_reviews_and_refuses_bad_bodies(aiohttp_client: Any) -> None:
    http: TestClient[Any, Any] = await aiohttp_client(make_app())
    ok = await http.post(
        "/mutate", json=review_for(_job({"kueue.x-k8s.io/queue-name": "q"}), "Job", "batch")
    )
    assert ok.status == 200 and _patch(await ok.json())
    for body, error in (
        (
            b"{not json",
            "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        (b'{"kind": "Pod"}', "body is not an AdmissionReview"),
        (b"[" * 3000, "body is not an AdmissionReview"),  # refused before parsing
        (b"  42", "body is not an AdmissionReview"),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
            "request.uid is missing",
        ),
    ):
        bad = await http.post("/validate", data=body, headers={"Content-Type": "application/json"})
        assert bad.status == 400, await bad.text()
        assert await bad.json() == {"error": f"malformed AdmissionReview: {error}"}
    huge = await http.post("/mutate", data=io.BytesIO(b"x" * (4 * 1024 * 1024)))
    assert huge.status == 400
    assert await huge.json() == {"error": "review body too large"}
    assert (await http.get("/healthz")).status == 200


def test_serving_certificate_is_made_and_reloaded_on_rotation(tmp_path: Path) -> None:
    certificate = ServingCertificate.prepare(tmp_path, ["webhook.local"], ["127.0.0.1"])
    assert (tmp_path / "ca.crt").exists()
    assert certificate.reload() is False  # unchanged files: nothing to do
    ca = make_ca("rotated")
    issue(ca, "w", ip_addresses=["127.0.0.1"]).write(tmp_path / "tls.crt", tmp_path / "tls.key")
    os.utime(tmp_path / "tls.crt", (1, 1))  # a new mtime, as a rotated Secret gives
    assert certificate.reload() is True
    with pytest.raises(FileNotFoundError) as missing:
        ServingCertificate(tmp_path / "empty")
    assert str(missing.value) == f"no tls.crt/tls.key in {tmp_path / 'empty'}"


# --- HyperNodes: the object alone, then the tree it would join -----------------------------


class _Existing:
    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = list(objects)

    def catalog_for(self, namespace: str, queue: str) -> None:
        return None

    def hypernodes(self) -> list[Mapping[str, Any]]:
        return list(self.objects)


def _review_hypernode(obj: dict[str, Any], existing: _Existing) -> dict[str, Any]:
    review = Review.parse(review_for(obj, "HyperNode", "topology.volcano.sh", namespace=""))
    response: dict[str, Any] = validate(review, existing)["response"]
    return response


def test_hypernode_with_two_selectors_is_refused() -> None:
    obj = hypernode_object("s0", 1, ["n0"])
    obj["spec"]["members"][0]["selector"]["regexMatch"] = {"pattern": "n.*"}
    answer = _review_hypernode(obj, _Existing())
    assert answer["allowed"] is False and answer["status"]["code"] == 422
    assert answer["status"]["message"] == (
        "HyperNode s0: spec.members[0].selector: Invalid value: "
        '{"exactMatch": {"name": "n0"}, "regexMatch": {"pattern": "n.*"}}: '
        "exactly one of exactMatch, regexMatch, labelMatch must be set"
    )


def test_hypernode_closing_a_cycle_is_refused() -> None:
    existing = _Existing(hypernode_object("a", 3, children=["b"]))
    answer = _review_hypernode(hypernode_object("b", 2, children=["a"]), existing)
    assert answer["allowed"] is False and answer["status"]["code"] == 422
    assert answer["status"]["message"] == (
        "HyperNode b: a: is left out of the topology: it is on a membership cycle a -> b -> a; "
        "remove one of these memberships; is left out of the topology: it is on a membership "
        "cycle b -> a -> b; remove one of these memberships"
    )


def test_hypernode_second_parent_and_tier_order_are_refused() -> None:
    existing = _Existing(
        hypernode_object("s4", 2, children=["s0"]), hypernode_object("s0", 1, ["n0"])
    )
    second = _review_hypernode(hypernode_object("s9", 2, children=["s0"]), existing)
    assert second["allowed"] is False and second["status"]["code"] == 422
    assert second["status"]["message"] == (
        'HyperNode s9: member HyperNode "s0" already belongs to "s4"; a HyperNode has one '
        "parent (the one whose name sorts first keeps it), so this membership is ignored"
    )
    low = _review_hypernode(hypernode_object("s8", 1, children=["s4"]), existing)
    assert low["allowed"] is False and low["status"]["code"] == 422
    assert low["status"]["message"] == (
        'HyperNode s8: member HyperNode "s4" has tier 2, which is not below this HyperNode\'s '
        "tier 1; a parent's tier must be higher than its members' tiers, so this membership "
        "is ignored"
    )
    node_twice = _review_hypernode(hypernode_object("s7", 1, ["n0"]), existing)
    assert node_twice["allowed"] is False and node_twice["status"]["code"] == 422
    assert node_twice["status"]["message"] == (
        'HyperNode s7: node "n0" also belongs to "s0", which keeps it; a node belongs to one '
        "HyperNode (the one whose name sorts first), so here it is ignored"
    )


def test_hypernode_parent_before_its_children_is_allowed() -> None:
    # `kubectl apply -f dir/` may create the parent first: a missing child is pending.
    answer = _review_hypernode(hypernode_object("s6", 3, children=["s4"]), _Existing())
    assert answer["allowed"] is True
    fine = _review_hypernode(
        hypernode_object("s1", 1, ["n2"]), _Existing(hypernode_object("s0", 1, ["n0"]))
    )
    assert fine["allowed"] is True


def test_hypernode_pending_child_does_not_hide_a_real_problem() -> None:
    # zz names a child HyperNode "x" that does not exist yet (fine) and node "x", which "a"
    # already holds (not fine): the pending child must not excuse the node conflict.
    answer = _review_hypernode(
        hypernode_object("zz", 2, ["x"], ["x"]), _Existing(hypernode_object("a", 1, ["x"]))
    )
    assert answer["allowed"] is False and answer["status"]["code"] == 422
    assert answer["status"]["message"] == (
        'HyperNode zz: node "x" also belongs to "a", which keeps it; a node belongs to one '
        "HyperNode (the one whose name sorts first), so here it is ignored"
    )


def test_hypernode_problems_that_were_there_before_are_not_this_requests() -> None:
    # p2 already lost child c to p1; a new, sound HyperNode and an update of p2 that keeps
    # that old problem are both allowed.
    existing = _Existing(
        hypernode_object("p1", 2, children=["c"]),
        hypernode_object("p2", 2, children=["c"]),
        hypernode_object("c", 1, ["n0"]),
    )
    assert _review_hypernode(hypernode_object("d", 1, ["n9"]), existing)["allowed"] is True
    relabelled = hypernode_object("p2", 2, children=["c"])
    relabelled["metadata"]["labels"] = {"team": "x"}
    review = Review.parse(
        review_for(relabelled, "HyperNode", "topology.volcano.sh", "UPDATE", namespace="")
    )
    assert validate(review, existing)["response"]["allowed"] is True
