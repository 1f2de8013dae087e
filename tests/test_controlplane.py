"""The local control plane itself: a real API server that the real scheduler binds through."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.cluster import api_client, eventually, fake_node
from topogate.testing.controlplane import ControlPlane

pytestmark = pytest.mark.cluster


def test_api_server_is_real_and_enforces_validation(control_plane: ControlPlane) -> None:
    core = client.CoreV1Api(api_client(control_plane))
    assert client.VersionApi(api_client(control_plane)).get_code().git_version == "v1.34.2"
    names = {ns.metadata.name for ns in core.list_namespace().items}
    assert {"default", "kube-system"} <= names
    with pytest.raises(client.ApiException) as error:
        core.create_namespace({"metadata": {"name": "Not_A_Valid_Name"}})
    assert error.value.status == 422


def test_scheduler_binds_a_pod_to_a_fake_node(control_plane: ControlPlane) -> None:
    core = client.CoreV1Api(api_client(control_plane))
    core.create_node(fake_node("cp-node-1"))
    assert not core.read_node("cp-node-1").spec.taints  # TaintNodesByCondition is off
    core.create_namespace({"metadata": {"name": "cp-test"}})
    core.create_namespaced_pod(
        "cp-test",
        {
            "metadata": {"name": "p"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "cp-node-1"},
                "containers": [
                    {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ],
            },
        },
    )
    node = eventually(lambda: core.read_namespaced_pod("p", "cp-test").spec.node_name)
    assert node == "cp-node-1"


def test_the_binaries_are_found_through_build_sh_without_the_variable(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo and `hack/controlplane/start.sh` call binaries() with no $TOPOGATE_CONTROLPLANE_BIN:
    it must find the repository's build.sh (it printed a wrong path once the module moved)."""
    import os
    from pathlib import Path

    from topogate.testing.controlplane import BIN_ENV, binaries

    expected = os.environ.get(BIN_ENV)
    monkeypatch.delenv(BIN_ENV, raising=False)
    found = binaries()
    assert (found / "kube-apiserver").is_file()
    if expected:
        assert found == Path(expected)
