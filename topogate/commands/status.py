"""``topogate status``: where a Workload stands and where its pods are.

Three layers: :func:`summarize` is pure (Workload and Pod dicts in, dataclasses out); the
renderers turn those into a table, JSON or YAML; :func:`run` is the thin shell that reads the
API server through the transport seam (``KubeApi``, under ``asyncio.run``), so ``FakeKube``
can stand in for it. The client is imported inside :func:`connect`, so ``topogate plan`` does
not pay for it.
"""

from __future__ import annotations

import argparse
import asyncio
import http
import json
import os
import ssl
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from topogate.admission.podsets import build_catalog
from topogate.admission.queuetree import (
    COHORT,
    LOCAL_QUEUE,
    Figures,
    TreeNode,
    queue_tree,
    tree_warnings,
)
from topogate.admission.quota import CohortTree, QuotaBook, QuotaRow, quota_rows, usage_of
from topogate.api.constants import (
    API_VERSION,
    GROUP,
    PODSET_LABEL,
    TOPOLOGY_GATE,
    VERSION,
    WORKLOAD_ANNOTATION,
)
from topogate.api.errors import InputError
from topogate.api.kinds import JOB_KINDS
from topogate.api.quantity import format_units
from topogate.api.topology_assignment import decode
from topogate.kube.errors import API_ERRORS, KubeError
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    COHORTS,
    KUEUE_COHORTS,
    LOCAL_QUEUES,
    PODS,
    WORKLOADS,
    Resource,
)

Obj = Mapping[str, Any]

PLURAL = "workloads"
OWNER_KINDS = tuple(k.kind for k in JOB_KINDS)
# Pod states, in the order of the table's columns (a pod is in exactly one).
GATED, UNGATED, BOUND, RUNNING, FINISHED = "gated", "ungated", "bound", "running", "finished"
POD_STATES = (GATED, UNGATED, BOUND, RUNNING, FINISHED)
UNASSIGNED = "-"

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
_SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_PAGE = 500
_TIMEOUT = (10, 120)  # seconds to connect, and to wait for each read of an answer
# What reading the API can fail with (OSError: a local failure, such as an unreadable token).
API_READ_ERRORS: tuple[type[BaseException], ...] = (*API_ERRORS, OSError)


# --- the model --------------------------------------------------------------------------


@dataclass(slots=True)
class PodCounts:
    """Pods per state."""

    gated: int = 0
    ungated: int = 0
    bound: int = 0
    running: int = 0
    finished: int = 0

    def add(self, state: str) -> None:
        setattr(self, state, getattr(self, state) + 1)

    @property
    def total(self) -> int:
        return self.gated + self.ungated + self.bound + self.running + self.finished

    def as_dict(self) -> dict[str, int]:
        return {state: getattr(self, state) for state in POD_STATES}


@dataclass(slots=True)
class DomainStatus:
    values: tuple[str, ...]
    assigned: int
    pods: PodCounts = field(default_factory=PodCounts)


@dataclass(slots=True)
class PodSetStatus:
    name: str
    count: int
    levels: tuple[str, ...] = ()
    domains: list[DomainStatus] = field(default_factory=list)
    unassigned: PodCounts = field(default_factory=PodCounts)
    problem: str = ""  # why its topologyAssignment could not be read ("" when it could)
    # Partial admission: the spec's minCount, and the count admitted (None: not admitted).
    min_count: int | None = None
    admitted: int | None = None

    @property
    def count_text(self) -> str:
        """``4``; ``2 of 4 (partial admission, minCount 1)``; ``4 (minCount 1)``."""
        minimum = f"minCount {self.min_count}" if self.min_count is not None else ""
        if self.admitted is not None and self.admitted != self.count:
            why = ", ".join(w for w in ("partial admission", minimum) if w)
            return f"{self.admitted} of {self.count} ({why})"
        return f"{self.count} ({minimum})" if minimum else str(self.count)


@dataclass(slots=True)
class WorkloadStatus:
    namespace: str
    name: str
    queue: str | None
    cluster_queue: str | None
    state: str
    reason: str
    message: str
    pod_sets: list[PodSetStatus] = field(default_factory=list)
    # Failed nodes whose pods were moved or that evicted it (status.unhealthyNodes).
    unhealthy_nodes: tuple[str, ...] = ()

    @property
    def state_text(self) -> str:
        """``Finished (Succeeded)``, ``Admitted``, ``Pending``, ``Queued``."""
        if self.state == "Finished" and self.reason:
            return f"Finished ({self.reason})"
        return self.state


# --- the pure core ----------------------------------------------------------------------


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _name(obj: Obj) -> str:
    return str(_dict(obj.get("metadata")).get("name") or "")


def _namespace(obj: Obj) -> str:
    return str(_dict(obj.get("metadata")).get("namespace") or "")


def select(workloads: Iterable[Obj], name: str) -> list[Obj]:
    """The Workload called ``name``, else those whose controller is a Job/JobSet ``name``.

    ``workloads`` are one namespace's, so at most one matches by name; a Job and a JobSet of
    the same name can each own one.
    """
    candidates = list(workloads)
    direct = [w for w in candidates if _name(w) == name]
    if direct:
        return direct
    return [
        w
        for w in candidates
        if any(
            ref.get("kind") in OWNER_KINDS and ref.get("name") == name and ref.get("controller")
            for ref in map(_dict, _list(_dict(w.get("metadata")).get("ownerReferences")))
        )
    ]


def pod_state(pod: Obj) -> str:
    """One of :data:`POD_STATES`: terminated first, then gated, running, bound, ungated."""
    spec, status = _dict(pod.get("spec")), _dict(pod.get("status"))
    phase = status.get("phase")
    if phase in ("Succeeded", "Failed"):
        return FINISHED
    if any(_dict(gate).get("name") == TOPOLOGY_GATE for gate in _list(spec.get("schedulingGates"))):
        return GATED
    if phase == "Running":
        return RUNNING
    if spec.get("nodeName"):
        return BOUND
    return UNGATED


def admission_state(workload: Obj) -> tuple[str, str, str]:
    """(state, reason, message): Finished > Admitted > Pending > QuotaReserved > Queued."""
    conditions = {
        c.get("type"): c for c in map(_dict, _list(_dict(workload.get("status")).get("conditions")))
    }

    def holds(kind: str, status: str = "True") -> Mapping[str, Any] | None:
        condition = conditions.get(kind)
        return condition if condition is not None and condition.get("status") == status else None

    for state, kind, status in (
        ("Finished", "Finished", "True"),
        ("Admitted", "Admitted", "True"),
        ("Pending", "QuotaReserved", "False"),
        # Quota held, admission checks not yet passed (Kueue's two-step admission).
        ("QuotaReserved", "QuotaReserved", "True"),
    ):
        condition = holds(kind, status)
        if condition is not None:
            return state, str(condition.get("reason") or ""), str(condition.get("message") or "")
    return "Queued", "", ""


def _domain_key(pod: Obj, levels: Sequence[str]) -> tuple[str, ...] | None:
    selector = _dict(_dict(pod.get("spec")).get("nodeSelector"))
    values = tuple(selector.get(level) for level in levels)
    if not levels or any(not isinstance(v, str) for v in values):
        return None
    return tuple(str(v) for v in values)


def _pod_set(spec_set: Obj | None, assignment: Obj | None, pods: Iterable[Obj]) -> PodSetStatus:
    name = str((spec_set or assignment or {}).get("name") or "")
    count = (spec_set if spec_set is not None else assignment or {}).get("count")
    # An integer in any Workload the API server stores; anything else is shown as 0, not a
    # traceback (status shows what is there).
    result = PodSetStatus(name=name, count=count if isinstance(count, int) else 0)
    minimum = (spec_set or {}).get("minCount")
    result.min_count = minimum if isinstance(minimum, int) else None
    admitted = (assignment or {}).get("count")
    result.admitted = admitted if isinstance(admitted, int) and assignment is not None else None
    by_values: dict[tuple[str, ...], DomainStatus] = {}
    topology = (assignment or {}).get("topologyAssignment")
    try:
        decoded = decode(topology, field="topologyAssignment") if topology else None
    except InputError as error:
        decoded, result.problem = None, error.describe()
    if decoded is not None:
        result.levels = decoded.levels
        for domain in decoded.domains:
            status = DomainStatus(values=domain.values, assigned=domain.count)
            result.domains.append(status)
            by_values.setdefault(domain.values, status)
    for pod in pods:
        key = _domain_key(pod, result.levels)
        target = by_values.get(key) if key is not None else None
        (target.pods if target is not None else result.unassigned).add(pod_state(pod))
    return result


def summarize(workloads: Iterable[Obj], pods: Iterable[Obj]) -> list[WorkloadStatus]:
    """Each Workload's admission state and, per PodSet and assigned domain, its pods' states.

    A pod belongs to a Workload when it is in its namespace, carries the ``topogate.dev/podset``
    label (the PodSet) and the ``topogate.dev/workload`` annotation (the Workload's name). It
    belongs to a domain when its nodeSelector has the domain's value for every level; the others
    are counted as unassigned. Sorted by namespace, then name.
    """
    grouped: dict[tuple[str, str, str], list[Obj]] = {}
    for pod in pods:
        metadata = _dict(pod.get("metadata"))
        pod_set = _dict(metadata.get("labels")).get(PODSET_LABEL)
        owner = _dict(metadata.get("annotations")).get(WORKLOAD_ANNOTATION)
        if isinstance(pod_set, str) and isinstance(owner, str):
            grouped.setdefault((_namespace(pod), owner, pod_set), []).append(pod)

    result = []
    for workload in workloads:
        namespace, name = _namespace(workload), _name(workload)
        spec, status = _dict(workload.get("spec")), _dict(workload.get("status"))
        admission = _dict(status.get("admission"))
        assignments = {
            str(a.get("name")): a for a in map(_dict, _list(admission.get("podSetAssignments")))
        }
        spec_sets = {str(s.get("name")): s for s in map(_dict, _list(spec.get("podSets")))}
        names = list(spec_sets) + [n for n in assignments if n not in spec_sets]
        state, reason, message = admission_state(workload)
        queue, cluster_queue = spec.get("queueName"), admission.get("clusterQueue")
        result.append(
            WorkloadStatus(
                namespace=namespace,
                name=name,
                queue=str(queue) if queue else None,
                cluster_queue=str(cluster_queue) if cluster_queue else None,
                state=state,
                reason=reason,
                message=message,
                pod_sets=[
                    _pod_set(
                        spec_sets.get(n), assignments.get(n), grouped.get((namespace, name, n), [])
                    )
                    for n in names
                ],
                unhealthy_nodes=tuple(
                    str(n.get("name")) for n in map(_dict, _list(status.get("unhealthyNodes")))
                ),
            )
        )
    return sorted(result, key=lambda w: (w.namespace, w.name))


# --- renderers --------------------------------------------------------------------------


def document(workloads: Sequence[WorkloadStatus]) -> dict[str, Any]:
    """The stable structure behind ``-o json`` and ``-o yaml``."""
    return {
        "workloads": [
            {
                "namespace": w.namespace,
                "name": w.name,
                "queue": w.queue,
                "clusterQueue": w.cluster_queue,
                "state": w.state,
                "reason": w.reason,
                "message": w.message,
                "unhealthyNodes": list(w.unhealthy_nodes),
                "podSets": [
                    {
                        "name": p.name,
                        "count": p.count,
                        "minCount": p.min_count,
                        "admittedCount": p.admitted,
                        "levels": list(p.levels),
                        "domains": [
                            {"values": list(d.values), "assigned": d.assigned, **d.pods.as_dict()}
                            for d in p.domains
                        ],
                        "unassigned": p.unassigned.as_dict(),
                        **({"problem": p.problem} if p.problem else {}),
                    }
                    for p in w.pod_sets
                ],
            }
            for w in workloads
        ]
    }


def render_json(workloads: Sequence[WorkloadStatus]) -> str:
    return json.dumps(document(workloads), indent=2) + "\n"


def render_yaml(workloads: Sequence[WorkloadStatus]) -> str:
    return yaml.safe_dump(document(workloads), sort_keys=False)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _table(rows: Sequence[Sequence[str]], indent: str) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        (indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))).rstrip()
        for row in rows
    ]


_COLUMNS = ("DOMAIN", "ASSIGNED", *(state.upper() for state in POD_STATES))


def render_workload(workload: WorkloadStatus) -> str:
    header = (
        f"WORKLOAD {workload.namespace}/{workload.name}  "
        f"QUEUE {workload.queue or '-'} ({workload.cluster_queue or '-'})  "
        f"STATE {workload.state_text}"
    )
    if workload.state == "Pending" and workload.message:
        header += f"  {_one_line(workload.message)}"
    lines = [header]
    if workload.unhealthy_nodes:
        lines.append(f"  UNHEALTHY NODES {', '.join(workload.unhealthy_nodes)}")
    for pod_set in workload.pod_sets:
        levels = ", ".join(pod_set.levels) or "-"
        lines.append(f"  PODSET {pod_set.name}  COUNT {pod_set.count_text}  LEVELS {levels}")
        if pod_set.problem:
            lines.append(f"    UNREADABLE ASSIGNMENT {pod_set.problem}")
        rows: list[list[str]] = [list(_COLUMNS)]
        for domain in pod_set.domains:
            counts = domain.pods.as_dict()
            rows.append(
                ["/".join(domain.values) or "-", str(domain.assigned)]
                + [str(counts[s]) for s in POD_STATES]
            )
        if pod_set.unassigned.total or not pod_set.domains:
            counts = pod_set.unassigned.as_dict()
            rows.append([UNASSIGNED, "-"] + [str(counts[s]) for s in POD_STATES])
        lines.extend(_table(rows, "    "))
    return "\n".join(lines) + "\n"


def render_table(workloads: Sequence[WorkloadStatus], namespace: str | None) -> str:
    """One block per Workload; ``namespace`` None means all namespaces (for the empty case)."""
    if not workloads:
        where = f"namespace {namespace}" if namespace is not None else "any namespace"
        return f"No workloads in {where}.\n"
    return "\n".join(render_workload(w) for w in workloads)


def render(workloads: Sequence[WorkloadStatus], output: str, namespace: str | None) -> str:
    if output == "json":
        return render_json(workloads)
    if output == "yaml":
        return render_yaml(workloads)
    return render_table(workloads, namespace)


# --- the shell --------------------------------------------------------------------------


class StatusError(Exception):
    """Reported as one line on stderr, exit status 1."""


class ArgumentError(StatusError):
    """A kubeconfig that cannot be used: invalid arguments, exit status 2."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name",
        nargs="?",
        metavar="NAME",
        help="a Workload, or the Job/JobSet that owns one (default: every Workload)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "-n", "--namespace", help="default: the kubeconfig context's namespace, else 'default'"
    )
    where.add_argument(
        "-A", "--all-namespaces", action="store_true", help="Workloads of every namespace"
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="default: $KUBECONFIG, else ~/.kube/config, else the in-cluster service account",
    )
    parser.add_argument(
        "-o", "--output", choices=("table", "json", "yaml"), default="table", help="default: table"
    )
    parser.add_argument(
        "--queues",
        action="store_true",
        help="the cohort tree (cohorts, ClusterQueues, LocalQueues) with nominal quota, used, "
        "borrowed, lent, fair share and pending workloads per node (instead of Workloads)",
    )
    parser.add_argument(
        "--cluster",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="with --queues: read ClusterQueues, Cohorts, LocalQueues and Workloads from a file "
        "or directory (- reads stdin) instead of the API server",
    )


def _kubeconfig_paths(explicit: str | None) -> str | None:
    """The kubeconfig to load (``:``-joined like $KUBECONFIG), or None for in-cluster."""
    if explicit:
        if not Path(explicit).expanduser().is_file():
            raise ArgumentError(f"kubeconfig {explicit} does not exist")
        return str(Path(explicit).expanduser())
    candidates = (os.environ.get("KUBECONFIG") or "~/.kube/config").split(os.pathsep)
    present = [str(Path(p).expanduser()) for p in candidates if p]
    present = [p for p in present if Path(p).is_file()]
    return os.pathsep.join(present) or None


@dataclass(frozen=True, slots=True)
class Connection:
    """The client (the caller closes it), the server messages name, the default namespace."""

    kube: KubeApi
    server: str
    namespace: str


def _in_cluster_namespace() -> str:
    own = ""
    if _SERVICE_ACCOUNT_NAMESPACE.is_file():
        own = _SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return own or "default"


async def connect(kubeconfig: str | None) -> Connection:
    """A client and the default namespace (the context's, else ``default``)."""
    import aiohttp

    from topogate.kube.client import Kube, KubeconfigError, context_namespace

    # A page of a large list may take long, but not one silent stretch of it.
    connect_seconds, read_seconds = _TIMEOUT
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=connect_seconds, sock_read=read_seconds
    )
    paths = _kubeconfig_paths(kubeconfig)
    try:
        if paths is None:
            try:
                kube = await Kube.connect(None, request_timeout=timeout)
            except KubeconfigError as error:
                raise StatusError(
                    "no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not running "
                    f"in a cluster ({_one_line(str(error))})"
                ) from None
            try:
                return Connection(kube, kube.server, _in_cluster_namespace())
            except BaseException:
                await kube.close()
                raise
        namespace = context_namespace(paths)
        kube = await Kube.connect(paths, request_timeout=timeout)
        return Connection(kube, kube.server, namespace or "default")
    except StatusError:
        raise
    except InputError as error:  # the kubeconfig file itself (Kube.connect, context_namespace)
        raise ArgumentError(f"kubeconfig {error.describe()}") from None
    except (KubeconfigError, OSError, yaml.YAMLError, ValueError, KeyError) as error:
        where = paths or "the in-cluster configuration"
        raise StatusError(f"cannot load {where}: {_one_line(str(error))}") from None


def _connection_problem(error: BaseException) -> str:
    """What broke, as ``[Errno 111] Connection refused``."""
    if isinstance(error, TimeoutError):
        return "no answer in time"
    # aiohttp's connector errors wrap the OSError; asyncio words every one "Connect call
    # failed", so the errno says what happened.
    cause = getattr(error, "os_error", None) or error
    if isinstance(cause, OSError) and cause.errno and not isinstance(cause, ssl.SSLError):
        text = os.strerror(cause.errno) if cause.errno > 0 else cause.strerror  # < 0: DNS
        return f"[Errno {cause.errno}] {text}"
    return _one_line(str(error)) or type(error).__name__


def _api_error(server: str, error: BaseException, what: str) -> StatusError:
    if isinstance(error, KubeError):
        if error.status == 404 and what == PLURAL:  # lists 404 only for unserved types
            return StatusError(
                f"the API server at {server} does not serve {GROUP}/{VERSION} {PLURAL} "
                "(are topogate's CRDs installed?)"
            )
        try:
            phrase = http.HTTPStatus(error.status).phrase  # the HTTP reason, as the server sent
        except ValueError:
            phrase = error.reason
        text = f"the API server at {server} answered {error.status} {phrase}".rstrip()
        message = error.message
        return StatusError(_one_line(f"{text} listing {what}: {message}" if message else text))
    problem = _connection_problem(error)
    return StatusError(f"cannot connect to the API server at {server}: {problem}")


async def _list_all(
    kube: KubeApi, resource: Resource, namespace: str | None, **params: Any
) -> list[Obj]:
    """Every item of a list, page by page (``namespace`` None: every namespace)."""
    items: list[Obj] = []
    token: str | None = None
    while True:
        paging: dict[str, Any] = {"limit": _PAGE} | ({"continue": token} if token else {})
        body = _dict(await kube.list(resource, namespace, **paging, **params))
        items.extend(map(_dict, _list(body.get("items"))))
        token = _dict(body.get("metadata")).get("continue") or None
        if not token:
            return items


async def fetch(
    connection: Connection, namespace: str | None, name: str | None
) -> list[WorkloadStatus]:
    """Read Workloads (all, or NAME's) and their pods; ``namespace`` None: every namespace."""
    from topogate.kube.client import KubeconfigError

    kube, server = connection.kube, connection.server
    what = PLURAL
    try:
        workloads = await _list_all(kube, WORKLOADS, namespace)
        if name is not None:
            workloads = select(workloads, name)
            if not workloads:
                raise StatusError(
                    f"Workload {namespace}/{name} not found (no Workload or Job/JobSet of that "
                    "name)"
                )
        if not workloads:
            return []
        what = "pods"
        pods = await _list_all(kube, PODS, namespace, labelSelector=PODSET_LABEL)
    except API_READ_ERRORS as error:
        raise _api_error(server, error, what) from None
    except KubeconfigError as error:  # credential plugins run at request time
        raise StatusError(f"cannot authenticate to {server}: {_one_line(str(error))}") from None
    return summarize(workloads, pods)


@dataclass(slots=True)
class QueueReport:
    """`status --queues`: the flat rows per ClusterQueue, the cohort tree, whether shares
    are shown, and what was wrong in the queue objects (one line each)."""

    rows: list[QuotaRow]
    tree: list[TreeNode]
    shares: bool = False
    warnings: list[str] = field(default_factory=list)


def queue_report(
    cluster_queues: Iterable[Obj],
    local_queues: Iterable[Obj],
    workloads: Iterable[Obj],
    cohorts: Iterable[Obj] = (),
) -> QueueReport:
    """Quota rows and the tree of every ClusterQueue and Cohort that parses (a bad one is
    left out, with a warning). Shares are shown when a ClusterQueue or Cohort carries
    ``status.fairSharing`` (`serve --fair-sharing` writes it)."""
    queue_objs, cohort_objs = list(cluster_queues), list(cohorts)
    catalog, warnings = build_catalog(queue_objs, list(local_queues), [], [], None, (), cohort_objs)
    waiting: dict[str, int] = {}
    waiting_local: dict[str, int] = {}
    admitted = []
    for workload in workloads:
        if admission_state(workload)[0] == "Finished":
            continue
        admission = _dict(workload.get("status")).get("admission")
        if admission:
            admitted.append(_dict(admission))
            continue
        queue = _dict(workload.get("spec")).get("queueName")
        cq, _ = catalog.cluster_queue(_namespace(workload), queue)
        if cq is not None:
            waiting[cq] = waiting.get(cq, 0) + 1
            key = f"{_namespace(workload)}/{queue}"
            waiting_local[key] = waiting_local.get(key, 0) + 1
    usage = usage_of(admitted)
    tree = CohortTree(catalog.queues, catalog.cohorts)
    warnings += tree_warnings(tree, catalog.cohorts)
    shares = any("fairSharing" in _dict(obj.get("status")) for obj in (*queue_objs, *cohort_objs))
    book = QuotaBook(catalog.queues, usage, tree)
    return QueueReport(
        quota_rows(catalog.queues, usage, waiting, catalog.cohorts),
        queue_tree(book, waiting, catalog.local_queues, waiting_local, shares),
        shares,
        warnings,
    )


def _figure(resource: str, amount: int) -> str:
    return format_units(resource, amount)


def _tree_records(nodes: Sequence[TreeNode], shares: bool) -> list[dict[str, Any]]:
    records = []
    for node in nodes:
        record: dict[str, Any] = {"kind": node.kind, "name": node.name}
        if node.kind != LOCAL_QUEUE:
            record["resources"] = [
                {
                    "flavor": f.flavor,
                    "resource": f.resource,
                    "nominal": _figure(f.resource, f.nominal),
                    "used": _figure(f.resource, f.used),
                    "borrowed": _figure(f.resource, f.borrowed),
                    "lent": _figure(f.resource, f.lent),
                }
                for f in node.figures
            ]
        if shares and node.share is not None:
            record["weightedShare"] = node.share.rounded
        record["pendingWorkloads"] = node.pending
        if node.problem:
            record["problem"] = node.problem
        if node.children:
            record["children"] = _tree_records(node.children, shares)
        records.append(record)
    return records


def _tree_table(nodes: Sequence[TreeNode], shares: bool) -> list[list[str]]:
    """Rows of the tree table: a node's first (flavor, resource) on its own line, the others
    below it, under the tree's lines."""
    table: list[list[str]] = []

    def walk(node: TreeNode, lead: str, branch: str, below: str) -> None:
        word = {COHORT: "cohort", LOCAL_QUEUE: "lq"}.get(node.kind, "cq")
        name = f"{lead}{branch}{word} {node.name}" + (f" ({node.problem})" if node.problem else "")
        share = ""
        if shares and node.share is not None:
            share = str(node.share.rounded)
        figures: list[Figures | None] = [*node.figures] or [None]
        for i, f in enumerate(figures):
            first = i == 0
            cells = [name if first else f"{lead}{below}"]
            if f is None:
                cells += ["", "", "", "", "", ""]
            else:
                cells += [f.flavor, f.resource]
                cells += [_figure(f.resource, v) for v in (f.nominal, f.used, f.borrowed, f.lent)]
            if shares:
                cells.append(share if first else "")
            cells.append(str(node.pending) if first else "")
            table.append(cells)
        for j, child in enumerate(node.children):
            last = j == len(node.children) - 1
            walk(child, lead + below, "└─ " if last else "├─ ", "   " if last else "│  ")

    for root in nodes:
        walk(root, "", "", "")
    return table


def render_queues(report: QueueReport, output: str) -> str:
    rows = report.rows
    records = [
        {
            "clusterQueue": r.queue,
            "cohort": r.cohort,
            "flavor": r.flavor,
            "resource": r.resource,
            "nominal": format_units(r.resource, r.nominal),
            "used": format_units(r.resource, r.used),
            "borrowed": format_units(r.resource, r.borrowed),
            "available": format_units(r.resource, r.available),
            "pendingWorkloads": r.pending,
        }
        for r in rows
    ]
    document = {"clusterQueues": records, "tree": _tree_records(report.tree, report.shares)}
    if output == "json":
        return json.dumps(document, indent=2) + "\n"
    if output == "yaml":
        return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    if not report.tree:
        return "No ClusterQueues.\n"
    header = ["NODE", "FLAVOR", "RESOURCE", "NOMINAL", "USED", "BORROWED", "LENT"]
    header += ["SHARE", "PENDING"] if report.shares else ["PENDING"]
    return "\n".join(_table([header, *_tree_table(report.tree, report.shares)], "")) + "\n"


async def fetch_queues(connection: Connection) -> QueueReport:
    from topogate.kube.client import KubeconfigError

    kube, server = connection.kube, connection.server
    try:
        queues = await _list_all(kube, CLUSTER_QUEUES, None)
        local = await _list_all(kube, LOCAL_QUEUES, None)
        workloads = await _list_all(kube, WORKLOADS, None)
        cohorts = await _optional_list(kube, COHORTS)
        kueue: list[Obj] | str
        try:
            kueue = await _optional_list(kube, KUEUE_COHORTS)
        except KubeError as error:
            if error.status != 403:
                raise
            # Another project's kind: a user allowed topogate's objects only still gets them.
            kueue = f"Kueue's Cohorts are not drawn: listing them is forbidden ({error.message})"
    except API_READ_ERRORS as error:
        raise _api_error(server, error, "clusterqueues") from None
    except KubeconfigError as error:
        raise StatusError(f"cannot authenticate to {server}: {_one_line(str(error))}") from None
    if isinstance(kueue, str):
        report = queue_report(queues, local, workloads, cohorts)
        report.warnings.append(kueue)
        return report
    return queue_report(queues, local, workloads, _unshadowed([*cohorts, *kueue]))


async def _optional_list(kube: KubeApi, resource: Resource) -> list[Obj]:
    """Every object of a kind a cluster may not serve (none when its CRD is missing)."""
    try:
        return await _list_all(kube, resource, None)
    except KubeError as error:
        if error.status == 404:
            return []
        raise


def _unshadowed(cohorts: Sequence[Obj]) -> list[Obj]:
    """One Cohort per name, the first given (topogate's before Kueue's, as serve reads them)."""
    seen: set[str] = set()
    out = []
    for obj in cohorts:
        name = str(_dict(obj.get("metadata")).get("name"))
        if name not in seen:
            seen.add(name)
            out.append(obj)
    return out


def queues_from_files(paths: Sequence[Path]) -> QueueReport:
    """The report from files (``kubectl get clusterqueues,cohorts,localqueues,workloads -A -o
    yaml``), topogate's or Kueue's objects: one that does not parse, or a name given twice, is
    an error here naming the file and document (InputError)."""
    from topogate.api.models import ClusterQueue, Cohort, LocalQueue
    from topogate.api.validation import parse_model
    from topogate.commands.loader import READ_AS
    from topogate.files import documents

    models: dict[str, Any] = {"ClusterQueue": ClusterQueue, "LocalQueue": LocalQueue}
    models["Cohort"] = Cohort
    kinds: dict[str, list[Obj]] = {kind: [] for kind in (*models, "Workload")}
    seen: dict[tuple[str, str], str] = {}
    for path in paths:
        for doc in documents(path):
            kind = str(doc.obj.get("kind"))
            if kind not in kinds or doc.obj.get("apiVersion") not in READ_AS[kind]:
                continue
            same = {**doc.obj, "apiVersion": API_VERSION}  # Kueue's: the same fields
            if kind in models:
                try:
                    parse_model(models[kind], same, "")
                except InputError as error:
                    raise InputError(error.message, where=doc.where, field=error.field) from None
                key = (kind, f"{_namespace(same) if kind == 'LocalQueue' else ''}/{_name(same)}")
                if key in seen:
                    raise InputError(
                        f"{kind} {key[1].lstrip('/')} is given twice (also in {seen[key]})",
                        where=doc.where,
                    )
                seen[key] = doc.where
            kinds[kind].append(same)
    report = queue_report(
        kinds["ClusterQueue"], kinds["LocalQueue"], kinds["Workload"], kinds["Cohort"]
    )
    bad = [w.removeprefix("ignoring ") for w in report.warnings if w.startswith("ignoring ")]
    if bad:  # parsed, but a quota the cache cannot count
        raise InputError("; ".join(bad), where=", ".join(str(p) for p in paths))
    return report


def run(args: argparse.Namespace) -> int:
    """``topogate status``: exit 0 with the report, 1 with one error line on stderr."""
    if args.queues and (args.name or args.namespace or args.all_namespaces):
        print(
            "topogate status: error: --queues shows every ClusterQueue; it takes no NAME, "
            "--namespace or --all-namespaces",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.name and args.all_namespaces:
        print(
            "topogate status: error: NAME cannot be combined with --all-namespaces", file=sys.stderr
        )
        return EXIT_USAGE
    if args.cluster:
        return _from_files(args)
    return asyncio.run(_connected(args))


def _from_files(args: argparse.Namespace) -> int:
    """`status --queues --cluster PATH`: the report from files; exit 2 on a bad object."""
    if not args.queues:
        print("topogate status: error: --cluster needs --queues", file=sys.stderr)
        return EXIT_USAGE
    try:
        report = queues_from_files(args.cluster)
    except InputError as error:
        print(f"topogate status: error: {error.describe()}", file=sys.stderr)
        return EXIT_USAGE
    for warning in report.warnings:
        print(f"topogate status: warning: {warning}", file=sys.stderr)
    sys.stdout.write(render_queues(report, args.output))
    return EXIT_OK


async def _connected(args: argparse.Namespace) -> int:
    try:
        connection = await connect(args.kubeconfig)
    except StatusError as error:
        print(f"topogate status: error: {error}", file=sys.stderr)
        return EXIT_USAGE if isinstance(error, ArgumentError) else EXIT_ERROR
    try:
        return await report(connection, args)
    finally:
        await connection.kube.close()


async def report(connection: Connection, args: argparse.Namespace) -> int:
    """The report on stdout (exit 0), or one error line on stderr (exit 1)."""
    try:
        if args.queues:
            queues = await fetch_queues(connection)
            for warning in queues.warnings:
                print(f"topogate status: warning: {warning}", file=sys.stderr)
            sys.stdout.write(render_queues(queues, args.output))
            return EXIT_OK
        namespace = None if args.all_namespaces else args.namespace or connection.namespace
        workloads = await fetch(connection, namespace, args.name)
    except StatusError as error:
        print(f"topogate status: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    sys.stdout.write(render(workloads, args.output, namespace))
    return EXIT_OK
