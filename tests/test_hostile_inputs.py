"""Inputs a hostile or careless user writes, through the pure readers, plan and the webhook
handler: each is refused with the object and the field, never a traceback, an exception out
of the webhook handler or unbounded work."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.kit import review_for
from topogate.api.errors import InputError
from topogate.api.gpus import parse_allocation, parse_assignment, parse_matrix
from topogate.api.jobs import workload_from_object
from topogate.cache.nodes import pod_usage_from_kube
from topogate.cli import main
from topogate.files import load_discovery_config
from topogate.webhooks.review import Review, validate

DEEP = "[" * 100_000 + "]" * 100_000  # past Python's recursion limit when parsed
NETWORK_TOPOLOGY = "topogate.dev/network-topology"
LAYERS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"


def _job(
    template_annotations: dict[str, str] | None = None, metadata: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "j",
            "namespace": "ml",
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
            **(metadata or {}),
        },
        "spec": {
            "parallelism": 4,
            "template": {
                "metadata": {"annotations": template_annotations or {}},
                "spec": {
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                    "restartPolicy": "Never",
                },
            },
        },
    }


@pytest.mark.parametrize("parse", [parse_matrix, parse_allocation, parse_assignment])
def test_gpu_annotations_nested_too_deeply_are_a_value_error(parse: Any) -> None:
    # Every caller catches ValueError; a RecursionError went through them.
    with pytest.raises(ValueError, match="nested too deeply"):
        parse(DEEP)


def test_a_pods_deep_gpu_allocation_does_not_stop_the_cache() -> None:
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "ml",
            "annotations": {"topogate.dev/gpu-allocation": DEEP},
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    }
    usage = pod_usage_from_kube(pod)
    assert usage is not None and usage.gpus == frozenset()


@pytest.mark.parametrize("key", [NETWORK_TOPOLOGY, LAYERS])
def test_deep_json_annotation_is_invalid_input_naming_the_field(key: str) -> None:
    with pytest.raises(InputError) as caught:
        workload_from_object(_job({key: DEEP}))
    assert f"spec.template.metadata.annotations[{key}]" in str(caught.value)
    assert "nested too deeply" in str(caught.value)


@pytest.mark.parametrize("key", [NETWORK_TOPOLOGY, LAYERS])
def test_webhook_refuses_a_deep_json_annotation_itself(key: str) -> None:
    answer = validate(Review.parse(review_for(_job({key: DEEP}), "Job", "batch", namespace="ml")))
    response = answer["response"]
    assert response["allowed"] is False and response["status"]["code"] == 422
    assert f"annotations[{key}]" in response["status"]["message"]


def _plan(tmp_path: Path, workload: str, suffix: str = ".yaml") -> tuple[int, str]:
    cluster = Path(__file__).parents[1] / "topogate" / "examples" / "cluster.yaml"
    path = tmp_path / f"job{suffix}"
    path.write_text(workload)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["plan", "--cluster", str(cluster), "--workload", str(path)])
    return code, err.getvalue()


def test_plan_refuses_a_json_file_nested_too_deeply(tmp_path: Path) -> None:
    code, err = _plan(tmp_path, DEEP, ".json")
    assert code == 2
    assert err.strip() == f"topogate plan: error: {tmp_path / 'job.json'}: is nested too deeply"


def test_plan_refuses_a_deep_network_topology(tmp_path: Path) -> None:
    code, err = _plan(tmp_path, json.dumps(_job({NETWORK_TOPOLOGY: DEEP})))
    assert code == 2
    assert f"annotations[{NETWORK_TOPOLOGY}]" in err and "nested too deeply" in err


@pytest.mark.parametrize(
    ("labels", "field", "says"),
    [
        ("team-a", "metadata.labels", "must be an object"),
        (["a"], "metadata.labels", "must be an object"),
        ({"kueue.x-k8s.io/queue-name": 5}, "metadata.labels[kueue.x-k8s.io/queue-name]", "5"),
        ({"team": True}, "metadata.labels[team]", "True"),
    ],
)
def test_labels_that_are_not_strings_are_invalid_input(labels: Any, field: str, says: str) -> None:
    # A string where the map belongs was an AttributeError; an unquoted number named a queue.
    with pytest.raises(InputError) as caught:
        workload_from_object(_job(metadata={"labels": labels}))
    assert caught.value.where == "Job ml/j" and caught.value.field == field
    assert says in caught.value.message


def test_a_null_label_value_is_empty_as_the_api_server_reads_it() -> None:
    source = workload_from_object(_job(metadata={"labels": {"team": None}}))
    assert source.workload.metadata.labels == {"team": ""}


def _laughs(levels: int) -> str:
    """A Node whose label value is a YAML alias bomb: 9**levels strings from a few lines."""
    lines = ['    l0: &l0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, levels):
        lines.append(f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]")
    return "apiVersion: v1\nkind: Node\nmetadata:\n  name: n\n  labels:\n" + "\n".join(lines)


def _plan_on(tmp_path: Path, cluster: str) -> tuple[int, str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(cluster)
    job = Path(__file__).parents[1] / "topogate" / "examples" / "training-job.yaml"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["plan", "--cluster", str(path), "--workload", str(job)])
    return code, err.getvalue()


def test_plan_refuses_yaml_aliases_that_expand_far_beyond_the_text(tmp_path: Path) -> None:
    # Six lines, 531,441 strings once written out (nine lines took plan 50 s to walk).
    code, err = _plan_on(tmp_path, _laughs(6))
    assert code == 2 and "invalid YAML" not in err
    found = re.search(r"document 1 uses aliases \(\*name\) that expand to (\d+) values", err)
    assert found is not None and int(found.group(1)) > 9**6, err


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("kind: Node\nmetadata:\n  name: n\n  creationTimestamp: 2001-13-45\n", "month must be"),
        ("kind: Node\nmetadata:\n  name: n\nspec:\n  n: " + "9" * 5000 + "\n", "4300 digits"),
    ],
)
def test_plan_refuses_a_yaml_scalar_that_does_not_convert(
    tmp_path: Path, text: str, says: str
) -> None:
    # A bad date or a number past Python's digit limit was a ValueError traceback.
    code, err = _plan_on(tmp_path, text)
    assert code == 2
    assert err.startswith(f"topogate plan: error: {tmp_path / 'cluster.yaml'}: invalid YAML: ")
    assert says in err and err.count("\n") == 1


def test_plan_refuses_a_json_number_past_the_digit_limit(tmp_path: Path) -> None:
    code, err = _plan(tmp_path, '{"kind": "Job", "n": ' + "9" * 5000 + "}", ".json")
    assert code == 2
    assert err.startswith(f"topogate plan: error: {tmp_path / 'job.json'}: invalid JSON: ")


def test_plan_refuses_a_yaml_value_that_contains_itself(tmp_path: Path) -> None:
    code, err = _plan_on(tmp_path, "kind: Node\nmetadata:\n  name: n\n  labels: &a\n    b: *a\n")
    assert code == 2
    assert "alias (*name) inside its own anchor (&name)" in err


def test_plain_yaml_anchors_are_still_read(tmp_path: Path) -> None:
    example = Path(__file__).parents[1] / "topogate" / "examples" / "cluster.yaml"
    # Each Node's hostname label as an alias of its name (anchors are per document).
    text = re.sub(r"\n  name: (gpu-\S+)\n", r"\n  name: &host \1\n", example.read_text())
    text = re.sub(r"kubernetes.io/hostname: gpu-\S+", "kubernetes.io/hostname: *host", text)
    assert text.count("*host") > 10
    code, err = _plan_on(tmp_path, text)
    assert code == 0, err


@pytest.mark.parametrize(
    ("config_map", "field", "says"),
    [
        ("kind: ConfigMap\ndata: 5\n", "data", "must be an object"),
        ("kind: ConfigMap\ndata: [a]\n", "data", "must be an object"),
        (
            "kind: ConfigMap\ndata: {volcano-controller.conf: 5}\n",
            "data[volcano-controller.conf]",
            "must be a string",
        ),
        ("kind: ConfigMap\ndata: {}\n", "data", "has no data[volcano-controller.conf]"),
        (
            "kind: ConfigMap\ndata: {volcano-controller.conf: '[[[['}\n",
            "data[volcano-controller.conf]",
            "is not YAML",
        ),
        (
            "kind: ConfigMap\ndata:\n  volcano-controller.conf: |\n    when: 2001-13-45\n",
            "data[volcano-controller.conf]",
            "is not YAML: month must be in 1..12",
        ),
        (
            "kind: ConfigMap\ndata:\n  volcano-controller.conf: |\n"
            + "".join(
                f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 7)
            ).replace(
                "    l1: &l1",
                '    l0: &l0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]\n    l1: &l1',
                1,
            ),
            "",
            "expand to",
        ),
    ],
)
def test_a_discovery_config_map_of_the_wrong_shape_is_invalid_input(
    tmp_path: Path, config_map: str, field: str, says: str
) -> None:
    # data: 5 was an AttributeError traceback; aliases in the payload were walked unbounded.
    path = tmp_path / "cm.yaml"
    path.write_text(config_map)
    with pytest.raises(InputError) as caught:
        load_discovery_config(path)
    assert caught.value.where == f"{path}: ConfigMap" and caught.value.field == field
    assert says in caught.value.message


def test_serve_refuses_a_discovery_config_that_yields_nothing_and_closes_its_client(
    tmp_path: Path,
) -> None:
    # It started and discovered nothing; `topology discover` already refused such a file.
    conf = tmp_path / "volcano-controller.conf"
    conf.write_text("networkTopologyDiscovery: []\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "topogate",
            "serve",
            f"--kubeconfig={kubeconfig}",
            f"--hypernode-discovery={conf}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"topogate serve: error: {conf}: networkTopologyDiscovery: is empty; discover needs an "
        "enabled label source"
    )
    assert "Unclosed" not in done.stderr  # the API client is closed on the way out


@pytest.mark.parametrize(
    ("metadata", "template", "key"),
    [
        ({"annotations": {"kueue.x-k8s.io/job-min-parallelism": "9" * 5000}}, {}, "job-min-"),
        (
            None,
            {
                "kueue.x-k8s.io/podset-required-topology": "rack",
                "kueue.x-k8s.io/podset-slice-required-topology": "rack",
                "kueue.x-k8s.io/podset-slice-size": "9" * 5000,
            },
            "podset-slice-size",
        ),
    ],
)
def test_an_integer_annotation_of_thousands_of_digits_is_invalid_input(
    metadata: dict[str, Any] | None, template: dict[str, str], key: str
) -> None:
    # Past Python's 4300-digit limit int() raised a bare ValueError (a plan traceback, an
    # exception out of the webhook handler).
    with pytest.raises(InputError) as caught:
        workload_from_object(_job(template, metadata))
    assert key in caught.value.describe()
    answer = validate(Review.parse(review_for(_job(template, metadata), "Job", "batch")))
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["code"] == 422


@pytest.mark.parametrize(
    ("status", "field"), [("Running", "status"), ({"phase": ["Running"]}, "status.phase")]
)
def test_a_pod_status_of_the_wrong_shape_is_invalid_input(status: Any, field: str) -> None:
    # An AttributeError and an unhashable-list TypeError in plan's and topology's pod reader.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        "status": status,
    }
    with pytest.raises(InputError) as caught:
        pod_usage_from_kube(pod)
    assert caught.value.where == "Pod ml/p" and caught.value.field == field


def _jobset(replicated: int) -> dict[str, Any]:
    inner = {"spec": {"containers": [{"name": "c"}], "restartPolicy": "Never"}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "replicatedJobs": [
                {"name": f"r{i}", "replicas": 1, "template": {"spec": {"template": inner}}}
                for i in range(replicated)
            ]
        },
    }


def _rayjob(groups: int) -> dict[str, Any]:
    from tests import test_ray as ray

    return ray.rayjob(*(ray.group(f"w{i}", 1) for i in range(groups)))


@pytest.mark.parametrize(
    ("obj", "group", "field", "names"),
    [
        (_jobset(9), "jobset.x-k8s.io", "spec.replicatedJobs", "r0, r1, r2"),
        (_rayjob(7), "ray.io", "spec", "head, w0, w1, w2, w3, w4, w5, w6, submitter"),
    ],
)
def test_more_podsets_than_a_workload_holds_are_refused_naming_them(
    tmp_path: Path, obj: dict[str, Any], group: str, field: str, names: str
) -> None:
    # The Workload model's refusal was pydantic's dump ("List should have at most 8 items
    # after validation, not 9 [type=too_long, input_value=[PodSet(name=...") on `spec`.
    with pytest.raises(InputError) as caught:
        workload_from_object(obj)
    assert caught.value.field == field
    assert caught.value.message.startswith(f"Too many: 9 PodSets ({names}")
    assert caught.value.message.endswith("a Workload holds at most 8")
    answer = validate(Review.parse(review_for(obj, obj["kind"], group, namespace="ml")))
    assert answer["response"]["allowed"] is False and answer["response"]["status"]["code"] == 422
    code, err = _plan(tmp_path, json.dumps(obj), ".json")
    assert code == 2 and err.count("\n") == 1 and "type=too_long" not in err
