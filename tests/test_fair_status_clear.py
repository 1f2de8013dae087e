"""With fair sharing off, :meth:`ShareStatus.clear` looks only at the ClusterQueues and
Cohorts that came, changed or went since its last call (and those whose write failed), not
at all of them once a second: after any sequence of such changes, writes and failures, it
queues what a walk over every object queues."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.test_fair_status import _cohort, _cq, _shares, _tree
from tests.test_shells import Harness
from topogate.admission import fairshare
from topogate.controllers import admitter as admitter_module
from topogate.controllers.fairstatus import ShareStatus, Target, written_share
from topogate.kube.errors import KubeError
from topogate.kube.resources import CLUSTER_QUEUES, COHORTS, WORKLOADS, Resource

Obj = dict[str, Any]
NAMES = ["x", "y", "z"]
KINDS = st.sampled_from(["cq", "cohort"])

step = st.one_of(
    st.tuples(st.just("put"), KINDS, st.sampled_from(NAMES), st.sampled_from([None, 0, 7])),
    st.tuples(st.just("delete"), KINDS, st.sampled_from(NAMES)),
    st.tuples(st.just("clear")),
    st.tuples(st.just("write")),  # the queued writes are sent and the watch brings them back
)


class Held(ShareStatus):
    """Writes only when the test says so (two writers on one API server would race)."""

    async def _write_queued(self) -> None:
        self._writer = None

    async def write(self) -> None:
        for target in sorted(self._queued, key=lambda t: (t[0].plural, t[1])):
            del self._queued[target]
            await self._write(target)


class FromScratch(Held):
    """The walk over every ClusterQueue and Cohort object, as before."""

    def clear(self) -> None:
        self._queue(
            {
                (resource, name): None
                for resource in (CLUSTER_QUEUES, COHORTS)
                for name, obj in self.state.store.objects(resource).items()
                if written_share(obj) is not None or (resource, name) in self._said
            }
        )


def queued(status: ShareStatus) -> set[Target]:
    return {t for t in status._queued if status._target(*t) is not None}


async def run(steps: list[tuple[Any, ...]]) -> None:
    h = Harness()
    h.kube.seed(
        CLUSTER_QUEUES, {**_cq("x", 1, "c"), "status": {"fairSharing": {"weightedShare": 3}}}
    )
    h.deliver()
    incremental = Held(h.kube, h.state, 1000)
    scratch = FromScratch(h.kube, h.state, 1000)
    for kind, *args in steps:
        resource: Resource = CLUSTER_QUEUES if args and args[0] == "cq" else COHORTS
        if kind == "put":
            obj: Obj = copy.deepcopy(
                _cq(args[1], 1, "c") if args[0] == "cq" else _cohort(args[1], None)
            )
            if args[2] is not None:
                obj["status"] = {"fairSharing": {"weightedShare": args[2]}}
            h.kube.seed(resource, obj)
            h.deliver()
        elif kind == "delete":
            await h.kube.delete(resource, args[1])
            h.deliver()
        elif kind == "clear":
            incremental.clear()
            scratch.clear()
            assert queued(incremental) == queued(scratch)
            assert {t: s for t, s in incremental._said.items() if incremental._target(*t)} == {
                t: s for t, s in scratch._said.items() if scratch._target(*t)
            }
        elif kind == "write":
            await incremental.write()
            await scratch.write()
            h.deliver()


@settings(max_examples=200, deadline=None)
@given(st.lists(step, max_size=25))
@example(  # a share removed, its object deleted and made again with a share
    [
        ("put", "cq", "y", 7),
        ("clear",),
        ("write",),
        ("clear",),
        ("delete", "cq", "y"),
        ("clear",),
        ("put", "cq", "y", 7),
        ("clear",),
    ]
)
def test_clear_from_changes_queues_what_a_walk_over_every_object_queues(
    steps: list[tuple[Any, ...]],
) -> None:
    asyncio.run(run(steps))


async def test_a_removal_that_failed_is_queued_again_by_the_next_clear() -> None:
    h = Harness()
    shared = {**_cq("x", 1, "c"), "status": {"fairSharing": {"weightedShare": 3}}}
    h.kube.seed(CLUSTER_QUEUES, shared)
    h.deliver()
    status = Held(h.kube, h.state, 1000)
    status.clear()
    h.kube.fail_next("patch", KubeError(503, "ServiceUnavailable", "later"), 1)
    await status.write()
    assert status.failures == 1 and not status._queued
    status.clear()
    assert list(status._queued) == [(CLUSTER_QUEUES, "x")]
    await status.write()
    h.deliver()
    assert written_share(h.state.store.objects(CLUSTER_QUEUES)["x"]) is None
    status.clear()
    assert not status._queued


async def test_fair_sharing_on_computes_the_shares_again_only_after_a_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tree_shares runs once per change of the quota in use or the catalog, not once per
    call; the shares written are those of a fresh computation."""
    h, admitter = _tree()
    computed: list[int] = []
    real = fairshare.tree_shares

    def counted(book: Any) -> Any:
        computed.append(1)
        return real(book)

    monkeypatch.setattr(admitter_module, "tree_shares", counted)
    await admitter.cycle()
    assert len(computed) == 1
    h.deliver()  # the admission and the shares written come back
    catalog = h.state.catalogs.catalog()
    before = len(computed)
    admitter._report_shares(catalog)
    admitter._report_shares(catalog)
    assert len(computed) == before + 1  # the watch's admission changed the quota once
    admitter._report_shares(catalog)
    assert len(computed) == before + 1
    await h.kube.delete(WORKLOADS, "w", "ml")
    h.deliver()
    admitter._report_shares(catalog)
    assert len(computed) == before + 2
    await admitter.settle()
    h.deliver()
    assert _shares(h)["clusterqueues/cq"] == 0
