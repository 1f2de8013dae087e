"""The validating webhook's view inside `serve`: the controller's own state.

Queues, flavors and topologies come from the watched state, with no API call per review. A
HyperNode review is the exception: whether a new HyperNode closes a cycle must be judged
against the HyperNodes that exist now, and the watch may lag a create made a moment ago (a
stale list could let a cycle through), so those reviews list HyperNodes fresh, asynchronously.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from topogate.admission.podsets import Catalog
from topogate.kube.errors import API_ERRORS
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import HYPERNODES
from topogate.state import ControllerState

from .review import ClusterView, Review
from .server import ViewFor

HYPERNODE_GROUP = HYPERNODES.api_version.split("/")[0]


class _WithHyperNodes:
    def __init__(
        self, state: ControllerState, hypernodes: Sequence[Mapping[str, Any]] | None
    ) -> None:
        self._state, self._hypernodes = state, hypernodes

    def catalog_for(self, namespace: str, queue: str) -> Catalog | None:
        return self._state.catalog_for(namespace, queue)

    def hypernodes(self) -> list[Mapping[str, Any]] | None:
        return None if self._hypernodes is None else list(self._hypernodes)


def state_view(state: ControllerState, kube: KubeApi) -> ViewFor:
    """A per-review view provider for the webhook server (see ``server.ViewFor``)."""

    async def view_for(review: Review) -> ClusterView:
        if review.group != HYPERNODE_GROUP:
            return state
        try:
            listed = await kube.list(HYPERNODES)
        except API_ERRORS:
            return _WithHyperNodes(state, None)  # unknown: the object alone is checked
        return _WithHyperNodes(state, listed.get("items") or [])

    return view_for
