"""cache/reflector.py through its transport seam: a scripted list/watch stand-in, no cluster.

Each test scripts the pages the list answers and the events each watch yields; when the script
runs out, the stand-in's next call blocks forever and says so, and the test cancels ``run()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import aiohttp
import pytest

from topogate.kube.client import Kube
from topogate.kube.errors import KubeError
from topogate.kube.reflector import Reflector
from topogate.kube.resources import JOBS, Obj, Resource

Step = Obj | BaseException

GONE = KubeError(410, "Expired", "too old resource version: 10 (25)")


class ScriptedKube:
    """The two calls Reflector makes, answered from a script and recorded."""

    def __init__(self, lists: Sequence[Step], watches: Sequence[Sequence[Step]] = ()) -> None:
        self._lists: deque[Step] = deque(lists)
        self._watches: deque[Sequence[Step]] = deque(watches)
        self.list_calls: deque[dict[str, Any]] = deque()
        self.watch_calls: deque[tuple[str, dict[str, Any]]] = deque()
        self.resources: set[Resource] = set()
        self.exhausted = asyncio.Event()  # the script ran out; the next call hangs
        self._never = asyncio.Event()

    async def _hang(self) -> None:
        self.exhausted.set()
        await self._never.wait()

    async def list(self, resource: Resource, namespace: str | None = None, **params: Any) -> Obj:
        assert namespace is None
        self.resources.add(resource)
        self.list_calls.append(dict(params))
        if not self._lists:
            await self._hang()
        step = self._lists.popleft()
        if isinstance(step, BaseException):
            raise step
        return step

    async def watch(
        self, resource: Resource, resource_version: str, **params: Any
    ) -> AsyncIterator[Obj]:
        self.resources.add(resource)
        self.watch_calls.append((resource_version, dict(params)))
        if not self._watches:
            await self._hang()
        for step in self._watches.popleft():
            if isinstance(step, BaseException):
                raise step
            yield step

    @property
    def watched_versions(self) -> Sequence[str]:
        return [version for version, _ in self.watch_calls]


class Log:
    """on_change and on_relist, in the order they were called."""

    def __init__(self) -> None:
        self.entries: list[tuple[Obj | None, Obj | None] | str] = []

    def change(self, old: Obj | None, new: Obj | None) -> None:
        self.entries.append((old, new))

    def relist(self) -> None:
        self.entries.append("relist")

    @property
    def changes(self) -> list[tuple[Obj | None, Obj | None]]:
        return [e for e in self.entries if not isinstance(e, str)]

    @property
    def relists(self) -> int:
        return sum(1 for e in self.entries if e == "relist")

    def clear(self) -> None:
        self.entries.clear()


def job(name: str, rv: str, namespace: str | None = "ml", **spec: Any) -> Obj:
    meta: Obj = {"name": name, "resourceVersion": rv}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": dict(spec)}


def page(items: Sequence[Obj], rv: str = "", token: str | None = None) -> Obj:
    meta: Obj = {"resourceVersion": rv}
    if token is not None:
        meta["continue"] = token
    return {"kind": "JobList", "metadata": meta, "items": list(items)}


def event(kind: str, obj: Obj) -> Obj:
    return {"type": kind, "object": obj}


def bookmark(rv: str) -> Obj:
    return event("BOOKMARK", {"kind": "Job", "metadata": {"resourceVersion": rv}})


def short(change: tuple[Obj | None, Obj | None]) -> tuple[str | None, str | None]:
    """(name@rv of old, name@rv of new), for comparing changes regardless of their order."""

    def one(obj: Obj | None) -> str | None:
        if obj is None:
            return None
        return f"{obj['metadata']['name']}@{obj['metadata']['resourceVersion']}"

    return one(change[0]), one(change[1])


def reflector(kube: ScriptedKube, log: Log, **kwargs: Any) -> Reflector:
    return Reflector(cast(Kube, kube), JOBS, log.change, on_relist=log.relist, **kwargs)


async def drive(ref: Reflector, kube: ScriptedKube) -> None:
    """Run the reflector until the script is exhausted, then cancel it."""
    task = asyncio.create_task(ref.run())
    waiter = asyncio.create_task(kube.exhausted.wait())
    try:
        done, _ = await asyncio.wait(
            {task, waiter}, timeout=2.0, return_when=asyncio.FIRST_COMPLETED
        )
        if task in done:
            task.result()  # raises what ended run(), which must never end by itself
            pytest.fail("Reflector.run() returned")
        assert waiter in done, "the script was not exhausted in time"
    finally:
        for t in (task, waiter):
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t


# -- the initial list --------------------------------------------------------------------


async def test_initial_list_is_paged_and_merged() -> None:
    a, b, c, d = job("a", "3"), job("b", "4"), job("c", "5"), job("d", "6")
    node = job("cluster-wide", "7", namespace=None)
    kube = ScriptedKube(
        [
            page([a, b], rv="99", token="t1"),
            page([c, d], rv="99", token="t2"),
            page([node], rv="100"),
        ]
    )
    log = Log()
    ref = reflector(
        kube, log, page_size=2, label_selector="team=ml", field_selector="metadata.name!=x"
    )
    await drive(ref, kube)

    selectors = {"labelSelector": "team=ml", "fieldSelector": "metadata.name!=x"}
    assert list(kube.list_calls) == [
        {"limit": 2, "continue": None, **selectors},
        {"limit": 2, "continue": "t1", **selectors},
        {"limit": 2, "continue": "t2", **selectors},
    ]
    assert kube.resources == {JOBS}
    assert ref.synced.is_set()
    assert ref.resource_version == "100"
    assert ref.store == {"ml/a": a, "ml/b": b, "ml/c": c, "ml/d": d, "cluster-wide": node}
    assert log.entries == ["relist", (None, a), (None, b), (None, c), (None, d), (None, node)]
    # The watch starts from the list's version, with the same selectors.
    assert list(kube.watch_calls) == [("100", selectors)]


async def test_no_selectors_means_no_selector_params() -> None:
    kube = ScriptedKube([page([], rv="5")])
    ref = reflector(kube, Log())
    await drive(ref, kube)
    assert list(kube.list_calls) == [{"limit": 500, "continue": None}]
    assert list(kube.watch_calls) == [("5", {})]
    assert ref.synced.is_set() and ref.store == {}


async def test_not_synced_before_the_list_answers() -> None:
    kube = ScriptedKube([])  # the list never answers
    ref = reflector(kube, Log())
    await drive(ref, kube)
    assert not ref.synced.is_set()
    assert not kube.watch_calls


# -- the watch ---------------------------------------------------------------------------


async def test_watch_events_update_the_store_with_the_right_old_object() -> None:
    a, b = job("a", "1"), job("b", "2")
    c, a2, b_deleted = job("c", "11"), job("a", "12", parallelism=2), job("b", "13")
    stray = job("stray", "14")
    kube = ScriptedKube(
        [page([a, b], rv="10")],
        [
            [
                event("ADDED", c),
                event("MODIFIED", a2),
                event("DELETED", b_deleted),
                event("MODIFIED", stray),  # never seen: reported as new
            ]
        ],
    )
    log = Log()
    ref = reflector(kube, log)
    await drive(ref, kube)

    assert ref.store == {"ml/a": a2, "ml/c": c, "ml/stray": stray}
    assert ref.resource_version == "14"
    changes = log.changes[2:]
    assert len(changes) == 4
    assert changes[0][0] is None and changes[0][1] is c
    assert changes[1][0] is a and changes[1][1] is a2
    # The old object of a delete is the stored one, not the event's final state.
    assert changes[2][0] is b and changes[2][1] is None
    assert changes[3][0] is None and changes[3][1] is stray
    assert log.relists == 1


async def test_bookmark_only_advances_the_version() -> None:
    a = job("a", "1")
    kube = ScriptedKube([page([a], rv="10")], [[bookmark("50")]])
    log = Log()
    ref = reflector(kube, log)
    await drive(ref, kube)

    assert log.entries == ["relist", (None, a)]
    assert ref.store == {"ml/a": a}
    assert ref.resource_version == "50"
    # The next watch resumes from the bookmark.
    assert kube.watched_versions == ["10", "50"]


async def test_a_watch_that_ends_is_resumed_from_the_last_version() -> None:
    x1, x2, x3 = job("x", "11"), job("x", "12"), job("x", "13")
    kube = ScriptedKube(
        [page([], rv="10")],
        [
            [event("ADDED", x1), event("MODIFIED", x2)],
            [],  # the server closed the stream without events
            [event("MODIFIED", x3)],
        ],
    )
    log = Log()
    ref = reflector(kube, log)
    await drive(ref, kube)

    assert kube.watched_versions == ["10", "12", "12", "13"]
    assert len(kube.list_calls) == 1 and log.relists == 1
    assert [short(ch) for ch in log.changes] == [
        (None, "x@11"),
        ("x@11", "x@12"),
        ("x@12", "x@13"),
    ]
    assert ref.store == {"ml/x": x3}


# -- 410 Gone: list again and report the difference --------------------------------------


async def test_gone_relists_and_reports_the_difference() -> None:
    same, changed, removed = job("same", "1"), job("changed", "2"), job("removed", "3")
    added_then_lost = job("lost", "11")
    changed2, new = job("changed", "20", parallelism=3), job("new", "21")
    same_again = job("same", "1")  # a fresh dict, same version: not a change
    kube = ScriptedKube(
        [
            page([same, changed, removed], rv="10"),
            page([same_again, changed2], rv="25", token="more"),
            page([new], rv="30"),
        ],
        [[event("ADDED", added_then_lost), GONE]],
    )
    log = Log()
    ref = reflector(kube, log, page_size=2)
    await drive(ref, kube)

    assert kube.watched_versions == ["10", "30"]
    assert [call["continue"] for call in kube.list_calls] == [None, None, "more"]
    assert ref.resource_version == "30"
    assert ref.store == {"ml/same": same_again, "ml/changed": changed2, "ml/new": new}

    # First list: three adds; the watch: one add; then the relist and its difference only.
    entries = log.entries
    assert entries[0] == "relist" and entries[5] == "relist"
    assert [short(ch) for ch in log.changes[:4]] == [
        (None, "same@1"),
        (None, "changed@2"),
        (None, "removed@3"),
        (None, "lost@11"),
    ]
    after = [ch for ch in entries[6:] if not isinstance(ch, str)]
    assert len(after) == len(entries) - 6
    assert sorted(map(short, after), key=str) == sorted(
        [
            ("changed@2", "changed@20"),
            (None, "new@21"),
            ("removed@3", None),
            ("lost@11", None),
        ],
        key=str,
    )
    olds = {short(ch)[0]: ch[0] for ch in after}
    assert olds["changed@2"] is changed
    assert olds["removed@3"] is removed
    assert olds["lost@11"] is added_then_lost
    assert log.relists == 2


async def test_on_relist_is_called_once_per_list() -> None:
    kube = ScriptedKube(
        [page([], rv="10"), page([], rv="20"), page([], rv="30")],
        [[GONE], [bookmark("25"), GONE]],
    )
    log = Log()
    ref = reflector(kube, log)
    await drive(ref, kube)
    assert log.entries == ["relist", "relist", "relist"]
    assert kube.watched_versions == ["10", "20", "30"]


async def test_gone_during_a_paged_list_starts_the_list_over() -> None:
    a, b = job("a", "1"), job("b", "2")
    kube = ScriptedKube(
        [
            page([a], rv="10", token="t1"),
            KubeError(410, "Expired", "continue token expired"),
            page([a], rv="12", token="t2"),
            page([b], rv="12"),
        ]
    )
    log = Log()
    ref = reflector(kube, log, page_size=1)
    await drive(ref, kube)
    assert [call["continue"] for call in kube.list_calls] == [None, "t1", None, "t2"]
    assert ref.store == {"ml/a": a, "ml/b": b}
    assert log.entries == ["relist", (None, a), (None, b)]
    assert kube.watched_versions == ["12"]


# -- optional resources and errors -------------------------------------------------------


async def test_optional_resource_that_is_not_installed_counts_as_synced(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    missing = KubeError(404, "NotFound", "the server could not find the requested resource")
    kube = ScriptedKube([missing, missing])
    log = Log()
    ref = reflector(kube, log, optional=True)
    looks = asyncio.Event()
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:  # the 30 s between looks, made short here
        if seconds == 30:
            if len(kube.list_calls) >= 2:  # looked twice: stay here until cancelled
                looks.set()
                await real_sleep(3600)
            await real_sleep(0)
        else:
            await real_sleep(seconds)

    monkeypatch.setattr("topogate.kube.reflector.asyncio.sleep", sleep)
    caplog.set_level(logging.INFO, logger="topogate")
    task = asyncio.create_task(ref.run())
    try:
        await asyncio.wait_for(ref.synced.wait(), 1.0)
        await asyncio.wait_for(looks.wait(), 1.0)  # looked twice
        assert not task.done()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert len(kube.list_calls) == 2
    assert not kube.watch_calls
    assert ref.store == {} and log.entries == []
    # One line says it is not watched, however often it is looked for.
    said = [r.getMessage() for r in caplog.records if "not served" in r.getMessage()]
    assert len(said) == 1 and "CRD is not installed" in said[0]


async def test_required_resource_that_is_missing_is_retried_and_not_synced_meanwhile() -> None:
    a = job("a", "1")
    missing = KubeError(404, "NotFound", "the server could not find the requested resource")
    kube = ScriptedKube([missing, page([a], rv="10")])
    log = Log()
    ref = reflector(kube, log)
    await drive(ref, kube)
    assert len(kube.list_calls) == 2
    assert ref.synced.is_set()
    assert log.entries == ["relist", (None, a)]


@pytest.mark.parametrize(
    "error",
    [
        aiohttp.ClientConnectionError("connection reset"),
        aiohttp.ServerDisconnectedError(),
        TimeoutError(),
        KubeError(500, "InternalError", "etcd leader changed"),
    ],
    ids=["connection-reset", "server-disconnected", "timeout", "api-500"],
)
async def test_a_broken_watch_is_retried_from_the_last_version_without_a_relist(
    error: BaseException,
) -> None:
    x1, x2 = job("x", "11"), job("x", "12")
    kube = ScriptedKube(
        [page([], rv="10")],
        [[event("ADDED", x1), error], [event("MODIFIED", x2)]],
    )
    log = Log()
    ref = reflector(kube, log)
    await drive(ref, kube)

    assert kube.watched_versions == ["10", "11", "12"]
    assert len(kube.list_calls) == 1 and log.relists == 1
    assert [short(ch) for ch in log.changes] == [(None, "x@11"), ("x@11", "x@12")]
    assert ref.store == {"ml/x": x2}


async def test_a_broken_watch_without_any_version_lists_again() -> None:
    a = job("a", "")
    kube = ScriptedKube(
        [page([a]), page([a], rv="7")],
        [[aiohttp.ClientConnectionError("connection reset")]],
    )
    log = Log()
    ref = reflector(kube, log)
    await drive(ref, kube)
    assert len(kube.list_calls) == 2 and log.relists == 2
    assert kube.watched_versions == ["", "7"]
    # Same (empty) version both times: the relist reports nothing new.
    assert log.entries == ["relist", (None, a), "relist"]


# -- regressions found by the live benchmark and review ---------------------------------


async def test_listed_items_get_kind_and_api_version_like_watched_ones() -> None:
    # The API server leaves kind/apiVersion off list items; the job integration needs them.
    bare = {"metadata": {"name": "a", "namespace": "ml", "resourceVersion": "3"}}
    kube = ScriptedKube(
        [{"kind": "JobList", "apiVersion": "batch/v1", "metadata": {"resourceVersion": "9"},
          "items": [bare]}]
    )  # fmt: skip
    log = Log()
    ref = reflector(kube, log)
    await drive(ref, kube)
    assert ref.store["ml/a"]["kind"] == "Job"
    assert ref.store["ml/a"]["apiVersion"] == "batch/v1"


async def test_a_failing_handler_does_not_break_the_watch() -> None:
    a1, b1 = job("a", "11"), job("b", "12")
    kube = ScriptedKube([page([], rv="10")], [[event("ADDED", a1), event("ADDED", b1)]])
    seen: list[str] = []

    def change(old: Obj | None, new: Obj | None) -> None:
        assert new is not None
        seen.append(new["metadata"]["name"])
        if new["metadata"]["name"] == "a":
            raise RuntimeError("handler bug")

    ref = Reflector(cast(Kube, kube), JOBS, change)
    await drive(ref, kube)
    assert seen == ["a", "b"]
    assert kube.list_calls and len(kube.list_calls) == 1  # no relist
    assert kube.watched_versions == ["10", "12"]


async def test_deleting_an_unknown_object_passes_the_object() -> None:
    ghost = job("ghost", "11")
    kube = ScriptedKube([page([], rv="10")], [[event("DELETED", ghost)]])
    log = Log()
    await drive(reflector(kube, log), kube)
    assert [short(c) for c in log.changes] == [("ghost@11", None)]


async def test_a_healthy_watch_that_breaks_starts_the_backoff_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An outage grows the backoff; once a watch has delivered events again, the next break
    and the 410 after it wait no longer than a first failure (it used to keep 25 s and 30 s)."""
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def record(seconds: float) -> None:
        slept.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr("topogate.kube.reflector.asyncio.sleep", record)
    reset = aiohttp.ClientConnectionError("reset")
    x1, x2 = job("x", "11"), job("x", "12")
    kube = ScriptedKube(
        [page([], rv="10"), page([x2], rv="30")],
        [[reset], [reset], [reset], [reset], [event("ADDED", x1), reset], [GONE], [bookmark("31")]],
    )
    await drive(reflector(kube, Log()), kube)
    assert slept == [0.2, 0.4, 0.8, 1.6, 0.2]  # the outage, then afresh; no wait before relisting


async def test_gone_twice_in_a_row_backs_off(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def record(seconds: float) -> None:
        slept.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr("topogate.kube.reflector.asyncio.sleep", record)
    kube = ScriptedKube(
        [page([], rv="10"), page([], rv="20"), page([], rv="30")],
        [[GONE], [GONE], [bookmark("31")]],
    )
    await drive(reflector(kube, Log()), kube)
    assert slept == [0.2]  # the first 410 relists at once, the second waits


async def test_a_transform_shapes_what_is_stored_and_handed_on() -> None:
    # Listed and watched objects alike, before the store and the handler see them; the old
    # object of a change is the transformed one that was stored.
    def trim(obj: Obj) -> Obj:
        return {**obj, "spec": {}, "trimmed": True}

    a, a2, b = job("a", "1", parallelism=4), job("a", "11", parallelism=8), job("b", "12")
    kube = ScriptedKube(
        [page([a], rv="10")], [[event("MODIFIED", a2), event("ADDED", b), event("DELETED", b)]]
    )
    log = Log()
    ref = reflector(kube, log, transform=trim)
    await drive(ref, kube)

    assert ref.store == {"ml/a": trim(a2)}
    assert ref.resource_version == "12"
    changes = log.changes
    assert [short(c) for c in changes] == [
        (None, "a@1"),
        ("a@1", "a@11"),
        (None, "b@12"),
        ("b@12", None),
    ]
    for old, new in changes:
        for obj in (old, new):
            assert obj is None or (obj["trimmed"] and obj["spec"] == {})
    assert changes[1][0] is changes[0][1]  # the stored copy, not the raw object
