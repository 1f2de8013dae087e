"""Flavor fungibility: which of a ClusterQueue's flavors a workload takes, by Kueue's rules
(its flavor assigner, pkg/scheduler/flavorassigner, with the FlavorFungibility gate on, its
default). Pure and synchronous.

Each flavor tried in order gets a *mode*: how the workload would get quota there (it fits;
it fits once workloads are preempted, in its own queue or reclaimed from others; it does not)
and its *borrowing level*, how far up the cohort tree the quota comes from (0: the queue's
own nominal quota; else the height of the lowest cohort whose subtree holds it). The walk
stops at a flavor the policy lets it take at once; otherwise it goes on and, at the end,
takes the best mode seen by the policy's preference, the earliest flavor on a tie.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

MAY_STOP_SEARCH = "MayStopSearch"
TRY_NEXT_FLAVOR = "TryNextFlavor"
BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"

# How the quota would be had, worst to best (Kueue's preemption modes).
NO_FIT = 0
NO_CANDIDATES = 1  # quota would allow it once others go, but nobody may be preempted
PREEMPT = 2  # preempting in its own queue
RECLAIM = 3  # reclaiming from other queues only
FIT = 4


@dataclass(frozen=True, slots=True, order=False)
class Mode:
    how: int  # NO_FIT .. FIT
    level: int = 0  # borrowing level


@dataclass(frozen=True, slots=True)
class FlavorFungibility:
    """A ClusterQueue's ``spec.flavorFungibility``, Kueue's defaults when unset."""

    when_can_borrow: str = MAY_STOP_SEARCH
    when_can_preempt: str = TRY_NEXT_FLAVOR
    preference: str | None = None  # None: BorrowingOverPreemption

    def try_next(self, mode: Mode) -> bool:
        """Whether the walk goes on past a flavor of this mode (Kueue's shouldTryNextFlavor)."""
        if mode.how in (NO_FIT, NO_CANDIDATES):
            return True
        if mode.how in (PREEMPT, RECLAIM) and self.when_can_preempt == TRY_NEXT_FLAVOR:
            return True
        return mode.level > 0 and self.when_can_borrow == TRY_NEXT_FLAVOR

    def preferred(self, a: Mode, b: Mode) -> bool:
        """Whether mode ``a`` is strictly better than ``b`` (Kueue's isPreferred)."""
        if a.how == NO_FIT:
            return False
        if b.how == NO_FIT:
            return True
        if self.preference == PREEMPTION_OVER_BORROWING:
            if a.level != b.level:
                return a.level < b.level
            return a.how > b.how
        if a.how != b.how:
            return a.how > b.how
        return a.level < b.level

    def fit_ends_walk(self, level: int) -> bool:
        """A fit at this level is taken at once (and nothing later can change that)."""
        return not self.try_next(Mode(FIT, level))

    def preempts_before_fits(self) -> bool:
        """Whether a preemption can win over a flavor where the workload fits now: one that
        stops the walk (``whenCanPreempt: MayStopSearch``), or PreemptionOverBorrowing. With
        neither, preemptions matter only when no flavor fits, and are planned only then."""
        return (
            self.when_can_preempt == MAY_STOP_SEARCH or self.preference == PREEMPTION_OVER_BORROWING
        )


DEFAULT = FlavorFungibility()

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Choice(Generic[T]):
    index: int  # the flavor's position in the queue's order
    mode: Mode
    found: T  # what the caller's probe returned (an admission, a preemption plan)


def choose(
    count: int,
    fungibility: FlavorFungibility,
    probe: Callable[[int], tuple[Mode, T] | None],
) -> Choice[T] | None:
    """Walk flavors ``0..count-1``: ``probe(i)`` says how flavor ``i`` would be had (None: not
    at all). The flavor the walk stops at, or else the best seen, or None."""
    best: Choice[T] | None = None
    for index in range(count):
        probed = probe(index)
        if probed is None:
            continue
        mode, found = probed
        if mode.how == NO_FIT:
            continue
        here = Choice(index, mode, found)
        if not fungibility.try_next(mode):
            return here
        if best is None or fungibility.preferred(mode, best.mode):
            best = here
    return best


def best_of(choices: Sequence[Choice[T]], fungibility: FlavorFungibility) -> Choice[T] | None:
    """The preferred of ``choices`` (in flavor order; the earliest wins a tie)."""
    best: Choice[T] | None = None
    for choice in sorted(choices, key=lambda c: c.index):
        if choice.mode.how == NO_FIT:
            continue
        if best is None or fungibility.preferred(choice.mode, best.mode):
            best = choice
    return best
