"""The admitter writes status.admission as plain data built from the decision: it must be the
very document the models write (``Admission(...).to_wire()``), and its words the ones read back
from that document."""

from __future__ import annotations

import json
import random

import pytest

from topogate.admission.assignments import pod_set_assignments
from topogate.admission.cycle import Admitted
from topogate.admission.request import (
    DomainCount,
    PlacementDecision,
    PlacementRequest,
    PodSetPlacement,
    PodSetRequest,
)
from topogate.api.models import Admission
from topogate.api.topology_assignment import decode
from topogate.controllers.admitter import _admission, _describe

HOST = "kubernetes.io/hostname"
RESOURCES = {"cpu": 1500, "memory": 3 * 2**30, "nvidia.com/gpu": 1, "example.com/x": 7}


def _words(admission: dict[str, object]) -> str:
    """How the admitter worded an admission before: decoded from the written document."""
    parts = []
    for assignment in admission.get("podSetAssignments") or []:  # type: ignore[attr-defined]
        topology = assignment.get("topologyAssignment")
        domains = decode(topology).domains if topology else ()
        text = ", ".join(f"{'/'.join(d.values)} x{d.count}" for d in domains)
        parts.append(f"{assignment['name']}: {text or 'no topology'}")
    return "; ".join(parts)


def _case(rng: random.Random) -> tuple[Admitted, PlacementRequest]:
    podsets, placements = [], []
    for p in range(rng.randint(1, 4)):
        name = f"ps{p}"
        count = rng.choice([0, 1, 3, 8, 40])
        picked = rng.sample(sorted(RESOURCES), rng.randint(0, len(RESOURCES)))
        podsets.append(PodSetRequest(name, count, {r: RESOURCES[r] for r in picked}))
        levels: tuple[str, ...] = rng.choice(
            [("block", "rack", HOST), ("rack", HOST), (HOST,), ("block", "rack")]
        )
        if not count:  # an empty PodSet gets no topology, even if the decision names it
            if rng.random() < 0.5:
                one = DomainCount(tuple(f"v-{lv}" for lv in levels), 1)
                placements.append(PodSetPlacement(name, levels, (one,), {}))
            continue
        if rng.random() < 0.2:
            continue  # no placement: a flavor without topology
        domains, left = [], count
        prefix = rng.choice(["node-", "gpu-a-", "n", ""])
        for d in range(rng.randint(1, count)):
            take = left if d == count - 1 else rng.randint(0, left)
            if take == 0:
                continue
            left -= take
            values = {"block": f"b{d // 4}", "rack": f"r{d}", HOST: f"{prefix}{d:03d}-x"}
            domains.append(DomainCount(tuple(values[lv] for lv in levels), take))
            if not left:
                break
        if left:
            domains.append(DomainCount(tuple(f"last-{lv}" for lv in levels), left))
        placements.append(PodSetPlacement(name, levels, tuple(domains), {}))
    decision = PlacementDecision(True, tuple(placements)) if rng.random() < 0.9 else None
    request = PlacementRequest("ns/w", tuple(podsets))
    return Admitted("ns/w", f"cq-{rng.randint(0, 9)}", "flavor-a", {}, decision), request


@pytest.mark.parametrize("seed", range(200))
def test_the_admission_written_is_the_models_document(seed: int) -> None:
    admitted, request = _case(random.Random(seed))
    wire = _admission(admitted, request)
    words = _describe(wire, admitted.decision)
    model = Admission(
        cluster_queue=admitted.cluster_queue,
        pod_set_assignments=pod_set_assignments(request, admitted.decision, admitted.flavor),
    ).to_wire()
    assert json.dumps(wire) == json.dumps(model)  # same keys, same order, same values
    assert words == _words(model)
