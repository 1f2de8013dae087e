"""The cycle's memo of quota refusals: a fit is kept with the quota state it was found in and
trusted only in that state, so with the refusals cleared at every change of the quota in use
(as the cycle's walk clears them) each answer equals one worked out from scratch."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from topogate.admission.cycle import _quota_refusal, _Refusals
from topogate.admission.quota import CohortTree, FlavorQuota, QueueSpec, QuotaBook

QUEUES = {
    name: QueueSpec(
        name,
        "BestEffortFIFO",
        (
            FlavorQuota("a", {"cpu": 8, "gpu": 4}),
            FlavorQuota("b", {"cpu": 16}, borrowing={"cpu": 4}),
        ),
        cohort="c",
    )
    for name in ("q0", "q1")
}
SHAPES = [(("cpu", 2),), (("cpu", 6),), (("cpu", 2), ("gpu", 2)), (("gpu", 3),), (("mem", 1),)]

op = st.one_of(
    st.tuples(
        st.just("add"),
        st.sampled_from(sorted(QUEUES)),
        st.sampled_from(["a", "b"]),
        st.sampled_from(["cpu", "gpu"]),
        st.integers(-4, 6),
    ),
    st.tuples(st.just("ask"), st.sampled_from(sorted(QUEUES)), st.integers(0, len(SHAPES) - 1)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=40))
def test_memoised_refusals_equal_fresh_ones(ops: list[tuple[object, ...]]) -> None:
    book = QuotaBook(QUEUES, {}, CohortTree(QUEUES, None))
    memo, cleared_at = _Refusals(), 0
    for one in ops:
        if one[0] == "add":
            _, queue, flavor, resource, amount = one
            book.add(str(queue), str(flavor), {str(resource): int(str(amount))})
            continue
        if book.changes != cleared_at:
            memo.words.clear()
            cleared_at = book.changes
        queue, shape = QUEUES[str(one[1])], SHAPES[int(str(one[2]))]
        fresh = _quota_refusal(_Refusals(), queue, book, shape)
        assert _quota_refusal(memo, queue, book, shape) == fresh
