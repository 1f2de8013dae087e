"""The webhook server's API calls against FakeKube: the shared CA's Secret, the webhook
configurations (registration, CA injection), the standalone webhook's view of the queues, and
the whole `serving` with a CA Secret."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.kit import review_for
from topogate.kube.blocking import OnLoop
from topogate.kube.errors import KubeError
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    HYPERNODES,
    LOCAL_QUEUES,
    MUTATING_WEBHOOKS,
    RESOURCE_FLAVORS,
    SECRETS,
    TOPOLOGIES,
    VALIDATING_WEBHOOKS,
)
from topogate.testing.controlplane import free_port
from topogate.testing.fakekube import FakeKube
from topogate.webhooks.catalog import ApiView
from topogate.webhooks.configuration import configurations
from topogate.webhooks.options import ClientAuth
from topogate.webhooks.review import Review
from topogate.webhooks.serving import SecretStore, inject_ca, register, serving
from topogate.webhooks.sharedca import CA_CERT, CA_KEY, ensure_ca

PEM = b"-----BEGIN CERTIFICATE-----\nTEST\n"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# --- the blocking seams reach the async client on its loop ----------------------------------


async def test_a_blocking_call_on_the_loop_itself_is_refused_not_a_deadlock() -> None:
    kube = FakeKube()
    on_loop = OnLoop(asyncio.get_running_loop())
    call = kube.get(SECRETS, "x", "ns")
    with pytest.raises(RuntimeError, match="run it in a thread"):
        on_loop(call)
    assert kube.calls == []  # the coroutine was closed, never run
    listed = await asyncio.to_thread(on_loop, kube.list(SECRETS, "ns"))  # from a thread: fine
    assert listed["items"] == [] and len(kube.calls) == 1


# --- the shared CA's Secret ------------------------------------------------------------------


async def test_the_secret_store_reads_creates_and_replaces_with_the_api_servers_conflicts() -> None:
    kube = FakeKube()
    store = SecretStore(kube, OnLoop(asyncio.get_running_loop()), "topogate-system", "ca")
    assert await asyncio.to_thread(store.read) is None
    assert await asyncio.to_thread(store.create, {CA_CERT: b"one"}) is True
    assert await asyncio.to_thread(store.create, {CA_CERT: b"two"}) is False  # 409 exists
    stored = await asyncio.to_thread(store.read)
    assert stored is not None and stored.data == {CA_CERT: b"one"}
    secret = kube.stored(SECRETS, "ca", "topogate-system")
    assert secret is not None
    assert secret["data"] == {CA_CERT: base64.b64encode(b"one").decode()}
    assert secret["metadata"]["labels"] == {"app.kubernetes.io/name": "topogate"}
    assert await asyncio.to_thread(store.replace, {CA_CERT: b"three"}, stored.version) is True
    # The version read before that replace is stale now: another replica's write wins.
    assert await asyncio.to_thread(store.replace, {CA_CERT: b"four"}, stored.version) is False
    again = await asyncio.to_thread(store.read)
    assert again is not None and again.data == {CA_CERT: b"three"}


async def test_a_secret_store_failure_other_than_a_conflict_is_raised() -> None:
    kube = FakeKube()
    store = SecretStore(kube, OnLoop(asyncio.get_running_loop()), "topogate-system", "ca")
    kube.fail_next("get", ConnectionResetError("reset"))
    with pytest.raises(ConnectionResetError):
        await asyncio.to_thread(store.read)
    kube.fail_next("create", KubeError(403, "Forbidden", "secrets is forbidden"))
    with pytest.raises(KubeError) as error:
        await asyncio.to_thread(store.create, {CA_CERT: b"x"})
    assert error.value.status == 403
    assert kube.stored(SECRETS, "ca", "topogate-system") is None


async def test_two_replicas_racing_on_the_secret_hold_one_ca() -> None:
    kube = FakeKube()
    loop = asyncio.get_running_loop()
    stores = [SecretStore(kube, OnLoop(loop), "topogate-system", "ca") for _ in range(2)]
    first, second = await asyncio.gather(
        *(asyncio.to_thread(ensure_ca, store, _now()) for store in stores)
    )
    assert first == second
    secret = kube.stored(SECRETS, "ca", "topogate-system")
    assert secret is not None
    assert base64.b64decode(secret["data"][CA_KEY]) == first.ca.key_pem


# --- the webhook configurations --------------------------------------------------------------


async def test_register_creates_both_configurations_then_replaces_them() -> None:
    kube = FakeKube()
    await register(kube, "https://127.0.0.1:9443", PEM)
    for resource in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
        stored = kube.stored(resource, "topogate")
        assert stored is not None
        hooks = stored["webhooks"]
        assert hooks and all(
            h["clientConfig"]["url"].startswith("https://127.0.0.1:9443/") for h in hooks
        )
    # Registered again (a new URL, as after a restart): 409, then a replace naming the version.
    await register(kube, "https://10.0.0.1:9443", PEM)
    assert [c.method for c in kube.calls if c.resource == MUTATING_WEBHOOKS.plural] == [
        "create",
        "create",
        "get",
        "replace",
    ]
    stored = kube.stored(MUTATING_WEBHOOKS, "topogate")
    assert stored is not None
    assert {h["clientConfig"]["url"].split("/")[2] for h in stored["webhooks"]} == {"10.0.0.1:9443"}


async def test_register_raises_what_is_not_a_conflict() -> None:
    kube = FakeKube()
    kube.fail_next(
        "create", KubeError(403, "Forbidden", "cannot create"), resource=MUTATING_WEBHOOKS
    )
    with pytest.raises(KubeError) as error:
        await register(kube, "https://127.0.0.1:9443", PEM)
    assert error.value.status == 403
    kube.fail_next("replace", ConnectionResetError("reset"))
    await register(kube, "https://127.0.0.1:9443", PEM)  # creates what the 403 left out
    with pytest.raises(ConnectionResetError):
        await register(kube, "https://127.0.0.1:9443", PEM)


async def test_inject_ca_sets_every_hooks_bundle_and_nothing_else() -> None:
    kube = FakeKube()
    mutating, validating = configurations(service=("topogate-system", "topogate-webhook"))
    kube.seed(MUTATING_WEBHOOKS, mutating)
    kube.seed(VALIDATING_WEBHOOKS, validating)
    await inject_ca(kube, "topogate", PEM)
    for resource, before in ((MUTATING_WEBHOOKS, mutating), (VALIDATING_WEBHOOKS, validating)):
        after = kube.stored(resource, "topogate")
        assert after is not None
        assert len(after["webhooks"]) == len(before["webhooks"]) > 0
        for hook, old in zip(after["webhooks"], before["webhooks"], strict=True):
            assert base64.b64decode(hook["clientConfig"].pop("caBundle")) == PEM
            old_config = {k: v for k, v in old["clientConfig"].items() if k != "caBundle"}
            assert hook == {**old, "clientConfig": old_config}


async def test_inject_ca_into_a_missing_configuration_is_an_error() -> None:
    kube = FakeKube()
    with pytest.raises(KubeError) as error:
        await inject_ca(kube, "topogate", PEM)
    assert error.value.not_found


# --- the standalone webhook's view ------------------------------------------------------------


def _seed_queue(kube: FakeKube) -> None:
    quota = {"name": "cpu", "nominalQuota": 8}
    kube.seed(
        CLUSTER_QUEUES,
        {
            "metadata": {"name": "cq"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "tas", "resources": [quota]}],
                    }
                ]
            },
        },
    )
    kube.seed(
        LOCAL_QUEUES, {"metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}}
    )
    kube.seed(
        RESOURCE_FLAVORS,
        {
            "metadata": {"name": "tas"},
            "spec": {"nodeLabels": {"pool": "gpu"}, "topologyName": "dc"},
        },
    )
    kube.seed(
        TOPOLOGIES,
        {"metadata": {"name": "dc"}, "spec": {"levels": [{"nodeLabel": "example.com/rack"}]}},
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_the_api_view_lists_the_queues_once_per_ttl_not_once_per_review() -> None:
    kube = FakeKube()
    _seed_queue(kube)
    clock = Clock()
    view = ApiView(kube, ttl=5.0, clock=clock)
    job = review_for({"metadata": {"labels": {}}}, "Job", "batch", namespace="ml")
    for queue in ["q"] + [f"made-up-{i}" for i in range(200)]:  # new names cost nothing
        found = (await view(Review.parse(job))).catalog_for("ml", queue)
        assert found is not None and found.cluster_queue("ml", "q")[0] == "cq"
        assert found.flavor_topology("cq") == "dc" and "dc" in found.sources
    assert kube.calls_of("get") == []
    assert len(kube.calls_of("list")) == 4  # ClusterQueues, LocalQueues, flavors, topologies
    assert view.refreshes == 1
    # After the TTL the next review is answered from the snapshot while one refresh runs.
    clock.now += 5.0
    kube.seed(
        LOCAL_QUEUES,
        {"metadata": {"name": "new", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}},
    )
    await asyncio.gather(*(view.catalog() for _ in range(50)))
    await asyncio.sleep(0.01)
    assert view.refreshes == 2 and len(kube.calls_of("list")) == 8
    refreshed = await view.catalog()
    assert refreshed is not None and refreshed.cluster_queue("ml", "new")[0] == "cq"


async def test_the_api_view_knows_nothing_when_the_server_refuses_and_retries_after_the_ttl() -> (
    None
):
    kube = FakeKube()
    _seed_queue(kube)
    clock = Clock()
    view = ApiView(kube, ttl=5.0, clock=clock)
    kube.fail_next("list", KubeError(500, "InternalError", "etcd"), resource=CLUSTER_QUEUES)
    assert await view.catalog() is None
    assert await view.catalog() is None  # not asked again before the TTL
    assert view.refreshes == 1
    clock.now += 5.0
    await view.catalog()
    await asyncio.sleep(0.01)
    assert await view.catalog() is not None
    hypernode = review_for({"metadata": {"name": "h"}}, "HyperNode", "topology.volcano.sh")
    assert (await view(Review.parse(hypernode))).hypernodes() == []
    kube.seed(HYPERNODES, {"metadata": {"name": "h"}, "spec": {"tier": 1}})
    listed = (await view(Review.parse(hypernode))).hypernodes() or []
    assert [h["metadata"]["name"] for h in listed] == ["h"]
    kube.fail_next("list", KubeError(404, "NotFound", "no HyperNode CRD"))
    assert (await view(Review.parse(hypernode))).hypernodes() is None


# --- serving with a CA Secret, registered ------------------------------------------------------


async def test_serving_keeps_its_ca_in_the_secret_and_registers_its_bundle(tmp_path: Path) -> None:
    kube = FakeKube()
    port = free_port()
    async with serving(
        "127.0.0.1",
        port,
        tmp_path,
        dns_names=[],
        ips=["127.0.0.1"],
        kube=kube,
        register_url=f"https://127.0.0.1:{port}",
        ca_secret=("topogate-system", "webhook-ca"),
    ):
        bundle = (tmp_path / "ca.crt").read_bytes()
        secret = kube.stored(SECRETS, "webhook-ca", "topogate-system")
        assert secret is not None and base64.b64decode(secret["data"][CA_CERT]) == bundle
        for resource in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
            stored = kube.stored(resource, "topogate")
            assert stored is not None
            assert {
                base64.b64decode(h["clientConfig"]["caBundle"]) for h in stored["webhooks"]
            } == {bundle}
        # The server answers over the certificate issued from the Secret's CA.
        context = ssl.create_default_context(cadata=bundle.decode())
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer: Any = await reader.read()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 200")


async def test_serving_fails_to_start_when_the_secret_cannot_be_read(tmp_path: Path) -> None:
    kube = FakeKube()
    kube.fail_next("get", ConnectionResetError("reset"), resource=SECRETS)
    with pytest.raises(ConnectionResetError):
        async with serving(
            "127.0.0.1",
            free_port(),
            tmp_path,
            dns_names=[],
            ips=["127.0.0.1"],
            kube=kube,
            ca_secret=("topogate-system", "webhook-ca"),
        ):
            pass
    assert kube.calls_of("create") == []


async def test_the_standalone_webhook_validates_against_the_queues_it_reads(tmp_path: Path) -> None:
    """No view given: the server reads the queues from the API server (ApiView, a snapshot)
    to learn which topology the job's queue gives it."""
    kube = FakeKube()
    _seed_queue(kube)
    port = free_port()
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "template": {
                "metadata": {
                    "annotations": {"kueue.x-k8s.io/podset-required-topology": "example.com/zone"}
                },
                "spec": {"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Never"},
            }
        },
    }
    review = review_for(job, "Job", "batch", namespace="ml")
    # Told to anyone here: this test reads the message, not who may (test_webhook_auth.py).
    everyone = ClientAuth(anonymous_details=True)
    async with serving(
        "127.0.0.1",
        port,
        tmp_path,
        dns_names=[],
        ips=["127.0.0.1"],
        kube=kube,
        client_auth=everyone,
    ):
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        async with aiohttp.ClientSession() as session:

            async def answer() -> dict[str, Any]:
                url = f"https://127.0.0.1:{port}/validate"
                async with session.post(url, json=review, ssl=context) as response:
                    body = await response.json()
                    verdict: dict[str, Any] = body["response"]
                    return verdict

            refused = await answer()
            assert refused["allowed"] is False and refused["status"]["code"] == 422
            message = refused["status"]["message"]
            assert "'example.com/zone' is not a level of topology 'dc'" in message
            # The next reviews, any queue named: no API call, the snapshot answers.
            lists = len(kube.calls)
            for _ in range(20):
                assert (await answer())["allowed"] is False
            assert len(kube.calls) == lists
            # A queue unknown to the snapshot: the job's own rules alone.
            review["request"]["namespace"] = job["metadata"]["namespace"] = "other"
            assert (await answer())["allowed"] is True
            assert len(kube.calls) == lists


async def test_serving_freezes_the_objects_made_before_it_so_collections_stay_short(
    tmp_path: Path,
) -> None:
    """A full garbage collection over the imports' objects stopped the event loop for
    100-150 ms; frozen, collections walk only what was made since (the figures:
    hack/bench_reliability.py)."""
    import gc

    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        async with serving(
            "127.0.0.1", free_port(), tmp_path, dns_names=[], ips=["127.0.0.1"], kube=None
        ):
            assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
