"""Benchmark of the live loop on the local control plane; prints figures, asserts nothing.

    .venv/bin/python hack/bench_serve.py [--jobs 200] [--gang 64]

1. Gang: one Indexed Job of --gang pods x 8 GPUs with a required block, on 128 fake 8-GPU
   nodes (2 blocks x 4 racks x 16 hosts). Times from the Job's creation to: Workload admitted,
   all pods created (Job controller), all gates removed (topogate's ungater), all pods bound
   (kube-scheduler).
2. Backlog: --jobs suspended, queued Jobs (1 pod x 1 GPU, required rack) created while topogate
   is down, then `topogate serve` starts; time until every Workload is admitted, as jobs/s.
   This includes creating the Workloads, every admission cycle and every status write.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config

from topogate.testing.controlplane import ControlPlane, free_port
from topogate.testing.localcluster import create_all, install_crds, serving

BLOCK, RACK, HOST = "bench/block", "bench/rack", "kubernetes.io/hostname"


def node(name: str, block: str, rack: str, pool: str) -> dict[str, Any]:
    resources = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {BLOCK: block, RACK: rack, HOST: name, "bench/pool": pool},
        },
        "status": {
            "allocatable": resources,
            "capacity": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def queues(pool: str, namespace: str, gpus: int) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ResourceFlavor",
            "metadata": {"name": pool},
            "spec": {"nodeLabels": {"bench/pool": pool}, "topologyName": "bench"},
        },
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ClusterQueue",
            "metadata": {"name": pool},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": pool,
                                "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}],
                            }
                        ],
                    }
                ]
            },
        },
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": namespace},
            "spec": {"clusterQueue": pool},
        },
    ]


def job(
    name: str, namespace: str, pods: int, gpus: int, level: str, suspend: bool
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
        },
        "spec": {
            "suspend": suspend,
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": level}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "example.com/trainer:1",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            },
        },
    }


def wait(check: Callable[[], bool], timeout: float, what: str) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise SystemExit(f"bench: {what} not reached within {timeout:.0f} s")
        time.sleep(0.02)
    return time.monotonic()


def admitted(custom: Any, namespace: str) -> int:
    items = custom.list_namespaced_custom_object(
        "topogate.dev", "v1alpha1", namespace, "workloads"
    )["items"]
    return sum(1 for w in items if (w.get("status") or {}).get("admission"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--gang", type=int, default=64)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="topogate-bench-"))
    plane = ControlPlane.start(work / "controlplane")
    kubeconfig = plane.kubeconfig
    api: client.ApiClient = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
    core: Any = client.CoreV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    try:
        install_crds(kubeconfig)
        topology = {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "Topology",
            "metadata": {"name": "bench"},
            "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]},
        }
        gang_nodes = [
            node(f"g-b{b}-r{r}-h{h}", f"b{b}", f"b{b}-r{r}", "gang")
            for b in range(2)
            for r in range(4)
            for h in range(16)
        ]
        backlog_nodes = [
            node(f"q-r{r}-h{h}", "qb", f"q-r{r}", "backlog") for r in range(8) for h in range(4)
        ]
        create_all(
            kubeconfig,
            [
                topology,
                *gang_nodes,
                *backlog_nodes,
                *queues("gang", "bench-gang", 10_000),
                *queues("backlog", "bench-backlog", 10_000),
            ],
        )

        # --- 2. backlog first: the jobs exist before topogate starts --------------------
        started = time.monotonic()
        create_all(
            kubeconfig,
            [job(f"j{i:03d}", "bench-backlog", 1, 1, RACK, suspend=True) for i in range(args.jobs)],
        )
        created_in = time.monotonic() - started
        port = free_port()
        with serving(
            kubeconfig, work / "serve.log", webhook_dir=work / "certs", webhook_port=port
        ) as serve:
            t0 = time.monotonic()
            t_all = wait(
                lambda: admitted(custom, "bench-backlog") >= args.jobs, 300, "backlog admitted"
            )
            backlog_seconds = t_all - t0
            admission = client.AdmissionregistrationV1Api(api)
            wait(
                lambda: bool(admission.list_mutating_webhook_configuration().items),
                30,
                "webhooks",
            )
            if serve.poll() is not None:
                raise SystemExit(f"serve exited; see {work}/serve.log")
            # Let the backlog's pods settle so they do not share the gang's measurement.
            wait(
                lambda: (
                    sum(
                        1
                        for p in core.list_namespaced_pod("bench-backlog").items
                        if p.spec.node_name
                    )
                    >= args.jobs
                ),
                300,
                "backlog pods bound",
            )

            # --- 1. the gang -------------------------------------------------------------
            label = "batch.kubernetes.io/job-name=gang"
            t0 = time.monotonic()
            create_all(kubeconfig, [job("gang", "bench-gang", args.gang, 8, BLOCK, False)])

            def pods() -> list[Any]:
                return list(core.list_namespaced_pod("bench-gang", label_selector=label).items)

            t_admit = wait(lambda: admitted(custom, "bench-gang") == 1, 120, "gang admitted")
            t_created = wait(lambda: len(pods()) >= args.gang, 120, "gang pods created")
            t_ungated = wait(
                lambda: sum(1 for p in pods() if not p.spec.scheduling_gates) >= args.gang,
                120,
                "gang ungated",
            )
            t_bound = wait(
                lambda: sum(1 for p in pods() if p.spec.node_name) >= args.gang,
                120,
                "gang bound",
            )
        print(
            f"control plane: {work}/controlplane (kube-apiserver, kube-scheduler, Job controller)"
        )
        print(f"\n{args.gang}-pod Job (8 GPUs per pod, required block, 128 nodes):")
        print(f"  admitted (status.admission written)   {t_admit - t0:6.2f} s")
        print(f"  all pods created by the Job controller {t_created - t0:6.2f} s")
        print(f"  all gates removed by the ungater       {t_ungated - t0:6.2f} s")
        print(f"  all pods bound by kube-scheduler       {t_bound - t0:6.2f} s")
        print(f"\nbacklog of {args.jobs} queued Jobs (1 GPU each, required rack, 32 nodes):")
        print(f"  created (suspended) in                 {created_in:6.2f} s")
        print(f"  all admitted after serve started in    {backlog_seconds:6.2f} s")
        print(f"  admission throughput                   {args.jobs / backlog_seconds:6.1f} jobs/s")
        return 0
    finally:
        plane.stop()


if __name__ == "__main__":
    sys.exit(main())
