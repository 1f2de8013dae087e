"""only_waiting_words_changed compares in place: what counts as a change, key by key."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from topogate.api.objects import admission_of, is_admitted, only_waiting_words_changed

BASE: dict[str, Any] = {
    "apiVersion": "topogate.dev/v1alpha1",
    "kind": "Workload",
    "metadata": {"name": "w", "namespace": "ml", "resourceVersion": "1", "labels": {"a": "b"}},
    "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1}]},
    "status": {
        "conditions": [
            {"type": "Evicted", "status": "True"},
            {"type": "QuotaReserved", "status": "False", "message": "waits"},
        ],
        "requeueState": {"count": 1},
    },
}


def _set(*path: str, value: Any = None, drop: bool = False) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        at = obj
        for step in path[:-1]:
            at = at[step]
        if drop:
            at.pop(path[-1], None)
        else:
            at[path[-1]] = value

    return change


WORDS = {"type": "QuotaReserved", "status": "False", "message": "other words"}


@pytest.mark.parametrize(
    ("change", "only_words"),
    [
        (_set("metadata", "resourceVersion", value="2"), True),
        (_set("metadata", "managedFields", value=[{"manager": "x"}]), True),
        (_set("status", "conditions", value=[{"type": "Evicted", "status": "True"}, WORDS]), True),
        (_set("status", "conditions", value=[{"type": "Evicted", "status": "True"}]), True),
        (_set("extra", value=None), True),  # above metadata and status: absent is null
        (_set("extra", value=1), False),
        (_set("spec", "queueName", value="r"), False),
        (_set("metadata", "labels", value=None), False),  # in metadata: absent is not null
        (_set("metadata", "labels", drop=True), False),
        (_set("metadata", "uid", value="u"), False),
        (_set("status", "requeueState", value=None), False),
        (_set("status", "requeueState", drop=True), False),
        (_set("status", "admission", value={"clusterQueue": "cq"}), False),
        (_set("status", "conditions", value=[{"type": "Evicted", "status": "False"}]), False),
        (_set("status", "conditions", value=["odd", {"type": "Evicted", "status": "True"}]), False),
        (_set("status", drop=True), False),
    ],
)
def test_what_changes_more_than_why_a_workload_waits(
    change: Callable[[dict[str, Any]], None], only_words: bool
) -> None:
    new = copy.deepcopy(BASE)
    change(new)
    assert only_waiting_words_changed(BASE, new) is only_words
    assert only_waiting_words_changed(new, BASE) is only_words


@pytest.mark.parametrize(
    "status",
    [
        None,
        {},
        "odd",
        {"admission": None},
        {"admission": {}},
        {"admission": {"a": 1}},
        {"admission": [1]},
    ],
)
def test_admitted_means_a_status_admission_to_read(status: Any) -> None:
    workload = {**BASE, "status": status}
    assert is_admitted(workload) is (admission_of(workload) is not None)
    assert is_admitted(workload) is (status == {"admission": {"a": 1}})
