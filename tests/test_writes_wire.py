"""topogate/controllers/writes.py builds conditions as plain dicts (no model on the write
path): the same wire form as the API model's, so what is written did not change."""

from __future__ import annotations

from typing import Literal

import pytest

from topogate.api.models import Condition
from topogate.controllers import writes


@pytest.mark.parametrize("status", ["True", "False"])
def test_a_condition_is_the_models_wire_form(
    status: Literal["True", "False"], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writes, "now", lambda: "2026-01-02T03:04:05Z")
    built = writes.new_condition("QuotaReserved", status, "Pending", "waits for quota")
    model = Condition(
        type="QuotaReserved",
        status=status,
        reason="Pending",
        message="waits for quota",
        last_transition_time="2026-01-02T03:04:05Z",
    ).to_wire()
    assert built == model
    assert list(built) == list(model)  # the same keys in the same order: the same bytes
