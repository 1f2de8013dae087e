"""Unknown and misplaced label/annotation keys: said as warnings, by `plan` and the webhook."""

from __future__ import annotations

from typing import Any

from tests.kit import review_for
from topogate.api.keywarnings import edit_distance, key_warnings
from topogate.webhooks.review import Review, validate, within_limits


def _job(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    template_labels: dict[str, str] | None = None,
    template_annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "j",
            "namespace": "ml",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {
            "template": {
                "metadata": {
                    "labels": template_labels or {},
                    "annotations": template_annotations or {},
                },
                "spec": {"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Never"},
            }
        },
    }


def test_typos_name_the_key_and_the_nearest_known_key() -> None:
    job = _job(
        template_annotations={
            "kueue.x-k8s.io/podset-required-topolgy": "rack",
            "topogate.dev/topology-nam": "dc",
            "kai.scheduler/topology-required-placment": "rack",
            "example.com/anything": "x",  # not a prefix topogate reads: never warned
        }
    )
    assert key_warnings(job) == [
        "spec.template.metadata.annotations[kai.scheduler/topology-required-placment]: "
        "unknown; did you mean kai.scheduler/topology-required-placement?",
        "spec.template.metadata.annotations[kueue.x-k8s.io/podset-required-topolgy]: "
        "unknown; did you mean kueue.x-k8s.io/podset-required-topology?",
        "spec.template.metadata.annotations[topogate.dev/topology-nam]: "
        "unknown; did you mean topogate.dev/topology-name?",
    ]


def test_the_gates_name_is_no_annotation() -> None:
    job = _job(template_annotations={"topogate.dev/topology": "dc"})
    assert key_warnings(job) == [
        "spec.template.metadata.annotations[topogate.dev/topology]: unknown; did you mean "
        "topogate.dev/topology-name?"
    ]


def test_a_typo_in_the_queue_label_is_said() -> None:
    assert key_warnings(_job(labels={"kueue.x-k8s.io/queue-nme": "q"})) == [
        "metadata.labels[kueue.x-k8s.io/queue-nme]: unknown; did you mean "
        "kueue.x-k8s.io/queue-name?"
    ]


def test_topology_annotations_on_the_job_itself_are_not_read() -> None:
    job = _job(
        annotations={
            "kueue.x-k8s.io/podset-required-topology": "rack",
            "topogate.dev/network-topology": '{"mode": "soft"}',
            # KAI's keys are read from the object too: no warning
            "kai.scheduler/topology-required-placement": "rack",
        }
    )
    assert key_warnings(job) == [
        "metadata.annotations[kueue.x-k8s.io/podset-required-topology]: not read on the Job; "
        "move it to spec.template.metadata.annotations",
        "metadata.annotations[topogate.dev/network-topology]: not read on the Job; "
        "move it to spec.template.metadata.annotations",
    ]


def test_labels_and_annotations_mixed_up() -> None:
    job = _job(
        annotations={"kueue.x-k8s.io/queue-name": "q"},
        template_labels={
            "kueue.x-k8s.io/podset-preferred-topology": "rack",
            "topogate.dev/queue-name": "q",
        },
    )
    assert key_warnings(job) == [
        "metadata.annotations[kueue.x-k8s.io/queue-name]: read from labels, not annotations; "
        "move it to metadata.labels",
        "spec.template.metadata.labels[kueue.x-k8s.io/podset-preferred-topology]: read from "
        "annotations, not labels; move it to spec.template.metadata.annotations",
        "spec.template.metadata.labels[topogate.dev/queue-name]: not read on a pod template; "
        "move it to the Job's metadata.labels",
    ]


def test_real_kueue_and_kai_keys_where_they_belong_say_nothing() -> None:
    job = _job(
        labels={
            "kueue.x-k8s.io/queue-name": "q",
            "kueue.x-k8s.io/priority-class": "high",
            "kueue.x-k8s.io/max-exec-time-seconds": "600",
            "kueue.x-k8s.io/prebuilt-workload-name": "w",
            "kai.scheduler/queue": "team-a",
        },
        annotations={
            "kueue.x-k8s.io/job-min-parallelism": "2",
            "kueue.x-k8s.io/safe-to-forcefully-delete": "true",
            "kueue.x-k8s.io/workload-allowed-resource-flavors": "a,b",
            "kai.scheduler/topology": "dc",
            "kai.scheduler/topology-preferred-placement": "rack",
        },
        template_labels={"kueue.x-k8s.io/podset": "main", "kai.scheduler/subgroup-name": "w"},
        template_annotations={
            **{
                f"kueue.x-k8s.io/{n}": "x"
                for n in ("podset-required-topology", "podset-slice-size")
            },
            "kueue.x-k8s.io/podset-group-name": "g",
            "topogate.dev/balanced-placement": "true",
            "topogate.dev/gpu-min-bandwidth": "100",
            "kai.scheduler/topology-required-placement": "rack",
        },
    )
    assert key_warnings(job) == []


def test_jobset_templates_and_a_pod_are_read_where_topogate_reads_them() -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "annotations": {"kueue.x-k8s.io/podset-group-name": "g"}},
        "spec": {
            "replicatedJobs": [
                {"name": "a", "template": {"spec": {"template": {}}}},
                {
                    "name": "b",
                    "template": {
                        "spec": {
                            "template": {
                                "metadata": {"annotations": {"topogate.dev/podset-slice-siz": "2"}}
                            }
                        }
                    },
                },
            ]
        },
    }
    assert key_warnings(jobset) == [
        "metadata.annotations[kueue.x-k8s.io/podset-group-name]: not read on the JobSet; move "
        "it to spec.replicatedJobs[*].template.spec.template.metadata.annotations",
        "spec.replicatedJobs[1].template.spec.template.metadata.annotations"
        "[topogate.dev/podset-slice-siz]: unknown; did you mean topogate.dev/podset-slice-size?",
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
            "annotations": {"kueue.x-k8s.io/podset-required-topology": "rack"},
        },
    }
    assert key_warnings(pod) == []


def test_malformed_objects_give_no_warnings_and_no_crash() -> None:
    for spec in ({"replicatedJobs": 3}, {"replicatedJobs": ["x", None]}, {"template": "x"}, None):
        for kind in ("Job", "JobSet", "Workload"):
            assert key_warnings({"kind": kind, "metadata": "x", "spec": spec}) == []


def test_a_left_out_word_is_found() -> None:
    job = _job(template_annotations={"kueue.x-k8s.io/podset-slice-topology": "rack"})
    assert key_warnings(job) == [
        "spec.template.metadata.annotations[kueue.x-k8s.io/podset-slice-topology]: "
        "unknown; did you mean kueue.x-k8s.io/podset-slice-required-topology?"
    ]


def test_suggestions_stop_after_a_bound() -> None:
    keys = {f"topogate.dev/x{i:03}": "v" for i in range(40)}
    warnings = key_warnings(_job(template_annotations=keys))
    assert len(warnings) == 40
    assert all("did you mean" in w for w in warnings[:32])
    assert warnings[32:] == [
        f"spec.template.metadata.annotations[topogate.dev/x{i:03}]: unknown" for i in range(32, 40)
    ]


def test_a_key_longer_than_kubernetes_allows_gets_no_suggestion() -> None:
    # Comparing a 30,000-character key with every known key took seconds (quadratic); the
    # API server refuses such a key, plan reads it from a file.
    long_key = "kueue.x-k8s.io/podset-required-topology" + "y" * 30_000
    fits = "kueue.x-k8s.io/" + "a" * 302  # the longest a key may be: still suggested
    warnings = key_warnings(_job(template_annotations={long_key: "v", fits: "v"}))
    assert warnings[0].startswith(f"spec.template.metadata.annotations[{fits}]: unknown; did you")
    assert warnings[1] == f"spec.template.metadata.annotations[{long_key}]: unknown"


def test_edit_distance() -> None:
    assert edit_distance("topolgy", "topology") == 1
    assert edit_distance("", "abc") == 3
    assert edit_distance("kitten", "sitting") == 3


def test_the_validating_webhook_returns_the_warnings_with_its_answer() -> None:
    job = _job(
        labels={"kueue.x-k8s.io/queue-name": "q"},
        template_annotations={"kueue.x-k8s.io/podset-required-topolgy": "rack"},
    )
    answer = validate(Review.parse(review_for(job, "Job", "batch")))["response"]
    assert answer["allowed"] is True
    assert answer["warnings"] == [
        "spec.template.metadata.annotations[kueue.x-k8s.io/podset-required-topolgy]: "
        "unknown; did you mean kueue.x-k8s.io/podset-required-topology?"
    ]
    # A refusal carries them too; a clean job has none.
    job["spec"]["template"]["metadata"]["annotations"]["kueue.x-k8s.io/podset-slice-size"] = "x"
    refused = validate(Review.parse(review_for(job, "Job", "batch")))["response"]
    assert refused["allowed"] is False
    assert refused["warnings"] == answer["warnings"]
    clean = _job(labels={"kueue.x-k8s.io/queue-name": "q"})
    assert "warnings" not in validate(Review.parse(review_for(clean, "Job", "batch")))["response"]


def test_warnings_stay_within_the_api_servers_limits() -> None:
    many = [f"warning {i}: " + "x" * 300 for i in range(40)]
    kept = within_limits(many)
    assert all(len(w) <= 256 for w in kept)
    assert sum(len(w) for w in kept) <= 4096
    assert kept[-1] == f"and {40 - len(kept) + 1} more warning(s); `topogate plan` lists them all"
    assert within_limits(["a", "b"]) == ["a", "b"]


def test_a_mistyped_prefix_warns_and_names_the_key_meant() -> None:
    # kueue.k8s.io/podset-required-topology planned unconstrained with no word said.
    job = _job(
        labels={"kueue.k8s.io/queue-name": "q", "app.kubernetes.io/name": "train"},
        template_annotations={
            "kueue.k8s.io/podset-required-topology": "rack",
            "topogate.io/topology-name": "dc",
            "kai-scheduler/topology-required-placement": "rack",
            "example.com/podset-preferred-topology": "rack",  # no other project's name
            "kubernetes.io/hostname": "h",  # near no prefix topogate reads: never warned
            "x-k8s.io/queue": "q",
        },
    )
    assert key_warnings(job) == [
        "metadata.labels[kueue.k8s.io/queue-name]: unknown; did you mean "
        "kueue.x-k8s.io/queue-name?",
        "spec.template.metadata.annotations[example.com/podset-preferred-topology]: unknown; "
        "did you mean kueue.x-k8s.io/podset-preferred-topology?",
        "spec.template.metadata.annotations[kai-scheduler/topology-required-placement]: "
        "unknown; did you mean kai.scheduler/topology-required-placement?",
        "spec.template.metadata.annotations[kueue.k8s.io/podset-required-topology]: unknown; "
        "did you mean kueue.x-k8s.io/podset-required-topology?",
        "spec.template.metadata.annotations[topogate.io/topology-name]: unknown; "
        "did you mean topogate.dev/topology-name?",
    ]


def test_a_key_on_a_jobset_s_job_template_says_where_it_belongs() -> None:
    # One level too high: the Job template's metadata, not its pod template's.
    pod_template = {"spec": {"containers": [{"name": "c", "image": "x"}]}}
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ml"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "template": {
                        "metadata": {
                            "annotations": {"kueue.x-k8s.io/podset-required-topology": "rack"},
                            "labels": {"kueue.x-k8s.io/queue-name": "q", "team": "a"},
                        },
                        "spec": {"template": pod_template},
                    },
                }
            ]
        },
    }
    assert key_warnings(jobset) == [
        "spec.replicatedJobs[0].template.metadata.labels[kueue.x-k8s.io/queue-name]: not read "
        "on a Job template; move it to the JobSet's metadata.labels",
        "spec.replicatedJobs[0].template.metadata.annotations"
        "[kueue.x-k8s.io/podset-required-topology]: not read on a Job template; move it to "
        "spec.replicatedJobs[0].template.spec.template.metadata.annotations",
    ]
