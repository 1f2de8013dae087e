"""The CPU of serve's per-admission INFO line: ``log.info("admitted %s: %s", ...)`` through the
root logger configured as serve did (``logging.basicConfig``) and as it does now
(``topogate.runtime.logs.configure``), writing to a file (as serve's stderr into a log).

    .venv/bin/python hack/bench_logging.py [--lines 50000] [--rounds 3]

Each configuration runs in a process of its own (the logging module's switches are global);
prints the CPU per line, best of the rounds, and checks both wrote the same text but for the
time stamps' digits.
"""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LINE = (
    "ns-3/job-w-1234-5c9a2",
    "flavor default in ClusterQueue cq-3-17; 1 pod set: main 1 pod",
)


def _child(how: str, lines: int, rounds: int) -> None:
    if how == "basicConfig":
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    else:
        from topogate.runtime.logs import configure

        configure(logging.INFO)
    log = logging.getLogger("topogate.admitter")
    best = float("inf")
    for _ in range(rounds):
        began = time.process_time()
        for _ in range(lines):
            log.info("admitted %s: %s", *LINE)
        best = min(best, (time.process_time() - began) / lines)
    print(f"{best * 1e6:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=50000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.lines, args.rounds)
        return
    texts = {}
    with tempfile.TemporaryDirectory() as directory:
        for how in ("basicConfig", "configure"):
            log = Path(directory) / f"{how}.log"
            with log.open("w") as stderr:
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        how,
                        *("--lines", str(args.lines)),
                        *("--rounds", str(args.rounds)),
                    ],
                    stderr=stderr,
                    stdout=subprocess.PIPE,
                    text=True,
                    check=True,
                ).stdout
            print(f"{how:12s}: {float(out):6.2f} us CPU per line, best of {args.rounds}")
            texts[how] = re.sub(r"\d", "0", log.read_text())
    if texts["basicConfig"] != texts["configure"]:
        raise SystemExit("the two configurations wrote different lines")
    print("same lines (time stamps aside)")


if __name__ == "__main__":
    main()
