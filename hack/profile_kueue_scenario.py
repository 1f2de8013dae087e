"""Run hack/bench_kueue_scenario.py with `serve` at a chosen client budget, optionally sampled
by py-spy (prints the bench's figures; writes py-spy's collapsed stacks). Not a test.

    .venv/bin/python hack/profile_kueue_scenario.py --qps 50 --burst 100 \
        [--py-spy OUT.raw] -- --cohorts 1

The bench starts `serve` at its defaults (QPS 300, burst 500); this passes --kube-api-qps and
--kube-api-burst to it instead (Kueue's benchmark controller runs at 50/100). With --py-spy
(`pip install py-spy`; it attaches to serve's process, so it needs ptrace rights) serve is
sampled at 50 Hz from its start to its end; `py-spy`'s raw format is one collapsed stack per
line with its count.
"""

from __future__ import annotations

import argparse
import contextlib
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
    sys.argv = [sys.argv[0], *[a for a in args.bench if a != "--"]]
    bench.main()


if __name__ == "__main__":
    main()
