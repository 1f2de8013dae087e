"""Partial admission: the largest pod counts, down to each PodSet's minCount, that fit.

Kueue's PartialAdmission (beta, on by default): a Job annotated
``kueue.x-k8s.io/job-min-parallelism`` becomes a PodSet with ``minCount``; when the whole
gang neither fits nor can make room by preemption, the scheduler searches for the largest
counts that fit quota and topology (its ``PodSetReducer``, ``pkg/scheduler/flavorassigner``).
This module is that search, pure: the caller says whether a given request fits.

The search is Kueue's: a binary search over the "reduction index" ``i`` in ``0..D`` (``D``
the sum of ``count - minCount``), where PodSet ``k`` gets ``count_k - delta_k * i // D`` pods.
Quota fits fewer pods whenever it fits more, and so does a topology (a domain that holds
``n`` pods holds ``n - 1``), so the first index that fits gives the largest counts; probing
the same indices as Kueue keeps its answer even where a placement is not monotone.

One topogate rule on top: a PodSet with slice layers is only tried at multiples of its
outermost slice size (topogate refuses a count its slices do not divide, where Kueue leaves
the remainder unplaced), so a tried count is rounded down to one, and below minCount it is
no answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeVar

from .request import PlacementRequest, PodSetRequest

T = TypeVar("T")


def can_shrink(request: PlacementRequest) -> bool:
    """Whether some PodSet may be admitted with fewer pods than it asks for."""
    return any(p.min_count is not None and p.min_count < p.count for p in request.podsets)


def _unit(podset: PodSetRequest) -> int:
    """The step a PodSet's count moves by: its outermost slice size (inner sizes divide it)."""
    return podset.slices[0].size if podset.slices else 1


def counts_at(request: PlacementRequest, index: int, total: int) -> tuple[int, ...] | None:
    """The counts at reduction index ``index`` of ``total`` (Kueue's
    ``fillPodSetSizesForSearchIndex``), rounded down to whole slices; None when a PodSet
    falls below its minCount by that rounding."""
    counts = []
    for podset in request.podsets:
        minimum = podset.min_count if podset.min_count is not None else podset.count
        delta = podset.count - minimum
        count = podset.count - delta * index // total
        unit = _unit(podset)
        count -= count % unit
        if count < minimum:
            return None
        counts.append(count)
    return tuple(counts)


def with_counts(request: PlacementRequest, counts: Sequence[int]) -> PlacementRequest:
    """The same request for ``counts`` pods per PodSet (minCount kept)."""
    return dataclasses.replace(
        request,
        podsets=tuple(
            p if p.count == n else dataclasses.replace(p, count=n)
            for p, n in zip(request.podsets, counts, strict=True)
        ),
    )


def largest_fit(
    request: PlacementRequest, fits: Callable[[PlacementRequest], T | None]
) -> tuple[PlacementRequest, T] | None:
    """The request with the largest counts that ``fits`` (its answer, or None when it does
    not fit), and that answer; None when no counts down to the minima fit.

    ``fits`` is asked about O(log D) requests, the full counts possibly among them (Kueue's
    search starts over from index 0, which the caller has already seen fail). An index
    whose whole slices fall below minCount counts as "too far", so the search stays monotone.
    """
    total = sum(p.count - p.min_count for p in request.podsets if p.min_count is not None)
    if total <= 0:
        return None
    found: tuple[PlacementRequest, T] | None = None
    low, high = 0, total + 1  # Go's sort.Search(total + 1, ...): first index that fits
    while low < high:
        middle = (low + high) // 2
        counts = counts_at(request, middle, total)
        if counts is None:  # whole slices fall below minCount here and at every higher index
            high = middle
            continue
        smaller = with_counts(request, counts)
        answer = fits(smaller)
        if answer is None:
            low = middle + 1
        else:
            high = middle
            found = (smaller, answer)
    return found
