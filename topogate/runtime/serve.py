"""`topogate serve`: the controller. Watches, the job integration, the admitter, the ungater,
leader election, health/metrics endpoints and, optionally, the webhook server in one process.

Every replica watches (a warm standby takes over at once) and serves webhooks and probes; only
the holder of the Lease writes workloads, jobs and pods.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import math
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topogate.admission.fairpreemption import DEFAULT_STRATEGIES, STRATEGIES
from topogate.kube import eventloop
from topogate.webhooks.options import add_arguments as webhook_options
from topogate.webhooks.options import native_gangs_argument

if TYPE_CHECKING:
    from topogate.kube.protocol import KubeApi
    from topogate.kube.reflector import Reflector
    from topogate.state import ControllerState

log = logging.getLogger("topogate.serve")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="cluster to control (default: in-cluster)")
    parser.add_argument(
        "--leader-namespace", default="topogate-system", help="namespace of the leader Lease"
    )
    parser.add_argument("--leader-lease", default="topogate-controller", help="Lease name")
    parser.add_argument(
        "--identity", default=None, help="this replica's name in the Lease (default: host_pid)"
    )
    parser.add_argument("--lease-duration", type=float, default=15.0, metavar="SECONDS")
    parser.add_argument("--renew-deadline", type=float, default=10.0, metavar="SECONDS")
    parser.add_argument("--retry-period", type=float, default=2.0, metavar="SECONDS")
    eventloop.add_argument(parser)
    _listener_arguments(parser)
    parser.add_argument(
        "--ungate-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how long pod events are batched before the ungater releases pods",
    )
    parser.add_argument(
        "--ungate-max-per-batch",
        type=int,
        default=1000,
        help="pods released per round at most (spreads API load on huge gangs)",
    )
    parser.add_argument(
        "--exact-budget",
        type=float,
        default=0.05,
        metavar="SECONDS",
        help="time per gang for the exact second pass when the greedy placement misses a "
        "fit (0: off; the greedy answer stands when it runs out)",
    )
    _fair_sharing_arguments(parser)
    parser.add_argument(
        "--node-failure-grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long a node may stay not Ready before the pods admitted onto it are moved "
        "(a deleted node counts at once)",
    )
    parser.add_argument(
        "--hypernode-discovery",
        type=Path,
        metavar="FILE",
        help="discover HyperNodes from node labels: Volcano's volcano-controller.conf "
        "(networkTopologyDiscovery with label sources), or a ConfigMap holding it",
    )
    _gang_arguments(parser)
    webhook = parser.add_argument_group("webhooks (optional: serve them in this process)")
    webhook.add_argument("--webhook-cert-dir", type=Path, help="enables the webhook server")
    webhook.add_argument("--webhook-host", default="0.0.0.0")
    webhook.add_argument("--webhook-port", type=int, default=9443)
    webhook.add_argument("--webhook-dns-name", action="append", default=[])
    webhook.add_argument("--webhook-ip", action="append", default=[])
    webhook.add_argument(
        "--webhook-register-url", help="write webhook configurations pointing at this URL"
    )
    webhook.add_argument(
        "--webhook-inject-ca",
        metavar="NAME",
        help="put the CA into the webhook configurations named NAME (in-cluster)",
    )
    webhook_options(webhook)
    _api_arguments(parser)
    parser.add_argument("--log-level", default="INFO")


def _strategies(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown or not 1 <= len(names) <= 2 or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"must be one or two of {', '.join(STRATEGIES)}, comma-separated, not {text!r}"
        )
    return names


def _listener_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="/metrics is not authenticated: loopback only unless this opens it up "
        "(default: %(default)s)",
    )
    parser.add_argument("--metrics-port", type=int, default=8080, help="/metrics (0: any; -1: off)")
    parser.add_argument(
        "--dashboard",
        action="store_true",
        help="serve a read-only live dashboard at /dashboard on the metrics listener "
        "(--metrics-host, loopback by default): topology, queues, workloads",
    )
    parser.add_argument("--ops-host", default="0.0.0.0")
    parser.add_argument("--ops-port", type=int, default=8081, help="/healthz and /readyz (0: any)")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < math.inf:  # also refuses nan, and inf (the bucket's burst is int(qps))
        raise argparse.ArgumentTypeError(f"must be above 0 and finite, not {text}")
    return value


def _fair_sharing_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fair-sharing",
        action="store_true",
        help="order a cohort tree's queues by Kueue's fair sharing (dominant resource share), "
        "and preempt by it",
    )
    parser.add_argument(
        "--fair-sharing-preemption-strategies",
        type=_strategies,
        default=DEFAULT_STRATEGIES,
        metavar="S[,S]",
        help="with --fair-sharing, Kueue's fairSharing.preemptionStrategies in order: "
        f"one or two of {', '.join(STRATEGIES)} (default: both, in that order)",
    )


def _gang_arguments(parser: argparse.ArgumentParser) -> None:
    native_gangs_argument(parser)
    parser.add_argument(
        "--gang-unschedulable-grace",
        type=_positive,
        default=60.0,
        metavar="SECONDS",
        help="with native gangs, how long kube-scheduler may leave every pod of an admitted "
        "gang unschedulable before the Workload is evicted and requeued",
    )


def _api_arguments(parser: argparse.ArgumentParser) -> None:
    api = parser.add_argument_group("API client")
    api.add_argument(
        "--kube-api-qps",
        type=float,
        default=300.0,
        help="client-side rate limit, requests per second (Kueue's default; 0: none)",
    )
    api.add_argument("--kube-api-burst", type=int, default=500, help="(default: %(default)s)")
    api.add_argument(
        "--pending-status-qps",
        type=_positive,
        default=20.0,  # controllers.pending.PENDING_WRITES_PER_SECOND (imported late)
        metavar="QPS",
        help="pending messages written per second at most, newest first per workload "
        "(a courtesy: admissions never wait behind them) (default: %(default)s)",
    )
    api.add_argument(
        "--kube-api-proxy-from-env",
        action="store_true",
        help="use HTTPS_PROXY/NO_PROXY and ~/.netrc from the environment (off: aiohttp reads "
        "them on every request, in a thread)",
    )


@contextlib.asynccontextmanager
async def _webhooks(
    args: argparse.Namespace, state: ControllerState, kube: KubeApi, native_gangs: bool
) -> AsyncIterator[None]:
    if args.webhook_cert_dir is None:
        yield
        return
    from topogate.webhooks.options import options
    from topogate.webhooks.serving import serving
    from topogate.webhooks.stateview import state_view

    async with serving(
        args.webhook_host,
        args.webhook_port,
        args.webhook_cert_dir,
        dns_names=args.webhook_dns_name,
        ips=args.webhook_ip,
        kube=kube,
        view=state_view(state, kube),
        register_url=args.webhook_register_url,
        inject_ca_into=args.webhook_inject_ca,
        native_gangs=native_gangs,
        **options(args),
    ):
        yield


class Controller:
    """One replica of `serve`: the state, its reflectors, the shells and the leader election,
    wired once; :meth:`run` serves until stopped or until leadership is lost."""

    warmed = False  # the snapshot and domain trees were built once the caches synced
    _warming: asyncio.Task[None] | None = None

    def __init__(self, args: argparse.Namespace, kube: KubeApi, identity: str) -> None:
        from topogate.controllers.admitter import Admitter
        from topogate.controllers.gangfailures import GangFailures
        from topogate.controllers.jobsync import JobSync
        from topogate.controllers.nodefailures import NodeFailures
        from topogate.files import load_discovery_config
        from topogate.kube.client import own_budget
        from topogate.kube.events import SERVE_SENDERS, EventRecorder
        from topogate.metrics import Metrics
        from topogate.state import ControllerState
        from topogate.ungater.controller import Ungater

        from .discovery import HyperNodeDiscovery
        from .fencing import FencedKube
        from .leader import LeaderElector

        # A bad discovery config is a usage error: refuse to start rather than run without it.
        path = args.hypernode_discovery
        discovery_types = load_discovery_config(path) if path else []
        self.args, self.kube, self.identity = args, kube, identity
        self.metrics = Metrics()
        self.elector = LeaderElector(
            kube,
            args.leader_namespace,
            args.leader_lease,
            identity,
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
            metrics=self.metrics,
        )
        # The shells write only while the Lease is ours (reads and the Lease itself go direct).
        writer = FencedKube(kube, self.elector.holds_lease)
        self.state = ControllerState()
        # Events spend a client budget of their own (as Kueue's recorder), not the writes'.
        self.events = EventRecorder(
            FencedKube(own_budget(kube), self.elector.holds_lease),
            identity,
            on_drop=self.metrics.events_dropped.inc,
            senders=SERVE_SENDERS,
        )
        # Its PodGroups' version is set once discovered (`--native-gangs`, :meth:`use_podgroups`).
        self.ungater = Ungater(
            writer,
            self.state,
            self.metrics,
            interval=args.ungate_interval,
            max_per_batch=args.ungate_max_per_batch,
        )
        self.gang_failures = GangFailures(
            writer, self.state, self.metrics, self.events, grace=args.gang_unschedulable_grace
        )
        self.admitter = Admitter(
            writer,
            self.state,
            self.metrics,
            self.events,
            exact_budget=args.exact_budget,
            pending_qps=args.pending_status_qps,
            fair_sharing=args.fair_sharing,
            preemption_strategies=args.fair_sharing_preemption_strategies,
        )
        self.loops: list[Callable[[], Coroutine[Any, Any, None]]] = [
            self.admitter.run,
            JobSync(writer, self.state, self.events).run,
            NodeFailures(
                writer,
                self.state,
                self.metrics,
                self.events,
                grace=args.node_failure_grace,
                exact_budget=args.exact_budget,
            ).run,
            self.ungater.run,
            self.gang_failures.run,
        ]
        if discovery_types:
            self.loops.append(HyperNodeDiscovery(writer, self.state, discovery_types).run)
        self.reflectors = self._reflectors()
        self.tasks: list[asyncio.Task[Any]] = []

    def use_podgroups(self, api_version: str | None) -> None:
        """Native gangs on (PodGroups of ``api_version``) or off (None), before :meth:`run`:
        on, users' PodGroups are watched too (their pods are queued as one gang)."""
        from topogate.kube.reflector import Reflector
        from topogate.kube.resources import native_podgroups

        self.ungater.podgroups = api_version
        self.gang_failures.podgroups = api_version
        if api_version is not None:
            resource = native_podgroups(api_version)
            self.reflectors[resource.key] = Reflector(
                self.kube,
                resource,
                self.state.handler(resource),
                on_relist=lambda: self.metrics.relists.labels(resource.key).inc(),
            )

    def _reflectors(self) -> dict[str, Reflector]:
        from topogate.cache.nodes import slim_node, slim_pod
        from topogate.kube.reflector import Reflector
        from topogate.kube.resources import (
            COHORTS,
            HYPERNODES,
            JOB_CRD_RESOURCES,
            KAI_TOPOLOGIES,
            KUEUE_COHORTS,
            NODES,
            PODS,
            READ_RESOURCES,
        )
        from topogate.state.store import WATCHED

        def counter(plural: str) -> Callable[[], None]:
            return lambda: self.metrics.relists.labels(plural).inc()

        # CRDs a cluster may lack: followed once they exist (looked for again every 30 s).
        optional = (
            *JOB_CRD_RESOURCES,
            HYPERNODES,
            KAI_TOPOLOGIES,
            COHORTS,
            KUEUE_COHORTS,
            *READ_RESOURCES.values(),
        )
        # Only what topogate reads of Nodes and Pods is kept (most of the memory at 100,000).
        slim = {NODES.key: slim_node, PODS.key: slim_pod}
        return {
            r.key: Reflector(
                self.kube,
                r,
                self.state.handler(r),
                optional=r in optional,
                on_relist=counter(r.key),
                transform=slim.get(r.key),
            )
            for r in WATCHED
        }

    def ready(self) -> tuple[bool, str]:
        waiting = sorted(n for n, r in self.reflectors.items() if not r.synced.is_set())
        if waiting:
            return False, f"caches not synced: {', '.join(waiting)}"
        if not self.warmed:
            return False, "caches synced; building the capacity snapshot and domain trees"
        if not self.elector.is_leader:
            return True, f"standby (leader: {self.elector.leader_identity or 'unknown'})"
        return True, "leading"

    def healthy(self) -> tuple[bool, str]:
        broken = [t.get_name() for t in self.tasks if t.done()]
        return (False, f"stopped: {', '.join(broken)}") if broken else (True, "ok")

    async def lead(self) -> None:
        """Called once this replica holds the Lease: every job, workload and pod is looked at
        again (another replica may have left work half done), then the loops run."""
        log.info("leading as %s; waiting for caches", self.identity)
        await asyncio.gather(*(r.synced.wait() for r in self.reflectors.values()))
        counts = self.state.store.counts()
        log.info("caches synced: %s", ", ".join(f"{k}={n}" for k, n in counts.items()))
        for kind, key in self.state.store.job_keys():
            self.state.signals.job(kind, key)
        self.state.signals.admit()
        for key in self.state.store.workloads_with_pods():
            self.state.signals.ungate_workload(key)
        await asyncio.gather(*(loop() for loop in self.loops))

    async def run(self, stop: asyncio.Event) -> int:
        """Watch (nodes first, so workloads admitted before a restart find their nodes), then
        stand for election; return when ``stop`` is set (0) or leadership is lost (1)."""
        from topogate.kube.resources import NODES

        from .leader import LeadershipLost

        nodes = self.reflectors[NODES.key]
        self.tasks.append(asyncio.create_task(nodes.run(), name="watch-nodes"))
        if not await _until(nodes.synced.wait(), stop):
            return 0  # stopped before the API server ever answered
        for name, reflector in self.reflectors.items():
            if name != NODES.key:
                self.tasks.append(asyncio.create_task(reflector.run(), name=f"watch-{name}"))
        # Not among ``tasks``: it ends once done, which is no failure (``healthy``).
        self._warming = asyncio.create_task(self._warm(), name="warm-up")
        try:
            if not await _until(self.elector.run(self.lead), stop):
                return 0
        except LeadershipLost as error:
            log.error("leadership lost: %s; exiting so a fresh replica takes over", error)
            return 1
        return 0

    async def _warm(self) -> None:
        """Once the caches synced, build the capacity snapshot and the domain trees before
        reporting ready (every replica: a standby that takes over has them too), so the
        first Workload's cycle does not build them (about 2 s at 100,000 nodes)."""
        await asyncio.gather(*(r.synced.wait() for r in self.reflectors.values()))
        started = time.perf_counter()
        try:
            self.admitter.warm()
        except Exception as error:  # only a head start: the first cycle builds them then
            log.error("building the capacity snapshot and domain trees failed: %s", error)
        self.warmed = True
        log.info(
            "capacity snapshot and domain trees of %d nodes built in %.0f ms",
            len(self.state.ledger.nodes()),
            (time.perf_counter() - started) * 1000,
        )

    async def close(self) -> None:
        tasks = [*self.tasks, *([self._warming] if self._warming is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.events.drain(seconds=10)  # events are best effort: never hold up an exit


async def _until(work: Coroutine[Any, Any, Any], stop: asyncio.Event) -> bool:
    """Run ``work`` until it ends (True; its exception is raised) or ``stop`` is set (False:
    it is cancelled). Every stage of `serve` honours the stop signal this way."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        stopping.cancel()
        task.result()
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False


async def _serve(args: argparse.Namespace) -> int:
    from topogate.kube.client import Kube

    if getattr(args, "dashboard", False) and args.metrics_port < 0:
        from topogate.api.errors import InputError

        raise InputError(
            "is served on the metrics listener: --metrics-port is -1", field="--dashboard"
        )
    identity = args.identity or f"{socket.gethostname()}_{os.getpid()}"
    kube = await Kube.connect(
        args.kubeconfig,
        trust_env=args.kube_api_proxy_from_env,
        qps=args.kube_api_qps or None,
        burst=args.kube_api_burst,
    )
    try:  # the client is closed however the rest ends (a refused config, a port in use)
        return await _run_controller(args, kube, identity)
    finally:
        await kube.close()


async def _run_controller(args: argparse.Namespace, kube: KubeApi, identity: str) -> int:
    from topogate.kube.podgroups import podgroup_version

    from .ops import OpsServer, make_metrics_app, make_ops_app, start_ops_server

    controller = Controller(args, kube, identity)  # refuses bad arguments before any call
    podgroups = await podgroup_version(kube, getattr(args, "native_gangs", "off"))
    controller.use_podgroups(podgroups)
    if podgroups:
        print(f"topogate serve: native gangs on ({podgroups} PodGroups)", flush=True)
    app = make_ops_app(controller.ready, controller.healthy)
    ops = await start_ops_server(app, args.ops_host, args.ops_port)
    servers: list[OpsServer] = [ops]
    if args.metrics_port >= 0:
        metrics_app = make_metrics_app(controller.metrics)
        if getattr(args, "dashboard", False):
            from .dashboard import Feed, add_dashboard

            add_dashboard(metrics_app, Feed(controller.state, lambda: controller.elector.is_leader))
        servers.append(
            await start_ops_server(metrics_app, args.metrics_host, args.metrics_port, "metrics")
        )
    ports = " ".join(f":{server.port}" for server in servers)
    print(f"topogate serve: {identity}; probes and metrics on {ports}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with _webhooks(args, controller.state, kube, podgroups is not None):
            return await controller.run(stop)
    finally:
        await controller.close()
        for server in servers:
            await server.cleanup()


# The cyclic garbage collector's thresholds for `serve` (Python's: 700, 10, 10). The state
# holds every watched object (thousands of Workloads, each hundreds of containers) for
# the process's life, and each full collection walks all of it: with the defaults, in
# Kueue's TAS scenario replayed in memory (3,000 Workloads), collections took 1.9 s of a
# 12 s run, 1.4 s of it in full ones; with a young generation of 10,000, 0.8 s. Cycles
# (asyncio's failed futures and their tracebacks) are still collected, less often.
GC_THRESHOLDS = (10_000, 10, 10)


def run(args: argparse.Namespace) -> int:
    from .logs import configure

    # basicConfig's lines, made at a fraction of the cost (a line per admission).
    configure(getattr(logging, str(args.log_level).upper(), logging.INFO))
    gc.set_threshold(*GC_THRESHOLDS)
    return eventloop.run(_serve(args), getattr(args, "event_loop", "auto"))
