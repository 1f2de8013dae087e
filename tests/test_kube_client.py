"""The HTTP client's per-request parts built once: its headers without a token, and paths of
names quote() leaves as they are."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from kubernetes.aio.client.configuration import Configuration

from topogate.kube.client import MERGE_PATCH, Kube
from topogate.kube.resources import EVENTS, NODES, WORKLOADS


def _configuration(token: str | None = None) -> Configuration:
    configuration = Configuration()
    configuration.host = "http://127.0.0.1:1"
    if token is not None:
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
    return configuration


async def test_headers_without_a_token_are_built_once_per_content_type() -> None:
    kube = Kube(_configuration(), qps=None)
    try:
        fixed = kube._fixed_headers(MERGE_PATCH)
        assert fixed == await kube._headers(MERGE_PATCH)
        assert fixed == {"Accept": "application/json", "Content-Type": MERGE_PATCH}
        assert kube._fixed_headers(MERGE_PATCH) is fixed
        assert kube._fixed_headers("application/json") != fixed
    finally:
        await kube.close()


async def test_a_token_is_read_for_every_request() -> None:
    configuration = _configuration("t0")
    kube = Kube(configuration, qps=None)
    try:
        assert kube._fixed_headers(MERGE_PATCH) is None
        assert (await kube._headers(MERGE_PATCH))["authorization"] == "Bearer t0"
        configuration.api_key = {"authorization": "t1"}  # rotated
        assert (await kube._headers(MERGE_PATCH))["authorization"] == "Bearer t1"
    finally:
        await kube.close()


@pytest.mark.parametrize(
    "name", ["w-0", "a.b_c~d", "Upper9", "", "with space", "a/b", "ä", "50%", "x?y#z"]
)
def test_paths_quote_names_as_quote_does(name: str) -> None:
    quoted = quote(name, safe="")
    assert WORKLOADS.path("ns", name, "status") == (
        f"/apis/topogate.dev/v1alpha1/namespaces/ns/workloads/{quoted}/status"
        if name
        else "/apis/topogate.dev/v1alpha1/namespaces/ns/workloads/status"
    )
    assert NODES.path(None, name) == "/api/v1/nodes" + (f"/{quoted}" if name else "")
    assert EVENTS.path(name or "default") == (
        f"/apis/events.k8s.io/v1/namespaces/{quote(name or 'default', safe='')}/events"
    )
