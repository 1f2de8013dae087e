"""The commands people run: ``plan``, ``topology``, ``status``, ``gpu import``, ``webhook``,
and the loading of cluster files they share. ``serve`` lives in ``topogate.runtime``."""
