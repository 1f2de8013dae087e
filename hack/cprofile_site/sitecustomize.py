"""Imported by every Python process that has this folder on PYTHONPATH (hack/
profile_kueue_scenario.py --cprofile puts it there for `serve` only to see): when the process
is `topogate serve` and TOPOGATE_CPROFILE names a file, profile it on CPU time
(``time.process_time``: py-spy's samples also count waiting for a core) and time the cyclic
collector, and write both at exit (the profile to the file, the collector's seconds per
generation to the file + ".gc.json")."""

from __future__ import annotations

import os
from pathlib import Path


def _start(out: str) -> None:
    import atexit
    import cProfile
    import gc
    import json
    import time
    from typing import Any

    profile = cProfile.Profile(time.process_time)
    collections = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    started = [0.0]

    def collector(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.process_time()
        else:
            entry = collections[info["generation"]]
            entry[0] += 1
            entry[1] += time.process_time() - started[0]

    def write() -> None:
        profile.disable()
        profile.dump_stats(out)
        gc_figures = {
            "cpu": time.process_time(),
            "generations": {
                str(g): {"collections": n, "seconds": s} for g, (n, s) in collections.items()
            },
        }
        Path(out + ".gc.json").write_text(json.dumps(gc_figures))

    gc.callbacks.append(collector)
    atexit.register(write)
    profile.enable()


def _is_serve() -> bool:
    words = Path("/proc/self/cmdline").read_bytes().split(b"\0")
    return b"topogate" in words and b"serve" in words


if os.environ.get("TOPOGATE_CPROFILE") and _is_serve():
    _start(os.environ["TOPOGATE_CPROFILE"])
