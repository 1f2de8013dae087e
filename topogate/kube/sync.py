"""Clients of the official synchronous Kubernetes client, for `topogate status` and the
standalone webhook's registration and lookups (the controller itself uses ``client.Kube``)."""

from __future__ import annotations

from typing import cast

from kubernetes import client, config


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """A client for ``kubeconfig``, or the in-cluster service account when None."""
    if kubeconfig:
        return cast(client.ApiClient, config.new_client_from_config(kubeconfig))  # type: ignore[no-untyped-call]
    config.load_incluster_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()
