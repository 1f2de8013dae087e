"""The admitter's per-queue gauges are counted from what changed (the lanes' and the ledger's
feeds), not by walking every queue and held admission: after any sequence of arrivals,
cycles, written admissions, finishes, evictions and queue deletions, a scrape shows what a
count from scratch gives."""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_preemption_memo import Harness, queue, workload
from topogate.kube.resources import CLUSTER_QUEUES, WORKLOADS

Obj = dict[str, Any]
QUEUES = ["a", "b", "c"]
WHEN = "2026-01-01T00:00:00Z"

step = st.one_of(
    st.tuples(st.just("arrive"), st.sampled_from(QUEUES), st.integers(1, 5), st.integers(0, 2)),
    st.tuples(st.just("arrive-admitted"), st.sampled_from(QUEUES), st.integers(1, 2)),
    st.tuples(st.just("decide"), st.booleans()),
    st.tuples(st.just("written")),  # the admission writes land and the watch shows them
    st.tuples(st.just("finish"), st.integers(0, 30)),
    st.tuples(st.just("evict"), st.integers(0, 30)),
    st.tuples(st.just("delete"), st.integers(0, 30)),
    st.tuples(st.just("delete-queue"), st.sampled_from(QUEUES)),
)


def scraped(h: Harness, name: str) -> dict[str, float]:
    """The series of one gauge as a scrape shows them, by ClusterQueue."""
    out: dict[str, float] = {}
    for family in h.admitter.metrics.registry.collect():
        for sample in family.samples:
            if sample.name == name:
                out[sample.labels["cluster_queue"]] = sample.value
    return out


def from_scratch(h: Harness, admitted: Counter[str]) -> tuple[dict[str, int], dict[str, int]]:
    """Every queue of the catalog and every lane counted, every held admission walked."""
    queues = h.state.catalogs.catalog().queues
    lanes = h.state.pending.lanes
    pending = dict.fromkeys(queues, 0)
    for name in lanes.names():
        pending[name] = len(lanes.lane(name)) - admitted.get(name, 0)
    held = dict.fromkeys(queues, 0)
    for key in h.state.ledger.held():
        cq = str((h.state.ledger.reserved(key) or {}).get("clusterQueue") or "")
        held[cq] = held.get(cq, 0) + 1
    return pending, held


def change_status(h: Harness, key: str, status: Obj | None) -> None:
    stored = h.state.store.objects(WORKLOADS).get(key)
    if stored is None:
        return
    obj = copy.deepcopy(stored)
    obj.setdefault("status", {}).update(status or {})
    h.kube.seed(WORKLOADS, obj)
    h.deliver()


async def run(steps: list[tuple[Any, ...]]) -> None:
    h = Harness([queue(name, "all", 2) for name in QUEUES])
    names: list[str] = []
    for number, (kind, *args) in enumerate(steps):
        if kind in ("arrive", "arrive-admitted"):
            name = f"w{number}"
            names.append(f"{args[0]}/{name}")
            if kind == "arrive":
                h.seed(workload(name, args[0], args[1], args[2]))
            else:
                h.seed(workload(name, args[0], args[1], 1, admitted=True))
        elif kind == "decide":
            ran = h.admitter.decide(describe=True)
            last = h.admitter._last
            admitted: Counter[str] = Counter()
            if ran and last is not None:
                admitted = Counter(one.cluster_queue for one in last[2].admitted)
            pending, held = from_scratch(h, admitted)
            assert scraped(h, "topogate_pending_workloads") == pending
            assert scraped(h, "topogate_admitted_workloads") == held
            if args[0]:  # the gauges again, with nothing changed in between
                h.admitter._gauges(h.state.catalogs.catalog().queues, admitted)
                assert scraped(h, "topogate_pending_workloads") == pending
        elif kind == "written":
            await h.admitter.settle()
            h.deliver()
        elif names and kind == "finish":
            finished = {"type": "Finished", "status": "True", "reason": "Succeeded"}
            change_status(h, names[args[0] % len(names)], {"conditions": [finished]})
        elif names and kind == "evict":
            # The admission is taken back: the Workload waits again, its quota is free.
            change_status(h, names[args[0] % len(names)], {"admission": None, "conditions": []})
        elif names and kind == "delete":
            key = names[args[0] % len(names)]
            namespace, name = key.split("/")
            await h.kube.delete(WORKLOADS, name, namespace)
            h.deliver()
        elif kind == "delete-queue":
            await h.kube.delete(CLUSTER_QUEUES, args[0])
            h.deliver()
        if kind != "decide" and number % 2:  # a call between cycles (as a skipped cycle's)
            h.state.pending.sync()
            h.admitter._gauges(h.state.catalogs.catalog().queues, {})
            pending, held = from_scratch(h, Counter())
            assert scraped(h, "topogate_pending_workloads") == pending
            assert scraped(h, "topogate_admitted_workloads") == held
    await h.admitter.settle()
    h.deliver()
    h.admitter.decide(describe=True)
    pending, held = from_scratch(h, Counter())
    if h.admitter._last is not None and h.admitter._last[2].admitted:
        return  # the last cycle admitted more: checked by its own step's comparison
    assert scraped(h, "topogate_pending_workloads") == pending
    assert scraped(h, "topogate_admitted_workloads") == held


@settings(max_examples=200, deadline=None)
@given(st.lists(step, max_size=30))
def test_the_queue_gauges_counted_from_changes_equal_a_count_from_scratch(
    steps: list[tuple[Any, ...]],
) -> None:
    asyncio.run(run(steps))


async def test_a_deleted_queue_loses_its_series_and_the_others_stay_right() -> None:
    h = Harness([queue("a", None, 2), queue("b", None, 2)])
    h.seed(workload("one", "a", 2, 1, admitted=True))
    h.seed(workload("two", "a", 2, 1))
    h.seed(workload("three", "b", 1, 1))
    h.admitter.decide(describe=True)
    assert scraped(h, "topogate_pending_workloads") == {"a": 1, "b": 0}
    assert scraped(h, "topogate_admitted_workloads") == {"a": 1, "b": 1}
    await h.admitter.settle()
    h.deliver()
    for key in ("a/one", "a/two"):
        namespace, name = key.split("/")
        await h.kube.delete(WORKLOADS, name, namespace)
    await h.kube.delete(CLUSTER_QUEUES, "a")
    h.deliver()
    h.admitter.decide(describe=True)
    assert scraped(h, "topogate_pending_workloads") == {"b": 0}
    assert scraped(h, "topogate_admitted_workloads") == {"b": 1}


async def test_a_waiting_workload_deleted_leaves_its_queue_gauge() -> None:
    h = Harness([queue("a", None, 2)])
    h.seed(workload("big", "a", 3, 1))  # never fits: it stays in its lane
    h.admitter.decide(describe=True)
    assert scraped(h, "topogate_pending_workloads") == {"a": 1}
    await h.kube.delete(WORKLOADS, "big", "a")
    h.deliver()
    h.admitter.decide(describe=True)
    assert scraped(h, "topogate_pending_workloads") == {"a": 0}


def test_a_standby_keeps_no_feed_of_the_workloads_it_never_gauges() -> None:
    """A standby replica builds its admitter but runs no cycle (it never sets the gauges):
    the Workloads admitted and gone meanwhile (days of them) must not pile up in feeds
    nobody reads; once it leads, its first gauges still count from scratch."""
    h = Harness([queue(name, "all", 2) for name in QUEUES])
    for number in range(200):
        h.seed(workload(f"s{number}", "a", 1, 0, admitted=True))
        asyncio.run(h.kube.delete(WORKLOADS, f"s{number}", "a"))
        h.deliver()
    h.seed(workload("kept", "b", 1, 0, admitted=True))
    h.seed(workload("waits", "c", 1, 0))
    unread = sum(len(feed) for feed in h.state.ledger._feeds)
    unread += sum(len(feed) for feed in h.state.pending.lanes._feeds)
    assert unread <= 3  # not one key per Workload the standby saw come and go
    h.state.pending.sync()
    h.admitter._gauges(h.state.catalogs.catalog().queues, {})
    assert scraped(h, "topogate_admitted_workloads") == {"a": 0, "b": 1, "c": 0}
    assert scraped(h, "topogate_pending_workloads") == {"a": 0, "b": 0, "c": 1}
