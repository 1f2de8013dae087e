"""api/: quantities, pod requests, node constraints and the topology annotation rules."""

from __future__ import annotations

from fractions import Fraction

import pytest

from topogate.api.annotations import AnnotationError, check_groups, topology_request
from topogate.api.errors import InputError
from topogate.api.models import PodSetTopologyRequest, ResourceFlavor, Topology
from topogate.api.podspec import node_constraints, pod_requests
from topogate.api.quantity import QuantityError, format_units, parse_quantity, to_units
from topogate.api.validation import parse_model

PATH = "spec.template.metadata.annotations"
K = "kueue.x-k8s.io/"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("1.5Gi", 3 * 2**29),
        ("2e3", 2000),
        ("1k", 1000),
        (".5", Fraction(1, 2)),
        (7, 7),
        ("100n", Fraction(1, 10**7)),
    ],
)
def test_parse_quantity(text: str | int, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "1.5.5", "Gi", "1GB", "ten", "1 Gi", "--1"])
def test_bad_quantities_are_refused(text: str) -> None:
    with pytest.raises(QuantityError) as error:
        parse_quantity(text)
    assert str(error.value) == f"{text!r} is not a quantity (expected e.g. 500m, 2, 1.5Gi, 4e3)"


@pytest.mark.parametrize("text", ["1" + "0" * 5000, "0." + "0" * 5000 + "1", "9" * 1001 + "Gi"])
def test_a_quantity_of_thousands_of_digits_is_a_quantity_error(text: str) -> None:
    # Past Python's 4300-digit int limit it was a bare ValueError, which the readers'
    # QuantityError handlers let through as a traceback.
    with pytest.raises(QuantityError, match="has more than 1000 digits"):
        to_units("cpu", text)


def test_units_round_up_like_kubernetes() -> None:
    assert to_units("cpu", "100m") == 100
    assert to_units("cpu", "0.0001") == 1  # a request below a millicore still takes one
    assert to_units("memory", "1.5") == 2
    assert to_units("nvidia.com/gpu", 8) == 8
    assert format_units("cpu", 1500) == "1500m" and format_units("memory", 2**31) == "2Gi"
    with pytest.raises(QuantityError) as error:
        to_units("cpu", "-1")
    assert str(error.value) == "'-1' is negative"


def test_units_of_a_text_seen_before_are_the_same_and_refusals_are_refused_again() -> None:
    """to_units keeps each text's units: per kind of resource (millicores or base units),
    and never a refusal."""
    assert [to_units("cpu", "2"), to_units("memory", "2"), to_units("cpu", "2")] == [2000, 2, 2000]
    assert to_units("memory", "1Ki") == 1024 and to_units("memory", "1Ki") == 1024
    for _ in range(2):
        with pytest.raises(QuantityError, match="is negative"):
            to_units("memory", "-3")
        with pytest.raises(QuantityError, match="is not a quantity"):
            to_units("cpu", "3 cores")


def test_pod_requests_follow_kubernetes_rules() -> None:
    spec = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "b", "resources": {"limits": {"cpu": "500m", "nvidia.com/gpu": "2"}}},
        ],
        "initContainers": [
            {
                "name": "sidecar",
                "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "250m"}},
            },
            {"name": "setup", "resources": {"requests": {"cpu": "3", "memory": "100Mi"}}},
        ],
        "overhead": {"cpu": "100m"},
    }
    # containers 1.5 cpu + sidecar 0.25 = 1.75; the init phase needs 3 + 0.25 = 3.25 -> max, + overhead.
    assert pod_requests(spec, "Pod p") == {"cpu": 3350, "memory": 2**30, "nvidia.com/gpu": 2}


def test_pod_requests_name_the_bad_field() -> None:
    spec = {"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}
    with pytest.raises(InputError) as error:
        pod_requests(spec, "Job ns/j", "spec.template.spec")
    assert error.value.describe() == (
        "Job ns/j: spec.template.spec.containers[0].resources.requests.cpu: "
        "'lots' is not a quantity (expected e.g. 500m, 2, 1.5Gi, 4e3)"
    )


def test_node_constraints_parse_and_validate() -> None:
    spec = {
        "nodeSelector": {"pool": "a"},
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "zone", "operator": "In", "values": ["z1", "z2"]}
                            ]
                        }
                    ]
                }
            }
        },
    }
    constraints = node_constraints(spec, "Pod p")
    assert constraints.node_selector == {"pool": "a"}
    assert constraints.tolerations[0].operator == "Exists"
    assert constraints.affinity_terms is not None and constraints.affinity_terms[0].labels[
        0
    ].values == ("z1", "z2")
    bad = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["x"]}]}
                    ]
                }
            }
        }
    }
    with pytest.raises(InputError) as error:
        node_constraints(bad, "Pod p")
    assert error.value.describe() == (
        "Pod p: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
        "nodeSelectorTerms[0].matchExpressions[0].values: operator Gt takes exactly one integer value"
    )


def _request(annotations: dict[str, str], count: int | None = 8) -> PodSetTopologyRequest | None:
    return topology_request(annotations, PATH, count)


def test_annotations_translate_like_kueue() -> None:
    assert _request({}) is None
    assert _request({K + "podset-required-topology": "rack"}) == PodSetTopologyRequest(
        required="rack"
    )
    assert _request({"topogate.dev/podset-preferred-topology": "block"}) == PodSetTopologyRequest(
        preferred="block"
    )
    request = _request({K + "podset-slice-required-topology": "rack", K + "podset-slice-size": "4"})
    assert request is not None and request.required is None
    assert (request.pod_set_slice_required_topology, request.pod_set_slice_size) == ("rack", 4)
    layered = _request(
        {
            K + "podset-required-topology": "block",
            K
            + "podset-slice-required-topology-constraints": '[{"topology":"rack","size":4},{"topology":"host","size":2}]',
        }
    )
    assert layered is not None and [
        (c.topology, c.size) for c in layered.podset_slice_required_topology_constraints or []
    ] == [("rack", 4), ("host", 2)]
    assert _request({K + "podset-unconstrained-topology": "true"}) == PodSetTopologyRequest(
        unconstrained=True
    )


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        (
            {K + "podset-required-topology": "rack", K + "podset-preferred-topology": "block"},
            f"{PATH}: Invalid value: must not contain more than one topology annotation "
            f"(required, preferred, unconstrained); found {K}podset-required-topology, "
            f"{K}podset-preferred-topology",
        ),
        (
            {K + "podset-required-topology": "bad key!"},
            f"{PATH}[{K}podset-required-topology]: Invalid value: 'bad key!': 'bad key!' is not a valid label key"
            ": the name part must be 1-63 characters, alphanumeric, '-', '_' or '.', "
            "starting and ending with an alphanumeric",
        ),
        (
            {K + "podset-unconstrained-topology": "yes"},
            f"{PATH}[{K}podset-unconstrained-topology]: Invalid value: 'yes': must be a boolean value",
        ),
        (
            {K + "podset-slice-required-topology": "rack"},
            f"{PATH}[{K}podset-slice-size]: Required value: must be set when '{K}podset-slice-required-topology' is specified",
        ),
        (
            {K + "podset-slice-size": "2"},
            f"{PATH}[{K}podset-slice-size]: Forbidden: may not be set when '{K}podset-slice-required-topology' is not specified",
        ),
        (
            {K + "podset-slice-required-topology": "rack", K + "podset-slice-size": "x"},
            f"{PATH}[{K}podset-slice-size]: Invalid value: 'x': must be a numeric value",
        ),
        (
            {K + "podset-slice-required-topology": "rack", K + "podset-slice-size": "0"},
            f"{PATH}[{K}podset-slice-size]: Invalid value: '0': must be greater than or equal to 1",
        ),
        (
            {K + "podset-slice-required-topology": "rack", K + "podset-slice-size": "16"},
            f"{PATH}[{K}podset-slice-size]: Invalid value: '16': must not be greater than pod set count 8",
        ),
        (
            {K + "podset-slice-required-topology": "rack", K + "podset-slice-size": "3"},
            f"{PATH}[{K}podset-slice-size]: Invalid value: '3': must evenly divide the pod set count 8",
        ),
        (
            {K + "podset-required-topology": "rack", K + "podset-group-name": "123"},
            f"{PATH}[{K}podset-group-name]: Invalid value: '123': must not be a number",
        ),
        (
            {K + "podset-group-name": "g"},
            f"{PATH}[{K}podset-group-name]: Forbidden: may not be set when neither a required nor a preferred topology annotation is specified",
        ),
        (
            {K + "podset-slice-required-topology-constraints": "not json"},
            f"{PATH}[{K}podset-slice-required-topology-constraints]: Invalid value: 'not json': must be a valid JSON array"
            ": Expecting value: line 1 column 1 (char 0)",
        ),
        (
            {K + "podset-slice-required-topology-constraints": "[]"},
            f"{PATH}[{K}podset-slice-required-topology-constraints]: Invalid value: '[]': "
            "topology constraints must contain between 1 and 3 entries",
        ),
        (
            {
                K
                + "podset-slice-required-topology-constraints": '[{"topology":"rack","size":8},{"topology":"rack","size":4}]'
            },
            f"{PATH}[{K}podset-slice-required-topology-constraints][1].topology: Duplicate value: 'rack' (also at index 0)",
        ),
        (
            {
                K
                + "podset-slice-required-topology-constraints": '[{"topology":"block","size":8},{"topology":"rack","size":3}]'
            },
            f"{PATH}[{K}podset-slice-required-topology-constraints][1].size: Invalid value: 3: must evenly divide the parent layer size 8",
        ),
        (
            {
                K + "podset-slice-required-topology-constraints": '[{"topology":"rack","size":4}]',
                K + "podset-slice-size": "4",
                K + "podset-slice-required-topology": "rack",
            },
            f"{PATH}[{K}podset-slice-required-topology-constraints]: Forbidden: may not be set when '{K}podset-slice-required-topology' is specified; "
            f"{PATH}[{K}podset-slice-required-topology-constraints]: Forbidden: may not be set when '{K}podset-slice-size' is specified",
        ),
        (
            {
                K + "podset-required-topology": "rack",
                "topogate.dev/podset-required-topology": "block",
            },
            f"{PATH}[{K}podset-required-topology]: Invalid value: 'rack': conflicts with topogate.dev/podset-required-topology='block'",
        ),
    ],
)
def test_annotation_rules_name_the_annotation(annotations: dict[str, str], problem: str) -> None:
    """``problem``: every problem found, joined with "; " as the error's text joins them."""
    with pytest.raises(AnnotationError) as error:
        _request(annotations)
    assert "; ".join(error.value.problems) == problem
    assert str(error.value) == problem


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(AnnotationError) as error:
        _request({K + "podset-unconstrained-topology": "maybe", K + "podset-slice-size": "0"})
    # boolean, size >= 1, size without topology
    assert error.value.problems == [
        f"{PATH}[{K}podset-unconstrained-topology]: Invalid value: 'maybe': must be a boolean value",
        f"{PATH}[{K}podset-slice-size]: Invalid value: '0': must be greater than or equal to 1",
        f"{PATH}[{K}podset-slice-size]: Forbidden: may not be set when "
        f"'{K}podset-slice-required-topology' is not specified",
    ]


def test_groups_need_two_podsets_one_of_them_single() -> None:
    leader = PodSetTopologyRequest(required="rack", pod_set_group_name="g")
    check_groups([("leader", 1, leader, "a"), ("workers", 4, leader, "b")])
    group = f"[{K}podset-group-name]: Invalid value: 'g': can only define groups"
    with pytest.raises(AnnotationError) as error:
        check_groups([("leader", 1, leader, "a")])
    assert error.value.problems == [f"a{group} of exactly 2 pod sets, got: 1 pod set(s)"]
    with pytest.raises(AnnotationError) as error:
        check_groups([("a", 2, leader, "a"), ("b", 4, leader, "b")])
    why = "where at least one pod set has only 1 replica, got: 2 replica(s) and 4 replica(s) in the group"
    assert error.value.problems == [f"a{group} {why}", f"b{group} {why}"]
    other = PodSetTopologyRequest(preferred="rack", pod_set_group_name="g")
    with pytest.raises(AnnotationError) as error:
        check_groups([("a", 1, leader, "a"), ("b", 4, other, "b")])
    consistent = "Invalid value: must specify a required or preferred topology consistent with"
    assert error.value.problems == [
        f"a: {consistent} 'b' in group 'g'",
        f"b: {consistent} 'a' in group 'g'",
    ]


def test_topology_rules() -> None:
    def topology(*levels: str) -> dict[str, object]:
        return {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "Topology",
            "metadata": {"name": "t"},
            "spec": {"levels": [{"nodeLabel": level} for level in levels]},
        }

    assert parse_model(Topology, topology("block", "kubernetes.io/hostname"), "t").level_labels == [
        "block",
        "kubernetes.io/hostname",
    ]
    for levels, message in [
        ((), "spec.levels: List should have at least 1 item after validation, not 0"),
        (("a", "a"), "spec.levels: level 'a' appears more than once"),
        (
            ("kubernetes.io/hostname", "rack"),
            "spec.levels: kubernetes.io/hostname is allowed only as the lowest (last) level",
        ),
        (
            tuple(f"l{i}" for i in range(17)),
            "spec.levels: List should have at most 16 items after validation, not 17",
        ),
        (
            ("bad label!",),
            "spec.levels[0].nodeLabel: 'bad label!' is not a valid label key: the name part "
            "must be 1-63 characters, alphanumeric, '-', '_' or '.', starting and ending with "
            "an alphanumeric",
        ),
    ]:
        with pytest.raises(InputError) as error:
            parse_model(Topology, topology(*levels), "Topology t")
        assert error.value.describe() == f"Topology t: {message}"
    kueue = {**topology("rack"), "apiVersion": "kueue.x-k8s.io/v1beta1"}
    assert parse_model(Topology, kueue, "t").api_version == "kueue.x-k8s.io/v1beta1"
    with pytest.raises(InputError) as error:
        parse_model(Topology, {**topology("rack"), "apiVersion": "example.com/v1"}, "t")
    assert error.value.describe() == (
        "t: apiVersion: Topology apiVersion 'example.com/v1' is not one of kai.scheduler/v1alpha1, "
        "kueue.x-k8s.io/v1alpha1, kueue.x-k8s.io/v1beta1, kueue.x-k8s.io/v1beta2, "
        "topogate.dev/v1alpha1"
    )


def test_flavor_with_topology_needs_node_labels() -> None:
    flavor = {"kind": "ResourceFlavor", "metadata": {"name": "f"}, "spec": {"topologyName": "t"}}
    with pytest.raises(InputError) as error:
        parse_model(ResourceFlavor, flavor, "ResourceFlavor f")
    assert error.value.describe() == (
        "ResourceFlavor f: spec: nodeLabels must not be empty when topologyName is set"
    )
