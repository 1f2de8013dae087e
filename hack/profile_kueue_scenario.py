"""Run hack/bench_kueue_scenario.py with `serve` at a chosen client budget, optionally sampled
by py-spy (prints the bench's figures; writes py-spy's collapsed stacks). Not a test.

    .venv/bin/python hack/profile_kueue_scenario.py --qps 50 --burst 100 \
        [--py-spy OUT.raw] -- --cohorts 1

The bench starts `serve` at its defaults (QPS 300, burst 500); this passes --kube-api-qps and
--kube-api-burst to it instead (Kueue's benchmark controller runs at 50/100). With --py-spy
(`pip install py-spy`; it attaches to serve's process, so it needs ptrace rights) serve is
sampled at 50 Hz from its start to its end; `py-spy`'s raw format is one collapsed stack per
line with its count.

py-spy counts every sample in which serve's thread is not asleep, waiting for a core
included: on a loaded machine its shares are not CPU shares. With --cprofile OUT serve runs
under cProfile on CPU time instead (hack/cprofile_site/sitecustomize.py; the profiler about
doubles serve's CPU, so read shares, not seconds) and the collector is timed: this prints
serve's CPU by part and writes the profile to OUT (OUT.gc.json: the collector's figures).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_kueue_scenario as bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qps", type=float, required=True)
    parser.add_argument("--burst", type=int, required=True)
    parser.add_argument("--py-spy", type=Path, help="write serve's sampled stacks here")
    parser.add_argument("--cprofile", type=Path, help="profile serve on CPU time into this file")
    parser.add_argument("bench", nargs=argparse.REMAINDER, help="-- then the bench's arguments")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if args.py_spy is not None and not Path(spy).exists():
        parser.error("--py-spy: py-spy is not installed (pip install py-spy)")
    names = vars(bench)  # the bench's own name for serving(), replaced below
    real = names["serving"]

    @contextlib.contextmanager
    def serving(kubeconfig: Path, log: Path, extra: Any = (), **kw: Any) -> Iterator[Any]:
        budget = [f"--kube-api-qps={args.qps}", f"--kube-api-burst={args.burst}"]
        with real(kubeconfig, log, extra=[*extra, *budget], **kw) as proc:
            sampler = None
            if args.py_spy is not None:
                command = [spy, "record", "--pid", str(proc.pid), "--format", "raw"]
                command += ["--rate", "50", "--nonblocking", "-o", str(args.py_spy)]
                sampler = subprocess.Popen(command, stdout=subprocess.DEVNULL)
            try:
                yield proc
            finally:
                if sampler is not None:  # py-spy writes its file when interrupted
                    sampler.send_signal(signal.SIGINT)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        sampler.wait(30)

    names["serving"] = serving
    if args.cprofile is not None:
        # serve inherits the environment; its sitecustomize starts the profiler.
        site = str(Path(__file__).resolve().parent / "cprofile_site")
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (site, os.environ.get("PYTHONPATH")) if p
        )
        os.environ["TOPOGATE_CPROFILE"] = str(args.cprofile.resolve())
    sys.argv = [sys.argv[0], *[a for a in args.bench if a != "--"]]
    try:
        bench.main()
    finally:
        if args.cprofile is not None and args.cprofile.exists():
            print_parts(args.cprofile)


# serve's parts, by the function whose cumulative time is that part's (a part's share
# includes what it calls: they overlap where one part calls another, e.g. decide calls the
# cycle).
PARTS = {
    "admission cycle (core)": "admission/cycle.py:admission_cycle",
    "decide (cycle, translating, holding, pending words)": "controllers/admitter.py:decide",
    "translating changed Workloads": "state/waiting.py:sync",
    "admission writes": "controllers/admitter.py:_admit",
    "HTTP requests (client)": "kube/client.py:request",
    "watch events into the state": "kube/reflector.py:_apply",
    "classifying Workloads": "state/waiting.py:classify",
    "pending messages' writes": "controllers/pending.py:_write",
    "Events": "kube/events.py:_send_all",
}


def print_parts(path: Path) -> None:
    import json
    import pstats

    # (file, line, name) -> (calls, primitive calls, own time, cumulative time, callers)
    stats: dict[tuple[str, int, str], Any] = vars(pstats.Stats(str(path)))["stats"]
    total = sum(entry[2] for entry in stats.values())
    print(f"serve under cProfile (CPU time): {total:.1f} s")
    for part, where in PARTS.items():
        file, name = where.split(":")
        cumulative = max(
            (e[3] for (f, _, n), e in stats.items() if f.endswith(file) and n == name), default=0.0
        )
        print(f"  {part:55} {100 * cumulative / total:5.1f}%")
    imports = max((e[3] for (f, _, n), e in stats.items() if n == "_find_and_load"), default=0.0)
    print(f"  {'imports':55} {100 * imports / total:5.1f}%")
    collector = json.loads(Path(str(path) + ".gc.json").read_text())
    seconds = sum(g["seconds"] for g in collector["generations"].values())
    print(
        f"  the collector: {seconds:.2f} s of {collector['cpu']:.1f} s, {collector['generations']}"
    )


if __name__ == "__main__":
    main()
