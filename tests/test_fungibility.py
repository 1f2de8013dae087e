"""Flavor fungibility (a ClusterQueue's ``spec.flavorFungibility``), Kueue's rules in the pure
core: the policy (``admission.fungibility``) and the field as read and refused. The flavor
walk of the admission cycle is in tests/test_fungibility_cycle.py.

Ported from kubernetes-sigs/kueue v0.19.0, pkg/scheduler/flavorassigner/flavorassigner_test.go
(``TestIsPreferred``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from topogate.admission.fungibility import (
    BORROWING_OVER_PREEMPTION,
    FIT,
    MAY_STOP_SEARCH,
    NO_CANDIDATES,
    NO_FIT,
    PREEMPT,
    PREEMPTION_OVER_BORROWING,
    RECLAIM,
    TRY_NEXT_FLAVOR,
    FlavorFungibility,
    Mode,
    choose,
)
from topogate.admission.quota import QueueSpec
from topogate.api.errors import InputError
from topogate.api.models import ClusterQueue
from topogate.api.validation import parse_model
from topogate.webhooks.review import Review, validate

CPU = "cpu"
DEFAULT = FlavorFungibility()
TRY_NEXT = FlavorFungibility(TRY_NEXT_FLAVOR, TRY_NEXT_FLAVOR)
STOP_ON_PREEMPT = FlavorFungibility(MAY_STOP_SEARCH, MAY_STOP_SEARCH)


# --- The policy ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "fungibility", "preferred"),
    [
        # "feature gate disabled prioritises preemption" (no preference: BorrowingOverPreemption)
        (Mode(FIT, 0), Mode(PREEMPT, 0), TRY_NEXT, True),
        # "explicit BorrowingOverPreemption prioritises borrowing distance"
        (
            Mode(PREEMPT, 1),
            Mode(FIT, 2),
            FlavorFungibility(TRY_NEXT_FLAVOR, TRY_NEXT_FLAVOR, BORROWING_OVER_PREEMPTION),
            False,
        ),
        # "explicit PreemptionOverBorrowing prioritises lower preemption"
        (
            Mode(PREEMPT, 1),
            Mode(FIT, 2),
            FlavorFungibility(TRY_NEXT_FLAVOR, TRY_NEXT_FLAVOR, PREEMPTION_OVER_BORROWING),
            True,
        ),
        # "explicit PreemptionOverBorrowing breaks borrowing ties with preemption"
        (
            Mode(PREEMPT, 1),
            Mode(FIT, 1),
            FlavorFungibility(TRY_NEXT_FLAVOR, TRY_NEXT_FLAVOR, PREEMPTION_OVER_BORROWING),
            False,
        ),
        # Reclaiming from other queues is preferred to preempting in one's own.
        (Mode(RECLAIM, 0), Mode(PREEMPT, 0), DEFAULT, True),
        (Mode(NO_CANDIDATES, 0), Mode(NO_FIT, 0), DEFAULT, True),
        (Mode(NO_FIT, 0), Mode(NO_CANDIDATES, 0), DEFAULT, False),
    ],
)
def test_is_preferred(a: Mode, b: Mode, fungibility: FlavorFungibility, preferred: bool) -> None:
    assert fungibility.preferred(a, b) is preferred


@pytest.mark.parametrize(
    ("mode", "fungibility", "goes_on"),
    [
        (Mode(FIT, 0), TRY_NEXT, False),  # a fit within nominal quota always ends the walk
        (Mode(FIT, 1), DEFAULT, False),  # MayStopSearch: a borrowing fit ends it too
        (Mode(FIT, 1), TRY_NEXT, True),
        (Mode(PREEMPT, 0), DEFAULT, True),  # whenCanPreempt defaults to TryNextFlavor
        (Mode(RECLAIM, 0), STOP_ON_PREEMPT, False),
        (Mode(PREEMPT, 1), FlavorFungibility(TRY_NEXT_FLAVOR, MAY_STOP_SEARCH), True),
        (Mode(NO_CANDIDATES, 0), STOP_ON_PREEMPT, True),
    ],
)
def test_when_the_walk_goes_on(mode: Mode, fungibility: FlavorFungibility, goes_on: bool) -> None:
    assert fungibility.try_next(mode) is goes_on


def test_the_walk_stops_or_takes_the_best_and_the_earliest_on_a_tie() -> None:
    modes = [Mode(FIT, 2), Mode(NO_FIT), Mode(FIT, 1), Mode(FIT, 1)]
    probed: list[int] = []

    def probe(index: int) -> tuple[Mode, int]:
        probed.append(index)
        return modes[index], index

    chosen = choose(len(modes), TRY_NEXT, probe)
    assert chosen is not None and chosen.found == 2 and probed == [0, 1, 2, 3]
    probed.clear()
    chosen = choose(len(modes), DEFAULT, probe)
    assert chosen is not None and chosen.found == 0 and probed == [0]


# --- The field -----------------------------------------------------------------------------


def _queue(fungibility: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "cq"},
        "spec": {
            "flavorFungibility": dict(fungibility),
            "resourceGroups": [
                {
                    "coveredResources": [CPU],
                    "flavors": [{"name": "f", "resources": [{"name": CPU, "nominalQuota": 4}]}],
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("given", "read"),
    [
        ({}, DEFAULT),
        ({"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"}, STOP_ON_PREEMPT),
        (
            {
                "whenCanBorrow": "TryNextFlavor",
                "whenCanPreempt": "TryNextFlavor",
                "preference": "PreemptionOverBorrowing",
            },
            FlavorFungibility(TRY_NEXT_FLAVOR, TRY_NEXT_FLAVOR, PREEMPTION_OVER_BORROWING),
        ),
    ],
)
def test_the_field_is_read_with_kueue_defaults_and_old_names(
    given: Mapping[str, Any], read: FlavorFungibility
) -> None:
    model = parse_model(ClusterQueue, _queue(given), "ClusterQueue cq")
    assert QueueSpec.from_model(model).fungibility == read


def test_a_queue_without_the_field_gets_kueue_defaults() -> None:
    body = _queue({})
    del body["spec"]["flavorFungibility"]
    model = parse_model(ClusterQueue, body, "ClusterQueue cq")
    assert QueueSpec.from_model(model).fungibility == DEFAULT


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"whenCanBorrow": "Later"},
            "ClusterQueue cq: spec.flavorFungibility.whenCanBorrow: 'Later': Input should be "
            "'MayStopSearch', 'TryNextFlavor' or 'Borrow'",
        ),
        (
            {"whenCanPreempt": "Borrow"},
            "ClusterQueue cq: spec.flavorFungibility.whenCanPreempt: 'Borrow': Input should be "
            "'MayStopSearch', 'TryNextFlavor' or 'Preempt'",
        ),
        (
            {"preference": "Both"},
            "ClusterQueue cq: spec.flavorFungibility.preference: 'Both': Input should be "
            "'BorrowingOverPreemption' or 'PreemptionOverBorrowing'",
        ),
        (
            {"whenCanBorrow": "Borrow", "preference": "PreemptionOverBorrowing"},
            "ClusterQueue cq: spec.flavorFungibility: preference PreemptionOverBorrowing can "
            "only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor (they "
            "are MayStopSearch and TryNextFlavor)",
        ),
    ],
)
def test_a_bad_value_is_refused_naming_the_field(given: Mapping[str, Any], message: str) -> None:
    with pytest.raises(InputError) as refused:
        parse_model(ClusterQueue, _queue(given), "ClusterQueue cq")
    assert refused.value.describe() == message


def test_the_validating_webhook_refuses_a_bad_value_naming_the_field() -> None:
    body = {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "ClusterQueue",
        **_queue({"whenCanPreempt": "Sometimes"}),
    }
    answer = validate(
        Review.parse(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "u",
                    "kind": {
                        "group": "topogate.dev",
                        "version": "v1alpha1",
                        "kind": "ClusterQueue",
                    },
                    "operation": "CREATE",
                    "object": body,
                },
            }
        )
    )
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["code"] == 422
    assert answer["response"]["status"]["message"].startswith(
        "ClusterQueue cq: spec.flavorFungibility.whenCanPreempt: 'Sometimes': "
    )
