"""Helpers for tests on the real control plane: API clients and small object builders."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kubernetes import client, config

from topogate.kube.client import Kube
from topogate.kube.protocol import KubeApi
from topogate.testing.controlplane import ControlPlane

T = TypeVar("T")


def api_client(plane: ControlPlane) -> client.ApiClient:
    return config.new_client_from_config(str(plane.kubeconfig))


def with_kube(plane: ControlPlane, use: Callable[[KubeApi], Awaitable[T]]) -> T:
    """``use`` run with topogate's own client of the plane (for the package's async calls)."""

    async def connected() -> T:
        kube = await Kube.connect(str(plane.kubeconfig))
        try:
            return await use(kube)
        finally:
            await kube.close()

    return asyncio.run(connected())


def eventually(check: Callable[[], T | None], timeout: float = 20.0, interval: float = 0.2) -> T:
    """Poll ``check`` until it returns something truthy; fail with the last error or value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
            last = value
        except Exception as error:  # reported if it never succeeds
            last = error
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s; last: {last!r}")


def fake_node(name: str, labels: dict[str, str] | None = None, gpus: int = 8) -> dict[str, Any]:
    """A Ready node with allocatable set: the scheduler binds to it, no kubelet needed."""
    resources = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {
            "allocatable": resources,
            "capacity": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def drop_webhooks(plane: ControlPlane) -> None:
    """Delete topogate's webhook configurations: once their server is gone they would refuse
    (failurePolicy Fail) what later tests on the same control plane create."""
    admission = client.AdmissionregistrationV1Api(api_client(plane))
    for item in admission.list_mutating_webhook_configuration().items:
        if item.metadata.name.startswith("topogate"):
            admission.delete_mutating_webhook_configuration(item.metadata.name)
    for item in admission.list_validating_webhook_configuration().items:
        if item.metadata.name.startswith("topogate"):
            admission.delete_validating_webhook_configuration(item.metadata.name)
