"""Shared fixtures. ``control_plane``: one real kube-apiserver/etcd/kube-scheduler per run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from topogate.controlplane import ControlPlane


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
