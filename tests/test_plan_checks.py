"""`topogate plan` says what it would otherwise ignore: unknown keys, queues and quota, and
what the API server would refuse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kit import review_for
from tests.test_cli_plan import RACK, TOPOLOGY, _job, _node
from topogate.admission.podsets import build_catalog, translate
from topogate.api.jobs import workload_from_object
from topogate.cli import main
from topogate.webhooks.review import Review, validate


def _cluster(tmp_path: Path, *extra: dict[str, Any]) -> Path:
    directory = tmp_path / "cluster"
    directory.mkdir()
    nodes = [
        _node(f"h{b}{r}{h}", f"b{b}", f"r{r}") for b in range(2) for r in range(2) for h in range(2)
    ]
    (directory / "nodes.yaml").write_text(yaml.safe_dump_all([*nodes, TOPOLOGY, *extra]))
    return directory


def _plan(
    tmp_path: Path, job: dict[str, Any], *extra: dict[str, Any], args: tuple[str, ...] = ()
) -> int:
    workload = tmp_path / "job.yaml"
    workload.write_text(yaml.safe_dump(job))
    cluster = _cluster(tmp_path, *extra)
    return main(["plan", "--cluster", str(cluster), "--workload", str(workload), *args])


def test_unknown_and_misplaced_keys_are_warned_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _job(2, {"kueue.x-k8s.io/podset-required-topolgy": RACK})
    job["metadata"]["annotations"] = {"kueue.x-k8s.io/podset-required-topology": RACK}
    assert _plan(tmp_path, job) == 0  # planned as written: with no topology request
    assert capsys.readouterr().err.splitlines() == [
        "topogate plan: warning: Job ml/train: metadata.annotations"
        "[kueue.x-k8s.io/podset-required-topology]: not read on the Job; move it to "
        "spec.template.metadata.annotations",
        "topogate plan: warning: Job ml/train: spec.template.metadata.annotations"
        "[kueue.x-k8s.io/podset-required-topolgy]: unknown; did you mean "
        "kueue.x-k8s.io/podset-required-topology?",
    ]


def test_warnings_come_before_a_refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(
        2, {"kueue.x-k8s.io/podset-slice-size": "2", "topogate.dev/podset-slice-topology": RACK}
    )
    assert _plan(tmp_path, job) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        "topogate plan: warning: Job ml/train: spec.template.metadata.annotations"
        "[topogate.dev/podset-slice-topology]: unknown; did you mean "
        "topogate.dev/podset-slice-required-topology?"
    )
    assert (
        "Forbidden: may not be set when 'kueue.x-k8s.io/podset-slice-required-topology'" in err[1]
    )


def test_a_clean_job_prints_no_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(2)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": "high"}
    assert _plan(tmp_path, job, args=("-o", "json")) == 0
    out = capsys.readouterr()
    assert out.err == ""
    assert json.loads(out.out)["status"]["conditions"][0]["status"] == "True"


def _containers(job: dict[str, Any], *containers: dict[str, Any]) -> dict[str, Any]:
    job["spec"]["template"]["spec"]["containers"] = list(containers)
    return job


def test_a_job_without_containers_is_refused_as_the_api_server_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _plan(tmp_path, _containers(_job(2))) == 2
    assert capsys.readouterr().err.splitlines() == [
        "topogate plan: error: "
        f"{tmp_path / 'job.yaml'}: Job ml/train: spec.template.spec.containers: Required value"
    ]


@pytest.mark.parametrize("field", ["parallelism", "completions"])
def test_a_pod_count_beyond_int32_is_refused_as_the_api_server_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str
) -> None:
    # With job-min-parallelism, 2**63 pods was planned as a partial fit (exit 0).
    job = _job(2)
    job["spec"][field] = 2**63
    job["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "1"}
    assert _plan(tmp_path, job) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"topogate plan: error: {tmp_path / 'job.yaml'}: Job ml/train: spec.{field}: "
        f"Invalid value: {2**63}: must be at most 2147483647 (an int32)"
    ]


def test_requests_above_limits_are_refused_with_the_api_servers_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _containers(
        _job(2),
        {"name": "a", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}},
        {
            "name": "b",
            "resources": {
                "requests": {"memory": "1Gi", "nvidia.com/gpu": "2", "example.com/nic": "1"},
                "limits": {"memory": "2Gi", "nvidia.com/gpu": "4"},
            },
        },
    )
    job["spec"]["template"]["spec"]["initContainers"] = [
        {"name": "i", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "100m"}}}
    ]
    assert _plan(tmp_path, job) == 2
    base = "spec.template.spec"
    assert capsys.readouterr().err.splitlines() == [
        f"topogate plan: error: {tmp_path / 'job.yaml'}: Job ml/train: "
        f'{base}.containers[0].resources.requests: Invalid value: "2": '
        "must be less than or equal to cpu limit of 1; "
        f"{base}.containers[1].resources.limits: Required value: "
        "Limit must be set for non overcommitable resources; "
        f'{base}.containers[1].resources.requests: Invalid value: "2": '
        "must be equal to nvidia.com/gpu limit of 4; "
        f'{base}.initContainers[0].resources.requests: Invalid value: "500m": '
        "must be less than or equal to cpu limit of 100m"
    ]


def test_requests_within_limits_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _containers(
        _job(2),
        {
            "name": "a",
            "resources": {
                "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "8"},
                "limits": {"cpu": "1", "memory": "1024Mi", "nvidia.com/gpu": "8"},
            },
        },
    )
    assert _plan(tmp_path, job) == 0
    assert capsys.readouterr().err == ""


FLAVOR = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ResourceFlavor",
    "metadata": {"name": "gpu"},
    "spec": {"topologyName": "dc", "nodeLabels": {"cloud.example.com/topology-block": "b0"}},
}


def _cluster_queue(gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "gpu",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}],
                        }
                    ],
                }
            ]
        },
    }


LOCAL_QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "LocalQueue",
    "metadata": {"name": "q", "namespace": "ml"},
    "spec": {"clusterQueue": "cq"},
}

RUNNING = {  # an admitted Workload holding 8 GPUs of cq's quota
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Workload",
    "metadata": {"name": "running", "namespace": "ml"},
    "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {}}]},
    "status": {
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"nvidia.com/gpu": "gpu"},
                    "resourceUsage": {"nvidia.com/gpu": "8"},
                    "count": 1,
                }
            ],
        }
    },
}


def _queued(parallelism: int, queue: str = "q") -> dict[str, Any]:
    job = _job(parallelism)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    return job


def test_queue_quota_admits_and_names_the_cluster_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = (FLAVOR, _cluster_queue(16), LOCAL_QUEUE)
    assert _plan(tmp_path, _queued(2), *objects, args=("-o", "json")) == 0
    out = capsys.readouterr()
    assert out.err == ""
    workload = json.loads(out.out)
    assert workload["spec"]["queueName"] == "q"
    assert workload["status"]["admission"]["clusterQueue"] == "cq"
    assignment = workload["status"]["admission"]["podSetAssignments"][0]
    assert assignment["flavors"] == {"nvidia.com/gpu": "gpu"}
    assert workload["status"]["conditions"][0]["message"] == "fits on flavor 'gpu', topology 'dc'"


def test_exceeded_quota_is_a_no_fit_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = (FLAVOR, _cluster_queue(16), LOCAL_QUEUE)
    assert _plan(tmp_path, _queued(3), *objects) == 1
    assert capsys.readouterr().out == (
        "Workload ml/train on queue 'q'\n"
        "DOES NOT FIT: insufficient quota for nvidia.com/gpu in flavor gpu: needs 24, "
        "16 available\n"
    )


def test_quota_in_use_by_admitted_workloads_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = (FLAVOR, _cluster_queue(16), LOCAL_QUEUE, RUNNING)
    assert _plan(tmp_path, _queued(2), *objects, args=("-o", "json")) == 1
    workload = json.loads(capsys.readouterr().out)
    assert workload["status"]["conditions"] == [
        {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "Pending",
            "message": "insufficient quota for nvidia.com/gpu in flavor gpu: needs 16, 8 available",
            "lastTransitionTime": workload["status"]["conditions"][0]["lastTransitionTime"],
        }
    ]


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("podSetAssignments", "main", "podSetAssignments: must be a list"),
        ("podSetAssignments", [1], "podSetAssignments[0]: must be an object"),
        ("flavors", ["gpu"], "podSetAssignments[0].flavors: must be an object"),
        ("resourceUsage", "8", "podSetAssignments[0].resourceUsage: must be an object"),
        (
            "resourceUsage",
            {"nvidia.com/gpu": "lots"},
            "podSetAssignments[0].resourceUsage[nvidia.com/gpu]: 'lots' is not a quantity "
            "(expected e.g. 500m, 2, 1.5Gi, 4e3)",
        ),
        (
            "resourceUsage",
            {"nvidia.com/gpu": "-8"},
            "podSetAssignments[0].resourceUsage[nvidia.com/gpu]: '-8' is negative",
        ),
    ],
)
def test_a_malformed_admission_in_the_cluster_input_is_invalid_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: Any, says: str
) -> None:
    # Each was an AttributeError or QuantityError traceback from the quota count.
    running = json.loads(json.dumps(RUNNING))
    admission = running["status"]["admission"]
    if field == "podSetAssignments":
        admission[field] = value
    else:
        admission["podSetAssignments"][0][field] = value
    objects = (FLAVOR, _cluster_queue(16), LOCAL_QUEUE, running)
    assert _plan(tmp_path, _queued(2), *objects) == 2
    assert capsys.readouterr().err == (
        f"topogate plan: error: {tmp_path / 'cluster' / 'nodes.yaml'}: Workload ml/running: "
        f"status.admission.{says}\n"
    )


def test_ignore_queues_skips_the_quota(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = (FLAVOR, _cluster_queue(8), LOCAL_QUEUE)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert _plan(tmp_path / "a", _queued(2), *objects) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "DOES NOT FIT: insufficient quota for nvidia.com/gpu in flavor gpu: needs 16, 8 available"
    )
    assert _plan(tmp_path / "b", _queued(2), *objects, args=("--ignore-queues",)) == 0
    assert capsys.readouterr().out.startswith("Workload ml/train on flavor 'gpu' (topology 'dc': ")


def test_a_missing_local_queue_is_a_no_fit_in_kueues_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = (FLAVOR, _cluster_queue(16), LOCAL_QUEUE)
    assert _plan(tmp_path, _queued(1, "nope"), *objects) == 1
    assert capsys.readouterr().out == (
        "Workload ml/train on queue 'nope'\nDOES NOT FIT: LocalQueue ml/nope doesn't exist\n"
    )


def test_a_missing_cluster_queue_is_a_no_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _plan(tmp_path, _queued(1), FLAVOR, LOCAL_QUEUE) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "DOES NOT FIT: ClusterQueue cq doesn't exist"


def test_no_room_on_the_queues_flavor_is_a_no_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = (FLAVOR, _cluster_queue(1000), LOCAL_QUEUE)
    assert _plan(tmp_path, _queued(3), *objects) == 1  # a rack holds 2 pods of 8 GPUs
    assert capsys.readouterr().out.splitlines()[-1].startswith("DOES NOT FIT: flavor gpu: ")


def test_without_queue_objects_or_a_queue_label_nothing_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert _plan(tmp_path / "a", _queued(2, "nope"), FLAVOR) == 0
    assert capsys.readouterr().err == ""
    assert _plan(tmp_path / "b", _job(2), FLAVOR, _cluster_queue(8), LOCAL_QUEUE) == 0
    assert capsys.readouterr().err.splitlines() == [
        "topogate plan: warning: the workload names no queue (label "
        "kueue.x-k8s.io/queue-name); planned without the queues' quota"
    ]


def test_a_bad_queue_object_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = _cluster_queue(16)
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert _plan(tmp_path / "a", _queued(1), FLAVOR, queue, LOCAL_QUEUE) == 2
    err = capsys.readouterr().err
    assert "ClusterQueue cq: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota" in err
    local = {**LOCAL_QUEUE, "spec": {}}
    assert _plan(tmp_path / "b", _queued(1), FLAVOR, _cluster_queue(16), local) == 2
    assert "LocalQueue ml/q: spec.clusterQueue: is required" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("resource", "quota"), [("nvidia.com/gpu", 10**30), ("cpu", "9300000000000000")]
)
def test_a_quota_beyond_int64_names_its_field_in_plan_and_the_webhook(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], resource: str, quota: Any
) -> None:
    # plan refused it without the field ("ClusterQueue cq: ... is too large"), the validating
    # webhook let it through; cpu counts in millicores, so 9.3e15 cores is past int64 too.
    queue = _cluster_queue(16)
    quotas = queue["spec"]["resourceGroups"][0]
    quotas["coveredResources"] = [resource]
    quotas["flavors"][0]["resources"][0] = {"name": resource, "nominalQuota": quota}
    assert _plan(tmp_path, _queued(1), FLAVOR, queue, LOCAL_QUEUE) == 2
    field = "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    assert f"ClusterQueue cq: {field}: {quota!r} is too large" in capsys.readouterr().err
    review = review_for(
        {**queue, "apiVersion": "topogate.dev/v1alpha1"}, "ClusterQueue", "topogate.dev"
    )
    answer = validate(Review.parse(review))["response"]
    assert answer["allowed"] is False and field in answer["status"]["message"]


def test_a_level_the_queues_topology_lacks_is_invalid_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _queued(1)
    job["spec"]["template"]["metadata"]["annotations"] = {
        "kueue.x-k8s.io/podset-required-topology": "cloud.example.com/zone"
    }
    assert _plan(tmp_path, job, FLAVOR, _cluster_queue(16), LOCAL_QUEUE) == 2
    err = capsys.readouterr().err
    assert (
        "Job ml/train: spec.template.metadata.annotations[kueue.x-k8s.io/podset-required-topology]"
        in err
    )


def test_translate_names_the_fields_of_the_object_the_pod_sets_were_written_in() -> None:
    """One recipe, two wordings: given the Job, a level its topology lacks is the job's own
    mistake naming its field (plan refuses it); the admitter, given the Workload alone, names
    the Workload's. Against a queue with no topology it is the queue's fault in both."""
    job = _queued(1)
    job["spec"]["template"]["metadata"]["annotations"] = {
        "kueue.x-k8s.io/podset-required-topology": "cloud.example.com/zone"
    }
    source = workload_from_object(job)
    source.workload.spec.queue_name = "q"
    wire = source.workload.to_wire()
    queue = {**_cluster_queue(16), "apiVersion": "topogate.dev/v1alpha1"}  # as the loader reads
    catalog, warnings = build_catalog([queue], [LOCAL_QUEUE], [FLAVOR], [TOPOLOGY], None)
    assert warnings == []
    level = "[kueue.x-k8s.io/podset-required-topology]: 'cloud.example.com/zone' is not a level"
    own = translate(wire, "ml/train", catalog, origin=source)
    assert own.pending is None and own.invalid is not None
    assert own.problem == own.invalid.describe()
    assert own.problem.startswith(f"Job ml/train: spec.template.metadata.annotations{level}")
    admitters = translate(wire, "ml/train", catalog)
    assert admitters.pending is None and admitters.invalid is not None
    assert admitters.problem.startswith(
        f"Workload ml/train: spec.podSets[0].template.metadata.annotations{level}"
    )
    plain = {**FLAVOR, "spec": {}}
    without, _ = build_catalog([queue], [LOCAL_QUEUE], [plain], [TOPOLOGY], None)
    waits = translate(wire, "ml/train", without, origin=source)
    assert waits.pending is None and waits.invalid is None
    assert "is not a level of topology 'none'" in waits.problem


def test_quota_on_a_flavor_without_topology_is_reserved_with_nothing_to_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = {**FLAVOR, "metadata": {"name": "gpu"}, "spec": {}}
    # A job that asks for a rack waits, as in serve (the admitter's words).
    assert _plan(tmp_path, _queued(1), plain, _cluster_queue(16), LOCAL_QUEUE) == 1
    assert "is not a level of topology 'none'" in capsys.readouterr().out
    job = _job(1, {})
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
    (tmp_path / "b").mkdir()
    assert _plan(tmp_path / "b", job, plain, _cluster_queue(16), LOCAL_QUEUE) == 0
    assert capsys.readouterr().out == (
        "Workload ml/train on queue 'q'\n"
        "FITS: quota reserved in ClusterQueue cq on flavor gpu, which has no topology: "
        "nothing to place\n"
    )
