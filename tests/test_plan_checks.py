"""`topogate plan` says what it would otherwise ignore: unknown keys, queues and quota, and
what the API server would refuse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_cli_plan import RACK, TOPOLOGY, _job, _node
from topogate.cli import main


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
