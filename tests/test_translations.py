"""PodSets translated once per (queue, PodSets, catalog): a Workload found in
:class:`Translations` gets what :func:`translate` gives it, refusals included."""

from __future__ import annotations

import copy
from typing import Any

from tests.test_cli_plan import RACK, TOPOLOGY
from tests.test_plan_checks import FLAVOR, LOCAL_QUEUE, _cluster_queue
from topogate.admission.podsets import Catalog, Translation, Translations, build_catalog, translate
from topogate.kube.resources import CLUSTER_QUEUES, LOCAL_QUEUES, RESOURCE_FLAVORS, TOPOLOGIES
from topogate.kube.resources import WORKLOADS as WORKLOAD_RESOURCE
from topogate.state import ControllerState

QUEUE = {**_cluster_queue(64), "apiVersion": "topogate.dev/v1alpha1"}  # as the state reads it


def _catalog(*topologies: dict[str, Any]) -> Catalog:
    catalog, warnings = build_catalog([QUEUE], [LOCAL_QUEUE], [FLAVOR], list(topologies), None)
    assert warnings == []
    return catalog


def _workload(name: str, *, gpus: int = 1, level: str = RACK, **extra: Any) -> dict[str, Any]:
    container = {"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}
    template = {
        "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": level}},
        "spec": {"containers": [container]},
    }
    return {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "resourceVersion": "1",
            "creationTimestamp": f"2026-01-01T00:00:{len(name):02d}Z",
        },
        "spec": {
            "queueName": "q",
            "priority": len(name),
            "podSets": [{"name": "main", "count": 2, "template": template}],
        },
        **extra,
    }


def _through(memo: Translations, workload: dict[str, Any], catalog: Catalog) -> Translation:
    """As the pending queue translates: from the memo, else translated and kept."""
    key = f"ml/{workload['metadata']['name']}"
    found = memo.find(workload, key, catalog)
    if found is None:
        found = translate(workload, key, catalog)
        memo.keep(workload, catalog, found)
    return found


def test_a_workload_like_one_translated_before_gets_what_translate_gives_it() -> None:
    catalog, memo = _catalog(TOPOLOGY), Translations()
    first, second = _workload("a"), _workload("bb")
    assert _through(memo, first, catalog) == translate(first, "ml/a", catalog)
    assert (memo.hits, len(memo)) == (0, 1)
    found = _through(memo, second, catalog)
    assert memo.hits == 1
    # Its own key, priority and creation time; the requests of the same PodSets.
    assert found == translate(second, "ml/bb", catalog)
    assert found.pending is not None and found.pending.priority == 2
    assert found.pending.request.workload == "ml/bb"


def test_other_pod_sets_or_another_queue_are_translated_afresh() -> None:
    catalog, memo = _catalog(TOPOLOGY), Translations()
    _through(memo, _workload("a"), catalog)
    bigger = _workload("b", gpus=2)
    assert memo.find(bigger, "ml/b", catalog) is None
    found = _through(memo, bigger, catalog)
    assert found.pending is not None
    assert found.pending.request.podsets[0].requests["nvidia.com/gpu"] == 2
    elsewhere = _workload("c")
    elsewhere["spec"]["queueName"] = "other"  # no such LocalQueue: not looked up
    assert memo.find(elsewhere, "ml/c", catalog) is None
    assert _through(memo, elsewhere, catalog).problem == "LocalQueue ml/other doesn't exist"
    assert memo.hits == 0


def test_a_found_workload_is_still_validated_as_a_whole() -> None:
    """Its status is its own: one the model refuses is refused with translate's words."""
    catalog, memo = _catalog(TOPOLOGY), Translations()
    _through(memo, _workload("a"), catalog)
    broken = _workload("b", status={"conditions": "not a list"})
    found = memo.find(broken, "ml/b", catalog)
    expected = translate(broken, "ml/b", catalog)
    assert expected.pending is None and expected.invalid is not None
    assert found is not None and found.problem == expected.problem
    assert found.invalid is not None and found.invalid.describe() == expected.invalid.describe()


def test_refusals_are_not_kept_and_name_their_own_workload() -> None:
    catalog, memo = _catalog(TOPOLOGY), Translations()
    for name in ("a", "b"):
        refused = _through(memo, _workload(name, level="no-such-level"), catalog)
        assert refused.pending is None and refused.problem.startswith(f"Workload ml/{name}: ")
    assert (memo.hits, len(memo)) == (0, 0)


def test_another_catalog_empties_it() -> None:
    memo = Translations()
    _through(memo, _workload("a"), _catalog(TOPOLOGY))
    without_rack: dict[str, Any] = copy.deepcopy(TOPOLOGY)
    levels = without_rack["spec"]["levels"]
    without_rack["spec"]["levels"] = [lv for lv in levels if lv["nodeLabel"] != RACK]
    other = _catalog(without_rack)
    later = _workload("b")
    assert memo.find(later, "ml/b", other) is None and len(memo) == 0
    refused = _through(memo, later, other)
    assert refused.pending is None and "is not a level" in refused.problem


def test_the_pending_queue_translates_a_template_once_and_a_new_version_afresh() -> None:
    state = ControllerState()
    for resource, obj in (
        (TOPOLOGIES, TOPOLOGY),
        (RESOURCE_FLAVORS, FLAVOR),
        (CLUSTER_QUEUES, QUEUE),
        (LOCAL_QUEUES, LOCAL_QUEUE),
    ):
        state.handler(resource)(None, obj)
    on_workload = state.handler(WORKLOAD_RESOURCE)
    for name in ("a", "b", "c"):
        on_workload(None, _workload(name))
    state.pending.sync()
    assert state.pending._translations.hits == 2
    old = state.store.objects(WORKLOAD_RESOURCE)["ml/b"]
    grown = _workload("b", gpus=4)
    grown["metadata"]["resourceVersion"] = "2"
    on_workload(old, grown)
    state.pending.sync()
    pending = state.pending.lanes.get("ml/b")
    assert pending is not None
    assert pending.request.podsets[0].requests["nvidia.com/gpu"] == 4


def test_past_its_limit_it_starts_again() -> None:
    catalog, memo = _catalog(TOPOLOGY), Translations()
    memo.LIMIT = 2
    for gpus in (1, 2, 3):
        _through(memo, _workload(f"w{gpus}", gpus=gpus), catalog)
    assert len(memo) == 1  # the third emptied it
    found = _through(memo, _workload("x", gpus=1), catalog)  # translated afresh, the same
    assert memo.hits == 0 and found == translate(_workload("x", gpus=1), "ml/x", catalog)


def test_it_is_bounded_by_the_templates_size_too() -> None:
    """A count alone would let templates near etcd's size limit hold gigabytes: past its
    characters' budget it starts again, and a template larger than its single limit is
    translated each time (the same answer)."""
    catalog, memo = _catalog(TOPOLOGY), Translations()
    one = len(repr(_workload("w", gpus=1)["spec"]["podSets"]))
    memo.BYTES = 2 * one + one // 2  # room for two
    for gpus in (1, 2, 3):
        _through(memo, _workload(f"w{gpus}", gpus=gpus), catalog)
    assert len(memo) == 1 and memo.kept_bytes == one  # the third emptied it
    _through(memo, _workload("again", gpus=3), catalog)  # the same text: not counted twice
    assert memo.kept_bytes == one and memo.hits == 1
    memo.LARGEST = one - 1
    big = _workload("big", gpus=5)
    assert _through(memo, big, catalog) == translate(big, "ml/big", catalog)
    assert len(memo) == 1 and memo.kept_bytes == one  # not kept
