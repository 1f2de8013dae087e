"""An in-memory API server behind the controller's transport seam, for unit tests of the shells.

``FakeKube`` has the methods of ``topogate.kube.client.Kube`` (the way httpx's
``MockTransport`` stands in for the network) and keeps the API server's rules that controllers
depend on:

* one global, monotonically increasing ``resourceVersion`` (a string) set on every write;
  ``uid``, ``creationTimestamp`` and ``generation`` set on create; ``generation`` bumped when
  anything but metadata (and status, where status is a subresource) changes; a write that
  changes nothing is a no-op (no new version, no watch event), as on a real server;
* 409 AlreadyExists on create of an existing name; 404 NotFound on get/patch/replace of a
  missing object (``delete`` swallows 404, as ``Kube.delete`` does);
* optimistic concurrency: a replace, or a patch whose result carries a
  ``metadata.resourceVersion`` (a merge patch guarded by the version read, a JSON patch that
  sets it), fails with 409 Conflict when it is not the stored one;
* merge patches (RFC 7386) and JSON patches (RFC 6902: add, remove, replace, move, copy, test;
  ``~0``/``~1`` escapes, ``/-`` append), applied atomically; a failed ``test`` or a missing
  path is 422 Invalid;
* the ``status`` subresource, for the plurals given as having one: a status write changes only
  ``status``; any other write (create included) leaves ``status`` as stored. A status write to a
  plural without one is 404;
* finalizers: deleting an object with finalizers sets ``deletionTimestamp``; it goes away when
  a later write empties ``metadata.finalizers``;
* list (``labelSelector``: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``; ``fieldSelector``:
  dotted paths with ``=``/``==``/``!=``) returns everything at once with the current version;
* watch replays the event log after the given version (``""``/``"0"``: the current objects as
  ADDED), then streams live until ``timeout_seconds`` or :meth:`FakeKube.close_watches`; a
  version older than the compaction point (:meth:`FakeKube.compact`) raises 410 Expired. With
  a selector, an object that stops matching arrives as DELETED and one that starts as ADDED.

Not modelled: owner-reference garbage collection, graceful pod deletion, admission webhooks,
defaulting and validation of object schemas, strategic merge and server-side apply, paging
(``limit``/``continue`` are ignored). Objects are stored per (``Resource.key``, namespace,
name): the plural, or a key of its own where two groups share a plural (KAI's topologies), so
resources given as ``Resource`` objects keep apart; over HTTP, groups with the same plural
share a store.

Every call is recorded in :attr:`FakeKube.calls`; :meth:`FakeKube.fail_next` makes the next
matching calls raise any exception (a ``KubeError``, a reset connection, a timeout), before
the request reaches the store or, with ``after_write=True``, after it was applied (the answer
lost on the way back).
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
import uuid
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeVar
from urllib.parse import unquote

from topogate.api.kinds import JOB_KINDS
from topogate.kube.errors import KubeError
from topogate.kube.ratelimit import check_before_send
from topogate.kube.resources import JSON_PATCH, MERGE_PATCH, Obj, Resource

__all__ = [
    "DEFAULT_STATUS_SUBRESOURCES",
    "METHODS",
    "Call",
    "FakeKube",
    "json_patch",
    "merge_patch",
]

T = TypeVar("T")
_WRITES = frozenset({"create", "replace", "patch", "delete"})

# Plurals served with a status subresource: the built-in kinds the controller writes, every
# registered job kind, and the CRDs under config/crd whose schema declares
# ``subresources: {status: {}}``.
DEFAULT_STATUS_SUBRESOURCES: frozenset[str] = frozenset(
    {
        "workloads",
        *(kind.plural for kind in JOB_KINDS),
        "pods",
        "nodes",
        "clusterqueues",
        "localqueues",
        "hypernodes",
        "cohorts",
        "cohorts.kueue.x-k8s.io",  # Kueue's v1beta2 Cohorts (their store key)
    }
)
METHODS: frozenset[str] = frozenset(
    {"get", "list", "create", "replace", "patch", "delete", "watch"}
)
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apiserver's generateName alphabet


class Call(NamedTuple):
    """One call as made: ``resource`` is the plural, ``"<plural>/status"`` for a status write;
    ``body`` a deep copy of what was sent (None for reads and deletes)."""

    method: str
    resource: str
    namespace: str | None
    name: str | None
    body: Any


@dataclass
class _Fault:
    method: str
    error: BaseException
    times: int
    resource: str | None
    after_write: bool


@dataclass
class _Event:
    version: int
    plural: str
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    previous: Obj | None  # the object before this write (MODIFIED, DELETED)


class _Close(NamedTuple):
    error: BaseException | None


@dataclass(eq=False)
class _Watcher:
    plural: str
    labels: list[tuple[str, str, str]]
    fields: list[tuple[str, str, str]]
    queue: asyncio.Queue[Obj | _Close] = field(default_factory=asyncio.Queue)


class FakeKube:
    """An in-memory API server with the async methods of ``Kube``."""

    def __init__(
        self,
        status_subresources: Iterable[str] = DEFAULT_STATUS_SUBRESOURCES,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.status_subresources: frozenset[str] = frozenset(status_subresources)
        self.calls: list[Call] = []
        self._clock = clock or (lambda: datetime.now(UTC))
        self._objects: dict[tuple[str, str, str], Obj] = {}
        self._kinds: dict[str, tuple[str, str]] = {}  # plural -> (apiVersion, kind)
        # As etcd's first revision: a list of an empty store is at "1", which a watch can
        # resume from ("0" would mean "any version": the current objects, no history).
        self._version = 1
        self._compacted = 0
        self._log: list[_Event] = []
        self._watchers: set[_Watcher] = set()
        self._faults: list[_Fault] = []
        self._watches_changed = asyncio.Event()

    # -- test controls (synchronous, not recorded) ----------------------------------------

    @property
    def resource_version(self) -> str:
        """The latest version written (``"1"`` before any write)."""
        return str(self._version)

    def seed(self, resource: Resource, obj: Obj) -> Obj:
        """Store ``obj`` as another client would (an ADDED or MODIFIED event, a new version)
        without recording a call or applying subresource rules: ``status`` is kept as given.
        ``uid``, ``creationTimestamp`` and ``generation`` are filled in when absent; a
        namespaced object without a namespace goes to ``default``. Returns the stored copy."""
        body = copy.deepcopy(obj)
        meta = _meta(body)
        name = str(meta.get("name") or "")
        if not name:
            raise ValueError("seed: metadata.name is required")
        namespace = str(meta.get("namespace") or "default") if resource.namespaced else ""
        if resource.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        self._learn_kind(resource, body)
        key = (resource.key, namespace, name)
        old = self._objects.get(key)
        meta.setdefault("uid", str(uuid.uuid4()) if old is None else _meta(old).get("uid"))
        meta.setdefault("creationTimestamp", self._now())
        meta.setdefault("generation", 1)
        self._commit(resource.key, key, body, old, "ADDED" if old is None else "MODIFIED")
        return copy.deepcopy(body)

    def stored(self, resource: Resource, name: str, namespace: str | None = None) -> Obj | None:
        """The stored object (a copy), or None."""
        obj = self._objects.get(self._key(resource, name, namespace))
        return copy.deepcopy(obj) if obj is not None else None

    def objects(self, resource: Resource, namespace: str | None = None) -> list[Obj]:
        """Copies of the stored objects of ``resource`` (in ``namespace`` when given)."""
        return [
            copy.deepcopy(obj)
            for (plural, ns, _), obj in sorted(self._objects.items(), key=lambda kv: kv[0])
            if plural == resource.key and (namespace is None or ns == namespace)
        ]

    def fail_next(
        self,
        method: str,
        error: BaseException,
        times: int = 1,
        resource: Resource | str | None = None,
        *,
        after_write: bool = False,
    ) -> None:
        """The next ``times`` calls of ``method`` (on ``resource``, a plural or Resource, when
        given; a plural matches its subresources too) raise ``error``. Faults are consumed in
        the order given. ``after_write``: the call takes effect first, then raises (the answer
        was lost). The failed calls are still recorded in :attr:`calls`."""
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; one of {sorted(METHODS)}")
        if times < 1:
            raise ValueError("times must be at least 1")
        if after_write and method in ("get", "list", "watch"):
            raise ValueError("after_write is for writes")
        plural = resource.key if isinstance(resource, Resource) else resource
        self._faults.append(_Fault(method, error, times, plural, after_write))

    def calls_of(self, method: str, resource: Resource | str | None = None) -> list[Call]:
        """The recorded calls of ``method`` (on ``resource`` and its subresources when given)."""
        plural = resource.key if isinstance(resource, Resource) else resource
        return [c for c in self.calls if c.method == method and _matches(c.resource, plural)]

    def compact(self, resource_version: str | None = None) -> None:
        """Forget the event log up to ``resource_version`` (default: now): a watch from an
        older version raises 410 Expired, as after etcd compaction."""
        version = self._version if resource_version is None else int(resource_version)
        self._compacted = max(self._compacted, version)
        self._log = [e for e in self._log if e.version > self._compacted]

    def bookmark(self) -> None:
        """Send every open watch a BOOKMARK at the current version."""
        for watcher in self._watchers:
            api_version, kind = self._kinds.get(watcher.plural, ("", ""))
            watcher.queue.put_nowait(
                {
                    "type": "BOOKMARK",
                    "object": {
                        "apiVersion": api_version,
                        "kind": kind,
                        "metadata": {"resourceVersion": self.resource_version},
                    },
                }
            )

    def close_watches(self, error: BaseException | None = None) -> None:
        """End every open watch: cleanly (the server closed the stream), or by raising
        ``error`` in it (a reset connection, an ERROR event). Later watches are unaffected."""
        for watcher in self._watchers:
            watcher.queue.put_nowait(_Close(error))

    @property
    def open_watches(self) -> int:
        """How many watches are streaming (replayed and registered for live events)."""
        return len(self._watchers)

    async def wait_for_watches(self, count: int = 1) -> None:
        """Until at least ``count`` watches are open (a write after this reaches them live)."""
        while len(self._watchers) < count:
            self._watches_changed.clear()
            await self._watches_changed.wait()

    # -- the Kube methods -----------------------------------------------------------------

    async def close(self) -> None:
        """Nothing to release (``Kube.close`` closes its session)."""

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        seconds: float = 60.0,
    ) -> Obj:
        """``Kube.request`` on a path as ``Resource.path`` builds it. A watch needs
        :meth:`watch`; a DELETE of a missing object raises 404 here, as in ``Kube``."""
        resource, namespace, name, subresource = _parse_path(path)
        query = {k: v for k, v in (params or {}).items() if v is not None}
        verb = method.upper()
        if verb == "GET" and str(query.get("watch", "")).lower() in ("true", "1"):
            raise KubeError(400, "BadRequest", "FakeKube: watch through watch(), not request()")
        if verb == "GET" and name and not subresource:
            return await self.get(resource, name, namespace)
        if verb == "GET" and not name:
            return await self.list(resource, namespace, **query)
        if verb == "POST" and not name:
            return await self.create(resource, body, namespace)
        if verb == "PUT" and name:
            body_meta = body.get("metadata") if isinstance(body, dict) else None
            if not isinstance(body_meta, dict) or body_meta.get("name") != name:
                raise KubeError(400, "BadRequest", "the name of the object does not match the URL")
            return await self.replace(resource, body, subresource)
        if verb == "PATCH" and name:
            return await self.patch(resource, name, body, namespace, subresource, content_type)
        if verb == "DELETE" and name and not subresource:
            return await self._call(
                "delete",
                resource.key,
                namespace,
                name,
                None,
                lambda: self._delete(resource, name, namespace),
            )
        raise KubeError(405, "MethodNotAllowed", f"FakeKube: {verb} {path} is not supported")

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj:
        def op() -> Obj:
            return copy.deepcopy(self._existing(resource, name, namespace))

        return await self._call("get", resource.key, namespace, name, None, op)

    async def list(self, resource: Resource, namespace: str | None = None, **params: Any) -> Obj:
        def op() -> Obj:
            labels = _parse_selector(params.get("labelSelector"), labels=True)
            fields = _parse_selector(params.get("fieldSelector"), labels=False)
            items = []
            for (plural, ns, _), obj in sorted(self._objects.items(), key=lambda kv: kv[0]):
                if plural != resource.key:
                    continue
                if resource.namespaced and namespace and ns != namespace:
                    continue
                if not _selected(obj, labels, fields):
                    continue
                item = copy.deepcopy(obj)
                # As a real list: items without kind and apiVersion (the list carries them).
                item.pop("kind", None)
                item.pop("apiVersion", None)
                items.append(item)
            api_version, kind = self._kinds.get(resource.key, (resource.api_version, ""))
            return {
                "apiVersion": api_version,
                "kind": f"{kind}List",
                "metadata": {"resourceVersion": self.resource_version},
                "items": items,
            }

        return await self._call("list", resource.key, namespace, None, None, op)

    async def create(self, resource: Resource, body: Obj, namespace: str | None = None) -> Obj:
        sent = copy.deepcopy(body)
        meta = _meta(sent) if isinstance(sent, dict) else {}
        name = meta.get("name") or None
        return await self._call(
            "create",
            resource.key,
            namespace,
            name,
            copy.deepcopy(body),
            lambda: self._create(resource, sent, namespace),
        )

    async def replace(self, resource: Resource, body: Obj, subresource: str = "") -> Obj:
        sent = copy.deepcopy(body)
        meta = _meta(sent)
        name = str(meta["name"])
        namespace = meta.get("namespace")
        plural = f"{resource.key}/{subresource}" if subresource else resource.key

        def op() -> Obj:
            old = self._existing(resource, name, namespace)
            self._check_subresource(resource, name, subresource)
            return self._update(resource, old, sent, subresource)

        return await self._call("replace", plural, namespace, name, copy.deepcopy(body), op)

    async def patch(
        self,
        resource: Resource,
        name: str,
        body: Any,
        namespace: str | None = None,
        subresource: str = "",
        content_type: str = MERGE_PATCH,
    ) -> Obj:
        sent = copy.deepcopy(body)
        plural = f"{resource.key}/{subresource}" if subresource else resource.key

        def op() -> Obj:
            old = self._existing(resource, name, namespace)
            self._check_subresource(resource, name, subresource)
            if content_type == MERGE_PATCH:
                if not isinstance(sent, dict):
                    raise KubeError(400, "BadRequest", "a merge patch must be a JSON object")
                candidate = merge_patch(old, sent)
            elif content_type == JSON_PATCH:
                candidate = json_patch(old, sent)
            else:
                raise KubeError(
                    415, "UnsupportedMediaType", f"FakeKube: unsupported patch {content_type}"
                )
            if not isinstance(candidate, dict):
                raise KubeError(422, "Invalid", "the patched object is not a JSON object")
            return self._update(resource, old, candidate, subresource)

        return await self._call("patch", plural, namespace, name, copy.deepcopy(body), op)

    async def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None:
        try:
            await self._call(
                "delete",
                resource.key,
                namespace,
                name,
                None,
                lambda: self._delete(resource, name, namespace),
            )
        except KubeError as error:
            if not error.not_found:
                raise

    async def watch(
        self,
        resource: Resource,
        resource_version: str,
        timeout_seconds: int = 300,
        **params: Any,
    ) -> AsyncGenerator[Obj, None]:
        """Events after ``resource_version``, then live ones, until ``timeout_seconds`` pass
        or :meth:`close_watches`; 410 Expired when the version was compacted away."""

        def op() -> tuple[_Watcher, list[Obj]]:
            labels = _parse_selector(params.get("labelSelector"), labels=True)
            fields = _parse_selector(params.get("fieldSelector"), labels=False)
            watcher = _Watcher(resource.key, labels, fields)
            replay: list[Obj] = []
            if resource_version in ("", "0"):
                for (plural, _, _), obj in sorted(self._objects.items(), key=lambda kv: kv[0]):
                    if plural == resource.key and _selected(obj, labels, fields):
                        replay.append({"type": "ADDED", "object": copy.deepcopy(obj)})
            else:
                try:
                    since = int(resource_version)
                except ValueError:
                    raise KubeError(
                        400, "BadRequest", f"invalid resource version {resource_version!r}"
                    ) from None
                if since < self._compacted:
                    raise KubeError(
                        410,
                        "Expired",
                        f"too old resource version: {since} ({self._compacted})",
                    )
                for event in self._log:
                    if event.version > since:
                        shown = _as_seen(watcher, event)
                        if shown is not None:
                            replay.append(shown)
            self._watchers.add(watcher)  # no await since the replay: no event is missed
            self._watches_changed.set()
            return watcher, replay

        watcher, replay = await self._call("watch", resource.key, None, None, None, op)
        try:
            for event in replay:
                yield event
            deadline = asyncio.get_running_loop().time() + timeout_seconds
            while True:
                if timeout_seconds <= 0 and watcher.queue.empty():
                    return
                # Not asyncio.wait_for: before 3.12 it swallows a cancellation that arrives
                # as the queue hands over an item, and the cancelled reader would go on.
                try:
                    async with asyncio.timeout_at(deadline):
                        item = await watcher.queue.get()
                except TimeoutError:
                    return
                if isinstance(item, _Close):
                    if item.error is not None:
                        raise item.error
                    return
                yield item
        finally:
            self._watchers.discard(watcher)

    # -- the store ------------------------------------------------------------------------

    async def _call(
        self,
        method: str,
        plural: str,
        namespace: str | None,
        name: str | None,
        body: Any,
        op: Callable[[], T],
    ) -> T:
        # A real request yields to the event loop; so does this one, before it takes effect.
        await asyncio.sleep(0)
        if method in _WRITES:
            check_before_send()  # as the real client: the fence is checked as it is sent
        self.calls.append(Call(method, plural, namespace, name, body))
        fault = self._take_fault(method, plural)
        if fault is not None and not fault.after_write:
            raise fault.error
        result = op()
        if fault is not None:
            raise fault.error
        return result

    def _take_fault(self, method: str, plural: str) -> _Fault | None:
        for fault in self._faults:
            if fault.method == method and _matches(plural, fault.resource):
                fault.times -= 1
                if fault.times == 0:
                    self._faults.remove(fault)
                return fault
        return None

    def _key(self, resource: Resource, name: str, namespace: str | None) -> tuple[str, str, str]:
        return (resource.key, (namespace or "") if resource.namespaced else "", name)

    def _existing(self, resource: Resource, name: str, namespace: str | None) -> Obj:
        obj = self._objects.get(self._key(resource, name, namespace))
        if obj is None:
            raise KubeError(404, "NotFound", f'{_group_resource(resource)} "{name}" not found')
        return obj

    def _check_subresource(self, resource: Resource, name: str, subresource: str) -> None:
        if subresource and not (
            subresource == "status" and resource.key in self.status_subresources
        ):
            raise KubeError(
                404,
                "NotFound",
                f'{_group_resource(resource)} "{name}" has no subresource {subresource!r}',
            )

    def _now(self) -> str:
        return self._clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _learn_kind(self, resource: Resource, obj: Obj) -> None:
        obj.setdefault("apiVersion", resource.api_version)
        if obj.get("kind"):
            self._kinds.setdefault(resource.key, (str(obj["apiVersion"]), str(obj["kind"])))
        elif resource.key in self._kinds:
            obj["kind"] = self._kinds[resource.key][1]

    def _create(self, resource: Resource, body: Obj, namespace: str | None) -> Obj:
        if not isinstance(body, dict):
            raise KubeError(400, "BadRequest", "the object is not a JSON object")
        meta = _meta(body)
        if resource.namespaced:
            if not namespace:
                raise KubeError(405, "MethodNotAllowed", f"create {resource.key} needs a namespace")
            if meta.get("namespace") not in (None, "", namespace):
                raise KubeError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace "
                    "sent on the request",
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        name = str(meta.get("name") or "")
        if not name and meta.get("generateName"):
            name = str(meta["generateName"]) + "".join(random.choices(_NAME_CHARS, k=5))
            meta["name"] = name
        if not name:
            raise KubeError(
                422, "Invalid", "metadata.name: Required value: name or generateName is required"
            )
        key = self._key(resource, name, namespace)
        if key in self._objects:
            raise KubeError(
                409, "AlreadyExists", f'{_group_resource(resource)} "{name}" already exists'
            )
        self._learn_kind(resource, body)
        for server_managed in (
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            meta.pop(server_managed, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self._now()
        meta["generation"] = 1
        if resource.key in self.status_subresources:
            body.pop("status", None)  # POST ignores status where it is a subresource
        self._commit(resource.key, key, body, None, "ADDED")
        return copy.deepcopy(body)

    def _update(self, resource: Resource, old: Obj, candidate: Obj, subresource: str) -> Obj:
        old_meta, new_meta = _meta(old), _meta(candidate)
        name = str(old_meta.get("name"))
        if new_meta.get("name") not in (None, name):
            raise KubeError(400, "BadRequest", "the name of the object does not match the URL")
        if resource.namespaced and new_meta.get("namespace") not in (
            None,
            old_meta.get("namespace"),
        ):
            raise KubeError(400, "BadRequest", "the namespace of the object does not match")
        if new_meta.get("uid") not in (None, "", old_meta.get("uid")):
            raise KubeError(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {old_meta.get('uid')}, "
                f"UID in object meta: {new_meta.get('uid')}",
            )
        wanted = str(new_meta.get("resourceVersion") or "")
        if wanted and wanted != old_meta.get("resourceVersion"):
            raise KubeError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {_group_resource(resource)} "{name}": the '
                "object has been modified; please apply your changes to the latest version "
                "and try again",
            )
        has_status = resource.key in self.status_subresources
        if subresource == "status":
            new = copy.deepcopy(old)
            if "status" in candidate:
                new["status"] = copy.deepcopy(candidate["status"])
            else:
                new.pop("status", None)
        else:
            new = copy.deepcopy(candidate)
            meta = _meta(new)
            for server_managed in (
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "resourceVersion",
            ):
                if server_managed in old_meta:
                    meta[server_managed] = old_meta[server_managed]
                else:
                    meta.pop(server_managed, None)
            meta["name"] = name
            if resource.namespaced:
                meta["namespace"] = old_meta.get("namespace")
            else:
                meta.pop("namespace", None)
            new.setdefault("apiVersion", old.get("apiVersion"))
            if "kind" in old:
                new.setdefault("kind", old["kind"])
            if has_status:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
            if _spec_of(new, has_status) != _spec_of(old, has_status):
                meta["generation"] = int(old_meta.get("generation") or 0) + 1
        if new == old:
            return copy.deepcopy(old)  # a no-op: no new version, no event
        key = self._key(resource, name, old_meta.get("namespace"))
        meta = _meta(new)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._remove(resource.key, key, new)
            return copy.deepcopy(new)
        self._commit(resource.key, key, new, old, "MODIFIED")
        return copy.deepcopy(new)

    def _delete(self, resource: Resource, name: str, namespace: str | None) -> Obj:
        old = self._existing(resource, name, namespace)
        key = self._key(resource, name, namespace)
        meta = _meta(old)
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return copy.deepcopy(old)
            new = copy.deepcopy(old)
            new_meta = _meta(new)
            new_meta["deletionTimestamp"] = self._now()
            new_meta["deletionGracePeriodSeconds"] = 0
            new_meta["generation"] = int(meta.get("generation") or 0) + 1
            self._commit(resource.key, key, new, old, "MODIFIED")
            return copy.deepcopy(new)
        gone = copy.deepcopy(old)
        self._remove(resource.key, key, gone)
        return copy.deepcopy(gone)

    def _commit(
        self, plural: str, key: tuple[str, str, str], new: Obj, old: Obj | None, kind: str
    ) -> None:
        self._version += 1
        _meta(new)["resourceVersion"] = str(self._version)
        self._objects[key] = copy.deepcopy(new)
        self._publish(_Event(self._version, plural, kind, copy.deepcopy(new), old))

    def _remove(self, plural: str, key: tuple[str, str, str], last: Obj) -> None:
        # As from etcd: the DELETED event's object carries the version of the deletion.
        old = self._objects.pop(key)
        self._version += 1
        _meta(last)["resourceVersion"] = str(self._version)
        self._publish(_Event(self._version, plural, "DELETED", copy.deepcopy(last), old))

    def _publish(self, event: _Event) -> None:
        self._log.append(event)
        for watcher in self._watchers:
            shown = _as_seen(watcher, event)
            if shown is not None:
                watcher.queue.put_nowait(shown)


# -- patches ------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: a new document; ``None`` (null) deletes a key."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(document: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch, applied atomically to a copy of ``document``: add, remove, replace,
    move, copy, test. A malformed patch is 400 BadRequest; a missing path or a failed test is
    422 Invalid."""
    if not isinstance(operations, list):
        raise KubeError(400, "BadRequest", "a JSON patch must be a list of operations")
    doc = copy.deepcopy(document)
    for index, operation in enumerate(operations):
        if not isinstance(operation, dict) or not isinstance(operation.get("path"), str):
            raise KubeError(400, "BadRequest", f"JSON patch operation {index} is malformed")
        op, path = operation.get("op"), str(operation["path"])
        if op in ("add", "replace", "test") and "value" not in operation:
            raise KubeError(400, "BadRequest", f"JSON patch {op} at {path} has no value")
        if op == "add":
            doc = _add(doc, path, copy.deepcopy(operation["value"]))
        elif op == "remove":
            doc, _ = _remove(doc, path)
        elif op == "replace":
            doc, _ = _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(operation["value"]))
        elif op in ("move", "copy"):
            source = operation.get("from")
            if not isinstance(source, str):
                raise KubeError(400, "BadRequest", f"JSON patch {op} to {path} has no from")
            if op == "move":
                if path.startswith(source + "/"):
                    raise KubeError(422, "Invalid", f"cannot move {source} into itself")
                doc, value = _remove(doc, source)
            else:
                value = copy.deepcopy(_resolve(doc, source))
            doc = _add(doc, path, value)
        elif op == "test":
            actual = _resolve(doc, path)
            if not _json_equal(actual, operation["value"]):
                raise KubeError(
                    422,
                    "Invalid",
                    f"the server rejected our request due to an error in our request: "
                    f"testing value {path} failed: {json.dumps(actual)} is not "
                    f"{json.dumps(operation['value'])}",
                )
        else:
            raise KubeError(400, "BadRequest", f"unknown JSON patch operation {op!r}")
    return doc


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise KubeError(400, "BadRequest", f"JSON pointer {path!r} does not start with /")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _index(token: str, length: int, path: str, *, append: bool = False) -> int:
    if append and token == "-":
        return length
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise KubeError(422, "Invalid", f"{path}: {token!r} is not an array index")
    index = int(token)
    if index > length or (index == length and not append):
        raise KubeError(422, "Invalid", f"{path}: index {index} is out of range")
    return index


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens:
        if isinstance(node, dict):
            if token not in node:
                raise KubeError(422, "Invalid", f"{path}: missing path")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(token, len(node), path)]
        else:
            raise KubeError(422, "Invalid", f"{path}: missing path")
    return node


def _resolve(doc: Any, path: str) -> Any:
    return _parent(doc, _tokens(path), path)


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _tokens(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(last, len(parent), path, append=True), value)
    else:
        raise KubeError(422, "Invalid", f"{path}: missing path")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    tokens = _tokens(path)
    if not tokens:
        return None, doc
    parent = _parent(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise KubeError(422, "Invalid", f"{path}: missing path")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(last, len(parent), path))
    raise KubeError(422, "Invalid", f"{path}: missing path")


def _json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values (RFC 6902 test): true is not 1, 1 is 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


# -- selectors, watch views, helpers ------------------------------------------------------


def _parse_selector(text: Any, *, labels: bool) -> list[tuple[str, str, str]]:
    """``k=v``/``k==v``/``k!=v`` (and, for labels, ``k`` and ``!k``), comma-separated."""
    out: list[tuple[str, str, str]] = []
    for part in str(text or "").split(","):
        part = part.strip()
        if not part:
            continue
        if "(" in part or " in " in part or " notin " in part:
            raise KubeError(400, "BadRequest", f"FakeKube: set-based selector {part!r}")
        if "!=" in part:
            key, value = part.split("!=", 1)
            out.append((key.strip(), "!=", value.strip()))
        elif "=" in part:
            key, value = part.split("==", 1) if "==" in part else part.split("=", 1)
            out.append((key.strip(), "=", value.strip()))
        elif labels and part.startswith("!"):
            out.append((part[1:].strip(), "!", ""))
        elif labels:
            out.append((part, "exists", ""))
        else:
            raise KubeError(400, "BadRequest", f"invalid field selector {part!r}")
    return out


def _selected(
    obj: Obj, labels: list[tuple[str, str, str]], fields: list[tuple[str, str, str]]
) -> bool:
    present = _meta(obj).get("labels") or {}
    for key, op, value in labels:
        if op == "exists" and key not in present:
            return False
        if op == "!" and key in present:
            return False
        if op == "=" and present.get(key) != value:
            return False
        if op == "!=" and present.get(key) == value:
            return False
    for path, op, value in fields:
        node: Any = obj
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        text = "" if node is None else str(node).lower() if isinstance(node, bool) else str(node)
        if (text == value) != (op == "="):
            return False
    return True


def _as_seen(watcher: _Watcher, event: _Event) -> Obj | None:
    """The event as a watch with ``watcher``'s selectors sees it (None: not at all)."""
    if event.plural != watcher.plural:
        return None
    now = _selected(event.obj, watcher.labels, watcher.fields)
    before = event.previous is not None and _selected(
        event.previous, watcher.labels, watcher.fields
    )
    if event.type == "ADDED":
        kind = "ADDED" if now else None
    elif event.type == "DELETED":
        kind = "DELETED" if before or now else None
    elif now:
        kind = "MODIFIED" if before else "ADDED"
    else:
        kind = "DELETED" if before else None
    return None if kind is None else {"type": kind, "object": copy.deepcopy(event.obj)}


def _meta(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        obj["metadata"] = meta
    return meta


def _spec_of(obj: Obj, has_status: bool) -> Obj:
    skip = {"metadata", "status"} if has_status else {"metadata"}
    return {k: v for k, v in obj.items() if k not in skip}


def _matches(plural: str, wanted: str | None) -> bool:
    return wanted is None or plural == wanted or plural.startswith(wanted + "/")


def _group_resource(resource: Resource) -> str:
    group = resource.api_version.rpartition("/")[0]
    return f"{resource.plural}.{group}" if group else resource.plural


def _parse_path(path: str) -> tuple[Resource, str | None, str | None, str]:
    parts = [unquote(p) for p in path.split("?", 1)[0].strip("/").split("/")]
    if len(parts) >= 2 and parts[0] == "api":
        api_version, rest = parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        api_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        raise KubeError(404, "NotFound", f"FakeKube: no resource at {path}")
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise KubeError(404, "NotFound", f"FakeKube: no resource at {path}")
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else ""
    return (
        Resource(api_version, rest[0], namespaced=namespace is not None),
        namespace,
        name,
        (subresource),
    )
