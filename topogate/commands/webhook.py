"""`topogate webhook`: the admission webhook server alone (`topogate serve` embeds the same one).

With ``--register-url`` it also writes the webhook configurations (URL + caBundle) into the
cluster named by ``--kubeconfig``, which is how the local control plane and the tests use it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from topogate.kube import eventloop
from topogate.webhooks.options import add_arguments as webhook_options
from topogate.webhooks.options import native_gangs_argument, options
from topogate.webhooks.serving import serving


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=9443)
    parser.add_argument(
        "--cert-dir",
        type=Path,
        required=True,
        help="tls.crt/tls.key/ca.crt; made here when absent, reloaded on change",
    )
    parser.add_argument(
        "--dns-name", action="append", default=[], help="SAN for a made certificate"
    )
    parser.add_argument("--ip", action="append", default=[], help="IP SAN for a made certificate")
    parser.add_argument("--kubeconfig", help="cluster to read queues from (default: in-cluster)")
    parser.add_argument("--register-url", help="write webhook configurations pointing here")
    parser.add_argument(
        "--inject-ca",
        metavar="NAME",
        help="put the CA into the webhook configurations named NAME (in-cluster)",
    )
    parser.add_argument("--reload-interval", type=float, default=5.0)
    eventloop.add_argument(parser)
    native_gangs_argument(parser)
    webhook_options(parser, prefix="--")


async def _run(args: argparse.Namespace) -> int:
    from topogate.kube.client import Kube
    from topogate.kube.podgroups import podgroup_version

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A shared CA lives in a Secret: it needs the client even without the other flags.
    use_api = args.kubeconfig or args.register_url or args.inject_ca or args.webhook_ca_secret
    use_api = use_api or args.native_gangs == "on"  # in-cluster: PodGroups looked for there
    kube = await Kube.connect(args.kubeconfig) if use_api else None
    try:
        # As `serve`'s webhook: pods join their gang's PodGroup when PodGroups are served
        # (auto with no cluster to ask is off).
        podgroups = await podgroup_version(kube, args.native_gangs) if kube else None
        async with serving(
            args.host,
            args.port,
            args.cert_dir,
            dns_names=args.dns_name,
            ips=args.ip,
            kube=kube,
            register_url=args.register_url,
            inject_ca_into=args.inject_ca,
            reload_interval=args.reload_interval,
            native_gangs=podgroups is not None,
            **options(args),
        ):
            if podgroups:
                print(f"native gangs on ({podgroups} PodGroups)", flush=True)
            print(f"webhooks ready on https://{args.host}:{args.port}", flush=True)
            await stop.wait()
    finally:
        if kube is not None:
            await kube.close()
    return 0


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return eventloop.run(_run(args), getattr(args, "event_loop", "auto"))
