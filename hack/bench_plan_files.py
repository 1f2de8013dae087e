"""`topogate plan` on a big cluster dump: how long reading the YAML takes, and the whole command.

Writes a kubectl-like dump (Nodes with the labels, annotations, conditions and image lists a
real ``kubectl get nodes,pods -A -o yaml`` carries, and bound Pods) of about 9 MB to a
temporary directory, then times ``topogate.files.documents`` on it and ``topogate plan`` in a
fresh process (median of --runs).

Run: .venv/bin/python hack/bench_plan_files.py [--nodes 1152] [--pods-per-node 4] [--runs 3]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

BLOCK = "cloud.example.com/topology-block"
RACK = "cloud.example.com/topology-rack"
HOST = "kubernetes.io/hostname"


def _node(i: int) -> dict[str, Any]:
    name = f"gpu-{i:05d}"
    block, rack = f"block-{i // 256}", f"rack-{i // 16}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"5b6c1d2e-{i:04x}-4f00-9a00-{i:012x}",
            "resourceVersion": str(100000 + i),
            "creationTimestamp": "2026-11-01T10:00:00Z",
            "labels": {
                BLOCK: block,
                RACK: rack,
                HOST: name,
                "node-group": "h100",
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
                "topology.kubernetes.io/region": "us-east-1",
                "topology.kubernetes.io/zone": "us-east-1a",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": "8",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "kubectl.kubernetes.io/last-applied-configuration": (
                    '{"apiVersion":"v1","kind":"Node","metadata":{"labels":{"node-group":'
                    f'"h100","{RACK}":"{rack}"}},"name":"{name}"}}}}'
                ),
            },
        },
        "spec": {
            "podCIDR": f"10.{i // 256}.{i % 256}.0/24",
            "providerID": f"aws:///us-east-1a/i-{i:017x}",
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{i // 256}.{i % 256}"},
                {"type": "Hostname", "address": name},
            ],
            "allocatable": {
                "cpu": "191500m",
                "ephemeral-storage": "27013167738",
                "hugepages-1Gi": "0",
                "memory": "2002580Mi",
                "nvidia.com/gpu": "8",
                "pods": "110",
            },
            "capacity": {
                "cpu": "192",
                "ephemeral-storage": "29313260Ki",
                "memory": "2063428Mi",
                "nvidia.com/gpu": "8",
                "pods": "110",
            },
            "conditions": [
                {
                    "type": kind,
                    "status": "True" if kind == "Ready" else "False",
                    "lastHeartbeatTime": "2026-11-26T10:00:00Z",
                    "lastTransitionTime": "2026-11-01T10:00:00Z",
                    "reason": f"Kubelet{kind}",
                    "message": f"kubelet reports {kind}",
                }
                for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
            "images": [
                {
                    "names": [f"registry.example.com/team/image-{j}@sha256:{j:064x}"],
                    "sizeBytes": 1_000_000 * (j + 1),
                }
                for j in range(12)
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.1.0-27-cloud-amd64",
                "kubeletVersion": "v1.36.3",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "operatingSystem": "linux",
            },
        },
    }


def _pod(node: int, j: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"worker-{node}-{j}",
            "namespace": "research",
            "labels": {"app": "trainer", "batch.kubernetes.io/job-name": f"job-{node}"},
            "uid": f"7a7a{node:08x}-{j:04x}-4000-8000-000000000000",
        },
        "spec": {
            "nodeName": f"gpu-{node:05d}",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/team/trainer:2",
                    "args": ["--epochs", "10", "--data", "/data"],
                    "env": [{"name": f"VAR_{k}", "value": str(k)} for k in range(4)],
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1", "cpu": "40", "memory": "400Gi"},
                        "requests": {"nvidia.com/gpu": "1", "cpu": "40", "memory": "400Gi"},
                    },
                }
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
        "status": {"phase": "Running", "podIP": f"10.1.{node % 256}.{j}"},
    }


KUEUE = """apiVersion: kueue.x-k8s.io/v1beta1
kind: Topology
metadata: {name: datacenter}
spec:
  levels:
  - nodeLabel: cloud.example.com/topology-block
  - nodeLabel: cloud.example.com/topology-rack
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: h100}
spec:
  nodeLabels: {node-group: h100}
  topologyName: datacenter
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
"""

JOB = """apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: research}
spec:
  parallelism: 64
  template:
    metadata:
      annotations: {kueue.x-k8s.io/podset-required-topology: cloud.example.com/topology-block}
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: x
        resources: {limits: {nvidia.com/gpu: 4}}
"""


def write(directory: Path, nodes: int, pods_per_node: int) -> Path:
    items = [_node(i) for i in range(nodes)]
    items += [_pod(i, j) for i in range(nodes) for j in range(pods_per_node)]
    dump = yaml.dump(
        {"apiVersion": "v1", "kind": "List", "items": items},
        Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper),
        sort_keys=False,
    )
    path = directory / "cluster.yaml"
    path.write_text(dump, encoding="utf-8")
    (directory / "kueue.yaml").write_text(KUEUE, encoding="utf-8")
    (directory / "job.yaml").write_text(JOB, encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1152)
    parser.add_argument("--pods-per-node", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from topogate.files import documents

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        path = write(directory, args.nodes, args.pods_per_node)
        size = path.stat().st_size
        print(
            f"cluster file: {size / 1e6:.1f} MB, {args.nodes} nodes, "
            f"{args.nodes * args.pods_per_node} pods"
        )
        reads, read_cpu = [], []
        for _ in range(args.runs):
            start, cpu = time.perf_counter(), time.process_time()
            count = sum(1 for _ in documents(path))
            reads.append(time.perf_counter() - start)
            read_cpu.append(time.process_time() - cpu)
        print(
            f"read the YAML ({count} objects): {statistics.median(reads):.2f} s, "
            f"CPU {statistics.median(read_cpu):.2f} s (median of {args.runs})"
        )
        command = [
            sys.executable,
            "-m",
            "topogate",
            "plan",
            "--cluster",
            str(path),
            "--cluster",
            str(directory / "kueue.yaml"),
            "--workload",
            str(directory / "job.yaml"),
        ]
        plans, plan_cpu = [], []
        for _ in range(args.runs):
            start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            plans.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            plan_cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            if done.returncode not in (0, 1):
                raise SystemExit(f"plan failed ({done.returncode}): {done.stderr}")
        print(
            f"topogate plan, whole command: {statistics.median(plans):.2f} s, "
            f"CPU {statistics.median(plan_cpu):.2f} s (median of {args.runs}, "
            f"exit {done.returncode})"
        )


if __name__ == "__main__":
    main()
