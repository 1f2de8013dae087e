"""Which ``scheduling.k8s.io`` PodGroups the API server serves (`--native-gangs` of `serve`
and of the standalone `webhook`): discovered with a list of one, newest version first."""

from __future__ import annotations

import logging

from topogate.api.errors import InputError
from topogate.api.podgroups import GROUP, VERSIONS

from .errors import API_ERRORS, KubeError
from .protocol import KubeApi
from .resources import Resource

log = logging.getLogger("topogate.podgroups")


async def podgroup_version(kube: KubeApi, mode: str) -> str | None:
    """The ``scheduling.k8s.io`` version whose PodGroups topogate writes (`--native-gangs`):
    the newest one the API server serves (a list of one answers), or None when ``mode`` is
    off or, with auto, none is served; on without one is a usage error."""
    if mode == "off":
        return None
    refused: list[str] = []
    for version in VERSIONS:
        api_version = f"{GROUP}/{version}"
        try:
            await kube.list(Resource(api_version, "podgroups"), limit=1)
            return api_version
        except KubeError as error:
            refused.append(f"{api_version}: {error}")
        except API_ERRORS as error:
            refused.append(f"{api_version}: {type(error).__name__} {error}")
    if mode == "on":
        raise InputError(
            "the API server serves no PodGroups (" + "; ".join(refused) + "): on Kubernetes "
            "1.36 start it with --feature-gates=GenericWorkload=true,GangScheduling=true,"
            "TopologyAwareWorkloadScheduling=true and "
            "--runtime-config=scheduling.k8s.io/v1alpha2=true",
            field="--native-gangs",
        )
    log.info("native gangs off: the API server serves no PodGroups")
    return None
