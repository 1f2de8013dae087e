"""Topology requests in other projects' words: KAI-Scheduler, Volcano, and Volcano's HyperJob.

Read from pod-template annotations, next to Kueue's (api/annotations.py):

- KAI-Scheduler: ``kai.scheduler/topology`` (which Topology), ``kai.scheduler/topology-required-
  placement`` and ``kai.scheduler/topology-preferred-placement`` (level names). Both placements at
  once mean: try the preferred level, climb no higher than the required one.
- Volcano's networkTopology, as one JSON annotation ``topogate.dev/network-topology`` with
  Volcano's own field names: ``{"mode": "hard"|"soft", "highestTierAllowed": 2}`` or
  ``{"mode": "hard", "highestTierName": "spine"}``. Volcano keeps this on its Job/PodGroup;
  an annotation lets a batch/v1 Job or a JobSet say the same thing.
- ``topogate.dev/topology-name``: which topology the job uses (KAI's key is accepted too).
- ``topogate.dev/balanced-placement: "true"`` on a preferred request: Kueue's balanced
  placement (an even split over the fewest domains), which Kueue has behind a feature gate.
- Volcano's HyperJob on a JobSet: ``topogate.dev/replica-required-topology: <level>`` on a
  replicated job's pod template puts each replica (one child Job) whole into a domain of that
  level of its own; the JobSet is still admitted as one gang.

This module only parses and checks the annotations; which level a name means is decided
against a topology when the request is built (topogate/planner.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from . import constants as c
from .annotations import AnnotationError
from .errors import loads_json

KAI_TOPOLOGY = "kai.scheduler/topology"
KAI_REQUIRED = "kai.scheduler/topology-required-placement"
KAI_PREFERRED = "kai.scheduler/topology-preferred-placement"
TOPOLOGY_NAME = f"{c.GROUP}/topology-name"
NETWORK_TOPOLOGY = f"{c.GROUP}/network-topology"
REPLICA_REQUIRED_TOPOLOGY = f"{c.GROUP}/replica-required-topology"
BALANCED_PLACEMENT = f"{c.GROUP}/balanced-placement"

VOLCANO_HARD = "hard"
VOLCANO_SOFT = "soft"
_MAX_NAME = 253


@dataclass(frozen=True, slots=True)
class VolcanoTopology:
    mode: str  # hard | soft
    highest_tier: int | None = None
    highest_tier_name: str | None = None


@dataclass(frozen=True, slots=True)
class VocabularyRequest:
    """What a pod template asks for in KAI or Volcano words (all optional)."""

    topology: str | None = None
    kai_required: str | None = None
    kai_preferred: str | None = None
    volcano: VolcanoTopology | None = None
    replica_level: str | None = None
    balanced: bool = False

    @property
    def places(self) -> bool:
        """Whether it constrains placement (a topology name alone does not)."""
        return bool(self.kai_required or self.kai_preferred or self.volcano)


def _name(annotations: Mapping[str, str], key: str, path: str, problems: list[str]) -> str | None:
    if key not in annotations:
        return None
    value = str(annotations[key])
    if not value or len(value) > _MAX_NAME:
        problems.append(
            f"{path}[{key}]: Invalid value: {value!r}: must be a non-empty name of at most "
            f"{_MAX_NAME} characters"
        )
        return None
    return value


def _volcano(text: str, where: str, problems: list[str]) -> VolcanoTopology | None:
    expected = (
        'expected {"mode": "hard"|"soft", "highestTierAllowed": <tier>} or '
        '{"mode": "hard", "highestTierName": "<tier name>"}'
    )
    try:
        raw = loads_json(text)
    except ValueError as exc:
        problems.append(f"{where}: Invalid value: {text!r}: must be a JSON object: {exc}")
        return None
    if not isinstance(raw, dict):
        problems.append(f"{where}: Invalid value: {text!r}: {expected}")
        return None
    before = len(problems)
    unknown = sorted(set(raw) - {"mode", "highestTierAllowed", "highestTierName"})
    if unknown:
        problems.append(
            f"{where}: Invalid value: unknown field(s) {', '.join(unknown)}; {expected}"
        )
    mode = raw.get("mode", VOLCANO_HARD)  # Volcano's default
    if mode not in (VOLCANO_HARD, VOLCANO_SOFT):
        problems.append(
            f'{where}.mode: Unsupported value: {mode!r}: supported values: "hard", "soft"'
        )
    tier = raw.get("highestTierAllowed")
    tier_name = raw.get("highestTierName")
    if tier is not None and (isinstance(tier, bool) or not isinstance(tier, int) or tier < 0):
        problems.append(
            f"{where}.highestTierAllowed: Invalid value: {tier!r}: must be an integer >= 0"
        )
    if tier_name is not None and (
        not isinstance(tier_name, str) or not tier_name or len(tier_name) > _MAX_NAME
    ):
        problems.append(
            f"{where}.highestTierName: Invalid value: {tier_name!r}: must be a non-empty string "
            f"of at most {_MAX_NAME} characters"
        )
    if tier is not None and tier_name is not None:
        problems.append(
            f"{where}: Invalid value: highestTierAllowed and highestTierName may not both be set"
        )
    if mode == VOLCANO_HARD and tier is None and tier_name is None:
        # Volcano runs such a job with no constraint at all; a person meant something else.
        problems.append(
            f"{where}: Required value: hard mode needs highestTierAllowed or highestTierName"
        )
    if len(problems) > before:
        return None
    return VolcanoTopology(str(mode), tier, tier_name)


def vocabulary_request(annotations: Mapping[str, str], path: str) -> VocabularyRequest | None:
    """The KAI/Volcano/HyperJob request of a pod template, or None; AnnotationError lists all.

    ``path`` is the annotations' field path, as in ``topology_request``.
    """
    problems: list[str] = []
    names = {
        key: _name(annotations, key, path, problems)
        for key in (KAI_TOPOLOGY, TOPOLOGY_NAME, KAI_REQUIRED, KAI_PREFERRED)
    }
    topology = names[TOPOLOGY_NAME] or names[KAI_TOPOLOGY]
    if names[TOPOLOGY_NAME] and names[KAI_TOPOLOGY] and names[TOPOLOGY_NAME] != names[KAI_TOPOLOGY]:
        problems.append(
            f"{path}[{TOPOLOGY_NAME}]: Invalid value: {names[TOPOLOGY_NAME]!r}: conflicts with "
            f"{KAI_TOPOLOGY}={names[KAI_TOPOLOGY]!r}"
        )
    volcano = None
    if NETWORK_TOPOLOGY in annotations:
        volcano = _volcano(
            str(annotations[NETWORK_TOPOLOGY]), f"{path}[{NETWORK_TOPOLOGY}]", problems
        )
    replica = _name(annotations, REPLICA_REQUIRED_TOPOLOGY, path, problems)
    balanced = False
    if BALANCED_PLACEMENT in annotations:
        text = str(annotations[BALANCED_PLACEMENT])
        if text not in ("true", "false"):
            problems.append(
                f"{path}[{BALANCED_PLACEMENT}]: Unsupported value: {text!r}: supported values: "
                '"true", "false"'
            )
        balanced = text == "true"
    kai = names[KAI_REQUIRED] or names[KAI_PREFERRED]
    kueue = sorted(
        prefix + name
        for name in (c.REQUIRED_TOPOLOGY, c.PREFERRED_TOPOLOGY, c.UNCONSTRAINED_TOPOLOGY)
        for prefix in c.ANNOTATION_PREFIXES
        if prefix + name in annotations
    )
    used = [
        what
        for what, present in (
            ("Kueue (" + ", ".join(kueue) + ")", bool(kueue)),
            (f"KAI-Scheduler ({KAI_REQUIRED}/{KAI_PREFERRED})", bool(kai)),
            (f"Volcano ({NETWORK_TOPOLOGY})", NETWORK_TOPOLOGY in annotations),
        )
        if present
    ]
    if len(used) > 1:
        problems.append(
            f"{path}: Invalid value: topology requests in more than one vocabulary: "
            f"{'; '.join(used)}; use one"
        )
    if problems:
        raise AnnotationError(problems)
    if not (topology or kai or volcano or replica or balanced):
        return None
    return VocabularyRequest(
        topology=topology,
        kai_required=names[KAI_REQUIRED],
        kai_preferred=names[KAI_PREFERRED],
        volcano=volcano,
        replica_level=replica,
        balanced=balanced,
    )
