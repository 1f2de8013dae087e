"""CPU per admission of the admitter's ``status.admission`` document and its words: built as
plain data from the decision (what serve does) against through the API models with the
assignment decoded back for the words (what it did), on assignments shaped as in Kueue's TAS
scenario (one PodSet, block/rack/hostname levels, 1-40 pods at up to 8 per node).

    .venv/bin/python hack/bench_admission_wire.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

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
from topogate.kube.resources import Obj

LEVELS = ("cloud.provider.com/topology-block", "cloud.provider.com/topology-rack")
HOST = "kubernetes.io/hostname"


def cases() -> list[tuple[Admitted, PlacementRequest]]:
    out = []
    for pods in (1, 3, 8, 16, 40):
        nodes = [(f"b{n // 32}", f"r{n // 8}", f"kwok-node-{n}") for n in range(0, pods, 8)]
        counts = [min(8, pods - 8 * i) for i in range(len(nodes))]
        domains = tuple(DomainCount(v, c) for v, c in zip(nodes, counts, strict=True))
        placement = PodSetPlacement("main", (*LEVELS, HOST), domains, {})
        request = PlacementRequest("ns/w", (PodSetRequest("main", pods, {"cpu": 1000}),))
        decision = PlacementDecision(True, (placement,))
        out.append((Admitted("ns/w", "cq", "tas-flavor", {}, decision), request))
    return out


def through_models(admitted: Admitted, request: PlacementRequest) -> tuple[Obj, str]:
    wire = Admission(
        cluster_queue=admitted.cluster_queue,
        pod_set_assignments=pod_set_assignments(request, admitted.decision, admitted.flavor),
    ).to_wire()
    parts = []
    for assignment in wire["podSetAssignments"]:
        topology = assignment.get("topologyAssignment")
        domains = decode(topology).domains if topology else ()
        text = ", ".join(f"{'/'.join(d.values)} x{d.count}" for d in domains)
        parts.append(f"{assignment['name']}: {text or 'no topology'}")
    return wire, "; ".join(parts)


def plain(admitted: Admitted, request: PlacementRequest) -> tuple[Obj, str]:
    wire = _admission(admitted, request)
    return wire, _describe(wire, admitted.decision)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    inputs = cases()
    for a, r in inputs:
        assert through_models(a, r) == plain(a, r)
    ways: dict[str, Callable[[Admitted, PlacementRequest], tuple[Obj, str]]] = {
        "through the models": through_models,
        "plain data": plain,
    }
    for name, build in ways.items():
        started = time.process_time()
        for _ in range(args.rounds):
            for a, r in inputs:
                build(a, r)
        per = (time.process_time() - started) / (args.rounds * len(inputs))
        print(f"{name:20} {per * 1e6:7.1f} us CPU per admission")


if __name__ == "__main__":
    main()
