"""topogate: topology-aware admission for gang-scheduled Kubernetes training jobs."""

__version__ = "0.1.0"
