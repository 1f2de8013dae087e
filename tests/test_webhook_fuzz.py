"""Hostile AdmissionReviews: whatever the body, the answer is a 400 or an AdmissionReview
response, never an exception (the server would turn one into a 500, and with failurePolicy
Fail the API server would then refuse every queued job)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kit import review_for
from topogate.admission.podsets import Catalog, build_catalog
from topogate.webhooks.review import Review, mutate, validate
from topogate.webhooks.server import make_app

KINDS = [
    ("Job", "batch"),
    ("JobSet", "jobset.x-k8s.io"),
    ("Pod", ""),
    ("HyperNode", "topology.volcano.sh"),
    ("Topology", "topogate.dev"),
    ("Topology", "kueue.x-k8s.io"),
    ("ResourceFlavor", "topogate.dev"),
    ("ClusterQueue", "topogate.dev"),
]
QUEUE = "kueue.x-k8s.io/queue-name"

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=70)
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=12), children, max_size=3)
    ),
    max_leaves=12,
)
keys = st.sampled_from(
    [
        "spec",
        "template",
        "metadata",
        "annotations",
        "labels",
        "containers",
        "replicatedJobs",
        "name",
        "replicas",
        "parallelism",
        "completions",
        "schedulingGates",
        "nodeName",
        "resources",
        "requests",
        "members",
        "selector",
        "tier",
        "levels",
        "nodeLabel",
        "resourceGroups",
        "flavors",
        "kueue.x-k8s.io/podset-required-topology",
        "kueue.x-k8s.io/podset-slice-size",
        "kai.scheduler/topology-required-placement",
        "topogate.dev/network-topology",
    ]
)
labels = st.dictionaries(st.sampled_from([QUEUE, "topogate.dev/podset", "a"]), values, max_size=2)
metadata = values | st.fixed_dictionaries(
    {},
    optional={
        "name": values | st.just("n"),
        "namespace": values,
        "labels": labels | values,
        "annotations": labels | values,
    },
)
# Objects shaped like the real ones, with any part replaced by anything.
shaped = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(keys, children, max_size=4),
    max_leaves=25,
)


def job_like(spec: Any, template_meta: Any, name: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ml", "labels": {QUEUE: "q"}},
        "spec": {
            "parallelism": 2,
            "template": {"metadata": template_meta, "spec": spec},
        },
        "extra": name,
    }


class View:
    """A view that knows the queue, so the level checks run too."""

    def __init__(self) -> None:
        self.catalog: Catalog = build_catalog(
            [
                {
                    "metadata": {"name": "cq"},
                    "spec": {
                        "resourceGroups": [
                            {
                                "coveredResources": ["cpu"],
                                "flavors": [
                                    {"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1}]}
                                ],
                            }
                        ]
                    },
                }
            ],
            [{"metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}}],
            [{"metadata": {"name": "f"}, "spec": {"nodeLabels": {"a": "b"}, "topologyName": "t"}}],
            [{"metadata": {"name": "t"}, "spec": {"levels": [{"nodeLabel": "rack"}]}}],
            None,
        )[0]

    def catalog_for(self, namespace: str, queue: str) -> Catalog | None:
        return self.catalog

    def hypernodes(self) -> list[Mapping[str, Any]] | None:
        return []


def answered(body: Any) -> None:
    """Review.parse refuses with ValueError (a 400), or both handlers answer."""
    try:
        review = Review.parse(body)
    except ValueError:
        return
    for answer in (mutate(review), validate(review, View())):
        assert answer["response"]["uid"] == review.uid
        if not answer["response"]["allowed"]:
            assert answer["response"]["status"]["message"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(KINDS), obj=st.dictionaries(keys, shaped, max_size=5), ns=values)
def test_any_object_of_any_kind_is_answered(
    kind: tuple[str, str], obj: dict[str, Any], ns: Any
) -> None:
    body = review_for(obj, *kind, namespace="ml")
    body["request"]["namespace"] = ns
    answered(body)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=shaped, meta=shaped, name=values)
def test_a_queued_job_with_any_template_is_answered(spec: Any, meta: Any, name: Any) -> None:
    answered(review_for(job_like(spec, meta, name), "Job", "batch", namespace="ml"))


@settings(max_examples=200, deadline=None)
@given(body=values)
def test_any_json_body_is_answered(body: Any) -> None:
    answered(body)
    answered({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body})


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        ([], "request.object.metadata must be an object"),
        ({"labels": ["a"]}, "request.object.metadata.labels must map strings to strings"),
        (
            {"annotations": {"a": 1}},
            "request.object.metadata.annotations must map strings to strings",
        ),
        ({"name": 3}, "request.object.metadata.name must be a string"),
    ],
)
def test_malformed_metadata_is_refused_naming_the_field(metadata: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=f"^{problem}$"):
        Review.parse(review_for({"metadata": metadata}, "Pod"))


def test_a_replicated_job_name_too_long_for_a_label_is_refused_with_its_field() -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ml", "labels": {QUEUE: "q"}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "r" * 64,
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}
                        }
                    },
                }
            ]
        },
    }
    answer = validate(Review.parse(review_for(jobset, "JobSet", "jobset.x-k8s.io", namespace="ml")))
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["code"] == 422
    assert answer["response"]["status"]["message"].startswith("JobSet ml/js: ")


async def test_the_server_never_answers_500() -> None:
    bodies = [
        b"{" * 100_000,
        b"[" * 5000 + b"]" * 5000,  # valid JSON, nested past the recursion limit
        json.dumps(review_for({"metadata": {"labels": []}}, "Pod")).encode(),
        json.dumps(review_for({"metadata": {}, "spec": []}, "Pod")).encode(),
        json.dumps(review_for(job_like([], {"annotations": "x"}, None), "Job", "batch")).encode(),
    ]
    async with TestClient(TestServer(make_app())) as client:
        for path in ("/mutate", "/validate"):
            for body in bodies:
                reply = await client.post(path, data=body)
                assert reply.status in (200, 400), (path, body[:40], reply.status)


def _new_kinds() -> list[tuple[dict[str, Any], str]]:
    """A valid queued object of each job kind added with Kubeflow and Ray (the fuzz above
    builds only Job-shaped ones), with its API group."""
    from tests import test_kubeflow_kinds as kubeflow
    from tests import test_ray as ray

    def replica(count: int) -> dict[str, Any]:
        return {"replicas": count, "template": kubeflow.template()}

    return [
        (kubeflow.pytorchjob(Master=replica(1), Worker=replica(3)), "kubeflow.org"),
        (kubeflow.mpijob(True, Launcher=replica(1), Worker=replica(2)), "kubeflow.org"),
        (ray.raycluster(ray.group("w", 2, 2)), "ray.io"),
        (ray.rayjob(ray.group("w", 2)), "ray.io"),
        (ray.rayjob(ray.group("w", 2), submissionMode="SidecarMode"), "ray.io"),
    ]


def _paths(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(obj, dict):
        for key, value in obj.items():
            found += _paths(value, (*path, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            found += _paths(value, (*path, i))
    return found


# Every part replaced by each wrong shape in turn: exhaustive rather than drawn, since a
# drawn path and value rarely meet the one field a kind reads differently.
HOSTILE: list[Any] = [None, "x", 5, -1, 2**63, 1.5, True, [], [1], {}, {"a": 1}, "9" * 5000]


@pytest.mark.parametrize("index", range(5))
def test_a_kubeflow_or_ray_object_with_any_part_replaced_is_answered(index: int) -> None:
    # A SidecarMode RayJob whose head containers were 5 was a TypeError out of validate.
    base, group = _new_kinds()[index]
    for path in _paths(base)[1:]:
        if path[0] in ("kind", "apiVersion"):
            continue
        for value in HOSTILE:
            obj = copy.deepcopy(base)
            target = obj
            for part in path[:-1]:
                target = target[part]
            target[path[-1]] = value
            for operation in ("CREATE", "UPDATE"):
                answered(review_for(obj, obj["kind"], group, operation, namespace="ml"))
