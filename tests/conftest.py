"""Shared fixtures. ``control_plane``: one real kube-apiserver/etcd/kube-scheduler per run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.cluster import api_client, eventually
from topogate.testing.controlplane import ControlPlane


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """Started once for the test run (binaries from $TOPOGATE_CONTROLPLANE_BIN or build.sh's
    cache) and always stopped, whatever the tests did."""
    directory: Path = tmp_path_factory.mktemp("controlplane")
    plane = ControlPlane.start(directory)
    try:
        yield plane
    finally:
        plane.stop()


BASES = Path(__file__).resolve().parent.parent / "config" / "crd" / "bases"


@pytest.fixture(scope="session")
def crds(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    """topogate's CRDs installed (from config/crd) and Established on the control plane."""
    api = api_client(control_plane)
    extensions = client.ApiextensionsV1Api(api)
    for path in sorted(BASES.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        try:
            extensions.create_custom_resource_definition(doc)
        except client.ApiException as error:
            if error.status != 409:
                raise

    def established() -> bool:
        for path in BASES.glob("*.yaml"):
            name = yaml.safe_load(path.read_text())["metadata"]["name"]
            conditions = extensions.read_custom_resource_definition(name).status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
        return True

    eventually(established)
    yield api
