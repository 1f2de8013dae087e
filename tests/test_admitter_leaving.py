"""The admitter forgets what it keeps for a Workload that stopped waiting once its writes are
done, looking only at those that left or whose write ended since the last cycle: each cycle
forgets exactly what a scan of every Workload that left would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_shells import Harness, workload
from topogate.controllers.admitter import Admitter, Leaving
from topogate.kube.resources import WORKLOADS

KEYS = [f"ns/w{i}" for i in range(5)]
WRITERS = ["chain", "queued", "sending"]  # an admission or eviction; a pending message

op = st.one_of(
    st.tuples(st.just("leave"), st.sampled_from(KEYS)),
    st.tuples(st.just("start"), st.sampled_from(KEYS), st.sampled_from(WRITERS)),
    st.tuples(st.just("end"), st.sampled_from(KEYS), st.sampled_from(WRITERS)),
    st.tuples(st.just("cycle")),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(op, max_size=60))
def test_each_cycle_forgets_what_a_full_scan_would(ops: list[tuple[str, ...]]) -> None:
    out: dict[str, set[str]] = {w: set() for w in WRITERS}  # the writes out, per kind
    left: set[str] = set()  # the scan's own record (as the admitter kept it before)
    leaving = Leaving()

    def busy(key: str) -> bool:
        return any(key in keys for keys in out.values())

    for one in ops:
        if one[0] == "leave":
            left.add(one[1])
            leaving.add(one[1])
        elif one[0] == "start":
            out[one[2]].add(one[1])
        elif one[0] == "end":
            if one[1] in out[one[2]]:
                out[one[2]].discard(one[1])
                leaving.settled(one[1])  # as every write's end tells it
        else:
            scanned = {key for key in left if not busy(key)}
            left -= scanned
            assert sorted(leaving.done(busy)) == sorted(scanned)


def test_a_write_that_ends_brings_the_workload_back_to_the_next_cycle() -> None:
    leaving, out = Leaving(), {"ns/a"}
    leaving.add("ns/a")
    assert leaving.done(lambda key: key in out) == []
    assert leaving.done(lambda key: key in out) == []  # not looked at again while busy
    out.clear()
    leaving.settled("ns/a")
    assert leaving.done(lambda key: key in out) == ["ns/a"]
    leaving.settled("ns/a")  # forgotten already: nothing more
    assert leaving.done(lambda key: key in out) == []


def kept(admitter: Admitter, key: str) -> bool:
    return key in admitter._left._busy or key in admitter._left._look


async def test_the_admitter_forgets_an_admitted_workload_once_its_write_is_done() -> None:
    """The write's end is what brings it back: an admission still being written when the
    cycle sees the Workload leave is forgotten by the first cycle after the write, with
    nothing new about it from the watch."""
    h = Harness()
    h.kube.seed(WORKLOADS, workload("w"))
    h.deliver()
    admitter, events = h.admitter()
    admitter.decide()  # admitted, its write spawned
    admitter.decide()  # it left the queue; its write is still out
    assert "ml/w" in admitter._chains and kept(admitter, "ml/w")
    await admitter.settle()
    assert admitter.copies._returned.get("ml/w") is not None  # kept for its next write
    assert h.state.pending.sync() == ["ml/w"]  # the confirmed admission: taken here
    admitter.decide()
    assert "ml/w" not in admitter.copies._returned and not kept(admitter, "ml/w")
    await events.drain()


async def test_the_admitter_forgets_a_workload_once_its_pending_message_is_done() -> None:
    h = Harness()
    h.kube.seed(WORKLOADS, workload("big", count=4, gpus=8))  # never fits: a message
    h.deliver()
    admitter, events = h.admitter()
    admitter.decide()
    assert admitter.messages.has_work("ml/big")
    await h.kube.delete(WORKLOADS, "big", "ml")
    h.deliver()
    admitter.decide()  # it left; its message is still queued
    assert kept(admitter, "ml/big")
    await admitter.settle()
    h.state.pending.sync()
    admitter.decide()
    assert not kept(admitter, "ml/big")
    await events.drain()
