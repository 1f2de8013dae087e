"""topogate.state.waiting: the waiting and running workloads, kept on every change, equal a
classification from scratch; the feed names every workload that changed."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from topogate.admission.quota import usage_of
from topogate.api.objects import is_finished
from topogate.kube.resources import WORKLOADS
from topogate.state import ControllerState

Obj = dict[str, Any]
NAMES = ["a", "b", "c", "d"]
ADMISSION: Obj = {
    "clusterQueue": "cq",
    "podSetAssignments": [
        {"name": "main", "count": 1, "flavors": {"cpu": "f"}, "resourceUsage": {"cpu": "1"}}
    ],
}


def _workload(name: str, version: int, admitted: bool, finished: bool) -> Obj:
    status: Obj = {}
    if admitted:
        status["admission"] = ADMISSION
    if finished:
        status["conditions"] = [{"type": "Finished", "status": "True"}]
    return {
        "metadata": {"name": name, "namespace": "ml", "resourceVersion": str(version)},
        "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {}}}]},
        "status": status,
    }


# (what, name, admitted, finished): a watch event (upsert or delete), or one of the
# admitter's assume / confirm / forget.
EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "delete", "assume", "confirm", "forget"]),
        st.sampled_from(NAMES),
        st.booleans(),
        st.booleans(),
    ),
    max_size=30,
)


def _from_scratch(state: ControllerState) -> tuple[set[str], set[str]]:
    waiting, running = set(), set()
    for key, workload in state.store.objects(WORKLOADS).items():
        finished = any(
            c.get("type") == "Finished" and c.get("status") == "True"
            for c in workload.get("status", {}).get("conditions", [])
        )
        if finished:
            continue
        if state.ledger.admission_of(key) is not None:
            running.add(key)
        elif state.ledger.reserved(key) is None:
            waiting.add(key)
    return waiting, running


@settings(max_examples=300, deadline=None)
@given(EVENTS)
def test_waiting_and_running_equal_a_classification_from_scratch(
    events: list[tuple[str, str, bool, bool]],
) -> None:
    state = ControllerState()
    handler = state.handler(WORKLOADS)
    feed = state.workloads.changes()
    for version, (what, name, admitted, finished) in enumerate(events, start=1):
        key = f"ml/{name}"
        old = state.store.objects(WORKLOADS).get(key)
        feed.clear()
        if what == "upsert":
            handler(old, _workload(name, version, admitted, finished))
        elif what == "delete" and old is not None:
            handler(old, None)
        elif what == "assume" and key in state.workloads.waiting():
            state.ledger.assume(key, ADMISSION, {}, {})
        elif what == "confirm":
            state.ledger.confirm(key)
        elif what == "forget":
            state.ledger.forget(key)
        else:
            continue
        assert key in feed  # every change reaches the reader
        assert (set(state.workloads.waiting()), set(state.workloads.running())) == _from_scratch(
            state
        )
        # The quota in use, as the admitter summed it every cycle before it was kept.
        held = [
            admission
            for k in state.ledger.held()
            if not is_finished(state.store.objects(WORKLOADS).get(k))
            and (admission := state.ledger.reserved(k))
        ]
        assert state.workloads.quota_in_use() == usage_of(held)
        for k, workload in state.store.objects(WORKLOADS).items():
            reserved = None if is_finished(workload) else state.ledger.reserved(k)
            assert state.workloads.quota_of(k) == (usage_of([reserved]) if reserved else {})


def test_a_feed_starts_with_what_waits_already() -> None:
    state = ControllerState()
    handler = state.handler(WORKLOADS)
    handler(None, _workload("a", 1, admitted=False, finished=False))
    handler(None, _workload("b", 2, admitted=True, finished=False))
    assert state.workloads.changes() == {"ml/a"}


def test_an_admission_whose_usage_is_no_quantity_still_counts_as_running() -> None:
    # Our CRD types resourceUsage as strings: "abc" can be stored. The handler must still
    # move the workload to the running set (it was left waiting, and the event raised).
    state = ControllerState()
    handler = state.handler(WORKLOADS)
    handler(None, _workload("a", 1, admitted=False, finished=False))
    bad = _workload("a", 2, admitted=True, finished=False)
    bad["status"]["admission"] = {
        "clusterQueue": "cq",
        "podSetAssignments": [
            {"name": "main", "count": 1, "flavors": {"cpu": "f"}, "resourceUsage": {"cpu": "abc"}}
        ],
    }
    handler(state.store.objects(WORKLOADS)["ml/a"], bad)
    assert set(state.workloads.running()) == {"ml/a"} and set(state.workloads.waiting()) == set()
    assert state.workloads.quota_of("ml/a") == {}


def test_the_quota_kept_follows_a_changed_admission() -> None:
    # The quota is parsed once per admission and kept while the admission stays equal: a
    # new version whose admission differs (another flavor or amount) must replace it.
    state = ControllerState()
    handler = state.handler(WORKLOADS)
    first = _workload("a", 1, admitted=True, finished=False)
    handler(None, first)
    assert state.workloads.quota_of("ml/a") == {("cq", "f"): {"cpu": 1000}}
    same = _workload("a", 2, admitted=True, finished=False)  # only the version changed
    handler(first, same)
    assert state.workloads.quota_of("ml/a") == {("cq", "f"): {"cpu": 1000}}
    changed = _workload("a", 3, admitted=True, finished=False)
    changed["status"]["admission"] = {
        "clusterQueue": "cq",
        "podSetAssignments": [
            {"name": "main", "count": 1, "flavors": {"cpu": "g"}, "resourceUsage": {"cpu": "3"}}
        ],
    }
    handler(same, changed)
    assert state.workloads.quota_of("ml/a") == {("cq", "g"): {"cpu": 3000}}
    assert state.workloads.quota_in_use() == {("cq", "g"): {"cpu": 3000}}
    finished = _workload("a", 4, admitted=True, finished=True)
    handler(changed, finished)
    assert state.workloads.quota_of("ml/a") == {}
