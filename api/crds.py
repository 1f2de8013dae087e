"""CustomResourceDefinitions generated from the pydantic models (never written by hand).

``hack/gen_manifests.py`` writes them to config/crd/bases/; a test fails when the committed copy
drifts from what the models say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from .constants import GROUP, VERSION
from .models import ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Topology, Workload


@dataclass(frozen=True, slots=True)
class Kind:
    model: type[BaseModel]
    plural: str
    short_names: tuple[str, ...]
    namespaced: bool
    columns: tuple[tuple[str, str, str], ...] = ()  # (name, type, jsonPath)
    status: bool = True


KINDS = (
    Kind(Topology, "topologies", ("topo",), False, status=False),
    Kind(
        ResourceFlavor,
        "resourceflavors",
        ("rf", "flavor"),
        False,
        (("Topology", "string", ".spec.topologyName"),),
        status=False,
    ),
    Kind(
        ClusterQueue,
        "clusterqueues",
        ("cq",),
        False,
        (
            ("Strategy", "string", ".spec.queueingStrategy"),
            ("Pending", "integer", ".status.pendingWorkloads"),
            ("Admitted", "integer", ".status.admittedWorkloads"),
        ),
    ),
    Kind(
        Cohort,
        "cohorts",
        ("co",),
        False,
        (("Parent", "string", ".spec.parentName"),),
    ),
    Kind(
        LocalQueue,
        "localqueues",
        ("lq", "queue"),
        True,
        (("ClusterQueue", "string", ".spec.clusterQueue"),),
    ),
    Kind(
        Workload,
        "workloads",
        ("wl",),
        True,
        (
            ("Queue", "string", ".spec.queueName"),
            ("Admitted", "string", '.status.conditions[?(@.type=="Admitted")].status'),
            ("Message", "string", '.status.conditions[?(@.type=="QuotaReserved")].message'),
        ),
    ),
)

# propertyNames is not allowed in structural schemas; the webhook checks map keys instead.
_DROP = {"title", "default", "description", "propertyNames"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    """Pydantic's JSON schema as a Kubernetes structural schema (refs inlined, no nulls)."""
    if isinstance(node, list):
        return [_structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o != {"type": "null"}]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if node.get("x-kubernetes-int-or-string"):
            return _structural(rest, defs)
        if len(options) == 1:
            return _structural({**options[0], **rest}, defs)
        raise ValueError(f"cannot express anyOf {options} in a structural schema")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out[key] = {name: _structural(schema, defs) for name, schema in value.items()}
        elif key == "additionalProperties" and (value is True or value == {}):
            out["x-kubernetes-preserve-unknown-fields"] = True  # free-form (pod templates)
        elif key == "required":
            out[key] = value
        else:
            out[key] = _structural(value, defs)
    free_form = "properties" not in out and "additionalProperties" not in out
    if out.get("type") == "object" and free_form:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    properties = dict(raw["properties"])
    properties["apiVersion"] = {"type": "string"}
    properties["kind"] = {"type": "string"}
    raw["properties"] = properties
    structural: dict[str, Any] = _structural(raw, defs)
    # The API server owns metadata's schema; a CRD may only say it is an object.
    structural["properties"]["metadata"] = {"type": "object"}
    structural["required"] = [r for r in structural.get("required", []) if r != "metadata"]
    return structural


def crd(kind: Kind) -> dict[str, Any]:
    name = kind.model.__name__
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema(kind.model)},
    }
    if kind.status:
        version["subresources"] = {"status": {}}
    columns = [{"name": n, "type": t, "jsonPath": p} for n, t, p in kind.columns] + [
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    ]
    version["additionalPrinterColumns"] = columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": name,
                "listKind": f"{name}List",
                "plural": kind.plural,
                "singular": name.lower(),
                "shortNames": list(kind.short_names),
                "categories": ["topogate"],
            },
            "scope": "Namespaced" if kind.namespaced else "Cluster",
            "versions": [version],
        },
    }


def all_crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD document."""
    return {f"{GROUP}_{kind.plural}.yaml": crd(kind) for kind in KINDS}
