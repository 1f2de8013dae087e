"""The transport over aiohttp (it implements :class:`~topogate.kube.protocol.KubeApi`): JSON
dicts to and from one Kubernetes API server.

Authentication and TLS come from the official client (``kubernetes.aio.config`` reads the
kubeconfig or the in-cluster service account; its REST layer builds the TLS session). On top
of that this module offers what a controller needs, without deserializing every pod into
generated model classes: get, list, watch (a stream of events), create, update, patch, delete.

This is the one module that loads a kubeconfig: :meth:`Kube.connect` for every command and
`serve`, and :func:`context_namespace` for the default namespace `topogate status` reads.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson
import yaml
from kubernetes.aio import config as aio_config
from kubernetes.aio.client.configuration import Configuration
from kubernetes.aio.client.rest import RESTClientObject
from yarl import URL

from topogate.api.errors import InputError

from .errors import KubeError
from .http1 import Http1Pool
from .protocol import KubeApi
from .ratelimit import TokenBucket, check_before_send
from .resources import JSON_PATCH, MERGE_PATCH, Obj, Resource

__all__ = [
    "JSON_PATCH",
    "MERGE_PATCH",
    "Kube",
    "KubeconfigError",
    "context_namespace",
    "own_budget",
]

# An unusable kubeconfig or in-cluster configuration (also raised by a credential plugin when a
# request asks it for a token).
KubeconfigError = aio_config.ConfigException


# Kueue's defaults (apis/config/v1beta2/defaults.go; client-go's 5 and 10 are too few for a
# controller writing Workloads; Kueue's perf-test minimalkueue uses 50 and 100).
DEFAULT_QPS = 300.0
DEFAULT_BURST = 500


class Kube:
    """JSON requests to one API server over one aiohttp session.

    ``trust_env`` (off by default): read proxy settings and ~/.netrc from the environment.
    aiohttp does that per request, in a worker thread, which cost 11.6% of `serve`'s CPU with
    no such settings present. ``qps``/``burst``: the client-side rate limit (None: none).
    ``request_timeout``: every request's (None: 60 seconds in all, the controller's).
    """

    def __init__(
        self,
        configuration: Configuration,
        *,
        trust_env: bool = False,
        qps: float | None = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        request_timeout: aiohttp.ClientTimeout | None = None,
    ) -> None:
        self._configuration = configuration
        self._timeout = request_timeout
        configuration.client_session_kwargs = {
            **(getattr(configuration, "client_session_kwargs", None) or {}),
            "trust_env": trust_env,
        }
        self._rest = RESTClientObject(configuration)
        self._session: aiohttp.ClientSession = self._rest._create_pool_manager()
        self._host = configuration.host.rstrip("/")
        self._limit = TokenBucket(qps, burst) if qps else None
        self._owner = True
        self._fixed: dict[str, Mapping[str, str]] = {}
        # Unary requests go over our own HTTP/1.1 connections (a quarter of aiohttp's CPU per
        # request: topogate.kube.http1), watches over aiohttp's. aiohttp's for all when a
        # proxy may be in the way or the caller set its own timeouts (per read, per connect).
        self._http1: Http1Pool | None = None
        if not trust_env and not configuration.proxy and request_timeout is None:
            self._http1 = Http1Pool(
                URL(self._host),
                self._rest.ssl_context,
                limit=configuration.connection_pool_maxsize,
                server_hostname=configuration.tls_server_name or None,
            )

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | None = None,
        *,
        trust_env: bool = False,
        qps: float | None = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        request_timeout: aiohttp.ClientTimeout | None = None,
    ) -> Kube:
        """From ``kubeconfig``, or the in-cluster service account when None."""
        configuration = Configuration()
        if kubeconfig:
            _check_files(kubeconfig)
            try:
                await aio_config.load_kube_config(  # type: ignore[no-untyped-call]
                    kubeconfig, client_configuration=configuration, persist_config=False
                )
            except (KubeconfigError, OSError, yaml.YAMLError, ValueError, KeyError) as error:
                raise InputError(_one_line(f"cannot load: {error}"), where=kubeconfig) from None
        else:
            aio_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        return cls(
            configuration,
            trust_env=trust_env,
            qps=qps,
            burst=burst,
            request_timeout=request_timeout,
        )

    def with_own_budget(self) -> Kube:
        """The same connection pool with a rate limit of its own (the same QPS and burst), as
        client-go gives each client its own token bucket: serve's events go through one, so
        they never take the budget its Workload writes wait for (Kueue's event recorder has
        its own client, hence its own bucket, too)."""
        other = object.__new__(Kube)
        other.__dict__.update(self.__dict__)
        if self._limit is not None:
            other._limit = TokenBucket(self._limit.qps, self._limit.burst)
        other._owner = False
        return other

    @property
    def server(self) -> str:
        """The API server's URL, as messages name it."""
        return self._host

    async def close(self) -> None:
        if self._owner:  # a view from :meth:`with_own_budget` shares its owner's session
            if self._http1 is not None:
                await self._http1.close()
            await self._session.close()

    async def _headers(self, content_type: str = "application/json") -> dict[str, str]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        if self._fixed_headers(content_type) is not None:
            return headers  # client certificates (no token to read)
        # Read per request: in-cluster tokens rotate.
        settings: Mapping[str, Any] = await self._configuration.auth_settings()
        for setting in settings.values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[str(setting["key"])] = str(setting["value"])
        return headers

    def _fixed_headers(self, content_type: str) -> Mapping[str, str] | None:
        """A request's headers when they hold no token (client certificates), built once per
        content type (aiohttp copies them into each request); None with a token to read."""
        configuration = self._configuration
        if configuration.api_key or configuration.refresh_api_key_hook is not None:
            return None
        fixed = self._fixed.get(content_type)
        if fixed is None:
            fixed = self._fixed[content_type] = {
                "Accept": "application/json",
                "Content-Type": content_type,
            }
        return fixed

    def _url(self, path: str, params: Mapping[str, Any] | None) -> URL:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        # Already encoded (resource paths are DNS names, the query urlencoded): aiohttp would
        # otherwise parse and requote the text on every request.
        return URL(f"{self._host}{path}" + (f"?{urlencode(query)}" if query else ""), encoded=True)

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        seconds: float = 60.0,
    ) -> Obj:
        if self._limit is not None:
            await self._limit.take()
        headers = self._fixed_headers(content_type) or await self._headers(content_type)
        check_before_send()  # after every wait: a fenced write leaves only while leading
        if self._http1 is not None:
            status, raw = await self._http1.request(
                method,
                _target(path, params),
                headers,
                None if body is None else orjson.dumps(body),
                seconds,
            )
            if status >= 300:
                raise _error(status, raw)
            return _loads(raw) if raw else {}
        async with self._session.request(
            method,
            self._url(path, params),
            data=None if body is None else orjson.dumps(body),
            headers=headers,
            timeout=self._timeout or _total(seconds),
        ) as response:
            raw = await response.read()
            if response.status >= 300:
                raise _error(response.status, raw)
            # orjson: a Workload's write comes back whole, and decoding it with the standard
            # library was a visible share of serve's CPU per admission.
            return _loads(raw) if raw else {}

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj:
        return await self.request("GET", resource.path(namespace, name))

    async def list(self, resource: Resource, namespace: str | None = None, **params: Any) -> Obj:
        return await self.request("GET", resource.path(namespace), params=params)

    async def create(self, resource: Resource, body: Obj, namespace: str | None = None) -> Obj:
        return await self.request("POST", resource.path(namespace), body)

    async def replace(self, resource: Resource, body: Obj, subresource: str = "") -> Obj:
        meta = body["metadata"]
        path = resource.path(meta.get("namespace"), meta["name"], subresource)
        return await self.request("PUT", path, body)

    async def patch(
        self,
        resource: Resource,
        name: str,
        body: Any,
        namespace: str | None = None,
        subresource: str = "",
        content_type: str = MERGE_PATCH,
    ) -> Obj:
        path = resource.path(namespace, name, subresource)
        return await self.request("PATCH", path, body, content_type=content_type)

    async def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None:
        try:
            await self.request(
                "DELETE", resource.path(namespace, name), {"propagationPolicy": "Background"}
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
    ) -> AsyncIterator[Obj]:
        """Watch events ({"type", "object"}) from ``resource_version``, with bookmarks.

        Ends when the server closes the stream; an ERROR event is raised as KubeError (410
        Gone means the version is too old and the caller must list again).
        """
        if self._limit is not None:
            await self._limit.take()  # starting a watch is a request; its stream is not
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
            **params,
        }
        async with self._session.get(
            self._url(resource.path(), query),
            headers=await self._headers(),
            timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout_seconds + 30),
        ) as response:
            if response.status >= 300:
                raise _error(response.status, await response.read())
            content = response.content
            # Lines split here, from whatever the socket brought: a burst of events is one
            # read and one split (readline() is an await and a buffer walk per event). A line
            # past MAX_EVENT_BYTES is a ValueError, which the reflector retries (readline's
            # LineTooLong, past 4 MiB here, is neither a ValueError nor a ClientError).
            partial: list[bytes] = []  # the start of a line whose end has not come yet
            held = 0
            while True:
                chunk = await content.readany()
                if not chunk:
                    if partial:  # the stream ended inside a line: a truncated event
                        yield _event(b"".join(partial))
                    return
                if b"\n" not in chunk:
                    partial.append(chunk)
                    held += len(chunk)
                    if held > MAX_EVENT_BYTES:
                        raise ValueError(
                            f"watch of {resource.plural}: an event longer than "
                            f"{MAX_EVENT_BYTES} bytes"
                        )
                    continue
                if partial:
                    partial.append(chunk)
                    chunk = b"".join(partial)
                    partial, held = [], 0
                lines = chunk.split(b"\n")
                rest = lines.pop()
                if rest:
                    partial, held = [rest], len(rest)
                for line in lines:
                    if line:
                        yield _event(line)


def own_budget(kube: KubeApi) -> KubeApi:
    """``kube`` with a rate limit of its own when it is a :class:`Kube` (as is otherwise)."""
    return kube.with_own_budget() if isinstance(kube, Kube) else kube


def _check_files(kubeconfig: str) -> None:
    """Each file of ``kubeconfig`` (``:``-joined, as in $KUBECONFIG) exists and holds a YAML
    mapping: the loaders fail on an empty one with a TypeError, and take a missing one as
    no configuration at all. An InputError (invalid arguments) naming the file otherwise."""
    for path in kubeconfig.split(os.pathsep):
        if not path:
            continue
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as error:
            raise InputError(f"cannot read: {error}", where=path) from None
        except yaml.YAMLError as error:
            raise InputError(_one_line(f"is not YAML: {error}"), where=path) from None
        if loaded is None:
            raise InputError(
                "is empty; a kubeconfig names a cluster, a user and a context", where=path
            )
        if not isinstance(loaded, Mapping):
            raise InputError("must be a mapping (a kubeconfig)", where=path)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def context_namespace(kubeconfig: str) -> str | None:
    """The namespace of ``kubeconfig``'s current context (``:``-joined paths are merged, as
    in $KUBECONFIG), or None when it names none."""
    _check_files(kubeconfig)
    try:
        _, current = aio_config.list_kube_config_contexts(kubeconfig)  # type: ignore[no-untyped-call]
    except (KubeconfigError, ValueError, KeyError, TypeError) as error:
        raise InputError(_one_line(f"cannot load: {error}"), where=kubeconfig) from None
    context = current.get("context") if isinstance(current, Mapping) else None
    namespace = context.get("namespace") if isinstance(context, Mapping) else None
    return str(namespace) if namespace else None


def _target(path: str, params: Mapping[str, Any] | None) -> str:
    """A request's path and query, encoded (as :meth:`Kube._url` puts them after the host)."""
    if not params:
        return path
    query = {k: v for k, v in params.items() if v is not None}
    return f"{path}?{urlencode(query)}" if query else path


@functools.lru_cache(maxsize=8)
def _total(seconds: float) -> aiohttp.ClientTimeout:
    """A request's timeout, one object per value (it is immutable; every write asks for one)."""
    return aiohttp.ClientTimeout(total=seconds)


# Far above any object etcd stores (1.5 MiB by default), to bound a stream gone wrong.
MAX_EVENT_BYTES = 64 * 1024 * 1024


def _event(line: bytes) -> Obj:
    """One watch event; an ERROR event (a Status) raised as KubeError."""
    event: Obj = _loads(line)
    if event.get("type") == "ERROR":
        status = event.get("object") or {}
        raise KubeError(
            int(status.get("code") or 500),
            str(status.get("reason") or "Error"),
            str(status.get("message") or ""),
        )
    return event


def _loads(raw: bytes) -> Any:
    """A JSON body (orjson's decoder; its errors are ValueErrors, as the standard library's)."""
    return orjson.loads(raw)


def _error(status: int, raw: bytes) -> KubeError:
    text = raw.decode("utf-8", errors="replace")
    try:
        body = orjson.loads(raw)
    except ValueError:
        return KubeError(status, "", text[:500])
    if not isinstance(body, dict):
        return KubeError(status, "", text[:500])
    return KubeError(status, str(body.get("reason") or ""), str(body.get("message") or text))
