"""The live dashboard of `serve --dashboard`: read-only, on the metrics listener (loopback by
default, like /metrics), fed from the controller's own state; no API call per view.

    GET /dashboard          the page (dashboard.html: inline script and SVG, nothing fetched
                            from elsewhere, so it works offline)
    GET /dashboard/state    the document below, as JSON
    GET /dashboard/events   server-sent events: the document whenever the state changed
                            (checked once a second), and a comment every 15 s to keep
                            proxies from closing the stream

The document (:func:`document`): per ResourceFlavor with a topology, its domains (blocks,
racks, hosts) with capacity, used, reserved (held by admitted Workloads) and free amounts of
the main resource (GPUs when the nodes have any, else CPU); the queue tree (cohorts and
ClusterQueues, with usage, borrowing, pending and admitted counts); and the Workloads, each
with its assignment drawn onto its topology's domains or, if pending, the reason and the
domain where it came nearest to fitting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

import numpy as np
from aiohttp import web

from topogate.admission.podsets import flavor_tolerations
from topogate.admission.quota import quota_rows
from topogate.api.constants import ANNOTATION_PREFIXES, PREFERRED_TOPOLOGY, REQUIRED_TOPOLOGY
from topogate.api.errors import InputError
from topogate.api.objects import is_admitted, is_finished
from topogate.api.podspec import pod_requests
from topogate.api.topology_assignment import decode
from topogate.cache.selectors import node_states
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree
from topogate.kube.resources import WORKLOADS, Obj

if TYPE_CHECKING:
    from topogate.admission.podsets import Catalog
    from topogate.state import ControllerState

log = logging.getLogger("topogate.dashboard")

GPU = "nvidia.com/gpu"
NODE_LEVEL = "node"  # DomainTree's level below a topology whose lowest is not the hostname
MAX_WORKLOADS = 1000  # listed at most (pending first, then newest); the count says how many
CHECK_INTERVAL = 1.0
KEEPALIVE = 15.0
# A viewer holds a copy of the document in its connection's buffer until it reads it: at most
# this many viewers stream at once, and one that reads nothing for WRITE_TIMEOUT is dropped.
MAX_VIEWERS = 32
WRITE_TIMEOUT = 30.0


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# --- topologies --------------------------------------------------------------------------


@dataclass(slots=True)
class TopologyPicture:
    """One flavor's topology over its nodes: per domain, sums of the main resource."""

    flavor: str
    topology: str
    tree: DomainTree
    levels: tuple[str, ...]
    resource: str
    free_nodes: np.ndarray[Any, np.dtype[np.int64]]  # per tree node, every resource column
    domains: list[dict[str, Any]] = field(default_factory=list)
    by_path: dict[tuple[str, ...], int] = field(default_factory=dict)
    # Per tuple of level positions: the values there -> the path (built once, on first use).
    _by_values: dict[tuple[int, ...], dict[tuple[str, ...], tuple[str, ...]]] = field(
        default_factory=dict
    )
    # Per (level, pod request): the nearest domain (pending Workloads often ask alike).
    _nearest: dict[tuple[int, tuple[tuple[int, int], ...]], tuple[int, int]] = field(
        default_factory=dict
    )

    def path_of(self, positions: tuple[int, ...], values: Sequence[str]) -> tuple[str, ...] | None:
        index = self._by_values.get(positions)
        if index is None:
            depth = positions[-1] + 1
            index = {
                tuple(path[p] for p in positions): path
                for path in self.by_path
                if len(path) == depth
            }
            self._by_values[positions] = index
        return index.get(tuple(values))

    def nearest(self, level: int, columns: tuple[tuple[int, int], ...]) -> tuple[int, int]:
        """(domain, pods that fit) at ``level`` for pods of ``columns`` (column, amount): the
        most; of equals, the first by path."""
        key = (level, columns)
        if key not in self._nearest:
            fits = np.min(np.stack([self.free_nodes[:, c] // a for c, a in columns]), axis=0)
            totals = np.zeros(self.tree.size(level), dtype=np.int64)
            np.add.at(totals, self.tree.member_domain[level], fits)
            best = int(np.lexsort((self.tree.lexrank[level], -totals))[0])
            self._nearest[key] = (best, int(totals[best]))
        return self._nearest[key]

    def document(self) -> dict[str, Any]:
        return {
            "flavor": self.flavor,
            "topology": self.topology,
            "levels": list(self.levels),
            "resource": self.resource,
            "domains": self.domains,
        }


def _reserved_per_node(state: ControllerState, snapshot: ClusterSnapshot) -> np.ndarray[Any, Any]:
    """What admitted (or being admitted) Workloads hold, per snapshot node and resource."""
    held = np.zeros_like(snapshot.used)
    for key in state.ledger.held():
        for node, amounts in state.ledger.workload_usage(key).items():
            row = snapshot.node_index.get(node)
            if row is None:
                continue
            for resource, amount in amounts.items():
                column = snapshot.resource_index.get(resource)
                if column is not None:
                    held[row, column] += amount
    return held


def _picture(
    flavor: str,
    topology: str,
    tree: DomainTree,
    snapshot: ClusterSnapshot,
    reserved: np.ndarray[Any, Any],
) -> TopologyPicture:
    nodes = tree.nodes
    has_gpus = GPU in snapshot.resource_index and bool(
        (snapshot.allocatable[nodes, snapshot.resource_index[GPU]] > 0).any()
    )
    resource = GPU if has_gpus else "cpu"
    levels = tuple(tree.level_keys) + ((NODE_LEVEL,) if tree.depth > tree.topology_depth else ())
    picture = TopologyPicture(flavor, topology, tree, levels, resource, snapshot.free[nodes])
    column = snapshot.resource_index.get(resource)
    per_node = np.zeros((len(nodes), 4), dtype=np.int64)
    if column is not None:
        per_node[:, 0] = snapshot.allocatable[nodes, column]
        per_node[:, 1] = snapshot.used[nodes, column]
        per_node[:, 2] = reserved[nodes, column]
        per_node[:, 3] = snapshot.free[nodes, column]
    rows: list[tuple[tuple[str, ...], int, list[int]]] = []
    for level in range(tree.depth):
        totals = np.zeros((tree.size(level), 4), dtype=np.int64)
        np.add.at(totals, tree.member_domain[level], per_node)
        counts = np.bincount(tree.member_domain[level], minlength=tree.size(level)).tolist()
        for domain, sums in enumerate(totals.tolist()):
            rows.append((tree.path(level, domain), counts[domain], sums))
    rows.sort(key=lambda row: row[0])  # parents right before their children
    for path, count, (capacity, used, held, free) in rows:
        picture.by_path[path] = len(picture.domains)
        picture.domains.append(
            {
                "path": list(path),
                "level": levels[len(path) - 1],
                "nodes": count,
                "capacity": capacity,
                "used": used,
                "reserved": min(held, used),
                "free": free,
            }
        )
    return picture


def pictures(state: ControllerState, catalog: Catalog) -> dict[str, TopologyPicture]:
    """Per ResourceFlavor with a topology the catalog has: its picture."""
    snapshot = state.ledger.snapshot()
    reserved = _reserved_per_node(state, snapshot)
    found: dict[str, TopologyPicture] = {}
    for name, flavor in sorted(catalog.flavors.items()):
        topology = flavor.spec.topology_name
        source = catalog.sources.get(topology) if topology else None
        if source is None or topology is None:
            continue
        try:
            tree = source.tree(snapshot, flavor.spec.node_labels or None)
            tolerations = flavor_tolerations(flavor)
        except InputError as error:  # left out of the page; the admitter reports it
            log.debug("dashboard: flavor %s: %s", name, error.describe())
            continue
        picture = _picture(name, topology, tree, snapshot, reserved)
        # Nothing is free for "nearest" on a node plan would not place on (not ready,
        # cordoned, a taint the flavor does not tolerate): the placement's own rule.
        states = node_states(snapshot, tree.nodes, tolerations)
        picture.free_nodes = picture.free_nodes * states.available[:, None]
        found[name] = picture
    return found


# --- queues ------------------------------------------------------------------------------


def queues(state: ControllerState, catalog: Catalog, pending: Mapping[str, int]) -> dict[str, Any]:
    """The cohort tree and each ClusterQueue's quota rows, pending and admitted counts."""
    admitted: dict[str, int] = {}
    for key in state.ledger.held():
        admission = state.ledger.reserved(key)
        cq = str(_dict(admission).get("clusterQueue") or "")
        admitted[cq] = admitted.get(cq, 0) + 1
    rows = quota_rows(catalog.queues, state.workloads.quota_in_use(), pending, catalog.cohorts)
    by_queue: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_queue.setdefault(row.queue, []).append(
            {
                "flavor": row.flavor,
                "resource": row.resource,
                "nominal": row.nominal,
                "used": row.used,
                "borrowed": row.borrowed,
                "available": row.available,
            }
        )
    cohorts: dict[str, str | None] = {
        name: spec.parent for name, spec in sorted(catalog.cohorts.items())
    }
    for spec in catalog.queues.values():
        if spec.cohort:
            cohorts.setdefault(spec.cohort, None)
    for parent in list(cohorts.values()):
        if parent:
            cohorts.setdefault(parent, None)
    return {
        "cohorts": [{"name": n, "parent": p} for n, p in sorted(cohorts.items())],
        "clusterQueues": [
            {
                "name": name,
                "cohort": spec.cohort,
                "pending": pending.get(name, 0),
                "admitted": admitted.get(name, 0),
                "resources": by_queue.get(name, []),
            }
            for name, spec in sorted(catalog.queues.items())
        ],
    }


# --- workloads ---------------------------------------------------------------------------


def _state_of(workload: Obj) -> tuple[str, str]:
    """(state, message): Finished, Admitted, Pending (with the reason written), Queued."""
    conditions = {
        c.get("type"): c for c in map(_dict, _list(_dict(workload.get("status")).get("conditions")))
    }
    if is_finished(workload):
        return "Finished", ""
    if is_admitted(workload):
        return "Admitted", ""
    reserved = conditions.get("QuotaReserved")
    if reserved is not None and reserved.get("status") == "False":
        return "Pending", str(reserved.get("message") or reserved.get("reason") or "")
    return "Queued", ""


def _assigned_paths(
    picture: TopologyPicture, levels: Sequence[str], values: Sequence[str]
) -> list[str] | None:
    """The tree path of an assigned domain named by values on (some of) the levels."""
    positions = tuple(picture.levels.index(level) for level in levels if level in picture.levels)
    if len(positions) != len(levels) or not positions:
        return None
    path = picture.path_of(positions, values)
    return list(path) if path is not None else None


def _assignment(
    admission: Mapping[str, Any], picture: TopologyPicture | None
) -> list[dict[str, Any]]:
    drawn = []
    for pod_set in map(_dict, _list(admission.get("podSetAssignments"))):
        topology = pod_set.get("topologyAssignment")
        if not topology:
            continue
        try:
            decoded = decode(topology, field="topologyAssignment")
        except InputError:
            continue
        for domain in decoded.domains:
            path = _assigned_paths(picture, decoded.levels, domain.values) if picture else None
            drawn.append(
                {
                    "podSet": str(pod_set.get("name") or ""),
                    "levels": list(decoded.levels),
                    "values": list(domain.values),
                    "count": domain.count,
                    "path": path,
                }
            )
    return drawn


def _wanted_level(pod_set: Mapping[str, Any]) -> str | None:
    request = _dict(pod_set.get("topologyRequest"))
    level = request.get("required") or request.get("preferred")
    if not level:
        template = _dict(pod_set.get("template"))
        annotations = _dict(_dict(template.get("metadata")).get("annotations"))
        for key in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY):
            for prefix in ANNOTATION_PREFIXES:
                level = level or annotations.get(prefix + key)
    return str(level) if level else None


def nearest(
    picture: TopologyPicture, workload: Obj, snapshot: ClusterSnapshot
) -> dict[str, Any] | None:
    """Of the domains at the level the first PodSet asks for, the one where the most of its
    pods would fit on free capacity (ties: the first by path): where it came nearest."""
    pod_sets = [_dict(p) for p in _list(_dict(workload.get("spec")).get("podSets"))]
    if not pod_sets:
        return None
    first = pod_sets[0]
    level = _wanted_level(first) or picture.levels[-1]
    if level not in picture.levels:
        return None
    try:
        request = pod_requests(_dict(_dict(first.get("template")).get("spec")), "workload")
    except InputError:
        return None
    columns = [(snapshot.resource_index.get(r), amount) for r, amount in request.items() if amount]
    known = tuple(sorted((c, amount) for c, amount in columns if c is not None))
    tree_level = picture.levels.index(level)
    if not known or len(known) != len(columns) or not picture.tree.size(tree_level):
        return None  # asks for nothing, or for a resource no node has
    best, fits = picture.nearest(tree_level, known)
    return {
        "level": level,
        "path": list(picture.tree.path(tree_level, best)),
        "fits": fits,
        "count": int(first.get("count") or 0),
    }


def _queue_of(catalog: Catalog, workload: Obj) -> str | None:
    namespace = str(_dict(workload.get("metadata")).get("namespace") or "")
    cq, _ = catalog.cluster_queue(namespace, _dict(workload.get("spec")).get("queueName"))
    return cq


def _flavor_picture(
    catalog: Catalog, cq: str | None, found: Mapping[str, TopologyPicture]
) -> TopologyPicture | None:
    """The picture of the queue's first flavor with a topology (Kueue's TAS flavor)."""
    queue = catalog.queues.get(cq or "")
    for flavor in queue.flavors if queue is not None else ():
        if flavor.flavor in found:
            return found[flavor.flavor]
    return None


def _entry(
    key: str,
    workload: Obj,
    catalog: Catalog,
    found: Mapping[str, TopologyPicture],
    snapshot: ClusterSnapshot,
) -> dict[str, Any] | None:
    """One Workload as the page lists it; None when it is finished."""
    phase, message = _state_of(workload)
    if phase == "Finished":
        return None
    admission = _dict(_dict(workload.get("status")).get("admission"))
    cq = str(admission.get("clusterQueue") or "") or _queue_of(catalog, workload)
    picture = _flavor_picture(catalog, cq, found)
    metadata = _dict(workload.get("metadata"))
    entry: dict[str, Any] = {
        "key": key,
        "namespace": str(metadata.get("namespace") or ""),
        "name": str(metadata.get("name") or ""),
        "created": str(metadata.get("creationTimestamp") or ""),
        "clusterQueue": cq,
        "flavor": picture.flavor if picture else None,
        "state": phase,
        "message": message,
        "pods": sum(
            int(_dict(p).get("count") or 0)
            for p in _list(_dict(workload.get("spec")).get("podSets"))
        ),
        "assignment": _assignment(admission, picture),
        "nearest": None,
    }
    if phase == "Pending" and picture is not None:
        entry["nearest"] = nearest(picture, workload, snapshot)
    return entry


def workloads(
    state: ControllerState,
    catalog: Catalog,
    found: Mapping[str, TopologyPicture],
    snapshot: ClusterSnapshot,
) -> tuple[list[dict[str, Any]], dict[str, int], int]:
    """(the listed Workloads, pending per ClusterQueue, how many there are in all)."""
    listed: list[dict[str, Any]] = []
    pending: dict[str, int] = {}
    objects = state.store.objects(WORKLOADS)
    for key, workload in objects.items():
        try:
            entry = _entry(key, workload, catalog, found, snapshot)
        except (InputError, ValueError, TypeError) as error:  # shown without it, never a crash
            log.debug("dashboard: Workload %s left out: %s", key, error)
            continue
        if entry is None:
            continue
        if entry["state"] in ("Pending", "Queued") and entry["clusterQueue"]:
            pending[entry["clusterQueue"]] = pending.get(entry["clusterQueue"], 0) + 1
        listed.append(entry)
    # Pending first (what people come to ask about), then the newest.
    listed.sort(key=lambda w: w["created"], reverse=True)
    listed.sort(key=lambda w: w["state"] not in ("Pending", "Queued"))
    return listed[:MAX_WORKLOADS], pending, len(listed)


def document(state: ControllerState, leading: bool) -> dict[str, Any]:
    """Everything the page shows, from the controller's state alone."""
    catalog = state.catalogs.catalog()
    snapshot = state.ledger.snapshot()
    found = pictures(state, catalog)
    listed, pending, total = workloads(state, catalog, found, snapshot)
    return {
        "leading": leading,
        "topologies": [picture.document() for picture in found.values()],
        "queues": queues(state, catalog, pending),
        "workloads": listed,
        "workloadCount": total,
    }


# --- serving -----------------------------------------------------------------------------


class Feed:
    """The document, shared by all viewers, rebuilt only after the state changed (every
    watched resource and every admission step bumps the version). It is built on the
    controller's event loop, so a rebuild waits at least ``BUSY_SHARE`` times as long as the
    last one took: the page never takes more than a tenth of the loop from admission (4,096
    nodes and 3,000 Workloads take about half a second on a loaded 2-core machine)."""

    BUSY_SHARE = 10

    def __init__(
        self,
        state: ControllerState,
        leading: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from topogate.state.store import WATCHED

        self.state, self.leading, self.clock = state, leading, clock
        self.version = 1
        self.viewers = 0  # event streams open now
        self._built: tuple[tuple[int, bool], bytes] | None = None
        self._next_build = 0.0
        for resource in WATCHED:
            state.subscribe(resource, self._changed)
        state.ledger.on_change(lambda _key: self._bump())

    def _changed(self, _old: Obj | None, _new: Obj | None) -> None:
        self._bump()

    def _bump(self) -> None:
        self.version += 1

    def current(self) -> tuple[tuple[int, bool], bytes]:
        """(what it was built from, the JSON document)."""
        made_of = (self.version, self.leading())
        started = self.clock()
        if self._built is None or (self._built[0] != made_of and started >= self._next_build):
            body = json.dumps(document(self.state, made_of[1]), separators=(",", ":"))
            self._built = (made_of, body.encode())
            self._next_build = started + (self.clock() - started) * self.BUSY_SHARE
        return self._built


_FEED = web.AppKey("dashboard", Feed)


def add_dashboard(app: web.Application, feed: Feed) -> None:
    """The dashboard's routes, on ``app`` (the metrics listener's)."""
    app[_FEED] = feed
    app.router.add_get("/dashboard", _page)
    app.router.add_get("/dashboard/state", _state)
    app.router.add_get("/dashboard/events", _events)


def page_html() -> str:
    return resources.files("topogate.runtime").joinpath("dashboard.html").read_text("utf-8")


async def _page(request: web.Request) -> web.Response:
    return web.Response(text=page_html(), content_type="text/html", charset="utf-8")


async def _state(request: web.Request) -> web.Response:
    _, body = request.app[_FEED].current()
    return web.Response(body=body, content_type="application/json")


async def _events(request: web.Request) -> web.StreamResponse:
    feed = request.app[_FEED]
    if feed.viewers >= MAX_VIEWERS:
        raise web.HTTPServiceUnavailable(
            text=f"the dashboard streams to {MAX_VIEWERS} viewers at most; "
            "GET /dashboard/state reads the document once\n",
            headers={"Retry-After": "30"},
        )
    feed.viewers += 1
    try:
        return await _stream(request, feed)
    finally:
        feed.viewers -= 1


async def _stream(request: web.Request, feed: Feed) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    sent: tuple[int, bool] | None = None
    quiet = 0.0
    # A viewer that went away ends the stream (serve's shutdown cancels it).
    with contextlib.suppress(ConnectionResetError):
        while True:
            made_of, body = feed.current()
            if made_of != sent:
                if not await _send(request, response, b"data: " + body + b"\n\n"):
                    break
                sent, quiet = made_of, 0.0
            elif quiet >= KEEPALIVE:
                if not await _send(request, response, b": keep-alive\n\n"):
                    break
                quiet = 0.0
            await asyncio.sleep(CHECK_INTERVAL)
            quiet += CHECK_INTERVAL
    return response


async def _send(request: web.Request, response: web.StreamResponse, data: bytes) -> bool:
    """Write ``data``; False when the viewer read nothing for WRITE_TIMEOUT (its connection is
    closed, freeing what it left unread)."""
    try:
        await asyncio.wait_for(response.write(data), WRITE_TIMEOUT)
    except TimeoutError:
        log.info("dropped a dashboard viewer that read nothing for %s s", WRITE_TIMEOUT)
        if request.transport is not None:
            request.transport.abort()
        return False
    return True
