"""The live demo: a local control plane, `topogate serve`, the example cluster and a job.

    .venv/bin/python hack/demo.py [--keep]

Starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager (built by
hack/controlplane/build.sh), installs topogate's CRDs, creates the example Topology,
ResourceFlavor, queues, nodes and running pods, starts `topogate serve` with its webhooks, then
submits the example training job (a plain Job with a queue label) and prints `topogate status`
until every pod is bound. --keep leaves everything running and prints how to reach it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml
from kubernetes import client, config

from topogate.cli import main as topogate
from topogate.testing.controlplane import ControlPlane, free_port
from topogate.testing.localcluster import create, create_all, install_crds, serving, stop

EXAMPLES = Path(__file__).resolve().parent.parent / "topogate" / "examples"


def _docs(path: Path) -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="topogate-demo-"))
    print(f"== control plane in {workdir}", flush=True)
    plane = ControlPlane.start(workdir / "controlplane")
    kubeconfig = plane.kubeconfig
    api: client.ApiClient = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
    try:
        install_crds(kubeconfig)
        cluster = _docs(EXAMPLES / "cluster.yaml") + _docs(EXAMPLES / "queues.yaml")
        create_all(kubeconfig, cluster)
        nodes = sum(1 for d in cluster if d["kind"] == "Node")
        print(f"== example cluster: {nodes} nodes, Topology, ResourceFlavor, queues", flush=True)
        port = free_port()
        with serving(
            kubeconfig, workdir / "serve.log", webhook_dir=workdir / "certs", webhook_port=port
        ) as serve:
            core = client.CoreV1Api(api)
            admission = client.AdmissionregistrationV1Api(api)
            deadline = time.monotonic() + 30
            while not admission.list_mutating_webhook_configuration().items:
                if time.monotonic() > deadline or serve.poll() is not None:
                    print(f"topogate serve did not start; see {workdir}/serve.log")
                    return 1
                time.sleep(0.2)
            job = _docs(EXAMPLES / "training-job.yaml")[0]
            create(kubeconfig, job)
            print("== submitted Job research/llm-pretrain (6 pods, required block)", flush=True)
            started = time.monotonic()
            while time.monotonic() - started < args.timeout:
                pods = core.list_namespaced_pod(
                    "research", label_selector="batch.kubernetes.io/job-name=llm-pretrain"
                ).items
                bound = sum(1 for p in pods if p.spec is not None and p.spec.node_name)
                print(f"\n-- t={time.monotonic() - started:4.1f}s  pods bound: {bound}/6")
                topogate(["status", "llm-pretrain", "-n", "research", f"--kubeconfig={kubeconfig}"])
                sys.stdout.flush()
                if bound == 6:
                    print(f"\n== all 6 pods bound in {time.monotonic() - started:.1f} s")
                    break
                time.sleep(1.0)
            else:
                print(f"pods not bound in time; see {workdir}/serve.log")
                return 1
            if args.keep:
                print(f"== still running. KUBECONFIG={kubeconfig}; stop with Ctrl-C")
                try:
                    serve.wait()
                except KeyboardInterrupt:
                    stop(serve)
        return 0
    finally:
        if not args.keep:
            plane.stop()


if __name__ == "__main__":
    sys.exit(main())
