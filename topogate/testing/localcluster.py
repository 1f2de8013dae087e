"""Small helpers for a local cluster (the demo and the end-to-end tests): install topogate's
CRDs, create objects of the kinds the examples use, start and stop `topogate serve`.

Not part of the controller; synchronous wrappers over the JSON transport (plain dicts, so
example files go in as written).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from topogate.api.constants import KAI_GROUP
from topogate.api.crds import all_crds, schema
from topogate.api.kinds import JOBSET
from topogate.api.models import Topology
from topogate.kube.client import Kube
from topogate.kube.errors import KubeError
from topogate.kube.resources import Resource
from topogate.testing.controlplane import webhook_client_ca

Obj = dict[str, Any]

JOBSET_CRD: Obj = {
    # A permissive stand-in for JobSet's CRD, for what only stores JobSets (webhook tests,
    # benches); ControlPlane.start_jobset installs the release's own CRD with its controller.
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{JOBSET.plural}.{JOBSET.group}"},
    "spec": {
        "group": JOBSET.group,
        "names": {
            "kind": JOBSET.kind,
            "plural": JOBSET.plural,
            "singular": JOBSET.kind.lower(),
            "listKind": f"{JOBSET.kind}List",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": JOBSET.version,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def _object(properties: Obj, **extra: Any) -> Obj:
    return {"type": "object", "properties": properties, **extra}


_NAME: Obj = {"type": "string", "minLength": 1, "maxLength": 253}

HYPERNODE_CRD: Obj = {
    # Volcano's HyperNode (topology.volcano.sh/v1alpha1) in our own structural schema, for
    # clusters without Volcano and for the tests; topogate's webhook adds the checks that
    # need the other HyperNodes (cycles, one parent, tier order) or RE2.
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "hypernodes.topology.volcano.sh"},
    "spec": {
        "group": "topology.volcano.sh",
        "names": {
            "kind": "HyperNode",
            "plural": "hypernodes",
            "singular": "hypernode",
            "listKind": "HyperNodeList",
            "shortNames": ["hn"],
        },
        "scope": "Cluster",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Tier", "type": "string", "jsonPath": ".spec.tier"},
                    {"name": "TierName", "type": "string", "jsonPath": ".spec.tierName"},
                    {"name": "NodeCount", "type": "integer", "jsonPath": ".status.nodeCount"},
                ],
                "schema": {
                    "openAPIV3Schema": _object(
                        {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": _object(
                                {
                                    "tier": {"type": "integer", "minimum": 0},
                                    "tierName": {"type": "string", "maxLength": 253},
                                    "members": {
                                        "type": "array",
                                        "items": _object(
                                            {
                                                "type": {
                                                    "type": "string",
                                                    "enum": ["Node", "HyperNode"],
                                                },
                                                "selector": _object(
                                                    {
                                                        "exactMatch": _object({"name": _NAME}),
                                                        "regexMatch": _object(
                                                            {"pattern": {"type": "string"}}
                                                        ),
                                                        "labelMatch": {
                                                            "type": "object",
                                                            "x-kubernetes-preserve-unknown-fields": True,  # noqa: E501
                                                        },
                                                    }
                                                ),
                                            }
                                        ),
                                    },
                                },
                                required=["tier"],
                            ),
                            "status": _object(
                                {
                                    "nodeCount": {"type": "integer", "format": "int64"},
                                    "conditions": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True,
                                        },
                                    },
                                }
                            ),
                        },
                        required=["spec"],
                    )
                },
            }
        ],
    },
}

KAI_TOPOLOGY_CRD: Obj = {
    # KAI-Scheduler's Topology (kai.scheduler/v1alpha1), for clusters without KAI and for the
    # tests. Its spec is Kueue's, so the schema is our own Topology's (levels: 1 to 16 label
    # keys, unique, hostname only last), as KAI's CRD checks them.
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"topologies.{KAI_GROUP}"},
    "spec": {
        "group": KAI_GROUP,
        "names": {
            "kind": "Topology",
            "plural": "topologies",
            "singular": "topology",
            "listKind": "TopologyList",
        },
        "scope": "Cluster",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": schema(Topology)},
            }
        ],
    },
}


def _resource(obj: Obj) -> Resource:
    kind, version = str(obj["kind"]), str(obj["apiVersion"])
    lower = kind.lower()
    if lower.endswith("y"):
        plural = lower[:-1] + "ies"
    elif lower.endswith("s"):
        plural = lower + "es"  # PriorityClass -> priorityclasses
    else:
        plural = lower + "s"
    namespaced = kind not in CLUSTER_SCOPED
    return Resource(version, plural, namespaced)


CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "Node",
        "CustomResourceDefinition",
        "Topology",
        "ResourceFlavor",
        "ClusterQueue",
        "PriorityClass",
    }
)


async def _create_all(kubeconfig: Path, objs: Sequence[Obj]) -> list[Obj]:
    kube = await Kube.connect(str(kubeconfig), qps=None)  # tooling: as fast as it goes
    try:
        out = []
        for obj in objs:
            namespace = (obj.get("metadata") or {}).get("namespace")
            try:
                out.append(await kube.create(_resource(obj), obj, namespace))
            except KubeError as error:
                if not error.conflict:
                    raise
                out.append(obj)
        return out
    finally:
        await kube.close()


def create_all(kubeconfig: Path, objs: Iterable[Obj]) -> list[Obj]:
    """Create objects (namespaces first; what exists is left alone); returns what was made."""
    objs = list(objs)
    namespaces = sorted(
        {o["metadata"]["namespace"] for o in objs if (o.get("metadata") or {}).get("namespace")}
    )
    first = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in namespaces]
    return asyncio.run(_create_all(kubeconfig, first + objs))[len(first) :]


def create(kubeconfig: Path, obj: Obj) -> Obj:
    return create_all(kubeconfig, [obj])[0]


def install_crds(kubeconfig: Path, jobset: bool = True, kai: bool = False) -> None:
    """topogate's CRDs (and JobSet's, and with ``kai`` KAI-Scheduler's Topology), created or
    left as they are, and Established."""
    docs = list(all_crds().values()) + [HYPERNODE_CRD] + ([JOBSET_CRD] if jobset else [])
    docs += [KAI_TOPOLOGY_CRD] if kai else []
    create_all(kubeconfig, docs)
    crds = Resource("apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False)

    async def established() -> bool:
        kube = await Kube.connect(str(kubeconfig), qps=None)  # tooling: as fast as it goes
        try:
            for doc in docs:
                crd = await kube.get(crds, doc["metadata"]["name"])
                conditions = (crd.get("status") or {}).get("conditions") or []
                if not any(
                    c.get("type") == "Established" and c.get("status") == "True" for c in conditions
                ):
                    return False
            return True
        finally:
            await kube.close()

    deadline = time.monotonic() + 30
    while not asyncio.run(established()):
        if time.monotonic() > deadline:
            raise TimeoutError("CRDs not Established within 30 s")
        time.sleep(0.2)


@contextlib.contextmanager
def serving(
    kubeconfig: Path,
    log_path: Path,
    extra: Sequence[str] = (),
    webhook_dir: Path | None = None,
    webhook_port: int = 0,
    register_url: str | None = None,
    inject_ca: str | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """`topogate serve` as a child process (its own log), stopped on exit. Its webhooks are
    registered at ``register_url`` (default: its own port), or with ``inject_ca`` only its CA
    is put into the existing configurations of that name (as in a cluster)."""
    argv = [
        sys.executable,
        "-m",
        "topogate",
        "serve",
        f"--kubeconfig={kubeconfig}",
        "--ops-port=0",
        "--metrics-port=0",
        "--leader-namespace=kube-system",
        *extra,
    ]
    if webhook_dir is not None:
        argv += [
            f"--webhook-cert-dir={webhook_dir}",
            "--webhook-host=127.0.0.1",
            f"--webhook-port={webhook_port}",
        ]
        client_ca = webhook_client_ca(kubeconfig)
        if client_ca is not None:  # the API server presents its certificate: require it
            argv += [f"--webhook-client-ca={client_ca}", "--webhook-require-client-cert"]
        if inject_ca is not None:
            argv.append(f"--webhook-inject-ca={inject_ca}")
        else:
            argv.append(
                f"--webhook-register-url={register_url or f'https://127.0.0.1:{webhook_port}'}"
            )
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes], kill: bool = False) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)
