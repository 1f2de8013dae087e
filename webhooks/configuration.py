"""The Mutating- and ValidatingWebhookConfigurations, for a URL or an in-cluster Service.

Chosen so that an outage of the webhook server can never block kube-system: every webhook
skips the kube-system and topogate-system namespaces, and object selectors restrict each one
to the objects topogate owns (queued jobs, marked pods). Jobs use failurePolicy Fail, because
a queued job must never start unsuspended; the CRD validators are Fail too (only topogate's
own objects are affected).
"""

from __future__ import annotations

import base64
from typing import Any

from topogate.api import constants as c
from topogate.api.kinds import JOB_KINDS

PROTECTED_NAMESPACES = ["kube-system", "topogate-system"]
NAME = "topogate"


def _client_config(
    path: str, url: str | None, service: tuple[str, str] | None, ca_bundle: bytes | None
) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if url is not None:
        config["url"] = url.rstrip("/") + path
    elif service is not None:
        config["service"] = {"namespace": service[0], "name": service[1], "path": path, "port": 443}
    if ca_bundle:
        config["caBundle"] = base64.b64encode(ca_bundle).decode()
    return config


def _namespaces() -> dict[str, Any]:
    return {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": PROTECTED_NAMESPACES,
            }
        ]
    }


def _job_rules(operations: list[str]) -> list[dict[str, Any]]:
    """One rule per registered job kind (api/kinds)."""
    return [_rule([kind.group], [kind.plural], list(operations)) for kind in JOB_KINDS]


def _rule(groups: list[str], resources: list[str], operations: list[str]) -> dict[str, Any]:
    return {
        "apiGroups": groups,
        "apiVersions": ["*"],
        "resources": resources,
        "operations": operations,
        "scope": "*",
    }


def _webhook(
    name: str,
    path: str,
    rules: list[dict[str, Any]],
    selector: dict[str, Any] | None,
    namespaced: bool,
    policy: str,
    **where: Any,
) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": name,
        "clientConfig": _client_config(path, **where),
        "rules": rules,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "failurePolicy": policy,
        "matchPolicy": "Equivalent",
        "timeoutSeconds": 5,
    }
    if namespaced:
        hook["namespaceSelector"] = _namespaces()
    if selector is not None:
        hook["objectSelector"] = selector
    return hook


def _queued_selectors() -> list[tuple[str, dict[str, Any]]]:
    """(owner, objectSelector) per queue label key, the owner being the key's first word."""
    # One webhook per queue label key (selectors cannot OR two keys): named after the group.
    return [
        (
            label.split("/")[0].split(".")[0],
            {"matchExpressions": [{"key": label, "operator": "Exists"}]},
        )
        for label in c.QUEUE_LABELS
    ]


def _queue_label_owners() -> list[tuple[str, str]]:
    """(owner, label) per queue label key: ``kueue``, ``topogate``."""
    return [(label.split("/")[0].split(".")[0], label) for label in c.QUEUE_LABELS]


def _mutating_hooks(
    queued: list[tuple[str, dict[str, Any]]], where: dict[str, Any]
) -> list[dict[str, Any]]:
    """Queued jobs on creation, then the pods topogate marked."""
    jobs = _job_rules(["CREATE"])
    hooks = [
        _webhook(
            f"{owner}-queued-jobs.mutate.topogate.dev", "/mutate", jobs, sel, True, "Fail", **where
        )
        for owner, sel in queued
    ]
    # Pods marked by their job's template (a LeaderWorkerSet's too), then members of a plain
    # pod group. Called again when a later webhook changed the pod (LeaderWorkerSet's own
    # labels a leader's group index), so the marks follow what the pod finally says.
    pod_selectors = [("pod", c.PODSET_LABEL), ("pod-group", c.POD_GROUP_NAME)] + [
        (f"{owner}-queued-pod", label) for owner, label in _queue_label_owners()
    ]
    for name, label in pod_selectors:
        hook = _webhook(
            f"{name}.mutate.topogate.dev",
            "/mutate",
            [_rule([""], ["pods"], ["CREATE"])],
            {"matchExpressions": [{"key": label, "operator": "Exists"}]},
            True,
            "Fail",
            **where,
        )
        hook["reinvocationPolicy"] = "IfNeeded"
        hooks.append(hook)
    return hooks


def _validating_hooks(
    queued: list[tuple[str, dict[str, Any]]], where: dict[str, Any]
) -> list[dict[str, Any]]:
    """Queued jobs on creation and update, then the topology objects topogate reads."""
    job_updates = [
        *_job_rules(["CREATE", "UPDATE"]),
    ]
    hooks = [
        _webhook(
            f"{owner}-queued-jobs.validate.topogate.dev",
            "/validate",
            job_updates,
            sel,
            True,
            "Fail",
            **where,
        )
        for owner, sel in queued
    ]
    # A pod group's members and single queued pods: their own count and topology keys (the
    # group is read whole once all its pods exist).
    for name, label in [("pod-group", c.POD_GROUP_NAME)] + [
        (f"{owner}-queued-pod", label) for owner, label in _queue_label_owners()
    ]:
        hooks.append(
            _webhook(
                f"{name}.validate.topogate.dev",
                "/validate",
                [_rule([""], ["pods"], ["CREATE"])],
                {"matchExpressions": [{"key": label, "operator": "Exists"}]},
                True,
                "Fail",
                **where,
            )
        )
    hooks.append(
        _webhook(
            "objects.validate.topogate.dev",
            "/validate",
            [
                _rule(
                    [c.GROUP],
                    ["topologies", "resourceflavors", "clusterqueues"],
                    ["CREATE", "UPDATE"],
                ),
                _rule([c.KUEUE_GROUP], ["topologies", "resourceflavors"], ["CREATE", "UPDATE"]),
                _rule(["topology.volcano.sh"], ["hypernodes"], ["CREATE", "UPDATE"]),
            ],
            None,
            False,
            "Fail",
            **where,
        )
    )
    return hooks


def _configuration(kind: str, hooks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": NAME},
        "webhooks": hooks,
    }


def configurations(
    url: str | None = None, service: tuple[str, str] | None = None, ca_bundle: bytes | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(mutating, validating) configuration objects for a URL or a (namespace, name) Service."""
    where: dict[str, Any] = {"url": url, "service": service, "ca_bundle": ca_bundle}
    # Built once: both configurations share these selectors, so YAML dumps alias them alike.
    queued = _queued_selectors()
    mutating = _configuration("MutatingWebhookConfiguration", _mutating_hooks(queued, where))
    validating = _configuration("ValidatingWebhookConfiguration", _validating_hooks(queued, where))
    return mutating, validating
