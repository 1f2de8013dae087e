"""`topogate serve`: the controller. Watches, the job integration, the admitter, the ungater,
leader election, health/metrics endpoints and, optionally, the webhook server in one process.

Every replica watches (a warm standby takes over at once) and serves webhooks and probes; only
the holder of the Lease writes workloads, jobs and pods.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from topogate.state import ControllerState

log = logging.getLogger("topogate.runtime.serve")


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
    parser.add_argument("--ops-host", default="0.0.0.0")
    parser.add_argument(
        "--ops-port", type=int, default=8081, help="/healthz, /readyz, /metrics (0: any)"
    )
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
        "--hypernode-discovery",
        type=Path,
        metavar="FILE",
        help="discover HyperNodes from node labels: Volcano's volcano-controller.conf "
        "(networkTopologyDiscovery with label sources), or a ConfigMap holding it",
    )
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
    parser.add_argument("--log-level", default="INFO")


@contextlib.asynccontextmanager
async def _webhooks(args: argparse.Namespace, state: ControllerState) -> AsyncIterator[None]:
    if args.webhook_cert_dir is None:
        yield
        return
    from topogate.webhooks.serving import serving

    async with serving(
        args.webhook_host,
        args.webhook_port,
        args.webhook_cert_dir,
        dns_names=args.webhook_dns_name,
        ips=args.webhook_ip,
        kubeconfig=args.kubeconfig,
        use_api=True,
        view=state,
        register_url=args.webhook_register_url,
        inject_ca_into=args.webhook_inject_ca,
    ):
        yield


async def _serve(args: argparse.Namespace) -> int:
    from topogate.admission.admitter import Admitter
    from topogate.admission.jobsync import JobSync
    from topogate.files import load_discovery_config
    from topogate.kube.client import Kube
    from topogate.kube.events import EventRecorder
    from topogate.kube.reflector import Reflector
    from topogate.kube.resources import HYPERNODES, JOBSETS, NODES
    from topogate.metrics import Metrics
    from topogate.runtime.discovery import HyperNodeDiscovery
    from topogate.runtime.leader import LeaderElector, LeadershipLost
    from topogate.runtime.ops import make_ops_app, start_ops_server
    from topogate.state import WATCHED, ControllerState, job_keys
    from topogate.ungater.controller import Ungater

    # A bad discovery config is a usage error: refuse to start rather than run without it.
    discovery_types = (
        load_discovery_config(args.hypernode_discovery) if args.hypernode_discovery else []
    )
    identity = args.identity or f"{socket.gethostname()}_{os.getpid()}"
    kube = await Kube.connect(args.kubeconfig)
    metrics = Metrics()
    state = ControllerState()
    events = EventRecorder(kube, identity)
    admitter = Admitter(kube, state, metrics, events)
    jobs = JobSync(kube, state, events)
    ungater = Ungater(
        kube,
        state,
        metrics,
        interval=args.ungate_interval,
        max_per_batch=args.ungate_max_per_batch,
    )
    discovery = HyperNodeDiscovery(kube, state, discovery_types) if discovery_types else None

    def counter(plural: str) -> Callable[[], None]:
        return lambda: metrics.relists.labels(plural).inc()

    reflectors = {
        r.plural: Reflector(
            kube,
            r,
            state.handler(r),
            optional=r in (JOBSETS, HYPERNODES),
            on_relist=counter(r.plural),
        )
        for r in WATCHED
    }
    elector = LeaderElector(
        kube,
        args.leader_namespace,
        args.leader_lease,
        identity,
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
        metrics=metrics,
    )
    tasks: list[asyncio.Task[Any]] = []

    def unsynced() -> list[str]:
        return sorted(name for name, r in reflectors.items() if not r.synced.is_set())

    def ready() -> tuple[bool, str]:
        waiting = unsynced()
        if waiting:
            return False, f"caches not synced: {', '.join(waiting)}"
        if not elector.is_leader:
            return True, f"standby (leader: {elector.leader_identity or 'unknown'})"
        return True, "leading"

    def healthy() -> tuple[bool, str]:
        broken = [t.get_name() for t in tasks if t.done()]
        return (False, f"stopped: {', '.join(broken)}") if broken else (True, "ok")

    async def lead() -> None:
        log.info("leading as %s; waiting for caches", identity)
        await asyncio.gather(*(r.synced.wait() for r in reflectors.values()))
        log.info("caches synced: %s", ", ".join(f"{k}={n}" for k, n in state.counts().items()))
        for kind, key in job_keys(state):
            state.signals.job(kind, key)
        state.signals.admit()
        for key in state.workloads_with_pods():
            state.signals.ungate_workload(key)
        loops = [admitter.run(), jobs.run(), ungater.run()]
        if discovery is not None:
            loops.append(discovery.run())
        await asyncio.gather(*loops)

    ops = await start_ops_server(
        make_ops_app(metrics, ready, healthy), args.ops_host, args.ops_port
    )
    print(f"topogate serve: {identity}; ops on :{ops.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with _webhooks(args, state):
            # Nodes first, so workloads admitted before a restart find their nodes.
            node_task = asyncio.create_task(reflectors[NODES.plural].run(), name="watch-nodes")
            tasks.append(node_task)
            await reflectors[NODES.plural].synced.wait()
            for name, reflector in reflectors.items():
                if name != NODES.plural:
                    tasks.append(asyncio.create_task(reflector.run(), name=f"watch-{name}"))
            election = asyncio.create_task(elector.run(lead), name="leader")
            stopping = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait({election, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if election in done:
                election.result()  # LeadershipLost or a crash: exit non-zero
                return 0
            election.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await election
            return 0
    except LeadershipLost as error:
        log.error("leadership lost: %s; exiting so a fresh replica takes over", error)
        return 1
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await events.drain()
        await ops.cleanup()
        await kube.close()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return asyncio.run(_serve(args))
