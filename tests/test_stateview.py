"""The webhook's view inside serve: queues from the state, HyperNodes listed fresh, once per
round trip however many reviews ask."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from tests.kit import hypernode_object, review_for
from topogate.kube.resources import HYPERNODES, Obj, Resource
from topogate.state import ControllerState
from topogate.testing.fakekube import FakeKube
from topogate.webhooks.review import Review, validate
from topogate.webhooks.stateview import FreshList, state_view


async def test_concurrent_callers_share_one_list() -> None:
    kube = FakeKube()
    kube.seed(HYPERNODES, hypernode_object("a", 1, ["n0"]))
    fresh = FreshList(kube, HYPERNODES)
    results = await asyncio.gather(*(fresh.get() for _ in range(50)))
    assert fresh.lists == 1
    assert all(r is not None and [h["metadata"]["name"] for h in r] == ["a"] for r in results)


class SlowList(FakeKube):
    """A LIST that takes its time: it reads the store, then waits to be let go."""

    def __init__(self) -> None:
        super().__init__()
        self.listing = asyncio.Event()
        self.release = asyncio.Event()

    async def list(self, resource: Resource, namespace: str | None = None, **params: Any) -> Obj:
        answer = await super().list(resource, namespace, **params)
        self.listing.set()
        await self.release.wait()
        return answer


async def test_a_caller_never_gets_a_list_that_started_before_it() -> None:
    kube = SlowList()
    fresh = FreshList(kube, HYPERNODES)
    first = asyncio.ensure_future(fresh.get())
    await kube.listing.wait()  # the first LIST has read the store
    kube.seed(HYPERNODES, hypernode_object("late", 1, ["n0"]))
    second = asyncio.ensure_future(fresh.get())
    third = asyncio.ensure_future(fresh.get())
    kube.release.set()
    assert await first == []
    for answer in (await second, await third):
        assert answer is not None and [h["metadata"]["name"] for h in answer] == ["late"]
    assert fresh.lists == 2  # the second and third shared one


async def test_an_unreachable_api_server_means_unknown_not_a_crash() -> None:
    kube = FakeKube()
    kube.fail_next("list", aiohttp.ClientConnectionError("reset"), resource=HYPERNODES)
    assert await FreshList(kube, HYPERNODES).get() is None


async def test_a_cycle_is_refused_against_hypernodes_the_watch_has_not_delivered() -> None:
    kube = FakeKube()
    kube.seed(HYPERNODES, hypernode_object("top", 3, children=["mid"]))
    kube.seed(HYPERNODES, hypernode_object("mid", 2, children=["leaf"]))
    view_for = state_view(ControllerState(), kube)  # the state has seen none of them
    review = Review.parse(
        review_for(
            hypernode_object("leaf", 1, children=["top"]), "HyperNode", "topology.volcano.sh"
        )
    )
    answer = validate(review, await view_for(review))["response"]
    assert answer["allowed"] is False
    assert "cycle" in answer["status"]["message"]
