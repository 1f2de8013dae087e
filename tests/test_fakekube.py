"""topogate/testing/fakekube.py: the in-memory API server keeps the rules a real one enforces
(conflicts, the status subresource, JSON-patch tests, watch replay and 410, fault injection),
so that tests of the controller's shells on it mean something."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from topogate.kube.errors import KubeError
from topogate.kube.protocol import KubeApi
from topogate.kube.reflector import Reflector
from topogate.kube.resources import (
    JOBS,
    JSON_PATCH,
    LEASES,
    NODES,
    PODS,
    WORKLOADS,
    Obj,
    Resource,
)
from topogate.runtime.leader import LeaderElector
from topogate.testing.fakekube import Call, FakeKube, json_patch, merge_patch

CONFIGMAPS = Resource("v1", "configmaps")  # no status subresource


def job(name: str = "train", namespace: str = "ml", **labels: str) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {"suspend": True, "parallelism": 2},
    }


def pod(name: str = "p-0", gates: list[str] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"schedulingGates": [{"name": g} for g in gates or []], "containers": []},
        "status": {"phase": "Pending"},
    }


def version(obj: Obj) -> int:
    return int(obj["metadata"]["resourceVersion"])


async def errors_with(status: int, reason: str, call: Any) -> KubeError:
    with pytest.raises(KubeError) as caught:
        await call
    assert (caught.value.status, caught.value.reason) == (status, reason)
    return caught.value


async def events(stream: AsyncIterator[Obj], count: int, seconds: float = 2.0) -> list[Obj]:
    out: list[Obj] = []
    async with asyncio.timeout(seconds):
        while len(out) < count:
            out.append(await anext(stream))
    return out


def summary(evs: list[Obj]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"]["name"]) for e in evs]


def test_it_is_a_kube_api() -> None:
    api: KubeApi = FakeKube()  # checked by mypy: the fake has the transport's methods
    assert api is not None


# -- create, get, delete ------------------------------------------------------------------


async def test_create_sets_server_fields_and_versions_increase() -> None:
    kube = FakeKube()
    first = await kube.create(JOBS, job("a"), "ml")
    second = await kube.create(JOBS, job("b"), "ml")
    meta = first["metadata"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert meta["generation"] == 1
    assert isinstance(meta["resourceVersion"], str)
    assert version(second) > version(first)
    assert first["metadata"]["uid"] != second["metadata"]["uid"]
    assert await kube.get(JOBS, "a", "ml") == first
    assert kube.resource_version == second["metadata"]["resourceVersion"]


async def test_create_of_an_existing_name_is_already_exists() -> None:
    kube = FakeKube()
    await kube.create(JOBS, job(), "ml")
    error = await errors_with(409, "AlreadyExists", kube.create(JOBS, job(), "ml"))
    assert error.conflict
    await kube.create(JOBS, job(namespace="other"), "other")  # another namespace is another name


async def test_create_fills_the_namespace_and_refuses_a_different_one() -> None:
    kube = FakeKube()
    body = job()
    del body["metadata"]["namespace"]
    created = await kube.create(JOBS, body, "ml")
    assert created["metadata"]["namespace"] == "ml"
    await errors_with(400, "BadRequest", kube.create(JOBS, job("x", "ml"), "elsewhere"))


async def test_generate_name() -> None:
    kube = FakeKube()
    created = await kube.create(CONFIGMAPS, {"metadata": {"generateName": "cm-"}, "data": {}}, "ml")
    assert created["metadata"]["name"].startswith("cm-")
    assert len(created["metadata"]["name"]) == len("cm-") + 5


async def test_missing_objects_are_not_found_and_delete_swallows_it() -> None:
    kube = FakeKube()
    error = await errors_with(404, "NotFound", kube.get(JOBS, "nope", "ml"))
    assert error.not_found and 'jobs.batch "nope" not found' in error.message
    await errors_with(404, "NotFound", kube.patch(JOBS, "nope", {"spec": {}}, "ml"))
    await errors_with(404, "NotFound", kube.replace(JOBS, job("nope")))
    await kube.delete(JOBS, "nope", "ml")  # no error, as Kube.delete
    await errors_with(404, "NotFound", kube.request("DELETE", JOBS.path("ml", "nope")))


async def test_delete_removes_and_the_deleted_event_has_a_new_version() -> None:
    kube = FakeKube()
    created = await kube.create(JOBS, job(), "ml")
    stream = kube.watch(JOBS, created["metadata"]["resourceVersion"])
    await kube.delete(JOBS, "train", "ml")
    [deleted] = await events(stream, 1)
    await stream.aclose()
    assert deleted["type"] == "DELETED"
    assert version(deleted["object"]) > version(created)
    assert kube.stored(JOBS, "train", "ml") is None
    await errors_with(404, "NotFound", kube.get(JOBS, "train", "ml"))


async def test_finalizers_hold_a_deleted_object_until_they_are_removed() -> None:
    kube = FakeKube()
    body = job()
    body["metadata"]["finalizers"] = ["topogate.dev/cleanup"]
    await kube.create(JOBS, body, "ml")
    await kube.delete(JOBS, "train", "ml")
    held = await kube.get(JOBS, "train", "ml")
    assert held["metadata"]["deletionTimestamp"]
    await kube.patch(JOBS, "train", {"metadata": {"finalizers": None}}, "ml")
    assert kube.stored(JOBS, "train", "ml") is None


async def test_cluster_scoped_objects_ignore_the_namespace() -> None:
    kube = FakeKube()
    await kube.create(NODES, {"metadata": {"name": "n1", "namespace": "x"}}, None)
    node = await kube.get(NODES, "n1")
    assert "namespace" not in node["metadata"]


# -- optimistic concurrency ---------------------------------------------------------------


async def test_replace_with_a_stale_version_is_a_conflict() -> None:
    kube = FakeKube()
    read = await kube.create(JOBS, job(), "ml")
    read["spec"]["parallelism"] = 3
    written = await kube.replace(JOBS, read)
    assert version(written) > version(read)
    read["spec"]["parallelism"] = 4  # still carries the version first read
    error = await errors_with(409, "Conflict", kube.replace(JOBS, read))
    assert error.conflict and "the object has been modified" in error.message
    assert kube.stored(JOBS, "train", "ml") == written


async def test_replace_without_a_version_is_unconditional() -> None:
    kube = FakeKube()
    await kube.create(JOBS, job(), "ml")
    await kube.patch(JOBS, "train", {"metadata": {"labels": {"x": "1"}}}, "ml")
    body = job()
    body["spec"]["parallelism"] = 5
    written = await kube.replace(JOBS, body)
    assert written["spec"]["parallelism"] == 5


async def test_a_merge_patch_guarded_by_a_stale_version_is_a_conflict() -> None:
    kube = FakeKube()
    read = await kube.create(JOBS, job(), "ml")
    guard = {"metadata": {"resourceVersion": read["metadata"]["resourceVersion"]}}
    await kube.patch(JOBS, "train", {**guard, "spec": {"suspend": False}}, "ml")
    await errors_with(
        409, "Conflict", kube.patch(JOBS, "train", {**guard, "spec": {"suspend": True}}, "ml")
    )
    assert (await kube.get(JOBS, "train", "ml"))["spec"]["suspend"] is False
    # Unguarded, the same patch goes through.
    await kube.patch(JOBS, "train", {"spec": {"suspend": True}}, "ml")
    assert (await kube.get(JOBS, "train", "ml"))["spec"]["suspend"] is True


async def test_a_json_patch_that_sets_a_stale_version_is_a_conflict() -> None:
    kube = FakeKube()
    read = await kube.create(JOBS, job(), "ml")
    await kube.patch(JOBS, "train", {"metadata": {"labels": {"a": "b"}}}, "ml")
    ops = [
        {
            "op": "replace",
            "path": "/metadata/resourceVersion",
            "value": read["metadata"]["resourceVersion"],
        },
        {"op": "replace", "path": "/spec/parallelism", "value": 9},
    ]
    await errors_with(
        409, "Conflict", kube.patch(JOBS, "train", ops, "ml", content_type=JSON_PATCH)
    )


async def test_a_changed_uid_is_a_conflict() -> None:
    kube = FakeKube()
    read = await kube.create(JOBS, job(), "ml")
    read["metadata"]["uid"] = "someone-else"
    await errors_with(409, "Conflict", kube.replace(JOBS, read))


async def test_merge_patch_null_deletes_and_server_fields_are_kept() -> None:
    kube = FakeKube()
    read = await kube.create(JOBS, job(team="a", tier="b"), "ml")
    patched = await kube.patch(
        JOBS, "train", {"metadata": {"labels": {"team": None}, "uid": None}}, "ml"
    )
    assert patched["metadata"]["labels"] == {"tier": "b"}
    assert patched["metadata"]["uid"] == read["metadata"]["uid"]
    assert patched["metadata"]["creationTimestamp"] == read["metadata"]["creationTimestamp"]


async def test_a_write_that_changes_nothing_is_a_no_op() -> None:
    kube = FakeKube()
    read = await kube.create(JOBS, job(), "ml")
    stream = kube.watch(JOBS, read["metadata"]["resourceVersion"], timeout_seconds=0)
    same = await kube.patch(JOBS, "train", {"spec": {"suspend": True}}, "ml")
    assert same == read
    assert [e async for e in stream] == []


async def test_generation_moves_with_the_spec_only() -> None:
    kube = FakeKube()
    await kube.create(JOBS, job(), "ml")
    labelled = await kube.patch(JOBS, "train", {"metadata": {"labels": {"a": "b"}}}, "ml")
    assert labelled["metadata"]["generation"] == 1
    statused = await kube.patch(
        JOBS, "train", {"status": {"active": 1}}, "ml", subresource="status"
    )
    assert statused["metadata"]["generation"] == 1
    spec = await kube.patch(JOBS, "train", {"spec": {"parallelism": 8}}, "ml")
    assert spec["metadata"]["generation"] == 2


# -- the status subresource ---------------------------------------------------------------


async def test_a_status_write_changes_only_status() -> None:
    kube = FakeKube()
    read = await kube.create(JOBS, job(), "ml")
    body = {
        "metadata": {"labels": {"sneaky": "yes"}},
        "spec": {"parallelism": 99},
        "status": {"active": 2},
    }
    written = await kube.patch(JOBS, "train", body, "ml", subresource="status")
    assert written["status"] == {"active": 2}
    assert written["spec"] == read["spec"]
    assert written["metadata"]["labels"] == read["metadata"]["labels"]
    assert version(written) > version(read)
    assert kube.calls[-1] == Call("patch", "jobs/status", "ml", "train", body)


async def test_a_main_write_leaves_status_alone() -> None:
    kube = FakeKube()
    await kube.create(JOBS, job(), "ml")
    await kube.patch(JOBS, "train", {"status": {"active": 2}}, "ml", subresource="status")
    patched = await kube.patch(
        JOBS, "train", {"spec": {"suspend": False}, "status": {"active": 7}}, "ml"
    )
    assert patched["status"] == {"active": 2} and patched["spec"]["suspend"] is False
    whole = await kube.get(JOBS, "train", "ml")
    whole["status"] = {}
    whole["spec"]["parallelism"] = 4
    replaced = await kube.replace(JOBS, whole)
    assert replaced["status"] == {"active": 2} and replaced["spec"]["parallelism"] == 4


async def test_create_drops_status_where_it_is_a_subresource_and_seed_keeps_it() -> None:
    kube = FakeKube()
    created = await kube.create(PODS, pod("a"), "ml")
    assert "status" not in created
    seeded = kube.seed(PODS, pod("b"))
    assert seeded["status"] == {"phase": "Pending"}
    assert [c.name for c in kube.calls] == ["a"]  # seed is not a call


async def test_replace_of_the_status_subresource_is_guarded_too() -> None:
    kube = FakeKube()
    read = await kube.create(
        WORKLOADS, {"metadata": {"name": "w"}, "spec": {"queueName": "q"}}, "ml"
    )
    body = {**read, "spec": {"queueName": "other"}, "status": {"conditions": []}}
    written = await kube.replace(WORKLOADS, body, subresource="status")
    assert written["status"] == {"conditions": []} and written["spec"] == {"queueName": "q"}
    await errors_with(409, "Conflict", kube.replace(WORKLOADS, body, subresource="status"))


async def test_status_of_a_resource_without_the_subresource() -> None:
    kube = FakeKube()
    await kube.create(CONFIGMAPS, {"metadata": {"name": "c"}, "status": {"x": 1}}, "ml")
    await errors_with(
        404, "NotFound", kube.patch(CONFIGMAPS, "c", {"status": {}}, "ml", subresource="status")
    )
    # Without the subresource status is part of the object like any other field.
    patched = await kube.patch(CONFIGMAPS, "c", {"status": {"x": 2}}, "ml")
    assert patched["status"] == {"x": 2}


async def test_status_subresources_are_configurable() -> None:
    kube = FakeKube(status_subresources=["configmaps"])
    await kube.create(JOBS, {**job(), "status": {"active": 1}}, "ml")
    assert (await kube.get(JOBS, "train", "ml"))["status"] == {"active": 1}
    await errors_with(404, "NotFound", kube.patch(JOBS, "train", {}, "ml", subresource="status"))


async def test_the_controllers_guarded_status_write() -> None:
    from topogate.controllers.writes import write_status

    kube = FakeKube()
    read = await kube.create(WORKLOADS, {"metadata": {"name": "w"}, "spec": {}}, "ml")
    await write_status(kube, read, {"conditions": [{"type": "QuotaReserved"}]})
    with pytest.raises(KubeError) as caught:
        await write_status(kube, read, {"conditions": []})  # over the version read: stale
    assert caught.value.conflict
    stored = kube.stored(WORKLOADS, "w", "ml")
    assert stored is not None and stored["status"] == {"conditions": [{"type": "QuotaReserved"}]}


# -- JSON patch ---------------------------------------------------------------------------


async def test_the_ungaters_json_patch() -> None:
    kube = FakeKube()
    read = await kube.create(PODS, pod(gates=["topogate.dev/topology", "other"]), "ml")
    gates = read["spec"]["schedulingGates"]
    ops = [
        {"op": "test", "path": "/spec/schedulingGates", "value": gates},
        {"op": "replace", "path": "/spec/schedulingGates", "value": [{"name": "other"}]},
        {"op": "add", "path": "/spec/nodeSelector", "value": {"rack": "r1"}},
        {"op": "add", "path": "/metadata/annotations", "value": {"topogate.dev/gpus": "0,1"}},
    ]
    written = await kube.patch(PODS, "p-0", ops, "ml", content_type=JSON_PATCH)
    assert written["spec"]["schedulingGates"] == [{"name": "other"}]
    assert written["spec"]["nodeSelector"] == {"rack": "r1"}
    escaped = {"op": "add", "path": "/metadata/annotations/a.b~1c~0d", "value": "v"}
    written = await kube.patch(PODS, "p-0", [escaped], "ml", content_type=JSON_PATCH)
    assert written["metadata"]["annotations"]["a.b/c~d"] == "v"
    # The gates moved on: the same test now fails, and nothing of the patch is applied.
    error = await errors_with(
        422, "Invalid", kube.patch(PODS, "p-0", ops, "ml", content_type=JSON_PATCH)
    )
    assert "testing value /spec/schedulingGates failed" in error.message
    assert kube.stored(PODS, "p-0", "ml") == written


async def test_a_failed_test_leaves_the_object_as_it_was() -> None:
    kube = FakeKube()
    before = await kube.create(JOBS, job(), "ml")
    ops = [
        {"op": "replace", "path": "/spec/parallelism", "value": 5},
        {"op": "test", "path": "/spec/suspend", "value": False},
    ]
    await errors_with(422, "Invalid", kube.patch(JOBS, "train", ops, "ml", content_type=JSON_PATCH))
    assert kube.stored(JOBS, "train", "ml") == before


def test_json_patch_operations() -> None:
    doc = {"a": [1, 2], "b": {"c": True}}
    assert json_patch(doc, [{"op": "add", "path": "/a/-", "value": 3}])["a"] == [1, 2, 3]
    assert json_patch(doc, [{"op": "add", "path": "/a/0", "value": 0}])["a"] == [0, 1, 2]
    assert json_patch(doc, [{"op": "remove", "path": "/a/1"}])["a"] == [1]
    assert json_patch(doc, [{"op": "replace", "path": "/a/1", "value": 9}])["a"] == [1, 9]
    moved = json_patch(doc, [{"op": "move", "from": "/b/c", "path": "/d"}])
    assert moved == {"a": [1, 2], "b": {}, "d": True}
    copied = json_patch(doc, [{"op": "copy", "from": "/a", "path": "/e"}])
    assert copied["e"] == [1, 2]
    assert json_patch(doc, [{"op": "test", "path": "/a/0", "value": 1.0}]) == doc
    assert doc == {"a": [1, 2], "b": {"c": True}}  # the input is never changed
    for bad in (
        [{"op": "test", "path": "/b/c", "value": 1}],  # true is not 1
        [{"op": "remove", "path": "/nope"}],
        [{"op": "replace", "path": "/a/2", "value": 0}],
        [{"op": "add", "path": "/x/y", "value": 0}],
        [{"op": "add", "path": "/a/01", "value": 0}],
    ):
        with pytest.raises(KubeError) as caught:
            json_patch(doc, bad)
        assert caught.value.status == 422, bad
    for malformed in (
        {"op": "add"},
        [{"op": "frobnicate", "path": "/a"}],
        [{"op": "add", "path": "/a"}],
    ):
        with pytest.raises(KubeError) as caught:
            json_patch(doc, malformed)
        assert caught.value.status == 400, malformed


def test_merge_patch() -> None:
    target = {"a": {"b": 1, "c": 2}, "d": [1], "e": 1}
    patched = merge_patch(target, {"a": {"b": None, "x": {"y": 1}}, "d": [2], "e": None})
    assert patched == {"a": {"c": 2, "x": {"y": 1}}, "d": [2]}
    assert target == {"a": {"b": 1, "c": 2}, "d": [1], "e": 1}


# -- list ---------------------------------------------------------------------------------


async def test_list_with_label_selector_and_the_current_version() -> None:
    kube = FakeKube()
    await kube.create(JOBS, job("a", team="x", tier="1"), "ml")
    await kube.create(JOBS, job("b", team="x"), "ml")
    await kube.create(JOBS, job("c", "other", team="y"), "other")
    page = await kube.list(JOBS, labelSelector="team=x,tier=1")
    assert [i["metadata"]["name"] for i in page["items"]] == ["a"]
    assert page["metadata"]["resourceVersion"] == kube.resource_version
    assert page["kind"] == "JobList" and "kind" not in page["items"][0]
    assert len((await kube.list(JOBS))["items"]) == 3
    assert len((await kube.list(JOBS, "ml"))["items"]) == 2
    assert len((await kube.list(JOBS, labelSelector="team!=x"))["items"]) == 1
    assert len((await kube.list(JOBS, labelSelector="tier"))["items"]) == 1
    assert len((await kube.list(JOBS, labelSelector="!tier"))["items"]) == 2
    assert len((await kube.list(JOBS, fieldSelector="metadata.namespace=other"))["items"]) == 1
    paged = await kube.list(JOBS, limit=1, **{"continue": None})
    assert len(paged["items"]) == 3 and not paged["metadata"].get("continue")


# -- watch --------------------------------------------------------------------------------


async def test_watch_replays_after_the_version_then_streams_live() -> None:
    kube = FakeKube()
    await kube.create(JOBS, job("old"), "ml")
    since = kube.resource_version
    await kube.create(JOBS, job("a"), "ml")
    await kube.patch(JOBS, "a", {"spec": {"parallelism": 3}}, "ml")
    async with contextlib.aclosing(kube.watch(JOBS, since)) as stream:
        replayed = await events(stream, 2)
        assert summary(replayed) == [("ADDED", "a"), ("MODIFIED", "a")]
        assert kube.open_watches == 1
        await kube.delete(JOBS, "old", "ml")
        await kube.create(PODS, pod(), "ml")  # another resource: not on this watch
        await kube.create(JOBS, job("b"), "ml")
        live = await events(stream, 2)
        assert summary(live) == [("DELETED", "old"), ("ADDED", "b")]
        versions = [version(e["object"]) for e in replayed + live]
        assert versions == sorted(versions)
    assert kube.open_watches == 0


async def test_watch_events_are_copies() -> None:
    kube = FakeKube()
    since = kube.resource_version
    await kube.create(JOBS, job(), "ml")
    [event] = [e async for e in kube.watch(JOBS, since, timeout_seconds=0)]
    event["object"]["spec"]["parallelism"] = 100
    assert (await kube.get(JOBS, "train", "ml"))["spec"]["parallelism"] == 2


async def test_watch_from_empty_version_starts_with_the_current_objects() -> None:
    kube = FakeKube()
    await kube.create(JOBS, job("a"), "ml")
    await kube.patch(JOBS, "a", {"spec": {"parallelism": 3}}, "ml")
    got = [e async for e in kube.watch(JOBS, "", timeout_seconds=0)]
    assert summary(got) == [("ADDED", "a")]
    assert got[0]["object"]["spec"]["parallelism"] == 3


async def test_watch_ends_at_its_timeout() -> None:
    kube = FakeKube()
    async with asyncio.timeout(3):
        got = [e async for e in kube.watch(JOBS, kube.resource_version, timeout_seconds=1)]
    assert got == []


async def test_close_watches_ends_open_streams_cleanly_or_with_an_error() -> None:
    kube = FakeKube()
    stream = kube.watch(JOBS, kube.resource_version)
    task = asyncio.create_task(events(stream, 1))
    await kube.wait_for_watches()
    kube.close_watches()
    with pytest.raises(StopAsyncIteration):
        await task
    stream = kube.watch(JOBS, kube.resource_version)
    task = asyncio.create_task(events(stream, 1))
    await kube.wait_for_watches()
    kube.close_watches(aiohttp.ClientPayloadError("reset"))
    with pytest.raises(aiohttp.ClientPayloadError):
        await task
    assert kube.open_watches == 0


async def test_a_compacted_version_is_gone() -> None:
    kube = FakeKube()
    await kube.create(JOBS, job("a"), "ml")
    early = kube.resource_version
    await kube.create(JOBS, job("b"), "ml")
    kube.compact()
    with pytest.raises(KubeError) as caught:
        await anext(kube.watch(JOBS, early))
    assert (caught.value.status, caught.value.reason) == (410, "Expired") and caught.value.gone
    # From the compaction point on, watching works.
    await kube.create(JOBS, job("c"), "ml")
    got = [e async for e in kube.watch(JOBS, str(int(early) + 1), timeout_seconds=0)]
    assert summary(got) == [("ADDED", "c")]


async def test_a_selector_watch_sees_objects_enter_and_leave() -> None:
    kube = FakeKube()
    since = kube.resource_version
    await kube.create(JOBS, job("a", team="x"), "ml")
    await kube.create(JOBS, job("b"), "ml")
    await kube.patch(JOBS, "a", {"metadata": {"labels": {"team": "y"}}}, "ml")
    await kube.patch(JOBS, "b", {"metadata": {"labels": {"team": "x"}}}, "ml")
    await kube.patch(JOBS, "b", {"spec": {"parallelism": 1}}, "ml")
    got = [e async for e in kube.watch(JOBS, since, timeout_seconds=0, labelSelector="team=x")]
    assert summary(got) == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "b"), ("MODIFIED", "b")]


async def test_bookmarks_carry_the_current_version() -> None:
    kube = FakeKube()
    await kube.create(JOBS, job(), "ml")
    async with contextlib.aclosing(kube.watch(JOBS, kube.resource_version)) as stream:
        first = asyncio.create_task(events(stream, 1))  # the watch opens on first read
        await kube.wait_for_watches()
        kube.bookmark()
        [mark] = await first
    assert mark["type"] == "BOOKMARK"
    assert mark["object"]["metadata"]["resourceVersion"] == kube.resource_version
    assert mark["object"]["kind"] == "Job"


async def test_the_reflector_lists_watches_and_relists_after_410() -> None:
    kube = FakeKube()
    seen: list[tuple[str | None, str | None]] = []
    changed = asyncio.Event()

    def on_change(old: Obj | None, new: Obj | None) -> None:
        name = (new or old or {}).get("metadata", {}).get("name")
        seen.append(("old" if old else None, name if new else None))
        changed.set()

    async def until(done: Any) -> None:
        while not done():
            changed.clear()
            await changed.wait()

    kube.seed(JOBS, job("a"))
    transport: Any = kube  # the reflector is typed on the concrete client
    reflector = Reflector(transport, JOBS, on_change)
    task = asyncio.create_task(reflector.run())
    try:
        async with asyncio.timeout(5):
            await reflector.synced.wait()
            await kube.create(JOBS, job("b"), "ml")
            await until(lambda: "ml/b" in reflector.store)
            # The watch breaks while the history it would resume from is compacted away.
            await kube.delete(JOBS, "a", "ml")
            kube.compact()
            kube.close_watches(aiohttp.ClientPayloadError("reset"))
            await until(lambda: "ml/a" not in reflector.store)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert sorted(reflector.store) == ["ml/b"]
    assert seen[-1] == ("old", None)
    assert [c.method for c in kube.calls].count("list") >= 1


# -- fault injection and the call log -----------------------------------------------------


async def test_injected_faults_are_raised_then_the_fake_recovers() -> None:
    kube = FakeKube()
    kube.fail_next("create", KubeError(500, "InternalError", "etcd"), times=2)
    kube.fail_next("create", aiohttp.ClientConnectionError("reset"))
    kube.fail_next("get", TimeoutError())
    await errors_with(500, "InternalError", kube.create(JOBS, job(), "ml"))
    await errors_with(500, "InternalError", kube.create(JOBS, job(), "ml"))
    with pytest.raises(aiohttp.ClientConnectionError):
        await kube.create(JOBS, job(), "ml")
    assert kube.stored(JOBS, "train", "ml") is None  # failed before reaching the store
    with pytest.raises(TimeoutError):
        await kube.get(JOBS, "train", "ml")
    await kube.create(JOBS, job(), "ml")
    assert [c.method for c in kube.calls] == ["create"] * 3 + ["get", "create"]


async def test_faults_can_target_one_resource() -> None:
    kube = FakeKube()
    kube.fail_next("patch", KubeError(503, "ServiceUnavailable", ""), resource=WORKLOADS)
    await kube.create(JOBS, job(), "ml")
    await kube.create(WORKLOADS, {"metadata": {"name": "w"}}, "ml")
    await kube.patch(JOBS, "train", {"spec": {"suspend": False}}, "ml")  # not targeted
    await errors_with(
        503,
        "ServiceUnavailable",
        kube.patch(WORKLOADS, "w", {"status": {"x": 1}}, "ml", subresource="status"),
    )
    assert kube.calls_of("patch", WORKLOADS) == [
        Call("patch", "workloads/status", "ml", "w", {"status": {"x": 1}})
    ]


async def test_a_fault_after_the_write_loses_only_the_answer() -> None:
    kube = FakeKube()
    kube.fail_next("create", TimeoutError(), after_write=True)
    with pytest.raises(TimeoutError):
        await kube.create(LEASES, {"metadata": {"name": "l"}, "spec": {}}, "ml")
    assert kube.stored(LEASES, "l", "ml") is not None  # the retry will be AlreadyExists
    await errors_with(409, "AlreadyExists", kube.create(LEASES, {"metadata": {"name": "l"}}, "ml"))


async def test_watch_and_delete_faults() -> None:
    kube = FakeKube()
    kube.fail_next("watch", KubeError(404, "NotFound", "no such CRD"))
    kube.fail_next("delete", KubeError(404, "NotFound", ""))
    kube.fail_next("delete", KubeError(500, "InternalError", ""))
    stream = kube.watch(JOBS, "0")
    with pytest.raises(KubeError):
        await anext(stream)
    assert kube.open_watches == 0
    await kube.delete(JOBS, "x", "ml")  # a 404 is swallowed, injected or not
    await errors_with(500, "InternalError", kube.delete(JOBS, "x", "ml"))


def test_fail_next_validates() -> None:
    kube = FakeKube()
    with pytest.raises(ValueError):
        kube.fail_next("update", KubeError(500, "", ""))
    with pytest.raises(ValueError):
        kube.fail_next("get", KubeError(500, "", ""), after_write=True)


async def test_calls_record_what_was_sent() -> None:
    kube = FakeKube()
    body = job()
    await kube.create(JOBS, body, "ml")
    body["spec"]["parallelism"] = 7  # the recorded body is a copy
    await kube.get(JOBS, "train", "ml")
    await kube.delete(JOBS, "train", "ml")
    assert kube.calls == [
        Call("create", "jobs", "ml", "train", job()),
        Call("get", "jobs", "ml", "train", None),
        Call("delete", "jobs", "ml", "train", None),
    ]


async def test_request_dispatches_paths_as_kube_builds_them() -> None:
    kube = FakeKube()
    created = await kube.request("POST", JOBS.path("ml"), job())
    assert created["metadata"]["name"] == "train"
    assert await kube.request("GET", JOBS.path("ml", "train")) == created
    listed = await kube.request("GET", JOBS.path(), params={"labelSelector": None})
    assert len(listed["items"]) == 1
    patched = await kube.request(
        "PATCH",
        JOBS.path("ml", "train", "status"),
        {"status": {"active": 1}},
        content_type="application/merge-patch+json",
    )
    assert patched["status"] == {"active": 1}
    await kube.request("DELETE", JOBS.path("ml", "train"))
    assert kube.stored(JOBS, "train", "ml") is None
    await kube.close()


# -- the controller's own users of the seam -----------------------------------------------


async def test_two_electors_race_for_one_lease() -> None:
    kube = FakeKube()
    transport: Any = kube  # the elector is typed on the concrete client
    a = LeaderElector(transport, "kube-system", "topogate", "a")
    b = LeaderElector(transport, "kube-system", "topogate", "b")
    assert await a.try_acquire_or_renew()  # created
    assert not await b.try_acquire_or_renew()  # held by a and not expired
    # A renewal that loses a race (409) is a lost attempt, not an error.
    kube.fail_next("replace", KubeError(409, "Conflict", "raced"), resource=LEASES)
    assert not await a.try_acquire_or_renew()
    assert await a.try_acquire_or_renew()
    # The race itself: b's copy was read before a's renewal, so b's PUT is refused.
    stale = await kube.get(LEASES, "topogate", "kube-system")
    assert await a.try_acquire_or_renew()
    stale["spec"]["holderIdentity"] = "b"
    await errors_with(409, "Conflict", kube.replace(LEASES, stale))
    # Released, the Lease is b's at its next try.
    assert await a.release()
    assert await b.try_acquire_or_renew()
    lease = kube.stored(LEASES, "topogate", "kube-system")
    assert lease is not None
    assert (lease["spec"]["holderIdentity"], lease["spec"]["leaseTransitions"]) == ("b", 1)
    assert [c.method for c in kube.calls_of("replace")].count("replace") >= 4
